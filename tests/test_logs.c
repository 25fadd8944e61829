/* Run logs on resume: CSV files and TensorBoard event files cut back to the
 * checkpoint's step, so no step appears twice; event files never reused. */
#define _DEFAULT_SOURCE
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "catchat/telemetry.h"
#include "catchat/tfevents.h"
#include "helpers.h"

/* cc_csv_truncate_after keeps the header and the rows of step <= N,
 * drops later rows and a torn last row, keeps the file's own header when
 * given none, and leaves a missing file missing. */
Test(logs, csv_truncate_after)
{
    char dir[256], path[512];
    th_tmpdir(dir, sizeof(dir));
    snprintf(path, sizeof(path), "%s/grad_norms.csv", dir);
    const char *rows = "step,embed,gru.0\n1,0.5,0.25\n2,0.5,0.25\n3,0.5,0.25\n4,0.5,0.25\n5,0.5,0.25\n"
                       "6,0.5,0.25\n7,0.5,0.25\n8,0.5,0.25\n";
    th_write_file(path, rows, strlen(rows));
    cc_csv_kept kept;
    cr_assert_eq(cc_csv_truncate_after(path, NULL, 6, &kept), 0);
    cr_expect(kept.found && kept.rows == 6 && kept.last_step == 6 && !kept.torn, "kept %d %ld %ld %d", kept.found,
              kept.rows, kept.last_step, kept.torn);
    char *got = th_read_file(path, NULL);
    cr_expect_str_eq(got, "step,embed,gru.0\n1,0.5,0.25\n2,0.5,0.25\n3,0.5,0.25\n4,0.5,0.25\n5,0.5,0.25\n"
                          "6,0.5,0.25\n");
    free(got);

    const char *torn = "old,header\n1,a\n2,b\n3,";
    th_write_file(path, torn, strlen(torn));
    cr_assert_eq(cc_csv_truncate_after(path, "step,x\n", 10, &kept), 0);
    cr_expect(kept.found && kept.rows == 2 && kept.last_step == 2 && kept.torn, "a torn row not reported");
    got = th_read_file(path, NULL);
    cr_expect_str_eq(got, "step,x\n1,a\n2,b\n", "torn last row kept or header not replaced");
    free(got);

    snprintf(path, sizeof(path), "%s/none.csv", dir);
    cr_expect_eq(cc_csv_truncate_after(path, "step\n", 3, &kept), 0);
    cr_expect(!kept.found && kept.last_step == -1, "a missing file reported as found");
    cr_expect_neq(access(path, F_OK), 0, "a missing file was created");
}

/* Parse a TensorBoard event file: records [u64 len][u32 crc][data][u32 crc],
 * checking both masked CRCs; counts[s] += 1 for each Event.step s < 32.
 * Returns the number of records, -1 if the file is not whole. */
static uint32_t masked(const uint8_t *p, size_t n)
{
    const uint32_t c = cc_crc32c(p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}
static uint32_t le32(const uint8_t *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t varint(const uint8_t *p, size_t n, size_t *i)
{
    uint64_t v = 0;
    for (int sh = 0; *i < n && sh < 64; sh += 7) {
        v |= (uint64_t)(p[*i] & 0x7f) << sh;
        if (!(p[(*i)++] & 0x80)) break;
    }
    return v;
}
static long parse_events(const char *path, int counts[32])
{
    size_t len, i = 0;
    uint8_t *b = (uint8_t *)th_read_file(path, &len);
    long records = 0;
    while (b && i < len) {
        if (len - i < 16) break;
        uint64_t n = 0;
        for (int k = 7; k >= 0; k--) n = n << 8 | b[i + k];
        if (n > len - i - 16 || masked(b + i, 8) != le32(b + i + 8) || masked(b + i + 12, n) != le32(b + i + 12 + n))
            break;
        const uint8_t *ev = b + i + 12;
        long step = -1;
        for (size_t j = 0; j < n;) {
            const uint64_t key = varint(ev, n, &j);
            const int wire = (int)(key & 7);
            if (wire == 0) {
                const uint64_t v = varint(ev, n, &j);
                if (key >> 3 == 2) step = (long)v;
            } else if (wire == 1) j += 8;
            else if (wire == 5) j += 4;
            else if (wire == 2) j += varint(ev, n, &j);
            else break;
        }
        if (step >= 0 && step < 32) counts[step]++;
        records++;
        i += 16 + n;
    }
    free(b);
    return i == len ? records : -1;
}

/* The event files in dir (up to 4), full paths. */
static int event_files(const char *dir, char out[][600])
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d)) && n < 4)
        if (strncmp(e->d_name, "events.out.tfevents.", 20) == 0) snprintf(out[n++], 600, "%s/%s", dir, e->d_name);
    if (d) closedir(d);
    return n;
}

/* cc_tfevents_truncate_after drops the events of step > N (and a torn
 * tail), keeping the file's version event and steps 1..N once each. */
Test(logs, tfevents_truncate_after)
{
    char dir[256], files[4][600];
    th_tmpdir(dir, sizeof(dir));
    cc_tfevents t;
    cr_assert_eq(cc_tfevents_open(&t, dir), 0);
    const char *tags[2] = { "loss", "lr" };
    for (long s = 1; s <= 10; s++) {
        const float v[2] = { 5.0f / (float)s, 1e-3f };
        cr_assert_eq(cc_tfevents_scalars(&t, s, tags, v, 2), 0);
    }
    cc_tfevents_close(&t);
    cr_assert_eq(event_files(dir, files), 1);
    FILE *f = fopen(files[0], "ab"); /* a record torn by a crash */
    fwrite("\x30\0\0\0\0\0\0\0\x01\x02\x03\x04\x05\x06", 1, 14, f);
    fclose(f);

    cr_assert_eq(cc_tfevents_truncate_after(dir, 6), 0);
    cr_assert_eq(event_files(dir, files), 1, "a temporary file was left behind");
    int counts[32] = { 0 };
    cr_expect_eq(parse_events(files[0], counts), 7, "want the version event and steps 1..6, whole");
    cr_expect_eq(counts[0], 1, "the version event");
    for (int s = 1; s <= 6; s++) cr_expect_eq(counts[s], 1, "step %d", s);
    for (int s = 7; s < 32; s++) cr_expect_eq(counts[s], 0, "step %d kept", s);
}

/* Two cc_tfevents_open in one second make two files, and the first one's
 * events survive: a name from the second alone would have the second open
 * truncate the first file. */
Test(logs, tfevents_open_twice_same_second)
{
    char dir[256], files[4][600];
    time_t t0, t1;
    cc_tfevents a, b;
    const char *tag = "loss";
    const float one = 1;
    for (int attempt = 0; attempt < 5; attempt++) { /* both opens within one second */
        th_tmpdir(dir, sizeof(dir));
        t0 = time(NULL);
        cr_assert_eq(cc_tfevents_open(&a, dir), 0);
        cr_assert_eq(cc_tfevents_scalars(&a, 1, &tag, &one, 1), 0);
        cr_assert_eq(cc_tfevents_open(&b, dir), 0);
        cr_assert_eq(cc_tfevents_scalars(&b, 2, &tag, &one, 1), 0);
        cc_tfevents_close(&a);
        cc_tfevents_close(&b);
        t1 = time(NULL);
        if (t0 == t1) break;
    }
    cr_assert_eq(t0, t1, "could not open twice within one second");
    cr_assert_eq(event_files(dir, files), 2);
    int counts[32] = { 0 };
    cr_expect_eq(parse_events(files[0], counts), 2);
    cr_expect_eq(parse_events(files[1], counts), 2);
    cr_expect_eq(counts[1], 1, "the first file's step lost");
    cr_expect_eq(counts[2], 1);
}
