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

// Column sums: one block per 32-column tile walks every row, 32 rows at a
// time, and the 32 partial sums meet in shared memory in a fixed order: the
// result is the same bit for bit on every run (no atomics), which keeps GPU
// training reproducible and world size 1 through NCCL equal to the plain path.
__global__ void colsum_f16_acc_kernel(float *out, const __half *x, int M, int N)
{
    __shared__ float part[32][33];
    const int col = blockIdx.x * 32 + threadIdx.x;
    float acc = 0.f;
    if (col < N)
        for (int m = threadIdx.y; m < M; m += 32) acc += __half2float(x[(size_t)m * N + col]);
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && col < N) {
        float s = 0.f;
        for (int k = 0; k < 32; k++) s += part[k][threadIdx.x];
        out[col] += s;
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
    colsum_f16_acc_kernel<<<ceil_div(N, 32), dim3(32, 32), 0, s>>>(out, (const __half *)x, M, N);
    LAUNCH_CHECK();
}
