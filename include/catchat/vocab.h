/* A token vocabulary for decoding generated ids (written by scripts/prepare.py:
 * one line per id, the token's bytes in hex). */
#ifndef CATCHAT_VOCAB_H
#define CATCHAT_VOCAB_H

#include <stddef.h>
#include <stdint.h>

typedef struct cc_vocab {
    int n;
    uint8_t **bytes;
    int *len;
} cc_vocab;

/* One-line errors name the file and line. */
int cc_vocab_load(cc_vocab *v, const char *path);
/* The same from text in memory (a checkpoint's copy); `name` stands for the file in errors. */
int cc_vocab_parse(cc_vocab *v, const char *text, size_t len, const char *name);
void cc_vocab_free(cc_vocab *v);
/* The vocabulary as a .vocab file's text (malloc'd). */
char *cc_vocab_text(const cc_vocab *v);
/* The byte tokenizer's vocabulary: 256 tokens, id = byte value. */
void cc_vocab_bytes(cc_vocab *v);
/* A tokenizer's identity (docs/formats.md): XXH64 (seed 0) over every token
 * in id order, each as its byte count (uint32, little-endian) and its bytes.
 * Two vocabularies with one fingerprint decode every id alike. Never 0,
 * which stands for "unknown". scripts/prepare.py writes the same number into
 * its shards' headers. */
uint64_t cc_vocab_fingerprint(const cc_vocab *v);
/* The byte tokenizer's fingerprint: raw text's identity. */
uint64_t cc_vocab_bytes_id(void);
/* An identity for messages: "the byte tokenizer", "an unknown tokenizer"
 * for 0, else "tokenizer <16 hex digits>". */
const char *cc_tokenizer_describe(uint64_t id, char *buf, size_t cap);
/* Encode text by greedy longest match over the vocabulary (an approximation
 * of BPE merges; exact ids can be given with --prompt-ids). Returns the count
 * written to ids (at most cap), -1 if some byte has no token. */
int cc_vocab_encode(const cc_vocab *v, const char *text, int *ids, int cap);
/* The vocabulary scripts/prepare.py writes beside token shards: for a [data]
 * train or val value (a file, a glob or a comma-separated list) whose first
 * entry is PREFIX_train_*.bin or PREFIX_val_*.bin (any .bin with _train or
 * _val before its suffix), PREFIX.vocab into out. Returns 1 when that file
 * exists, 0 when it does not (out holds the path looked for) or when the
 * value names no such shards (out is empty). */
int cc_vocab_beside_data(const char *data, char *out, size_t cap);
/* The same for any file prepare.py writes beside the shards: PREFIX + suffix
 * (".vocab", ".tokenizer.json"). */
int cc_file_beside_data(const char *data, const char *suffix, char *out, size_t cap);

#endif
