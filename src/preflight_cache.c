/* The preflight's memory of passes (preflight.h): one line per GPU, driver,
 * build and kernel path that passed, in <cache dir>/preflight.txt. A line is
 * written whole with one write() to a file opened for appending, so ranks
 * of one machine may record at once; a file grown past CACHE_MAX_LINES is
 * rewritten with its newest half through a temporary file and a rename, so
 * a crash leaves the old file. Anything unreadable counts as "not passed":
 * the worst a damaged cache can do is run the preflight again. */
#define _POSIX_C_SOURCE 200809L
#include "catchat/preflight.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "catchat/util.h"

#define CACHE_MAX_LINES 256

/* One field of the key: tabs and line ends (which separate fields and
 * lines) become spaces. */
static size_t put_field(char *buf, size_t len, size_t at, const char *name, const char *value)
{
    if (at >= len) return at;
    int n = snprintf(buf + at, len - at, "%s%s=", at ? "\t" : "", name);
    if (n < 0) return at;
    at += (size_t)n;
    for (const char *c = value ? value : ""; *c && at + 1 < len; c++)
        buf[at++] = *c == '\t' || *c == '\n' || *c == '\r' ? ' ' : *c;
    if (at < len) buf[at] = 0;
    return at;
}

void cc_preflight_key(char *buf, size_t len, const cc_preflight_id *id)
{
    if (!len) return;
    buf[0] = 0;
    size_t at = 0;
    at = put_field(buf, len, at, "gpu", id->gpu);
    at = put_field(buf, len, at, "driver", id->driver);
    at = put_field(buf, len, at, "catchat", id->version);
    at = put_field(buf, len, at, "build", id->build);
    put_field(buf, len, at, "path", id->path);
}

static void cache_path(char *out, size_t len, const char *dir)
{
    snprintf(out, len, "%s/%s", dir, CC_PREFLIGHT_CACHE_FILE);
}

/* The file's lines (malloc'd text, NUL-terminated), or NULL. */
static char *read_cache(const char *dir, size_t *len)
{
    char path[CC_PATH_MAX + 32];
    cache_path(path, sizeof(path), dir);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *text = cc_malloc(cap);
    size_t got;
    while ((got = fread(text + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 == cap) text = cc_realloc(text, cap *= 2);
    }
    fclose(f);
    text[n] = 0;
    *len = n;
    return text;
}

/* A record is "<unix time>\t<key>\n"; the key must match to the line's end. */
int cc_preflight_cache_has(const char *dir, const char *key)
{
    if (!dir || !*dir) return 0;
    size_t n = 0;
    char *text = read_cache(dir, &n);
    if (!text) return 0;
    const size_t klen = strlen(key);
    int found = 0;
    for (char *line = text; *line && !found;) {
        char *end = strchr(line, '\n');
        if (!end) break; /* a line cut short (a crash mid-write) is no record */
        const char *tab = memchr(line, '\t', (size_t)(end - line));
        found = tab && line[0] != '#' && (size_t)(end - tab - 1) == klen && memcmp(tab + 1, key, klen) == 0;
        line = end + 1;
    }
    free(text);
    return found;
}

/* The newest half of a file past CACHE_MAX_LINES, through a temporary file. */
static void trim_cache(const char *dir)
{
    size_t n = 0;
    char *text = read_cache(dir, &n);
    if (!text) return;
    int lines = 0;
    for (size_t i = 0; i < n; i++) lines += text[i] == '\n';
    if (lines <= CACHE_MAX_LINES) {
        free(text);
        return;
    }
    const char *keep = text;
    for (int skip = lines - CACHE_MAX_LINES / 2; skip > 0 && keep; skip--) {
        keep = strchr(keep, '\n');
        if (keep) keep++;
    }
    char path[CC_PATH_MAX + 32], tmp[CC_PATH_MAX + 64];
    cache_path(path, sizeof(path), dir);
    snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (f && keep) {
        /* whole lines only (keep starts one; the text ends with one unless a write was cut) */
        const char *end = strrchr(keep, '\n');
        const size_t n_keep = end ? (size_t)(end - keep) + 1 : 0;
        const int ok = fputs(CC_PREFLIGHT_CACHE_HEADER, f) >= 0 && fwrite(keep, 1, n_keep, f) == n_keep;
        if (fclose(f) == 0 && ok) rename(tmp, path);
        else remove(tmp);
    } else if (f) {
        fclose(f);
        remove(tmp);
    }
    free(text);
}

int cc_preflight_cache_add(const char *dir, const char *key)
{
    if (!dir || !*dir || cc_preflight_cache_has(dir, key)) return 0; /* one record a key */
    if (cc_mkdir_p(dir) != 0) return -1;
    char path[CC_PATH_MAX + 32];
    cache_path(path, sizeof(path), dir);
    const int fd = open(path, O_RDWR | O_CREAT | O_APPEND, 0644);
    if (fd < 0) return cc_error("preflight: cannot record the pass in %s: %s", path, strerror(errno));
    const size_t cap = strlen(CC_PREFLIGHT_CACHE_HEADER) + strlen(key) + 64;
    char *line = cc_malloc(cap);
    int len = 0;
    const off_t size = lseek(fd, 0, SEEK_END);
    char last = '\n';
    if (size == 0) len = snprintf(line, cap, "%s", CC_PREFLIGHT_CACHE_HEADER);
    else if (size > 0 && pread(fd, &last, 1, size - 1) == 1 && last != '\n')
        len = snprintf(line, cap, "\n"); /* after a line a crash cut short: ours starts on its own */
    len += snprintf(line + len, cap - (size_t)len, "%lld\t%s\n", (long long)time(NULL), key);
    const ssize_t w = write(fd, line, (size_t)len);
    const int err = errno;
    free(line);
    if (close(fd) != 0 || w != (ssize_t)len)
        return cc_error("preflight: cannot record the pass in %s: %s", path, strerror(w < 0 ? err : EIO));
    trim_cache(dir);
    return 0;
}
