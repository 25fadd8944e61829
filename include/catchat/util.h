/* Small helpers shared by every part of catchat: error reporting, checked
 * allocation, file reading. Errors are one line on stderr; the caller returns
 * a non-zero status instead of exiting so that tests can exercise failures. */
#ifndef CATCHAT_UTIL_H
#define CATCHAT_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define CC_PATH_MAX 1024

/* Print "catchat: <message>" as one line on stderr. Always returns -1 so an
 * error can be reported and propagated in one statement: return cc_error(...). */
int cc_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Set by the fuzz harnesses: errors are still returned, not printed. */
extern int cc_error_quiet;

/* The name of a signal that stops a run ("SIGINT", "SIGTERM", "SIGHUP",
 * "SIGUSR1"; "a signal" for any other): a constant string, safe in a
 * signal handler. */
const char *cc_signal_name(int sig);

/* Checked allocation: exits with a one-line message naming the size. */
void *cc_malloc(size_t bytes);
void *cc_calloc(size_t count, size_t size);
void *cc_realloc(void *p, size_t bytes);
/* A byte count in human units: "512 bytes", "1.5 KiB", "48.8 GiB". */
void cc_format_bytes(char *buf, size_t cap, double bytes);
/* A duration as 1h02m or 3m07s (negative or non-finite: 0m00s). */
void cc_format_duration(char *buf, size_t cap, double seconds);

/* Whole file into memory (NUL-terminated for convenience). Returns NULL and
 * reports a one-line error naming the path on failure. */
uint8_t *cc_read_file(const char *path, size_t *len_out);
/* The same, with `what` ("config", "checkpoint", ...) naming the file's role
 * in the error; a directory or other non-regular file is refused. */
uint8_t *cc_read_file_what(const char *path, const char *what, size_t *len_out);

/* Milliseconds from a monotonic clock. */
double cc_now_ms(void);
/* The median of v[0..n) (the upper one of an even n; 0 for n = 0), sorting v in place. */
double cc_median(double *v, int n);

/* Create a directory and its parents; 0 on success. */
int cc_mkdir_p(const char *path);

/* Copy a file: written to `to`.tmp.<pid>, flushed, then renamed over `to`
 * (a crash leaves `to` as it was). 0 on success, one-line error otherwise. */
int cc_copy_file(const char *from, const char *to);

/* n bytes as valid UTF-8 (malloc'd, NUL-terminated): each maximal part of
 * an ill-formed sequence (a lead byte and the continuation bytes it may
 * take, up to the first it may not; a lone byte, NUL included) becomes one
 * U+FFFD, as the Unicode Standard recommends (section 3.9) and Python's
 * decode(errors="replace") and browsers do. For JSON and TensorBoard text,
 * which take only UTF-8. */
char *cc_valid_utf8(const char *bytes, size_t n);
/* Length of the valid UTF-8 sequence at s (n bytes left, n >= 1): 1 to 4,
 * or 0 for an invalid one (a stray byte, overlong, a surrogate, past U+10FFFF). */
size_t cc_utf8_seq_len(const unsigned char *s, size_t n);

/* A NUL-terminated byte string as lowercase hex into out (cap bytes; cut
 * short, whole pairs only, where it does not fit). For paths that are not
 * UTF-8, which JSON cannot hold as they are. */
void cc_hex_encode(const char *bytes, char *out, size_t cap);
/* The bytes of hex text into out (NUL-terminated); -1 for text that is empty,
 * not hex pairs, too long for cap, or holds a NUL byte (it would end a path). */
int cc_hex_decode(const char *hex, char *out, size_t cap);

/* Shortest "%g" text that parses back to the same double. */
void cc_format_real(char *buf, size_t cap, double v);

#endif
