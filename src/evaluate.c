/* Evaluation: mean loss, top-1 and top-5 over the first `batches` batches of
 * the validation data, in file order, so every evaluation sees the same text,
 * and each window of it at most once. */
#include <stdlib.h>
#include "catchat/train.h"
#include "catchat/util.h"

int cc_evaluate(cc_executor *ex, cc_loader *val, long batches, cc_eval_result *out)
{
    const size_t n = (size_t)val->B * val->T;
    int *x = cc_malloc(sizeof(int) * n), *y = cc_malloc(sizeof(int) * n);
    cc_score s = { 0 };
    int rc = 0;
    /* Never more batches than the file has windows for: no window twice. */
    const size_t per_batch = (size_t)val->B * (size_t)(ex->dist ? ex->dist->world : 1);
    long max_batches = (long)((val->nwin + per_batch - 1) / per_batch);
    if (batches > max_batches) batches = max_batches;
    const int rank = ex->dist ? ex->dist->rank : 0, world = ex->dist ? ex->dist->world : 1;
    for (long i = 0; i < batches && rc == 0; i++) {
        rc = cc_loader_batch_part(val, (uint64_t)i, rank, world, x, y); /* an id past vocab_size: said, no score */
        /* The last batch runs past the end of the file and the loader wraps:
         * those rows are ignored (y = -1), so no window is scored twice. */
        const uint64_t first = ((uint64_t)i * (uint64_t)world + (uint64_t)rank) * (uint64_t)val->B;
        for (int b = 0; b < val->B; b++)
            if (first + (uint64_t)b >= val->nwin)
                for (int t = 0; t < val->T; t++) y[(size_t)b * val->T + t] = -1;
        ex->ops->score(ex, x, y, &s);
    }
    free(x);
    free(y);
    if (ex->dist && ex->dist->active) { /* each rank scored its own slice */
        /* with whether any rank met an id past vocab_size: all stop, none waits for the others */
        double v[5] = { s.loss_sum, (double)s.scored, (double)s.top1, (double)s.top5, rc != 0 };
        cc_dist_allreduce_host(ex->dist, v, 5, 0);
        if (v[4] > 0) rc = -1;
        s.loss_sum = v[0];
        s.scored = (long)v[1];
        s.top1 = (long)v[2];
        s.top5 = (long)v[3];
    }
    if (rc != 0) return -1;
    out->scored = s.scored;
    out->loss = s.scored ? s.loss_sum / (double)s.scored : 0;
    out->top1 = s.scored ? (double)s.top1 / (double)s.scored : 0;
    out->top5 = s.scored ? (double)s.top5 / (double)s.scored : 0;
    return 0;
}
