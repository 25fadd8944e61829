/* libFuzzer harness: the safetensors reader, its tensor conversion and the
 * config stored in a checkpoint's metadata. Beyond "no crash" it checks what
 * the reader promises of a file it opens (abort() is the finding): every
 * tensor's bytes lie in the data section and match its shape and dtype, and
 * cc_st_read_float converts every floating tensor (F64/F32/F16/BF16, F32
 * bit for bit) and refuses every other dtype that holds an element. */
#include <stdlib.h>
#include <string.h>
#include "catchat/config.h"
#include "catchat/safetensors.h"
#include "catchat/util.h"

static int is_floating(cc_st_dtype d) { return d == ST_F64 || d == ST_F32 || d == ST_F16 || d == ST_BF16; }

/* The byte range the open accepted is the one the shape and dtype need. */
static void check_extent(const cc_st_file *f, const cc_st_tensor *t)
{
    const int64_t n = cc_st_numel(t);
    if (n < 0 || t->begin > t->end || t->end > f->data_len) abort();
    if ((uint64_t)(t->end - t->begin) != (uint64_t)n * cc_st_dtype_size(t->dtype)) abort();
}

static void check_convert(const cc_st_file *f, const cc_st_tensor *t)
{
    const size_t n = (size_t)cc_st_numel(t); /* at most the input's size: check_extent */
    float *out = malloc(sizeof(float) * (n ? n : 1));
    const int rc = cc_st_read_float(f, t, out);
    /* an empty tensor has nothing to convert: any dtype may pass */
    if (rc != 0 ? is_floating(t->dtype) : !is_floating(t->dtype) && n > 0) abort();
    if (rc == 0 && t->dtype == ST_F32 && n && memcmp(out, f->data + t->begin, 4 * n) != 0) abort();
    free(out);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    cc_error_quiet = 1;
    uint8_t *buf = malloc(size ? size : 1);
    memcpy(buf, data, size);
    cc_st_file f;
    if (cc_st_open_buffer(&f, buf, size, "fuzz.safetensors") != 0) return 0; /* buf freed on failure */
    for (int i = 0; i < f.n; i++) {
        check_extent(&f, &f.t[i]);
        check_convert(&f, &f.t[i]);
    }
    const char *js = cc_st_meta(&f, "config");
    if (js) { /* parses or is refused: either way no crash, nothing more promised */
        cc_config c;
        cc_config_defaults(&c);
        cc_config_from_json(&c, js, "fuzz");
    }
    cc_st_close(&f);
    return 0;
}
