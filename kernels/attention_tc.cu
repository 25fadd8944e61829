// Sliding-window attention on tensor cores, for head size 64 (the default
// D=512, H=8; 128 and 256 in 64-column chunks, below) and windows up to 129, FP16 operands and FP32 accumulation;
// every other head size and window goes to the tiled kernels of attention_flash.cu (attention_tc_kernel chooses).
// Each warp owns 16 queries (or keys) and keeps its whole band in registers
// (mma.sync m16n8k16, flash-attention style): the scores never go through
// shared memory, and the probabilities become the A operand of P·V without
// leaving the registers.
//   forward     S = Q·Kᵀ over the W+15 keys the warp's queries see, band
//               mask and softmax in FP32, O = P·V; each query's log-sum-exp
//               lse = max + log Σ exp (and p[B,H,T,W] only when asked for)
//   query side  P = exp(S − lse) recomputed, dP = dO·Vᵀ, δ = Σ P·dP,
//               dS = P ⊙ (dP − δ)/√hd, dQ = dS·K; δ stored per query
//   key side    Sᵀ and dPᵀ recomputed over the W+15 queries that see the
//               warp's keys (with their lse and δ), dK = dSᵀ·Q, dV = Pᵀ·dO
// Recomputing P and dS costs two more band products per warp but no longer
// writes and re-reads p and ds (B·H·T·W floats each, 150 MB apiece at the
// default config), and the key side no longer gathers them diagonally.
// Each warp owns its outputs (no atomics), so results are reproducible.
// The band lives in registers: a version that staged S in shared memory
// through WMMA measured slower (CHANGELOG.md, 0.4.0).
#include "catchat/kernels.h"
#include "common.cuh"
#include "mma.cuh"

#define HD 64         // head size these kernels serve
#define LDH (HD + 8)  // FP16 row stride of staged tiles: 144 bytes, so ldmatrix's 8 rows fall in distinct banks
// Warps per block, 16 queries (keys) each, and 3 blocks an SM (≤ 168
// registers): 8 warps in 1 or 2 blocks an SM measured slower (CHANGELOG.md, 0.4.0).
#define ATT_WARPS 4
#define ATT_MINB 3
#define QB (16 * ATT_WARPS)
#define MAX_KT 9      // 16-row tiles of the band a warp covers: W + 15 rows, so W ≤ 129

static __host__ __device__ int band_tiles(int W) { return (W + 15 + 15) / 16; }
// Rows a block stages: warp w reads rows [16w, 16w + 16·KT).
static __host__ __device__ int staged_rows(int KT) { return 16 * (ATT_WARPS - 1) + 16 * KT; }

// rows [base, base+rows) of a [B,T,·] FP16 tensor's head-j columns (col0 + j·HD), zeros outside [0,lim),
// lim ≤ T: past the rows the launch may read (a wavefront chunk's later rows hold another step's values,
// any bits at all) it stages zeros, so no 0 · NaN reaches a product.
// 16-byte loads, STAGE_BATCH of them in flight per thread before any store: a
// load-store loop would wait one memory latency per vector (the compiler
// cannot move a global load above a store through a generic pointer).
#define STAGE_BATCH 4
__device__ __forceinline__ void stage_rows(__half *dst, const __half *__restrict__ src, int row_stride, int col0, int b,
                                           int base, int rows, int T, int lim)
{
    constexpr int VPR = HD / 8; // 16-byte vectors per row
    const int nvec = rows * VPR;
    for (int i0 = threadIdx.x; i0 < nvec; i0 += blockDim.x * STAGE_BATCH) {
        uint4 v[STAGE_BATCH];
#pragma unroll
        for (int u = 0; u < STAGE_BATCH; u++) {
            const int i = i0 + u * blockDim.x, t = base + i / VPR;
            const bool ok = i < nvec && t >= 0 && t < lim;
            v[u] = ok ? __ldg((const uint4 *)(src + ((size_t)b * T + t) * row_stride + col0 + (i % VPR) * 8))
                      : make_uint4(0u, 0u, 0u, 0u);
        }
#pragma unroll
        for (int u = 0; u < STAGE_BATCH; u++) {
            const int i = i0 + u * blockDim.x;
            if (i >= nvec) break;
            *(uint4 *)(dst + (i / VPR) * LDH + (i % VPR) * 8) = v[u];
        }
    }
}

// The A fragments of the warp's 16 staged rows over the head's 64 columns.
__device__ __forceinline__ void rows_afrag(uint4 a[4], const __half *A, int lane)
{
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
        ldsm_x4((uint32_t *)&a[kk], A + (lane & 15) * LDH + kk * 16 + (lane >> 4) * 8);
}

// acc[n] (16 rows × 8 columns, n = 0, 1) = A · Bᵀ over the head's 64
// columns, for the 16 rows of B starting at staged row r.
__device__ __forceinline__ void tile_scores_acc(float acc[2][4], const uint4 a[4], const __half *Bs, int r, int lane)
{
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        uint32_t b[4]; // rows 0-7 cols 0-7, rows 0-7 cols 8-15, rows 8-15 cols 0-7, rows 8-15 cols 8-15
        ldsm_x4(b, Bs + (r + (lane & 7) + (lane >> 4) * 8) * LDH + kk * 16 + ((lane >> 3) & 1) * 8);
        mma16816(acc[0], a[kk], b[0], b[1]);
        mma16816(acc[1], a[kk], b[2], b[3]);
    }
}

__device__ __forceinline__ void tile_scores(float acc[2][4], const uint4 a[4], const __half *Bs, int r, int lane)
{
    acc[0][0] = acc[0][1] = acc[0][2] = acc[0][3] = 0.f;
    acc[1][0] = acc[1][1] = acc[1][2] = acc[1][3] = 0.f;
    tile_scores_acc(acc, a, Bs, r, lane);
}

// acc[2·kt + n] += the band's tile kt: A[16 rows of the warp] · Bᵀ, B's rows
// r0 .. r0 + 16·KT of staged memory (the wide kernels sum 64-column chunks).
template <int KT>
__device__ __forceinline__ void band_scores_acc(float acc[2 * KT][4], const __half *A, const __half *Bs, int r0, int lane)
{
    uint4 a[4];
    rows_afrag(a, A, lane);
#pragma unroll
    for (int kt = 0; kt < KT; kt++) tile_scores_acc(&acc[2 * kt], a, Bs, r0 + 16 * kt, lane);
}

// The same into a cleared band.
template <int KT>
__device__ __forceinline__ void band_scores(float acc[2 * KT][4], const __half *A, const __half *Bs, int r0, int lane)
{
#pragma unroll
    for (int n = 0; n < 2 * KT; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
    band_scores_acc<KT>(acc, A, Bs, r0, lane);
}

// out[8][4] (16 rows × 64 columns) += P · Bs[r0 .. r0 + 16·KT), P given as
// packed FP16 A fragments (one uint4 per 16-row tile of the band).
template <int KT>
__device__ __forceinline__ void band_times(float out[8][4], const uint4 pa[KT], const __half *Bs, int r0, int lane)
{
#pragma unroll
    for (int kt = 0; kt < KT; kt++)
#pragma unroll
        for (int m = 0; m < 4; m++) {
            uint32_t b[4]; // rows 0-7 cols 0-7, rows 8-15 cols 0-7, rows 0-7 cols 8-15, rows 8-15 cols 8-15
            ldsm_x4_trans(b, Bs + (r0 + 16 * kt + (lane & 7) + ((lane >> 3) & 1) * 8) * LDH + 16 * m + (lane >> 4) * 8);
            mma16816(out[2 * m], pa[kt], b[0], b[1]);
            mma16816(out[2 * m + 1], pa[kt], b[2], b[3]);
        }
}

// Element (n-tile n, row half h, column e) of a tile_afrag fragment, back in FP32.
__device__ __forceinline__ float afrag_elem(const uint4 &a, int n, int h, int e)
{
    const uint32_t w = n ? (h ? a.w : a.z) : (h ? a.y : a.x);
    const __half2 v = *(const __half2 *)&w;
    return e ? __high2float(v) : __low2float(v);
}

// Write a 16×64 accumulator tile (rows q0.., columns col0..) as FP32 and/or FP16 rows of stride ld.
__device__ __forceinline__ void store_tile(float *o32, __half *o16, const float acc[8][4], int b, int q0, int T,
                                           size_t ld, int col0, int lane)
{
    const int g = lane >> 2, c2 = (lane & 3) * 2;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int q = q0 + g + 8 * h;
        if (q >= T) continue;
        const size_t row = ((size_t)b * T + q) * ld + col0 + c2;
#pragma unroll
        for (int n = 0; n < 8; n++) {
            if (o32) *(float2 *)(o32 + row + 8 * n) = make_float2(acc[n][2 * h], acc[n][2 * h + 1]);
            if (o16) *(__half2 *)(o16 + row + 8 * n) = __floats2half2_rn(acc[n][2 * h], acc[n][2 * h + 1]);
        }
    }
}

// Shared memory: the forward stages the warps' 16-row tiles of Q and the band
// of K and V; the query side Q and dO tiles and the K, V band; the key side
// K and V tiles, the band of Q and dO, and the band's lse and δ.
static size_t smem_forward(int KT) { return (size_t)(QB + 2 * staged_rows(KT)) * LDH * sizeof(__half); }
static size_t smem_backward(int KT)
{
    return (size_t)(2 * QB + 2 * staged_rows(KT)) * LDH * sizeof(__half) + 2 * staged_rows(KT) * sizeof(float);
}

// Band element (query row i of the warp, n-tile n, element e) sits in window
// slot w = 8n + 2c + e − i of query q0 + i (keys staged from q0 − W + 1).
__device__ __forceinline__ bool query_band_ok(int w, int q, int W) { return w >= 0 && w < W && q - W + 1 + w >= 0; }

// The forward's softmax over the warp's band s (scores of 16 queries from
// q0): scale, band mask, max, exp, sum; each query's lse = max + log Σ exp
// and p[W] (when asked for); s becomes P.
template <int KT>
__device__ __forceinline__ void band_softmax(float s[2 * KT][4], int q0, int W, int T, float sc, float *lse, float *p,
                                             size_t head, int lane)
{
    const int g = lane >> 2, c2 = (lane & 3) * 2;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int i = g + 8 * h, q = q0 + i;
        float mx = -INFINITY;
#pragma unroll
        for (int n = 0; n < 2 * KT; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const bool ok = query_band_ok(8 * n + c2 + e - i, q, W);
                s[n][2 * h + e] = ok ? s[n][2 * h + e] * sc : -INFINITY;
                mx = fmaxf(mx, s[n][2 * h + e]);
            }
        mx = quad_max(mx); // finite: slot W−1 (the query itself) is always in the band
        float sum = 0.f;
#pragma unroll
        for (int n = 0; n < 2 * KT; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const float v = __expf(s[n][2 * h + e] - mx); // 0 outside the band
                s[n][2 * h + e] = v;
                sum += v;
            }
        sum = quad_sum(sum);
        const float inv = 1.f / sum;
        if (q < T && (lane & 3) == 0) lse[head + q] = mx + __logf(sum);
        float *pr = p ? p + (head + q) * W : NULL;
#pragma unroll
        for (int n = 0; n < 2 * KT; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int w = 8 * n + c2 + e - i;
                s[n][2 * h + e] *= inv;
                if (pr && q < T && w >= 0 && w < W) pr[w] = s[n][2 * h + e];
            }
    }
}

// Query side, band tile kt: S (in s) becomes P = exp(S·sc − lse), and
// Σ P·dP (dP in d) accumulates into pdp of the thread's two query rows.
__device__ __forceinline__ void query_tile_probs(float s[2][4], const float d[2][4], int kt, int q0, int W, int T,
                                                 float sc, const float lq[2], float pdp[2], int lane)
{
    const int g = lane >> 2, c2 = (lane & 3) * 2;
#pragma unroll
    for (int n = 0; n < 2; n++)
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int i = g + 8 * h, q = q0 + i;
                const bool ok = q < T && query_band_ok(16 * kt + 8 * n + c2 + e - i, q, W);
                const float pv = ok ? __expf(s[n][2 * h + e] * sc - lq[h]) : 0.f;
                pdp[h] += pv * d[n][2 * h + e];
                s[n][2 * h + e] = pv;
            }
}

// Query side, band tile: dS = P ⊙ (dP − δ)·sc from P's FP16 fragment, in place of dP.
__device__ __forceinline__ void query_tile_ds(float d[2][4], const uint4 &pa, const float pdp[2], float sc)
{
#pragma unroll
    for (int n = 0; n < 2; n++)
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float &v = d[n][2 * h + e];
                v = afrag_elem(pa, n, h, e) * (v - pdp[h]) * sc;
            }
}

// Key side, band tile kt: Sᵀ (in s) becomes P, dPᵀ (in dp) becomes dS, with
// the queries' lse and δ staged per row.
__device__ __forceinline__ void key_tile_grads(float s[2][4], float dp[2][4], int kt, int warp, int k0, int W, int T,
                                               float sc, const float *lse_s, const float *delta_s, int lane)
{
    const int g = lane >> 2, c2 = (lane & 3) * 2;
#pragma unroll
    for (int n = 0; n < 2; n++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int col = 16 * kt + 8 * n + c2 + e, r = 16 * warp + col;
            const float lq = lse_s[r], dl = delta_s[r];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int w = g + 8 * h - col + W - 1;
                const bool ok = k0 + col < T && w >= 0 && w < W;
                const float pv = ok ? __expf(s[n][2 * h + e] * sc - lq) : 0.f;
                s[n][2 * h + e] = pv;
                dp[n][2 * h + e] = pv * (dp[n][2 * h + e] - dl) * sc;
            }
        }
}

template <int KT>
__global__ void __launch_bounds__(ATT_WARPS * 32, ATT_MINB)
    attention_forward_mma(float *o32, __half *o16, float *p, float *lse, const __half *qkv, int T, int D, int H, int W,
                          int qoff, int qlim)
{
    extern __shared__ __align__(16) unsigned char sm[];
    const int RS = staged_rows(KT);
    __half *Q = (__half *)sm, *K = Q + QB * LDH, *V = K + RS * LDH;
    const int t0 = qoff + blockIdx.x * QB, j = blockIdx.y, b = blockIdx.z;
    const int kend = min(qlim, t0 + QB); // the block's keys end with its last query: rows past it stage as zeros
    stage_rows(Q, qkv, 3 * D, j * HD, b, t0, QB, T, qlim);
    stage_rows(K, qkv, 3 * D, D + j * HD, b, t0 - W + 1, RS, T, kend);
    stage_rows(V, qkv, 3 * D, 2 * D + j * HD, b, t0 - W + 1, RS, T, kend);
    __syncthreads();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int q0 = t0 + 16 * warp;
    if (q0 >= T) return;
    const size_t head = ((size_t)b * H + j) * T;
    float s[2 * KT][4];
    band_scores<KT>(s, Q + 16 * warp * LDH, K, 16 * warp, lane);
    band_softmax<KT>(s, q0, W, T, rsqrtf((float)HD), lse, p, head, lane);
    uint4 pa[KT];
#pragma unroll
    for (int kt = 0; kt < KT; kt++) pa[kt] = tile_afrag(&s[2 * kt]);
    float o[8][4] = {};
    band_times<KT>(o, pa, V, 16 * warp, lane);
    store_tile(o32, o16, o, b, q0, T, D, j * HD, lane);
}

// Query side: P is recomputed tile by tile from S and the forward's lse, its
// FP32 values summed into δ = Σ P·dP and kept as FP16 A fragments (the FP32
// band would not fit in registers beside dP).
template <int KT>
__global__ void __launch_bounds__(ATT_WARPS * 32, ATT_MINB)
    attention_backward_query_mma(float *dqkv, __half *dqkv16, float *delta, const __half *dout, const float *lse,
                                 const __half *qkv, int T, int D, int H, int W, int qoff, int qlim)
{
    extern __shared__ __align__(16) unsigned char sm[];
    const int RS = staged_rows(KT);
    __half *Q = (__half *)sm, *dO = Q + QB * LDH, *K = dO + QB * LDH, *V = K + RS * LDH;
    const int t0 = qoff + blockIdx.x * QB, j = blockIdx.y, b = blockIdx.z;
    const int kend = min(qlim, t0 + QB); // the block's keys end with its last query: rows past it stage as zeros
    stage_rows(Q, qkv, 3 * D, j * HD, b, t0, QB, T, qlim);
    stage_rows(dO, dout, D, j * HD, b, t0, QB, T, qlim);
    stage_rows(K, qkv, 3 * D, D + j * HD, b, t0 - W + 1, RS, T, kend);
    stage_rows(V, qkv, 3 * D, 2 * D + j * HD, b, t0 - W + 1, RS, T, kend);
    __syncthreads();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2;
    const int q0 = t0 + 16 * warp;
    if (q0 >= T) return;
    const size_t head = ((size_t)b * H + j) * T;
    float d[2 * KT][4];
    band_scores<KT>(d, dO + 16 * warp * LDH, V, 16 * warp, lane); // dP
    const float sc = rsqrtf((float)HD);
    float lq[2], pdp[2] = { 0.f, 0.f };
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int q = q0 + g + 8 * h;
        lq[h] = q < T ? __ldg(lse + head + q) : 0.f;
    }
    uint4 qa[4], pa[KT];
    rows_afrag(qa, Q + 16 * warp * LDH, lane);
#pragma unroll
    for (int kt = 0; kt < KT; kt++) {
        float s[2][4];
        tile_scores(s, qa, K, 16 * warp + 16 * kt, lane);
        query_tile_probs(s, &d[2 * kt], kt, q0, W, T, sc, lq, pdp, lane);
        pa[kt] = tile_afrag(s);
    }
#pragma unroll
    for (int h = 0; h < 2; h++) {
        pdp[h] = quad_sum(pdp[h]);
        const int q = q0 + g + 8 * h;
        if (q < T && (lane & 3) == 0) delta[head + q] = pdp[h];
    }
    uint4 da[KT];
#pragma unroll
    for (int kt = 0; kt < KT; kt++) {
        query_tile_ds(&d[2 * kt], pa[kt], pdp, sc);
        da[kt] = tile_afrag(&d[2 * kt]);
    }
    float dq[8][4] = {};
    band_times<KT>(dq, da, K, 16 * warp, lane);
    store_tile(dqkv, dqkv16, dq, b, q0, T, (size_t)3 * D, j * HD, lane);
}

// Key side: warp w owns keys k0 .. k0+15 (k0 = blockIdx.x·QB + 16w); the
// queries that see them are k0 .. k0 + W + 14, staged from the block's first
// key. Band element (key row i, query column col = 16kt + 8n + 2c + e) is
// window slot w = i − col + W − 1 of query k0 + col. Sᵀ = K·Qᵀ and
// dPᵀ = V·dOᵀ are recomputed a tile at a time, with the queries' lse and δ.
template <int KT>
__global__ void __launch_bounds__(ATT_WARPS * 32, ATT_MINB)
    attention_backward_key_mma(float *dqkv, __half *dqkv16, const float *delta, const __half *dout, const float *lse,
                               const __half *qkv, int T, int D, int H, int W, int qoff, int qlim)
{
    extern __shared__ __align__(16) unsigned char sm[];
    const int RS = staged_rows(KT);
    __half *Ks = (__half *)sm, *Vs = Ks + QB * LDH, *Q = Vs + QB * LDH, *dO = Q + RS * LDH;
    float *lse_s = (float *)(dO + RS * LDH), *delta_s = lse_s + RS;
    const int kb0 = qoff + blockIdx.x * QB, j = blockIdx.y, b = blockIdx.z;
    // the block's keys [kb0, kend) are seen by queries up to qend (ops_top_gpu.c declares the same); past them, zeros
    const int kend = min(qlim, kb0 + QB), qend = min(T, kend + W - 1);
    const size_t head = ((size_t)b * H + j) * T;
    stage_rows(Ks, qkv, 3 * D, D + j * HD, b, kb0, QB, T, kend);
    stage_rows(Vs, qkv, 3 * D, 2 * D + j * HD, b, kb0, QB, T, kend);
    stage_rows(Q, qkv, 3 * D, j * HD, b, kb0, RS, T, qend);
    stage_rows(dO, dout, D, j * HD, b, kb0, RS, T, qend);
    for (int r = threadIdx.x; r < RS; r += blockDim.x) {
        const bool in = kb0 + r < qend; // queries past the end are masked below
        lse_s[r] = in ? __ldg(lse + head + kb0 + r) : 0.f;
        delta_s[r] = in ? __ldg(delta + head + kb0 + r) : 0.f;
    }
    __syncthreads();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int k0 = kb0 + 16 * warp;
    if (k0 >= T) return;
    const float sc = rsqrtf((float)HD);
    uint4 ka[4], va[4], dsa[KT], pa[KT];
    rows_afrag(ka, Ks + 16 * warp * LDH, lane);
    rows_afrag(va, Vs + 16 * warp * LDH, lane);
#pragma unroll
    for (int kt = 0; kt < KT; kt++) {
        float s[2][4], dp[2][4];
        tile_scores(s, ka, Q, 16 * warp + 16 * kt, lane);
        tile_scores(dp, va, dO, 16 * warp + 16 * kt, lane);
        key_tile_grads(s, dp, kt, warp, k0, W, T, sc, lse_s, delta_s, lane);
        pa[kt] = tile_afrag(s);
        dsa[kt] = tile_afrag(dp);
    }
    float dk[8][4] = {}, dv[8][4] = {};
    band_times<KT>(dk, dsa, Q, 16 * warp, lane);
    band_times<KT>(dv, pa, dO, 16 * warp, lane);
    store_tile(dqkv, dqkv16, dk, b, k0, T, (size_t)3 * D, D + j * HD, lane);
    store_tile(dqkv, dqkv16, dv, b, k0, T, (size_t)3 * D, 2 * D + j * HD, lane);
}

// ---- Head sizes 128 and 256: the same kernels over 64-column chunks ----
// A wider head does not fit the staged tiles (and not at all in a 99 KB
// block at 256), so each kernel walks the head in nch chunks of 64 columns
// through the same shared memory: the band's products accumulate over the
// chunks (S = Σ_c Q_c·K_cᵀ, dP = Σ_c dO_c·V_cᵀ), and the outputs, which are
// per column, are written chunk by chunk (O_c = P·V_c, dQ_c = dS·K_c, ...).
// Both bands (S and dP) stay in registers at once, so these use two blocks
// an SM (more registers a thread). The output pass walks the chunks in
// reverse so the last chunk staged is used before any is staged again.
#define ATT_MINB_WIDE 2

template <int KT>
__global__ void __launch_bounds__(ATT_WARPS * 32, ATT_MINB_WIDE)
    attention_forward_mma_wide(float *o32, __half *o16, float *p, float *lse, const __half *qkv, int T, int D, int H,
                               int W, int nch, int qoff, int qlim)
{
    extern __shared__ __align__(16) unsigned char sm[];
    const int RS = staged_rows(KT), hd = HD * nch;
    __half *Q = (__half *)sm, *K = Q + QB * LDH, *V = K + RS * LDH;
    const int t0 = qoff + blockIdx.x * QB, j = blockIdx.y, b = blockIdx.z;
    const int kend = min(qlim, t0 + QB); // the block's keys end with its last query: rows past it stage as zeros
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int q0 = t0 + 16 * warp;
    const bool active = q0 < T; // inactive warps still stage and meet the barriers
    float s[2 * KT][4];
#pragma unroll
    for (int n = 0; n < 2 * KT; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
    for (int c = 0; c < nch; c++) {
        if (c) __syncthreads();
        stage_rows(Q, qkv, 3 * D, j * hd + c * HD, b, t0, QB, T, qlim);
        stage_rows(K, qkv, 3 * D, D + j * hd + c * HD, b, t0 - W + 1, RS, T, kend);
        if (c == nch - 1) stage_rows(V, qkv, 3 * D, 2 * D + j * hd + c * HD, b, t0 - W + 1, RS, T, kend);
        __syncthreads();
        if (active) {
            band_scores_acc<KT>(s, Q + 16 * warp * LDH, K, 16 * warp, lane);
        }
    }
    const size_t head = ((size_t)b * H + j) * T;
    const float sc = rsqrtf((float)hd);
    uint4 pa[KT];
    if (active) {
        band_softmax<KT>(s, q0, W, T, sc, lse, p, head, lane);
#pragma unroll
        for (int kt = 0; kt < KT; kt++) pa[kt] = tile_afrag(&s[2 * kt]);
    }
    for (int c = nch - 1; c >= 0; c--) {
        if (c < nch - 1) {
            __syncthreads();
            stage_rows(V, qkv, 3 * D, 2 * D + j * hd + c * HD, b, t0 - W + 1, RS, T, kend);
            __syncthreads();
        }
        if (active) {
            float o[8][4] = {};
            band_times<KT>(o, pa, V, 16 * warp, lane);
            store_tile(o32, o16, o, b, q0, T, D, j * hd + c * HD, lane);
        }
    }
}

template <int KT>
__global__ void __launch_bounds__(ATT_WARPS * 32, ATT_MINB_WIDE)
    attention_backward_query_mma_wide(float *dqkv, __half *dqkv16, float *delta, const __half *dout, const float *lse,
                                      const __half *qkv, int T, int D, int H, int W, int nch, int qoff, int qlim)
{
    extern __shared__ __align__(16) unsigned char sm[];
    const int RS = staged_rows(KT), hd = HD * nch;
    __half *Q = (__half *)sm, *dO = Q + QB * LDH, *K = dO + QB * LDH, *V = K + RS * LDH;
    const int t0 = qoff + blockIdx.x * QB, j = blockIdx.y, b = blockIdx.z;
    const int kend = min(qlim, t0 + QB); // the block's keys end with its last query: rows past it stage as zeros
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2;
    const int q0 = t0 + 16 * warp;
    const bool active = q0 < T;
    float d[2 * KT][4], sb[2 * KT][4]; // dP and S over the band
#pragma unroll
    for (int n = 0; n < 2 * KT; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) d[n][e] = sb[n][e] = 0.f;
    for (int c = 0; c < nch; c++) {
        if (c) __syncthreads();
        stage_rows(Q, qkv, 3 * D, j * hd + c * HD, b, t0, QB, T, qlim);
        stage_rows(dO, dout, D, j * hd + c * HD, b, t0, QB, T, qlim);
        stage_rows(K, qkv, 3 * D, D + j * hd + c * HD, b, t0 - W + 1, RS, T, kend);
        stage_rows(V, qkv, 3 * D, 2 * D + j * hd + c * HD, b, t0 - W + 1, RS, T, kend);
        __syncthreads();
        if (active) {
            band_scores_acc<KT>(d, dO + 16 * warp * LDH, V, 16 * warp, lane);
            band_scores_acc<KT>(sb, Q + 16 * warp * LDH, K, 16 * warp, lane);
        }
    }
    const size_t head = ((size_t)b * H + j) * T;
    const float sc = rsqrtf((float)hd);
    uint4 da[KT];
    if (active) {
        float lq[2], pdp[2] = { 0.f, 0.f };
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int q = q0 + g + 8 * h;
            lq[h] = q < T ? __ldg(lse + head + q) : 0.f;
        }
        uint4 pa[KT];
#pragma unroll
        for (int kt = 0; kt < KT; kt++) {
            query_tile_probs(&sb[2 * kt], &d[2 * kt], kt, q0, W, T, sc, lq, pdp, lane);
            pa[kt] = tile_afrag(&sb[2 * kt]);
        }
#pragma unroll
        for (int h = 0; h < 2; h++) {
            pdp[h] = quad_sum(pdp[h]);
            const int q = q0 + g + 8 * h;
            if (q < T && (lane & 3) == 0) delta[head + q] = pdp[h];
        }
#pragma unroll
        for (int kt = 0; kt < KT; kt++) {
            query_tile_ds(&d[2 * kt], pa[kt], pdp, sc);
            da[kt] = tile_afrag(&d[2 * kt]);
        }
    }
    for (int c = nch - 1; c >= 0; c--) {
        if (c < nch - 1) {
            __syncthreads();
            stage_rows(K, qkv, 3 * D, D + j * hd + c * HD, b, t0 - W + 1, RS, T, kend);
            __syncthreads();
        }
        if (active) {
            float dq[8][4] = {};
            band_times<KT>(dq, da, K, 16 * warp, lane);
            store_tile(dqkv, dqkv16, dq, b, q0, T, (size_t)3 * D, j * hd + c * HD, lane);
        }
    }
}

template <int KT>
__global__ void __launch_bounds__(ATT_WARPS * 32, ATT_MINB_WIDE)
    attention_backward_key_mma_wide(float *dqkv, __half *dqkv16, const float *delta, const __half *dout,
                                    const float *lse, const __half *qkv, int T, int D, int H, int W, int nch,
                                    int qoff, int qlim)
{
    extern __shared__ __align__(16) unsigned char sm[];
    const int RS = staged_rows(KT), hd = HD * nch;
    __half *Ks = (__half *)sm, *Vs = Ks + QB * LDH, *Q = Vs + QB * LDH, *dO = Q + RS * LDH;
    float *lse_s = (float *)(dO + RS * LDH), *delta_s = lse_s + RS;
    const int kb0 = qoff + blockIdx.x * QB, j = blockIdx.y, b = blockIdx.z;
    // the block's keys [kb0, kend) are seen by queries up to qend (ops_top_gpu.c declares the same); past them, zeros
    const int kend = min(qlim, kb0 + QB), qend = min(T, kend + W - 1);
    const size_t head = ((size_t)b * H + j) * T;
    for (int r = threadIdx.x; r < RS; r += blockDim.x) {
        const bool in = kb0 + r < qend;
        lse_s[r] = in ? __ldg(lse + head + kb0 + r) : 0.f;
        delta_s[r] = in ? __ldg(delta + head + kb0 + r) : 0.f;
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int k0 = kb0 + 16 * warp;
    const bool active = k0 < T;
    float sb[2 * KT][4], dp[2 * KT][4]; // Sᵀ and dPᵀ over the band
#pragma unroll
    for (int n = 0; n < 2 * KT; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) sb[n][e] = dp[n][e] = 0.f;
    for (int c = 0; c < nch; c++) {
        if (c) __syncthreads();
        stage_rows(Ks, qkv, 3 * D, D + j * hd + c * HD, b, kb0, QB, T, kend);
        stage_rows(Vs, qkv, 3 * D, 2 * D + j * hd + c * HD, b, kb0, QB, T, kend);
        stage_rows(Q, qkv, 3 * D, j * hd + c * HD, b, kb0, RS, T, qend);
        stage_rows(dO, dout, D, j * hd + c * HD, b, kb0, RS, T, qend);
        __syncthreads();
        if (active) {
            band_scores_acc<KT>(sb, Ks + 16 * warp * LDH, Q, 16 * warp, lane);
            band_scores_acc<KT>(dp, Vs + 16 * warp * LDH, dO, 16 * warp, lane);
        }
    }
    const float sc = rsqrtf((float)hd);
    uint4 dsa[KT], pa[KT];
    if (active) {
#pragma unroll
        for (int kt = 0; kt < KT; kt++) {
            key_tile_grads(&sb[2 * kt], &dp[2 * kt], kt, warp, k0, W, T, sc, lse_s, delta_s, lane);
            pa[kt] = tile_afrag(&sb[2 * kt]);
            dsa[kt] = tile_afrag(&dp[2 * kt]);
        }
    }
    for (int c = nch - 1; c >= 0; c--) {
        if (c < nch - 1) {
            __syncthreads();
            stage_rows(Q, qkv, 3 * D, j * hd + c * HD, b, kb0, RS, T, qend);
            stage_rows(dO, dout, D, j * hd + c * HD, b, kb0, RS, T, qend);
            __syncthreads();
        }
        if (active) {
            float dk[8][4] = {}, dv[8][4] = {};
            band_times<KT>(dk, dsa, Q, 16 * warp, lane);
            band_times<KT>(dv, pa, dO, 16 * warp, lane);
            store_tile(dqkv, dqkv16, dk, b, k0, T, (size_t)3 * D, D + j * hd + c * HD, lane);
            store_tile(dqkv, dqkv16, dv, b, k0, T, (size_t)3 * D, 2 * D + j * hd + c * HD, lane);
        }
    }
}

// The shapes the band kernels serve: head sizes 64, 128, 256 and W ≤ 129.
static bool band_shape(int D, int H, int W)
{
    return H > 0 && D % H == 0 && (D / H == HD || D / H == 2 * HD || D / H == 4 * HD) && W >= 1 &&
           band_tiles(W) <= MAX_KT;
}

static int banded_supported(const gpu_caps *caps, int D, int H, int W)
{
    return band_shape(D, H, W) && smem_backward(band_tiles(W)) <= (size_t)caps->smem_per_block_optin;
}

extern "C" int attention_tc_kernel(const gpu_caps *caps, int D, int H, int W, int tiled)
{
    if (H < 1 || W < 1) return ATTN_FP32;
    if (!tiled && banded_supported(caps, D, H, W)) return ATTN_TC_BANDED;
    return attention_flash_supported(caps, D, H) ? ATTN_TC_TILED : ATTN_FP32;
}

extern "C" int attention_tc_supported(const gpu_caps *caps, int D, int H, int W)
{
    return attention_tc_kernel(caps, D, H, W, 0) != ATTN_FP32;
}

extern "C" const char *attention_kernel_name(int kernel)
{
    return kernel == ATTN_TC_BANDED  ? "tensor cores, the band in registers"
           : kernel == ATTN_TC_TILED ? "tensor cores, tiled over the window"
                                     : "FP32 cores";
}

// One kernel of a band width over the query (or key) blocks of rows
// [q0, q1), its shared memory opted in first.
template <typename Kernel, typename... Args>
static void launch_band(Kernel k, size_t smem, int B, int q0, int q1, int H, cudaStream_t s, Args... args)
{
    cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    k<<<dim3(ceil_div(q1 - q0, QB), H, B), ATT_WARPS * 32, smem, s>>>(args..., q0, q1);
    LAUNCH_CHECK();
}

// One instantiation per band width; the launchers pick it from W. The wide
// kernels (head sizes 128, 256) take the number of 64-column chunks.
template <int KT> struct attention_mma {
    static void forward(float *o32, __half *o16, float *p, float *lse, const __half *qkv, int B, int T, int D, int H,
                        int W, int q0, int q1, cudaStream_t s)
    {
        launch_band(attention_forward_mma<KT>, smem_forward(KT), B, q0, q1, H, s, o32, o16, p, lse, qkv, T, D, H, W);
    }
    static void backward(float *dqkv, __half *dqkv16, float *delta, const __half *dout, const float *lse,
                         const __half *qkv, int B, int T, int D, int H, int W, int q0, int q1, cudaStream_t s)
    {
        launch_band(attention_backward_query_mma<KT>, smem_backward(KT), B, q0, q1, H, s, dqkv, dqkv16, delta, dout,
                    lse, qkv, T, D, H, W);
        launch_band(attention_backward_key_mma<KT>, smem_backward(KT), B, q0, q1, H, s, dqkv, dqkv16,
                    (const float *)delta, dout, lse, qkv, T, D, H, W);
    }
    static void forward_wide(float *o32, __half *o16, float *p, float *lse, const __half *qkv, int B, int T, int D,
                             int H, int W, int q0, int q1, cudaStream_t s)
    {
        launch_band(attention_forward_mma_wide<KT>, smem_forward(KT), B, q0, q1, H, s, o32, o16, p, lse, qkv, T, D, H,
                    W, D / H / HD);
    }
    static void backward_wide(float *dqkv, __half *dqkv16, float *delta, const __half *dout, const float *lse,
                              const __half *qkv, int B, int T, int D, int H, int W, int q0, int q1, cudaStream_t s)
    {
        launch_band(attention_backward_query_mma_wide<KT>, smem_backward(KT), B, q0, q1, H, s, dqkv, dqkv16, delta,
                    dout, lse, qkv, T, D, H, W, D / H / HD);
        launch_band(attention_backward_key_mma_wide<KT>, smem_backward(KT), B, q0, q1, H, s, dqkv, dqkv16,
                    (const float *)delta, dout, lse, qkv, T, D, H, W, D / H / HD);
    }
};

#define BAND_DISPATCH(call)                                                                                        \
    switch (band_tiles(W)) {                                                                                       \
    case 1: attention_mma<1>::call; break;                                                                         \
    case 2: attention_mma<2>::call; break;                                                                         \
    case 3: attention_mma<3>::call; break;                                                                         \
    case 4: attention_mma<4>::call; break;                                                                         \
    case 5: attention_mma<5>::call; break;                                                                         \
    case 6: attention_mma<6>::call; break;                                                                         \
    case 7: attention_mma<7>::call; break;                                                                         \
    case 8: attention_mma<8>::call; break;                                                                         \
    case 9: attention_mma<9>::call; break;                                                                         \
    default: fprintf(stderr, "catchat: attention_tc: window %d over the supported %d\n", W, 16 * MAX_KT - 15);     \
             exit(1);                                                                                              \
    }

// A window [q0, q1) of the sequences: blocks of QB queries (forward and the
// backward's query side) and keys (its key side) from q0, which must be a
// multiple of QB, as q1 must be or equal T, so no block reaches past the
// window. The forward reads keys from q0 - W + 1, the backward's key side
// queries up to q1 + W - 2, with their dO, lse and delta: the windows after
// this one must have run their query side first.
static void check_window(int T, int q0, int q1)
{
    if (q0 < 0 || q0 >= q1 || q1 > T || q0 % QB || (q1 % QB && q1 != T)) {
        fprintf(stderr, "catchat: attention_tc: window [%d, %d) of T=%d is not in blocks of %d\n", q0, q1, T, QB);
        exit(1);
    }
}

// The band kernel only at the shapes it serves, the tiled one (its backward
// with the forward's FP16 output, which its δ reads): anything else is the
// caller's error.
static void check_kernel(int kernel, int D, int H, int W, bool has_o16)
{
    if (!(kernel == ATTN_TC_BANDED && band_shape(D, H, W)) && !(kernel == ATTN_TC_TILED && has_o16)) {
        fprintf(stderr, "catchat: attention_tc: kernel %d at head size %d/%d, window %d%s\n", kernel, D, H, W,
                kernel == ATTN_TC_TILED ? " without the FP16 output o16" : " is not one it serves");
        exit(1);
    }
}

extern "C" void launch_attention_forward_tc_window(int kernel, float *o32, void *o16, float *p, float *lse,
                                                   const void *qkv16, int B, int T, int D, int H, int W, int q0, int q1,
                                                   cudaStream_t s)
{
    check_window(T, q0, q1);
    check_kernel(kernel, D, H, W, true);
    if (kernel == ATTN_TC_TILED) launch_attention_forward_flash_window(o32, o16, p, lse, qkv16, B, T, D, H, W, q0, q1, s);
    else if (D / H == HD) BAND_DISPATCH(forward(o32, (__half *)o16, p, lse, (const __half *)qkv16, B, T, D, H, W, q0, q1, s))
    else BAND_DISPATCH(forward_wide(o32, (__half *)o16, p, lse, (const __half *)qkv16, B, T, D, H, W, q0, q1, s))
}

extern "C" void launch_attention_backward_tc_window(int kernel, float *dqkv, void *dqkv16, float *delta,
                                                    const void *dout16, const void *o16, const float *lse,
                                                    const void *qkv16, int B, int T, int D, int H, int W, int q0,
                                                    int q1, cudaStream_t s)
{
    check_window(T, q0, q1);
    check_kernel(kernel, D, H, W, o16 != NULL);
    if (kernel == ATTN_TC_TILED)
        launch_attention_backward_flash_window(dqkv, dqkv16, delta, dout16, o16, lse, qkv16, B, T, D, H, W, q0, q1, s);
    else if (D / H == HD)
        BAND_DISPATCH(backward(dqkv, (__half *)dqkv16, delta, (const __half *)dout16, lse, (const __half *)qkv16, B, T,
                               D, H, W, q0, q1, s))
    else
        BAND_DISPATCH(backward_wide(dqkv, (__half *)dqkv16, delta, (const __half *)dout16, lse,
                                    (const __half *)qkv16, B, T, D, H, W, q0, q1, s))
}

extern "C" void launch_attention_forward_tc(int kernel, float *o32, void *o16, float *p, float *lse, const void *qkv16,
                                            int B, int T, int D, int H, int W, cudaStream_t s)
{
    launch_attention_forward_tc_window(kernel, o32, o16, p, lse, qkv16, B, T, D, H, W, 0, T, s);
}

extern "C" void launch_attention_backward_tc(int kernel, float *dqkv, void *dqkv16, float *delta, const void *dout16,
                                             const void *o16, const float *lse, const void *qkv16, int B, int T, int D,
                                             int H, int W, cudaStream_t s)
{
    launch_attention_backward_tc_window(kernel, dqkv, dqkv16, delta, dout16, o16, lse, qkv16, B, T, D, H, W, 0, T, s);
}
