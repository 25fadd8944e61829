/* gru: the GRU layer's recurrence on the GPU. The cluster or persistent
 * kernels where they support the shape, else per timestep one cuBLASLt GEMM
 * for W_hh·h (reading every T-th row of a [B,T,·] tensor through the leading
 * dimension) and one gru_cell kernel; the weight gradient of W_hh is one GEMM
 * over all B·T positions afterwards. The CPU twin is src/cpu/gru.c. */
#include "catchat/gpu_gru.h"
#include "catchat/kernels.h"
#include "gpu/gpu_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

gpu_gru_path gpu_gru_path_named(const char *name)
{
    if (strcmp(name, "persistent") == 0) return GPU_GRU_PERSISTENT;
    if (strcmp(name, "per-step") == 0) return GPU_GRU_PER_STEP;
    return GPU_GRU_AUTO;
}

gpu_gru_impl gpu_gru_impl_with(const gpu_caps *caps, const gpu_gru_state *st, gpu_gru_path path, int B, int T, int D)
{
    if (path == GPU_GRU_AUTO && gru_cluster_supported(caps, B, T, D)) return GRU_IMPL_CLUSTER;
    /* a split of K only where asked for: on the H200 at D=2048 its BPTT beats the per-step loop's (13.61
     * against 17.75 us a step) but its forward does not (16.03 against 12.82), and its grid holds the SMs
     * that the per-step loop leaves to the weight-gradient GEMMs beside it: 75.18 against 66.44 ms a step
     * (docs/results/splitk_540fad1.txt) */
    if (path != GPU_GRU_PER_STEP && gru_persistent_supported(caps, st, B, T, D) &&
        (path == GPU_GRU_PERSISTENT || !gru_persistent_splits_k(caps, st, B, T, D)))
        return GRU_IMPL_PERSISTENT;
    return GRU_IMPL_PER_STEP;
}

gpu_gru_impl gpu_gru_impl_for(const gpu_caps *caps, gpu_gru_path path, int B, int T, int D)
{
    return gpu_gru_impl_with(caps, NULL, path, B, T, D);
}

const char *gpu_gru_impl_name(gpu_gru_impl impl)
{
    return impl == GRU_IMPL_CLUSTER ? "cluster" : impl == GRU_IMPL_PERSISTENT ? "persistent" : "per-step";
}

void gpu_gru_impl_why(const gpu_caps *caps, gpu_gru_path path, int B, int T, int D, char *buf, size_t len)
{
    const gpu_gru_impl impl = gpu_gru_impl_for(caps, path, B, T, D);
    char split[240] = "";
    if (impl == GRU_IMPL_CLUSTER) {
        snprintf(buf, len, "W_hh fits one cluster of 8 CTAs (sm_90 clusters, D <= 512)");
        return;
    }
    if (impl == GRU_IMPL_PERSISTENT) {
        gru_persistent_describe(caps, NULL, B, T, D, split, sizeof(split));
        const char *no_cluster = path != GPU_GRU_AUTO ? "forced by [gpu] recurrence"
                                 : !gpu_caps_has_sm90_features(caps) ? "no sm_90 clusters on this GPU, profile or build"
                                 : D != 128 && D != 256 && D != 512 ? "W_hh does not fit one cluster at this D"
                                 : "the cluster kernels do not fit this GPU's limits or B";
        snprintf(buf, len, "%s; %s", no_cluster, split);
        return;
    }
    if (path == GPU_GRU_AUTO && gru_persistent_supported(caps, NULL, B, T, D)) {
        snprintf(buf, len, "the persistent kernels fit only with K split over CTAs, slower here as a whole step "
                           "(their grid holds the SMs the weight-gradient GEMMs run on); [gpu] recurrence = "
                           "persistent takes them");
        return;
    }
    snprintf(buf, len, "%s", path == GPU_GRU_PER_STEP ? "forced by [gpu] recurrence"
                             : "no persistent split fits this GPU (D not a multiple of 32, too few SMs or too little "
                               "shared memory, or its grid cannot be resident: the occupancy API's limit)");
}

/* Wide pays where the recurrences hold the SMs for longer than the rest of
 * the step needs them, which takes two waves of clusters of 8 or more
 * (measured faster at B=256 on the H200, slower at B=128, where each lane's
 * chain of recurrences gets 1.5 times longer: CHANGELOG.md, 0.4.0). */
int gpu_gru_wide_for(const gpu_caps *caps, gpu_gru_path path, int B_total, int T, int D)
{
    const int resident = gru_cluster_resident(caps, D);
    return gpu_gru_impl_for(caps, path, B_total, T, D) == GRU_IMPL_CLUSTER && resident > 0 && B_total / 8 >= 2 * resident;
}

static void check_window(gru_shape sh, const char *what)
{
    if (sh.t0 < 0 || sh.t0 >= sh.t1 || sh.t1 > sh.T) {
        fprintf(stderr, "catchat: GRU %s: window [%d, %d) is not within T=%d\n", what, sh.t0, sh.t1, sh.T);
        exit(1);
    }
    if (sh.wT > 0 && (sh.t0 < sh.wt0 || sh.t1 > sh.wt0 + sh.wT)) {
        fprintf(stderr, "catchat: GRU %s: window [%d, %d) is not within its buffers' steps [%d, %d)\n", what, sh.t0,
                sh.t1, sh.wt0, sh.wt0 + sh.wT);
        exit(1);
    }
}

void gpu_gru_forward(gpu_matmul_ctx *gm, const gpu_caps *caps, gpu_gru_state *st, gpu_gru_path path,
                     const gru_layer *L, gru_shape sh, int wide, gpu_scratch *sc, cudaStream_t s)
{
    const int B = sh.B, T = sh.T, D = sh.D;
    check_window(sh, "forward");
    const gpu_gru_impl impl = gpu_gru_impl_with(caps, st, path, B, T, D);
    if (impl == GRU_IMPL_CLUSTER) {
        launch_gru_forward_cluster(L, sh, wide, caps, st, s);
        return;
    }
    /* a persistent launch the runtime refuses (recorded in st) falls through to the per-step loop */
    if (impl == GRU_IMPL_PERSISTENT && launch_gru_forward_persistent(L, sh, caps, st, sc, s) == 0) return;
    uint16_t *hp = L->hprev16;
    if (sh.t0 == 0) { /* h_{-1} = 0: the FP16 copy read at t = 0 (and by dW_hh) is zero */
        cudaCheck(cudaMemset2DAsync(hp, sizeof(uint16_t) * T * D, 0, sizeof(uint16_t) * D, B, s));
        cudaCheck(cudaMemsetAsync(L->gh, 0, sizeof(float) * B * 3 * D, s));
    }
    for (int t = sh.t0; t < sh.t1; t++) {
        if (t > 0) /* gh[B,3D] = h_{t-1} · W_hhᵀ */
            gpu_matmul(gm, L->gh, 3 * D, hp + (size_t)t * D, T * D, 0, L->whh16, D, 1, B, 3 * D, D, 1.f, 0.f, NULL,
                       s);
        launch_gru_cell_forward(L, sh, t, s);
    }
}

size_t gpu_gru_bias_part_floats(int B, int D) { return (size_t)2 * (B / 8 > 0 ? B / 8 : 1) * 3 * D; }

int gpu_gru_bptt(gpu_matmul_ctx *gm, const gpu_caps *caps, gpu_gru_state *st, gpu_gru_path path, const gru_layer *L,
                 const gru_grads *G, gru_shape sh, float clamp_limit, gpu_scratch *sc, cudaStream_t s)
{
    const int B = sh.B, T = sh.T, D = sh.D;
    check_window(sh, "BPTT");
    const uint16_t *dgh = G->dgh16;
    const gpu_gru_impl impl = gpu_gru_impl_with(caps, st, path, B, T, D);
    if (impl == GRU_IMPL_CLUSTER) {
        launch_gru_backward_cluster(L, G, sh, clamp_limit, caps, st, s);
        return gpu_gru_bptt_parts(caps, path, B, T, D, G->bias_part != NULL);
    }
    if (impl == GRU_IMPL_PERSISTENT && launch_gru_backward_persistent(L, G, sh, clamp_limit, caps, st, sc, s) == 0)
        return 0;
    /* dhrec carries dL/dh_{t-1} through the recurrence from one step, and one window, to the next */
    if (sh.t1 == T) cudaCheck(cudaMemsetAsync(G->dhrec, 0, sizeof(float) * B * D, s));
    const int wT = gru_window_steps(sh), wt0 = gru_window_first(sh);
    for (int t = sh.t1 - 1; t >= sh.t0; t--) {
        launch_gru_cell_backward(L, G, sh, t, clamp_limit, s);
        if (t > 0) /* dhrec += dgh_t · W_hh */
            gpu_matmul(gm, G->dhrec, D, dgh + (size_t)(t - wt0) * 3 * D, wT * 3 * D, 0, L->whh16, D, 0, B, D, 3 * D,
                       1.f, 1.f, NULL, s);
    }
    return 0;
}

int gpu_gru_bptt_parts(const gpu_caps *caps, gpu_gru_path path, int B, int T, int D, int sums)
{
    /* the cluster kernels, the only ones that write sums, are chosen by the caps and shape alone */
    return sums && gpu_gru_impl_with(caps, NULL, path, B, T, D) == GRU_IMPL_CLUSTER ? B / 8 : 0;
}

void gpu_gru_weight_grads(gpu_matmul_ctx *gm, const gru_layer *L, const gru_grads *G, int nparts, gru_shape sh,
                          gpu_scratch *sc, cudaStream_t s)
{
    const int M = sh.B * gru_window_steps(sh), D = sh.D;
    gpu_matmul_dw(gm, G->dwhh, G->dgh16, L->hprev16, M, 3 * D, D, s);
    if (nparts < 0) return; /* a window whose bias sums another window's call adds */
    if (nparts > 0) { /* the BPTT's per-cluster sums, added in cluster order */
        if (G->dbih) launch_sum_chunks_acc(G->dbih, G->bias_part, nparts, 3 * D, s);
        launch_sum_chunks_acc(G->dbhh, G->bias_part + (size_t)nparts * 3 * D, nparts, 3 * D, s);
    } else {
        if (G->dbih) launch_colsum_f16_acc(G->dbih, G->dgx16, M, 3 * D, sc, s);
        launch_colsum_f16_acc(G->dbhh, G->dgh16, M, 3 * D, sc, s);
    }
}

void gpu_gru_backward(gpu_matmul_ctx *gm, const gpu_caps *caps, gpu_gru_state *st, gpu_gru_path path,
                      const gru_layer *L, const gru_grads *G, gru_shape sh, float clamp_limit, gpu_scratch *sc,
                      cudaStream_t s)
{
    const int nparts = gpu_gru_bptt(gm, caps, st, path, L, G, sh, clamp_limit, sc, s);
    gpu_gru_weight_grads(gm, L, G, nparts, sh, sc, s);
}

void gpu_gru_scratch_need(size_t need[SCRATCH_KINDS], const gpu_caps *caps, const gpu_gru_state *st,
                          gpu_gru_path path, int B, int T, int D)
{
    if (gpu_gru_impl_with(caps, st, path, B, T, D) == GRU_IMPL_PERSISTENT)
        gru_persistent_scratch_need(need, caps, st, B, T, D);
}

size_t gpu_gru_weight_grads_scratch_bytes(int M, int D) { return colsum_f16_scratch_bytes(M, 3 * D); }
