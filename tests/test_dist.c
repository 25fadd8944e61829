/* The parts of data parallelism that need no GPU: every rank's config
 * compared with rank 0's, naming what differs (src/dist_agree.c), and the
 * one-process path, where there is nothing to agree on. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/config.h"
#include "catchat/dist.h"

static int diff_of(const cc_config *mine, const cc_config *lead, char *out, size_t cap)
{
    char *a = cc_run_signature(mine), *b = cc_run_signature(lead);
    cr_assert(a && b);
    const int n = cc_signature_diff(a, b, out, cap);
    free(a);
    free(b);
    return n;
}

Test(dist, the_same_config_agrees)
{
    cc_config a, b;
    cc_config_defaults(&a);
    cc_config_defaults(&b);
    char out[1024];
    cr_expect_eq(diff_of(&a, &b, out, sizeof(out)), 0);
    cr_expect_str_eq(out, "");
}

/* Another seq_len, lr or data file on one rank: named with its section,
 * both values, and which is rank 0's. */
Test(dist, a_difference_is_named_with_both_values)
{
    cc_config a, b;
    cc_config_defaults(&a);
    cc_config_defaults(&b);
    cr_assert_eq(cc_config_set(&a, "train", "lr", "0.002", "test"), 0);
    char out[1024];
    cr_expect_eq(diff_of(&a, &b, out, sizeof(out)), 1);
    cr_expect(strstr(out, "[train] lr = 0.002 here, lr = 0.001 on rank 0") != NULL, "%s", out);
    cr_assert_eq(cc_config_set(&a, "model", "seq_len", "256", "test"), 0);
    cr_assert_eq(cc_config_set(&a, "data", "train", "other/train.txt", "test"), 0);
    cr_expect_eq(diff_of(&a, &b, out, sizeof(out)), 3);
    cr_expect(strstr(out, "[model] seq_len = 256 here, seq_len = 512 on rank 0") != NULL, "%s", out);
    cr_expect(strstr(out, "[data] train = other/train.txt here") != NULL, "%s", out);
}

/* Many differences: the first few named, the rest counted; a short buffer
 * is cut, never overrun. */
Test(dist, many_differences_are_counted)
{
    cc_config a, b;
    cc_config_defaults(&a);
    cc_config_defaults(&b);
    const char *keys[][3] = { { "train", "lr", "0.002" },          { "train", "seed", "7" },
                              { "train", "batch_size", "32" },     { "model", "n_layers", "2" },
                              { "precision", "loss_scale", "8" },  { "run", "out_dir", "elsewhere" } };
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        cr_assert_eq(cc_config_set(&a, keys[i][0], keys[i][1], keys[i][2], "test"), 0);
    char out[1024];
    cr_expect_eq(diff_of(&a, &b, out, sizeof(out)), 6);
    cr_expect(strstr(out, "; and 2 more") != NULL, "%s", out);
    char small[24];
    memset(small, 'x', sizeof(small));
    cr_expect_eq(diff_of(&a, &b, small, 16), 6);
    cr_expect_lt(strlen(small), 16);
    cr_expect_eq(small[20], 'x', "nothing written past the buffer");
}

/* One text cut shorter than the other (a truncated broadcast): the missing
 * lines count as differences. */
Test(dist, missing_lines_differ)
{
    char out[512];
    cr_expect_eq(cc_signature_diff("[a]\nx = 1\ny = 2\n", "[a]\nx = 1\n", out, sizeof(out)), 1);
    cr_expect(strstr(out, "[a] y = 2 here, (nothing) on rank 0") != NULL, "%s", out);
}

/* Without a communicator (one process, or --dist none) there is no one to
 * disagree with. */
Test(dist, one_process_always_agrees)
{
    cc_config a;
    cc_config_defaults(&a);
    cr_expect_eq(cc_dist_agree(NULL, &a), 0);
    cc_dist d;
    memset(&d, 0, sizeof(d));
    d.world = 1;
    cr_expect_eq(cc_dist_agree(&d, &a), 0);
}
