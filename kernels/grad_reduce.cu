// Gradient reduction on the GPU: the unscale/clip multiply fused with the FP32
// sum of squares (per-block partials, summed in double on the host) and a
// count of non-finite values.
#include "catchat/kernels.h"
#include "common.cuh"

#define SUMSQ_BLOCKS 264 // 2 per SM on an H200

__global__ void grad_reduce_sumsq_kernel(float *g, size_t n, float mul, float *partials, int *nonfinite)
{
    float acc = 0.f;
    int bad = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float v = g[i];
        if (mul != 1.f) {
            v *= mul;
            g[i] = v;
        }
        bad += !isfinite(v);
        acc += v * v;
    }
    acc = block_sum(acc);
    if (threadIdx.x == 0) partials[blockIdx.x] = acc;
    if (bad) atomicAdd(nonfinite, bad);
}

extern "C" int grad_reduce_blocks(void) { return SUMSQ_BLOCKS; }

extern "C" void launch_grad_reduce_sumsq(float *g, size_t n, float mul, float *partials, int *nonfinite, cudaStream_t s)
{
    grad_reduce_sumsq_kernel<<<SUMSQ_BLOCKS, 256, 0, s>>>(g, n, mul, partials, nonfinite);
    LAUNCH_CHECK();
}
