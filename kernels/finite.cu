// NaN provenance on the GPU: the index of the first non-finite element of an
// FP32 or FP16 buffer (atomicMin over a grid-stride scan; ULLONG_MAX if none).
#include "catchat/kernels.h"
#include "common.cuh"

__global__ void find_nonfinite_kernel(const void *x, size_t n, int is_half, unsigned long long *first)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float v = is_half ? __half2float(((const __half *)x)[i]) : ((const float *)x)[i];
        if (!isfinite(v)) atomicMin(first, (unsigned long long)i);
    }
}

extern "C" void launch_find_nonfinite(const void *x, size_t n, int is_half, unsigned long long *first, cudaStream_t s)
{
    unsigned int grid = ceil_div(n, 256);
    if (grid > 1024) grid = 1024;
    find_nonfinite_kernel<<<grid ? grid : 1, 256, 0, s>>>(x, n, is_half, first);
    LAUNCH_CHECK();
}
