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
void cc_vocab_free(cc_vocab *v);
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

#endif
