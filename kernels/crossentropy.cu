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
// gradient, which finds most of the row still in L2. The work is one
// exponential an element a pass, so the loops keep the rest small: 16-byte
// loads of 8 logits, their max in half2, the running max and its rescale
// once per 8, exp as ex2 of one FMA, the comparisons with the target as
// half2 masks. Columns V..ldv-1 are the GPU plan's padding (ldv: a multiple
// of 64): never counted, their gradient written 0.
// A row takes a warp (V ≤ 2048, 8 rows a block), 8 warps or 32 (warps_for).
#include "catchat/kernels.h"
#include "common.cuh"

#define LOG2E 1.4426950408889634f

__device__ __forceinline__ float ex2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// (max, sum of exp(x − max)) pairs: the online softmax's running state.
__device__ __forceinline__ void lse_merge(float &m, float &s, float m2, float s2)
{
    if (s != s || s2 != s2) { // a NaN logit: the row's loss is NaN, as on the CPU (__hmax2 passes NaN over)
        s = NAN;
        m = fmaxf(m, m2);
        return;
    }
    const float mx = fmaxf(m, m2);
    if (mx == -INFINITY) return; // both empty
    s = (m == -INFINITY ? 0.f : s * ex2((m - mx) * LOG2E)) + (m2 == -INFINITY ? 0.f : s2 * ex2((m2 - mx) * LOG2E));
    m = mx;
}

// WPR warps a row, BLOCK threads a block (BLOCK / (32·WPR) rows).
template <int WPR, int BLOCK>
__global__ void __launch_bounds__(BLOCK)
    crossentropy_kernel(float *loss, int *rank_class, __half *logits, int ldv, const int *y, int M, int V,
                        row_window rw, float grad_scale, int with_grad)
{
    constexpr int NT = 32 * WPR, ROWS = BLOCK / NT;
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
        return; // a row group returns together: WPR > 1 has one row a block
    }
    const __half lth = lr[tgt];
    const float lt = __half2float(lth);
    const __half2 lt2 = __half2half2(lth);
    float mx = -INFINITY, sum = 0.f;
    unsigned above16 = 0; // 16 a class above the target (a half's mask bits)
    for (int v0 = 8 * t; v0 < V; v0 += 8 * NT) { // ldv % 8 == 0: 16-byte loads
        const uint4 raw = *(const uint4 *)(lr + v0);
        const __half2 *h2 = (const __half2 *)&raw;
        if (v0 + 8 <= V) {
            const __half2 m2 = __hmax2(__hmax2(h2[0], h2[1]), __hmax2(h2[2], h2[3]));
            const float vm = fmaxf(__low2float(m2), __high2float(m2));
            if (vm > mx) {
                sum = mx == -INFINITY ? sum * 0.f : sum * ex2((mx - vm) * LOG2E); // 0, or a NaN kept
                mx = vm;
            }
            const float ml = mx * LOG2E;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const float2 f = __half22float2(h2[j]);
                sum += ex2(fmaf(f.x, LOG2E, -ml)) + ex2(fmaf(f.y, LOG2E, -ml)); // NaN logits make sum NaN
                above16 += __popc(__hgt2_mask(h2[j], lt2));
            }
        } else { // the row's last, partial 8
            const __half *h = (const __half *)&raw;
            for (int j = 0; j < 8 && v0 + j < V; j++) {
                const float x = __half2float(h[j]);
                if (x > mx) {
                    sum = mx == -INFINITY ? sum * 0.f : sum * ex2((mx - x) * LOG2E);
                    mx = x;
                }
                sum += ex2((x - mx) * LOG2E);
                above16 += x > lt ? 16u : 0u;
            }
        }
    }
    float above = (float)(above16 >> 4);
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
        __syncthreads(); // every thread has read the target's logit before any overwrites the row
    }
    const float lse = mx + logf(sum);
    if (t == 0) {
        loss[m] = lse - lt;
        rank_class[m] = above < 1.f ? 1 : (above < 5.f ? 2 : 0);
    }
    if (!with_grad) return;
    if (WPR == 1) __syncwarp(); // lanes read the target's logit above; the row is overwritten below
    const float l2 = lse * LOG2E;
    for (int v0 = 8 * t; v0 < ldv; v0 += 8 * NT) {
        uint4 raw = *(const uint4 *)(lr + v0);
        __half2 *h2 = (__half2 *)&raw;
        if (v0 + 8 <= V) {
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const float2 f = __half22float2(h2[j]);
                h2[j] = __floats2half2_rn(grad_scale * ex2(fmaf(f.x, LOG2E, -l2)),
                                          grad_scale * ex2(fmaf(f.y, LOG2E, -l2)));
            }
        } else {
            __half *h = (__half *)&raw;
#pragma unroll
            for (int j = 0; j < 8; j++)
                h[j] = __float2half_rn(v0 + j < V ? grad_scale * ex2(fmaf(__half2float(h[j]), LOG2E, -l2)) : 0.f);
        }
        if ((unsigned)(tgt - v0) < 8u) { // the target's −1, from the FP32 probability before rounding
            __half *h = (__half *)&raw;
            const float p = ex2(fmaf(lt, LOG2E, -l2));
            h[tgt - v0] = __float2half_rn(grad_scale * (p - 1.f));
        }
        *(uint4 *)(lr + v0) = raw;
    }
}

// Warps a row: one below V = 2048 (8 rows a block), 8 up to 16384, 32 above
// (at V = 50257, 4096 rows: 468 us against 534 with 8; 256 rows: 37 against
// 38: bench/classifier_probe, docs/results/classifier_probe_*.jsonl).
static int warps_for(int V) { return V <= 2048 ? 1 : V <= 16384 ? 8 : 32; }

extern "C" void launch_crossentropy_warps(float *loss, int *rank_class, void *logits16, int ldv, const int *y, int M,
                                          int V, row_window rw, float grad_scale, int with_grad, int warps,
                                          cudaStream_t s)
{
    if (M <= 0) return;
    __half *lg = (__half *)logits16;
    switch (warps > 0 ? warps : warps_for(V)) {
    case 1:
        crossentropy_kernel<1, 256><<<ceil_div(M, 8), 256, 0, s>>>(loss, rank_class, lg, ldv, y, M, V, rw, grad_scale,
                                                                    with_grad);
        break;
    case 8:
        crossentropy_kernel<8, 256><<<M, 256, 0, s>>>(loss, rank_class, lg, ldv, y, M, V, rw, grad_scale, with_grad);
        break;
    default:
        crossentropy_kernel<32, 1024><<<M, 1024, 0, s>>>(loss, rank_class, lg, ldv, y, M, V, rw, grad_scale, with_grad);
    }
    LAUNCH_CHECK();
}

extern "C" void launch_crossentropy(float *loss, int *rank_class, void *logits16, int ldv, const int *y, int M, int V,
                                    row_window rw, float grad_scale, int with_grad, cudaStream_t s)
{
    launch_crossentropy_warps(loss, rank_class, logits16, ldv, y, M, V, rw, grad_scale, with_grad, 0, s);
}
