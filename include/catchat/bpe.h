/* A byte-level BPE's encoder (GPT-2's scheme, as Hugging Face `tokenizers`
 * writes it in tokenizer.json): text is split into words by GPT-2's pattern,
 * each word's bytes start as one token a byte, and the listed merges are
 * applied lowest rank first. So `catchat sample` encodes a prompt into the
 * ids the tokenizer itself gives, not a greedy approximation. */
#ifndef CATCHAT_BPE_H
#define CATCHAT_BPE_H

#include <stddef.h>
#include "catchat/vocab.h"

typedef struct cc_bpe cc_bpe;

/* The merges of a tokenizer.json's text (`name` stands for it in errors).
 * Its tokens must be those of `vocab` (the .vocab prepare.py wrote with it):
 * the encoder returns ids of that vocabulary, which must outlive it. NULL,
 * with the reason in why, for a file that is not JSON or not a byte-level
 * BPE (another model type, a normalizer, another pre-tokenizer). */
cc_bpe *cc_bpe_parse(const char *json_text, size_t len, const cc_vocab *vocab, char *why, size_t why_cap);
void cc_bpe_free(cc_bpe *b);

/* The ids of text (len bytes, UTF-8) into *ids (malloc'd), their count in
 * *n. -1 (said) for text that is not UTF-8. */
int cc_bpe_encode(const cc_bpe *b, const char *text, size_t len, int **ids, int *n);

#endif
