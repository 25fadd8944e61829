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

// The same over rows of a strided tensor: nseq runs of len elements, run i
// starting at x + i·stride; the index found is i·stride + the offset in the
// run, so a scan of a window of steps (or of one lane's sequences) reports
// where in the tensor the element lies.
__global__ void find_nonfinite_rows_kernel(const void *x, int nseq, size_t stride, size_t len, int is_half,
                                           unsigned long long *first)
{
    const size_t n = (size_t)nseq * len;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const size_t at = (i / len) * stride + i % len;
        const float v = is_half ? __half2float(((const __half *)x)[at]) : ((const float *)x)[at];
        if (!isfinite(v)) atomicMin(first, (unsigned long long)at);
    }
}

extern "C" void launch_find_nonfinite_rows(const void *x, int nseq, size_t stride, size_t len, int is_half,
                                           unsigned long long *first, cudaStream_t s)
{
    unsigned int grid = ceil_div((size_t)nseq * len, 256);
    if (grid > 1024) grid = 1024;
    find_nonfinite_rows_kernel<<<grid ? grid : 1, 256, 0, s>>>(x, nseq, stride, len, is_half, first);
    LAUNCH_CHECK();
}

// The value at the index a scan found (left as it was where it found none):
// read in the scan's stream order, before a later kernel overwrites it.
__global__ void fetch_at_kernel(const void *x, int is_half, const unsigned long long *first, float *value)
{
    const unsigned long long i = *first;
    if (i == ~0ULL) return;
    *value = is_half ? __half2float(((const __half *)x)[i]) : ((const float *)x)[i];
}

extern "C" void launch_fetch_at(const void *x, int is_half, const unsigned long long *first, float *value,
                                cudaStream_t s)
{
    fetch_at_kernel<<<1, 1, 0, s>>>(x, is_half, first, value);
    LAUNCH_CHECK();
}
