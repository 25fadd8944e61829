/* safetensors: a hand-written writer (no C library does it well) and a reader
 * that validates every field before use: header length within the file, a
 * JSON object header, known dtypes, shapes whose size matches the byte range,
 * ranges inside the data section and not overlapping. JSON via jansson.
 * The writer stores two xxh64 checksums in __metadata__: one of the data
 * section (CC_ST_CHECKSUM_KEY) and one of the rest of the header
 * (CC_ST_HEADER_CHECKSUM_KEY: the other metadata and the tensor table), so a
 * damaged digit of a step, a learning rate or the stored config is caught as
 * surely as a flipped byte of tensor data. The reader verifies each one
 * present: files written elsewhere have none and still load, files of older
 * catchat have only the data checksum. They are two keys, not one over
 * everything, so that a tool that rewrites tensors and drops the data
 * checksum (the one it knows to be stale) leaves a file that still loads
 * with its metadata checked. */
#define _POSIX_C_SOURCE 200809L
#include "catchat/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>
#include "catchat/util.h"

static const char *DTYPE_NAMES[] = { "F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U8", "BOOL" };
static const size_t DTYPE_SIZES[] = { 8, 4, 2, 2, 8, 4, 2, 1, 1, 1 };
#define N_DTYPES ((int)(sizeof(DTYPE_SIZES) / sizeof(DTYPE_SIZES[0])))

size_t cc_st_dtype_size(cc_st_dtype d) { return DTYPE_SIZES[d]; }

float cc_half_to_float(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h >> 15) << 31;
    int exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff, bits;
    if (exp == 0x1f) bits = sign | 0x7f800000u | (mant << 13);
    else if (exp == 0) {
        if (mant == 0) bits = sign;
        else { /* subnormal: normalise */
            exp = 1;
            while (!(mant & 0x400)) { mant <<= 1; exp--; }
            mant &= 0x3ff;
            bits = sign | (uint32_t)(exp + 112) << 23 | mant << 13;
        }
    } else bits = sign | (uint32_t)(exp + 112) << 23 | mant << 13;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t cc_float_to_half(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    const uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0);
    if (ax >= 0x477ff000u) return sign | 0x7c00; /* rounds past 65504: inf */
    if (ax < 0x38800000u) { /* subnormal or zero in half: round to nearest even */
        float a;
        memcpy(&a, &ax, 4);
        return sign | (uint16_t)lrintf(a * 16777216.0f); /* a / 2^-24 */
    }
    uint32_t r = ax + 0xfff + ((ax >> 13) & 1); /* round to nearest even */
    return sign | (uint16_t)((r - 0x38000000u) >> 13);
}

float cc_bf16_to_float(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

int64_t cc_st_numel(const cc_st_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

void cc_st_close(cc_st_file *f)
{
    for (int i = 0; i < f->n; i++) free(f->t[i].name);
    free(f->t);
    for (int i = 0; i < f->n_meta; i++) { free(f->meta_keys[i]); free(f->meta_vals[i]); }
    free(f->meta_keys);
    free(f->meta_vals);
    free(f->buf);
    memset(f, 0, sizeof(*f));
}

static int cmp_begin(const void *a, const void *b)
{
    const cc_st_tensor *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

static int parse_entry(cc_st_file *f, const char *name, json_t *v, cc_st_tensor *t)
{
    if (!json_is_object(v)) return cc_error("%s: tensor '%s': header entry is not an object", f->path, name);
    json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape");
    json_t *off = json_object_get(v, "data_offsets");
    if (!json_is_string(dt)) return cc_error("%s: tensor '%s': missing dtype", f->path, name);
    int d = -1;
    for (int i = 0; i < N_DTYPES; i++)
        if (strcmp(json_string_value(dt), DTYPE_NAMES[i]) == 0) d = i;
    if (d < 0) return cc_error("%s: tensor '%s': unsupported dtype '%s'", f->path, name, json_string_value(dt));
    if (!json_is_array(sh) || json_array_size(sh) > CC_ST_MAX_DIMS)
        return cc_error("%s: tensor '%s': shape is not an array of at most %d sizes", f->path, name, CC_ST_MAX_DIMS);
    if (!json_is_array(off) || json_array_size(off) != 2 || !json_is_integer(json_array_get(off, 0)) ||
        !json_is_integer(json_array_get(off, 1)))
        return cc_error("%s: tensor '%s': data_offsets is not [begin, end]", f->path, name);
    t->dtype = (cc_st_dtype)d;
    t->ndim = (int)json_array_size(sh);
    uint64_t numel = 1;
    for (int i = 0; i < t->ndim; i++) {
        json_t *s = json_array_get(sh, (size_t)i);
        if (!json_is_integer(s) || json_integer_value(s) < 0 || json_integer_value(s) > (1LL << 40))
            return cc_error("%s: tensor '%s': bad shape entry", f->path, name);
        t->shape[i] = json_integer_value(s);
        /* checked before the product, which could wrap (2^40 · 2^24 = 2^64 ≡ 0) */
        if (t->shape[i] > 0 && numel > (1ULL << 40) / (uint64_t)t->shape[i])
            return cc_error("%s: tensor '%s': shape too large", f->path, name);
        numel *= (uint64_t)t->shape[i];
    }
    const json_int_t b = json_integer_value(json_array_get(off, 0));
    const json_int_t e = json_integer_value(json_array_get(off, 1));
    /* past the end of the data: checked once the whole table is read (data_cut_short) */
    if (b < 0 || e < b)
        return cc_error("%s: tensor '%s': data_offsets [%lld, %lld] are not a range", f->path, name, (long long)b,
                        (long long)e);
    if ((uint64_t)(e - b) != numel * DTYPE_SIZES[d])
        return cc_error("%s: tensor '%s': %lld bytes do not match shape and dtype (%llu bytes)",
                        f->path, name, (long long)(e - b), (unsigned long long)(numel * DTYPE_SIZES[d]));
    t->begin = (size_t)b;
    t->end = (size_t)e;
    t->name = strdup(name);
    return 0;
}

/* The largest header a reader takes (the safetensors format's own limit);
 * a length past it is not a header's, so the file is not one. */
#define ST_MAX_HEADER 100000000ULL

/* A file whose 8-byte length is a header's and whose JSON starts after it,
 * but that ends before the header does, was cut short (a copy or a write
 * that did not finish, a full disk): said so, not "not a safetensors file".
 * 1 when that was said. */
static int header_cut_short(const char *path, uint64_t hlen, size_t size, int brace)
{
    if (!brace || hlen > ST_MAX_HEADER || hlen <= size - 8) return 0;
    cc_error("'%s' is truncated: %zu bytes, its header alone needs %llu; the file was cut short (a copy or a write "
             "that did not finish): use an earlier checkpoint", path, size, (unsigned long long)(8 + hlen));
    return 1;
}

/* Tensor data ending past the file, in a table whose ranges are otherwise
 * sound: the file was cut short, and the error says how much is missing. */
static int data_cut_short(const cc_st_file *f)
{
    size_t need = 0;
    for (int i = 0; i < f->n; i++) need = f->t[i].end > need ? f->t[i].end : need;
    if (need <= f->data_len) return 0;
    return cc_error("'%s' is truncated: %zu bytes, its header needs %zu; the file was cut short (a copy or a write "
                    "that did not finish): use an earlier checkpoint", f->path, f->len, f->len - f->data_len + need);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

static int cmp_tensor_name(const void *a, const void *b)
{
    return strcmp((*(const cc_st_tensor *const *)a)->name, (*(const cc_st_tensor *const *)b)->name);
}

static void digest_field(XXH64_state_t *hs, const char *s) { XXH64_update(hs, s, strlen(s) + 1); }

uint64_t cc_st_header_digest(const char *const *meta_keys, const char *const *meta_vals, int n_meta,
                             const cc_st_tensor *t, int n)
{
    XXH64_state_t *hs = XXH64_createState();
    if (!hs) abort();
    XXH64_reset(hs, 0);
    /* metadata by key: sort indices through the keys' addresses */
    const char **keys = cc_malloc(sizeof(char *) * (size_t)(n_meta ? n_meta : 1));
    for (int i = 0; i < n_meta; i++) keys[i] = meta_keys[i];
    qsort(keys, (size_t)n_meta, sizeof(char *), cmp_str);
    for (int i = 0; i < n_meta; i++) {
        if (strcmp(keys[i], CC_ST_CHECKSUM_KEY) == 0 || strcmp(keys[i], CC_ST_HEADER_CHECKSUM_KEY) == 0) continue;
        int j = 0;
        while (meta_keys[j] != keys[i]) j++;
        digest_field(hs, "m");
        digest_field(hs, keys[i]);
        digest_field(hs, meta_vals[j]);
    }
    free(keys);
    const cc_st_tensor **order = cc_malloc(sizeof(cc_st_tensor *) * (size_t)(n ? n : 1));
    for (int i = 0; i < n; i++) order[i] = &t[i];
    qsort(order, (size_t)n, sizeof(cc_st_tensor *), cmp_tensor_name);
    for (int i = 0; i < n; i++) {
        char shape[CC_ST_MAX_DIMS * 24 + 1] = "", range[48];
        for (int d = 0; d < order[i]->ndim; d++) {
            const size_t l = strlen(shape);
            snprintf(shape + l, sizeof(shape) - l, "%s%lld", d ? "," : "", (long long)order[i]->shape[d]);
        }
        snprintf(range, sizeof(range), "%zu,%zu", order[i]->begin, order[i]->end);
        digest_field(hs, "t");
        digest_field(hs, order[i]->name);
        digest_field(hs, DTYPE_NAMES[order[i]->dtype]);
        digest_field(hs, shape);
        digest_field(hs, range);
    }
    free(order);
    const uint64_t h = XXH64_digest(hs);
    XXH64_freeState(hs);
    return h;
}

static int parse_metadata(cc_st_file *f, json_t *meta)
{
    if (!json_is_object(meta)) return cc_error("%s: __metadata__ is not an object", f->path);
    size_t n = json_object_size(meta);
    f->meta_keys = cc_calloc(n, sizeof(char *));
    f->meta_vals = cc_calloc(n, sizeof(char *));
    const char *k;
    json_t *v;
    json_object_foreach(meta, k, v) {
        if (!json_is_string(v)) return cc_error("%s: __metadata__ value '%s' is not a string", f->path, k);
        f->meta_keys[f->n_meta] = strdup(k);
        f->meta_vals[f->n_meta] = strdup(json_string_value(v));
        f->n_meta++;
    }
    return 0;
}

int cc_st_open(cc_st_file *f, const char *path)
{
    size_t len;
    uint8_t *buf = cc_read_file_what(path, "safetensors file", &len);
    if (!buf) {
        memset(f, 0, sizeof(*f));
        return -1;
    }
    return cc_st_open_buffer(f, buf, len, path);
}

int cc_st_open_buffer(cc_st_file *f, uint8_t *buf, size_t len, const char *path)
{
    memset(f, 0, sizeof(*f));
    snprintf(f->path, sizeof(f->path), "%s", path);
    f->buf = buf;
    f->len = len;
    if (f->len < 8) { cc_error("%s: not a safetensors file (%zu bytes)", path, f->len); goto fail; }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | f->buf[i];
    /* A safetensors header is a JSON object right after the 8-byte length. */
    if (hlen > f->len - 8 || hlen < 2 || f->buf[8] != '{') {
        if (header_cut_short(path, hlen, f->len, f->len > 8 && f->buf[8] == '{')) goto fail;
        if (hlen <= f->len - 8 && hlen >= 2)
            cc_error("%s: not a safetensors file (no JSON header after the length)", path);
        else
            cc_error("%s: not a safetensors file (its first 8 bytes, read as the header length, give %llu "
                     "for a %zu-byte file)", path, (unsigned long long)hlen, f->len);
        goto fail;
    }
    f->data = f->buf + 8 + hlen;
    f->data_len = f->len - 8 - (size_t)hlen;
    json_error_t err;
    json_t *root = json_loadb((const char *)f->buf + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &err);
    if (!root) { cc_error("%s: header is not valid JSON (%s)", path, err.text); goto fail; }
    if (!json_is_object(root)) { cc_error("%s: header is not a JSON object", path); json_decref(root); goto fail; }
    f->t = cc_calloc(json_object_size(root), sizeof(cc_st_tensor));
    const char *k;
    json_t *v;
    int rc = 0;
    json_object_foreach(root, k, v) {
        if (strcmp(k, "__metadata__") == 0) rc = parse_metadata(f, v);
        else if ((rc = parse_entry(f, k, v, &f->t[f->n])) == 0) f->n++;
        if (rc) break;
    }
    json_decref(root);
    if (rc) goto fail;
    /* Ranges must not overlap (zero-sized tensors may share an offset). */
    cc_st_tensor *sorted = cc_malloc(sizeof(cc_st_tensor) * (f->n ? f->n : 1));
    memcpy(sorted, f->t, sizeof(cc_st_tensor) * f->n);
    qsort(sorted, f->n, sizeof(cc_st_tensor), cmp_begin);
    for (int i = 1; i < f->n; i++)
        if (sorted[i].begin < sorted[i - 1].end) {
            cc_error("%s: tensors '%s' and '%s' overlap", path, sorted[i - 1].name, sorted[i].name);
            free(sorted);
            goto fail;
        }
    free(sorted);
    const char *hsum = cc_st_meta(f, CC_ST_HEADER_CHECKSUM_KEY);
    if (hsum) {
        char have[17];
        snprintf(have, sizeof(have), "%016llx",
                 (unsigned long long)cc_st_header_digest((const char *const *)f->meta_keys,
                                                         (const char *const *)f->meta_vals, f->n_meta, f->t, f->n));
        if (strcmp(hsum, have) != 0) {
            cc_error("%s: checksum mismatch: the header (metadata such as the step or the config, or the "
                     "tensor table) is damaged (stored xxh64 %.16s, computed %s); use an earlier checkpoint",
                     path, hsum, have);
            goto fail;
        }
    }
    /* after the header's checksum: a table it vouches for and data that ends
     * early can only be a file cut short */
    if (data_cut_short(f) != 0) goto fail;
    const char *sum = cc_st_meta(f, CC_ST_CHECKSUM_KEY);
    if (sum) {
        char have[17];
        snprintf(have, sizeof(have), "%016llx", (unsigned long long)XXH64(f->data, f->data_len, 0));
        if (strcmp(sum, have) != 0) {
            cc_error("%s: checksum mismatch: the tensor data is damaged (stored xxh64 %.16s, computed %s); "
                     "use an earlier checkpoint", path, sum, have);
            goto fail;
        }
    }
    return 0;
fail:
    cc_st_close(f);
    return -1;
}

int cc_st_open_meta(cc_st_file *f, const char *path)
{
    memset(f, 0, sizeof(*f));
    snprintf(f->path, sizeof(f->path), "%s", path);
    FILE *fp = fopen(path, "rb");
    if (!fp) return cc_error("cannot open safetensors file '%s': %s", path, strerror(errno));
    struct stat st = { 0 };
    if (fstat(fileno(fp), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(fp);
        return cc_error("safetensors file '%s' is %s, not a regular file", path,
                        S_ISDIR(st.st_mode) ? "a directory" : "special");
    }
    uint8_t len8[9];
    uint64_t hlen = 0;
    int rc = -1;
    if (fseek(fp, 0, SEEK_END) != 0) goto done;
    const long size = ftell(fp);
    rewind(fp);
    if (size < 8 || fread(len8, 1, size > 8 ? 9 : 8, fp) != (size > 8 ? 9u : 8u)) {
        cc_error("%s: not a safetensors file (%ld bytes)", path, size);
        goto done;
    }
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | len8[i];
    if (header_cut_short(path, hlen, (size_t)size, size > 8 && len8[8] == '{')) goto done;
    if (hlen < 2 || hlen > (uint64_t)size - 8) {
        cc_error("%s: not a safetensors file (its first 8 bytes, read as the header length, give %llu for a "
                 "%ld-byte file)", path, (unsigned long long)hlen, size);
        goto done;
    }
    char *hdr = cc_malloc((size_t)hlen);
    if (fseek(fp, 8, SEEK_SET) != 0 || fread(hdr, 1, (size_t)hlen, fp) != (size_t)hlen) {
        free(hdr);
        cc_error("cannot read '%s': %s", path, strerror(errno));
        goto done;
    }
    json_error_t err;
    json_t *root = json_loadb(hdr, (size_t)hlen, JSON_REJECT_DUPLICATES, &err);
    free(hdr);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        cc_error("%s: not a safetensors file (no JSON header after the length)", path);
        goto done;
    }
    json_t *meta = json_object_get(root, "__metadata__");
    rc = meta ? parse_metadata(f, meta) : 0;
    json_decref(root);
done:
    fclose(fp);
    if (rc != 0) cc_st_close(f);
    return rc;
}

const cc_st_tensor *cc_st_find(const cc_st_file *f, const char *name)
{
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->t[i].name, name) == 0) return &f->t[i];
    return NULL;
}

const char *cc_st_meta(const cc_st_file *f, const char *key)
{
    for (int i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta_keys[i], key) == 0) return f->meta_vals[i];
    return NULL;
}

int cc_st_read_float(const cc_st_file *f, const cc_st_tensor *t, float *out)
{
    const uint8_t *p = f->data + t->begin;
    const int64_t n = cc_st_numel(t);
    for (int64_t i = 0; i < n; i++) {
        switch (t->dtype) {
        case ST_F32: memcpy(&out[i], p + 4 * i, 4); break;
        case ST_F64: { double d; memcpy(&d, p + 8 * i, 8); out[i] = (float)d; break; }
        case ST_F16: out[i] = cc_half_to_float((uint16_t)(p[2 * i] | p[2 * i + 1] << 8)); break;
        case ST_BF16: out[i] = cc_bf16_to_float((uint16_t)(p[2 * i] | p[2 * i + 1] << 8)); break;
        default: return cc_error("%s: tensor '%s' is %s, not a floating type", f->path, t->name, DTYPE_NAMES[t->dtype]);
        }
    }
    return 0;
}

/* Testing aid (cc_st_set_write_delay_us): a pause after each tensor written. */
static long write_delay_us = 0;

void cc_st_set_write_delay_us(long us) { write_delay_us = us > 0 ? us : 0; }

static int write_all(FILE *fp, const void *p, size_t n) { return fwrite(p, 1, n, fp) == n ? 0 : -1; }

int cc_st_write(const char *path, const cc_st_entry *e, int n, const char *const *meta_keys,
                const char *const *meta_vals, int n_meta)
{
    json_t *hdr = json_object();
    json_t *meta = json_object();
    for (int i = 0; i < n_meta; i++) json_object_set_new(meta, meta_keys[i], json_string(meta_vals[i]));
    XXH64_state_t *hs = XXH64_createState();
    if (!hs) abort();
    XXH64_reset(hs, 0);
    for (int i = 0; i < n; i++) {
        size_t numel = 1;
        for (int d = 0; d < e[i].ndim; d++) numel *= (size_t)e[i].shape[d];
        XXH64_update(hs, e[i].data, numel * DTYPE_SIZES[e[i].dtype]);
    }
    char sum[17];
    snprintf(sum, sizeof(sum), "%016llx", (unsigned long long)XXH64_digest(hs));
    XXH64_freeState(hs);
    json_object_set_new(meta, CC_ST_CHECKSUM_KEY, json_string(sum));
    json_object_set_new(hdr, "__metadata__", meta);
    /* the tensor table as the reader will see it, for the header checksum */
    cc_st_tensor *table = cc_calloc((size_t)(n ? n : 1), sizeof(cc_st_tensor));
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        json_t *t = json_object(), *shape = json_array();
        size_t numel = 1;
        for (int d = 0; d < e[i].ndim; d++) {
            json_array_append_new(shape, json_integer(e[i].shape[d]));
            numel *= (size_t)e[i].shape[d];
        }
        const size_t bytes = numel * DTYPE_SIZES[e[i].dtype];
        json_object_set_new(t, "dtype", json_string(DTYPE_NAMES[e[i].dtype]));
        json_object_set_new(t, "shape", shape);
        json_object_set_new(t, "data_offsets", json_pack("[II]", (json_int_t)off, (json_int_t)(off + bytes)));
        json_object_set_new(hdr, e[i].name, t);
        table[i] = (cc_st_tensor){ .name = (char *)e[i].name, .dtype = e[i].dtype, .ndim = e[i].ndim,
                                   .begin = off, .end = off + bytes };
        memcpy(table[i].shape, e[i].shape, sizeof(e[i].shape));
        off += bytes;
    }
    /* the metadata as stored, not as given: a value jansson refused (not
     * UTF-8) is not in the file, so it must not be in the digest either */
    const size_t n_stored = json_object_size(meta);
    const char **sk = cc_malloc(sizeof(char *) * (n_stored + 1)), **sv = cc_malloc(sizeof(char *) * (n_stored + 1));
    int n_sv = 0;
    const char *mk;
    json_t *mv;
    json_object_foreach(meta, mk, mv) {
        sk[n_sv] = mk;
        sv[n_sv++] = json_string_value(mv);
    }
    snprintf(sum, sizeof(sum), "%016llx", (unsigned long long)cc_st_header_digest(sk, sv, n_sv, table, n));
    free(sk);
    free(sv);
    free(table);
    json_object_set_new(meta, CC_ST_HEADER_CHECKSUM_KEY, json_string(sum));
    char *text = json_dumps(hdr, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(hdr);
    size_t hlen = strlen(text);
    const size_t padded = (hlen + 7) / 8 * 8; /* data starts 8-byte aligned */

    char tmp[CC_PATH_MAX + 32];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
    FILE *fp = fopen(tmp, "wb");
    if (!fp) {
        free(text);
        return cc_error("cannot write '%s': %s", path, strerror(errno));
    }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    int rc = write_all(fp, len8, 8) | write_all(fp, text, hlen);
    for (size_t i = hlen; i < padded && rc == 0; i++) rc = write_all(fp, " ", 1);
    free(text);
    const long delay_us = write_delay_us;
    for (int i = 0; i < n && rc == 0; i++) {
        size_t numel = 1;
        for (int d = 0; d < e[i].ndim; d++) numel *= (size_t)e[i].shape[d];
        rc = write_all(fp, e[i].data, numel * DTYPE_SIZES[e[i].dtype]);
        if (delay_us > 0) {
            fflush(fp);
            struct timespec ts = { delay_us / 1000000, (delay_us % 1000000) * 1000 };
            nanosleep(&ts, NULL);
        }
    }
    if (rc == 0 && fflush(fp) != 0) rc = -1;
    if (rc == 0 && fsync(fileno(fp)) != 0) rc = -1;
    if (fclose(fp) != 0) rc = -1;
    if (rc != 0) {
        const int err = errno;
        unlink(tmp);
        /* say what is on disk now: the earlier file, untouched, or none; the temporary name is
         * catchat's own business (removed above), the file is the user's */
        struct stat before;
        if (stat(path, &before) == 0)
            return cc_error("cannot write '%s': %s (the earlier one is kept, unchanged)", path, strerror(err));
        return cc_error("cannot write '%s': %s (there was no earlier one to keep)", path, strerror(err));
    }
    if (rename(tmp, path) != 0) {
        cc_error("cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    /* Make the rename itself durable. */
    char dir[CC_PATH_MAX + 32];
    snprintf(dir, sizeof(dir), "%s", path);
    int dfd = open(dirname(dir), O_RDONLY);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return 0;
}
