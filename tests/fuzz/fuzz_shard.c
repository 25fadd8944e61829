/* libFuzzer harness: the .bin token shard loader and the batch loader on it.
 * Beyond "no crash" it checks (abort() is the finding): a shard that loads
 * has version 1 and holds the token count its header states, in exactly the
 * bytes after the 1024-byte header, every id < vocab (50257); every id a
 * batch holds is < vocab and y is x moved one token on. */
#include <stdlib.h>
#include <string.h>
#include "catchat/data.h"
#include "catchat/util.h"

enum { B = 2, T = 8, VOCAB = 50257 };

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void check_tokens(const cc_tokens *t, const uint8_t *buf, size_t len)
{
    const uint32_t count = le32(buf + 8);
    if (!t->is_shard || le32(buf + 4) != CC_SHARD_VERSION || t->n != count ||
        len != CC_SHARD_HEADER_INTS * 4 + 2 * (size_t)count)
        abort();
    for (size_t i = 0; i < t->n; i++)
        (void)cc_tokens_at(t, i); /* every token readable; ids are checked where a batch reads them */
}

static void check_batch(const int *x, const int *y)
{
    for (int i = 0; i < B * T; i++) {
        if (x[i] < 0 || x[i] >= VOCAB || y[i] < 0 || y[i] >= VOCAB) abort();
        if (i % T != T - 1 && y[i] != x[i + 1]) abort();
    }
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    cc_error_quiet = 1;
    /* every input is a shard: the magic first, then the fuzzer's bytes */
    uint8_t *buf = malloc(size + 4);
    const uint32_t magic = CC_SHARD_MAGIC;
    memcpy(buf, &magic, 4);
    memcpy(buf + 4, data, size);
    cc_tokens t;
    if (cc_tokens_from_bytes(&t, buf, size + 4, "fuzz.bin", VOCAB) == 0) {
        check_tokens(&t, buf, size + 4);
        cc_loader ld;
        if (cc_loader_init(&ld, &t, B, T, 1, 7) == 0) {
            int x[B * T], y[B * T];
            cc_loader_batch(&ld, 0, x, y);
            check_batch(x, y);
            cc_loader_batch(&ld, 1234567, x, y);
            check_batch(x, y);
            cc_loader_free(&ld);
        }
        cc_tokens_free(&t);
    }
    free(buf);
    return 0;
}
