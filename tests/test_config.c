/* Config: defaults, the shipped files, --set, and one-line errors that name
 * the file, line and key. */
#define _POSIX_C_SOURCE 200809L /* open_memstream */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "catchat/config.h"
#include "helpers.h"

/* The bytes of a cc_config that hold its keys: the origin texts after them
 * say where values came from, which differs between equal configs. */
#define KEYS_SIZE offsetof(cc_config, from)

static void write_ini(char *path, size_t cap, const char *text)
{
    th_tmp_path(path, cap, "c.ini");
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
    cr_expect_eq(memcmp(&a, &b, KEYS_SIZE), 0, "config changed through JSON");
}

static void expect_error(const char *ini, const char *needle)
{
    char path[512];
    write_ini(path, sizeof(path), ini);
    cc_config c;
    cc_config_defaults(&c);
    cc_config before = c;
    th_stderr_begin();
    const int rc = cc_config_load(&c, path);
    const char *err = th_stderr_end();
    cr_expect_neq(rc, 0, "accepted: %s", ini);
    cr_expect(strstr(err, needle) != NULL, "the message '%s' does not name '%s'", err, needle);
    cr_expect(strchr(err, '\n') == err + strlen(err) - 1, "not one line: '%s'", err);
    cr_expect_eq(memcmp(&c, &before, sizeof(c)), 0, "a failed load changed the config");
}

Test(config, bad_values_are_errors)
{
    expect_error("[model]\nd_model = 1e999\n", "d_model");
    expect_error("[train]\nlr = nan\n", "lr");
    expect_error("[train]\nlr =\n", "lr");
    expect_error("[train]\nbatch_size = -0\n", "batch_size");
    expect_error("[train]\nbatch_size = 12abc\n", "batch_size");
    expect_error("[model]\nd_model = 64\nn_heads = 5\n", "n_heads");
    expect_error("[precision]\nloss_scale = sometimes\n", "loss_scale");
    expect_error("[run]\ndevice = tpu\n", "device");
    expect_error("[gpu]\nprofile = sm70\n", "profile");
    expect_error("[gpu]\nsm_count = -1\n", "sm_count");
    expect_error("[train]\nbogus = 1\n", "bogus");
    expect_error("[nosuch]\nlr = 1\n", "nosuch");
    expect_error("this is not ini\n", "syntax");
}

/* Load `ini` from a fresh file into *c (defaults first; c may be NULL) and
 * expect it refused with the one message "catchat: <the file>" + `rest`. */
static void expect_refused(const char *ini, const char *rest, cc_config *c)
{
    char path[512], want[1024];
    cc_config local;
    if (!c) c = &local;
    write_ini(path, sizeof(path), ini);
    cc_config_defaults(c);
    th_stderr_begin();
    const int rc = cc_config_load(c, path);
    const char *err = th_stderr_end();
    cr_assert_neq(rc, 0, "accepted: %s", ini);
    snprintf(want, sizeof(want), "catchat: %s%s", path, rest);
    cr_expect_str_eq(err, want);
}

Test(config, error_names_file_line_and_key)
{
    expect_refused("[model]\nd_model = 64\n\n[train]\nwarmup_steps = ten\n",
                   ":5: [train] warmup_steps: 'ten' is not an integer\n", NULL);
}

Test(config, missing_file_is_an_error, .init = cr_redirect_stderr)
{
    cc_config c;
    cc_config_defaults(&c);
    cr_expect_neq(cc_config_load(&c, "/nonexistent/x.ini"), 0);
}

/* fopen() opens a directory, so a directory would load as an empty config:
 * it is refused, named as a directory. */
Test(config, directory_is_refused)
{
    char dir[256];
    th_tmpdir(dir, sizeof(dir));
    cc_config c;
    cc_config_defaults(&c);
    th_stderr_begin();
    const int rc = cc_config_load(&c, dir);
    const char *err = th_stderr_end();
    cr_expect_neq(rc, 0, "a directory loaded as a config");
    cr_expect(strstr(err, dir) && strstr(err, "is a directory"), "message: %s", err);
}

/* '[train' (no ']') is reported as a malformed section header, at its line. */
Test(config, malformed_section_header_names_the_line)
{
    expect_refused("[model]\nd_model = 64\n[train\nlr = 1e-3\n",
                   ":3: malformed section header '[train' (expected '[name]')\n", NULL);
}

/* A header is '[name]' and nothing after it but a comment: a second ']' or
 * a word after it is refused at its line, not read as [train]; so is a
 * header with no name. */
Test(config, header_with_text_after_the_bracket_is_refused)
{
    expect_refused("[model]\nd_model = 64\n[train]]\nlr = 1e-3\n",
                   ":3: malformed section header '[train]]' (only a comment may follow the ']')\n", NULL);
    expect_refused("; settings\n[train] extra\nlr = 1e-3\n",
                   ":2: malformed section header '[train] extra' (only a comment may follow the ']')\n", NULL);
    expect_refused("[ ]\nlr = 1e-3\n", ":1: malformed section header '[ ]' (the section has no name)\n", NULL);
    /* the first failure is the one named, even when a later header is bad too */
    expect_refused("[train]\nlr = x\n[train]]\n", ":2: [train] lr: 'x' is not a finite number\n", NULL);
}

/* Blanks around a section's name go, as most INI readers drop them; a
 * header may carry a comment of either kind. */
Test(config, header_blanks_and_comment_are_accepted)
{
    cc_config c;
    cc_config_defaults(&c);
    cr_assert_eq(cc_config_load_string(&c, "[ train ]\nlr = 2e-3\n[\tmodel] # the model\nd_model = 64\n"
                                           "n_heads = 4\n[run] ; where\nout_dir = runs/h\n", "t.ini"), 0);
    cr_expect_eq(c.lr, 2e-3);
    cr_expect_eq(c.d_model, 64);
    cr_expect_str_eq(c.out_dir, "runs/h");
}

/* '#' and ';' after a blank start a comment for every kind of value: a path,
 * a choice, an integer, a real, the loss scale, the seed. One after any
 * other character is part of the value. */
Test(config, inline_comments_end_every_kind_of_value)
{
    cc_config c;
    cc_config_defaults(&c);
    cr_assert_eq(cc_config_load_string(&c,
                                       "[run]\nout_dir = runs/x # where\ndevice = cpu\t# for now\n"
                                       "  # an indented comment\n  ; and another\n"
                                       "[data]\ntrain = data/run#3/train.txt ; my data\nval = data/a;b.txt\n"
                                       "[train]\nbatch_size = 8 # small\nlr = 3e-4 ; peak\nseed = 7 #\n"
                                       "[precision]\nloss_scale = dynamic # GradScaler\n", "t.ini"), 0);
    cr_expect_str_eq(c.out_dir, "runs/x");
    cr_expect_str_eq(c.device, "cpu");
    cr_expect_str_eq(c.train, "data/run#3/train.txt");
    cr_expect_str_eq(c.val, "data/a;b.txt");
    cr_expect_eq(c.batch_size, 8);
    cr_expect_eq(c.lr, 3e-4);
    cr_expect_eq(c.seed, 7);
    cr_expect_eq(c.loss_scale_dynamic, 1);
}

/* A value that is only a comment is an empty value, refused as such at its
 * line; a '#' that does not follow a blank stays in a number and makes it
 * a bad one. */
Test(config, comment_only_value_is_empty)
{
    expect_refused("[run]\nout_dir = # where\n", ":2: [run] out_dir: empty path\n", NULL);
    expect_refused("[train]\nbatch_size = 8# small\n", ":2: [train] batch_size: '8# small' is not an integer\n",
                   NULL);
}

/* A key before any section is reported as such, at its line. */
Test(config, key_before_any_section)
{
    expect_refused("# settings\nlr = 1e-3\n[train]\n",
                   ":2: key 'lr' is outside any section (put it under [model], [train], ...)\n", NULL);
}

/* A key set twice in one file is refused, naming both lines, rather than the
 * last value silently winning; the config is left untouched. */
Test(config, duplicate_key_names_both_lines)
{
    cc_config c;
    expect_refused("[train]\nlr = 1e-3\n; a comment\n\nwarmup_steps = 5\nlr = 2e-3\n",
                   ":6: [train] lr is set twice (first at line 2): keep one\n", &c);
    cr_expect_eq(c.lr, 1e-3, "a failed load changed lr");
    cr_expect_eq(c.warmup_steps, 100, "a failed load changed warmup_steps");
}

/* --set trims blanks around key and value: "lr = 3e-3" sets lr, not a key
 * "lr ". */
Test(config, set_arg_trims_blanks)
{
    cc_config c;
    cc_config_defaults(&c);
    cr_expect_eq(cc_config_set_arg(&c, "lr = 3e-3"), 0);
    cr_expect_eq(c.lr, 3e-3);
    cr_expect_eq(cc_config_set_arg(&c, " train.warmup_steps =\t7 "), 0);
    cr_expect_eq(c.warmup_steps, 7);
    cr_expect_eq(cc_config_set_arg(&c, "out_dir = runs/x "), 0);
    cr_expect_str_eq(c.out_dir, "runs/x");
}

/* lr = 0 under the default lr_min is refused with both settings as the user
 * writes them (lr = 0, lr_min = 0.0001), so either one can be changed. */
Test(config, lr_below_lr_min_names_both)
{
    cc_config c;
    cc_config_defaults(&c);
    th_stderr_begin();
    const int rc = cc_config_load_string(&c, "[train]\nlr = 0\n", "t.ini");
    const char *err = th_stderr_end();
    cr_expect_neq(rc, 0);
    cr_expect(strstr(err, "t.ini: ") && strstr(err, "lr = 0 ") && strstr(err, "lr_min = 0.0001"),
              "message: %s", err);
}

/* [train] max_skipped_steps: default 50, 0 allowed, negative refused. */
Test(config, max_skipped_steps_key)
{
    cc_config c;
    cc_config_defaults(&c);
    cr_expect_eq(c.max_skipped_steps, 50);
    cr_expect_eq(cc_config_load_string(&c, "[train]\nmax_skipped_steps = 0\n", "t.ini"), 0);
    cr_expect_eq(c.max_skipped_steps, 0);
    cr_expect_eq(cc_config_set_arg(&c, "max_skipped_steps=7"), 0);
    cr_expect_eq(c.max_skipped_steps, 7);
    th_stderr_begin();
    cr_expect_neq(cc_config_set_arg(&c, "max_skipped_steps=-1"), 0);
    th_stderr_end();
    cr_expect_eq(c.max_skipped_steps, 7);
}

/* [data] format: auto (default), text or shard; anything else refused. */
Test(config, data_format_key)
{
    cc_config c;
    cc_config_defaults(&c);
    cr_expect_str_eq(c.data_format, "auto");
    cr_expect_eq(cc_config_load_string(&c, "[data]\nformat = shard\n", "t.ini"), 0);
    cr_expect_str_eq(c.data_format, "shard");
    cr_expect_eq(cc_config_set_arg(&c, "data.format=text"), 0);
    cr_expect_str_eq(c.data_format, "text");
    th_stderr_begin();
    const int rc = cc_config_set_arg(&c, "format=csv");
    const char *err = th_stderr_end();
    cr_expect_neq(rc, 0);
    cr_expect(strstr(err, "'csv' is not one of auto, text, shard") != NULL, "message: %s", err);
    cr_expect_str_eq(c.data_format, "text");
}

/* [gpu] recurrence's per-step path has one name: its old one, 'stepwise', is
 * refused with the name to use, from --set and from a file. */
Test(config, recurrence_old_name_is_refused_with_the_new)
{
    cc_config c;
    cc_config_defaults(&c);
    cr_expect_eq(cc_config_set_arg(&c, "gpu.recurrence=per-step"), 0);
    cr_expect_str_eq(c.gpu_recurrence, "per-step");
    th_stderr_begin();
    const int rc = cc_config_set_arg(&c, "recurrence=stepwise");
    const char *err = th_stderr_end();
    cr_expect_neq(rc, 0);
    cr_expect(strstr(err, ": [gpu] recurrence: 'stepwise' is spelled 'per-step'\n") != NULL, "message: %s", err);
    cr_expect_str_eq(c.gpu_recurrence, "per-step");
    expect_refused("[gpu]\nrecurrence = stepwise\n", ":2: [gpu] recurrence: 'stepwise' is spelled 'per-step'\n",
                   NULL);
}

/* A line longer than any config needs is refused at its own number,
 * counted after comment and blank lines; a long comment is only a comment. */
Test(config, long_line_reported_at_its_own_number)
{
    const size_t n = 70000;
    char *ini = malloc(n + 512), comment[301];
    memset(comment, 'x', 300);
    comment[0] = '#';
    comment[300] = 0;
    int at = snprintf(ini, 512, "; settings\n%s\n[train]\n", comment);
    memset(ini + at, 'x', n);
    snprintf(ini + at + n, 64, "\nlr = 1e-3\n");
    expect_refused(ini, ":4: line longer than 65536 bytes\n", NULL);
    free(ini);
}

/* The first error in the file is the one reported, with its own line and
 * its own reason: a malformed line before a bad value is named as a syntax
 * error at its line, and a bad value alone at the value's line. */
Test(config, reported_line_is_the_line_of_the_reason)
{
    expect_refused("[train]\n# comment\nno equals sign here\nwarmup_steps = ten\n",
                   ":3: syntax error (expected 'key = value' or '[section]'; comments start with '#' or ';' at "
                   "the start of a line or after a blank)\n", NULL);
    expect_refused("[train]\n# comment\nlr = 1e-3\nwarmup_steps = ten\n",
                   ":4: [train] warmup_steps: 'ten' is not an integer\n", NULL);
}

/* cc_config_section_diff lists the [model] keys that differ, with
 * both values, and nothing of other sections; cc_config_copy_section makes
 * the section equal and leaves the rest alone. */
Test(config, section_diff_and_copy)
{
    cc_config run, stored;
    cc_config_tiny(&run);
    cc_config_defaults(&stored);
    stored.rms_eps = 2.5e-5;
    char out[1024];
    cr_expect_eq(cc_config_section_diff(&run, &stored, "model", out, sizeof(out)), 6);
    cr_expect_str_eq(out, "d_model 64 (stored 512), n_layers 2 (stored 3), n_heads 4 (stored 8), "
                          "ctx_window 16 (stored 128), seq_len 32 (stored 512), rms_eps 1e-06 (stored 2.5e-05)");
    cc_config_copy_section(&run, &stored, "model");
    cr_expect_eq(cc_config_section_diff(&run, &stored, "model", out, sizeof(out)), 0);
    cr_expect_str_eq(out, "");
    cr_expect_eq(run.d_model, 512);
    cr_expect_eq(run.rms_eps, 2.5e-5);
    cr_expect_eq(run.batch_size, 4, "[train] was copied too");
}

/* A stored config (a checkpoint's record) of another catchat: a key this one
 * does not know is passed over with a note unless it is a [model] key (those
 * shape the weights), and the per-step loop's old spelling reads as today's. */
Test(config, stored_config_of_another_version)
{
    cc_config c;
    cc_config_defaults(&c);
    th_stderr_begin();
    cr_expect_eq(cc_config_from_json(&c, "{\"gpu\":{\"recurrence\":\"stepwise\",\"new_knob\":3},\"train\":{\"lr\":0.002}}",
                                     "ck"), 0);
    const char *err = th_stderr_end();
    cr_expect_str_eq(c.gpu_recurrence, "per-step");
    cr_expect_eq(c.lr, 0.002);
    cr_expect(strstr(err, "ck: stored config key [gpu] new_knob is not known to this catchat") != NULL, "%s", err);
    cc_config_defaults(&c);
    th_stderr_begin();
    cr_expect_neq(cc_config_from_json(&c, "{\"model\":{\"new_width\":3}}", "ck"), 0);
    err = th_stderr_end();
    cr_expect(strstr(err, "new_width") != NULL, "%s", err);
}

/* [gpu] recompute: auto (default), off or on; anything else refused. */
Test(config, recompute_key)
{
    cc_config c;
    cc_config_defaults(&c);
    cr_expect_str_eq(c.gpu_recompute, "auto");
    const char *ok[] = { "auto", "off", "on" };
    for (int i = 0; i < 3; i++) {
        char arg[64];
        snprintf(arg, sizeof(arg), "gpu.recompute=%s", ok[i]);
        cr_expect_eq(cc_config_set_arg(&c, arg), 0, "%s", arg);
        cr_expect_str_eq(c.gpu_recompute, ok[i]);
    }
    cr_expect_eq(cc_config_load_string(&c, "[gpu]\nrecompute = off\n", "t.ini"), 0);
    cr_expect_str_eq(c.gpu_recompute, "off");
    th_stderr_begin();
    const int rc = cc_config_set_arg(&c, "recompute=yes");
    const char *err = th_stderr_end();
    cr_expect_neq(rc, 0);
    cr_expect(strstr(err, "[gpu] recompute: 'yes' is not one of auto, off, on") != NULL, "message: %s", err);
    cr_expect_str_eq(c.gpu_recompute, "off");
    expect_refused("[gpu]\nrecompute = yes\n", ":2: [gpu] recompute: 'yes' is not one of auto, off, on\n", NULL);
}

/* [gpu] memory_limit: a byte size, 1024-based units with an optional B or
 * iB, a fraction taken exactly; 0 (the default) = the device's own. */
Test(config, memory_limit_parses_to_bytes)
{
    const struct { const char *text; uint64_t bytes; } cases[] = {
        { "10G", 10ull << 30 },         { "24GiB", 24ull << 30 },        { "512M", 512ull << 20 },
        { "1.5G", 3ull << 29 },         { "0", 0 },                      { "123456789", 123456789 },
        { "10GB", 10ull << 30 },        { "512MiB", 512ull << 20 },      { "10g", 10ull << 30 },
        { "2t", 2ull << 40 },           { "65536K", 64ull << 20 },       { "64M", 64ull << 20 },
        { "  10G  ", 10ull << 30 },     { "10 GiB", 10ull << 30 },       { "0.0G", 0 },
        { "0.1G", 107374182 } /* 107374182.4: the nearest byte */,
        { "0.0625T", 1ull << 36 },      { "18446744073709551615", UINT64_MAX },
        { "16777215T", UINT64_MAX - ((1ull << 40) - 1) },
        { "16777215.999999999999T", UINT64_MAX } /* 2^64 - 2^40 + 1099511627774.9 */,
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cc_config c;
        cc_config_defaults(&c);
        char arg[128];
        snprintf(arg, sizeof(arg), "gpu.memory_limit=%s", cases[i].text);
        cr_expect_eq(cc_config_set_arg(&c, arg), 0, "%s", arg);
        cr_expect_eq(c.gpu_memory_limit, cases[i].bytes, "%s: %llu, not %llu", cases[i].text,
                     (unsigned long long)c.gpu_memory_limit, (unsigned long long)cases[i].bytes);
        char ini[128];
        snprintf(ini, sizeof(ini), "[gpu]\nmemory_limit = %s\n", cases[i].text);
        cc_config_defaults(&c);
        cr_expect_eq(cc_config_load_string(&c, ini, "t.ini"), 0, "%s", ini);
        cr_expect_eq(c.gpu_memory_limit, cases[i].bytes, "file: %s", cases[i].text);
    }
    cc_config c;
    cc_config_defaults(&c);
    cr_expect_eq(c.gpu_memory_limit, 0);
}

/* Each refusal is one line naming [gpu] memory_limit and the value as
 * written, from --set and from a file, and leaves the config as it was. */
Test(config, memory_limit_refuses_bad_sizes)
{
    const struct { const char *text, *why; } cases[] = {
        { "", "'' is not a byte size" },
        { "abc", "'abc' is not a byte size" },
        { "ten", "'ten' is not a byte size" },
        { "10X", "'10X' is not a byte size" },
        { "10 G G", "'10 G G' is not a byte size" },
        { "G", "'G' is not a byte size" },
        { "10Gi", "'10Gi' is not a byte size" },
        { "1.G", "'1.G' is not a byte size" },
        { "nan", "'nan' is not a byte size" },
        { "inf", "'inf' is not a byte size" },
        { "1e400", "'1e400' is not a byte size" },
        { "-1G", "'-1G' is negative" },
        { "-0", "'-0' is negative" },
        { "63M", "'63M' is below 64M, too small to hold any model" },
        { "67108863", "'67108863' is below 64M" },
        { "1", "'1' is below 64M" },
        { "0.0000000001G", "'0.0000000001G' is below 64M" },
        { "18446744073709551616", "'18446744073709551616' is too large" },
        { "16777216T", "'16777216T' is too large" },
        { "16777215.9999999999999999999T", "'16777215.9999999999999999999T' is too large" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cc_config c;
        cc_config_defaults(&c);
        cr_assert_eq(cc_config_set_arg(&c, "gpu.memory_limit=24G"), 0);
        char arg[128], want[256];
        snprintf(arg, sizeof(arg), "gpu.memory_limit=%s", cases[i].text);
        th_stderr_begin();
        const int rc = cc_config_set_arg(&c, arg);
        const char *err = th_stderr_end();
        cr_expect_neq(rc, 0, "accepted: %s", arg);
        snprintf(want, sizeof(want), "[gpu] memory_limit: %s", cases[i].why);
        cr_expect(strstr(err, want) != NULL, "the message '%s' does not say '%s'", err, want);
        cr_expect(strchr(err, '\n') == err + strlen(err) - 1, "not one line: '%s'", err);
        cr_expect_eq(c.gpu_memory_limit, 24ull << 30, "a refused value changed the limit");
        char ini[128];
        snprintf(ini, sizeof(ini), "[gpu]\nmemory_limit = %s\n", cases[i].text);
        expect_error(ini, "memory_limit");
    }
    expect_refused("[gpu]\nmemory_limit = 63M\n",
                   ":2: [gpu] memory_limit: '63M' is below 64M, too small to hold any model (0 = the device's own "
                   "memory)\n", NULL);
}

/* memory_limit prints in the shortest form that reads back exactly, and a
 * printed config (INI or JSON) gives the same value again. */
Test(config, memory_limit_prints_and_round_trips)
{
    const struct { uint64_t bytes; const char *text; } cases[] = {
        { 0, "0" },
        { 10ull << 30, "10G" },
        { 512ull << 20, "512M" },
        { 1536ull << 20, "1536M" },
        { 3ull << 29, "1536M" },
        { 2ull << 40, "2T" },
        { (64ull << 20) + 1024, "65537K" },
        { 123456789, "123456789" },
        { 107374182, "107374182" },
        { UINT64_MAX, "18446744073709551615" },
        { UINT64_MAX - ((1ull << 40) - 1), "16777215T" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cc_config a, b;
        cc_config_defaults(&a);
        a.gpu_memory_limit = cases[i].bytes;
        /* INI: the printed config, read back */
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        cc_config_print(&a, f);
        fclose(f);
        char line[128];
        snprintf(line, sizeof(line), "\nmemory_limit = %s\n", cases[i].text);
        cr_expect(strstr(text, line) != NULL, "%llu is not printed as '%s'", (unsigned long long)cases[i].bytes,
                  cases[i].text);
        cc_config_defaults(&b);
        b.gpu_memory_limit = 99ull << 30;
        cr_expect_eq(cc_config_load_string(&b, text, "printed"), 0);
        cr_expect_eq(b.gpu_memory_limit, cases[i].bytes, "INI: %s read back as %llu", cases[i].text,
                     (unsigned long long)b.gpu_memory_limit);
        free(text);
        /* --set with the printed form */
        char arg[128];
        snprintf(arg, sizeof(arg), "memory_limit=%s", cases[i].text);
        cc_config_defaults(&b);
        cr_expect_eq(cc_config_set_arg(&b, arg), 0, "%s", arg);
        cr_expect_eq(b.gpu_memory_limit, cases[i].bytes, "--set %s", arg);
        /* JSON */
        char *js = cc_config_to_json(&a);
        char want[128];
        snprintf(want, sizeof(want), "\"memory_limit\":\"%s\"", cases[i].text);
        cr_expect(strstr(js, want) != NULL, "JSON %s lacks %s", js, want);
        cc_config_defaults(&b);
        cr_expect_eq(cc_config_from_json(&b, js, "test"), 0);
        free(js);
        cr_expect_eq(memcmp(&a, &b, KEYS_SIZE), 0, "%s changed the config through JSON", cases[i].text);
    }
}

/* A path that is not UTF-8 (a JSON string cannot hold it) is stored as its
 * bytes in hex and read back byte for byte; a malformed hex object is refused. */
Test(config, non_utf8_path_round_trips_through_json)
{
    cc_config a, b;
    cc_config_defaults(&a);
    cr_assert_eq(cc_config_set_arg(&a, "train=corpus/\xff\xfe-caf\xe9.txt"), 0);
    cr_assert_eq(cc_config_set_arg(&a, "out_dir=runs/\xc3\xa9t\xc3\xa9"), 0); /* UTF-8: stays a string */
    char *js = cc_config_to_json(&a);
    cr_assert_not_null(js);
    cr_expect(strstr(js, "\"train\":{\"hex\":\"636f727075732ffffe2d636166e92e747874\"}") != NULL, "%s", js);
    cr_expect(strstr(js, "\"out_dir\":\"runs/\xc3\xa9t\xc3\xa9\"") != NULL, "%s", js);
    cc_config_defaults(&b);
    cr_assert_eq(cc_config_from_json(&b, js, "test"), 0);
    free(js);
    cr_expect_str_eq(b.train, "corpus/\xff\xfe-caf\xe9.txt");
    cr_expect_eq(memcmp(&a, &b, KEYS_SIZE), 0, "config changed through JSON");
    const char *bad[] = { "{\"data\":{\"train\":{\"hex\":\"6\"}}}", "{\"data\":{\"train\":{\"hex\":\"zz\"}}}",
                          "{\"data\":{\"train\":{\"hex\":\"6100\"}}}", "{\"data\":{\"train\":{\"hex\":\"61\",\"x\":1}}}",
                          "{\"data\":{\"train\":{}}}", "{\"train\":{\"lr\":{\"hex\":\"31\"}}}" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cc_config_defaults(&b);
        th_stderr_begin();
        const int rc = cc_config_from_json(&b, bad[i], "ck");
        const char *err = th_stderr_end();
        cr_expect_neq(rc, 0, "accepted %s", bad[i]);
        cr_expect(strstr(err, "catchat: ck: config key ") == err, "%s: %s", bad[i], err);
    }
}

/* Make dir/sub and write `text` to dir/sub/c.ini; dir is a fresh folder. */
static void write_sub_ini(char *dir, size_t cap, char *path, size_t pcap, const char *text)
{
    th_tmpdir(dir, cap);
    snprintf(path, pcap, "%s/sub", dir);
    cr_assert_eq(mkdir(path, 0700), 0);
    snprintf(path, pcap, "%s/sub/c.ini", dir);
    th_write_file(path, text, strlen(text));
}

/* Relative paths in a file are taken from the file's folder, every entry of
 * a list and glob too; a leading ../ takes a folder off it; absolute paths
 * stay as they are. */
Test(config, file_paths_are_taken_from_the_config_folder)
{
    char dir[64], path[256], want[512];
    write_sub_ini(dir, sizeof(dir), path, sizeof(path),
                  "[data]\ntrain = ../d/a.txt, shards/t_*.bin,/abs/b.txt,./c.txt\nval = ../../v.txt\n"
                  "[run]\nout_dir = runs/x/\n");
    cc_config c;
    cc_config_defaults(&c);
    cr_assert_eq(cc_config_load(&c, path), 0);
    snprintf(want, sizeof(want), "%s/d/a.txt,%s/sub/shards/t_*.bin,/abs/b.txt,%s/sub/c.txt", dir, dir, dir);
    cr_expect_str_eq(c.train, want);
    cr_expect_str_eq(c.val, "/tmp/v.txt"); /* dir is /tmp/catchat-test-XXXXXX */
    snprintf(want, sizeof(want), "%s/sub/runs/x/", dir);
    cr_expect_str_eq(c.out_dir, want);
    /* the config's own path tidied: "sub/../sub" is "sub" */
    snprintf(path, sizeof(path), "%s/./sub/../sub/c.ini", dir);
    cc_config_defaults(&c);
    cr_assert_eq(cc_config_load(&c, path), 0);
    snprintf(want, sizeof(want), "%s/sub/runs/x/", dir);
    cr_expect_str_eq(c.out_dir, want);
}

/* The shipped configs name the repository's data and runs/ from any folder,
 * and as the README's commands print them from the repository's root. */
Test(config, shipped_config_paths_from_the_root)
{
    cc_config c;
    cc_config_defaults(&c);
    cr_assert_eq(cc_config_load(&c, "configs/cpu.ini"), 0);
    cr_expect_str_eq(c.train, "data/fortunes/train.txt");
    cr_expect_str_eq(c.val, "data/fortunes/val.txt");
    cr_expect_str_eq(c.out_dir, "runs/cpu");
    cc_config_defaults(&c);
    cr_assert_eq(cc_config_load(&c, "./configs/../configs/tiny.ini"), 0);
    cr_expect_str_eq(c.out_dir, "runs/tiny");
}

/* --set, text in memory and a checkpoint's stored config are not moved:
 * they are taken from the current folder (or the run's start folder). */
Test(config, set_string_and_json_paths_stay_as_written)
{
    cc_config c;
    cc_config_defaults(&c);
    cr_assert_eq(cc_config_set_arg(&c, "train=../x.txt"), 0);
    cr_expect_str_eq(c.train, "../x.txt");
    cr_assert_eq(cc_config_load_string(&c, "[data]\nval = ../y.txt\n", "some/where/t.ini"), 0);
    cr_expect_str_eq(c.val, "../y.txt");
    cr_assert_eq(cc_config_from_json(&c, "{\"run\":{\"out_dir\":\"../r\"}}", "ck"), 0);
    cr_expect_str_eq(c.out_dir, "../r");
}

/* cc_config_path_origin: the file and line with the value as written and
 * the folder it was taken from; --set and the default with the current
 * folder; a stored config's path with its checkpoint. */
Test(config, path_origin_says_where_and_against_what)
{
    char dir[64], path[256], want[1024], got[CC_ORIGIN_MAX], cwd[512];
    cr_assert_not_null(getcwd(cwd, sizeof(cwd)));
    write_sub_ini(dir, sizeof(dir), path, sizeof(path), "[data]\n\ntrain = y.txt # mine\nval = /abs/v.txt\n");
    cc_config c;
    cc_config_defaults(&c);
    cr_assert_eq(cc_config_load(&c, path), 0);
    cc_config_path_origin(&c, "data", "train", got, sizeof(got));
    snprintf(want, sizeof(want), "[data] train = y.txt in %s:3, resolved against %s/sub (the config's folder)", path, dir);
    cr_expect_str_eq(got, want);
    cc_config_path_origin(&c, "data", "val", got, sizeof(got));
    snprintf(want, sizeof(want), "[data] val = /abs/v.txt in %s:4", path);
    cr_expect_str_eq(got, want);
    cc_config_path_origin(&c, "run", "out_dir", got, sizeof(got));
    snprintf(want, sizeof(want), "the default [run] out_dir, resolved against %s (the current folder)", cwd);
    cr_expect_str_eq(got, want);
    cr_assert_eq(cc_config_set_arg(&c, "train=t.txt"), 0);
    cc_config_path_origin(&c, "data", "train", got, sizeof(got));
    snprintf(want, sizeof(want), "--set train=t.txt, resolved against %s (the current folder)", cwd);
    cr_expect_str_eq(got, want);
    cr_assert_eq(cc_config_from_json(&c, "{\"data\":{\"val\":\"w.txt\"}}", "ck.safetensors"), 0);
    cc_config_path_origin(&c, "data", "val", got, sizeof(got));
    cr_expect_str_eq(got, "the [data] val stored in ck.safetensors");
    cc_config_path_origin(&c, "train", "lr", got, sizeof(got));
    cr_expect_str_eq(got, "");
}

/* A line longer than inih's buffer (198 bytes) holds a list of 12 shards:
 * read whole, its comment cut and its blanks trimmed as any value's, the
 * entries taken from the config's folder; a bad long value is named at its
 * own line. */
Test(config, long_shard_list_on_one_line)
{
    char list[1024] = "", want[2048] = "", dir[64], path[256], ini[1200];
    th_tmpdir(dir, sizeof(dir));
    for (int i = 0; i < 12; i++) {
        size_t u = strlen(list), w = strlen(want);
        snprintf(list + u, sizeof(list) - u, "%sshards/fineweb_train_%06d.bin", i ? "," : "", i);
        snprintf(want + w, sizeof(want) - w, "%s%s/shards/fineweb_train_%06d.bin", i ? "," : "", dir, i);
    }
    cr_assert_gt(strlen(list), 300);
    snprintf(ini, sizeof(ini), "[data]\ntrain = %s    # twelve shards\n[train]\nlr = 2e-3\n", list);
    snprintf(path, sizeof(path), "%s/c.ini", dir);
    th_write_file(path, ini, strlen(ini));
    cc_config c;
    cc_config_defaults(&c);
    cr_assert_eq(cc_config_load(&c, path), 0);
    cr_expect_str_eq(c.train, want);
    cr_expect_eq(c.lr, 2e-3);
    char big[401], rest[600];
    memset(big, '9', 400);
    big[400] = 0;
    snprintf(ini, sizeof(ini), "[train]\n\nmax_steps = %s\n", big);
    snprintf(rest, sizeof(rest), ":3: [train] max_steps: %s is out of range [1, 1000000000000]\n", big);
    expect_refused(ini, rest, NULL);
}

/* cc_config_print_changed: only what differs from the defaults, in the
 * same form as cc_config_print; one line when nothing does. */
Test(config, print_changed_lists_only_what_differs)
{
    cc_config c;
    cc_config_defaults(&c);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cc_config_print_changed(&c, f);
    fclose(f);
    cr_expect_str_eq(text, "(all defaults)\n");
    free(text);
    cr_assert_eq(cc_config_set_arg(&c, "lr=3e-3"), 0);
    cr_assert_eq(cc_config_set_arg(&c, "seed=7"), 0);
    cr_assert_eq(cc_config_set_arg(&c, "out_dir=runs/x"), 0);
    cr_assert_eq(cc_config_set_arg(&c, "d_model=512"), 0); /* the default's own value: not printed */
    f = open_memstream(&text, &len);
    cc_config_print_changed(&c, f);
    fclose(f);
    cr_expect_str_eq(text, "[train]\nlr = 0.003\nseed = 7\n\n[run]\nout_dir = runs/x\n");
    free(text);
}

/* Integer keys take a value written with an exponent or a fraction where it
 * is an exact integer in range; 1.5 is not an integer and 1e30 is out of
 * range, each said so. */
Test(config, integers_written_with_an_exponent)
{
    cc_config c;
    cc_config_defaults(&c);
    cr_expect_eq(cc_config_set_arg(&c, "max_steps=1e12"), 0);
    cr_expect_eq(c.max_steps, 1000000000000L);
    cr_expect_eq(cc_config_set_arg(&c, "warmup_steps=2.0e3"), 0);
    cr_expect_eq(c.warmup_steps, 2000);
    cr_expect_eq(cc_config_set_arg(&c, "batch_size=12.50e1"), 0);
    cr_expect_eq(c.batch_size, 125);
    cr_expect_eq(cc_config_load_string(&c, "[train]\nmax_steps = 1E6\n", "t.ini"), 0);
    cr_expect_eq(c.max_steps, 1000000);
    expect_refused("[train]\nmax_steps = 1.5\n", ":2: [train] max_steps: '1.5' is not an integer\n", NULL);
    expect_refused("[train]\nmax_steps = 1e30\n", ":2: [train] max_steps: 1e30 is out of range [1, 1000000000000]\n", NULL);
    expect_refused("[train]\nmax_steps = 2e12\n", ":2: [train] max_steps: 2000000000000 is out of range [1, 1000000000000]\n",
                   NULL);
    const struct { const char *text; int rc; long long v; } cases[] = {
        { "10e-1", 0, 1 }, { "-3e2", 0, -300 }, { "0.0e999999", 0, 0 }, { "9223372036854775807", 0, LLONG_MAX },
        { "-9223372036854775808", 0, LLONG_MIN }, { "9223372036854775808", -2, 0 }, { "9.3e18", -2, 0 },
        { "1e99999999999", -2, 0 }, { "1.0000000000000000001", -1, 0 }, { "1e-1", -1, 0 }, { "1e", -1, 0 },
        { ".", -1, 0 }, { "0x10", -1, 0 }, { "", -1, 0 }, { "1e3 ", -1, 0 },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        long long v = 0;
        cr_expect_eq(cc_parse_integer(cases[i].text, &v), cases[i].rc, "'%s'", cases[i].text);
        if (cases[i].rc == 0) cr_expect_eq(v, cases[i].v, "'%s' read as %lld", cases[i].text, v);
    }
}

/* Allowed but likely a slip: a note each, nothing refused; the warmup note
 * only for a training run, the threads note not for a GPU run. */
Test(config, notes_for_threads_and_warmup)
{
    cc_config c;
    cc_config_defaults(&c);
    th_stderr_begin();
    cr_expect_eq(cc_config_notes(&c, 1), 0);
    cr_expect_str_eq(th_stderr_end(), "");
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    cr_assert_lt(cores, 4096);
    c.threads = 4096;
    c.warmup_steps = c.max_steps;
    th_stderr_begin();
    cr_expect_eq(cc_config_notes(&c, 1), 2);
    const char *err = th_stderr_end();
    char want[512];
    snprintf(want, sizeof(want), "catchat: note: [run] threads = 4096 is more than the %ld cores of this machine", cores);
    cr_expect(strstr(err, want) == err, "%s", err);
    cr_expect(strstr(err, "\ncatchat: note: [train] warmup_steps = 1000 is not below max_steps = 1000: the whole run is "
                          "warmup, the learning rate reaches lr at the last step and never decays to lr_min\n") != NULL,
              "%s", err);
    th_stderr_begin();
    cr_expect_eq(cc_config_notes(&c, 0), 1);
    th_stderr_end();
    strcpy(c.device, "gpu");
    th_stderr_begin();
    cr_expect_eq(cc_config_notes(&c, 0), 0);
    th_stderr_end();
}
