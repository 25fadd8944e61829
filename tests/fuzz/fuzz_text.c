/* libFuzzer harness: the raw-text (byte tokenizer) loader and batches on it. */
#include <stdlib.h>
#include <string.h>
#include "catchat/data.h"
#include "catchat/util.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    cc_error_quiet = 1;
    cc_tokens t;
    /* vocab 200: bytes ≥ 200 must be refused cleanly */
    if (cc_tokens_from_bytes(&t, data, size, "fuzz.txt", size % 2 ? 256 : 200) == 0) {
        cc_loader ld;
        if (cc_loader_init(&ld, &t, 3, 5, size % 3 == 0, 11) == 0) {
            int x[15], y[15];
            cc_loader_batch(&ld, 0, x, y);
            cc_loader_batch(&ld, 99, x, y);
            cc_loader_free(&ld);
        }
        cc_tokens_free(&t);
    }
    return 0;
}
