/* libFuzzer harness: the raw-text (byte tokenizer) loader and batches on it.
 * Beyond "no crash" it checks (abort() is the finding): read as text, the
 * input loads exactly when every byte is < vocab (200 or 256), and then its
 * tokens are its bytes; read with format auto, an input taken as text has
 * those tokens too; every id a batch holds is < vocab and y is x moved one
 * token on. */
#include <stdlib.h>
#include <string.h>
#include "catchat/data.h"
#include "catchat/util.h"

enum { B = 3, T = 5 };

static int all_below(const unsigned char *data, size_t size, int vocab)
{
    for (size_t i = 0; i < size; i++)
        if (data[i] >= vocab) return 0;
    return 1;
}

static void check_tokens(const cc_tokens *t, const unsigned char *data, size_t size)
{
    if (t->n != size) abort();
    for (size_t i = 0; i < size; i++)
        if (cc_tokens_at(t, i) != data[i]) abort();
}

static void check_batch(const int *x, const int *y, int vocab)
{
    for (int i = 0; i < B * T; i++) {
        if (x[i] < 0 || x[i] >= vocab || y[i] < 0 || y[i] >= vocab) abort();
        if (i % T != T - 1 && y[i] != x[i + 1]) abort();
    }
}

static void batches(const cc_tokens *t, int shuffle, int vocab)
{
    cc_loader ld;
    if (cc_loader_init(&ld, t, B, T, shuffle, 11) != 0) return;
    int x[B * T], y[B * T];
    cc_loader_batch(&ld, 0, x, y);
    check_batch(x, y, vocab);
    cc_loader_batch(&ld, 99, x, y);
    check_batch(x, y, vocab);
    cc_loader_free(&ld);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    cc_error_quiet = 1;
    const int vocab = size % 2 ? 256 : 200; /* 200: bytes >= 200 must be refused */
    cc_tokens t;
    const int loaded = cc_tokens_from_bytes_as(&t, data, size, "fuzz.txt", vocab, "text") == 0;
    if (loaded != all_below(data, size, vocab)) abort();
    if (loaded) {
        check_tokens(&t, data, size);
        batches(&t, size % 3 == 0, vocab);
        cc_tokens_free(&t);
    }
    /* auto also tells shards and damaged shard headers apart from text */
    if (cc_tokens_from_bytes(&t, data, size, "fuzz.txt", vocab) == 0) {
        if (!t.is_shard) check_tokens(&t, data, size);
        batches(&t, size % 3 == 0, vocab);
        cc_tokens_free(&t);
    }
    return 0;
}
