// Element-wise helpers: FP32 <-> FP16 conversion for GEMM operands, the
// residual add, and column sums of FP16 matrices (bias gradients).
#include "catchat/kernels.h"
#include "common.cuh"

__global__ void f32_to_f16_kernel(__half *dst, const float *src, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __float2half_rn(src[i]);
}

__global__ void f16_to_f32_kernel(float *dst, const __half *src, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __half2float(src[i]);
}

__global__ void add_kernel(float *y, const float *a, const float *b, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = a[i] + b[i];
}

// Column sums: a 32-column tile per block.x, 256 rows per block.y, partial
// sums meet in shared memory and one atomic per column per block adds them.
#define COLSUM_ROWS 256
__global__ void colsum_f16_acc_kernel(float *out, const __half *x, int M, int N)
{
    __shared__ float part[8][33];
    const int col = blockIdx.x * 32 + threadIdx.x;
    const int r0 = blockIdx.y * COLSUM_ROWS, r1 = min(M, r0 + COLSUM_ROWS);
    float acc = 0.f;
    if (col < N)
        for (int m = r0 + threadIdx.y; m < r1; m += 8) acc += __half2float(x[(size_t)m * N + col]);
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && col < N) {
        float s = 0.f;
        for (int k = 0; k < 8; k++) s += part[k][threadIdx.x];
        atomicAdd(&out[col], s);
    }
}

static unsigned int grid_for(size_t n) { unsigned int g = ceil_div(n, 256); return g > 4096 ? 4096 : (g ? g : 1); }

extern "C" void launch_f32_to_f16(void *dst, const float *src, size_t n, cudaStream_t s)
{
    f32_to_f16_kernel<<<grid_for(n), 256, 0, s>>>((__half *)dst, src, n);
    LAUNCH_CHECK();
}

extern "C" void launch_f16_to_f32(float *dst, const void *src, size_t n, cudaStream_t s)
{
    f16_to_f32_kernel<<<grid_for(n), 256, 0, s>>>(dst, (const __half *)src, n);
    LAUNCH_CHECK();
}

extern "C" void launch_add(float *y, const float *a, const float *b, size_t n, cudaStream_t s)
{
    add_kernel<<<grid_for(n), 256, 0, s>>>(y, a, b, n);
    LAUNCH_CHECK();
}

extern "C" void launch_colsum_f16_acc(float *out, const void *x, int M, int N, cudaStream_t s)
{
    colsum_f16_acc_kernel<<<dim3(ceil_div(N, 32), ceil_div(M, COLSUM_ROWS)), dim3(32, 8), 0, s>>>(
        out, (const __half *)x, M, N);
    LAUNCH_CHECK();
}
