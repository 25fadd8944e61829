// Fused softmax cross-entropy with ignored targets, one block per position.
// Writes the per-position loss (summed on the host in double), where the
// target ranks (for top-1 / top-5), and the FP16 gradient operand
// dlogits = grad_scale·(softmax − onehot) for the lm_head GEMMs.
#include "catchat/kernels.h"
#include "common.cuh"

__global__ void crossentropy_kernel(float *loss, int *rank_class, __half *dlogits16, const float *logits,
                                    const int *y, int M, int V, float grad_scale)
{
    const int m = blockIdx.x;
    const float *lr = logits + (size_t)m * V;
    const int tgt = y[m];
    if (tgt < 0) { // not scored: no loss, no gradient
        if (threadIdx.x == 0) {
            loss[m] = 0.f;
            rank_class[m] = -1;
        }
        if (dlogits16)
            for (int v = threadIdx.x; v < V; v += blockDim.x) dlogits16[(size_t)m * V + v] = __float2half_rn(0.f);
        return;
    }
    float mx = -INFINITY;
    for (int v = threadIdx.x; v < V; v += blockDim.x) mx = fmaxf(mx, lr[v]);
    mx = block_max(mx);
    const float lt = lr[tgt];
    float sum = 0.f, above = 0.f;
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
        sum += __expf(lr[v] - mx);
        above += lr[v] > lt ? 1.f : 0.f; // ties favour the target, as on the CPU
    }
    sum = block_sum(sum);
    above = block_sum(above);
    const float lse = mx + logf(sum);
    if (threadIdx.x == 0) {
        loss[m] = lse - lt;
        rank_class[m] = above < 1.f ? 1 : (above < 5.f ? 2 : 0);
    }
    if (dlogits16) {
        for (int v = threadIdx.x; v < V; v += blockDim.x) {
            const float pv = __expf(lr[v] - lse);
            dlogits16[(size_t)m * V + v] = __float2half_rn(grad_scale * (pv - (v == tgt ? 1.f : 0.f)));
        }
    }
}

extern "C" void launch_crossentropy(float *loss, int *rank_class, void *dlogits16, const float *logits, const int *y,
                                    int M, int V, float grad_scale, cudaStream_t s)
{
    crossentropy_kernel<<<M, 256, 0, s>>>(loss, rank_class, (__half *)dlogits16, logits, y, M, V, grad_scale);
    LAUNCH_CHECK();
}
