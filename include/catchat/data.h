/* Token data (docs/formats.md): raw text through the byte tokenizer, or `.bin`
 * shards (256 int32 header: magic 20240520, version 1, token count; then
 * uint16 tokens). [data] format = auto tells them apart by the magic number;
 * a file named *.bin without it, or one that starts like a shard header with
 * a wrong magic, is refused rather than read as text. So is a file that looks
 * binary (a NUL byte, or most bytes not UTF-8 text) unless the format is
 * text, which reads it with a warning. */
#ifndef CATCHAT_DATA_H
#define CATCHAT_DATA_H

#include <stddef.h>
#include <stdint.h>

#define CC_SHARD_MAGIC 20240520
#define CC_SHARD_VERSION 1
#define CC_SHARD_HEADER_INTS 256
/* The tokenizer a shard's ids come from, in header ints the layout leaves
 * reserved (so other C trainers read the shard as before): int 3 holds this
 * mark, int 4 the tokenizer's token count, ints 5 and 6 the low and high
 * halves of its fingerprint (cc_vocab_fingerprint). scripts/prepare.py
 * writes them; a shard without the mark was made elsewhere: its tokenizer is
 * unknown. */
#define CC_SHARD_TOKENIZER_MARK 0x4b544343u /* "CCTK" */

/* One file of a dataset: its tokens where they lie, a shard's mapped
 * read-only (uint16 little-endian, the memory layout of every GPU host), a
 * text file's mapped too (one byte a token), so neither is copied and ranks
 * on one node share the pages. */
typedef struct cc_token_file {
    const uint8_t *bytes; /* the first token */
    int width;            /* bytes a token: 2 (a shard) or 1 (text) */
    size_t n;             /* tokens */
    size_t offset;        /* of the first token in the file, for messages: 1024 (a shard) or 0 */
    void *map;            /* the mapping (munmap'd by cc_tokens_free), or NULL */
    size_t map_len;
    uint8_t *owned;       /* a copy, for bytes given in memory (cc_tokens_from_bytes) */
    char *path;
} cc_token_file;

typedef struct cc_tokens {
    size_t n;
    int is_shard;
    /* The tokenizer its ids come from (cc_vocab_fingerprint; text: the byte
     * tokenizer's; 0: unknown, a shard made elsewhere), and for a shard
     * that names one, its token count. Every file of a dataset has the same. */
    uint64_t tokenizer_id;
    int tokenizer_size;
    /* Ids must be below it. A shard's are checked where they are read (each
     * batch's windows: cc_loader_batch_part), so loading does not pass over
     * every token; a text file's bytes, read anyway for the binary-file
     * rule, at load. cc_tokens_check passes over all of them. */
    int vocab_size;
    char path[1024];
    /* Several files read as one dataset: file i's tokens end at file_end[i]
     * (nfiles = 1 for a single file; windows never cross a file's end). */
    int nfiles;
    size_t *file_end;
    cc_token_file *files;
} cc_tokens;

/* Token k of one file, as stored (not checked). */
static inline uint32_t cc_token_file_at(const cc_token_file *f, size_t k)
{
    const uint8_t *p = f->bytes + k * (size_t)f->width;
    return f->width == 2 ? (uint32_t)p[0] | (uint32_t)p[1] << 8 : p[0];
}
/* The one-line error for token k of file f, whose id is not below vocab_size: -1. */
int cc_tokens_bad_id(const cc_tokens *t, int f, size_t k, uint32_t id);
/* Token i of the dataset (0 <= i < n), as stored (not checked). */
uint32_t cc_tokens_at(const cc_tokens *t, size_t i);
/* Every id below vocab_size: 0, or -1 (said: the file, the token's index and
 * byte offset, the id). What a batch checks of its windows, for all. */
int cc_tokens_check(const cc_tokens *t);

/* The data files a [data] train or val value names: a path, a glob
 * (data/shards/train_*.bin, in sorted order) or a comma-separated list of
 * either (in that order). *files is malloc'd (free with cc_data_files_free);
 * a pattern that matches nothing is an error naming it. */
int cc_data_files(const char *spec, char ***files, int *n);
void cc_data_files_free(char **files, int n);

/* Say where the value `spec` came from ("[data] train = x.txt in a.ini:3,
 * resolved against configs (the config's folder)"; cc_config_path_origin):
 * the errors for a file of it that cannot be opened, or a pattern of it that
 * matches nothing, then name it. Kept for the process; a later note for the
 * same spec replaces it. */
void cc_data_note_origin(const char *spec, const char *origin);

/* Load a file (or every file of a glob or list, one dataset in that order,
 * each by the same rules) as `format` (auto, text or shard): its header
 * checked and the file mapped, not read (ids are checked where a batch reads
 * them; a text file's bytes at load). One-line errors name the file. */
int cc_tokens_load_as(cc_tokens *t, const char *path, int vocab_size, const char *format);
/* The same with format auto. */
int cc_tokens_load(cc_tokens *t, const char *path, int vocab_size);
void cc_tokens_free(cc_tokens *t);
/* A token stream's identity, kept in checkpoints: an XXH3 of its tokenizer's
 * identity and, file by file, of the token count and the tokens as uint16:
 * all of a file of up to 128 Ki tokens, else 64 pieces of 2048 spread over
 * it (the first at its start, the last at its end), so it costs no pass over
 * a large dataset; where the files lie does not matter. Never 0, which
 * means unknown. */
uint64_t cc_tokens_digest(const cc_tokens *t);
/* The digest of catchat before the sampled one (checkpoint key data_digest):
 * an XXH3 of every token as uint16, the files one after another. One pass
 * over the data: for resuming such a checkpoint only. */
uint64_t cc_tokens_digest_all(const cc_tokens *t);
/* The same for bytes already in memory; `name` stands for the path in errors. */
int cc_tokens_from_bytes_as(cc_tokens *t, const uint8_t *buf, size_t len, const char *name, int vocab_size,
                            const char *format);
int cc_tokens_from_bytes(cc_tokens *t, const uint8_t *buf, size_t len, const char *name, int vocab_size);

/* Batches of B windows of T+1 tokens (x = first T, y = last T). Window k
 * starts at token k·T of its file (the windows of the next file follow; a
 * file's last partial window is dropped). Training visits the windows in an
 * order shuffled per epoch from the seed; the batch is a pure function of
 * (seed, position), so a resumed run sees exactly the data the straight run
 * would. The order is a keyed permutation of the window indices computed
 * where it is needed (a Feistel network on the index, walked until it lands
 * inside the range), so no array grows with the data; CC_ORDER_SHUFFLED_ARRAY
 * is the Fisher-Yates array of catchat before it, for resuming such runs. */
#define CC_ORDER_FEISTEL 1
#define CC_ORDER_SHUFFLED_ARRAY 0
typedef struct cc_loader {
    const cc_tokens *src;
    int B, T;
    size_t nwin;
    int shuffle;
    int order;        /* CC_ORDER_FEISTEL, or CC_ORDER_SHUFFLED_ARRAY (an earlier run's) */
    int half;         /* CC_ORDER_FEISTEL: bits of each half of the index (4^half >= nwin) */
    uint64_t seed;
    long perm_epoch;  /* CC_ORDER_SHUFFLED_ARRAY: the epoch whose permutation is in perm, -1 none */
    uint32_t *perm;
    size_t *win_end;  /* windows before the end of each file (nfiles of them) */
} cc_loader;

int cc_loader_init(cc_loader *ld, const cc_tokens *src, int B, int T, int shuffle, uint64_t seed);
/* The order of windows a resumed run goes on with (its checkpoint's). */
void cc_loader_set_order(cc_loader *ld, int order);
void cc_loader_free(cc_loader *ld);
/* Fill x[B,T], y[B,T] with batch number `index` (0, 1, 2, ...). -1 (said:
 * the file, the token's index and byte offset, the id) when an id is not
 * below the dataset's vocab_size (it is given as 0); else 0. */
int cc_loader_batch(cc_loader *ld, uint64_t index, int *x, int *y);
/* Data parallelism: global batch `index` has nparts·B windows; fill this
 * rank's part (windows part·B .. part·B+B-1 of it). nparts = 1 is cc_loader_batch. */
int cc_loader_batch_part(cc_loader *ld, uint64_t index, int part, int nparts, int *x, int *y);

/* Refuse a train/val pair that share a file (they must never overlap). */
int cc_data_check_split(const char *train, const char *val);

#endif
