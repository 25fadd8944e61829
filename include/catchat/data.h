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

typedef struct cc_tokens {
    uint16_t *tok;
    size_t n;
    int is_shard;
    /* The tokenizer its ids come from (cc_vocab_fingerprint; text: the byte
     * tokenizer's; 0: unknown, a shard made elsewhere), and for a shard
     * that names one, its token count. Every file of a dataset has the same. */
    uint64_t tokenizer_id;
    int tokenizer_size;
    char path[1024];
    /* Several files read as one dataset: file i's tokens end at file_end[i]
     * (nfiles = 1 for a single file; windows never cross a file's end). */
    int nfiles;
    size_t *file_end;
} cc_tokens;

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

/* Load a file (or every file of a glob or list, concatenated in order, each
 * by the same rules) as `format` (auto, text or shard); every id must be <
 * vocab_size. One-line errors name the file. */
int cc_tokens_load_as(cc_tokens *t, const char *path, int vocab_size, const char *format);
/* The same with format auto. */
int cc_tokens_load(cc_tokens *t, const char *path, int vocab_size);
void cc_tokens_free(cc_tokens *t);
/* A token stream's identity, kept in checkpoints: an XXH3 of its tokens in
 * order (where the files lie does not matter); never 0, which means unknown. */
uint64_t cc_tokens_digest(const cc_tokens *t);
/* The same for bytes already in memory; `name` stands for the path in errors. */
int cc_tokens_from_bytes_as(cc_tokens *t, const uint8_t *buf, size_t len, const char *name, int vocab_size,
                            const char *format);
int cc_tokens_from_bytes(cc_tokens *t, const uint8_t *buf, size_t len, const char *name, int vocab_size);

/* Batches of B windows of T+1 tokens (x = first T, y = last T). Window k
 * starts at token k·T of its file (the windows of the next file follow; a
 * file's last partial window is dropped). Training visits the windows in an order shuffled per
 * epoch from the seed; the batch is a pure function of (seed, position), so a
 * resumed run sees exactly the data the straight run would. */
typedef struct cc_loader {
    const cc_tokens *src;
    int B, T;
    size_t nwin;
    int shuffle;
    uint64_t seed;
    long perm_epoch;  /* epoch whose permutation is in perm, -1 none */
    uint32_t *perm;
    size_t *win_end;  /* windows before the end of each file (nfiles of them) */
} cc_loader;

int cc_loader_init(cc_loader *ld, const cc_tokens *src, int B, int T, int shuffle, uint64_t seed);
void cc_loader_free(cc_loader *ld);
/* Fill x[B,T], y[B,T] with batch number `index` (0, 1, 2, ...). */
void cc_loader_batch(cc_loader *ld, uint64_t index, int *x, int *y);
/* Data parallelism: global batch `index` has nparts·B windows; fill this
 * rank's part (windows part·B .. part·B+B-1 of it). nparts = 1 is cc_loader_batch. */
void cc_loader_batch_part(cc_loader *ld, uint64_t index, int part, int nparts, int *x, int *y);

/* Refuse a train/val pair that share a file (they must never overlap). */
int cc_data_check_split(const char *train, const char *val);

#endif
