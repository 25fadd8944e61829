/* Byte-level BPE encoding from a tokenizer.json (include/catchat/bpe.h).
 * The word split is GPT-2's regular expression, run by PCRE2 with Unicode
 * properties (\p{L}, \p{N}, \s), as the `tokenizers` library runs it. */
#define _POSIX_C_SOURCE 200809L
#define PCRE2_CODE_UNIT_WIDTH 8
#include "catchat/bpe.h"

#include <jansson.h>
#include <pcre2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include "catchat/util.h"

/* GPT-2's word pattern: contractions, letters, digits, other symbols (each
 * with one leading space), then runs of whitespace. Whitespace is spelled
 * out as Unicode's White_Space, which is what `tokenizers` (Oniguruma) takes
 * \s for: PCRE2's \s also takes U+180E. Letters and digits are PCRE2's
 * Unicode tables (10.42: Unicode 14), so a character assigned later may
 * split otherwise than in a newer `tokenizers`. */
#define WS "\\t\\n\\x0B\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
static const char WORD_PATTERN[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+|[" WS
                                   "]+(?![^" WS "])|[" WS "]+";

typedef struct {
    uint64_t key; /* left id << 32 | right id, + 1 so that 0 marks an empty slot */
    int rank, merged;
} pair_slot;

struct cc_bpe {
    const cc_vocab *vocab;
    int *token_slots; /* open addressing over the tokens' bytes: id + 1, 0 empty */
    size_t token_mask;
    pair_slot *pairs;
    size_t pair_mask;
    int byte_id[256];
    /* added tokens (special ones such as <|endoftext|>): their text is matched whole in the prompt, as
     * `tokenizers` does, though a special one's id decodes to no bytes (prepare.py's .vocab) */
    struct added_token {
        int id;
        char *text;
        size_t len;
    } *added;
    int n_added;
    int add_prefix_space, ignore_merges;
    pcre2_code *words;
    pcre2_match_data *match;
};

static size_t pow2_above(size_t n)
{
    size_t p = 16;
    while (p < 2 * n) p *= 2;
    return p;
}

static int token_find(const cc_bpe *b, const uint8_t *s, size_t n)
{
    for (size_t i = XXH3_64bits(s, n) & b->token_mask;; i = (i + 1) & b->token_mask) {
        const int id = b->token_slots[i] - 1;
        if (id < 0) return -1;
        if ((size_t)b->vocab->len[id] == n && memcmp(b->vocab->bytes[id], s, n) == 0) return id;
    }
}

static uint64_t pair_key(int left, int right) { return ((uint64_t)(uint32_t)left << 32 | (uint32_t)right) + 1; }

static pair_slot *pair_find(const cc_bpe *b, uint64_t key)
{
    for (size_t i = XXH3_64bits(&key, sizeof(key)) & b->pair_mask;; i = (i + 1) & b->pair_mask)
        if (b->pairs[i].key == key || b->pairs[i].key == 0) return &b->pairs[i];
}

/* GPT-2's byte-to-character table, inverted: the byte a character of a
 * byte-level token stands for, -1 for a character that stands for none.
 * Printable bytes stand for themselves; the other 68, in byte order, for
 * U+0100 on. */
static int byte_of_char(uint32_t c)
{
    static int table[324];
    static int made;
    if (!made) {
        for (int i = 0; i < 324; i++) table[i] = -1;
        int next = 256;
        for (int byte = 0; byte < 256; byte++) {
            const int printable = (byte >= '!' && byte <= '~') || (byte >= 0xa1 && byte <= 0xac) || byte >= 0xae;
            table[printable ? byte : next++] = byte;
        }
        made = 1;
    }
    return c < 324 ? table[c] : -1;
}

/* A byte-level token's text (UTF-8 of the table's characters) as its bytes
 * into out (cap bytes); the byte count, or -1 for a character outside the
 * table. */
static int token_bytes(const char *s, uint8_t *out, size_t cap)
{
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        const size_t k = cc_utf8_seq_len(p, strlen((const char *)p));
        if (k == 0 || n == cap) return -1;
        uint32_t c = k == 1 ? p[0] : (uint32_t)(p[0] & (0x7f >> k));
        for (size_t i = 1; i < k; i++) c = c << 6 | (p[i] & 0x3f);
        const int byte = byte_of_char(c);
        if (byte < 0) return -1;
        out[n++] = (uint8_t)byte;
        p += k;
    }
    return (int)n;
}

/* Each part of cc_bpe_parse below fills its part of b from the file, or
 * says in why what makes the file unusable and returns -1. why is written
 * while root is alive: its words may be the file's own. */
static int refuse(char *why, size_t cap, const char *fmt, const char *detail)
{
    snprintf(why, cap, fmt, detail);
    return -1;
}

/* A merge as its two tokens' texts: "a b" (older files) or ["a", "b"]. */
static int merge_parts(json_t *m, char *left, char *right, size_t cap)
{
    if (json_is_string(m)) {
        const char *s = json_string_value(m), *space = strchr(s, ' ');
        if (!space || strchr(space + 1, ' ') || (size_t)(space - s) >= cap || strlen(space + 1) >= cap) return -1;
        snprintf(left, cap, "%.*s", (int)(space - s), s);
        snprintf(right, cap, "%s", space + 1);
        return 0;
    }
    if (!json_is_array(m) || json_array_size(m) != 2 || !json_is_string(json_array_get(m, 0)) ||
        !json_is_string(json_array_get(m, 1)))
        return -1;
    const char *a = json_string_value(json_array_get(m, 0)), *c = json_string_value(json_array_get(m, 1));
    if (strlen(a) >= cap || strlen(c) >= cap) return -1;
    snprintf(left, cap, "%s", a);
    snprintf(right, cap, "%s", c);
    return 0;
}

static int flag(json_t *obj, const char *key) { return json_is_true(json_object_get(obj, key)); }

/* The kind of tokenizer: only GPT-2's byte-level BPE, with nothing this
 * encoder would not apply (a normalizer, word-piece marks), is taken. */
static int parse_kind(cc_bpe *b, json_t *root, char *why, size_t cap)
{
    json_t *model = json_object_get(root, "model"), *pre = json_object_get(root, "pre_tokenizer");
    const char *type = json_string_value(json_object_get(model, "type"));
    const char *pre_type = json_string_value(json_object_get(pre, "type"));
    if (!type || strcmp(type, "BPE") != 0) return refuse(why, cap, "its model is %s, not BPE", type ? type : "missing");
    if (!pre_type || strcmp(pre_type, "ByteLevel") != 0 || (json_object_get(pre, "use_regex") && !flag(pre, "use_regex")))
        return refuse(why, cap, "its pre-tokenizer is %s, not GPT-2's ByteLevel", pre_type ? pre_type : "missing");
    if (!json_is_null(json_object_get(root, "normalizer")) && json_object_get(root, "normalizer"))
        return refuse(why, cap, "it has a normalizer%s, which catchat does not apply", "");
    /* GPT-2's own file writes both as "": no mark */
    const char *cont = json_string_value(json_object_get(model, "continuing_subword_prefix")),
               *eow = json_string_value(json_object_get(model, "end_of_word_suffix"));
    if ((cont && *cont) || (eow && *eow))
        return refuse(why, cap, "its BPE marks word pieces%s, which a byte-level BPE does not", "");
    b->add_prefix_space = flag(pre, "add_prefix_space");
    b->ignore_merges = flag(model, "ignore_merges");
    return 0;
}

/* The tokens: each text's bytes must be the vocabulary's for its id, every
 * token of the vocabulary must be the file's (a tokenizer.json of a smaller
 * tokenizer is another one), and each byte must have a token of its own.
 * buf: 4096 bytes of scratch. */
static int parse_tokens(cc_bpe *b, json_t *root, uint8_t *buf, char *why, size_t cap)
{
    const cc_vocab *vocab = b->vocab;
    json_t *tokens = json_object_get(json_object_get(root, "model"), "vocab");
    if (!json_is_object(tokens)) return refuse(why, cap, "it has no model.vocab%s", "");
    b->token_mask = pow2_above((size_t)vocab->n) - 1;
    b->token_slots = cc_calloc(b->token_mask + 1, sizeof(int));
    for (int id = 0; id < vocab->n; id++) {
        size_t i = XXH3_64bits(vocab->bytes[id], (size_t)vocab->len[id]) & b->token_mask;
        while (b->token_slots[i]) i = (i + 1) & b->token_mask;
        b->token_slots[i] = id + 1;
    }
    uint8_t *covered = cc_calloc((size_t)vocab->n, 1);
    const char *text;
    json_t *idv;
    char bad[96] = "";
    json_object_foreach(tokens, text, idv) {
        const json_int_t id = json_integer_value(idv);
        const int n = token_bytes(text, buf, 4096);
        if (json_is_integer(idv) && id >= 0 && id < vocab->n) covered[id] = 1;
        if (json_is_integer(idv) && id >= 0 && id < vocab->n && vocab->len[id] == 0)
            continue; /* a special token (<|endoftext|>), which prepare.py writes as no bytes */
        if (!json_is_integer(idv) || id < 0 || id >= vocab->n || n < 0 || n != vocab->len[id] ||
            memcmp(buf, vocab->bytes[id], (size_t)n) != 0) {
            snprintf(bad, sizeof(bad), "token %lld", (long long)id);
            break;
        }
    }
    json_t *a;
    size_t k;
    json_array_foreach(json_object_get(root, "added_tokens"), k, a) {
        const json_int_t id = json_integer_value(json_object_get(a, "id"));
        if (id >= 0 && id < vocab->n) covered[id] = 1;
    }
    for (int id = 0; id < vocab->n && !*bad; id++)
        if (!covered[id] && vocab->len[id] > 0) snprintf(bad, sizeof(bad), "vocabulary lacks token %d, which", id);
    free(covered);
    if (*bad) return refuse(why, cap, "its %s is not the vocabulary's", bad);
    for (int byte = 0; byte < 256; byte++) {
        const uint8_t c = (uint8_t)byte;
        if ((b->byte_id[byte] = token_find(b, &c, 1)) < 0)
            return refuse(why, cap, "a byte has no token of its own%s", "");
    }
    return 0;
}

/* The merges, by rank: each pair of ids and the id of their join (the
 * first rank of a pair listed twice). buf: 4096 bytes of scratch. */
static int parse_merges(cc_bpe *b, json_t *root, uint8_t *buf, char *why, size_t cap)
{
    json_t *merges = json_object_get(json_object_get(root, "model"), "merges");
    const size_t nm = json_array_size(merges);
    b->pair_mask = pow2_above(nm) - 1;
    b->pairs = cc_calloc(b->pair_mask + 1, sizeof(pair_slot));
    char left[1024], right[1024], bad[96] = "";
    for (size_t r = 0; r < nm && !*bad; r++) {
        int ln, rn, l = -1, rt = -1, joined = -1;
        if (merge_parts(json_array_get(merges, r), left, right, sizeof(left)) == 0 &&
            (ln = token_bytes(left, buf, 2048)) > 0 && (rn = token_bytes(right, buf + ln, 2048)) > 0) {
            l = token_find(b, buf, (size_t)ln);
            rt = token_find(b, buf + ln, (size_t)rn);
            joined = token_find(b, buf, (size_t)(ln + rn));
        }
        if (l < 0 || rt < 0 || joined < 0) {
            snprintf(bad, sizeof(bad), "merge %zu", r + 1);
            break;
        }
        pair_slot *s = pair_find(b, pair_key(l, rt));
        if (!s->key) *s = (pair_slot){ pair_key(l, rt), (int)r, joined };
    }
    if (*bad) return refuse(why, cap, "its %s does not join two of its tokens into a third", bad);
    return 0;
}

/* The added tokens, matched whole in a prompt. A special token's id decodes
 * to no bytes (prepare.py's .vocab); any other must decode to its text. */
static int parse_added(cc_bpe *b, json_t *root, char *why, size_t cap)
{
    const cc_vocab *vocab = b->vocab;
    json_t *added = json_object_get(root, "added_tokens"), *a;
    size_t k;
    b->added = cc_calloc(json_array_size(added) + 1, sizeof(*b->added));
    json_array_foreach(added, k, a) {
        const json_int_t id = json_integer_value(json_object_get(a, "id"));
        const char *content = json_string_value(json_object_get(a, "content"));
        if (id < 0 || id >= vocab->n || !content || !*content) continue;
        if (vocab->len[id] > 0 && ((size_t)vocab->len[id] != strlen(content) ||
                                   memcmp(vocab->bytes[id], content, strlen(content)) != 0))
            return refuse(why, cap, "its added token '%.40s' is not the vocabulary's", content);
        struct added_token *t = &b->added[b->n_added++];
        t->id = (int)id;
        t->len = strlen(content);
        t->text = cc_malloc(t->len + 1);
        memcpy(t->text, content, t->len + 1);
    }
    return 0;
}

cc_bpe *cc_bpe_parse(const char *json_text, size_t len, const cc_vocab *vocab, char *why, size_t cap)
{
    json_error_t jerr;
    json_t *root = json_loadb(json_text, len, 0, &jerr);
    if (!root) {
        snprintf(why, cap, "not JSON (line %d: %s)", jerr.line, jerr.text);
        return NULL;
    }
    cc_bpe *b = cc_calloc(1, sizeof(*b));
    b->vocab = vocab;
    uint8_t *buf = cc_malloc(4096);
    const int refused = parse_kind(b, root, why, cap) != 0 || parse_tokens(b, root, buf, why, cap) != 0 ||
                        parse_merges(b, root, buf, why, cap) != 0 || parse_added(b, root, why, cap) != 0;
    free(buf);
    json_decref(root);
    if (refused) {
        cc_bpe_free(b);
        return NULL;
    }
    int err;
    PCRE2_SIZE at;
    b->words = pcre2_compile((PCRE2_SPTR)WORD_PATTERN, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &err, &at, NULL);
    if (!b->words) {
        snprintf(why, cap, "PCRE2 refused the word pattern (error %d)", err);
        cc_bpe_free(b);
        return NULL;
    }
    b->match = pcre2_match_data_create_from_pattern(b->words, NULL);
    return b;
}

void cc_bpe_free(cc_bpe *b)
{
    if (!b) return;
    free(b->token_slots);
    free(b->pairs);
    for (int i = 0; i < b->n_added; i++) free(b->added[i].text);
    free(b->added);
    if (b->match) pcre2_match_data_free(b->match);
    if (b->words) pcre2_code_free(b->words);
    free(b);
}

typedef struct {
    int *v;
    int n, cap;
} id_list;

static void push(id_list *l, int id)
{
    if (l->n == l->cap) l->v = cc_realloc(l->v, sizeof(int) * (size_t)(l->cap = l->cap ? 2 * l->cap : 64));
    l->v[l->n++] = id;
}

/* One word: its bytes as tokens, then the lowest-ranked adjacent pair joined
 * everywhere it occurs (left to right), until no pair is a merge. */
static void encode_word(const cc_bpe *b, const uint8_t *w, size_t n, id_list *out)
{
    int whole;
    if (b->ignore_merges && (whole = token_find(b, w, n)) >= 0) {
        push(out, whole);
        return;
    }
    int *sym = cc_malloc(sizeof(int) * n), m = (int)n;
    for (size_t i = 0; i < n; i++) sym[i] = b->byte_id[w[i]];
    for (;;) {
        int best_rank = -1, best_left = 0, best_right = 0, joined = 0;
        for (int i = 0; i + 1 < m; i++) {
            const pair_slot *s = pair_find(b, pair_key(sym[i], sym[i + 1]));
            if (s->key && (best_rank < 0 || s->rank < best_rank)) {
                best_rank = s->rank;
                best_left = sym[i];
                best_right = sym[i + 1];
                joined = s->merged;
            }
        }
        if (best_rank < 0) break;
        int k = 0;
        for (int i = 0; i < m; i++) {
            if (i + 1 < m && sym[i] == best_left && sym[i + 1] == best_right) {
                sym[k++] = joined;
                i++;
            } else sym[k++] = sym[i];
        }
        m = k;
    }
    for (int i = 0; i < m; i++) push(out, sym[i]);
    free(sym);
}

/* Text without added tokens: its words by the pattern, each encoded. */
static void encode_words(const cc_bpe *b, const char *text, size_t len, id_list *out)
{
    char *spaced = NULL;
    if (b->add_prefix_space && len > 0 && text[0] != ' ') {
        spaced = cc_malloc(len + 1);
        spaced[0] = ' ';
        memcpy(spaced + 1, text, len);
        text = spaced;
        len++;
    }
    size_t pos = 0;
    while (pos < len) {
        const int rc = pcre2_match(b->words, (PCRE2_SPTR)text, len, pos, PCRE2_NO_UTF_CHECK, b->match, NULL);
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(b->match);
        /* the pattern covers every character; a gap would still be a word */
        const size_t start = rc >= 1 ? ov[0] : len, end = rc >= 1 ? ov[1] : len;
        if (start > pos) encode_word(b, (const uint8_t *)text + pos, start - pos, out);
        if (end > start) encode_word(b, (const uint8_t *)text + start, end - start, out);
        if (end <= pos) break;
        pos = end;
    }
    free(spaced);
}

int cc_bpe_encode(const cc_bpe *b, const char *text, size_t len, int **ids, int *n)
{
    for (size_t i = 0; i < len;) {
        const size_t k = cc_utf8_seq_len((const unsigned char *)text + i, len - i);
        if (k == 0 || text[i] == 0)
            return cc_error("the prompt is not UTF-8 text (byte %zu), and a BPE encodes text", i);
        i += k;
    }
    id_list out = { 0 };
    size_t pos = 0;
    while (pos < len) {
        /* the earliest added token in the rest (the longest where two start together) */
        size_t at = len;
        const struct added_token *found = NULL;
        for (int a = 0; a < b->n_added; a++) {
            const struct added_token *t = &b->added[a];
            for (size_t i = pos; i + t->len <= len && i <= at; i++)
                if (memcmp(text + i, t->text, t->len) == 0) {
                    if (i < at || (found && t->len > found->len)) {
                        at = i;
                        found = t;
                    }
                    break;
                }
        }
        encode_words(b, text + pos, at - pos, &out);
        if (!found) break;
        push(&out, found->id);
        pos = at + found->len;
    }
    *ids = out.v ? out.v : cc_malloc(sizeof(int));
    *n = out.n;
    return 0;
}
