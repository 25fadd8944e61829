/* Evaluation: mean loss, top-1 and top-5 over the first `batches` batches of
 * the validation data, in file order, so every evaluation sees the same text. */
#include <stdlib.h>
#include "catchat/train.h"
#include "catchat/util.h"

int cc_evaluate(cc_executor *ex, cc_loader *val, long batches, cc_eval_result *out)
{
    const size_t n = (size_t)val->B * val->T;
    int *x = cc_malloc(sizeof(int) * n), *y = cc_malloc(sizeof(int) * n);
    cc_score s = { 0 };
    /* Never more batches than the file has windows for: no window twice. */
    long max_batches = (long)((val->nwin + (size_t)val->B - 1) / (size_t)val->B);
    if (batches > max_batches) batches = max_batches;
    for (long i = 0; i < batches; i++) {
        cc_loader_batch(val, (uint64_t)i, x, y);
        ex->ops->score(ex, x, y, &s);
    }
    free(x);
    free(y);
    out->scored = s.scored;
    out->loss = s.scored ? s.loss_sum / (double)s.scored : 0;
    out->top1 = s.scored ? (double)s.top1 / (double)s.scored : 0;
    out->top5 = s.scored ? (double)s.top5 / (double)s.scored : 0;
    return 0;
}
