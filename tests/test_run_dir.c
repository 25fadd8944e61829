/* out_dir bookkeeping: which files are a run's, what an earlier run left,
 * and whether two paths name the same file. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "catchat/checkpoint.h"
#include "catchat/run_dir.h"
#include "helpers.h"

static void touch(const char *dir, const char *name)
{
    char p[600];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    th_write_file(p, "x\n", 2);
}

static int exists(const char *dir, const char *name)
{
    char p[600];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

/* cc_same_file sees one file through different spellings, and a file
 * not written yet through ../ from a sibling folder; different names differ. */
Test(run_dir, same_file)
{
    char dir[256], a[600], b[600], sub[600];
    th_tmpdir(dir, sizeof(dir));
    snprintf(sub, sizeof(sub), "%s/sub", dir);
    cr_assert_eq(mkdir(sub, 0700), 0);
    touch(dir, "data.txt");
    snprintf(a, sizeof(a), "%s/data.txt", dir);
    snprintf(b, sizeof(b), "%s/sub/../data.txt", dir);
    cr_expect_eq(cc_same_file(a, b), 1);
    snprintf(b, sizeof(b), "%s/./sub/../other.txt", dir);
    cr_expect_eq(cc_same_file(a, b), 0);
    snprintf(a, sizeof(a), "%s/checkpoint.safetensors", dir); /* neither exists yet */
    snprintf(b, sizeof(b), "%s/sub/../checkpoint.safetensors", dir);
    cr_expect_eq(cc_same_file(a, b), 1);
    snprintf(b, sizeof(b), "%s/sub/checkpoint.safetensors", dir);
    cr_expect_eq(cc_same_file(a, b), 0);
}

/* cc_run_dir_probe reads the checkpoint's step from its metadata,
 * reports a folder with logs but no checkpoint through first_log, and finds
 * nothing in a folder of other files or a missing one. */
Test(run_dir, probe)
{
    char dir[256], path[600];
    th_tmpdir(dir, sizeof(dir));
    snprintf(path, sizeof(path), "%s/%s", dir, CC_CHECKPOINT_NAME);
    cr_assert_eq(th_save_tiny_checkpoint(path, 17), 0);
    cc_run_dir_info info;
    cc_run_dir_probe(dir, &info);
    cr_expect_eq(info.has_checkpoint, 1);
    cr_expect_eq(info.checkpoint_step, 17);
    cr_expect_str_eq(info.first_log, "");

    th_tmpdir(dir, sizeof(dir)); /* logs only */
    touch(dir, "notes.txt");
    touch(dir, "telemetry.csv");
    cc_run_dir_probe(dir, &info);
    cr_expect_eq(info.has_checkpoint, 0);
    cr_expect_eq(info.checkpoint_step, -1);
    cr_expect_str_eq(info.first_log, "telemetry.csv");

    th_tmpdir(dir, sizeof(dir)); /* a user's files and a leftover temporary: no run */
    touch(dir, "notes.txt");
    touch(dir, "checkpoint.safetensors.tmp.123");
    cc_run_dir_probe(dir, &info);
    cr_expect_eq(info.has_checkpoint, 0);
    cr_expect_str_eq(info.first_log, "");
    cc_run_dir_probe("/nonexistent/run", &info);
    cr_expect_eq(info.has_checkpoint, 0);
    cr_expect_eq(info.checkpoint_step, -1);
    cr_expect_str_eq(info.first_log, "");
}

/* cc_run_dir_clear removes what a run writes and nothing else. */
Test(run_dir, clear_removes_only_run_files)
{
    char dir[256];
    th_tmpdir(dir, sizeof(dir));
    const char *run[] = { "checkpoint.safetensors", "telemetry.csv", "grad_norms.csv", "sample.txt",
                          "nonfinite_batch.safetensors", "events.out.tfevents.1700000000.catchat.42.0" };
    const char *user[] = { "notes.txt", "train.txt", "checkpoint.safetensors.bak", "telemetry.csv.old" };
    for (int i = 0; i < 6; i++) touch(dir, run[i]);
    for (int i = 0; i < 4; i++) touch(dir, user[i]);
    cr_assert_eq(cc_run_dir_clear(dir), 0);
    for (int i = 0; i < 6; i++) cr_expect(!exists(dir, run[i]), "%s kept", run[i]);
    for (int i = 0; i < 4; i++) cr_expect(exists(dir, user[i]), "%s removed", user[i]);
}

/* cc_run_dir_clear_temporaries removes <run file>.tmp.<pid> left by a
 * killed write, not the run files themselves nor a user's *.tmp.* files. */
Test(run_dir, clear_temporaries)
{
    char dir[256];
    th_tmpdir(dir, sizeof(dir));
    const char *gone[] = { "checkpoint.safetensors.tmp.123", "telemetry.csv.tmp.77" };
    const char *kept[] = { "notes.txt.tmp.1", "checkpoint.safetensors", "telemetry.csv", "notes.txt" };
    for (int i = 0; i < 2; i++) touch(dir, gone[i]);
    for (int i = 0; i < 4; i++) touch(dir, kept[i]);
    cc_run_dir_clear_temporaries(dir);
    for (int i = 0; i < 2; i++) cr_expect(!exists(dir, gone[i]), "%s kept", gone[i]);
    for (int i = 0; i < 4; i++) cr_expect(exists(dir, kept[i]), "%s removed", kept[i]);
}
