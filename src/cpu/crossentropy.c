/* Softmax cross-entropy with ignored targets (y = −1), fused with its
 * gradient. The gradient carries the loss scale: dlogits = (S/N)(softmax −
 * onehot), so the backward pass works on the scaled loss as in mixed precision. */
#include "cpu/real.h"

void CC_FN(cpu_crossentropy)(real *dlogits, real *row_loss, const real *logits, const int *y, int M, int V,
                             double grad_scale, cc_score *score)
{
    for (int m = 0; m < M; m++) {
        const real *lr = logits + (size_t)m * V;
        real *dl = dlogits ? dlogits + (size_t)m * V : NULL;
        const int tgt = y[m];
        if (tgt < 0) {
            if (dl) for (int v = 0; v < V; v++) dl[v] = 0;
            if (row_loss) row_loss[m] = 0;
            continue;
        }
        real mx = lr[0];
        for (int v = 1; v < V; v++) if (lr[v] > mx) mx = lr[v];
        double sum = 0;
        for (int v = 0; v < V; v++) sum += exp((double)(lr[v] - mx));
        const double lse = (double)mx + log(sum);
        const real lt = lr[tgt];
        if (row_loss) row_loss[m] = (real)(lse - (double)lt);
        if (score) {
            score->loss_sum += lse - (double)lt;
            score->scored++;
            int above = 0; /* classes strictly better than the target; ties favour it */
            for (int v = 0; v < V; v++) above += lr[v] > lt;
            /* NaN compares false, so NaN logits would rank the target first:
             * a position whose loss is not finite is never a correct prediction */
            const int finite = isfinite(lse - (double)lt);
            score->top1 += finite && above < 1;
            score->top5 += finite && above < 5;
        }
        if (dl) {
            for (int v = 0; v < V; v++) {
                const double pv = exp((double)lr[v] - lse);
                dl[v] = (real)(grad_scale * (pv - (v == tgt ? 1.0 : 0.0)));
            }
        }
    }
}
