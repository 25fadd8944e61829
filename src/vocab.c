/* Token vocabularies for `catchat sample --vocab`. */
#define _POSIX_C_SOURCE 200809L
#include "catchat/vocab.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "catchat/text_escape.h"
#include "catchat/util.h"

static int hexval(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A line that is not a token's hex digits: most often another file given as
 * --vocab (the training text, a tokenizer.json), so the error says what a
 * vocabulary file is beside what is wrong, and quotes the line's start
 * with its control bytes escaped (it is any file's bytes). */
static int not_a_vocab(const char *path, int line_no, const char *line, size_t len, size_t digits)
{
    char quoted[64];
    const size_t show = len < 24 ? len : 24;
    cc_escape_controls(line, show, quoted, sizeof(quoted));
    const char *const more = show < len ? "..." : "";
    const char *const what = digits < len ? "is not hex digits" : "has an odd number of hex digits";
    return cc_error("%s:%d: not a vocabulary file: '%s%s' %s (a .vocab, as scripts/prepare.py writes it beside its "
                    "shards, holds one token a line, its bytes as hex digits: 546865 is \"The\")",
                    path, line_no, quoted, more, what);
}

void cc_vocab_free(cc_vocab *v)
{
    for (int i = 0; i < v->n; i++) free(v->bytes[i]);
    free(v->bytes);
    free(v->len);
    memset(v, 0, sizeof(*v));
}

int cc_vocab_load(cc_vocab *v, const char *path)
{
    memset(v, 0, sizeof(*v));
    FILE *f = fopen(path, "r");
    if (!f) return cc_error("cannot open vocabulary '%s': %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    int cap_n = 0, rc = 0;
    while ((got = getline(&line, &cap, f)) >= 0) {
        while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r')) line[--got] = 0;
        const size_t digits = strspn(line, "0123456789abcdefABCDEF");
        if ((ssize_t)digits < got || got % 2) {
            rc = not_a_vocab(path, v->n + 1, line, (size_t)got, digits);
            break;
        }
        if (v->n == 65536) { rc = cc_error("%s:%d: more than 65536 tokens", path, v->n + 1); break; }
        if (v->n == cap_n) {
            cap_n = cap_n ? 2 * cap_n : 1024;
            v->bytes = realloc(v->bytes, sizeof(uint8_t *) * cap_n);
            v->len = realloc(v->len, sizeof(int) * cap_n);
            if (!v->bytes || !v->len) { rc = cc_error("out of memory reading '%s'", path); break; }
        }
        uint8_t *b = cc_malloc((size_t)got / 2 + 1);
        for (ssize_t i = 0; i < got; i += 2) {
            const int hi = hexval(line[i]), lo = hexval(line[i + 1]);
            b[i / 2] = (uint8_t)(hi << 4 | lo); /* every digit checked above */
        }
        v->bytes[v->n] = b;
        v->len[v->n] = (int)(got / 2);
        v->n++;
    }
    free(line);
    fclose(f);
    if (rc == 0 && v->n == 0) rc = cc_error("%s: empty vocabulary", path);
    if (rc) cc_vocab_free(v);
    return rc;
}

int cc_vocab_encode(const cc_vocab *v, const char *text, int *ids, int cap)
{
    const size_t n = strlen(text);
    int count = 0;
    for (size_t pos = 0; pos < n;) {
        int best = -1, best_len = 0;
        for (int i = 0; i < v->n; i++)
            if (v->len[i] > best_len && (size_t)v->len[i] <= n - pos && memcmp(v->bytes[i], text + pos, (size_t)v->len[i]) == 0) {
                best = i;
                best_len = v->len[i];
            }
        if (best < 0) return -1;
        if (count < cap) ids[count] = best;
        count++;
        pos += (size_t)best_len;
    }
    return count < cap ? count : cap;
}

int cc_vocab_beside_data(const char *data, char *out, size_t cap)
{
    if (cap) *out = 0;
    const size_t len = strcspn(data, ","); /* the first entry: every shard of a run has the one prefix */
    if (len < 4 || len >= CC_PATH_MAX || strncmp(data + len - 4, ".bin", 4) != 0) return 0; /* text: bytes */
    char first[CC_PATH_MAX];
    memcpy(first, data, len);
    first[len] = 0;
    char *const slash = strrchr(first, '/'), *const base = slash ? slash + 1 : first;
    /* the last _train or _val of the name that a _, a . or a glob follows:
     * mine_train_000.bin, mine_train_*.bin, mine_val.bin */
    char *cut = NULL;
    for (char *q = base; *q; q++) {
        const size_t n = strncmp(q, "_train", 6) == 0 ? 6 : strncmp(q, "_val", 4) == 0 ? 4 : 0;
        if (n && (q[n] == '_' || q[n] == '.' || q[n] == '*')) cut = q;
    }
    if (!cut || cut == base) return 0;
    *cut = 0;
    if (snprintf(out, cap, "%s.vocab", first) >= (int)cap) {
        if (cap) *out = 0;
        return 0;
    }
    return access(out, R_OK) == 0;
}
