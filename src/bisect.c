/* catchat bisect: train the same initial weights on the same batches with the
 * sequences capped at each length, and report for each length whether it
 * stayed finite, or the first step that did not and where (NaN provenance). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/data.h"
#include "catchat/executor.h"
#include "catchat/optim.h"
#include "catchat/stability.h"
#include "catchat/util.h"

int cc_bisect(const cc_config *cfg, const int *lengths, int n, long steps, cc_bisect_result *res, FILE *out)
{
    int Tmax = 0;
    for (int i = 0; i < n; i++) Tmax = lengths[i] > Tmax ? lengths[i] : Tmax;
    const int B = cfg->batch_size;
    cc_tokens tok;
    cc_loader ld;
    if (cc_tokens_load_as(&tok, cfg->train, cfg->vocab_size, cfg->data_format) != 0) return -1;
    if (cc_loader_init(&ld, &tok, B, Tmax, 1, cfg->seed) != 0) {
        cc_tokens_free(&tok);
        return -1;
    }
    int *xf = cc_malloc(sizeof(int) * B * Tmax), *yf = cc_malloc(sizeof(int) * B * Tmax);
    int *x = cc_malloc(sizeof(int) * B * Tmax), *y = cc_malloc(sizeof(int) * B * Tmax);
    int rc = 0, shortest = 0;
    fprintf(out, "catchat bisect: D=%d L=%d W=%d B=%d, %ld step%s per length, seed %llu\n", cfg->d_model,
            cfg->n_layers, cfg->ctx_window, B, steps, steps == 1 ? "" : "s", (unsigned long long)cfg->seed);
    fflush(out); /* said before the first length's steps, however long they take (a pipe buffers) */
    for (int li = 0; li < n && rc == 0; li++) {
        const int T = lengths[li];
        cc_config c = *cfg;
        c.seq_len = T;
        cc_executor *ex = cc_executor_create(&c, B, T);
        if (!ex) { rc = -1; break; }
        cc_bisect_result *r = &res[li];
        memset(r, 0, sizeof(*r));
        r->length = T;
        cc_finite_report check;
        ex->check = &check;
        cc_scaler sc;
        cc_scaler_init(&sc, &c);
        cc_opt_counts oc = { 0, 0 };
        const double t0 = cc_now_ms();
        for (long s = 0; s < steps; s++) {
            if (cc_loader_batch(&ld, (uint64_t)s, xf, yf) != 0) { /* an id past vocab_size: said */
                rc = -1;
                break;
            }
            for (int b = 0; b < B; b++) { /* cap: the first T positions of each window */
                memcpy(x + (size_t)b * T, xf + (size_t)b * Tmax, sizeof(int) * T);
                memcpy(y + (size_t)b * T, yf + (size_t)b * Tmax, sizeof(int) * T);
            }
            memset(&check, 0, sizeof(check));
            const double loss = ex->ops->forward_backward(ex, x, y, sc.scale);
            if (check.found || !isfinite(loss)) {
                r->nonfinite_step = s + 1;
                r->where = check;
                break;
            }
            cc_step_report rep;
            cc_optimizer_step(ex, &c, &sc, &oc, NULL, s, &rep);
            if (s == 0) r->first_loss = loss;
            r->last_loss = loss;
            r->steps_done = s + 1;
        }
        r->ms_per_step = r->steps_done ? (cc_now_ms() - t0) / (double)r->steps_done : 0;
        if (rc != 0) { /* the data, said: no line for this length */
            ex->ops->destroy(ex);
            break;
        }
        if (r->nonfinite_step) {
            char desc[256];
            cc_finite_describe(&r->where, desc, sizeof(desc));
            fprintf(out, "seq_len %5d: NON-FINITE at step %ld, first in %s\n", T, r->nonfinite_step, desc);
            if (!shortest || T < shortest) shortest = T;
        } else {
            fprintf(out, "seq_len %5d: finite through %ld step%s (loss %.4f -> %.4f, %.1f ms/step incl. checks)\n", T,
                    r->steps_done, r->steps_done == 1 ? "" : "s", r->first_loss, r->last_loss, r->ms_per_step);
        }
        fflush(out);
        ex->ops->destroy(ex);
    }
    if (rc == 0) {
        if (shortest) fprintf(out, "shortest length that went non-finite: %d\n", shortest);
        else fprintf(out, "every length stayed finite\n");
    }
    free(xf);
    free(yf);
    free(x);
    free(y);
    cc_loader_free(&ld);
    cc_tokens_free(&tok);
    return rc;
}
