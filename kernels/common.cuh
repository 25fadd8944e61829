// Shared by the kernel files: launch checking and warp reductions.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include "catchat/kernels.h"

// A failed launch is a programming error (bad grid, bad arch): report where and stop.
#define LAUNCH_CHECK()                                                                       \
    do {                                                                                     \
        cudaError_t e_ = cudaGetLastError();                                                 \
        if (e_ != cudaSuccess) {                                                             \
            fprintf(stderr, "catchat: CUDA launch failed at %s:%d: %s%s\n", __FILE__, __LINE__, \
                    cudaGetErrorString(e_),                                                  \
                    e_ == cudaErrorNoKernelImageForDevice                                    \
                        ? " (this GPU's architecture is not in the build: set "              \
                          "CMAKE_CUDA_ARCHITECTURES)"                                        \
                        : "");                                                               \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Block-wide reduction for blockDim.x a multiple of 32 (≤ 1024); every thread
// gets the result. warp_op reduces within a warp; identity fills the missing warps.
template <float (*warp_op)(float)> __device__ __forceinline__ float block_reduce(float v, float identity)
{
    __shared__ float buf[32];
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_op(v);
    __syncthreads();
    if (lane == 0) buf[wid] = v;
    __syncthreads();
    v = lane < nw ? buf[lane] : identity;
    return warp_op(v);
}

__device__ __forceinline__ float block_sum(float v) { return block_reduce<warp_sum>(v, 0.f); }

static inline unsigned int ceil_div(size_t a, size_t b) { return (unsigned int)((a + b - 1) / b); }

// Deterministic column reductions in two passes: pass 1 writes one partial row
// per chunk of REDUCE_ROWS rows into the caller's scratch (SCRATCH_REDUCE of
// its gpu_scratch, catchat/kernels.h), pass 2 adds the chunks in order.
// Bitwise reproducible (no atomics) and parallel over rows.
#define REDUCE_ROWS 256
// Pass 2: launch_sum_chunks_acc (catchat/kernels.h).

// bytes of kind `kind` from the caller's scratch sc (catchat/kernels.h), for
// the launcher of `kernel`: a scratch too small for the call (or none) stops
// the process with one line naming the kernel and both sizes. It is never
// grown here: a cudaMalloc is illegal while a CUDA graph is being captured.
void *scratch_take(gpu_scratch *sc, int kind, size_t bytes, const char *kernel);
