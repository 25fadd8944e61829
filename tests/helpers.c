#define _DEFAULT_SOURCE
#define _XOPEN_SOURCE 700
#include "helpers.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ftw.h>
#include <unistd.h>
#include "catchat/checkpoint.h"
#include "catchat/rng.h"

void th_tiny_config(cc_config *c)
{
    cc_config_tiny(c);
    c->max_steps = 20;
    c->warmup_steps = 5;
    c->eval_interval = 10;
    c->eval_batches = 2;
    c->checkpoint_interval = 10;
    strcpy(c->device, "cpu");
}

/* Scratch folders are removed when the test process exits. */
#define MAX_TMPDIRS 32
static char tmpdirs[MAX_TMPDIRS][64];
static int n_tmpdirs;

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static void remove_tmpdirs(void)
{
    for (int i = 0; i < n_tmpdirs; i++) nftw(tmpdirs[i], remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

void th_tmpdir(char *out, size_t cap)
{
    snprintf(out, cap, "/tmp/catchat-test-XXXXXX");
    if (!mkdtemp(out)) abort();
    if (n_tmpdirs == 0) atexit(remove_tmpdirs);
    if (n_tmpdirs < MAX_TMPDIRS) snprintf(tmpdirs[n_tmpdirs++], sizeof(tmpdirs[0]), "%s", out);
}

void th_tmp_path(char *out, size_t cap, const char *name)
{
    char dir[64];
    th_tmpdir(dir, sizeof(dir));
    snprintf(out, cap, "%s/%s", dir, name);
}

void th_write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, len, f) != len) abort();
    fclose(f);
}

void th_write_text(const char *path, size_t bytes, unsigned seed)
{
    static const char *words[] = { "the ", "cat ", "sat ", "on ", "a ", "mat ", "and ", "dog ",
                                   "ran ", "far. ", "It ", "was ", "good.\n", "we ", "see " };
    cc_rng r;
    cc_rng_seed(&r, seed);
    char *buf = malloc(bytes);
    size_t n = 0;
    while (n < bytes) {
        const char *w = words[cc_rng_below(&r, sizeof(words) / sizeof(words[0]))];
        for (size_t i = 0; w[i] && n < bytes; i++) buf[n++] = w[i];
    }
    th_write_file(path, buf, bytes);
    free(buf);
}

double th_rel_err_f(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i])) return INFINITY;
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return sqrt(num) / fmax(sqrt(den), 1e-30);
}

double th_rel_err_d(const double *a, const double *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i])) return INFINITY;
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return sqrt(num) / fmax(sqrt(den), 1e-300);
}

void th_random_tokens(int *x, int *y, int n, int V, unsigned seed, int ignore_every)
{
    cc_rng r;
    cc_rng_seed(&r, seed);
    for (int i = 0; i < n; i++) {
        x[i] = (int)cc_rng_below(&r, (uint64_t)V);
        y[i] = (int)cc_rng_below(&r, (uint64_t)V);
        if (ignore_every > 0 && i % ignore_every == ignore_every - 1) y[i] = -1;
    }
}

int th_save_tiny_checkpoint(const char *path, long step)
{
    cc_config c;
    th_tiny_config(&c);
    const cc_dims d = cc_dims_from_config(&c);
    cc_layout lay;
    cc_layout_build(&lay, &d);
    float *p = calloc(lay.total, sizeof(float));
    cc_run_state st = { 0 };
    st.step = step;
    st.scaler.scale = 1;
    const int rc = cc_checkpoint_save(path, &c, &lay, p, NULL, NULL, step >= 0 ? &st : NULL);
    free(p);
    return rc;
}

static FILE *capture_file;
static int saved_stderr = -1;

void th_stderr_begin(void)
{
    fflush(stderr);
    capture_file = tmpfile();
    saved_stderr = dup(2);
    if (!capture_file || saved_stderr < 0 || dup2(fileno(capture_file), 2) < 0) abort();
}

const char *th_stderr_end(void)
{
    static char text[16384];
    fflush(stderr);
    if (dup2(saved_stderr, 2) < 0) abort();
    close(saved_stderr);
    rewind(capture_file);
    const size_t n = fread(text, 1, sizeof(text) - 1, capture_file);
    text[n] = 0;
    fclose(capture_file);
    return text;
}

char *th_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap + 1);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) buf = realloc(buf, (cap *= 2) + 1);
    }
    fclose(f);
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}
