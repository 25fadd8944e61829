// Fused softmax cross-entropy with ignored targets over one chunk of the
// classifier's rows (src/gpu/crossentropy.c drives the chunks): the logits
// arrive in FP16 (the lm_head GEMM's FP32 accumulation rounded once, as an
// autocast matmul does), every sum and the log-sum-exp are FP32, and with a
// gradient the row is overwritten in place by the FP16 operand
// dlogits = grad_scale·(softmax − onehot) of the lm_head GEMMs, so a chunk
// holds one [rows, ldv] FP16 buffer and nothing else of size V.
//
// A row is read twice: once for the online max and sum (and how many classes
// beat the target: ties favour it, as on the CPU), once to write its
// gradient, which at V = 50k finds most of the row still in L2. Columns
// V..ldv-1 are the GPU plan's padding (ldv: a multiple of 64, so the GEMMs'
// rows stay 128-byte aligned): never counted, their gradient written 0.
// Small vocabularies (V ≤ 2048) take a warp a row, 8 rows a block; larger ones
// a block of 8 warps a row, whose grid of one block a row fills the GPU.
#include "catchat/kernels.h"
#include "common.cuh"

#define CE_THREADS 256

// (max, sum of exp(x − max)) pairs: the online softmax's running state.
__device__ __forceinline__ void lse_merge(float &m, float &s, float m2, float s2)
{
    const float mx = fmaxf(m, m2);
    if (mx == -INFINITY) return; // both empty
    s = (m == -INFINITY ? 0.f : s * __expf(m - mx)) + (m2 == -INFINITY ? 0.f : s2 * __expf(m2 - mx));
    m = mx;
}

__device__ __forceinline__ void lse_add(float &m, float &s, float &above, float x, float lt)
{
    if (x > m) {
        s = (m == -INFINITY ? 0.f : s * __expf(m - x)) + 1.f;
        m = x;
    } else {
        s += __expf(x - m); // NaN x makes s NaN: the loss shows it
    }
    above += x > lt ? 1.f : 0.f;
}

// WPR warps a row (1 or 8); 8 / WPR rows a block.
template <int WPR>
__global__ void __launch_bounds__(CE_THREADS)
    crossentropy_kernel(float *loss, int *rank_class, __half *logits, int ldv, const int *y, int M, int V,
                        row_window rw, float grad_scale, int with_grad)
{
    constexpr int ROWS = CE_THREADS / 32 / WPR, NT = 32 * WPR;
    const int sub = threadIdx.x / NT, t = threadIdx.x % NT, i_row = blockIdx.x * ROWS + sub;
    __shared__ float red[ROWS][WPR][3];
    const bool live = i_row < M;
    const size_t m = live ? window_row(rw, i_row) : 0;
    __half *lr = logits + (size_t)(live ? i_row : 0) * ldv;
    const int tgt = live ? y[m] : -1;
    if (tgt < 0) { // not scored (or past the chunk): no loss, no gradient
        if (live) {
            if (t == 0) {
                loss[m] = 0.f;
                rank_class[m] = -1;
            }
            if (with_grad)
                for (int v = 8 * t; v < ldv; v += 8 * NT) *(uint4 *)(lr + v) = make_uint4(0, 0, 0, 0);
        }
        return; // the whole row group returns together: WPR > 1 has one row a block
    }
    const float lt = __half2float(lr[tgt]);
    float mx = -INFINITY, sum = 0.f, above = 0.f;
    for (int v0 = 8 * t; v0 < V; v0 += 8 * NT) { // ldv % 8 == 0: 16-byte loads
        const uint4 raw = *(const uint4 *)(lr + v0);
        const __half *h = (const __half *)&raw;
#pragma unroll
        for (int j = 0; j < 8; j++)
            if (v0 + j < V) lse_add(mx, sum, above, __half2float(h[j]), lt);
    }
    // reduce over the row's threads: within the warp, then across its warps
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, mx, o), s2 = __shfl_xor_sync(0xffffffffu, sum, o);
        lse_merge(mx, sum, m2, s2);
        above += __shfl_xor_sync(0xffffffffu, above, o);
    }
    if (WPR > 1) {
        const int w = t / 32;
        if ((t & 31) == 0) {
            red[sub][w][0] = mx;
            red[sub][w][1] = sum;
            red[sub][w][2] = above;
        }
        __syncthreads();
        mx = red[sub][0][0], sum = red[sub][0][1], above = red[sub][0][2];
        for (int k = 1; k < WPR; k++) {
            lse_merge(mx, sum, red[sub][k][0], red[sub][k][1]);
            above += red[sub][k][2];
        }
        __syncthreads(); // every thread has read lt before any overwrites the row
    }
    const float lse = mx + logf(sum);
    if (t == 0) {
        loss[m] = lse - lt;
        rank_class[m] = above < 1.f ? 1 : (above < 5.f ? 2 : 0);
    }
    if (!with_grad) return;
    if (WPR == 1) __syncwarp(); // lanes read lt above; the row is overwritten below
    for (int v0 = 8 * t; v0 < ldv; v0 += 8 * NT) {
        uint4 raw = *(const uint4 *)(lr + v0);
        __half *h = (__half *)&raw;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const int v = v0 + j;
            const float p = v < V ? __expf(__half2float(h[j]) - lse) : 0.f;
            h[j] = __float2half_rn(v < V ? grad_scale * (p - (v == tgt ? 1.f : 0.f)) : 0.f);
        }
        *(uint4 *)(lr + v0) = raw;
    }
}

extern "C" void launch_crossentropy(float *loss, int *rank_class, void *logits16, int ldv, const int *y, int M, int V,
                                    row_window rw, float grad_scale, int with_grad, cudaStream_t s)
{
    if (M <= 0) return;
    if (V <= 2048)
        crossentropy_kernel<1><<<ceil_div(M, CE_THREADS / 32), CE_THREADS, 0, s>>>(
            loss, rank_class, (__half *)logits16, ldv, y, M, V, rw, grad_scale, with_grad);
    else
        crossentropy_kernel<8><<<M, CE_THREADS, 0, s>>>(loss, rank_class, (__half *)logits16, ldv, y, M, V, rw,
                                                         grad_scale, with_grad);
    LAUNCH_CHECK();
}
