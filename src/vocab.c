/* Token vocabularies: .vocab files, their fingerprints, and where prepare.py
 * puts them beside its shards. */
#define _POSIX_C_SOURCE 200809L
#include "catchat/vocab.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>
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

/* One line of a vocabulary: its hex digits as the token's bytes. */
static int add_token(cc_vocab *v, int *cap_n, const char *name, const char *line, size_t len)
{
    const size_t digits = strspn(line, "0123456789abcdefABCDEF");
    if (digits < len || len % 2) return not_a_vocab(name, v->n + 1, line, len, digits);
    if (v->n == 65536) return cc_error("%s:%d: more than 65536 tokens", name, v->n + 1);
    if (v->n == *cap_n) {
        *cap_n = *cap_n ? 2 * *cap_n : 1024;
        v->bytes = cc_realloc(v->bytes, sizeof(uint8_t *) * (size_t)*cap_n);
        v->len = cc_realloc(v->len, sizeof(int) * (size_t)*cap_n);
    }
    uint8_t *b = cc_malloc(len / 2 + 1);
    for (size_t i = 0; i < len; i += 2) b[i / 2] = (uint8_t)(hexval(line[i]) << 4 | hexval(line[i + 1]));
    v->bytes[v->n] = b;
    v->len[v->n] = (int)(len / 2);
    v->n++;
    return 0;
}

int cc_vocab_parse(cc_vocab *v, const char *text, size_t len, const char *name)
{
    memset(v, 0, sizeof(*v));
    int cap_n = 0, rc = 0;
    for (size_t pos = 0; pos < len && rc == 0;) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - text) : len, next = nl ? end + 1 : len;
        while (end > pos && text[end - 1] == '\r') end--;
        rc = add_token(v, &cap_n, name, text + pos, end - pos);
        pos = next;
    }
    if (rc == 0 && v->n == 0) rc = cc_error("%s: empty vocabulary", name);
    if (rc) cc_vocab_free(v);
    return rc;
}

int cc_vocab_load(cc_vocab *v, const char *path)
{
    memset(v, 0, sizeof(*v));
    size_t len;
    char *text = (char *)cc_read_file_what(path, "vocabulary", &len);
    if (!text) return -1;
    const int rc = cc_vocab_parse(v, text, len, path);
    free(text);
    return rc;
}

char *cc_vocab_text(const cc_vocab *v)
{
    size_t len = 0;
    for (int i = 0; i < v->n; i++) len += 2 * (size_t)v->len[i] + 1;
    char *out = cc_malloc(len + 1), *p = out;
    for (int i = 0; i < v->n; i++) {
        for (int k = 0; k < v->len[i]; k++) p += sprintf(p, "%02x", v->bytes[i][k]);
        *p++ = '\n';
    }
    *p = 0;
    return out;
}

void cc_vocab_bytes(cc_vocab *v)
{
    v->n = 256;
    v->bytes = cc_malloc(sizeof(uint8_t *) * 256);
    v->len = cc_malloc(sizeof(int) * 256);
    for (int i = 0; i < 256; i++) {
        v->bytes[i] = cc_malloc(1);
        v->bytes[i][0] = (uint8_t)i;
        v->len[i] = 1;
    }
}

uint64_t cc_vocab_fingerprint(const cc_vocab *v)
{
    XXH64_state_t *hs = XXH64_createState();
    if (!hs) abort(); /* out of memory for a few hundred bytes */
    XXH64_reset(hs, 0);
    for (int i = 0; i < v->n; i++) {
        const uint32_t n = (uint32_t)v->len[i];
        const uint8_t le[4] = { (uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16), (uint8_t)(n >> 24) };
        XXH64_update(hs, le, 4);
        XXH64_update(hs, v->bytes[i], n);
    }
    uint64_t h = XXH64_digest(hs);
    XXH64_freeState(hs);
    return h ? h : 1; /* 0 stands for "unknown" */
}

uint64_t cc_vocab_bytes_id(void)
{
    static uint64_t id; /* one value for the process, computed once */
    if (!id) {
        cc_vocab b;
        cc_vocab_bytes(&b);
        id = cc_vocab_fingerprint(&b);
        cc_vocab_free(&b);
    }
    return id;
}

const char *cc_tokenizer_describe(uint64_t id, char *buf, size_t cap)
{
    if (id == cc_vocab_bytes_id()) snprintf(buf, cap, "the byte tokenizer (raw text)");
    else if (id == 0) snprintf(buf, cap, "an unknown tokenizer");
    else snprintf(buf, cap, "tokenizer %016" PRIx64, id);
    return buf;
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

int cc_vocab_beside_data(const char *data, char *out, size_t cap) { return cc_file_beside_data(data, ".vocab", out, cap); }

int cc_file_beside_data(const char *data, const char *suffix, char *out, size_t cap)
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
    if (snprintf(out, cap, "%s%s", first, suffix) >= (int)cap) {
        if (cap) *out = 0;
        return 0;
    }
    return access(out, R_OK) == 0;
}
