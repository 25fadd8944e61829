/* The preflight's memory of passes (src/preflight_cache.c): a pass is found
 * again only under the same GPU, driver, build and kernel path; a missing,
 * cut or foreign file is "not passed"; many records keep the file small. The
 * checks themselves need a GPU (catchat train on a GPU, docs/gpus.md). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include "catchat/preflight.h"
#include "catchat/version.h"
#include "helpers.h"

static const cc_preflight_id BASE = {
    "NVIDIA H200 (sm_90)", "580.65.06 (CUDA 13.0)", "0.7.0", "bc9cfbb4 for 80,86,89,90,100,120",
    "D=512 L=3 H=8 W=128 V=256 B=64; cluster recurrence, 4 lanes of 16 sequences",
};

static void key_of(char *buf, size_t len, const cc_preflight_id *id) { cc_preflight_key(buf, len, id); }

static void cache_file(char *out, size_t len, const char *dir)
{
    snprintf(out, len, "%s/%s", dir, CC_PREFLIGHT_CACHE_FILE);
}

static int count_lines(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int lines = 0, c;
    while ((c = fgetc(f)) != EOF) lines += c == '\n';
    fclose(f);
    return lines;
}

/* The second run on the same machine finds the pass; a changed driver,
 * build, version, GPU or path does not. */
Test(preflight, a_pass_holds_only_for_the_same_machine_and_build)
{
    char dir[256], key[2048], other[2048];
    th_tmpdir(dir, sizeof(dir));
    strncat(dir, "/cache/catchat", sizeof(dir) - strlen(dir) - 1); /* created on the first record */
    key_of(key, sizeof(key), &BASE);
    cr_expect_eq(cc_preflight_cache_has(dir, key), 0, "nothing recorded yet");
    cr_assert_eq(cc_preflight_cache_add(dir, key), 0);
    cr_expect_eq(cc_preflight_cache_has(dir, key), 1, "the second run skips the preflight");
    const char *changed[][2] = {
        { "driver", "580.82.07 (CUDA 13.0)" }, { "build", "0123abcd for 80,86,89,90,100,120" },
        { "version", "0.7.1" },                { "gpu", "NVIDIA GeForce RTX 4090 (sm_89)" },
        { "path", "D=512 L=3 H=8 W=128 V=256 B=64; persistent recurrence, 1 lane of 64 sequences" },
    };
    for (size_t i = 0; i < sizeof(changed) / sizeof(changed[0]); i++) {
        cc_preflight_id id = BASE;
        const char *field = changed[i][0], *value = changed[i][1];
        if (!strcmp(field, "driver")) id.driver = value;
        else if (!strcmp(field, "build")) id.build = value;
        else if (!strcmp(field, "version")) id.version = value;
        else if (!strcmp(field, "gpu")) id.gpu = value;
        else id.path = value;
        key_of(other, sizeof(other), &id);
        cr_expect_eq(cc_preflight_cache_has(dir, other), 0, "a changed %s runs the preflight again", field);
        cr_assert_eq(cc_preflight_cache_add(dir, other), 0);
        cr_expect_eq(cc_preflight_cache_has(dir, other), 1, "and then remembers the pass under the new %s", field);
    }
    cr_expect_eq(cc_preflight_cache_has(dir, key), 1, "the first pass is still remembered");
}

/* A key is one line: a tab or line end in a field (a GPU name, say) cannot
 * split it or make it match another's. */
Test(preflight, the_key_is_one_line)
{
    cc_preflight_id id = BASE;
    id.gpu = "odd\tname\nwith breaks";
    char key[2048];
    key_of(key, sizeof(key), &id);
    cr_expect_null(strchr(key, '\n'));
    cr_expect(strstr(key, "gpu=odd name with breaks") != NULL, "%s", key);
    cr_expect(strstr(key, "\tdriver=580.65.06 (CUDA 13.0)\t") != NULL, "%s", key);
}

/* What is not a whole record is no pass: a missing dir, a line cut by a
 * crash, a key that is only a prefix of the recorded one, a file of junk. */
Test(preflight, damaged_or_foreign_files_are_not_passes)
{
    char dir[256], path[600], key[2048], text[4096];
    th_tmpdir(dir, sizeof(dir));
    key_of(key, sizeof(key), &BASE);
    cr_expect_eq(cc_preflight_cache_has(NULL, key), 0);
    cr_expect_eq(cc_preflight_cache_has("/nonexistent/catchat", key), 0);
    cache_file(path, sizeof(path), dir);
    snprintf(text, sizeof(text), "1764547200\t%s", key); /* no line end: cut short */
    th_write_file(path, text, strlen(text));
    cr_expect_eq(cc_preflight_cache_has(dir, key), 0, "a record cut short is no pass");
    snprintf(text, sizeof(text), "1764547200\t%s extra\n", key);
    th_write_file(path, text, strlen(text));
    cr_expect_eq(cc_preflight_cache_has(dir, key), 0, "a longer key is another key");
    snprintf(text, sizeof(text), "\x01\x02 junk without tabs\n%s\n", key); /* the key, but not as a record */
    th_write_file(path, text, strlen(text));
    cr_expect_eq(cc_preflight_cache_has(dir, key), 0);
    cr_assert_eq(cc_preflight_cache_add(dir, key), 0, "a record appends to whatever is there");
    cr_expect_eq(cc_preflight_cache_has(dir, key), 1);
    /* after a record cut short by a crash, the next one still starts its own line */
    snprintf(text, sizeof(text), "1764547200\t%s", key);
    th_write_file(path, text, strlen(text) - 5);
    cr_assert_eq(cc_preflight_cache_add(dir, key), 0);
    cr_expect_eq(cc_preflight_cache_has(dir, key), 1, "the record after a cut line is found");
}

/* The file stays small: past 256 records it keeps the newest half, the
 * newest pass among them. */
Test(preflight, many_records_keep_the_file_small)
{
    char dir[256], path[600], key[2048];
    th_tmpdir(dir, sizeof(dir));
    cc_preflight_id id = BASE;
    char p[64];
    for (int i = 0; i < 300; i++) {
        snprintf(p, sizeof(p), "path %d", i);
        id.path = p;
        key_of(key, sizeof(key), &id);
        cr_assert_eq(cc_preflight_cache_add(dir, key), 0);
    }
    cr_expect_eq(cc_preflight_cache_has(dir, key), 1, "the newest record is kept");
    id.path = "path 0";
    key_of(key, sizeof(key), &id);
    cr_expect_eq(cc_preflight_cache_has(dir, key), 0, "the oldest is dropped");
    cache_file(path, sizeof(path), dir);
    cr_expect_leq(count_lines(path), 257, "%d lines", count_lines(path));
}

/* A directory that cannot be made is an error naming it, and nothing else
 * breaks: the pass is simply not remembered. */
Test(preflight, an_unwritable_cache_is_a_one_line_error)
{
    char dir[256], blocker[600], key[2048];
    th_tmpdir(dir, sizeof(dir));
    snprintf(blocker, sizeof(blocker), "%s/file", dir);
    th_write_file(blocker, "x", 1);
    strncat(blocker, "/catchat", sizeof(blocker) - strlen(blocker) - 1); /* a folder under a file */
    key_of(key, sizeof(key), &BASE);
    cr_expect_neq(cc_preflight_cache_add(blocker, key), 0);
    cr_expect_eq(cc_preflight_cache_has(blocker, key), 0);
}

/* The build id names this build: hex from the linker's note. */
Test(preflight, the_build_id_is_the_linkers)
{
    char id[96];
    cc_build_id(id, sizeof(id));
    cr_expect_gt(strlen(id), 8);
    cr_expect_eq(strspn(id, "0123456789abcdef"), strlen(id), "%s", id);
}

/* A pass run again (--preflight always) adds no second record. */
Test(preflight, one_record_a_key)
{
    char dir[256], path[600], key[2048];
    th_tmpdir(dir, sizeof(dir));
    key_of(key, sizeof(key), &BASE);
    for (int i = 0; i < 3; i++) cr_assert_eq(cc_preflight_cache_add(dir, key), 0);
    cache_file(path, sizeof(path), dir);
    cr_expect_eq(count_lines(path), 2, "the header and one record, not %d lines", count_lines(path));
}
