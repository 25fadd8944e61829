// Sliding-window attention on tensor cores for any head size up to 256 and
// any window, tiled over the window (flash-attention style): time grows with
// W, memory does not. FP16 operands, FP32 accumulation and statistics.
// attention_tc.cu keeps its band kernels where they are faster (head sizes
// 64, 128 and 256 at windows up to 129, the band held in registers); these
// serve every other size and window (attention_tc_kernel says which runs).
//
// A block owns 64 queries (or keys), 16 a warp, and walks the other side in
// tiles of KB rows through shared memory, double-buffered by cp.async so the
// next tile loads while this one is multiplied:
//   forward     S = Q·Kᵀ, band mask, online softmax (running max m and sum
//               l in FP32, base 2), O += P·V; at the end O /= l and the
//               query's log-sum-exp lse = ln-units of m + log2 l
//   query side  δ = Σ dO ⊙ O over the head (from the FP16 output the step
//               keeps), then per tile P = exp(S − lse), dP = dO·Vᵀ,
//               dS = P ⊙ (dP − δ)/√hd, dQ += dS·K
//   key side    per tile of the queries that see the warp's keys, Pᵀ and
//               dSᵀ from Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ, dV += Pᵀ·dO, dK += dSᵀ·Q;
//               above head size 128 dK and dV do not both fit in registers,
//               so two launches each make one (Sᵀ computed twice)
// A head size that is not a multiple of 16 is padded with zero columns in
// shared memory (never by the user); the padded columns add nothing to a dot
// product and are not stored. Each warp owns its outputs (no atomics), and a
// block's tiles start where they would in a whole-sequence launch, so a time
// window's launch gives the whole launch's bits.
#include "catchat/kernels.h"
#include "common.cuh"
#include "mma.cuh"

#define FL_WARPS 4
#define FL_ROWS (16 * FL_WARPS) // queries (keys) a block owns: ATTENTION_TC_BLOCK
#define FL_LOG2E 1.4426950408889634f
#define FL_LN2 0.6931471805599453f
static_assert(FL_ROWS == ATTENTION_TC_BLOCK, "a block owns one time block of the window launchers");

// ---- staging: rows of one head's columns into shared memory ----

// Where a head's columns sit: the tensor's row stride, the head's first column,
// its hd columns (hdp padded), and whether rows are 16-byte aligned (hd % 8 == 0).
struct head_cols {
    int stride, col0, hd;
    bool vec;
};

// Rows [base, base + rows) of the head's columns of a [B,T,·] FP16 tensor
// into dst (row stride ld), zeros outside [0,lim), lim ≤ T: a tile that runs
// past the rows its launch may read (its declared range: a wavefront chunk's
// later rows hold another step's values, any bits at all) stages zeros
// there, so no 0 · NaN reaches a product. Aligned heads go by cp.async
// (waited for by the caller); others element by element.
__device__ __forceinline__ void stage(__half *dst, int ld, const __half *__restrict__ src, head_cols h, int b, int base,
                                      int rows, int T, int lim)
{
    if (h.vec) {
        const int vpr = h.hd >> 3, n = rows * vpr;
        for (int i = threadIdx.x; i < n; i += blockDim.x) {
            const int r = i / vpr, c = (i - r * vpr) * 8, t = base + r;
            const bool ok = t >= 0 && t < lim;
            cp_async16(dst + r * ld + c, ok ? src + ((size_t)b * T + t) * h.stride + h.col0 + c : src, ok);
        }
    } else {
        const int n = rows * h.hd;
        for (int i = threadIdx.x; i < n; i += blockDim.x) {
            const int r = i / h.hd, c = i - r * h.hd, t = base + r;
            dst[r * ld + c] = t >= 0 && t < lim ? src[((size_t)b * T + t) * h.stride + h.col0 + c] : __float2half(0.f);
        }
    }
}

// FP32 values of the rows [base, base + rows) of a per-head vector (lse, δ), 0 outside [0,lim).
__device__ __forceinline__ void stage_vec(float *dst, const float *src, int base, int rows, int lim, float scale)
{
    for (int r = threadIdx.x; r < rows; r += blockDim.x)
        dst[r] = base + r < lim ? __ldg(src + base + r) * scale : 0.f;
}

// The zero columns [hd, hdp) of `rows` staged rows: written once, never staged over.
__device__ __forceinline__ void zero_pad(__half *buf, int ld, int rows, int hd, int hdp)
{
    const int w = hdp - hd;
    if (w <= 0) return;
    for (int i = threadIdx.x; i < rows * w; i += blockDim.x) buf[(i / w) * ld + hd + i % w] = __float2half(0.f);
}

// The tile pipeline: before tile `it` of `ntiles` is read, with two stages
// the next tile is staged into the other buffer and this one waited for;
// with one stage this tile is staged now (the prologue staged tile 0 into
// buffer 0) and waited for. stage_tile(i, buf) issues tile i's copies.
// Returns this tile's buffer; the caller's __syncthreads after its reads
// frees the buffer for the next restage.
template <int ST, typename Stage> __device__ __forceinline__ int tile_ready(int it, int ntiles, Stage stage_tile)
{
    if (ST == 2 && it + 1 < ntiles) {
        stage_tile(it + 1, (it + 1) & 1);
        cp_async_commit();
        cp_async_wait<1>();
    } else {
        if (ST == 1 && it > 0) {
            stage_tile(it, 0);
            cp_async_commit();
        }
        cp_async_wait<0>();
    }
    __syncthreads();
    return ST == 2 ? it & 1 : 0;
}

// ---- warp-level products over runtime head columns ----

// acc[2·nt + n] += A[16 rows at A] · B[rows r0 + 16nt ..]ᵀ over hdp columns (HM at most).
template <int HM, int NT>
__device__ __forceinline__ void scores(float acc[2 * NT][4], const __half *A, const __half *Bs, int ld, int hdp, int lane)
{
#pragma unroll
    for (int kk = 0; kk < HM / 16; kk++) {
        if (16 * kk >= hdp) break;
        uint4 a;
        ldsm_x4((uint32_t *)&a, A + (lane & 15) * ld + kk * 16 + (lane >> 4) * 8);
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            uint32_t b[4];
            ldsm_x4(b, Bs + (16 * nt + (lane & 7) + (lane >> 4) * 8) * ld + kk * 16 + ((lane >> 3) & 1) * 8);
            mma16816(acc[2 * nt], a, b[0], b[1]);
            mma16816(acc[2 * nt + 1], a, b[2], b[3]);
        }
    }
}

// out[HM/8][4] (16 rows × hdp columns) += P · Bs, P as FP16 A fragments over the tile's 16·NT rows of Bs.
template <int HM, int NT>
__device__ __forceinline__ void times(float out[HM / 8][4], const uint4 pa[NT], const __half *Bs, int ld, int hdp,
                                      int lane)
{
#pragma unroll
    for (int m = 0; m < HM / 16; m++) {
        if (16 * m >= hdp) break;
#pragma unroll
        for (int kt = 0; kt < NT; kt++) {
            uint32_t b[4];
            ldsm_x4_trans(b, Bs + (16 * kt + (lane & 7) + ((lane >> 3) & 1) * 8) * ld + 16 * m + (lane >> 4) * 8);
            mma16816(out[2 * m], pa[kt], b[0], b[1]);
            mma16816(out[2 * m + 1], pa[kt], b[2], b[3]);
        }
    }
}

// Rows q0 + g (+8) of a 16 × hdp accumulator, times rs[h], into columns
// col0 .. col0 + hd of [B,T,ld] FP32 and/or FP16 tensors.
template <int HM>
__device__ __forceinline__ void store_rows(float *o32, __half *o16, const float acc[HM / 8][4], const float rs[2], int b,
                                           int q0, int T, int lim, size_t ld, int col0, int hd, int lane)
{
    const int g = lane >> 2, c2 = (lane & 3) * 2;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int q = q0 + g + 8 * h;
        if (q >= lim) continue;
        const size_t row = ((size_t)b * T + q) * ld + col0;
#pragma unroll
        for (int n = 0; n < HM / 8; n++) {
            const int c = 8 * n + c2;
            if (c >= hd) break;
            const float v0 = acc[n][2 * h] * rs[h], v1 = acc[n][2 * h + 1] * rs[h];
            if (c + 1 < hd && !(hd & 1)) { // an even head keeps pairs aligned
                if (o32) *(float2 *)(o32 + row + c) = make_float2(v0, v1);
                if (o16) *(__half2 *)(o16 + row + c) = __floats2half2_rn(v0, v1);
            } else {
                if (o32) o32[row + c] = v0;
                if (o16) o16[row + c] = __float2half_rn(v0);
                if (c + 1 < hd) {
                    if (o32) o32[row + c + 1] = v1;
                    if (o16) o16[row + c + 1] = __float2half_rn(v1);
                }
            }
        }
    }
}

// Whether key k is in query q's window: q − W < k ≤ q, both in [0,T).
__device__ __forceinline__ bool in_window(int q, int k, int W, int T) { return k <= q && k > q - W && k >= 0 && q < T; }

// ---- forward ----

template <int HM, int KB>
__global__ void __launch_bounds__(FL_WARPS * 32)
    attention_forward_flash(float *o32, __half *o16, float *lse, const __half *qkv, int T, int D, int H, int W, int hd,
                            int qoff, int qlim)
{
    constexpr int LD = HM + 8, NT = KB / 16;
    extern __shared__ __align__(16) unsigned char sm[];
    __half *Qs = (__half *)sm, *Ks = Qs + FL_ROWS * LD, *Vs = Ks + 2 * KB * LD;
    const int t0 = qoff + blockIdx.x * FL_ROWS, j = blockIdx.y, b = blockIdx.z, hdp = (hd + 15) & ~15;
    const bool vec = (hd & 7) == 0;
    const head_cols hq = { 3 * D, j * hd, hd, vec }, hk = { 3 * D, D + j * hd, hd, vec }, hv = { 3 * D, 2 * D + j * hd, hd, vec };
    zero_pad(Qs, LD, FL_ROWS + 4 * KB, hd, hdp);
    // the launch's queries are [qoff, qlim); the block's see keys [kfirst, kend)
    const int kfirst = max(0, t0 - W + 1), kend = min(qlim, t0 + FL_ROWS), ntiles = (kend - kfirst + KB - 1) / KB;
    auto stage_kv = [&](int i, int buf) {
        stage(Ks + buf * KB * LD, LD, qkv, hk, b, kfirst + i * KB, KB, T, kend);
        stage(Vs + buf * KB * LD, LD, qkv, hv, b, kfirst + i * KB, KB, T, kend);
    };
    stage(Qs, LD, qkv, hq, b, t0, FL_ROWS, T, qlim);
    stage_kv(0, 0);
    cp_async_commit();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c2 = (lane & 3) * 2;
    const int q0 = t0 + 16 * warp;
    const float sc = rsqrtf((float)hd) * FL_LOG2E;
    float o[HM / 8][4], m[2] = { -INFINITY, -INFINITY }, l[2] = { 0.f, 0.f };
#pragma unroll
    for (int n = 0; n < HM / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    for (int it = 0; it < ntiles; it++) {
        const int kb = kfirst + it * KB, buf = tile_ready<2>(it, ntiles, stage_kv);
        if (q0 < qlim && kb <= q0 + 15 && kb + KB > q0 - W + 1) {
            const __half *Kt = Ks + buf * KB * LD, *Vt = Vs + buf * KB * LD;
            float s[2 * NT][4];
#pragma unroll
            for (int n = 0; n < 2 * NT; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
            scores<HM, NT>(s, Qs + 16 * warp * LD, Kt, LD, hdp, lane);
            const bool full = kb >= q0 + 16 - W && kb + KB <= q0 + 1 && kb + KB <= kend;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int q = q0 + g + 8 * h;
                float mx = -INFINITY;
#pragma unroll
                for (int n = 0; n < 2 * NT; n++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        float &v = s[n][2 * h + e];
                        v = full || in_window(q, kb + 8 * n + c2 + e, W, qlim) ? v * sc : -INFINITY;
                        mx = fmaxf(mx, v);
                    }
                const float mn = fmaxf(m[h], quad_max(mx));
                const float base = mn == -INFINITY ? 0.f : mn; // a row with nothing seen yet keeps 0s
                const float corr = exp2f(m[h] - base);
                float sum = 0.f;
#pragma unroll
                for (int n = 0; n < 2 * NT; n++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        float &v = s[n][2 * h + e];
                        v = exp2f(v - base);
                        sum += v;
                    }
                l[h] = l[h] * corr + sum;
                m[h] = mn;
#pragma unroll
                for (int n = 0; n < HM / 8; n++) o[n][2 * h] *= corr, o[n][2 * h + 1] *= corr;
            }
            uint4 pa[NT];
#pragma unroll
            for (int kt = 0; kt < NT; kt++) pa[kt] = tile_afrag(&s[2 * kt]);
            times<HM, NT>(o, pa, Vt, LD, hdp, lane);
        }
        __syncthreads(); // the next iteration stages into the buffer just read
    }
    if (q0 >= qlim) return;
    const size_t head = ((size_t)b * H + j) * T;
    float inv[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const float lt = quad_sum(l[h]); // > 0: the query sees itself
        inv[h] = 1.f / lt;
        const int q = q0 + g + 8 * h;
        if (q < qlim && (lane & 3) == 0) lse[head + q] = (m[h] + __log2f(lt)) * FL_LN2;
    }
    store_rows<HM>(o32, o16, o, inv, b, q0, T, qlim, D, j * hd, hd, lane);
}

// p[B,H,T,W] of the queries [q0, q1) from q, k and the forward's lse, for
// checking only (the step never asks): one thread a (query, window slot),
// the dot product in FP32.
__global__ void attention_probs_flash(float *p, const float *lse, const __half *qkv, int T, int D, int H, int W, int hd,
                                      int q0, int q1)
{
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, n = (size_t)q1 - q0;
    if (i >= (size_t)H * n * W) return;
    const int w = (int)(i % W), q = q0 + (int)(i / W % n), j = (int)(i / W / n), b = blockIdx.y, k = q - W + 1 + w;
    const size_t head = ((size_t)b * H + j) * T, out = (head + q) * W + w;
    if (k < 0) {
        p[out] = 0.f;
        return;
    }
    const __half *qr = qkv + ((size_t)b * T + q) * 3 * D + j * hd, *kr = qkv + ((size_t)b * T + k) * 3 * D + D + j * hd;
    float dot = 0.f;
    for (int c = 0; c < hd; c++) dot += __half2float(qr[c]) * __half2float(kr[c]);
    p[out] = __expf(dot * rsqrtf((float)hd) - lse[head + q]);
}

// ---- backward, query side ----

template <int HM, int KB, int ST>
__global__ void __launch_bounds__(FL_WARPS * 32)
    attention_backward_query_flash(float *dqkv, __half *dqkv16, float *delta, const __half *dout, const __half *o16,
                                   const float *lse, const __half *qkv, int T, int D, int H, int W, int hd, int qoff,
                                   int qlim)
{
    constexpr int LD = HM + 8, NT = KB / 16;
    extern __shared__ __align__(16) unsigned char sm[];
    __half *Qs = (__half *)sm, *dOs = Qs + FL_ROWS * LD, *Ks = dOs + FL_ROWS * LD, *Vs = Ks + ST * KB * LD;
    float *del_s = (float *)(Vs + ST * KB * LD);
    const int t0 = qoff + blockIdx.x * FL_ROWS, j = blockIdx.y, b = blockIdx.z, hdp = (hd + 15) & ~15;
    const bool vec = (hd & 7) == 0;
    const head_cols hq = { 3 * D, j * hd, hd, vec }, hk = { 3 * D, D + j * hd, hd, vec }, hv = { 3 * D, 2 * D + j * hd, hd, vec };
    const head_cols ho = { D, j * hd, hd, vec };
    const size_t head = ((size_t)b * H + j) * T;
    zero_pad(Qs, LD, 2 * FL_ROWS + 2 * ST * KB, hd, hdp);
    const int kfirst = max(0, t0 - W + 1), kend = min(qlim, t0 + FL_ROWS), ntiles = (kend - kfirst + KB - 1) / KB;
    stage(Qs, LD, qkv, hq, b, t0, FL_ROWS, T, qlim);
    stage(dOs, LD, dout, ho, b, t0, FL_ROWS, T, qlim);
    auto stage_kv = [&](int i, int buf) {
        stage(Ks + buf * KB * LD, LD, qkv, hk, b, kfirst + i * KB, KB, T, kend);
        stage(Vs + buf * KB * LD, LD, qkv, hv, b, kfirst + i * KB, KB, T, kend);
    };
    stage_kv(0, 0);
    cp_async_commit();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c2 = (lane & 3) * 2;
    // δ = Σ dO ⊙ O a query, in FP32 from the FP16 values, one warp a row
    for (int r = warp; r < FL_ROWS; r += FL_WARPS) {
        const int q = t0 + r;
        float acc = 0.f;
        if (q < qlim)
            for (int c = lane; c < hd; c += 32) {
                const size_t at = ((size_t)b * T + q) * D + j * hd + c;
                acc += __half2float(dout[at]) * __half2float(o16[at]);
            }
        acc = warp_sum(acc);
        if (lane == 0) {
            del_s[r] = acc;
            if (q < qlim) delta[head + q] = acc;
        }
    }
    const int q0 = t0 + 16 * warp;
    const float sc2 = rsqrtf((float)hd) * FL_LOG2E, sc = rsqrtf((float)hd);
    float lq[2], dl[2], dq[HM / 8][4];
#pragma unroll
    for (int n = 0; n < HM / 8; n++) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.f;
    __syncthreads(); // del_s
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int q = q0 + g + 8 * h;
        lq[h] = q < qlim ? __ldg(lse + head + q) * FL_LOG2E : 0.f;
        dl[h] = del_s[16 * warp + g + 8 * h];
    }
    for (int it = 0; it < ntiles; it++) {
        const int kb = kfirst + it * KB, buf = tile_ready<ST>(it, ntiles, stage_kv);
        if (q0 < qlim && kb <= q0 + 15 && kb + KB > q0 - W + 1) {
            const __half *Kt = Ks + buf * KB * LD, *Vt = Vs + buf * KB * LD;
            float s[2 * NT][4], dp[2 * NT][4];
#pragma unroll
            for (int n = 0; n < 2 * NT; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.f;
            scores<HM, NT>(s, Qs + 16 * warp * LD, Kt, LD, hdp, lane);
            scores<HM, NT>(dp, dOs + 16 * warp * LD, Vt, LD, hdp, lane);
            const bool full = kb >= q0 + 16 - W && kb + KB <= q0 + 1 && kb + KB <= kend;
#pragma unroll
            for (int n = 0; n < 2 * NT; n++)
#pragma unroll
                for (int h = 0; h < 2; h++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        const int q = q0 + g + 8 * h;
                        const bool ok = full || in_window(q, kb + 8 * n + c2 + e, W, qlim);
                        const float pv = ok ? exp2f(s[n][2 * h + e] * sc2 - lq[h]) : 0.f;
                        dp[n][2 * h + e] = pv * (dp[n][2 * h + e] - dl[h]) * sc;
                    }
            uint4 da[NT];
#pragma unroll
            for (int kt = 0; kt < NT; kt++) da[kt] = tile_afrag(&dp[2 * kt]);
            times<HM, NT>(dq, da, Kt, LD, hdp, lane);
        }
        __syncthreads();
    }
    if (q0 >= qlim) return;
    const float one[2] = { 1.f, 1.f };
    store_rows<HM>(dqkv, dqkv16, dq, one, b, q0, T, qlim, (size_t)3 * D, j * hd, hd, lane);
}

// ---- backward, key side ----
// MODE 0: dK and dV; 1: dV only; 2: dK only (head sizes over 128).

template <int HM, int KB, int ST, int MODE>
__global__ void __launch_bounds__(FL_WARPS * 32)
    attention_backward_key_flash(float *dqkv, __half *dqkv16, const float *delta, const __half *dout, const float *lse,
                                 const __half *qkv, int T, int D, int H, int W, int hd, int qoff, int qlim)
{
    constexpr int LD = HM + 8, NT = KB / 16;
    constexpr bool DV = MODE != 2, DK = MODE != 1;
    extern __shared__ __align__(16) unsigned char sm[];
    __half *Ks = (__half *)sm, *Vs = Ks + FL_ROWS * LD, *Qt = Vs + FL_ROWS * LD, *dOt = Qt + ST * KB * LD;
    float *lse_s = (float *)(dOt + ST * KB * LD), *del_s = lse_s + ST * KB;
    const int kb0 = qoff + blockIdx.x * FL_ROWS, j = blockIdx.y, b = blockIdx.z, hdp = (hd + 15) & ~15;
    const bool vec = (hd & 7) == 0;
    const head_cols hq = { 3 * D, j * hd, hd, vec }, hk = { 3 * D, D + j * hd, hd, vec }, hv = { 3 * D, 2 * D + j * hd, hd, vec };
    const head_cols ho = { D, j * hd, hd, vec };
    const size_t head = ((size_t)b * H + j) * T;
    zero_pad(Ks, LD, 2 * FL_ROWS + 2 * ST * KB, hd, hdp);
    // the launch's keys are [qoff, qlim); the block's, [kb0, kend), are seen by the queries
    // [kb0, kend + W − 1) ∩ [0,T) (the op declares the same: ops_top_gpu.c, query_last)
    const int kend = min(qlim, kb0 + FL_ROWS), qend = min(T, kend + W - 1), ntiles = (qend - kb0 + KB - 1) / KB;
    stage(Ks, LD, qkv, hk, b, kb0, FL_ROWS, T, kend);
    if (DK) stage(Vs, LD, qkv, hv, b, kb0, FL_ROWS, T, kend);
    auto stage_q = [&](int i, int buf) { // the queries' q, dO, lse (base 2) and δ
        const int qb = kb0 + i * KB;
        stage(Qt + buf * KB * LD, LD, qkv, hq, b, qb, KB, T, qend);
        stage(dOt + buf * KB * LD, LD, dout, ho, b, qb, KB, T, qend);
        stage_vec(lse_s + buf * KB, lse + head, qb, KB, qend, FL_LOG2E);
        if (DK) stage_vec(del_s + buf * KB, delta + head, qb, KB, qend, 1.f);
    };
    stage_q(0, 0);
    cp_async_commit();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c2 = (lane & 3) * 2;
    const int k0 = kb0 + 16 * warp;
    const float sc2 = rsqrtf((float)hd) * FL_LOG2E, sc = rsqrtf((float)hd);
    float dk[DK ? HM / 8 : 1][4], dv[DV ? HM / 8 : 1][4];
#pragma unroll
    for (int n = 0; n < (DK ? HM / 8 : 1); n++) dk[n][0] = dk[n][1] = dk[n][2] = dk[n][3] = 0.f;
#pragma unroll
    for (int n = 0; n < (DV ? HM / 8 : 1); n++) dv[n][0] = dv[n][1] = dv[n][2] = dv[n][3] = 0.f;
    for (int it = 0; it < ntiles; it++) {
        const int qb = kb0 + it * KB, buf = tile_ready<ST>(it, ntiles, stage_q);
        // the warp's keys k0 .. k0+15 are seen by queries k0 .. k0 + 15 + W − 1
        if (k0 < kend && qb <= k0 + 15 + W - 1 && qb + KB > k0) {
            const __half *Qb = Qt + buf * KB * LD, *dOb = dOt + buf * KB * LD;
            const float *ls = lse_s + buf * KB, *ds_ = del_s + buf * KB;
            float s[2 * NT][4], dp[DK ? 2 * NT : 1][4];
#pragma unroll
            for (int n = 0; n < 2 * NT; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
            scores<HM, NT>(s, Ks + 16 * warp * LD, Qb, LD, hdp, lane);
            if (DK) {
#pragma unroll
                for (int n = 0; n < 2 * NT; n++) dp[n][0] = dp[n][1] = dp[n][2] = dp[n][3] = 0.f;
                scores<HM, NT>(dp, Vs + 16 * warp * LD, dOb, LD, hdp, lane);
            }
            // every (key, query) pair of the tile in the window: q ≥ k + 15, q ≤ k + W − 1 for all 16 keys
            const bool full = qb >= k0 + 15 && qb + KB - 1 <= k0 + W - 1 && qb + KB <= qend && k0 + 16 <= kend;
#pragma unroll
            for (int n = 0; n < 2 * NT; n++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int col = 8 * n + c2 + e, q = qb + col;
                    const float lq = ls[col];
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const int k = k0 + g + 8 * h;
                        const bool ok = full || (in_window(q, k, W, qend) && k < kend);
                        const float pv = ok ? exp2f(s[n][2 * h + e] * sc2 - lq) : 0.f;
                        s[n][2 * h + e] = pv;
                        if (DK) dp[n][2 * h + e] = pv * (dp[n][2 * h + e] - ds_[col]) * sc;
                    }
                }
            if (DV) {
                uint4 pa[NT];
#pragma unroll
                for (int kt = 0; kt < NT; kt++) pa[kt] = tile_afrag(&s[2 * kt]);
                times<HM, NT>(dv, pa, dOb, LD, hdp, lane);
            }
            if (DK) {
                uint4 da[NT];
#pragma unroll
                for (int kt = 0; kt < NT; kt++) da[kt] = tile_afrag(&dp[2 * kt]);
                times<HM, NT>(dk, da, Qb, LD, hdp, lane);
            }
        }
        __syncthreads();
    }
    if (k0 >= kend) return;
    const float one[2] = { 1.f, 1.f };
    if (DK) store_rows<HM>(dqkv, dqkv16, dk, one, b, k0, T, kend, (size_t)3 * D, D + j * hd, hd, lane);
    if (DV) store_rows<HM>(dqkv, dqkv16, dv, one, b, k0, T, kend, (size_t)3 * D, 2 * D + j * hd, hd, lane);
}

// ---- launchers ----

template <typename Kernel, typename... Args>
static void launch_rows(Kernel k, size_t smem, int B, int q0, int q1, int H, cudaStream_t s, Args... args)
{
    cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    k<<<dim3(ceil_div(q1 - q0, FL_ROWS), H, B), FL_WARPS * 32, smem, s>>>(args..., q0, q1);
    LAUNCH_CHECK();
}

// Tile rows and stages of each head-size class (HM: the head padded to its
// class): shared memory stays under 96 KB a block in every class, so every
// sm_80+ part runs them all, the 99 KB ones too.
template <int HM, int KBF, int KBB, int ST> struct flash_class {
    static constexpr size_t smem_forward() { return (size_t)(FL_ROWS + 4 * KBF) * (HM + 8) * 2; }
    static constexpr size_t smem_backward()
    {
        return (size_t)(2 * FL_ROWS + 2 * ST * KBB) * (HM + 8) * 2 +
               (FL_ROWS > 2 * ST * KBB ? FL_ROWS : 2 * ST * KBB) * 4; // δ (query side) or lse and δ (key side)
    }
    static_assert(smem_forward() <= 96 * 1024 && smem_backward() <= 96 * 1024, "a class must fit 99 KB parts");
    static void smem(size_t *bytes) { *bytes = smem_forward() > smem_backward() ? smem_forward() : smem_backward(); }
    static void forward(float *o32, __half *o16, float *lse, const __half *qkv, int B, int T, int D, int H, int W, int q0,
                        int q1, cudaStream_t s)
    {
        launch_rows(attention_forward_flash<HM, KBF>, smem_forward(), B, q0, q1, H, s, o32, o16, lse, qkv, T, D, H, W,
                    D / H);
    }
    static void backward(float *dqkv, __half *dqkv16, float *delta, const __half *dout, const __half *o16,
                         const float *lse, const __half *qkv, int B, int T, int D, int H, int W, int q0, int q1,
                         cudaStream_t s)
    {
        const size_t sm = smem_backward();
        launch_rows(attention_backward_query_flash<HM, KBB, ST>, sm, B, q0, q1, H, s, dqkv, dqkv16, delta, dout, o16,
                    lse, qkv, T, D, H, W, D / H);
        if constexpr (HM <= 128) {
            launch_rows(attention_backward_key_flash<HM, KBB, ST, 0>, sm, B, q0, q1, H, s, dqkv, dqkv16,
                        (const float *)delta, dout, lse, qkv, T, D, H, W, D / H);
        } else { // dK and dV would not both fit in registers
            launch_rows(attention_backward_key_flash<HM, KBB, ST, 1>, sm, B, q0, q1, H, s, dqkv, dqkv16,
                        (const float *)delta, dout, lse, qkv, T, D, H, W, D / H);
            launch_rows(attention_backward_key_flash<HM, KBB, ST, 2>, sm, B, q0, q1, H, s, dqkv, dqkv16,
                        (const float *)delta, dout, lse, qkv, T, D, H, W, D / H);
        }
    }
};

// One class per range of head sizes (the tile rows: products of 16 rows ×
// the head's columns; fewer rows at wider heads, as the registers allow).
#define FLASH_DISPATCH(hd, call)                                                                                   \
    do {                                                                                                           \
        if ((hd) <= 32) flash_class<32, 64, 64, 2>::call;                                                          \
        else if ((hd) <= 64) flash_class<64, 64, 64, 2>::call;                                                     \
        else if ((hd) <= 128) flash_class<128, 32, 32, 2>::call;                                                   \
        else if ((hd) <= 192) flash_class<192, 32, 16, 2>::call;                                                   \
        else flash_class<256, 16, 16, 1>::call;                                                                    \
    } while (0)

extern "C" int attention_flash_supported(const gpu_caps *caps, int D, int H)
{
    if (H < 1 || D % H || D / H > 256) return 0;
    size_t need = 0;
    FLASH_DISPATCH(D / H, smem(&need));
    return need <= (size_t)caps->smem_per_block_optin;
}

static void check_head(int D, int H)
{
    if (H < 1 || D % H || D / H > 256) {
        fprintf(stderr, "catchat: attention_flash: head size %d/%d is not one of 1..256\n", D, H);
        exit(1);
    }
}

extern "C" void launch_attention_forward_flash_window(float *o32, void *o16, float *p, float *lse, const void *qkv16,
                                                      int B, int T, int D, int H, int W, int q0, int q1,
                                                      cudaStream_t s)
{
    check_head(D, H);
    FLASH_DISPATCH(D / H, forward(o32, (__half *)o16, lse, (const __half *)qkv16, B, T, D, H, W, q0, q1, s));
    if (p) { // checking only: the window's queries' probabilities, from the lse just written
        const size_t n = (size_t)H * (q1 - q0) * W;
        attention_probs_flash<<<dim3(ceil_div(n, 256), B), 256, 0, s>>>(p, lse, (const __half *)qkv16, T, D, H, W,
                                                                      D / H, q0, q1);
        LAUNCH_CHECK();
    }
}

extern "C" void launch_attention_backward_flash_window(float *dqkv, void *dqkv16, float *delta, const void *dout16,
                                                       const void *o16, const float *lse, const void *qkv16, int B,
                                                       int T, int D, int H, int W, int q0, int q1, cudaStream_t s)
{
    check_head(D, H);
    FLASH_DISPATCH(D / H, backward(dqkv, (__half *)dqkv16, delta, (const __half *)dout16, (const __half *)o16, lse,
                                   (const __half *)qkv16, B, T, D, H, W, q0, q1, s));
}
