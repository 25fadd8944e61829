/* What a run's token ids mean (docs/formats.md, "Tokenizers"): the identity
 * of the tokenizer that made them, read from the data, kept in every
 * checkpoint together with the tokenizer itself, and checked wherever ids
 * from two places meet: train and val, a resumed or initialising checkpoint
 * and the data, eval's data and the model, sample's --vocab and the model. */
#ifndef CATCHAT_TOKENIZER_H
#define CATCHAT_TOKENIZER_H

#include <stdint.h>
#include "catchat/bpe.h"
#include "catchat/config.h"
#include "catchat/data.h"
#include "catchat/vocab.h"

typedef struct cc_tokenizer {
    uint64_t id;    /* cc_vocab_fingerprint of its tokens; 0: unknown (shards made elsewhere) */
    cc_vocab vocab; /* its tokens; n = 0: not known, or the byte tokenizer (which needs none) */
    cc_bpe *bpe;    /* its merges for encoding text; NULL: none known */
    char *json;     /* the tokenizer.json text bpe was read from, for checkpoints */
} cc_tokenizer;

void cc_tokenizer_free(cc_tokenizer *t);
/* Whether ids are bytes: the byte tokenizer, or none known beside them. */
int cc_tokenizer_is_bytes(const cc_tokenizer *t);

/* A run's tokenizer, from its data: train and val must share one identity
 * (refused in one line otherwise). The .vocab and .tokenizer.json that
 * scripts/prepare.py wrote beside the shards come with it; a .vocab that is
 * not the shards' tokenizer is refused, as a prefix of mixed files. With
 * `say`, a line on stdout tells what the run's checkpoints will carry when
 * it is less than the whole tokenizer. */
int cc_tokenizer_for_run(cc_tokenizer *t, const cc_config *cfg, const cc_tokens *train, const cc_tokens *val,
                         int say);

/* The tokenizer a checkpoint carries: 1 when it has one, 0 when it predates
 * them (no "tokenizer" metadata: t is empty, id unknown), -1 on error (said:
 * a tokenizer_vocab that is not the tokenizer named). With `say`, a note
 * tells why a tokenizer_json it carries cannot encode prompts. */
int cc_tokenizer_from_checkpoint(cc_tokenizer *t, const char *path, int say);
/* The merges of the PREFIX.tokenizer.json beside a run's data (a checkpoint
 * of an earlier catchat, which carries no tokenizer), when they are t's
 * vocabulary's: 0, or -1 (said) when the file cannot be read. */
int cc_tokenizer_merges_beside_data(cc_tokenizer *t, const char *data, int say);

/* A checkpoint's tokens against another source's: refused in one line when
 * both identities are known and differ, a note when one is unknown. `what`
 * names the other source (a data path), `ckpt_role` the checkpoint's role
 * ("--resume"). */
int cc_tokenizer_check_checkpoint(const char *ckpt, const char *ckpt_role, uint64_t other, const char *what);

/* Text (NUL-terminated) to ids (*ids malloc'd): the byte tokenizer's bytes,
 * the BPE's merges, else the greedy longest match over the vocabulary.
 * -1 (said) for text no token covers, or not UTF-8 for a BPE. */
int cc_tokenizer_encode(const cc_tokenizer *t, const char *text, int **ids, int *n);

/* The checkpoint metadata that carries t: up to 3 keys ("tokenizer",
 * "tokenizer_vocab", "tokenizer_json") and values; *owned (free it) holds
 * what was made for them. Returns the count. */
int cc_tokenizer_meta(const cc_tokenizer *t, const char **keys, const char **vals, char **owned);

#endif
