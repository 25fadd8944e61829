/* Data: text and .bin shards by content, the errors of docs/formats.md, and a
 * reproducible shuffled batch order. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/data.h"
#include "catchat/rng.h"
#include "catchat/vocab.h"
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
    for (int i = 0; i < 100; i++) cr_expect_eq(cc_tokens_at(&t, (size_t)i), tok[i]);
    cc_tokens_free(&t);
    /* a .bin name promises a shard: without the magic it is read as text only when asked */
    snprintf(p2, sizeof(p2), "%s/text.bin", dir);
    th_write_file(p2, "hello", 5);
    cr_expect_neq(cc_tokens_load(&t, p2, 256), 0);
    cr_assert_eq(cc_tokens_load_as(&t, p2, 256, "text"), 0);
    cr_expect(!t.is_shard);
    cr_expect_eq(t.n, 5);
    cr_expect_eq(cc_tokens_at(&t, 1), 'e');
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
    /* id 300 >= vocab 256: a shard loads unread; the batch that reads the id and a whole check fail */
    write_shard(p, tok, 10, 10, CC_SHARD_MAGIC, 1);
    cr_assert_eq(cc_tokens_load(&t, p, 256), 0);
    cr_expect_neq(cc_tokens_check(&t), 0);
    cc_loader bad;
    cr_assert_eq(cc_loader_init(&bad, &t, 1, 9, 0, 1), 0); /* one window: all 10 tokens */
    int bx[9], by[9];
    cr_expect_neq(cc_loader_batch(&bad, 0, bx, by), 0, "the window holding id 300");
    cr_expect_eq(by[8], 0, "a bad id is given as 0");
    cc_loader_free(&bad);
    cc_tokens_free(&t);
    write_shard(p, tok, 9, 9, CC_SHARD_MAGIC, 1); /* without it: sound */
    cr_assert_eq(cc_tokens_load(&t, p, 256), 0);
    cr_expect_eq(cc_tokens_check(&t), 0);
    cc_tokens_free(&t);
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

/* Both orders (the keyed permutation, and the array an earlier run resumes
 * with): reproducible from the seed, another for another seed, every window
 * once an epoch, batch rows the windows themselves (y = x moved one on). The
 * shard's ids are their positions, so a row names its window. */
Test(data, batches_reproducible_and_cover_an_epoch)
{
    char dir[256], p[512];
    th_tmpdir(dir, sizeof(dir));
    snprintf(p, sizeof(p), "%s/t.bin", dir);
    uint16_t ids[8 * 40 + 1];
    for (int i = 0; i < 8 * 40 + 1; i++) ids[i] = (uint16_t)i; /* exactly 40 windows of T=8 */
    write_shard(p, ids, 8 * 40 + 1, 8 * 40 + 1, CC_SHARD_MAGIC, 1);
    cc_tokens t;
    cr_assert_eq(cc_tokens_load(&t, p, 1000), 0);
    for (int order = 0; order < 2; order++) {
        cc_loader a, b, c;
        cc_loader_init(&a, &t, 4, 8, 1, 42);
        cc_loader_init(&b, &t, 4, 8, 1, 42);
        cc_loader_init(&c, &t, 4, 8, 1, 43);
        cc_loader_set_order(&a, order);
        cc_loader_set_order(&b, order);
        cc_loader_set_order(&c, order);
        cr_assert_eq(a.nwin, 40);
        int xa[32], ya[32], xb[32], yb[32], xc[32], yc[32];
        int differs = 0, seen[40] = { 0 };
        for (int e = 0; e < 2; e++) { /* two epochs: each a permutation, the two different */
            int epoch_seen[40] = { 0 }, first[4];
            for (int i = 0; i < 10; i++) { /* one epoch: 10 batches of 4 windows */
                cr_expect_eq(cc_loader_batch(&a, (uint64_t)(e * 10 + i), xa, ya), 0);
                cc_loader_batch(&b, (uint64_t)(e * 10 + i), xb, yb);
                cc_loader_batch(&c, (uint64_t)(e * 10 + i), xc, yc);
                cr_expect_eq(memcmp(xa, xb, sizeof(xa)), 0);
                differs |= memcmp(xa, xc, sizeof(xa)) != 0;
                for (int w = 0; w < 4; w++) {
                    const int win = xa[w * 8] / 8;
                    cr_assert(win >= 0 && win < 40 && xa[w * 8] % 8 == 0, "row %d starts at id %d", w, xa[w * 8]);
                    for (int k = 0; k < 8; k++) {
                        cr_expect_eq(xa[w * 8 + k], win * 8 + k);
                        cr_expect_eq(ya[w * 8 + k], win * 8 + k + 1);
                    }
                    epoch_seen[win]++;
                    if (i == 0) first[w] = win;
                }
            }
            for (int s = 0; s < 40; s++) cr_expect_eq(epoch_seen[s], 1, "order %d: window %d seen %d times", order, s, epoch_seen[s]);
            if (e == 0) memcpy(seen, first, sizeof(first));
            else cr_expect(memcmp(seen, first, sizeof(first)) != 0, "order %d: two epochs began alike", order);
        }
        cr_expect(differs, "order %d: different seeds gave the same order", order);
        /* out-of-order access (a resume) gives the same batch */
        cc_loader_batch(&a, 3, xa, ya);
        cc_loader_batch(&b, 17, xb, yb);
        cc_loader_batch(&b, 3, xb, yb);
        cr_expect_eq(memcmp(xa, xb, sizeof(xa)), 0);
        cr_expect(order == CC_ORDER_SHUFFLED_ARRAY || !a.perm, "the keyed order holds no array");
        cc_loader_free(&a);
        cc_loader_free(&b);
        cc_loader_free(&c);
    }
    cc_tokens_free(&t);
}

/* n bytes of `ch` into dir/name. */
static void write_fill(const char *dir, const char *name, char ch, size_t n, char *path, size_t cap)
{
    snprintf(path, cap, "%s/%s", dir, name);
    char *buf = malloc(n);
    memset(buf, ch, n);
    th_write_file(path, buf, n);
    free(buf);
}

/* A glob reads its files in sorted order, a comma list in the order given;
 * each window lies inside one file (the files' bytes differ, so a window that
 * crossed a boundary would mix them), and every window of every file is
 * visited once an epoch. */
Test(data, several_files_as_one_dataset)
{
    char dir[256], p[512];
    th_tmpdir(dir, sizeof(dir));
    write_fill(dir, "part_b.txt", 'b', 45, p, sizeof(p)); /* lengths that leave partial windows */
    write_fill(dir, "part_a.txt", 'a', 30, p, sizeof(p));
    write_fill(dir, "part_c.txt", 'c', 61, p, sizeof(p));
    char spec[600];
    snprintf(spec, sizeof(spec), "%s/part_*.txt", dir);
    cc_tokens t;
    cr_assert_eq(cc_tokens_load(&t, spec, 256), 0);
    cr_expect_eq(t.nfiles, 3);
    cr_expect_eq(t.n, 136);
    cr_expect_eq(t.file_end[0], 30);
    cr_expect_eq(t.file_end[1], 75);
    cr_expect_eq(cc_tokens_at(&t, 0), 'a');
    cr_expect_eq(cc_tokens_at(&t, 30), 'b');
    cr_expect_eq(cc_tokens_at(&t, 75), 'c');
    const int T = 8, B = 1;
    cc_loader ld;
    cr_assert_eq(cc_loader_init(&ld, &t, B, T, 1, 5), 0);
    cr_expect_eq(ld.nwin, (29 / 8) + (44 / 8) + (60 / 8)); /* 3 + 5 + 7 */
    int x[8], y[8], seen[3] = { 0 };
    for (uint64_t i = 0; i < ld.nwin; i++) {
        cc_loader_batch(&ld, i, x, y);
        for (int k = 1; k < T; k++) cr_assert_eq(x[k], x[0], "window %llu crosses files", (unsigned long long)i);
        cr_assert_eq(y[T - 1], x[0], "window %llu crosses files", (unsigned long long)i);
        seen[x[0] - 'a']++;
    }
    cr_expect(seen[0] == 3 && seen[1] == 5 && seen[2] == 7, "windows per file: %d %d %d", seen[0], seen[1], seen[2]);
    cc_loader_free(&ld);
    cc_tokens_free(&t);
    /* a list keeps its order */
    snprintf(spec, sizeof(spec), "%s/part_c.txt,%s/part_a.txt", dir, dir);
    cr_assert_eq(cc_tokens_load(&t, spec, 256), 0);
    cr_expect_eq(t.nfiles, 2);
    cr_expect_eq(cc_tokens_at(&t, 0), 'c');
    cr_expect_eq(cc_tokens_at(&t, 61), 'a');
    cc_tokens_free(&t);
}

/* Shards (what scripts/prepare.py writes, several of them) through a glob. */
Test(data, shards_through_a_glob)
{
    char dir[256], p[512], spec[600];
    th_tmpdir(dir, sizeof(dir));
    uint16_t a[20], b[20];
    for (int i = 0; i < 20; i++) a[i] = (uint16_t)i, b[i] = (uint16_t)(100 + i);
    snprintf(p, sizeof(p), "%s/train_000001.bin", dir);
    write_shard(p, b, 20, 20, CC_SHARD_MAGIC, 1);
    snprintf(p, sizeof(p), "%s/train_000000.bin", dir);
    write_shard(p, a, 20, 20, CC_SHARD_MAGIC, 1);
    snprintf(spec, sizeof(spec), "%s/train_*.bin", dir);
    cc_tokens t;
    cr_assert_eq(cc_tokens_load(&t, spec, 1024), 0);
    cr_expect(t.is_shard);
    cr_expect_eq(t.n, 40);
    cr_expect_eq(cc_tokens_at(&t, 0), 0);
    cr_expect_eq(cc_tokens_at(&t, 20), 100);
    cc_tokens_free(&t);
}

Test(data, bad_file_sets_are_errors, .init = cr_redirect_stderr)
{
    char dir[256], p[512], spec[1200], val[600];
    th_tmpdir(dir, sizeof(dir));
    cc_tokens t;
    snprintf(spec, sizeof(spec), "%s/nothing_*.txt", dir);
    cr_expect_neq(cc_tokens_load(&t, spec, 256), 0, "a pattern that matches nothing");
    write_fill(dir, "x1.txt", 'x', 40, p, sizeof(p));
    write_fill(dir, "x2.txt", 'y', 40, p, sizeof(p));
    snprintf(spec, sizeof(spec), "%s/x*.txt", dir);
    snprintf(val, sizeof(val), "%s/x2.txt", dir);
    cr_expect_neq(cc_data_check_split(spec, val), 0, "val is one of the train files");
    snprintf(val, sizeof(val), "%s/x1.txt", dir);
    snprintf(spec, sizeof(spec), "%s/x2.txt", dir);
    cr_expect_eq(cc_data_check_split(spec, val), 0);
}

/* The byte tokenizer takes any file, so a wrong path (a program, noise)
 * would train without a word: a file that looks binary is refused, naming
 * it and the way out, unless format = text, which reads it with a warning.
 * Text in Latin-1, with tabs and escapes, stays text. */
Test(data, binary_file_as_text_is_refused)
{
    uint8_t elf[4096];
    for (size_t i = 0; i < sizeof(elf); i++) elf[i] = (uint8_t)(i * 131 % 97 < 40 ? 0 : 'a' + i % 26);
    memcpy(elf, "\x7f" "ELF\x02\x01\x01", 8); /* an ELF header: its 8th byte is the first NUL */
    uint8_t noise[4096]; /* no NUL: most bytes are still no text */
    cc_rng r;
    cc_rng_seed(&r, 9);
    for (size_t i = 0; i < sizeof(noise); i++) noise[i] = (uint8_t)(1 + cc_rng_below(&r, 255));
    const uint8_t *bin[2] = { elf, noise };
    const char *why[2] = { "NUL bytes, the first at byte 7", "of its bytes are not UTF-8 text" };
    cc_tokens t;
    for (int k = 0; k < 2; k++) {
        th_stderr_begin();
        int rc = cc_tokens_from_bytes_as(&t, bin[k], 4096, "prog.txt", 256, "auto");
        const char *err = th_stderr_end();
        cr_expect_neq(rc, 0, "binary case %d read as text", k);
        cr_expect(strstr(err, "prog.txt: looks like a binary file") && strstr(err, why[k]) &&
                  strstr(err, "format = text") && strchr(err, '\n') == err + strlen(err) - 1,
                  "not one line naming the file, why and the way out: %s", err);
        th_stderr_begin();
        rc = cc_tokens_from_bytes_as(&t, bin[k], 4096, "prog.txt", 256, "text");
        err = th_stderr_end();
        cr_assert_eq(rc, 0, "format = text refused binary case %d: %s", k, err);
        cr_expect_eq(t.n, 4096);
        cr_expect(strstr(err, "warning: prog.txt looks like a binary file"), "no warning: %s", err);
        cc_tokens_free(&t);
    }
    const char *texts[3] = { "caf\xe9 cr\xe8me br\xfbl\xe9" "e, na\xefve fa\xe7" "ade\n",
                             "col\tcol\r\n\x1b[1mbold\x1b[0m \xe6\x97\xa5\xe6\x9c\xac\n", "" };
    for (int k = 0; k < 3; k++) {
        th_stderr_begin();
        const int rc = cc_tokens_from_bytes_as(&t, (const uint8_t *)texts[k], strlen(texts[k]), "t.txt", 256, "auto");
        const char *err = th_stderr_end();
        cr_expect(rc == 0 && !*err, "text %d: rc %d, %s", k, rc, err);
        if (rc == 0) cc_tokens_free(&t);
    }
}

/* A shard of n ids whose header names the byte tokenizer, as prepare.py's --tokenizer bytes writes it. */
static void write_bytes_shard(const char *path, const uint16_t *ids, uint32_t n)
{
    const uint64_t id = cc_vocab_bytes_id();
    const uint32_t mark[4] = { CC_SHARD_TOKENIZER_MARK, 256, (uint32_t)id, (uint32_t)(id >> 32) };
    size_t len = 1024 + 2 * (size_t)n;
    uint8_t *buf = calloc(1, len);
    const uint32_t hdr[3] = { CC_SHARD_MAGIC, 1, n };
    memcpy(buf, hdr, sizeof(hdr));
    memcpy(buf + 12, mark, sizeof(mark));
    memcpy(buf + 1024, ids, 2 * (size_t)n);
    th_write_file(path, buf, len);
    free(buf);
}

/* The digest a resume compares: a text file and a shard of its bytes agree; a
 * token changed inside a sampled piece, or one token more, is seen; the
 * full-pass digest of earlier checkpoints sees any change. */
Test(data, digest_samples_large_files)
{
    char dir[256], txt[512], bin[512];
    th_tmpdir(dir, sizeof(dir));
    enum { N = 300000 }; /* past the 128 Ki tokens hashed whole */
    uint8_t *text = malloc(N);
    uint16_t *ids = malloc(2 * N);
    for (int i = 0; i < N; i++) ids[i] = text[i] = (uint8_t)("the cat sat on the mat\n"[i % 23]);
    snprintf(txt, sizeof(txt), "%s/t.txt", dir);
    snprintf(bin, sizeof(bin), "%s/t.bin", dir);
    th_write_file(txt, text, N);
    write_bytes_shard(bin, ids, N);
    cc_tokens a, b;
    cr_assert_eq(cc_tokens_load(&a, txt, 256), 0);
    cr_assert_eq(cc_tokens_load(&b, bin, 256), 0);
    cr_expect_eq(cc_tokens_digest(&a), cc_tokens_digest(&b), "text and its bytes as a shard");
    cr_expect_eq(cc_tokens_digest_all(&a), cc_tokens_digest_all(&b));
    cc_tokens_free(&b);
    ids[0] = 'x'; /* the first piece begins at the first token */
    write_bytes_shard(bin, ids, N);
    cr_assert_eq(cc_tokens_load(&b, bin, 256), 0);
    cr_expect_neq(cc_tokens_digest(&a), cc_tokens_digest(&b), "a token of a sampled piece");
    cc_tokens_free(&b);
    ids[0] = text[0];
    ids[N - 1] = 'x'; /* the last piece ends at the last token */
    write_bytes_shard(bin, ids, N);
    cr_assert_eq(cc_tokens_load(&b, bin, 256), 0);
    cr_expect_neq(cc_tokens_digest(&a), cc_tokens_digest(&b), "the last token");
    cc_tokens_free(&b);
    ids[N - 1] = text[N - 1];
    ids[N / 2 + 1000] = 'x'; /* between pieces: the sampled digest misses it, the full one does not */
    write_bytes_shard(bin, ids, N);
    cr_assert_eq(cc_tokens_load(&b, bin, 256), 0);
    cr_expect_neq(cc_tokens_digest_all(&a), cc_tokens_digest_all(&b));
    cc_tokens_free(&b);
    write_bytes_shard(bin, ids, N - 1); /* one token fewer */
    cr_assert_eq(cc_tokens_load(&b, bin, 256), 0);
    cr_expect_neq(cc_tokens_digest(&a), cc_tokens_digest(&b), "the count");
    cc_tokens_free(&a);
    cc_tokens_free(&b);
    free(text);
    free(ids);
}
