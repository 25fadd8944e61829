/* How long a training step takes on the CPU reference, said before the first
 * one: a config sized for a GPU (the default) takes minutes a step there, and a
 * user should hear that at once rather than after the first step. */
#include <stdlib.h>
#include "catchat/executor.h"
#include "catchat/util.h"

/* Multiply-adds a position costs in a forward pass: the GRU layers' input and
 * recurrent projections (3D x D each), the context stream's qkv and out
 * projections, its window of scores and weighted values, the classifier. */
static double macs_per_position(const cc_config *c)
{
    const double D = c->d_model, W = c->ctx_window < c->seq_len ? c->ctx_window : c->seq_len;
    return c->n_layers * 6.0 * D * D + 4.0 * D * D + 2.0 * W * D + D * (double)c->vocab_size;
}

/* Multiply-adds a second the reference's matmul reaches on this machine, at the
 * model's width with its threads: timed for about 50 ms. */
static double measured_macs_per_s(const cc_config *c)
{
    const int M = 256, N = c->d_model, K = c->d_model;
    float *in = cc_malloc(sizeof(float) * M * K), *w = cc_malloc(sizeof(float) * N * K),
          *out = cc_malloc(sizeof(float) * M * N);
    for (int i = 0; i < M * K; i++) in[i] = (float)((i % 7) - 3) * 0.1f; /* not zeros: no denormal shortcuts */
    for (int i = 0; i < N * K; i++) w[i] = (float)((i % 5) - 2) * 0.1f;
    cpu_matmul_forward(out, in, w, NULL, M, N, K); /* the thread team is started outside the timing */
    int reps = 0;
    const double t0 = cc_now_ms();
    double ms;
    do {
        cpu_matmul_forward(out, in, w, NULL, M, N, K);
        reps++;
    } while ((ms = cc_now_ms() - t0) < 50 && reps < 1000);
    free(in);
    free(w);
    free(out);
    return reps * (double)M * N * K / (ms > 0 ? ms * 1e-3 : 1e-3);
}

double cc_cpu_step_estimate_s(const cc_config *cfg)
{
    const double positions = (double)cfg->batch_size * cfg->seq_len * cfg->grad_accum;
    /* a backward costs two forwards; the rest of the step (the recurrence's small per-step products, the
     * element-wise work, the optimizer) comes out near the matmul's rate overall: within 10% of the measured
     * step on the default and cpu configs on 2 cores */
    const double work = 3.0 * positions * macs_per_position(cfg);
    return work / measured_macs_per_s(cfg);
}
