// Token embedding: gather forward; scatter-add backward with float atomics
// (repeated ids add up; the order of the adds is not fixed, so the result
// can differ from the CPU's sequential sum by rounding only).
#include "catchat/kernels.h"
#include "common.cuh"

__global__ void embedding_forward_kernel(float *out, const int *x, const float *table, int M, int D)
{
    const int m = blockIdx.x;
    const float *row = table + (size_t)x[m] * D;
    for (int i = threadIdx.x; i < D; i += blockDim.x) out[(size_t)m * D + i] = row[i];
}

__global__ void embedding_backward_kernel(float *dtable, const float *dout, const int *x, int M, int D)
{
    const int m = blockIdx.x;
    float *row = dtable + (size_t)x[m] * D;
    for (int i = threadIdx.x; i < D; i += blockDim.x) atomicAdd(&row[i], dout[(size_t)m * D + i]);
}

extern "C" void launch_embedding_forward(float *out, const int *x, const float *table, int M, int D, cudaStream_t s)
{
    embedding_forward_kernel<<<M, 128, 0, s>>>(out, x, table, M, D);
    LAUNCH_CHECK();
}

extern "C" void launch_embedding_backward(float *dtable, const float *dout, const int *x, int M, int D, cudaStream_t s)
{
    embedding_backward_kernel<<<M, 128, 0, s>>>(dtable, dout, x, M, D);
    LAUNCH_CHECK();
}
