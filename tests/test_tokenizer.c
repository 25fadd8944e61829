/* Tokenizers: a shard's identity from its header, datasets of two identities
 * refused, the fingerprint, and the byte-level BPE encoder on a small
 * tokenizer.json written here (its merges worked out by hand below). */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/bpe.h"
#include "catchat/data.h"
#include "catchat/vocab.h"
#include "helpers.h"

/* A shard of n tokens whose header carries (mark, size, id) in ints 3..6. */
static void write_marked_shard(const char *path, int n, uint32_t mark, uint32_t size, uint64_t id)
{
    const size_t len = 1024 + 2 * (size_t)n;
    uint8_t *buf = calloc(1, len);
    const uint32_t hdr[7] = { CC_SHARD_MAGIC, 1, (uint32_t)n, mark, size, (uint32_t)id, (uint32_t)(id >> 32) };
    memcpy(buf, hdr, sizeof(hdr));
    for (int i = 0; i < n; i++) buf[1024 + 2 * i] = (uint8_t)(i % 200);
    th_write_file(path, buf, len);
    free(buf);
}

Test(tokenizer, identity_from_shard_header_and_text)
{
    char dir[256], a[512], b[512], t[512];
    th_tmpdir(dir, sizeof(dir));
    snprintf(a, sizeof(a), "%s/a.bin", dir);
    snprintf(b, sizeof(b), "%s/b.bin", dir);
    snprintf(t, sizeof(t), "%s/t.txt", dir);
    write_marked_shard(a, 300, CC_SHARD_TOKENIZER_MARK, 400, 0x0123456789abcdefULL);
    write_marked_shard(b, 300, 0, 0, 0); /* made elsewhere: unknown */
    th_write_text(t, 2000, 1);
    cc_tokens ta, tb, tt;
    cr_assert_eq(cc_tokens_load(&ta, a, 400), 0);
    cr_expect_eq(ta.tokenizer_id, 0x0123456789abcdefULL);
    cr_expect_eq(ta.tokenizer_size, 400);
    cr_assert_eq(cc_tokens_load(&tb, b, 400), 0);
    cr_expect_eq(tb.tokenizer_id, 0);
    cr_assert_eq(cc_tokens_load(&tt, t, 256), 0);
    cr_expect_eq(tt.tokenizer_id, cc_vocab_bytes_id());
    cc_tokens_free(&ta);
    cc_tokens_free(&tb);
    cc_tokens_free(&tt);
}

Test(tokenizer, dataset_of_two_identities_is_refused, .init = cr_redirect_stderr)
{
    char dir[256], a[512], b[512], c[512], list[1600];
    th_tmpdir(dir, sizeof(dir));
    snprintf(a, sizeof(a), "%s/a.bin", dir);
    snprintf(b, sizeof(b), "%s/b.bin", dir);
    snprintf(c, sizeof(c), "%s/c.bin", dir);
    write_marked_shard(a, 300, CC_SHARD_TOKENIZER_MARK, 400, 77);
    write_marked_shard(b, 300, CC_SHARD_TOKENIZER_MARK, 400, 78);
    write_marked_shard(c, 300, CC_SHARD_TOKENIZER_MARK, 400, 77);
    cc_tokens t;
    snprintf(list, sizeof(list), "%s,%s", a, c);
    cr_assert_eq(cc_tokens_load(&t, list, 400), 0, "one tokenizer's files are one dataset");
    cc_tokens_free(&t);
    snprintf(list, sizeof(list), "%s,%s", a, b);
    cr_expect_neq(cc_tokens_load(&t, list, 400), 0, "files of two tokenizers are not");
}

Test(tokenizer, fingerprint_tells_vocabularies_apart)
{
    cc_vocab bytes, v;
    cc_vocab_bytes(&bytes);
    cr_expect_eq(cc_vocab_fingerprint(&bytes), cc_vocab_bytes_id());
    const char text[] = "00\n01\n6162\n\n";
    cr_assert_eq(cc_vocab_parse(&v, text, strlen(text), "t"), 0);
    cr_expect_eq(v.n, 4);
    cr_expect_eq(v.len[3], 0, "an empty line is a token of no bytes");
    const uint64_t f = cc_vocab_fingerprint(&v);
    cr_expect_neq(f, cc_vocab_bytes_id());
    /* the same tokens in another order are another tokenizer */
    cc_vocab w;
    const char swapped[] = "01\n00\n6162\n\n";
    cr_assert_eq(cc_vocab_parse(&w, swapped, strlen(swapped), "t"), 0);
    cr_expect_neq(cc_vocab_fingerprint(&w), f);
    char *round = cc_vocab_text(&v);
    cr_expect_str_eq(round, "00\n01\n6162\n\n");
    free(round);
    cc_vocab_free(&bytes);
    cc_vocab_free(&v);
    cc_vocab_free(&w);
}

/* GPT-2's character for a byte: printable bytes themselves, the rest U+0100 on. */
static void byte_char(int byte, char *out)
{
    static int code[256];
    if (!code['!']) {
        int next = 256;
        for (int b = 0; b < 256; b++) {
            const int printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
            code[b] = printable ? b : next++;
        }
    }
    const int c = code[byte];
    if (c < 0x80) snprintf(out, 4, "%c", c);
    else snprintf(out, 4, "%c%c", 0xc0 | c >> 6, 0x80 | (c & 0x3f));
}

/* The bytes' 256 tokens, then "he" 256, " t" 257, " th" 258, "the" 259, " the" 260, "ll" 261, "\r\n" 262,
 * and the special token <|endoftext|> 263, which prepare.py's .vocab writes as no bytes. */
static const char *const EXTRA[] = { "he", " t", " th", "the", " the", "ll", "\r\n" };
/* Merges by rank, as token texts. " the" is a token, but h+e (rank 0) comes before " th" can form, so the
 * word " the" ends as " t" + "he": greedy longest match would say " the". */
static const char *const MERGES[][2] = { { "h", "e" }, { " ", "t" }, { " t", "h" }, { "t", "he" }, { " th", "e" },
                                         { "l", "l" }, { "\r", "\n" } };

static void json_token(char *out, const char *bytes)
{
    out[0] = 0;
    for (const char *p = bytes; *p; p++) byte_char((unsigned char)*p, out + strlen(out));
}

static cc_bpe *small_bpe(cc_vocab *v, const char *pre_type)
{
    char *json = malloc(1 << 16), tok[64], tok2[64];
    /* GPT-2's own file writes an empty prefix and suffix: no mark */
    size_t n = (size_t)sprintf(json, "{\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"%s\",\"add_prefix_space\":false,"
                                     "\"use_regex\":true},\"added_tokens\":[{\"id\":263,\"content\":\"<|endoftext|>\","
                                     "\"special\":true}],\"model\":{\"type\":\"BPE\",\"continuing_subword_prefix\":\"\","
                                     "\"end_of_word_suffix\":\"\",\"vocab\":{",
                               pre_type);
    char hex[4096] = "";
    for (int b = 0; b < 256; b++) {
        const char s[2] = { (char)b, 0 };
        if (b == 0) strcpy(tok, "\\u0100"); /* byte 0's character, as JSON writes it */
        else json_token(tok, s);
        if (b == '"' || b == '\\') snprintf(tok, sizeof(tok), "\\%c", b);
        n += (size_t)sprintf(json + n, "%s\"%s\":%d", b ? "," : "", tok, b);
        sprintf(hex + strlen(hex), "%02x\n", b);
    }
    for (int i = 0; i < 7; i++) {
        json_token(tok, EXTRA[i]);
        n += (size_t)sprintf(json + n, ",\"%s\":%d", tok, 256 + i);
        for (const char *p = EXTRA[i]; *p; p++) sprintf(hex + strlen(hex), "%02x", (unsigned char)*p);
        strcat(hex, "\n");
    }
    n += (size_t)sprintf(json + n, ",\"<|endoftext|>\":263},\"merges\":[");
    strcat(hex, "\n");
    for (int i = 0; i < 7; i++) {
        json_token(tok, MERGES[i][0]);
        json_token(tok2, MERGES[i][1]);
        n += (size_t)sprintf(json + n, "%s[\"%s\",\"%s\"]", i ? "," : "", tok, tok2);
    }
    n += (size_t)sprintf(json + n, "]}}");
    cr_assert_eq(cc_vocab_parse(v, hex, strlen(hex), "small.vocab"), 0);
    char why[160] = "";
    cc_bpe *b = cc_bpe_parse(json, n, v, why, sizeof(why));
    free(json);
    if (!b) cr_log_info("refused: %s", why);
    return b;
}

static void expect_ids(const cc_bpe *b, const char *text, const int *want, int n_want)
{
    int *ids, n;
    cr_assert_eq(cc_bpe_encode(b, text, strlen(text), &ids, &n), 0, "%s", text);
    cr_expect_eq(n, n_want, "'%s': %d ids, want %d", text, n, n_want);
    for (int i = 0; i < n && i < n_want; i++) cr_expect_eq(ids[i], want[i], "'%s': id %d is %d, want %d", text, i, ids[i], want[i]);
    free(ids);
}

Test(tokenizer, bpe_applies_merges_by_rank_within_words)
{
    cc_vocab v;
    cc_bpe *b = small_bpe(&v, "ByteLevel");
    cr_assert(b);
    /* "the" joins h+e (rank 0), then t+he (3); " the" joins h+e, then " "+t (1), and " t"+he is no merge */
    expect_ids(b, "the the", (int[]){ 259, 257, 256 }, 3);
    expect_ids(b, "hello", (int[]){ 256, 261, 'o' }, 3);
    /* GPT-2's words: a space joins the word after it; digits and letters are separate words; a run of
     * spaces before a word leaves its last space to the word */
    expect_ids(b, "the  the1", (int[]){ 259, ' ', 257, 256, '1' }, 5);
    /* no merge crosses a word boundary: "t" ends one word, "he" begins none */
    expect_ids(b, "t.he", (int[]){ 't', '.', 256 }, 3);
    /* a special token's text is matched whole, between words */
    expect_ids(b, "the<|endoftext|>the", (int[]){ 259, 263, 259 }, 3);
    /* whitespace is Unicode's White_Space, as `tokenizers` has it. U+180E is not: "\r\n" before it is a run
     * of whitespace before a word, so its last character goes alone ("\r", "\n", then U+180E), where a
     * \s that took U+180E would see one run and join \r+\n. Before a space the run stays whole. */
    expect_ids(b, "\r\n\xe1\xa0\x8e", (int[]){ '\r', '\n', 0xe1, 0xa0, 0x8e }, 5);
    expect_ids(b, "\r\n", (int[]){ 262 }, 1);
    int *ids, n;
    cr_expect_neq(cc_bpe_encode(b, "\xff", 1, &ids, &n), 0, "text that is not UTF-8 is refused");
    cc_bpe_free(b);
    cc_vocab_free(&v);
}

Test(tokenizer, bpe_refuses_what_it_cannot_encode)
{
    cc_vocab v;
    cr_expect_null(small_bpe(&v, "Whitespace"), "another pre-tokenizer");
    cc_vocab_free(&v);
    char why[160];
    cr_expect_null(cc_bpe_parse("not json", 8, &v, why, sizeof(why)));
}
