/* libFuzzer harness: the .bin token shard loader and the batch loader on it. */
#include <stdlib.h>
#include <string.h>
#include "catchat/data.h"
#include "catchat/util.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    cc_error_quiet = 1;
    /* every input is a shard: the magic first, then the fuzzer's bytes */
    uint8_t *buf = malloc(size + 4);
    const uint32_t magic = CC_SHARD_MAGIC;
    memcpy(buf, &magic, 4);
    memcpy(buf + 4, data, size);
    cc_tokens t;
    if (cc_tokens_from_bytes(&t, buf, size + 4, "fuzz.bin", 50257) == 0) {
        cc_loader ld;
        if (cc_loader_init(&ld, &t, 2, 8, 1, 7) == 0) {
            int x[16], y[16];
            cc_loader_batch(&ld, 0, x, y);
            cc_loader_batch(&ld, 1234567, x, y);
            cc_loader_free(&ld);
        }
        cc_tokens_free(&t);
    }
    free(buf);
    return 0;
}
