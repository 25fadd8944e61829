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
 * model's width with its threads: the fastest of at least 3 calls in about
 * 50 ms (the fastest, because other load on the machine only slows a call, and
 * a call large enough, 8M multiply-adds or more, that starting the threads
 * does not count). */
static double measured_macs_per_s(const cc_config *c)
{
    const int N = c->d_model, K = c->d_model;
    int M = (int)(8e6 / ((double)N * K));
    M = M < 256 ? 256 : M > 8192 ? 8192 : M;
    float *in = cc_malloc(sizeof(float) * M * K), *w = cc_malloc(sizeof(float) * N * K),
          *out = cc_malloc(sizeof(float) * M * N);
    for (int i = 0; i < M * K; i++) in[i] = (float)((i % 7) - 3) * 0.1f; /* not zeros: no denormal shortcuts */
    for (int i = 0; i < N * K; i++) w[i] = (float)((i % 5) - 2) * 0.1f;
    cpu_matmul_forward(out, in, w, NULL, M, N, K); /* the thread team is started outside the timing */
    double best = 0;
    const double t_end = cc_now_ms() + 50;
    for (int reps = 0; reps < 3 || (cc_now_ms() < t_end && reps < 1000); reps++) {
        const double t0 = cc_now_ms();
        cpu_matmul_forward(out, in, w, NULL, M, N, K);
        const double ms = cc_now_ms() - t0;
        if (reps == 0 || ms < best) best = ms;
    }
    free(in);
    free(w);
    free(out);
    return (double)M * N * K / (best > 0 ? best * 1e-3 : 1e-6);
}

double cc_step_macs(const cc_config *cfg)
{
    /* a backward costs two forwards */
    return 3.0 * (double)cfg->batch_size * cfg->seq_len * cfg->grad_accum * macs_per_position(cfg);
}

double cc_cpu_step_estimate_s(const cc_config *cfg)
{
    /* the rest of the step (the recurrence's small per-step products, the element-wise work, the optimizer)
     * comes out near the matmul's rate overall: within 20% of the measured step on the default and cpu
     * configs on 2 idle cores */
    return cc_step_macs(cfg) / measured_macs_per_s(cfg);
}
