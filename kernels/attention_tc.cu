// Sliding-window attention on tensor cores, for head size 64 (the default
// D=512, H=8). Same function, layout and outputs as attention.cu's kernels
// (p[B,H,T,W] FP32 probabilities, ds kept for the key side), with FP16
// operands and FP32 accumulation (WMMA 16×16×16):
//   forward     S = Q·Kᵀ (32 queries × the R = 32+W−1 keys they can see),
//               band-masked softmax in FP32, O = P·V
//   query side  dP = dO·Vᵀ, dS = P ⊙ (dP − Σ P·dP)/√hd, dQ = dS·K
//   key side    dK = dSᵀ·Q, dV = Pᵀ·dO over the queries that see each key tile
// Each block owns its outputs (no atomics), so results are reproducible.
#include <mma.h>
#include "catchat/kernels.h"
#include "common.cuh"

using namespace nvcuda;

#define TQ 32          // queries (or keys) per block
#define HD 64          // head size these kernels serve
#define LDH (HD + 8)   // FP16 row stride of staged Q/K/V/dO tiles
// 16 warps: measured 0.67 ms forward (8 warps: 0.76) at the default config;
// 64-query tiles (fewer key rows staged per query) were slower (one block per SM)
#define TC_WARPS 16

struct tc_layout {
    int R, RP, lds, ldp; // staged rows, padded to 16; float and half strides of the TQ × RP matrices
    size_t off_a, off_b, off_c, off_s, off_p, bytes;
};

static __host__ __device__ size_t align32(size_t x) { return (x + 31) / 32 * 32; }

// Shared memory: A, B, C [RP × LDH] half (A also holds a TQ × ldp half matrix
// on the key side), S [TQ × lds] float, P [TQ × ldp] half.
static __host__ __device__ tc_layout tc_make(int W)
{
    tc_layout L;
    L.R = TQ + W - 1;
    L.RP = (L.R + 15) / 16 * 16;
    L.lds = (L.RP > 2 * HD ? L.RP : 2 * HD) + 4; /* the key side keeps dK and dV side by side */
    L.ldp = L.RP + 8;
    size_t o = 0;
    L.off_a = o; o = align32(o + (size_t)L.RP * LDH * 2);
    L.off_b = o; o = align32(o + (size_t)L.RP * LDH * 2);
    L.off_c = o; o = align32(o + (size_t)L.RP * LDH * 2);
    L.off_s = o; o = align32(o + (size_t)TQ * L.lds * 4);
    L.off_p = o; o = align32(o + (size_t)TQ * L.ldp * 2);
    L.bytes = o;
    return L;
}

// rows [base, base+rows) of a [B,T,·] tensor's head-j columns (col0 + j·HD) into FP16, zeros outside [0,T).
// 16-byte loads, STAGE_BATCH of them in flight per thread before any store: a
// load-convert-store loop would wait one memory latency per element (the
// compiler cannot move a global load above a store through a generic pointer).
#define STAGE_BATCH 8
__device__ __forceinline__ void stage_rows(__half *dst, const float *__restrict__ src, int row_stride, int col0, int b,
                                           int base, int rows, int rows_padded, int T)
{
    constexpr int VPR = HD / 4; // float4 per row
    const int nvec = rows_padded * VPR;
    for (int i0 = threadIdx.x; i0 < nvec; i0 += blockDim.x * STAGE_BATCH) {
        float4 v[STAGE_BATCH];
#pragma unroll
        for (int u = 0; u < STAGE_BATCH; u++) {
            const int i = i0 + u * blockDim.x, r = i / VPR, t = base + r;
            const bool ok = i < nvec && r < rows && t >= 0 && t < T;
            v[u] = ok ? __ldg((const float4 *)(src + ((size_t)b * T + t) * row_stride + col0 + (i % VPR) * 4))
                      : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
        for (int u = 0; u < STAGE_BATCH; u++) {
            const int i = i0 + u * blockDim.x;
            if (i >= nvec) break;
            __half2 *d = (__half2 *)(dst + (i / VPR) * LDH + (i % VPR) * 4);
            d[0] = __floats2half2_rn(v[u].x, v[u].y);
            d[1] = __floats2half2_rn(v[u].z, v[u].w);
        }
    }
}

// C[m×n] (float, ldc) = A[m×k] · B[k×n] on tensor cores; A row-major (lda),
// B row-major (ldb) or, with b_col, given as Bᵀ row-major (element (k,n) at B[n·ldb + k]).
template <bool b_col>
__device__ __forceinline__ void tc_gemm(float *C, int ldc, const __half *A, int lda, const __half *Bm, int ldb, int m,
                                        int n, int k)
{
    const int warp = threadIdx.x / 32, tm = m / 16, tn = n / 16;
    for (int job = warp; job < tm * tn; job += TC_WARPS) {
        const int mi = job % tm, ni = job / tm;
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::fill_fragment(acc, 0.f);
        for (int kk = 0; kk < k; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
            wmma::load_matrix_sync(a, A + (size_t)mi * 16 * lda + kk, lda);
            if (b_col) {
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> bf;
                wmma::load_matrix_sync(bf, Bm + (size_t)ni * 16 * ldb + kk, ldb);
                wmma::mma_sync(acc, a, bf, acc);
            } else {
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> bf;
                wmma::load_matrix_sync(bf, Bm + (size_t)kk * ldb + ni * 16, ldb);
                wmma::mma_sync(acc, a, bf, acc);
            }
        }
        wmma::store_matrix_sync(C + (size_t)mi * 16 * ldc + ni * 16, acc, ldc, wmma::mem_row_major);
    }
}

__global__ void __launch_bounds__(TC_WARPS * 32)
    attention_forward_tc(float *o32, __half *o16, float *p, const float *qkv, int B, int T, int D, int H, int W)
{
    extern __shared__ __align__(32) unsigned char sm[];
    const tc_layout L = tc_make(W);
    __half *Q = (__half *)(sm + L.off_a), *K = (__half *)(sm + L.off_b), *V = (__half *)(sm + L.off_c);
    float *S = (float *)(sm + L.off_s);
    __half *P = (__half *)(sm + L.off_p);
    const int t0 = blockIdx.x * TQ, j = blockIdx.y, b = blockIdx.z, base = t0 - W + 1;
    stage_rows(Q, qkv, 3 * D, j * HD, b, t0, TQ, TQ, T);
    stage_rows(K, qkv, 3 * D, D + j * HD, b, base, L.R, L.RP, T);
    stage_rows(V, qkv, 3 * D, 2 * D + j * HD, b, base, L.R, L.RP, T);
    for (int i = threadIdx.x; i < TQ * L.ldp; i += blockDim.x) P[i] = __float2half(0.f);
    __syncthreads();
    tc_gemm<true>(S, L.lds, Q, LDH, K, LDH, TQ, L.RP, HD); // S[q][r] = q·k of staged row r
    __syncthreads();
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const float sc = rsqrtf((float)HD);
    for (int qi = warp; qi < TQ; qi += TC_WARPS) { // query qi sees staged rows qi .. qi+W-1
        const int t = t0 + qi;
        if (t >= T) continue;
        float mx = -INFINITY;
        for (int w = lane; w < W; w += 32)
            if (t - W + 1 + w >= 0) mx = fmaxf(mx, S[qi * L.lds + qi + w] * sc);
        mx = warp_max(mx);
        float sum = 0.f;
        for (int w = lane; w < W; w += 32)
            if (t - W + 1 + w >= 0) sum += __expf(S[qi * L.lds + qi + w] * sc - mx);
        const float inv = 1.f / warp_sum(sum);
        float *pr = p + (((size_t)b * H + j) * T + t) * W;
        for (int w = lane; w < W; w += 32) {
            const float pv = t - W + 1 + w >= 0 ? __expf(S[qi * L.lds + qi + w] * sc - mx) * inv : 0.f;
            pr[w] = pv;
            P[qi * L.ldp + qi + w] = __float2half_rn(pv);
        }
    }
    __syncthreads();
    tc_gemm<false>(S, L.lds, P, L.ldp, V, LDH, TQ, HD, L.RP); // O[q][c], reusing S
    __syncthreads();
    for (int i = threadIdx.x; i < TQ * HD; i += blockDim.x) {
        const int qi = i / HD, c = i % HD, t = t0 + qi;
        if (t >= T) continue;
        const size_t oi = ((size_t)b * T + t) * D + j * HD + c;
        if (o32) o32[oi] = S[qi * L.lds + c];
        if (o16) o16[oi] = __float2half_rn(S[qi * L.lds + c]);
    }
}

__global__ void __launch_bounds__(TC_WARPS * 32)
    attention_backward_query_tc(float *dqkv, float *ds, const float *dout, const float *p, const float *qkv, int B,
                                int T, int D, int H, int W)
{
    extern __shared__ __align__(32) unsigned char sm[];
    const tc_layout L = tc_make(W);
    __half *dO = (__half *)(sm + L.off_a), *K = (__half *)(sm + L.off_b), *V = (__half *)(sm + L.off_c);
    float *S = (float *)(sm + L.off_s);
    __half *dS = (__half *)(sm + L.off_p);
    const int t0 = blockIdx.x * TQ, j = blockIdx.y, b = blockIdx.z, base = t0 - W + 1;
    stage_rows(dO, dout, D, j * HD, b, t0, TQ, TQ, T);
    stage_rows(K, qkv, 3 * D, D + j * HD, b, base, L.R, L.RP, T);
    stage_rows(V, qkv, 3 * D, 2 * D + j * HD, b, base, L.R, L.RP, T);
    for (int i = threadIdx.x; i < TQ * L.ldp; i += blockDim.x) dS[i] = __float2half(0.f);
    __syncthreads();
    tc_gemm<true>(S, L.lds, dO, LDH, V, LDH, TQ, L.RP, HD); // dP[q][r] = dO·v
    __syncthreads();
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const float sc = rsqrtf((float)HD);
    for (int qi = warp; qi < TQ; qi += TC_WARPS) {
        const int t = t0 + qi;
        if (t >= T) continue;
        const size_t prow = (((size_t)b * H + j) * T + t) * W;
        float pdp = 0.f;
        for (int w = lane; w < W; w += 32) pdp += p[prow + w] * S[qi * L.lds + qi + w];
        pdp = warp_sum(pdp);
        for (int w = lane; w < W; w += 32) {
            const float v = p[prow + w] * (S[qi * L.lds + qi + w] - pdp) * sc; // p = 0 outside the window
            ds[prow + w] = v;
            dS[qi * L.ldp + qi + w] = __float2half_rn(v);
        }
    }
    __syncthreads();
    tc_gemm<false>(S, L.lds, dS, L.ldp, K, LDH, TQ, HD, L.RP); // dQ[q][c]
    __syncthreads();
    for (int i = threadIdx.x; i < TQ * HD; i += blockDim.x) {
        const int qi = i / HD, c = i % HD, t = t0 + qi;
        if (t < T) dqkv[((size_t)b * T + t) * 3 * D + j * HD + c] = S[qi * L.lds + c];
    }
}

// Key tile k0 .. k0+TQ-1: the queries that see it are t ∈ [k0, k0+R-1]
// (staged row r = t − k0); key ki meets query row r through slot w = ki − r + W − 1.
__global__ void __launch_bounds__(TC_WARPS * 32)
    attention_backward_key_tc(float *dqkv, const float *ds, const float *dout, const float *p, const float *qkv, int B,
                              int T, int D, int H, int W)
{
    extern __shared__ __align__(32) unsigned char sm[];
    const tc_layout L = tc_make(W);
    __half *Q = (__half *)(sm + L.off_b), *dO = (__half *)(sm + L.off_c);
    float *S = (float *)(sm + L.off_s);
    __half *dSt = (__half *)(sm + L.off_p), *Pt = (__half *)(sm + L.off_a); // [TQ keys × RP queries]
    const int k0 = blockIdx.x * TQ, j = blockIdx.y, b = blockIdx.z;
    stage_rows(Q, qkv, 3 * D, j * HD, b, k0, L.R, L.RP, T);
    stage_rows(dO, dout, D, j * HD, b, k0, L.R, L.RP, T);
    const size_t qrow0 = ((size_t)b * H + j) * T;
    // consecutive threads take consecutive keys of one query row: consecutive
    // window slots w, so the reads of ds and p coalesce; batched as in stage_rows
    for (int i0 = threadIdx.x; i0 < TQ * L.RP; i0 += blockDim.x * STAGE_BATCH) {
        float vd[STAGE_BATCH], vp[STAGE_BATCH];
#pragma unroll
        for (int u = 0; u < STAGE_BATCH; u++) {
            const int i = i0 + u * blockDim.x, r = i / TQ, ki = i % TQ, t = k0 + r, w = ki - r + W - 1;
            const bool ok = i < TQ * L.RP && r < L.R && t < T && k0 + ki < T && w >= 0 && w < W;
            const size_t slot = (qrow0 + (ok ? t : 0)) * W + (ok ? w : 0);
            vd[u] = ok ? __ldg(ds + slot) : 0.f;
            vp[u] = ok ? __ldg(p + slot) : 0.f;
        }
#pragma unroll
        for (int u = 0; u < STAGE_BATCH; u++) {
            const int i = i0 + u * blockDim.x, r = i / TQ, ki = i % TQ;
            if (i >= TQ * L.RP) break;
            dSt[ki * L.ldp + r] = __float2half_rn(vd[u]);
            Pt[ki * L.ldp + r] = __float2half_rn(vp[u]);
        }
    }
    __syncthreads();
    tc_gemm<false>(S, L.lds, dSt, L.ldp, Q, LDH, TQ, HD, L.RP);       // dK[k][c] into S[:, 0:HD)
    tc_gemm<false>(S + HD, L.lds, Pt, L.ldp, dO, LDH, TQ, HD, L.RP);  // dV[k][c] into S[:, HD:2HD)
    __syncthreads();
    for (int i = threadIdx.x; i < TQ * HD; i += blockDim.x) {
        const int ki = i / HD, c = i % HD, tau = k0 + ki;
        if (tau >= T) continue;
        float *row = dqkv + ((size_t)b * T + tau) * 3 * D;
        row[D + j * HD + c] = S[ki * L.lds + c];
        row[2 * D + j * HD + c] = S[ki * L.lds + HD + c];
    }
}

extern "C" int attention_tc_supported(int D, int H, int W)
{
    if (D / H != HD || D % H) return 0;
    const tc_layout L = tc_make(W);
    int dev = 0, smax = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&smax, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    return L.bytes <= (size_t)smax;
}

extern "C" void launch_attention_forward_tc(float *o32, void *o16, float *p, const float *qkv, int B, int T, int D,
                                            int H, int W, cudaStream_t s)
{
    const tc_layout L = tc_make(W);
    cudaFuncSetAttribute(attention_forward_tc, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)L.bytes);
    attention_forward_tc<<<dim3(ceil_div(T, TQ), H, B), TC_WARPS * 32, L.bytes, s>>>(o32, (__half *)o16, p, qkv, B, T,
                                                                                   D, H, W);
    LAUNCH_CHECK();
}

extern "C" void launch_attention_backward_tc(float *dqkv, float *ds, const float *dout, const float *p,
                                             const float *qkv, int B, int T, int D, int H, int W, cudaStream_t s)
{
    const tc_layout L = tc_make(W);
    cudaFuncSetAttribute(attention_backward_query_tc, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)L.bytes);
    cudaFuncSetAttribute(attention_backward_key_tc, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)L.bytes);
    const dim3 grid(ceil_div(T, TQ), H, B);
    attention_backward_query_tc<<<grid, TC_WARPS * 32, L.bytes, s>>>(dqkv, ds, dout, p, qkv, B, T, D, H, W);
    LAUNCH_CHECK();
    attention_backward_key_tc<<<grid, TC_WARPS * 32, L.bytes, s>>>(dqkv, ds, dout, p, qkv, B, T, D, H, W);
    LAUNCH_CHECK();
}
