/* libFuzzer harness: a tokenizer.json as a checkpoint's metadata carries it
 * (any bytes: the file is the user's), parsed against the byte tokenizer's
 * 256 tokens plus a few more, then the input itself encoded as a prompt.
 * Beyond "no crash" it checks (abort() is the finding): every id is one of
 * the vocabulary's, and the ids' bytes are the prompt's, in order. */
#include <stdlib.h>
#include <string.h>
#include "catchat/bpe.h"
#include "catchat/util.h"
#include "catchat/vocab.h"

/* The vocabulary the seed corpus's tokenizer.json describes (make_corpus.py):
 * the bytes, then "he", " t", "the". */
static const char VOCAB_EXTRA[] = "6865\n2074\n746865\n";

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    cc_error_quiet = 1;
    static cc_vocab vocab;
    if (!vocab.n) {
        char text[1024 + sizeof(VOCAB_EXTRA)] = "";
        for (int b = 0; b < 256; b++) {
            static const char hex[] = "0123456789abcdef";
            const size_t n = strlen(text);
            text[n] = hex[b >> 4];
            text[n + 1] = hex[b & 15];
            text[n + 2] = '\n';
            text[n + 3] = 0;
        }
        strcat(text, VOCAB_EXTRA);
        if (cc_vocab_parse(&vocab, text, strlen(text), "fuzz.vocab") != 0) abort();
    }
    char why[160];
    cc_bpe *b = cc_bpe_parse((const char *)data, size, &vocab, why, sizeof(why));
    if (!b) return 0;
    int *ids, n;
    if (cc_bpe_encode(b, (const char *)data, size, &ids, &n) == 0) {
        size_t at = 0;
        for (int i = 0; i < n; i++) {
            if (ids[i] < 0 || ids[i] >= vocab.n) abort();
            const size_t len = (size_t)vocab.len[ids[i]];
            if (at + len > size || memcmp(data + at, vocab.bytes[ids[i]], len) != 0) abort();
            at += len;
        }
        if (at != size) abort();
        free(ids);
    }
    cc_bpe_free(b);
    return 0;
}
