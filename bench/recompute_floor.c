/* How fast a step that rebuilds its activations could be at best: the step
 * with every layer's activations kept ([gpu] recompute = off, wavefront as
 * planned), timed alone and with the rebuild's work for every layer running
 * beside it on a stream of its own, with no dependency on the step.
 *
 * The rebuild's work (what recompute = on adds to a step: src/gpu/
 * recompute_gpu.c) for each layer l over all B·T positions: u^l (l adds),
 * its norm into FP16, FP16 h_{t-1}, the input GEMM (W_ih, with b_ih) and
 * the two of W_hh, then the gate math. Any step that rebuilds gx and the
 * gates does at least this much more than the step that keeps them, and a
 * real one can start it only once the backward frees memory and must
 * finish each window before its BPTT; here it may start with the step and
 * fill any SM the step leaves idle, at the lowest stream priority (the
 * step's streams are all higher but its weight GEMMs') or at the lanes'
 * priority. So "together" bounds such a step's time from below.
 *
 *   build/bench/recompute_floor CONFIG [--set KEY=VALUE ...] [--steps N]
 * Prints one JSON object. Needs a GPU. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>
#include "catchat/config.h"
#include "catchat/executor.h"
#include "catchat/kernels.h"
#include "catchat/layout.h"
#include "catchat/matmul.h"
#include "catchat/optim.h"
#include "catchat/rng.h"
#include "catchat/util.h"

#define CK(x) do { cudaError_t e_ = (x); if (e_) { fprintf(stderr, "recompute_floor: %s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

typedef struct {
    int M, D, L;
    cc_norm_consts nc;
    float *u, *h, *gates, *ghn, *ir, *gain, *bih, *bhh;
    void *a16, *hp16, *wih, *whh;
    gpu_matmul_ctx *gemm;
} rebuild_work;

static void *dev_filled(size_t bytes, int byte)
{
    void *p;
    CK(cudaMalloc(&p, bytes));
    CK(cudaMemset(p, byte, bytes)); /* small non-zero values, never zeros */
    return p;
}

static void work_init(rebuild_work *w, const cc_dims *d, int B, int T)
{
    const size_t M = (size_t)B * T, D = (size_t)d->D;
    w->M = (int)M;
    w->D = d->D;
    w->L = d->L;
    w->nc = cc_norm_consts_of(d);
    w->u = dev_filled(4 * M * D, 0x3c); /* 0x3c3c3c3c: 0.0115 as FP32 */
    w->h = dev_filled(4 * M * D, 0x3b);
    w->gates = dev_filled(12 * M * D, 0);
    w->ghn = dev_filled(4 * M * D, 0);
    w->ir = dev_filled(4 * M, 0);
    w->gain = dev_filled(4 * D, 0x3f);
    w->bih = dev_filled(12 * D, 0x3a);
    w->bhh = dev_filled(12 * D, 0x3a);
    w->a16 = dev_filled(2 * M * D, 0);
    w->hp16 = dev_filled(2 * M * D, 0);
    w->wih = dev_filled(6 * D * D, 0x11); /* 0x1111: 6.5e-4 as FP16 */
    w->whh = dev_filled(6 * D * D, 0x11);
    w->gemm = gpu_matmul_create();
}

/* Every layer's rebuild, issued on s. */
static void work_issue(rebuild_work *w, cudaStream_t s)
{
    const int M = w->M, D = w->D;
    const size_t MD = (size_t)M * D;
    for (int l = 0; l < w->L; l++) {
        for (int j = 0; j < l; j++) launch_add(w->u, w->u, w->h, MD, s);
        launch_rmsnorm_forward(NULL, w->a16, w->ir, w->u, w->gain, M, D, &w->nc, s);
        launch_f32_to_f16(w->hp16, w->h, MD, s);
        gpu_matmul(w->gemm, w->gates, 3 * D, w->a16, D, 0, w->wih, D, 1, M, 3 * D, D, 1.f, 0.f, w->bih, s);
        gpu_matmul(w->gemm, w->gates, 3 * D, w->hp16, D, 0, w->whh, D, 1, M, 2 * D, D, 1.f, 1.f, NULL, s);
        gpu_matmul(w->gemm, w->ghn, D, w->hp16, D, 0, (const uint16_t *)w->whh + (size_t)2 * D * D, D, 1, M, D, D,
                   1.f, 0.f, NULL, s);
        launch_gru_cell_rebuild(w->gates, w->ghn, w->bhh, M, D, s);
    }
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One training step (as catchat bench times it), with the rebuild beside it on `side` when non-NULL;
 * ms until both are done. */
static double one_step(cc_executor *ex, const cc_config *cfg, cc_scaler *sc, cc_opt_counts *oc, long i,
                       const int *x, const int *y, rebuild_work *w, cudaStream_t side)
{
    cc_step_report rep;
    CK(cudaDeviceSynchronize());
    const double t0 = cc_now_ms();
    if (side) work_issue(w, side);
    ex->ops->forward_backward(ex, x, y, sc->scale);
    cc_optimizer_step(ex, cfg, sc, oc, NULL, i, &rep);
    if (side) CK(cudaStreamSynchronize(side));
    return cc_now_ms() - t0;
}

static double work_alone(rebuild_work *w, cudaStream_t s)
{
    CK(cudaDeviceSynchronize());
    const double t0 = cc_now_ms();
    work_issue(w, s);
    CK(cudaStreamSynchronize(s));
    return cc_now_ms() - t0;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return v[n / 2];
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: recompute_floor CONFIG [--set KEY=VALUE ...] [--steps N]\n");
        return 2;
    }
    cc_config cfg;
    cc_config_defaults(&cfg);
    if (cc_config_load(&cfg, argv[1]) != 0) return 1;
    int steps = 20;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--set") && i + 1 < argc) {
            if (cc_config_set_arg(&cfg, argv[++i]) != 0) return 1;
        } else if (!strcmp(argv[i], "--steps") && i + 1 < argc) {
            steps = atoi(argv[++i]);
            if (steps < 1 || steps > 1000) {
                fprintf(stderr, "recompute_floor: --steps: %s is not in 1..1000\n", argv[i]);
                return 2;
            }
        } else {
            fprintf(stderr, "recompute_floor: unknown argument '%s'\n", argv[i]);
            return 2;
        }
    }
    if (cc_config_set_arg(&cfg, "gpu.recompute=off") != 0) return 1;
    const int B = cfg.batch_size, T = cfg.seq_len;
    cc_executor *ex = cc_gpu_executor_create(&cfg, B, T);
    if (!ex) return 1;
    int *x = cc_malloc(sizeof(int) * B * T), *y = cc_malloc(sizeof(int) * B * T);
    cc_rng r;
    cc_rng_seed(&r, cfg.seed);
    for (int i = 0; i < B * T; i++) {
        x[i] = (int)cc_rng_below(&r, (uint64_t)cfg.vocab_size);
        y[i] = (int)cc_rng_below(&r, (uint64_t)cfg.vocab_size);
    }
    rebuild_work w;
    work_init(&w, &ex->lay.dims, B, T);
    int lowest, highest;
    CK(cudaDeviceGetStreamPriorityRange(&lowest, &highest));
    cudaStream_t low, lane;
    CK(cudaStreamCreateWithPriority(&low, cudaStreamNonBlocking, lowest));
    /* the executor's lane streams' priority (executor_gpu.c) */
    CK(cudaStreamCreateWithPriority(&lane, cudaStreamNonBlocking, highest < lowest ? highest + 1 : lowest));
    cc_scaler sc;
    cc_scaler_init(&sc, &cfg);
    cc_opt_counts oc = { 0, 0 };
    long k = 0;
    for (int i = 0; i < 5; i++) { /* warm-up: plans, graphs, GEMM heuristics */
        one_step(ex, &cfg, &sc, &oc, k++, x, y, &w, NULL);
        one_step(ex, &cfg, &sc, &oc, k++, x, y, &w, low);
        work_alone(&w, lane);
    }
    double *alone = cc_malloc(sizeof(double) * steps), *rb = cc_malloc(sizeof(double) * steps),
           *both_low = cc_malloc(sizeof(double) * steps), *both_lane = cc_malloc(sizeof(double) * steps);
    for (int i = 0; i < steps; i++) { /* interleaved, so drifts of clock or heat fall on all four alike */
        alone[i] = one_step(ex, &cfg, &sc, &oc, k++, x, y, &w, NULL);
        rb[i] = work_alone(&w, lane);
        both_low[i] = one_step(ex, &cfg, &sc, &oc, k++, x, y, &w, low);
        both_lane[i] = one_step(ex, &cfg, &sc, &oc, k++, x, y, &w, lane);
    }
    int chunk = 0;
    const char *wave = cc_gpu_wavefront(ex, &chunk);
    const double a = median(alone, steps), rbm = median(rb, steps), bl = median(both_low, steps),
                 bn = median(both_lane, steps), best = bl < bn ? bl : bn;
    json_t *j = json_pack("{s:i,s:i,s:i,s:i,s:i,s:i,s:s,s:f,s:f,s:f,s:f,s:f}", "B", B, "T", T, "D", cfg.d_model, "L",
                          cfg.n_layers, "steps", steps, "wavefront_chunk", chunk, "wavefront", wave, "step_ms", a,
                          "rebuild_ms", rbm, "together_low_ms", bl, "together_lane_ms", bn, "floor_ratio", best / a);
    json_dumpf(j, stdout, JSON_COMPACT | JSON_REAL_PRECISION(5));
    putchar('\n');
    json_decref(j);
    free(alone);
    free(rb);
    free(both_low);
    free(both_lane);
    free(x);
    free(y);
    ex->ops->destroy(ex);
    return 0;
}
