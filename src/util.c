/* Error reporting, checked allocation and small file helpers. */
#define _POSIX_C_SOURCE 200809L
#include "catchat/util.h"

#include <errno.h>
#include <stdarg.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int cc_error_quiet = 0;

int cc_error(const char *fmt, ...)
{
    if (cc_error_quiet) return -1;
    va_list ap;
    va_start(ap, fmt);
    fputs("catchat: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return -1;
}

void cc_format_duration(char *buf, size_t cap, double seconds)
{
    if (seconds < 0 || !isfinite(seconds)) seconds = 0;
    long s = (long)seconds;
    if (s >= 3600) snprintf(buf, cap, "%ldh%02ldm", s / 3600, s / 60 % 60);
    else snprintf(buf, cap, "%ldm%02lds", s / 60, s % 60);
}

void cc_format_bytes(char *buf, size_t cap, double bytes)
{
    static const char *unit[] = { "bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
    int u = 0;
    while (bytes >= 1024 && u < 6) bytes /= 1024, u++;
    if (u == 0) snprintf(buf, cap, "%.0f bytes", bytes);
    else snprintf(buf, cap, "%.1f %s", bytes, unit[u]);
}

/* The size in human units first: "13107200000 x 4 bytes" does not read as 48.8 GiB. */
static void out_of_memory(const char *what, double bytes)
{
    char h[32];
    cc_format_bytes(h, sizeof(h), bytes);
    cc_error("out of host memory %s %s (%.0f bytes)", what, h, bytes);
    exit(1);
}

void *cc_malloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) out_of_memory("allocating", (double)bytes);
    return p;
}

void *cc_realloc(void *p, size_t bytes)
{
    void *q = realloc(p, bytes ? bytes : 1);
    if (!q) out_of_memory("growing a buffer to", (double)bytes);
    return q;
}

void *cc_calloc(size_t count, size_t size)
{
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) out_of_memory("allocating", (double)count * (double)size);
    return p;
}

uint8_t *cc_read_file(const char *path, size_t *len_out) { return cc_read_file_what(path, NULL, len_out); }

uint8_t *cc_read_file_what(const char *path, const char *what, size_t *len_out)
{
    char role[32] = "";
    if (what) snprintf(role, sizeof(role), "%s ", what);
    FILE *f = fopen(path, "rb");
    if (!f) {
        cc_error("cannot open %s'%s': %s", role, path, strerror(errno));
        return NULL;
    }
    struct stat st = { 0 };
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        cc_error("%s'%s' is %s, not a regular file", role, path, S_ISDIR(st.st_mode) ? "a directory" : "special");
        fclose(f);
        return NULL;
    }
    size_t len = (size_t)st.st_size;
    uint8_t *buf = cc_malloc(len + 1);
    if (len && fread(buf, 1, len, f) != len) {
        cc_error("cannot read %s'%s': %s", role, path, strerror(errno));
        free(buf);
        fclose(f);
        return NULL;
    }
    buf[len] = 0;
    fclose(f);
    *len_out = len;
    return buf;
}

double cc_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double cc_median(double *v, int n)
{
    if (n <= 0) return 0;
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return v[n / 2];
}

int cc_mkdir_p(const char *path)
{
    char buf[CC_PATH_MAX];
    if (strlen(path) >= sizeof(buf)) return cc_error("path too long: '%s'", path);
    strcpy(buf, path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return cc_error("cannot create directory '%s': %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        return cc_error("cannot create directory '%s': %s", buf, strerror(errno));
    return 0;
}

int cc_copy_file(const char *from, const char *to)
{
    char tmp[CC_PATH_MAX + 32];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", to, (long)getpid());
    FILE *in = fopen(from, "rb");
    if (!in) return cc_error("cannot read '%s': %s", from, strerror(errno));
    FILE *out = fopen(tmp, "wb");
    if (!out) {
        fclose(in);
        return cc_error("cannot write '%s': %s", to, strerror(errno));
    }
    char buf[1 << 16];
    size_t n;
    int ok = 1;
    while (ok && (n = fread(buf, 1, sizeof(buf), in)) > 0) ok = fwrite(buf, 1, n, out) == n;
    ok = ok && !ferror(in) && fflush(out) == 0 && fsync(fileno(out)) == 0;
    fclose(in);
    if (fclose(out) != 0) ok = 0;
    if (!ok || rename(tmp, to) != 0) {
        const int e = errno;
        unlink(tmp);
        return cc_error("cannot copy '%s' to '%s': %s", from, to, strerror(e));
    }
    return 0;
}

size_t cc_utf8_seq_len(const unsigned char *s, size_t n)
{
    const unsigned c = s[0];
    const size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    int ok = len > 0 && len <= n && c != 0xC0 && c != 0xC1 && c < 0xF5;
    for (size_t k = 1; ok && k < len; k++) ok = (s[k] & 0xC0) == 0x80;
    if (ok && len > 2) { /* no overlong forms, surrogates or code points past U+10FFFF */
        const unsigned c1 = s[1];
        ok = !(c == 0xE0 && c1 < 0xA0) && !(c == 0xED && c1 >= 0xA0) && !(c == 0xF0 && c1 < 0x90) &&
             !(c == 0xF4 && c1 >= 0x90);
    }
    return ok ? len : 0;
}

/* The bytes of the maximal part of an ill-formed sequence at s (n left):
 * its lead byte and the continuation bytes in the ranges that lead allows
 * (Unicode Table 3-7), stopping at the first outside them; 1 for a byte
 * that leads nothing. */
static size_t ill_formed_part(const unsigned char *s, size_t n)
{
    const unsigned char c = s[0];
    unsigned char lo = 0x80, hi = 0xBF;
    size_t need;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c == 0xE0) need = 2, lo = 0xA0;
    else if (c == 0xED) need = 2, hi = 0x9F;
    else if (c >= 0xE1 && c <= 0xEF) need = 2;
    else if (c == 0xF0) need = 3, lo = 0x90;
    else if (c == 0xF4) need = 3, hi = 0x8F;
    else if (c >= 0xF1 && c <= 0xF3) need = 3;
    else return 1;
    size_t k = 1;
    while (k <= need && k < n && s[k] >= lo && s[k] <= hi) {
        lo = 0x80;
        hi = 0xBF;
        k++;
    }
    return k;
}

char *cc_valid_utf8(const char *bytes, size_t n)
{
    char *out = cc_malloc(n * 3 + 1);
    size_t o = 0;
    const unsigned char *s = (const unsigned char *)(bytes ? bytes : "");
    for (size_t i = 0; i < n;) {
        const size_t len = s[i] ? cc_utf8_seq_len(s + i, n - i) : 0; /* NUL: not in a C string */
        if (len) {
            memcpy(out + o, s + i, len);
            o += len;
            i += len;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i += ill_formed_part(s + i, n - i);
        }
    }
    out[o] = 0;
    return out;
}

void cc_format_real(char *buf, size_t cap, double v)
{
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) return;
    }
}

void cc_hex_encode(const char *bytes, char *out, size_t cap)
{
    size_t n = 0;
    if (cap) out[0] = 0;
    for (const unsigned char *p = (const unsigned char *)bytes; *p && n + 2 < cap; p++)
        n += (size_t)snprintf(out + n, cap - n, "%02x", *p);
}

int cc_hex_decode(const char *hex, char *out, size_t cap)
{
    const size_t n = strlen(hex);
    if (!n || n % 2 || n / 2 >= cap || strspn(hex, "0123456789abcdefABCDEF") != n) return -1;
    for (size_t i = 0; i < n / 2; i++) {
        const char pair[3] = { hex[2 * i], hex[2 * i + 1], 0 };
        out[i] = (char)strtoul(pair, NULL, 16);
        if (!out[i]) return -1;
    }
    out[n / 2] = 0;
    return 0;
}

const char *cc_signal_name(int sig)
{
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : sig == SIGHUP ? "SIGHUP" : sig == SIGUSR1 ? "SIGUSR1" : "a signal";
}
