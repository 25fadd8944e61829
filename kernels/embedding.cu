// Token embedding: gather forward; scatter-add backward. The backward walks,
// for each token id, the positions where it occurs (a CSR list the host
// builds from the batch it already holds) in position order: repeated ids add
// up in the CPU reference's order and every run gives the same bits.
#include "catchat/kernels.h"
#include "common.cuh"

__global__ void embedding_forward_kernel(float *out, const int *x, const float *table, int M, int D)
{
    const int m = blockIdx.x;
    const float *row = table + (size_t)x[m] * D;
    for (int i = threadIdx.x; i < D; i += blockDim.x) out[(size_t)m * D + i] = row[i];
}

__global__ void embedding_backward_kernel(float *dtable, const float *dout, const int *offsets, const int *positions,
                                          int D)
{
    const int v = blockIdx.x, p0 = offsets[v], p1 = offsets[v + 1];
    if (p0 == p1) return;
    float *row = dtable + (size_t)v * D;
    for (int i = threadIdx.x; i < D; i += blockDim.x) {
        float acc = 0.f;
        int p = p0;
        // eight loads in flight per thread (a frequent id has thousands of
        // positions); the adds still happen in position order
        for (; p + 8 <= p1; p += 8) {
            float vals[8];
#pragma unroll
            for (int k = 0; k < 8; k++) vals[k] = dout[(size_t)__ldg(&positions[p + k]) * D + i];
#pragma unroll
            for (int k = 0; k < 8; k++) acc += vals[k];
        }
        for (; p < p1; p++) acc += dout[(size_t)positions[p] * D + i];
        row[i] += acc;
    }
}

extern "C" void launch_embedding_forward(float *out, const int *x, const float *table, int M, int D, cudaStream_t s)
{
    embedding_forward_kernel<<<M, 128, 0, s>>>(out, x, table, M, D);
    LAUNCH_CHECK();
}

extern "C" void launch_embedding_backward(float *dtable, const float *dout, const int *offsets, const int *positions,
                                          int V, int D, cudaStream_t s)
{
    embedding_backward_kernel<<<V, D < 512 ? 128 : 512, 0, s>>>(dtable, dout, offsets, positions, D);
    LAUNCH_CHECK();
}
