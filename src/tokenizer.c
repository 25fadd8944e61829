/* A run's tokenizer: its identity, what checkpoints carry of it, and the
 * checks where ids from two places meet (include/catchat/tokenizer.h). */
#define _POSIX_C_SOURCE 200809L
#include "catchat/tokenizer.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "catchat/safetensors.h"
#include "catchat/util.h"

void cc_tokenizer_free(cc_tokenizer *t)
{
    cc_bpe_free(t->bpe);
    if (t->vocab.n) cc_vocab_free(&t->vocab);
    free(t->json);
    memset(t, 0, sizeof(*t));
}

int cc_tokenizer_is_bytes(const cc_tokenizer *t) { return t->vocab.n == 0; }

/* The merges of a tokenizer.json's text, when they are t's vocabulary's: a
 * tokenizer.json of another kind, or another tokenizer's, is left out (the
 * prompt is then matched greedily), and `say` says why. */
static void take_json(cc_tokenizer *t, char *text, size_t len, const char *name, int say)
{
    char why[160];
    cc_bpe *b = cc_bpe_parse(text, len, &t->vocab, why, sizeof(why));
    if (!b) {
        if (say) fprintf(stderr, "catchat: note: %s is not used to encode prompts: %s\n", name, why);
        free(text);
        return;
    }
    t->bpe = b;
    t->json = text;
}

int cc_tokenizer_for_run(cc_tokenizer *t, const cc_config *cfg, const cc_tokens *train, const cc_tokens *val, int say)
{
    memset(t, 0, sizeof(*t));
    char a[96], b[96];
    if (train->tokenizer_id != val->tokenizer_id)
        return cc_error("[data] train (%s) holds ids of %s, [data] val (%s) of %s: a run takes one tokenizer's "
                        "ids", train->path, cc_tokenizer_describe(train->tokenizer_id, a, sizeof(a)),
                        val->path, cc_tokenizer_describe(val->tokenizer_id, b, sizeof(b)));
    t->id = train->tokenizer_id;
    if (t->id == cc_vocab_bytes_id()) return 0;
    /* the files prepare.py wrote beside the shards, train's first */
    const char *spec = cfg->train;
    char path[CC_PATH_MAX];
    if (!cc_vocab_beside_data(spec, path, sizeof(path)) && !cc_vocab_beside_data(spec = cfg->val, path, sizeof(path))) {
        if (say && t->id)
            fprintf(stderr, "catchat: note: no .vocab beside the shards: checkpoints will carry %s's identity but "
                            "not its tokens (sample then needs --vocab)\n", cc_tokenizer_describe(t->id, a, sizeof(a)));
        return 0;
    }
    if (cc_vocab_load(&t->vocab, path) != 0) return -1;
    const uint64_t fp = cc_vocab_fingerprint(&t->vocab);
    if (t->id && fp != t->id) {
        cc_vocab_free(&t->vocab);
        return cc_error("%s is not the tokenizer of the shards beside it (they hold ids of %s, it is %s): remake "
                        "them together with scripts/prepare.py --replace", path, cc_tokenizer_describe(t->id, a, sizeof(a)),
                        cc_tokenizer_describe(fp, b, sizeof(b)));
    }
    if (!t->id && t->vocab.n > cfg->vocab_size) { /* unknown shards: a vocabulary that cannot be theirs */
        if (say)
            fprintf(stderr, "catchat: note: %s has %d tokens, more than vocab_size %d: not the shards' vocabulary, "
                            "not kept\n", path, t->vocab.n, cfg->vocab_size);
        cc_vocab_free(&t->vocab);
        return 0;
    }
    if (cc_tokenizer_merges_beside_data(t, spec, say) != 0) {
        cc_tokenizer_free(t);
        return -1;
    }
    return 0;
}

int cc_tokenizer_merges_beside_data(cc_tokenizer *t, const char *data, int say)
{
    char path[CC_PATH_MAX];
    if (!t->vocab.n || !cc_file_beside_data(data, ".tokenizer.json", path, sizeof(path))) return 0;
    size_t len;
    char *text = (char *)cc_read_file_what(path, "tokenizer", &len);
    if (!text) return -1;
    take_json(t, text, len, path, say);
    return 0;
}

/* A checkpoint's stored identity: "bytes", "unknown" or 16 hex digits; -1
 * (said, naming the file) for anything else. */
static int parse_id(const char *path, const char *s, uint64_t *id)
{
    char *end;
    if (strcmp(s, "bytes") == 0) *id = cc_vocab_bytes_id();
    else if (strcmp(s, "unknown") == 0) *id = 0;
    else if (strlen(s) != 16 || strspn(s, "0123456789abcdef") != 16 || (*id = strtoull(s, &end, 16)) == 0)
        return cc_error("%s: metadata 'tokenizer' = '%.40s' is not bytes, unknown or 16 hex digits", path, s);
    return 0;
}

int cc_tokenizer_from_checkpoint(cc_tokenizer *t, const char *path, int say)
{
    memset(t, 0, sizeof(*t));
    cc_st_file f;
    if (cc_st_open_meta(&f, path) != 0) return -1;
    const char *id = cc_st_meta(&f, "tokenizer"), *vocab = cc_st_meta(&f, "tokenizer_vocab"),
               *json = cc_st_meta(&f, "tokenizer_json");
    int rc = id ? 1 : 0;
    char name[CC_PATH_MAX + 32];
    snprintf(name, sizeof(name), "%s (its tokenizer_vocab)", path);
    if (id && parse_id(path, id, &t->id) != 0) rc = -1;
    else if (id && vocab && cc_vocab_parse(&t->vocab, vocab, strlen(vocab), name) != 0) rc = -1;
    else if (id && vocab && t->id && cc_vocab_fingerprint(&t->vocab) != t->id)
        rc = cc_error("%s: its tokenizer_vocab is not the tokenizer its metadata names (%.16s): the file is "
                      "damaged", path, id);
    else if (id && vocab && json) {
        const size_t len = strlen(json);
        char *copy = cc_malloc(len + 1);
        memcpy(copy, json, len + 1);
        snprintf(name, sizeof(name), "%s (its tokenizer_json)", path);
        take_json(t, copy, len, name, say);
    }
    cc_st_close(&f);
    if (rc < 0) cc_tokenizer_free(t);
    return rc;
}

int cc_tokenizer_check_checkpoint(const char *ckpt, const char *ckpt_role, uint64_t other, const char *what)
{
    /* the identity alone: its vocabulary and merges are not parsed to be compared */
    cc_st_file f;
    if (cc_st_open_meta(&f, ckpt) != 0) return -1;
    const char *stored = cc_st_meta(&f, "tokenizer");
    const int has = stored != NULL;
    uint64_t mine = 0;
    const int bad = has && parse_id(ckpt, stored, &mine) != 0;
    cc_st_close(&f);
    if (bad) return -1;
    char a[96], b[96];
    if (has && (!mine) != (!other)) /* one side made elsewhere: nothing to compare, and said so */
        fprintf(stderr, "catchat: note: %s holds ids of %s; the model of %s was trained on %s: cannot tell "
                        "whether they match\n", what, cc_tokenizer_describe(other, b, sizeof(b)), ckpt,
                cc_tokenizer_describe(mine, a, sizeof(a)));
    if (!has || !mine || !other || mine == other) return 0;
    return cc_error("%s: ids of %s, but the model of %s %s was trained on ids of %s (data made with the "
                    "model's tokenizer: scripts/prepare.py --tokenizer with its tokenizer.json)", what,
                    cc_tokenizer_describe(other, b, sizeof(b)), ckpt_role, ckpt, cc_tokenizer_describe(mine, a, sizeof(a)));
}

int cc_tokenizer_encode(const cc_tokenizer *t, const char *text, int **ids, int *n)
{
    const size_t len = strlen(text);
    if (t->bpe) return cc_bpe_encode(t->bpe, text, len, ids, n);
    *ids = cc_malloc(sizeof(int) * (len ? len : 1));
    if (cc_tokenizer_is_bytes(t)) {
        for (size_t i = 0; i < len; i++) (*ids)[i] = (unsigned char)text[i];
        *n = (int)len;
        return 0;
    }
    if ((*n = cc_vocab_encode(&t->vocab, text, *ids, (int)len)) < 0) {
        free(*ids);
        *ids = NULL;
        return cc_error("the prompt has bytes no token of the vocabulary covers; use --prompt-ids");
    }
    return 0;
}

int cc_tokenizer_meta(const cc_tokenizer *t, const char **keys, const char **vals, char **owned)
{
    owned[0] = cc_malloc(20);
    if (t->id == cc_vocab_bytes_id()) snprintf(owned[0], 20, "bytes");
    else if (!t->id) snprintf(owned[0], 20, "unknown");
    else snprintf(owned[0], 20, "%016" PRIx64, t->id);
    owned[1] = t->vocab.n ? cc_vocab_text(&t->vocab) : NULL;
    int n = 0;
    keys[n] = "tokenizer";
    vals[n++] = owned[0];
    if (owned[1]) {
        keys[n] = "tokenizer_vocab";
        vals[n++] = owned[1];
    }
    if (owned[1] && t->json) {
        keys[n] = "tokenizer_json";
        vals[n++] = t->json;
    }
    return n;
}
