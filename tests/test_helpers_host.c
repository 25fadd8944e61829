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
