/* Shared fixtures of the test suite: the tiny config, a scratch folder,
 * a generated English-like text file, and error measures. */
#ifndef CATCHAT_TEST_HELPERS_H
#define CATCHAT_TEST_HELPERS_H

#include <stddef.h>
#include "catchat/config.h"
#include "catchat/layout.h"

/* cc_config_tiny plus a short training schedule (20 steps, 5 of warmup), on the CPU. */
void th_tiny_config(cc_config *c);
/* A fresh folder under /tmp; returns its path (static buffer per call site). */
void th_tmpdir(char *out, size_t cap);
/* The path of `name` inside a fresh th_tmpdir folder (the file is not made). */
void th_tmp_path(char *out, size_t cap, const char *name);
/* Write `bytes` bytes of repetitive English text to path. */
void th_write_text(const char *path, size_t bytes, unsigned seed);
void th_write_file(const char *path, const void *data, size_t len);
/* ‖a − b‖₂ / max(‖b‖₂, tiny); NaN anywhere gives +inf. */
double th_rel_err_f(const float *a, const float *b, size_t n);
double th_rel_err_d(const double *a, const double *b, size_t n);
/* Random ints in [0, V) and targets (some -1 when ignore_every > 0). */
void th_random_tokens(int *x, int *y, int n, int V, unsigned seed, int ignore_every);
/* Save the th_tiny_config model with zero weights to path, with run state at
 * `step` when step >= 0 and none otherwise; cc_checkpoint_save's status. */
int th_save_tiny_checkpoint(const char *path, long step);
/* Capture stderr (file descriptor 2) from th_stderr_begin to th_stderr_end,
 * which returns what was written (static buffer, at most 16 KiB kept). Works
 * with or without cr_redirect_stderr. */
void th_stderr_begin(void);
const char *th_stderr_end(void);
/* Whole file into a malloc'd NUL-terminated buffer (NULL if unreadable). */
char *th_read_file(const char *path, size_t *len);

#endif
