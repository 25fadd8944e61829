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

// dx accumulates.
__global__ void rmsnorm_backward_kernel(float *dx, float *dg, const float *dy, const float *x, const float *g,
                                        const float *ir, int M, int D, float eps, float floor_, float inv_max)
{
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (row >= M) return;
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
        dx[(size_t)row * D + i] += r * dyr[i] * g[i] - k * xr[i];
    }
}

// dg[i] += Σ_m dy·x·ir in two deterministic passes (common.cuh): block
// (tile, chunk) sums REDUCE_ROWS rows of 32 columns into a partial row.
__global__ void rmsnorm_dgain_partial_kernel(float *partial, const float *dy, const float *x, const float *ir, int M,
                                             int D)
{
    __shared__ float part[8][33];
    const int col = blockIdx.x * 32 + threadIdx.x;
    const int r0 = blockIdx.y * REDUCE_ROWS, r1 = min(M, r0 + REDUCE_ROWS);
    float acc = 0.f;
    if (col < D)
        for (int m = r0 + threadIdx.y; m < r1; m += 8) acc += dy[(size_t)m * D + col] * x[(size_t)m * D + col] * ir[m];
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && col < D) {
        float s = 0.f;
        for (int k = 0; k < 8; k++) s += part[k][threadIdx.x];
        partial[(size_t)blockIdx.y * D + col] = s;
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
    rmsnorm_backward_kernel<<<ceil_div(M, 8), 256, 0, s>>>(dx, dg, dy, x, g, ir, M, D, eps, floor_, inv_max);
    LAUNCH_CHECK();
    const int nchunks = (int)ceil_div(M, REDUCE_ROWS);
    float *partial = reduce_scratch(s, (size_t)nchunks * D);
    rmsnorm_dgain_partial_kernel<<<dim3(ceil_div(D, 32), nchunks), dim3(32, 8), 0, s>>>(partial, dy, x, ir, M, D);
    LAUNCH_CHECK();
    sum_chunks_acc_kernel<<<ceil_div(D, 128), 128, 0, s>>>(dg, partial, nchunks, D);
    LAUNCH_CHECK();
}
