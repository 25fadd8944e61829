/* The batch loader (include/catchat/data.h): windows of a dataset in file
 * order or in a keyed order shuffled per epoch, each batch's ids checked. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/data.h"
#include "catchat/rng.h"
#include "catchat/util.h"

int cc_loader_init(cc_loader *ld, const cc_tokens *src, int B, int T, int shuffle, uint64_t seed)
{
    memset(ld, 0, sizeof(*ld));
    ld->src = src;
    ld->B = B;
    ld->T = T;
    ld->shuffle = shuffle;
    ld->seed = seed;
    ld->perm_epoch = -1;
    /* each file's windows, in file order (one file: window k at token k·T) */
    const int nf = src->nfiles > 0 ? src->nfiles : 1;
    ld->win_end = cc_malloc(sizeof(size_t) * (size_t)nf);
    size_t begin = 0;
    ld->nwin = 0;
    for (int f = 0; f < nf; f++) {
        const size_t end = src->nfiles > 0 ? src->file_end[f] : src->n, len = end - begin;
        ld->nwin += len > 0 ? (len - 1) / (size_t)T : 0;
        ld->win_end[f] = ld->nwin;
        begin = end;
    }
    if (ld->nwin == 0) {
        cc_loader_free(ld);
        if (nf > 1) return cc_error("%s: no file holds a window of seq_len+1 = %d tokens", src->path, T + 1);
        return cc_error("%s: %zu tokens is shorter than one window of seq_len+1 = %d tokens", src->path, src->n,
                        T + 1);
    }
    for (int f = 0; shuffle && nf > 1 && f < nf; f++) /* the training set says which files it cannot use */
        if (ld->win_end[f] == (f ? ld->win_end[f - 1] : 0))
            fprintf(stderr, "catchat: %s: file %d of %d is shorter than one window of seq_len+1 = %d tokens: "
                            "not used\n", src->path, f + 1, nf, T + 1);
    ld->order = CC_ORDER_FEISTEL;
    for (ld->half = 1; ld->half < 32 && (1ULL << (2 * ld->half)) < (uint64_t)ld->nwin; ld->half++) {}
    return 0;
}

void cc_loader_set_order(cc_loader *ld, int order)
{
    ld->order = order;
    ld->perm_epoch = -1;
}

void cc_loader_free(cc_loader *ld)
{
    free(ld->perm);
    free(ld->win_end);
    ld->perm = NULL;
    ld->win_end = NULL;
}

/* Window k: its file and its first token there (its index in the file times T). */
static int window_start(const cc_loader *ld, size_t k, size_t *first)
{
    const int nf = ld->src->nfiles;
    int lo = 0, hi = nf - 1; /* the first file whose windows end past k */
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (ld->win_end[mid] > k) hi = mid;
        else lo = mid + 1;
    }
    *first = (k - (lo > 0 ? ld->win_end[lo - 1] : 0)) * (size_t)ld->T;
    return lo;
}

static uint64_t mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ULL; /* splitmix64's finaliser */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Position i of an epoch's order: a six-round Feistel network keyed by the
 * seed and the epoch permutes [0, 4^half), which holds nwin and at most four
 * times it; applied again until the index lands below nwin (cycle-walking),
 * it permutes [0, nwin) itself. */
static size_t feistel_window(const cc_loader *ld, uint64_t epoch, uint64_t i)
{
    const uint64_t mask = (1ULL << ld->half) - 1, key = mix64(ld->seed ^ (0x5bd1e995ULL * (epoch + 1)));
    uint64_t x = i;
    do {
        uint64_t l = x >> ld->half, r = x & mask;
        for (uint64_t round = 0; round < 6; round++) {
            const uint64_t f = mix64(key ^ (round * 0x632be59bd9b4e019ULL) ^ r) & mask;
            const uint64_t nl = r;
            r = l ^ f;
            l = nl;
        }
        x = l << ld->half | r;
    } while (x >= ld->nwin);
    return (size_t)x;
}

/* Window visited at global position `w` (counting windows, not batches). */
static size_t window_at(cc_loader *ld, uint64_t w)
{
    if (!ld->shuffle) return (size_t)(w % ld->nwin);
    const uint64_t epoch = w / ld->nwin;
    if (ld->order == CC_ORDER_FEISTEL) return feistel_window(ld, epoch, w % ld->nwin);
    if ((long)epoch != ld->perm_epoch) { /* an earlier run's order: the whole permutation, once an epoch */
        if (!ld->perm) ld->perm = cc_malloc(sizeof(uint32_t) * ld->nwin);
        cc_rng rng;
        cc_rng_seed(&rng, ld->seed ^ (0x5bd1e995ULL * (uint64_t)(epoch + 1)));
        for (size_t i = 0; i < ld->nwin; i++) ld->perm[i] = (uint32_t)i;
        for (size_t i = ld->nwin - 1; i > 0; i--) { /* Fisher-Yates */
            size_t j = (size_t)cc_rng_below(&rng, i + 1);
            uint32_t tmp = ld->perm[i];
            ld->perm[i] = ld->perm[j];
            ld->perm[j] = tmp;
        }
        ld->perm_epoch = (long)epoch;
    }
    return ld->perm[w % ld->nwin];
}

int cc_loader_batch(cc_loader *ld, uint64_t index, int *x, int *y) { return cc_loader_batch_part(ld, index, 0, 1, x, y); }

int cc_loader_batch_part(cc_loader *ld, uint64_t index, int part, int nparts, int *x, int *y)
{
    const int T = ld->T;
    const uint32_t vocab = (uint32_t)ld->src->vocab_size;
    const uint64_t first = (index * (uint64_t)nparts + (uint64_t)part) * (uint64_t)ld->B;
    int rc = 0;
    for (int b = 0; b < ld->B; b++) {
        size_t start;
        const int f = window_start(ld, window_at(ld, first + (uint64_t)b), &start);
        const cc_token_file *file = &ld->src->files[f];
        /* each id checked as it is read: a shard is mapped, not checked at load; a bad one is said once and
         * given as 0 */
        for (int t = 0; t <= T; t++) {
            uint32_t id = cc_token_file_at(file, start + (size_t)t);
            if (id >= vocab) {
                if (rc == 0) rc = cc_tokens_bad_id(ld->src, f, start + (size_t)t, id);
                id = 0;
            }
            if (t < T) x[(size_t)b * T + t] = (int)id;
            if (t > 0) y[(size_t)b * T + t - 1] = (int)id;
        }
    }
    return rc;
}
