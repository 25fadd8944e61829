// The per-token guard on the context-stream gradient ([train] ctx_grad_clamp):
// each row of d[M,D] longer than `limit` in L2 norm is scaled down to it. One
// warp per row; the limit is already in the units of the scaled gradient
// (cc_clamp_dispatch_limit).
#include "catchat/kernels.h"
#include "common.cuh"

#define RC_WARPS 4 // rows per block

__global__ void rownorm_clamp_kernel(float *d, int M, int D, row_window rw, float limit)
{
    const int i_row = blockIdx.x * RC_WARPS + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (i_row >= M) return;
    float *r = d + window_row(rw, i_row) * D;
    float ss = 0.f;
    for (int i = lane; i < D; i += 32) ss += r[i] * r[i];
    const float nrm = sqrtf(warp_sum(ss));
    if (nrm > limit) {
        const float f = limit / nrm;
        for (int i = lane; i < D; i += 32) r[i] *= f;
    }
}

extern "C" void launch_rownorm_clamp(float *d, int M, int D, row_window rw, float limit, cudaStream_t s)
{
    if (limit <= 0.f) return;
    rownorm_clamp_kernel<<<ceil_div(M, RC_WARPS), 32 * RC_WARPS, 0, s>>>(d, M, D, rw, limit);
    LAUNCH_CHECK();
}
