// Fused softmax cross-entropy with ignored targets, one warp per position
// (a row of V=256 logits is 8 values a lane: a block per row would spend its
// time in three block-wide reductions).
// Writes the per-position loss (summed on the host in double), where the
// target ranks (for top-1 / top-5), and the FP16 gradient operand
// dlogits = grad_scale·(softmax − onehot) for the lm_head GEMMs.
#include "catchat/kernels.h"
#include "common.cuh"

#define CE_WARPS 8

__global__ void __launch_bounds__(CE_WARPS * 32)
    crossentropy_kernel(float *loss, int *rank_class, __half *dlogits16, const float *logits, const int *y, int M,
                        int V, row_window rw, float grad_scale)
{
    const int i_row = blockIdx.x * CE_WARPS + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (i_row >= M) return;
    const size_t m = window_row(rw, i_row);
    const float *lr = logits + (size_t)m * V;
    const int tgt = y[m];
    if (tgt < 0) { // not scored: no loss, no gradient
        if (lane == 0) {
            loss[m] = 0.f;
            rank_class[m] = -1;
        }
        if (dlogits16)
            for (int v = lane; v < V; v += 32) dlogits16[(size_t)m * V + v] = __float2half_rn(0.f);
        return;
    }
    float mx = -INFINITY;
    for (int v = lane; v < V; v += 32) mx = fmaxf(mx, lr[v]);
    mx = warp_max(mx);
    const float lt = lr[tgt];
    float sum = 0.f, above = 0.f;
    for (int v = lane; v < V; v += 32) {
        sum += __expf(lr[v] - mx);
        above += lr[v] > lt ? 1.f : 0.f; // ties favour the target, as on the CPU
    }
    sum = warp_sum(sum);
    above = warp_sum(above);
    const float lse = mx + logf(sum);
    if (lane == 0) {
        loss[m] = lse - lt;
        rank_class[m] = above < 1.f ? 1 : (above < 5.f ? 2 : 0);
    }
    if (dlogits16) {
        for (int v = lane; v < V; v += 32) {
            const float pv = __expf(lr[v] - lse);
            dlogits16[(size_t)m * V + v] = __float2half_rn(grad_scale * (pv - (v == tgt ? 1.f : 0.f)));
        }
    }
}

extern "C" void launch_crossentropy(float *loss, int *rank_class, void *dlogits16, const float *logits, const int *y,
                                    int M, int V, row_window rw, float grad_scale, cudaStream_t s)
{
    crossentropy_kernel<<<ceil_div(M, CE_WARPS), CE_WARPS * 32, 0, s>>>(loss, rank_class, (__half *)dlogits16, logits,
                                                                        y, M, V, rw, grad_scale);
    LAUNCH_CHECK();
}
