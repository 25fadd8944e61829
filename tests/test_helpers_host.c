/* Host-side helpers of the GPU path and the ecosystem writers, on the CPU:
 * the embedding-backward CSR, CRC32C of the event files, the vocabulary. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <stdio.h>
#include <string.h>
#include "catchat/kernels.h"
#include "catchat/tfevents.h"
#include "catchat/vocab.h"
#include "helpers.h"

Test(embedding_csr, positions_grouped_by_id_in_order)
{
    const int x[10] = { 3, 1, 3, 0, 1, 3, 4, 0, 0, 3 };
    int off[6], pos[10];
    cc_embedding_csr(x, 10, 5, off, pos);
    const int want_off[6] = { 0, 3, 5, 5, 9, 10 };
    const int want_pos[10] = { 3, 7, 8, 1, 4, 0, 2, 5, 9, 6 };
    cr_expect_arr_eq(off, want_off, sizeof(want_off));
    cr_expect_arr_eq(pos, want_pos, sizeof(want_pos));
}

Test(tfevents, crc32c_known_vector)
{
    cr_expect_eq(cc_crc32c((const uint8_t *)"123456789", 9), 0xe3069283u);
    cr_expect_eq(cc_crc32c((const uint8_t *)"", 0), 0u);
}

Test(vocab, load_encode_and_errors, .init = cr_redirect_stderr)
{
    char dir[256], path[512];
    th_tmpdir(dir, sizeof(dir));
    snprintf(path, sizeof(path), "%s/v.vocab", dir);
    const char *text = "74686520\n636174\n61\n74\n68\n65\n20\n"; /* "the ", "cat", "a", "t", "h", "e", " " */
    th_write_file(path, text, strlen(text));
    cc_vocab v;
    cr_assert_eq(cc_vocab_load(&v, path), 0);
    cr_expect_eq(v.n, 7);
    int ids[16];
    const int n = cc_vocab_encode(&v, "the cat", ids, 16);
    cr_assert_eq(n, 2, "greedy longest match gives 'the ' + 'cat', got %d tokens", n);
    cr_expect_eq(ids[0], 0);
    cr_expect_eq(ids[1], 1);
    cr_expect_eq(cc_vocab_encode(&v, "dog", ids, 16), -1, "a byte no token covers is an error");
    cc_vocab_free(&v);
    th_write_file(path, "6g\n", 3);
    cr_expect_neq(cc_vocab_load(&v, path), 0, "not hex");
    th_write_file(path, "616\n", 4);
    cr_expect_neq(cc_vocab_load(&v, path), 0, "odd digits");
    cr_expect_neq(cc_vocab_load(&v, "/nonexistent.vocab"), 0);
}

Test(vocab, found_beside_the_shards)
{
    char dir[256], want[512], data[1200], out[1024];
    th_tmpdir(dir, sizeof(dir));
    snprintf(want, sizeof(want), "%s/mine.vocab", dir);
    th_write_file(want, "61\n", 3);
    /* prepare.py's names, a glob, a list (its first entry), a single val file */
    const char *const hits[] = { "%s/mine_train_000.bin", "%s/mine_train_*.bin", "%s/mine_val_000.bin,%s/x_val_000.bin",
                                 "%s/mine_val.bin" };
    for (size_t i = 0; i < sizeof(hits) / sizeof(*hits); i++) {
        snprintf(data, sizeof(data), hits[i], dir, dir);
        cr_expect_eq(cc_vocab_beside_data(data, out, sizeof(out)), 1, "%s", data);
        cr_expect_str_eq(out, want, "%s", data);
    }
    /* shards without their vocabulary: the path looked for */
    snprintf(data, sizeof(data), "%s/other_train_000.bin", dir);
    cr_expect_eq(cc_vocab_beside_data(data, out, sizeof(out)), 0);
    snprintf(want, sizeof(want), "%s/other.vocab", dir);
    cr_expect_str_eq(out, want);
    /* text (byte-level), a folder named _train, no prefix, nothing: none looked for */
    const char *const misses[] = { "%s/mine_train.txt", "%s/a_train_1/data.bin", "%s/_train_000.bin", "" };
    for (size_t i = 0; i < sizeof(misses) / sizeof(*misses); i++) {
        snprintf(data, sizeof(data), misses[i], dir);
        cr_expect_eq(cc_vocab_beside_data(data, out, sizeof(out)), 0, "%s", data);
        cr_expect_str_eq(out, "", "%s", data);
    }
}
