/* Data: text and .bin shards by content, the errors of formats.md, and a
 * reproducible shuffled batch order. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/data.h"
#include "helpers.h"

static void write_shard(const char *path, const uint16_t *tok, uint32_t n, uint32_t claimed,
                        uint32_t magic, uint32_t version)
{
    size_t len = 1024 + 2 * (size_t)n;
    uint8_t *buf = calloc(1, len);
    uint32_t hdr[3] = { magic, version, claimed };
    memcpy(buf, hdr, sizeof(hdr));
    memcpy(buf + 1024, tok, 2 * (size_t)n);
    th_write_file(path, buf, len);
    free(buf);
}

Test(data, text_and_shard_by_content, .init = cr_redirect_stderr)
{
    char dir[256], p1[512], p2[512];
    th_tmpdir(dir, sizeof(dir));
    snprintf(p1, sizeof(p1), "%s/shard.txt", dir); /* a shard with a misleading name */
    uint16_t tok[100];
    for (int i = 0; i < 100; i++) tok[i] = (uint16_t)(i * 37 % 1000);
    write_shard(p1, tok, 100, 100, CC_SHARD_MAGIC, 1);
    cc_tokens t;
    cr_assert_eq(cc_tokens_load(&t, p1, 1000), 0);
    cr_expect(t.is_shard);
    cr_expect_eq(t.n, 100);
    cr_expect_eq(memcmp(t.tok, tok, sizeof(tok)), 0);
    cc_tokens_free(&t);
    /* a .bin name promises a shard: without the magic it is read as text only when asked */
    snprintf(p2, sizeof(p2), "%s/text.bin", dir);
    th_write_file(p2, "hello", 5);
    cr_expect_neq(cc_tokens_load(&t, p2, 256), 0);
    cr_assert_eq(cc_tokens_load_as(&t, p2, 256, "text"), 0);
    cr_expect(!t.is_shard);
    cr_expect_eq(t.n, 5);
    cr_expect_eq(t.tok[1], 'e');
    cc_tokens_free(&t);
    snprintf(p2, sizeof(p2), "%s/text.txt", dir);
    th_write_file(p2, "hello", 5);
    cr_assert_eq(cc_tokens_load(&t, p2, 256), 0);
    cr_expect(!t.is_shard);
    cc_tokens_free(&t);
}

/* What a nanoGPT-style headerless uint16 train.bin and a shard whose magic
 * number was damaged look like: neither may pass as text. */
Test(data, not_a_shard_is_refused, .init = cr_redirect_stderr)
{
    char dir[256], p[512];
    th_tmpdir(dir, sizeof(dir));
    uint16_t raw[20000];
    for (int i = 0; i < 20000; i++) raw[i] = (uint16_t)(i * 7919 % 50257);
    snprintf(p, sizeof(p), "%s/train.bin", dir);
    th_write_file(p, raw, sizeof(raw));
    cc_tokens t;
    cr_expect_neq(cc_tokens_load_as(&t, p, 50304, "auto"), 0, "headerless uint16 .bin read as text");
    cr_expect_neq(cc_tokens_load_as(&t, p, 50304, "shard"), 0);
    uint16_t tok[100];
    for (int i = 0; i < 100; i++) tok[i] = (uint16_t)(i * 37 % 1000);
    snprintf(p, sizeof(p), "%s/broken.txt", dir); /* even under a text name */
    write_shard(p, tok, 100, 100, CC_SHARD_MAGIC ^ 0x10, 1);
    cr_expect_neq(cc_tokens_load(&t, p, 1000), 0, "a shard with a broken magic read as text");
    cr_expect_neq(cc_tokens_load_as(&t, p, 1000, "shard"), 0);
    /* text stays text, under format auto or text, and format shard refuses it */
    snprintf(p, sizeof(p), "%s/plain.txt", dir);
    th_write_file(p, "plain words here\n", 17);
    cr_assert_eq(cc_tokens_load_as(&t, p, 256, "auto"), 0);
    cr_expect_eq(t.n, 17);
    cc_tokens_free(&t);
    cr_expect_neq(cc_tokens_load_as(&t, p, 256, "shard"), 0);
}

Test(data, bad_files_are_errors, .init = cr_redirect_stderr)
{
    char dir[256], p[512];
    th_tmpdir(dir, sizeof(dir));
    uint16_t tok[10] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 300 };
    cc_tokens t;
    snprintf(p, sizeof(p), "%s/a.bin", dir);
    write_shard(p, tok, 10, 12, CC_SHARD_MAGIC, 1); /* count disagrees with size */
    cr_expect_neq(cc_tokens_load(&t, p, 1000), 0);
    write_shard(p, tok, 10, 10, CC_SHARD_MAGIC, 7); /* version */
    cr_expect_neq(cc_tokens_load(&t, p, 1000), 0);
    write_shard(p, tok, 10, 10, CC_SHARD_MAGIC, 1); /* id 300 >= vocab 256 */
    cr_expect_neq(cc_tokens_load(&t, p, 256), 0);
    th_write_file(p, "\x88\xd8\x34\x01\x01", 5); /* magic, then nothing: truncated header */
    cr_expect_neq(cc_tokens_load(&t, p, 256), 0);
    cr_expect_neq(cc_tokens_load(&t, "/nonexistent/file", 256), 0);
    /* shorter than one window */
    snprintf(p, sizeof(p), "%s/short.txt", dir);
    th_write_file(p, "abc", 3);
    cr_assert_eq(cc_tokens_load(&t, p, 256), 0);
    cc_loader ld;
    cr_expect_neq(cc_loader_init(&ld, &t, 2, 8, 1, 1), 0);
    cc_tokens_free(&t);
    cr_expect_neq(cc_data_check_split(p, p), 0);
}

Test(data, batches_reproducible_and_cover_an_epoch)
{
    char dir[256], p[512];
    th_tmpdir(dir, sizeof(dir));
    snprintf(p, sizeof(p), "%s/t.txt", dir);
    th_write_text(p, 8 * 40 + 1, 1); /* exactly 40 windows of T=8 */
    cc_tokens t;
    cr_assert_eq(cc_tokens_load(&t, p, 256), 0);
    cc_loader a, b, c;
    cc_loader_init(&a, &t, 4, 8, 1, 42);
    cc_loader_init(&b, &t, 4, 8, 1, 42);
    cc_loader_init(&c, &t, 4, 8, 1, 43);
    cr_assert_eq(a.nwin, 40);
    int xa[32], ya[32], xb[32], yb[32], xc[32], yc[32];
    int differs = 0, seen[40] = { 0 };
    for (int i = 0; i < 10; i++) { /* one epoch: 10 batches of 4 windows */
        cc_loader_batch(&a, (uint64_t)i, xa, ya);
        cc_loader_batch(&b, (uint64_t)i, xb, yb);
        cc_loader_batch(&c, (uint64_t)i, xc, yc);
        cr_expect_eq(memcmp(xa, xb, sizeof(xa)), 0);
        differs |= memcmp(xa, xc, sizeof(xa)) != 0;
        for (int w = 0; w < 4; w++) { /* batch rows are the permuted windows, y = x shifted */
            const uint32_t win = a.perm[(size_t)i * 4 + w];
            for (int k = 0; k < 8; k++) {
                cr_expect_eq(xa[w * 8 + k], t.tok[win * 8 + k]);
                cr_expect_eq(ya[w * 8 + k], t.tok[win * 8 + k + 1]);
            }
        }
        for (int w = 0; w < 4; w++) seen[a.perm[(size_t)i * 4 + w]]++;
    }
    for (int s = 0; s < 40; s++) cr_expect_eq(seen[s], 1, "window %d seen %d times", s, seen[s]);
    cr_expect(differs, "different seeds gave the same order");
    /* out-of-order access (a resume) gives the same batch */
    cc_loader_batch(&a, 3, xa, ya);
    cc_loader_batch(&b, 17, xb, yb);
    cc_loader_batch(&b, 3, xb, yb);
    cr_expect_eq(memcmp(xa, xb, sizeof(xa)), 0);
    cc_loader_free(&a);
    cc_loader_free(&b);
    cc_loader_free(&c);
    cc_tokens_free(&t);
}
