/* Reader and writer of the safetensors format: 8-byte little-endian header
 * length, a JSON header {name: {dtype, shape, data_offsets}, __metadata__},
 * then raw little-endian data. The reader trusts nothing in the file. */
#ifndef CATCHAT_SAFETENSORS_H
#define CATCHAT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define CC_ST_MAX_DIMS 8
/* __metadata__ key of the xxh64 (16 hex digits) of the data section. */
#define CC_ST_CHECKSUM_KEY "data_xxh64"
/* __metadata__ key of the xxh64 of the rest of the header: every other
 * __metadata__ entry and every tensor's name, dtype, shape and offsets, in the
 * canonical form of cc_st_header_digest. The two together cover the file; a
 * file without this key (older catchat) has its data checked alone. */
#define CC_ST_HEADER_CHECKSUM_KEY "header_xxh64"

typedef enum { ST_F64, ST_F32, ST_F16, ST_BF16, ST_I64, ST_I32, ST_I16, ST_I8, ST_U8, ST_BOOL } cc_st_dtype;

typedef struct cc_st_tensor {
    char *name;
    cc_st_dtype dtype;
    int ndim;
    int64_t shape[CC_ST_MAX_DIMS];
    size_t begin, end; /* byte offsets into the data section */
} cc_st_tensor;

typedef struct cc_st_file {
    char path[1024];
    uint8_t *buf;
    size_t len;
    const uint8_t *data;
    size_t data_len;
    int n;
    cc_st_tensor *t;
    int n_meta;
    char **meta_keys, **meta_vals;
} cc_st_file;

/* Parse and validate; the stored checksums (either, both or none) are verified. */
int cc_st_open(cc_st_file *f, const char *path);
/* Parse a file already in memory; takes ownership of buf (malloc'd). */
int cc_st_open_buffer(cc_st_file *f, uint8_t *buf, size_t len, const char *name);
/* Only the header's __metadata__ (no tensors, no data read, no checksum):
 * what a caller needs to know about a file before loading it. */
int cc_st_open_meta(cc_st_file *f, const char *path);
void cc_st_close(cc_st_file *f);
const cc_st_tensor *cc_st_find(const cc_st_file *f, const char *name);
int64_t cc_st_numel(const cc_st_tensor *t);
/* Convert a floating tensor (F64/F32/F16/BF16) to float. */
int cc_st_read_float(const cc_st_file *f, const cc_st_tensor *t, float *out);
const char *cc_st_meta(const cc_st_file *f, const char *key); /* NULL if absent */

/* The xxh64 (seed 0) that CC_ST_HEADER_CHECKSUM_KEY holds, over this byte
 * string (every field followed by a NUL byte; values cannot hold NUL):
 *   for each __metadata__ key except the two checksum keys, sorted bytewise:
 *       "m", key, value
 *   for each tensor, sorted by name bytewise:
 *       "t", name, dtype ("F32"), shape in decimal joined by "," ("" for a
 *       scalar), begin and end data offsets in decimal joined by ","
 * so an outside tool can recompute it from the parsed JSON header. */
uint64_t cc_st_header_digest(const char *const *meta_keys, const char *const *meta_vals, int n_meta,
                             const cc_st_tensor *t, int n);

/* Writer: tensors in the order given, written to a temporary file in the same
 * folder, flushed and synced, then renamed over `path`. The metadata gets
 * CC_ST_CHECKSUM_KEY and CC_ST_HEADER_CHECKSUM_KEY besides the keys given. */
typedef struct cc_st_entry {
    const char *name;
    cc_st_dtype dtype;
    int ndim;
    int64_t shape[CC_ST_MAX_DIMS];
    const void *data;
} cc_st_entry;

int cc_st_write(const char *path, const cc_st_entry *e, int n, const char *const *meta_keys,
                const char *const *meta_vals, int n_meta);

/* Testing aid for tests/crash.sh (CATCHAT_TEST_WRITE_DELAY_US, set by the
 * CLI): stretch every write by a pause after each tensor, so that a SIGKILL
 * lands inside it. 0 (the default) = none. */
void cc_st_set_write_delay_us(long us);

size_t cc_st_dtype_size(cc_st_dtype d);
float cc_half_to_float(uint16_t h);
uint16_t cc_float_to_half(float f);
float cc_bf16_to_float(uint16_t h);

#endif
