/* Token files: datasets of text files and shards, mapped, their ids checked
 * and their digest (the batch loader is src/loader.c). */
#define _POSIX_C_SOURCE 200809L
#include "catchat/data.h"

#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "catchat/util.h"
#include "catchat/vocab.h"

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* A shard's header (its tokens are not read: they are checked where a batch
 * reads them) into file f. */
static int load_shard(cc_tokens *t, cc_token_file *f, const uint8_t *buf, size_t len, int vocab_size)
{
    if (len < CC_SHARD_HEADER_INTS * 4)
        return cc_error("%s: shard header truncated (%zu bytes, need 1024)", t->path, len);
    const uint32_t version = le32(buf + 4), count = le32(buf + 8);
    if (version != CC_SHARD_VERSION)
        return cc_error("%s: shard version %u, expected %d", t->path, version, CC_SHARD_VERSION);
    const size_t payload = len - CC_SHARD_HEADER_INTS * 4;
    if (payload != (size_t)count * 2)
        return cc_error("%s: shard header says %u tokens but the file holds %zu bytes of tokens",
                        t->path, count, payload);
    if (le32(buf + 12) == CC_SHARD_TOKENIZER_MARK) {
        t->tokenizer_size = (int)le32(buf + 16);
        t->tokenizer_id = (uint64_t)le32(buf + 24) << 32 | le32(buf + 20);
        if (t->tokenizer_size > vocab_size) /* ids the model could never predict, whether or not they occur */
            return cc_error("%s: its tokenizer has %d tokens, more than the model's vocab_size %d (a run on it: "
                            "set [model] vocab_size = %d)", t->path, t->tokenizer_size, vocab_size, t->tokenizer_size);
    }
    f->bytes = buf + CC_SHARD_HEADER_INTS * 4;
    f->width = 2;
    f->offset = CC_SHARD_HEADER_INTS * 4;
    f->n = t->n = count;
    return 0;
}

/* Text: its bytes are its tokens, each checked here (the binary-file rule
 * reads them all anyway). */
static int load_text(cc_tokens *t, cc_token_file *f, const uint8_t *buf, size_t len, int vocab_size)
{
    t->tokenizer_id = cc_vocab_bytes_id();
    t->tokenizer_size = 256;
    if (vocab_size < 256)
        for (size_t i = 0; i < len; i++)
            if (buf[i] >= vocab_size)
                return cc_error("%s: byte %zu has value %u >= vocab_size %d (byte tokenizer)", t->path, i, buf[i],
                                vocab_size);
    f->bytes = buf;
    f->width = 1;
    f->offset = 0;
    f->n = t->n = len;
    return 0;
}

/* Whether bytes read as text look like a binary file (an executable, an
 * archive, raw numbers): a NUL byte, which text never holds, or more than
 * half of the bytes not UTF-8 text (invalid sequences, or control bytes
 * other than whitespace and escape). Text in a legacy 8-bit encoding such as
 * Latin-1 keeps well under that. `why` says which. */
static int looks_binary(const uint8_t *buf, size_t len, char *why, size_t cap)
{
    const uint8_t *nul = len ? memchr(buf, 0, len) : NULL;
    if (nul) {
        snprintf(why, cap, "it holds NUL bytes, the first at byte %zu", (size_t)(nul - buf));
        return 1;
    }
    size_t odd = 0;
    for (size_t i = 0; i < len;) {
        const size_t n = cc_utf8_seq_len(buf + i, len - i);
        if (n == 0 || (n == 1 && buf[i] < 0x20 && !strchr("\t\n\v\f\r\x1b", buf[i]))) {
            odd++;
            i++;
        } else i += n;
    }
    if (odd * 2 <= len) return 0;
    snprintf(why, cap, "%.0f%% of its bytes are not UTF-8 text", 100.0 * (double)odd / (double)len);
    return 1;
}

/* A header that is a shard's in all but the magic number: a version field in
 * range and a count that matches the file, or the reserved ints all zero. */
static int looks_like_shard_header(const uint8_t *buf, size_t len)
{
    if (len < CC_SHARD_HEADER_INTS * 4) return 0;
    const uint32_t version = le32(buf + 4), count = le32(buf + 8);
    if (version < 1 || version > 255) return 0;
    if ((uint64_t)count * 2 == len - CC_SHARD_HEADER_INTS * 4) return 1;
    for (size_t i = 12; i < CC_SHARD_HEADER_INTS * 4; i++)
        if (buf[i]) return 0;
    return 1;
}

static int ends_with(const char *s, const char *tail)
{
    const size_t n = strlen(s), m = strlen(tail);
    return n >= m && strcmp(s + n - m, tail) == 0;
}

/* The tokens of one file whose bytes are buf (mapped, or owned by f), by
 * format; t is set up for that one file. */
static int tokens_of(cc_tokens *t, cc_token_file *f, const uint8_t *buf, size_t len, const char *name, int vocab_size,
                     const char *format)
{
    snprintf(t->path, sizeof(t->path), "%s", name);
    t->vocab_size = vocab_size;
    const int magic = len >= 4 && le32(buf) == CC_SHARD_MAGIC;
    if (strcmp(format, "text") == 0) t->is_shard = 0;
    else if (magic) t->is_shard = 1;
    else if (strcmp(format, "shard") == 0)
        return cc_error("%s: not a token shard ([data] format = shard): it does not start with the magic "
                        "number %d", name, CC_SHARD_MAGIC);
    else if (looks_like_shard_header(buf, len))
        return cc_error("%s: starts like a token shard header (version %u, %u tokens) but its magic number is "
                        "%u, not %d: the file is damaged", name, le32(buf + 4), le32(buf + 8), le32(buf),
                        CC_SHARD_MAGIC);
    else if (ends_with(name, ".bin"))
        return cc_error("%s: a .bin file without the shard magic number %d (a headerless token file such as "
                        "nanoGPT's train.bin?): convert it with scripts/prepare.py, or set [data] format = "
                        "text to read its bytes as text", name, CC_SHARD_MAGIC);
    char why[96];
    if (!t->is_shard && looks_binary(buf, len, why, sizeof(why))) {
        /* the byte tokenizer trains on anything, so a wrong path (a program,
         * an archive) would train without a word: refused unless the config
         * says the file is text */
        if (strcmp(format, "text") != 0)
            return cc_error("%s: looks like a binary file, not text (%s): set [data] format = text (--set "
                            "format=text) to read its bytes as text anyway", name, why);
        if (!cc_error_quiet)
            fprintf(stderr, "catchat: warning: %s looks like a binary file (%s); read as text because [data] "
                            "format = text\n", name, why);
    }
    return t->is_shard ? load_shard(t, f, buf, len, vocab_size) : load_text(t, f, buf, len, vocab_size);
}

/* A dataset of one file, f's record moved into it. */
static void one_file(cc_tokens *t, cc_token_file *f, const char *name)
{
    f->path = cc_malloc(strlen(name) + 1);
    strcpy(f->path, name);
    t->files = cc_malloc(sizeof(cc_token_file));
    t->files[0] = *f;
    t->nfiles = 1;
    t->file_end = cc_malloc(sizeof(size_t));
    t->file_end[0] = t->n;
}

static void file_release(cc_token_file *f)
{
    if (f->map) munmap(f->map, f->map_len);
    free(f->owned);
    free(f->path);
    memset(f, 0, sizeof(*f));
}

int cc_tokens_from_bytes_as(cc_tokens *t, const uint8_t *buf, size_t len, const char *name, int vocab_size,
                            const char *format)
{
    memset(t, 0, sizeof(*t));
    cc_token_file f = { 0 };
    f.owned = cc_malloc(len ? len : 1); /* the caller's bytes may go: a copy */
    if (len) memcpy(f.owned, buf, len);
    if (tokens_of(t, &f, f.owned, len, name, vocab_size, format) != 0) {
        file_release(&f);
        memset(t, 0, sizeof(*t));
        return -1;
    }
    one_file(t, &f, name);
    return 0;
}

int cc_tokens_from_bytes(cc_tokens *t, const uint8_t *buf, size_t len, const char *name, int vocab_size)
{
    return cc_tokens_from_bytes_as(t, buf, len, name, vocab_size, "auto");
}

/* Where the [data] values came from, for the errors about the files they
 * name (cc_data_note_origin): a run names two, train and val; a few more
 * slots spare a command that names others. */
#define ORIGIN_SLOTS 4
static struct {
    char spec[CC_PATH_MAX];
    char origin[512];
} origins[ORIGIN_SLOTS];

void cc_data_note_origin(const char *spec, const char *origin)
{
    int i = 0;
    while (i < ORIGIN_SLOTS && origins[i].spec[0] && strcmp(origins[i].spec, spec) != 0) i++;
    if (i == ORIGIN_SLOTS) i = 0; /* full: the first slot is reused */
    snprintf(origins[i].spec, sizeof(origins[i].spec), "%s", spec);
    snprintf(origins[i].origin, sizeof(origins[i].origin), "%s", origin);
}

/* " (<where spec came from>)" for an error about spec, or "" if unknown. */
static const char *origin_of(const char *spec, char *buf, size_t cap)
{
    buf[0] = 0;
    for (int i = 0; i < ORIGIN_SLOTS; i++)
        if (origins[i].spec[0] && strcmp(origins[i].spec, spec) == 0 && origins[i].origin[0])
            snprintf(buf, cap, " (%.*s)", (int)sizeof(origins[i].origin), origins[i].origin);
    return buf;
}

int cc_data_files(const char *spec, char ***files, int *n)
{
    char why[600];
    *files = NULL;
    *n = 0;
    char *copy = cc_malloc(strlen(spec) + 1), *save = NULL;
    strcpy(copy, spec);
    int cap = 0, rc = 0;
    for (char *part = strtok_r(copy, ",", &save); part && rc == 0; part = strtok_r(NULL, ",", &save)) {
        while (*part == ' ') part++;
        if (!*part) continue;
        glob_t g;
        memset(&g, 0, sizeof(g));
        const int pattern = strpbrk(part, "*?[") != NULL;
        if (pattern) {
            const int gr = glob(part, 0, NULL, &g); /* sorted */
            if (gr == GLOB_NOMATCH)
                rc = cc_error("%s: the pattern matches no file%s", part, origin_of(spec, why, sizeof(why)));
            else if (gr != 0)
                rc = cc_error("%s: cannot expand the pattern%s", part, origin_of(spec, why, sizeof(why)));
        }
        const size_t m = pattern ? (rc == 0 ? g.gl_pathc : 0) : 1;
        for (size_t i = 0; i < m; i++) {
            if (*n == cap) {
                cap = cap ? 2 * cap : 8;
                *files = cc_realloc(*files, sizeof(char *) * (size_t)cap);
            }
            const char *p = pattern ? g.gl_pathv[i] : part;
            (*files)[*n] = cc_malloc(strlen(p) + 1);
            strcpy((*files)[(*n)++], p);
        }
        if (pattern) globfree(&g);
    }
    free(copy);
    if (rc == 0 && *n == 0) rc = cc_error("'%s': names no data file%s", spec, origin_of(spec, why, sizeof(why)));
    if (rc != 0) {
        cc_data_files_free(*files, *n);
        *files = NULL;
        *n = 0;
    }
    return rc;
}

void cc_data_files_free(char **files, int n)
{
    for (int i = 0; i < n; i++) free(files[i]);
    free(files);
}

#define SMALL_FILE (1u << 20) /* bytes: read, not mapped, below it */

/* Load one file of the value `spec`: mapped read-only, not read (a small
 * one is read). A mapped file changed under a run (truncated, rewritten in
 * place) ends it with SIGBUS: replace a dataset's files by renaming new ones
 * over them, as scripts/prepare.py does. */
static int load_one(cc_tokens *t, const char *path, const char *spec, int vocab_size, const char *format)
{
    char why[600];
    memset(t, 0, sizeof(*t));
    const int fd = open(path, O_RDONLY);
    /* a file that cannot be opened is said with where its path came from
     * (which file and line, --set or the default) and the folder it was
     * taken from: the usual surprise is a relative path read from elsewhere */
    if (fd < 0) return cc_error("cannot open data file '%s'%s: %s", path, origin_of(spec, why, sizeof(why)), strerror(errno));
    struct stat st = { 0 };
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        const int e = errno;
        close(fd);
        if (!S_ISREG(st.st_mode) && st.st_mode)
            return cc_error("data file '%s' is %s, not a regular file", path,
                            S_ISDIR(st.st_mode) ? "a directory" : "a special file (a device, a FIFO)");
        return cc_error("cannot read data file '%s': %s", path, strerror(e));
    }
    cc_token_file f = { 0 };
    f.map_len = (size_t)st.st_size;
    const uint8_t *buf = (const uint8_t *)"";
    /* a large file is mapped; a small one (a map each would soon count against the process's limit of
     * maps in a glob of many) or one whose filesystem cannot map is read */
    if (f.map_len >= SMALL_FILE) {
        f.map = mmap(NULL, f.map_len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (f.map == MAP_FAILED) f.map = NULL;
        else buf = f.map;
    }
    if (f.map_len && !f.map) {
        f.owned = cc_malloc(f.map_len);
        size_t got = 0;
        ssize_t n = 0;
        while (got < f.map_len && (n = read(fd, f.owned + got, f.map_len - got)) > 0) got += (size_t)n;
        if (got < f.map_len) {
            const int e = n < 0 ? errno : EIO;
            close(fd);
            file_release(&f);
            return cc_error("cannot read data file '%s': %s", path, strerror(e));
        }
        buf = f.owned;
        f.map_len = 0;
    }
    close(fd);
    if (tokens_of(t, &f, buf, (size_t)st.st_size, path, vocab_size, format) != 0) {
        file_release(&f);
        memset(t, 0, sizeof(*t));
        return -1;
    }
    if (f.map) posix_madvise(f.map, f.map_len, POSIX_MADV_RANDOM); /* windows are read in a shuffled order */
    one_file(t, &f, path);
    return 0;
}

int cc_tokens_load_as(cc_tokens *t, const char *path, int vocab_size, const char *format)
{
    char **files;
    int n;
    memset(t, 0, sizeof(*t));
    if (cc_data_files(path, &files, &n) != 0) return -1;
    int rc = load_one(t, files[0], path, vocab_size, format);
    if (rc == 0 && n > 1) { /* the rest after it, in order; the dataset is named by the spec */
        snprintf(t->path, sizeof(t->path), "%s", path);
        t->file_end = cc_realloc(t->file_end, sizeof(size_t) * (size_t)n);
        t->files = cc_realloc(t->files, sizeof(cc_token_file) * (size_t)n);
        for (int i = 1; i < n && rc == 0; i++) {
            cc_tokens one;
            if ((rc = load_one(&one, files[i], path, vocab_size, format)) != 0) break;
            if (one.tokenizer_id != t->tokenizer_id) { /* ids that mean other things cannot be one dataset */
                char a[96], b[96];
                rc = cc_error("%s holds ids of %s, %s of %s: a dataset's files must share one tokenizer", files[i],
                              cc_tokenizer_describe(one.tokenizer_id, a, sizeof(a)), files[0],
                              cc_tokenizer_describe(t->tokenizer_id, b, sizeof(b)));
                cc_tokens_free(&one);
                break;
            }
            t->files[i] = one.files[0]; /* the file's record moves; one's arrays go */
            free(one.files);
            free(one.file_end);
            t->n += one.n;
            t->file_end[i] = t->n;
            t->nfiles = i + 1;
            t->is_shard = t->is_shard && one.is_shard;
        }
    }
    cc_data_files_free(files, n);
    if (rc != 0) cc_tokens_free(t);
    return rc;
}

int cc_tokens_load(cc_tokens *t, const char *path, int vocab_size)
{
    return cc_tokens_load_as(t, path, vocab_size, "auto");
}

void cc_tokens_free(cc_tokens *t)
{
    for (int i = 0; i < t->nfiles; i++) file_release(&t->files[i]);
    free(t->files);
    free(t->file_end);
    t->files = NULL;
    t->file_end = NULL;
    t->n = 0;
    t->nfiles = 0;
}

/* The file holding token i of the dataset: the first whose end lies past it. */
static int file_of(const cc_tokens *t, size_t i)
{
    int lo = 0, hi = t->nfiles - 1;
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (t->file_end[mid] > i) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

uint32_t cc_tokens_at(const cc_tokens *t, size_t i)
{
    const int f = file_of(t, i);
    return cc_token_file_at(&t->files[f], i - (f > 0 ? t->file_end[f - 1] : 0));
}

int cc_tokens_bad_id(const cc_tokens *t, int f, size_t k, uint32_t id)
{
    const cc_token_file *file = &t->files[f];
    return cc_error("%s: token %zu (byte %zu) has id %u >= vocab_size %d", file->path, k,
                    file->offset + k * (size_t)file->width, id, t->vocab_size);
}

int cc_tokens_check(const cc_tokens *t)
{
    for (int f = 0; f < t->nfiles; f++) {
        if (t->files[f].map) /* one pass in order: read ahead, as the batches' random advice does not */
            posix_madvise(t->files[f].map, t->files[f].map_len, POSIX_MADV_SEQUENTIAL);
        for (size_t k = 0; k < t->files[f].n; k++) {
            const uint32_t id = cc_token_file_at(&t->files[f], k);
            if (id >= (uint32_t)t->vocab_size) return cc_tokens_bad_id(t, f, k, id);
        }
    }
    return 0;
}

int cc_data_check_split(const char *train, const char *val)
{
    char **tf, **vf;
    int nt, nv;
    if (cc_data_files(train, &tf, &nt) != 0) return -1;
    if (cc_data_files(val, &vf, &nv) != 0) {
        cc_data_files_free(tf, nt);
        return -1;
    }
    int rc = 0;
    for (int i = 0; i < nt && rc == 0; i++)
        for (int j = 0; j < nv && rc == 0; j++) {
            struct stat a, b;
            if (stat(tf[i], &a) == 0 && stat(vf[j], &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
                rc = cc_error("[data] train and val share the file '%s': they must not overlap", tf[i]);
        }
    cc_data_files_free(tf, nt);
    cc_data_files_free(vf, nv);
    return rc;
}

/* Tokens [k, k + n) of a file into the digest, as uint16, through a small buffer. */
static void digest_tokens(XXH3_state_t *hs, const cc_token_file *f, size_t k, size_t n)
{
    uint16_t buf[2048];
    while (n > 0) {
        const size_t m = n < 2048 ? n : 2048;
        for (size_t i = 0; i < m; i++) buf[i] = (uint16_t)cc_token_file_at(f, k + i);
        XXH3_64bits_update(hs, buf, m * sizeof(uint16_t));
        k += m;
        n -= m;
    }
}

uint64_t cc_tokens_digest(const cc_tokens *t)
{
    enum { WHOLE = 128 << 10, PIECES = 64, PIECE = 2048 }; /* tokens */
    XXH3_state_t *hs = XXH3_createState();
    if (!hs) abort();
    XXH3_64bits_reset(hs);
    XXH3_64bits_update(hs, &t->tokenizer_id, sizeof(t->tokenizer_id)); /* the same ids of another tokenizer differ */
    for (int f = 0; f < t->nfiles; f++) {
        const cc_token_file *file = &t->files[f];
        const uint64_t n = file->n;
        XXH3_64bits_update(hs, &n, sizeof(n));
        /* counted in tokens, so a text file and a bytes shard of it give one digest */
        if (file->n <= WHOLE) digest_tokens(hs, file, 0, file->n);
        else
            for (uint64_t p = 0; p < PIECES; p++) /* spread over the file: the first at its start, the last at its end */
                digest_tokens(hs, file, (size_t)((n - PIECE) * p / (PIECES - 1)), PIECE);
    }
    const uint64_t d = XXH3_64bits_digest(hs);
    XXH3_freeState(hs);
    return d ? d : 1; /* 0 means "unknown" in a checkpoint */
}

uint64_t cc_tokens_digest_all(const cc_tokens *t)
{
    XXH3_state_t *hs = XXH3_createState();
    if (!hs) abort();
    XXH3_64bits_reset(hs);
    for (int f = 0; f < t->nfiles; f++) digest_tokens(hs, &t->files[f], 0, t->files[f].n);
    const uint64_t d = XXH3_64bits_digest(hs);
    XXH3_freeState(hs);
    return d ? d : 1;
}
