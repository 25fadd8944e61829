/* Config: defaults, the shipped files, --set, and one-line errors that name
 * the file, line and key. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <stdio.h>
#include <string.h>
#include "catchat/config.h"
#include "helpers.h"

static void write_ini(char *path, size_t cap, const char *text)
{
    char dir[256];
    th_tmpdir(dir, sizeof(dir));
    snprintf(path, cap, "%s/c.ini", dir);
    th_write_file(path, text, strlen(text));
}

Test(config, shipped_configs_load)
{
    const char *files[] = { "configs/tiny.ini", "configs/cpu.ini", "configs/default.ini" };
    for (int i = 0; i < 3; i++) {
        cc_config c;
        cc_config_defaults(&c);
        cr_expect_eq(cc_config_load(&c, files[i]), 0, "%s", files[i]);
    }
    cc_config c;
    cc_config_defaults(&c);
    cc_config_load(&c, "configs/default.ini");
    cr_expect_eq(c.d_model, 512);
    cr_expect_eq(c.n_layers, 3);
    cr_expect_eq(c.n_heads, 8);
    cr_expect_eq(c.ctx_window, 128);
    cr_expect_eq(c.seq_len, 512);
    cr_expect_eq(c.grad_h_clamp, 1000.0);
    cr_expect_eq(c.loss_scale, 1.0);
    cr_expect_eq(c.loss_scale_dynamic, 0);
    cc_config_load(&c, "configs/tiny.ini");
    cr_expect_eq(c.d_model, 64);
    cr_expect_eq(c.ctx_window, 16);
}

Test(config, set_overrides_and_dynamic_scale)
{
    cc_config c;
    cc_config_defaults(&c);
    cr_expect_eq(cc_config_set_arg(&c, "lr=1e-4"), 0);
    cr_expect_eq(c.lr, 1e-4);
    cr_expect_eq(cc_config_set_arg(&c, "precision.loss_scale=dynamic"), 0);
    cr_expect_eq(c.loss_scale_dynamic, 1);
    cr_expect_eq(cc_config_set_arg(&c, "loss_scale=128"), 0);
    cr_expect_eq(c.loss_scale_dynamic, 0);
    cr_expect_eq(c.loss_scale, 128.0);
    cr_expect_eq(cc_config_set_arg(&c, "seed=18446744073709551615"), 0);
    cr_expect_eq(c.seed, UINT64_MAX);
}

Test(config, json_round_trip)
{
    cc_config a, b;
    cc_config_defaults(&a);
    cc_config_set_arg(&a, "lr=3.3e-4");
    cc_config_set_arg(&a, "loss_scale=dynamic");
    cc_config_set_arg(&a, "train=some/where.bin");
    char *js = cc_config_to_json(&a);
    cc_config_defaults(&b);
    cr_assert_eq(cc_config_from_json(&b, js, "test"), 0);
    free(js);
    cr_expect_eq(memcmp(&a, &b, sizeof(a)), 0, "config changed through JSON");
}

static void expect_error(const char *ini, const char *needle)
{
    char path[512];
    write_ini(path, sizeof(path), ini);
    cc_config c;
    cc_config_defaults(&c);
    cc_config before = c;
    cr_expect_neq(cc_config_load(&c, path), 0, "accepted: %s", ini);
    cr_expect_eq(memcmp(&c, &before, sizeof(c)), 0, "a failed load changed the config");
    (void)needle;
}

Test(config, bad_values_are_errors, .init = cr_redirect_stderr)
{
    expect_error("[model]\nd_model = 1e999\n", "d_model");
    expect_error("[train]\nlr = nan\n", "lr");
    expect_error("[train]\nlr =\n", "lr");
    expect_error("[train]\nbatch_size = -0\n", "batch_size");
    expect_error("[train]\nbatch_size = 12abc\n", "batch_size");
    expect_error("[model]\nd_model = 64\nn_heads = 5\n", "n_heads");
    expect_error("[precision]\nloss_scale = sometimes\n", "loss_scale");
    expect_error("[run]\ndevice = tpu\n", "device");
    expect_error("[train]\nbogus = 1\n", "bogus");
    expect_error("[nosuch]\nlr = 1\n", "nosuch");
    expect_error("this is not ini\n", "syntax");
}

Test(config, error_names_file_line_and_key, .init = cr_redirect_stderr)
{
    char path[512];
    write_ini(path, sizeof(path), "[model]\nd_model = 64\n\n[train]\nwarmup_steps = ten\n");
    cc_config c;
    cc_config_defaults(&c);
    cr_assert_neq(cc_config_load(&c, path), 0);
    fflush(stderr);
    char expected[700];
    snprintf(expected, sizeof(expected),
             "catchat: %s:5: [train] warmup_steps: 'ten' is not an integer\n", path);
    cr_expect_stderr_eq_str(expected);
}

Test(config, missing_file_is_an_error, .init = cr_redirect_stderr)
{
    cc_config c;
    cc_config_defaults(&c);
    cr_expect_neq(cc_config_load(&c, "/nonexistent/x.ini"), 0);
}
