// Element-wise helpers: FP32 <-> FP16 conversion for GEMM operands, the
// residual add, and column sums of FP16 matrices (bias gradients).
#include <stdint.h>
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

// Kernel scratch (catchat/kernels.h): the caller's, made once before its
// first launch and passed with the stream, never looked up here by stream.
// A stream's launches run in order, so they share one; streams that run at
// once (the executor's lanes, their side and recurrence streams) each have
// their own.
static const char *const scratch_kind_name[SCRATCH_KINDS] = { "reduction partials", "GRU step counters", "GRU W_hh^T",
                                                              "GRU split-K partials" };

extern "C" gpu_scratch *gpu_scratch_create(const size_t need[SCRATCH_KINDS])
{
    gpu_scratch *sc = (gpu_scratch *)calloc(1, sizeof(*sc));
    if (!sc) {
        fprintf(stderr, "catchat: out of host memory for a kernel scratch record\n");
        exit(1);
    }
    for (int k = 0; k < SCRATCH_KINDS; k++) {
        if (!need[k]) continue;
        if (cudaMalloc(&sc->buf[k], need[k]) != cudaSuccess) {
            cudaGetLastError();
            fprintf(stderr, "catchat: out of GPU memory for %zu bytes of kernel scratch (%s)\n", need[k],
                    scratch_kind_name[k]);
            exit(1);
        }
        sc->cap[k] = need[k];
    }
    return sc;
}

extern "C" void gpu_scratch_destroy(gpu_scratch *sc)
{
    if (!sc) return;
    for (int k = 0; k < SCRATCH_KINDS; k++) cudaFree(sc->buf[k]);
    free(sc);
}

void *scratch_take(gpu_scratch *sc, int kind, size_t bytes, const char *kernel)
{
    const size_t cap = sc ? sc->cap[kind] : 0;
    if (bytes > cap) {
        fprintf(stderr, "catchat: %s: its kernel scratch (%s) holds %zu bytes, this call needs %zu; the caller sizes "
                "it before the first launch (gpu_scratch_create, catchat/kernels.h)\n", kernel,
                scratch_kind_name[kind], cap, bytes);
        exit(1);
    }
    return sc ? sc->buf[kind] : NULL;
}

extern "C" size_t colsum_f16_scratch_bytes(int M, int N)
{
    return M > 0 && N > 0 ? (size_t)ceil_div(M, REDUCE_ROWS) * N * sizeof(float) : 0;
}

// out[col] += Σ_c partial[c][col] in a fixed order: 8 row lanes of a block
// take every 8th chunk, then meet in shared memory in lane order.
__global__ void sum_chunks_acc_kernel(float *out, const float *partial, int nchunks, int N)
{
    __shared__ float part[8][33];
    const int col = blockIdx.x * 32 + threadIdx.x;
    float acc = 0.f;
    if (col < N)
        for (int c = threadIdx.y; c < nchunks; c += 8) acc += partial[(size_t)c * N + col];
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && col < N) {
        float sum = 0.f;
        for (int k = 0; k < 8; k++) sum += part[k][threadIdx.x];
        out[col] += sum;
    }
}

void launch_sum_chunks_acc(float *out, const float *partial, int nchunks, int N, cudaStream_t s)
{
    sum_chunks_acc_kernel<<<ceil_div(N, 32), dim3(32, 8), 0, s>>>(out, partial, nchunks, N);
    LAUNCH_CHECK();
}

// Pass 1 of the column sums of an FP16 matrix: block (tile, chunk) sums its
// REDUCE_ROWS rows of 32 columns; 8 row lanes meet in shared memory in order.
__global__ void colsum_f16_partial_kernel(float *partial, const __half *x, int M, int N)
{
    __shared__ float part[8][33];
    const int col = blockIdx.x * 32 + threadIdx.x;
    const int r0 = blockIdx.y * REDUCE_ROWS, r1 = min(M, r0 + REDUCE_ROWS);
    float acc = 0.f;
    if (col < N)
        for (int m = r0 + threadIdx.y; m < r1; m += 8) acc += __half2float(x[(size_t)m * N + col]);
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && col < N) {
        float s = 0.f;
        for (int k = 0; k < 8; k++) s += part[k][threadIdx.x];
        partial[(size_t)blockIdx.y * N + col] = s;
    }
}

static unsigned int grid_for(size_t n) { unsigned int g = ceil_div(n, 256); return g > 4096 ? 4096 : (g ? g : 1); }

// What the binary holds for the current device, read from one of its kernels:
// binaryVersion is the SASS that runs (a PTX-only build reports the JIT's
// target), ptxVersion the PTX it came from. Non-zero when no image fits.
extern "C" int kernels_compiled_for(int *binary_version, int *ptx_version)
{
    cudaFuncAttributes a;
    if (cudaFuncGetAttributes(&a, f32_to_f16_kernel) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    *binary_version = a.binaryVersion;
    *ptx_version = a.ptxVersion;
    return 0;
}

// The rows of a row window (kernels.h), D values each: a block a row (the
// grid strides over rows), so the row's place costs one division a row
// rather than one an element; 4 values a thread where D and the pointers
// allow 16-byte loads (recompute converts a window's h_{t-1} this way).
template <int W>
__global__ void f32_to_f16_rows_kernel(__half *dst, const float *src, int M, int D, row_window rw)
{
    for (int r = blockIdx.x; r < M; r += gridDim.x) {
        const float *in = src + window_row(rw, r) * D;
        __half *out = dst + window_row_own(rw, r) * D;
        for (int i = W * threadIdx.x; i < D; i += W * blockDim.x) {
            if constexpr (W == 4) {
                const float4 v = *(const float4 *)(in + i);
                __half2 *o = (__half2 *)(out + i);
                o[0] = __floats2half2_rn(v.x, v.y);
                o[1] = __floats2half2_rn(v.z, v.w);
            } else {
                out[i] = __float2half_rn(in[i]);
            }
        }
    }
}

extern "C" void launch_f32_to_f16_rows(void *dst, const float *src, int M, int D, row_window rw, cudaStream_t s)
{
    if (M < 1) return;
    const unsigned grid = M < 65535 ? (unsigned)M : 65535u;
    if (D % 4 == 0 && (((uintptr_t)dst | (uintptr_t)src) & 15) == 0) {
        const int threads = D / 4 < 256 ? ((D / 4 + 31) / 32) * 32 : 256;
        f32_to_f16_rows_kernel<4><<<grid, threads, 0, s>>>((__half *)dst, src, M, D, rw);
    } else {
        f32_to_f16_rows_kernel<1><<<grid, 256, 0, s>>>((__half *)dst, src, M, D, rw);
    }
    LAUNCH_CHECK();
}

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

extern "C" void launch_colsum_f16_acc(float *out, const void *x, int M, int N, gpu_scratch *sc, cudaStream_t s)
{
    const int nchunks = (int)ceil_div(M, REDUCE_ROWS);
    float *partial =
        (float *)scratch_take(sc, SCRATCH_REDUCE, colsum_f16_scratch_bytes(M, N), "launch_colsum_f16_acc");
    colsum_f16_partial_kernel<<<dim3(ceil_div(N, 32), nchunks), dim3(32, 8), 0, s>>>(partial, (const __half *)x, M, N);
    LAUNCH_CHECK();
    launch_sum_chunks_acc(out, partial, nchunks, N, s);
}
