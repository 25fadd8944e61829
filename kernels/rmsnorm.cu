// RMSNorm with the guards of model.md, one warp per row:
//   ms ≤ floor → ir = 1 (identity); 1/sqrt(ms + eps) > cap → ir = cap.
// The backward recomputes the row's mean square to learn which case applied
// (same inputs, same decision), so no flag needs storing.
#include "catchat/kernels.h"
#include "common.cuh"

__device__ __forceinline__ float row_inv_rms(float ss, int D, float eps, float floor_, float inv_max, bool *is_const)
{
    const float ms = ss / (float)D;
    if (ms <= floor_) { *is_const = true; return 1.f; }
    const float raw = rsqrtf(ms + eps);
    if (raw > inv_max) { *is_const = true; return inv_max; }
    *is_const = false;
    return raw;
}

__global__ void rmsnorm_forward_kernel(float *y32, __half *y16, float *ir, const float *x, const float *g,
                                       int M, int D, float eps, float floor_, float inv_max)
{
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (row >= M) return;
    const float *xr = x + (size_t)row * D;
    float ss = 0.f;
    for (int i = lane; i < D; i += 32) ss += xr[i] * xr[i];
    ss = warp_sum(ss);
    bool c;
    const float r = row_inv_rms(ss, D, eps, floor_, inv_max, &c);
    if (lane == 0) ir[row] = r;
    for (int i = lane; i < D; i += 32) {
        const float v = xr[i] * r * g[i];
        if (y32) y32[(size_t)row * D + i] = v;
        if (y16) y16[(size_t)row * D + i] = __float2half_rn(v);
    }
}

// dx accumulates. Each block also sums dy·x·ir (the gain's gradient) of its
// rows per column into its own partial row: warp w keeps its rows' sums in
// shared row w, and the rows meet in warp order (deterministic, no atomics),
// so the pass over dy and x that dx needs also gives dg. A separate column
// pass over the same rows cost 36 µs per norm at the default config.
#define RMS_BWD_WARPS 16 // at most; fewer where 16 rows of D floats exceed shared memory
#define RMS_BWD_ROWS_PER_WARP 8
__global__ void __launch_bounds__(RMS_BWD_WARPS * 32)
    rmsnorm_backward_kernel(float *dx, float *partial, const float *dy, const float *x, const float *g,
                            const float *ir, int M, int D, float eps, float floor_, float inv_max)
{
    extern __shared__ float colsum[]; // [warps][D]
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, nw = blockDim.x / 32;
    float *mine = colsum + (size_t)warp * D;
    for (int i = lane; i < D; i += 32) mine[i] = 0.f;
    const int row0 = (blockIdx.x * nw + warp) * RMS_BWD_ROWS_PER_WARP;
    const int row1 = min(M, row0 + RMS_BWD_ROWS_PER_WARP);
    for (int row = row0; row < row1; row++) {
        const float *xr = x + (size_t)row * D, *dyr = dy + (size_t)row * D;
        float ss = 0.f, dot = 0.f;
        for (int i = lane; i < D; i += 32) {
            ss += xr[i] * xr[i];
            dot += dyr[i] * g[i] * xr[i];
        }
        ss = warp_sum(ss);
        dot = warp_sum(dot);
        bool c;
        row_inv_rms(ss, D, eps, floor_, inv_max, &c);
        const float r = ir[row];
        const float k = c ? 0.f : r * r * r / (float)D * dot;
        for (int i = lane; i < D; i += 32) {
            const float xv = xr[i], dyv = dyr[i];
            dx[(size_t)row * D + i] += r * dyv * g[i] - k * xv;
            mine[i] += dyv * xv * r;
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < D; i += blockDim.x) {
        float sum = 0.f;
        for (int w = 0; w < nw; w++) sum += colsum[(size_t)w * D + i];
        partial[(size_t)blockIdx.x * D + i] = sum;
    }
}

extern "C" void launch_rmsnorm_forward(float *y32, void *y16, float *ir, const float *x, const float *g, int M, int D,
                                       float eps, float floor_, float inv_max, cudaStream_t s)
{
    rmsnorm_forward_kernel<<<ceil_div(M, 8), 256, 0, s>>>(y32, (__half *)y16, ir, x, g, M, D, eps, floor_, inv_max);
    LAUNCH_CHECK();
}

extern "C" void launch_rmsnorm_backward(float *dx, float *dg, const float *dy, const float *x, const float *g,
                                        const float *ir, int M, int D, float eps, float floor_, float inv_max,
                                        cudaStream_t s)
{
    static int smax; /* the device's opt-in shared memory per block */
    if (!smax) {
        int dev = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&smax, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    }
    int nw = smax / (int)(sizeof(float) * D);
    nw = nw < 1 ? 1 : nw > RMS_BWD_WARPS ? RMS_BWD_WARPS : nw;
    const int nblocks = (int)ceil_div(M, nw * RMS_BWD_ROWS_PER_WARP);
    const size_t smem = sizeof(float) * nw * D;
    float *partial = reduce_scratch(s, (size_t)nblocks * D);
    if (smem > 48 * 1024) /* a failure here shows in LAUNCH_CHECK */
        cudaFuncSetAttribute(rmsnorm_backward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    rmsnorm_backward_kernel<<<nblocks, nw * 32, smem, s>>>(dx, partial, dy, x, g, ir, M, D, eps, floor_,
                                                                     inv_max);
    LAUNCH_CHECK();
    sum_chunks_acc_kernel<<<ceil_div(D, 128), 128, 0, s>>>(dg, partial, nblocks, D);
    LAUNCH_CHECK();
}
