/* How fast a step that rebuilds its activations could be at best: the step
 * with every layer's activations kept ([gpu] recompute = off), timed alone
 * and with the rebuild's work for every layer running beside it on a stream
 * of its own, with no dependency on the step.
 *
 * The rebuild's work is what recompute = on adds to a step, launch for
 * launch as recompute issued it when this floor was written (0.14.0's
 * rebuild_u and rebuild_window; now op_embed, op_feed and op_regate in src/gpu/ops_layer_gpu.c,
 * which rebuilds u^l a window at a time with the same adds),
 * for each layer l: u^l (the embedding and l adds over all B·T positions),
 * then for each of its windows of T/nw steps the norm of the window's rows
 * into FP16, FP16 h_{t-1}, the input GEMM (W_ih, with b_ih) and the two of
 * W_hh over the window's B·T/nw rows, and the gate math, with the lanes'
 * 4 MiB cuBLASLt workspace. Any step that rebuilds gx and the gates this
 * way does at least this much more than the step that keeps them; a real
 * one can start it only once the backward frees memory and must finish
 * each window before its BPTT, while here it may start with the step and
 * take any SM the step leaves idle, at the lowest stream priority (below
 * all of the step's streams but its weight GEMMs': together_low) or at the
 * lanes' (together_lane). So the faster of the two bounds such a step's
 * time from below. Each timing runs from an idle device to an idle device
 * (the step's AdamW included; catchat bench instead lets a step's AdamW
 * run into the next step's time).
 *
 *   build/bench/recompute_floor CONFIG [--set KEY=VALUE ...] [--steps N] [--windows NW]
 * NW: the rebuild's windows a layer (8, as recompute takes under the
 * cluster and persistent kernels). Prints one JSON object. Needs a GPU. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>
#include "catchat/config.h"
#include "catchat/device.h"
#include "catchat/executor.h"
#include "catchat/kernels.h"
#include "catchat/layout.h"
#include "catchat/matmul.h"
#include "catchat/optim.h"
#include "catchat/rng.h"
#include "catchat/util.h"

#define CK(x) do { cudaError_t e_ = (x); if (e_) { fprintf(stderr, "recompute_floor: %s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

typedef struct {
    int B, T, D, L, V, C; /* C: a window's steps */
    cc_norm_consts nc;
    int *tokens;
    float *table, *u, *h, *gates, *ghn, *ir, *gain, *bih, *bhh;
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

static void work_init(rebuild_work *w, const cc_dims *d, int B, int T, int nw, const int *x)
{
    const size_t M = (size_t)B * T, D = (size_t)d->D, MC = (size_t)B * (T / nw);
    w->B = B;
    w->T = T;
    w->D = d->D;
    w->L = d->L;
    w->V = d->V;
    w->C = T / nw;
    w->nc = cc_norm_consts_of(d);
    CK(cudaMalloc((void **)&w->tokens, sizeof(int) * M));
    CK(cudaMemcpy(w->tokens, x, sizeof(int) * M, cudaMemcpyHostToDevice));
    w->table = dev_filled(4 * (size_t)d->V * D, 0x3c); /* 0x3c3c3c3c: 0.0115 as FP32 */
    w->u = dev_filled(4 * M * D, 0x3c);
    w->h = dev_filled(4 * M * D, 0x3b);
    w->ir = dev_filled(4 * M, 0);
    w->gain = dev_filled(4 * D, 0x3f);
    w->bih = dev_filled(12 * D, 0x3a);
    w->bhh = dev_filled(12 * D, 0x3a);
    w->wih = dev_filled(6 * D * D, 0x11); /* 0x1111: 6.5e-4 as FP16 */
    w->whh = dev_filled(6 * D * D, 0x11);
    /* one window's buffers (recompute takes two by turns; one serves a stream that runs them in order) */
    w->gates = dev_filled(12 * MC * D, 0);
    w->ghn = dev_filled(4 * MC * D, 0);
    w->a16 = dev_filled(2 * MC * D, 0);
    w->hp16 = dev_filled(2 * MC * D, 0);
    w->gemm = gpu_matmul_create_sized(GPU_MATMUL_WINDOW_WORKSPACE);
}

/* Every layer's rebuild, issued on s. */
static void work_issue(rebuild_work *w, cudaStream_t s)
{
    const int B = w->B, T = w->T, D = w->D, C = w->C, M = B * T;
    const row_window rw = { C, T, C };
    for (int l = 0; l < w->L; l++) {
        launch_embedding_forward(w->u, w->tokens, w->table, M, D, s);
        for (int j = 0; j < l; j++) launch_add(w->u, w->u, w->h, (size_t)M * D, s);
        for (int k = T / C - 1; k >= 0; k--) {
            const size_t at = (size_t)k * C;
            launch_add_rmsnorm_forward(NULL, NULL, w->a16, w->ir + at, w->u + at * D, NULL, w->gain, B * C, D, rw,
                                       &w->nc, s);
            launch_f32_to_f16_rows(w->hp16, w->h + at * D, B * C, D, rw, s);
            gpu_matmul_rows(w->gemm, w->gates, 3 * D, C, w->a16, D, C, w->wih, D, 1, B, C, 3 * D, D, 0.f, w->bih, s);
            gpu_matmul_rows(w->gemm, w->gates, 3 * D, C, w->hp16, D, C, w->whh, D, 1, B, C, 2 * D, D, 1.f, NULL, s);
            gpu_matmul_rows(w->gemm, w->ghn, D, C, w->hp16, D, C, (const uint16_t *)w->whh + (size_t)2 * D * D, D, 1,
                            B, C, D, D, 0.f, NULL, s);
            launch_gru_cell_rebuild(w->gates, w->ghn, w->bhh, B * C, D, s);
        }
    }
}

/* One training step (forward, backward, optimizer), with the rebuild beside it on `side` when
 * non-NULL: ms from an idle device until both are done. */
static double one_step(cc_executor *ex, const cc_config *cfg, cc_scaler *sc, cc_opt_counts *oc, long i,
                       const int *x, const int *y, rebuild_work *w, cudaStream_t side)
{
    cc_step_report rep;
    CK(cudaDeviceSynchronize());
    const double t0 = cc_now_ms();
    if (side) work_issue(w, side);
    ex->ops->forward_backward(ex, x, y, sc->scale);
    cc_optimizer_step(ex, cfg, sc, oc, NULL, i, &rep);
    CK(cudaDeviceSynchronize()); /* the step's AdamW, and the rebuild */
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

int main(int argc, char **argv)
{
    static const char usage[] = "usage: recompute_floor CONFIG [--set KEY=VALUE ...] [--steps N] [--windows NW]\n"
                                "the least time a step that rebuilds its activations can take (bench/recompute_floor.c)\n";
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fputs(usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    cc_config cfg;
    cc_config_defaults(&cfg);
    if (cc_config_load(&cfg, argv[1]) != 0) return 1;
    int steps = 20, nw = 8;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--set") && i + 1 < argc) {
            if (cc_config_set_arg(&cfg, argv[++i]) != 0) return 1;
        } else if (!strcmp(argv[i], "--steps") && i + 1 < argc) {
            steps = atoi(argv[++i]);
            if (steps < 1 || steps > 1000) {
                fprintf(stderr, "recompute_floor: --steps: %s is not in 1..1000\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(argv[i], "--windows") && i + 1 < argc) {
            nw = atoi(argv[++i]);
            if (nw < 1 || nw > 64) {
                fprintf(stderr, "recompute_floor: --windows: %s is not in 1..64\n", argv[i]);
                return 2;
            }
        } else {
            fprintf(stderr, "recompute_floor: unknown argument '%s'\n", argv[i]);
            return 2;
        }
    }
    const int gpus = cc_gpu_count();
    if (gpus < 0) return 1; /* the driver fails: cc_gpu_count said why */
    if (gpus == 0) {
        fprintf(stderr, "recompute_floor: no CUDA device visible: nothing measured\n");
        return CC_EXIT_SKIP;
    }
    if (cc_config_set_arg(&cfg, "gpu.recompute=off") != 0) return 1;
    const int B = cfg.batch_size, T = cfg.seq_len;
    if (T % nw) {
        fprintf(stderr, "recompute_floor: --windows: %d does not divide seq_len %d\n", nw, T);
        return 2;
    }
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
    work_init(&w, &ex->lay.dims, B, T, nw, x);
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
    char wave[128];
    snprintf(wave, sizeof(wave), "%s", cc_gpu_wavefront(ex, &chunk));
    ex->ops->destroy(ex);
    /* the step that does rebuild (recompute = on), timed the same way, for comparison */
    if (cc_config_set_arg(&cfg, "gpu.recompute=on") != 0) return 1;
    ex = cc_gpu_executor_create(&cfg, B, T);
    if (!ex) return 1;
    double *on = cc_malloc(sizeof(double) * steps);
    for (int i = 0; i < 5; i++) one_step(ex, &cfg, &sc, &oc, k++, x, y, &w, NULL);
    for (int i = 0; i < steps; i++) on[i] = one_step(ex, &cfg, &sc, &oc, k++, x, y, &w, NULL);
    const double onm = cc_median(on, steps);
    free(on);
    const double a = cc_median(alone, steps), rbm = cc_median(rb, steps), bl = cc_median(both_low, steps),
                 bn = cc_median(both_lane, steps), best = bl < bn ? bl : bn;
    json_t *j = json_pack("{s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:s,s:f,s:f,s:f,s:f,s:f,s:f,s:f}", "B", B, "T", T, "D",
                          cfg.d_model, "L", cfg.n_layers, "steps", steps, "windows", nw, "wavefront_chunk", chunk,
                          "wavefront", wave, "step_ms", a, "rebuild_ms", rbm, "together_low_ms", bl,
                          "together_lane_ms", bn, "floor_ratio", best / a, "recompute_on_ms", onm,
                          "recompute_on_ratio", onm / a);
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
