/* libFuzzer harness: the safetensors reader, its tensor conversion and the
 * config stored in a checkpoint's metadata. */
#include <stdlib.h>
#include <string.h>
#include "catchat/config.h"
#include "catchat/safetensors.h"
#include "catchat/util.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    cc_error_quiet = 1;
    uint8_t *buf = malloc(size ? size : 1);
    memcpy(buf, data, size);
    cc_st_file f;
    if (cc_st_open_buffer(&f, buf, size, "fuzz.safetensors") != 0) return 0; /* buf freed on failure */
    for (int i = 0; i < f.n; i++) {
        const int64_t n = cc_st_numel(&f.t[i]);
        if (n > (1 << 20)) continue;
        float *out = malloc(sizeof(float) * (size_t)(n ? n : 1));
        cc_st_read_float(&f, &f.t[i], out);
        free(out);
    }
    const char *js = cc_st_meta(&f, "config");
    if (js) {
        cc_config c;
        cc_config_defaults(&c);
        cc_config_from_json(&c, js, "fuzz");
    }
    cc_st_close(&f);
    return 0;
}
