// Causal sliding-window attention of the context stream. Query t of head j
// reads positions τ ∈ [max(0, t−W+1), t]; probabilities are stored per query in
// W slots (slot w ↔ τ = t−W+1+w, slots before position 0 hold 0).
// Forward and the query-side backward run one warp per (sequence, head, query);
// the key/value-side backward runs one warp per (sequence, head, key) and walks
// the W queries that read that key, so no gradient needs an atomic add.
// The tiled kernels give a block QT consecutive queries (or keys) of one head
// and stage the rows they share (K and V, or Q and dO) in shared memory once,
// padded by one float per row so lanes reading different rows hit different
// banks; the untiled kernels below them serve head sizes whose tile does not fit.
// Head size 64 (the default config) with W ≤ 129 runs the tensor-core
// kernels of attention_tc.cu instead (FP16 operands, FP32 accumulation); the
// callers pick by attention_tc_supported.
#include "catchat/kernels.h"
#include "common.cuh"

#define WARPS 4

// One query's row of the band (slot w is position t−W+1+w): row[w] = the
// softmax of score(w) over the slots at positions ≥ 0, and 0 before the
// sequence start. One warp; the caller syncs the warp before reading row.
template <typename Score> __device__ __forceinline__ void warp_band_softmax(float *row, int W, int t, Score score)
{
    const int lane = threadIdx.x & 31;
    float mx = -INFINITY;
    for (int w = lane; w < W; w += 32) {
        const float sv = t - W + 1 + w >= 0 ? score(w) : -INFINITY;
        row[w] = sv;
        mx = fmaxf(mx, sv);
    }
    mx = warp_max(mx);
    float sum = 0.f;
    for (int w = lane; w < W; w += 32) {
        const float e = t - W + 1 + w >= 0 ? __expf(row[w] - mx) : 0.f;
        row[w] = e;
        sum += e;
    }
    const float inv = 1.f / warp_sum(sum);
    for (int w = lane; w < W; w += 32) row[w] *= inv;
}

__global__ void attention_forward_kernel(float *o32, __half *o16, float *p, const float *qkv, int B, int T, int D,
                                         int H, int W)
{
    const int warp = blockIdx.x * WARPS + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (warp >= B * H * T) return;
    const int t = warp % T, j = (warp / T) % H, b = warp / (T * H);
    const int hd = D / H;
    const float sc = rsqrtf((float)hd);
    const float *q = qkv + ((size_t)b * T + t) * 3 * D + j * hd;
    float *pr = p + (size_t)warp * W; // warp index = ((b·H + j)·T + t)
    warp_band_softmax(pr, W, t, [&](int w) {
        const float *k = qkv + ((size_t)b * T + (t - W + 1 + w)) * 3 * D + D + j * hd;
        float acc = 0.f;
        for (int i = 0; i < hd; i++) acc += q[i] * k[i];
        return acc * sc;
    });
    __syncwarp();
    const int w0 = t - W + 1 >= 0 ? 0 : W - 1 - t;
    for (int i = lane; i < hd; i += 32) {
        float acc = 0.f;
        for (int w = w0; w < W; w++) {
            const float *v = qkv + ((size_t)b * T + (t - W + 1 + w)) * 3 * D + 2 * D + j * hd;
            acc += pr[w] * v[i];
        }
        const size_t oi = ((size_t)b * T + t) * D + j * hd + i;
        if (o32) o32[oi] = acc;
        if (o16) o16[oi] = __float2half_rn(acc);
    }
}

// Query side: ds = p ⊙ (dp − Σ p·dp) / sqrt(hd) into the ds buffer; dq = Σ ds k.
__global__ void attention_backward_query_kernel(float *dqkv, float *ds, const float *dout, const float *p,
                                                const float *qkv, int B, int T, int D, int H, int W)
{
    const int warp = blockIdx.x * WARPS + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (warp >= B * H * T) return;
    const int t = warp % T, j = (warp / T) % H, b = warp / (T * H);
    const int hd = D / H;
    const float sc = rsqrtf((float)hd);
    const float *dyo = dout + ((size_t)b * T + t) * D + j * hd;
    const float *pr = p + (size_t)warp * W;
    float *dsr = ds + (size_t)warp * W;
    float pdp = 0.f;
    for (int w = lane; w < W; w += 32) {
        const int tau = t - W + 1 + w;
        float dp = 0.f;
        if (tau >= 0) {
            const float *v = qkv + ((size_t)b * T + tau) * 3 * D + 2 * D + j * hd;
            for (int i = 0; i < hd; i++) dp += dyo[i] * v[i];
        }
        dsr[w] = dp; // dp for now
        pdp += pr[w] * dp;
    }
    pdp = warp_sum(pdp);
    for (int w = lane; w < W; w += 32) dsr[w] = pr[w] * (dsr[w] - pdp) * sc;
    __syncwarp();
    const int w0 = t - W + 1 >= 0 ? 0 : W - 1 - t;
    for (int i = lane; i < hd; i += 32) {
        float acc = 0.f;
        for (int w = w0; w < W; w++) acc += dsr[w] * qkv[((size_t)b * T + (t - W + 1 + w)) * 3 * D + D + j * hd + i];
        dqkv[((size_t)b * T + t) * 3 * D + j * hd + i] = acc;
    }
}

// Key side: for key τ, the queries t ∈ [τ, τ+W−1] read it through slot w = τ−t+W−1.
__global__ void attention_backward_key_kernel(float *dqkv, const float *ds, const float *dout, const float *p,
                                              const float *qkv, int B, int T, int D, int H, int W)
{
    const int warp = blockIdx.x * WARPS + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (warp >= B * H * T) return;
    const int tau = warp % T, j = (warp / T) % H, b = warp / (T * H);
    const int hd = D / H;
    const int t1 = min(T - 1, tau + W - 1);
    const size_t qrow0 = ((size_t)b * H + j) * T; // query rows of this (b, j) in p / ds
    for (int i = lane; i < hd; i += 32) {
        float dk = 0.f, dv = 0.f;
        for (int t = tau; t <= t1; t++) {
            const int w = tau - t + W - 1;
            const size_t slot = (qrow0 + t) * W + w;
            dk += ds[slot] * qkv[((size_t)b * T + t) * 3 * D + j * hd + i];
            dv += p[slot] * dout[((size_t)b * T + t) * D + j * hd + i];
        }
        float *row = dqkv + ((size_t)b * T + tau) * 3 * D;
        row[D + j * hd + i] = dk;
        row[2 * D + j * hd + i] = dv;
    }
}

#define QT 32 // queries (or keys) per block in the tiled kernels

// K and V rows of positions base .. base+R-1 of head j into shared memory
// (zeros outside the sequence), row stride ld = hd + 1.
__device__ __forceinline__ void stage_kv(float *Ks, float *Vs, const float *qkv, int b, int j, int base, int R, int T,
                                         int D, int hd, int ld)
{
    for (int i = threadIdx.x; i < R * hd; i += blockDim.x) {
        const int r = i / hd, c = i % hd, tau = base + r;
        const bool ok = tau >= 0 && tau < T;
        const float *row = qkv + ((size_t)b * T + (ok ? tau : 0)) * 3 * D + j * hd + c;
        Ks[r * ld + c] = ok ? row[D] : 0.f;
        Vs[r * ld + c] = ok ? row[2 * D] : 0.f;
    }
    __syncthreads();
}

// Tiled forward: block = (query tile, head, sequence). K and V rows
// [t0−W+1, t0+QT−1] sit in shared memory; each warp takes queries in turn.
__global__ void attention_forward_tiled(float *o32, __half *o16, float *p, const float *qkv, int B, int T, int D,
                                        int H, int W)
{
    extern __shared__ float sm[];
    const int hd = D / H, ld = hd + 1, t0 = blockIdx.x * QT, j = blockIdx.y, b = blockIdx.z;
    const int R = QT + W - 1, base = t0 - W + 1; // staged rows: positions base .. base+R-1
    float *Ks = sm, *Vs = Ks + (size_t)R * ld, *qs = Vs + (size_t)R * ld; // qs: [PW][hd] per warp
    float *ps = qs + (size_t)WARPS * 2 * hd;                               // [PW][W]
    stage_kv(Ks, Vs, qkv, b, j, base, R, T, D, hd, ld);
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const float sc = rsqrtf((float)hd);
    float *q = qs + warp * 2 * hd, *pw = ps + (size_t)warp * W;
    for (int qi = warp; qi < QT; qi += WARPS) {
        const int t = t0 + qi;
        if (t >= T) break;
        for (int c = lane; c < hd; c += 32) q[c] = qkv[((size_t)b * T + t) * 3 * D + j * hd + c];
        __syncwarp();
        warp_band_softmax(pw, W, t, [&](int w) {
            const float *k = Ks + (size_t)(qi + w) * ld; // row of position t−W+1+w
            float acc = 0.f;
            for (int c = 0; c < hd; c++) acc += q[c] * k[c];
            return acc * sc;
        });
        float *pr = p + (((size_t)b * H + j) * T + t) * W;
        for (int w = lane; w < W; w += 32) pr[w] = pw[w];
        __syncwarp();
        const int w0 = t - W + 1 >= 0 ? 0 : W - 1 - t;
        for (int c = lane; c < hd; c += 32) {
            float acc = 0.f;
            for (int w = w0; w < W; w++) acc += pw[w] * Vs[(size_t)(qi + w) * ld + c];
            const size_t oi = ((size_t)b * T + t) * D + j * hd + c;
            if (o32) o32[oi] = acc;
            if (o16) o16[oi] = __float2half_rn(acc);
        }
        __syncwarp();
    }
}

// Tiled query side of the backward: ds = p ⊙ (dp − Σ p·dp)/sqrt(hd) and dq = Σ ds k.
__global__ void attention_backward_query_tiled(float *dqkv, float *ds, const float *dout, const float *p,
                                               const float *qkv, int B, int T, int D, int H, int W)
{
    extern __shared__ float sm[];
    const int hd = D / H, ld = hd + 1, t0 = blockIdx.x * QT, j = blockIdx.y, b = blockIdx.z;
    const int R = QT + W - 1, base = t0 - W + 1;
    float *Ks = sm, *Vs = Ks + (size_t)R * ld, *dos = Vs + (size_t)R * ld; // dos: [PW][hd]
    float *dsw = dos + (size_t)WARPS * 2 * hd;                              // [PW][W]
    stage_kv(Ks, Vs, qkv, b, j, base, R, T, D, hd, ld);
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const float sc = rsqrtf((float)hd);
    float *dyo = dos + warp * 2 * hd, *dw = dsw + (size_t)warp * W;
    for (int qi = warp; qi < QT; qi += WARPS) {
        const int t = t0 + qi;
        if (t >= T) break;
        for (int c = lane; c < hd; c += 32) dyo[c] = dout[((size_t)b * T + t) * D + j * hd + c];
        __syncwarp();
        const size_t prow = (((size_t)b * H + j) * T + t) * W;
        float pdp = 0.f;
        for (int w = lane; w < W; w += 32) {
            float dp = 0.f;
            if (t - W + 1 + w >= 0) {
                const float *v = Vs + (size_t)(qi + w) * ld;
                for (int c = 0; c < hd; c++) dp += dyo[c] * v[c];
            }
            dw[w] = dp;
            pdp += p[prow + w] * dp;
        }
        pdp = warp_sum(pdp);
        for (int w = lane; w < W; w += 32) {
            const float v = p[prow + w] * (dw[w] - pdp) * sc;
            dw[w] = v;
            ds[prow + w] = v;
        }
        __syncwarp();
        const int w0 = t - W + 1 >= 0 ? 0 : W - 1 - t;
        for (int c = lane; c < hd; c += 32) {
            float acc = 0.f;
            for (int w = w0; w < W; w++) acc += dw[w] * Ks[(size_t)(qi + w) * ld + c];
            dqkv[((size_t)b * T + t) * 3 * D + j * hd + c] = acc;
        }
        __syncwarp();
    }
}

// Tiled key side: block = (key tile, head, sequence); Q and dO rows of the
// queries [τ0, τ0+QT+W−2] that read these keys sit in shared memory.
__global__ void attention_backward_key_tiled(float *dqkv, const float *ds, const float *dout, const float *p,
                                             const float *qkv, int B, int T, int D, int H, int W)
{
    extern __shared__ float sm[];
    const int hd = D / H, ld = hd + 1, k0 = blockIdx.x * QT, j = blockIdx.y, b = blockIdx.z;
    const int R = QT + W - 1; // query positions k0 .. k0+R-1
    float *Qs = sm, *Os = Qs + (size_t)R * ld;
    for (int i = threadIdx.x; i < R * hd; i += blockDim.x) {
        const int r = i / hd, c = i % hd, t = k0 + r;
        const bool ok = t < T;
        Qs[r * ld + c] = ok ? qkv[((size_t)b * T + t) * 3 * D + j * hd + c] : 0.f;
        Os[r * ld + c] = ok ? dout[((size_t)b * T + t) * D + j * hd + c] : 0.f;
    }
    __syncthreads();
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const size_t qrow0 = ((size_t)b * H + j) * T;
    for (int ki = warp; ki < QT; ki += WARPS) {
        const int tau = k0 + ki;
        if (tau >= T) break;
        const int n = min(T - 1, tau + W - 1) - tau + 1; // queries that read tau
        float dk[4] = { 0.f, 0.f, 0.f, 0.f }, dv[4] = { 0.f, 0.f, 0.f, 0.f }; // hd ≤ 128
        for (int c0 = 0; c0 < n; c0 += 32) {
            // lane i fetches (ds, p) of query tau+c0+i, then they are broadcast
            const int ti = tau + c0 + lane;
            float dsv = 0.f, pv = 0.f;
            if (c0 + lane < n) {
                const size_t slot = (qrow0 + ti) * W + (tau - ti + W - 1);
                dsv = ds[slot];
                pv = p[slot];
            }
            const int m = min(32, n - c0);
            for (int i = 0; i < m; i++) {
                const float a = __shfl_sync(0xffffffffu, dsv, i), pp = __shfl_sync(0xffffffffu, pv, i);
                const float *qr = Qs + (size_t)(ki + c0 + i) * ld, *orow = Os + (size_t)(ki + c0 + i) * ld;
                for (int u = 0; u < 4; u++) {
                    const int c = lane + 32 * u;
                    if (c < hd) {
                        dk[u] += a * qr[c];
                        dv[u] += pp * orow[c];
                    }
                }
            }
        }
        float *row = dqkv + ((size_t)b * T + tau) * 3 * D;
        for (int u = 0; u < 4; u++) {
            const int c = lane + 32 * u;
            if (c < hd) {
                row[D + j * hd + c] = dk[u];
                row[2 * D + j * hd + c] = dv[u];
            }
        }
    }
}

static size_t tiled_smem(int D, int H, int W)
{
    const int hd = D / H;
    return sizeof(float) * ((size_t)2 * (QT + W - 1) * (hd + 1) + (size_t)WARPS * 2 * hd + (size_t)WARPS * W);
}

// The tiled kernels need hd ≤ 128 (four columns per lane) and their tile in shared memory.
static bool use_tiled(const gpu_caps *caps, int D, int H, int W)
{
    return D / H <= 128 && tiled_smem(D, H, W) <= (size_t)caps->smem_per_block_optin;
}

extern "C" void launch_attention_forward(float *o32, void *o16, float *p, const float *qkv, int B, int T, int D,
                                         int H, int W, const gpu_caps *caps, cudaStream_t s)
{
    if (use_tiled(caps, D, H, W)) {
        const size_t smem = tiled_smem(D, H, W);
        cudaFuncSetAttribute(attention_forward_tiled, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        attention_forward_tiled<<<dim3(ceil_div(T, QT), H, B), 32 * WARPS, smem, s>>>(o32, (__half *)o16, p, qkv, B, T,
                                                                                     D, H, W);
        LAUNCH_CHECK();
        return;
    }
    attention_forward_kernel<<<ceil_div((size_t)B * H * T, WARPS), 32 * WARPS, 0, s>>>(o32, (__half *)o16, p, qkv,
                                                                                        B, T, D, H, W);
    LAUNCH_CHECK();
}

extern "C" void launch_attention_backward(float *dqkv, void *dqkv16, float *ds, const float *dout, const float *p,
                                          const float *qkv, int B, int T, int D, int H, int W, const gpu_caps *caps,
                                          cudaStream_t s)
{
    if (use_tiled(caps, D, H, W)) {
        const size_t smem = tiled_smem(D, H, W);
        cudaFuncSetAttribute(attention_backward_query_tiled, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        cudaFuncSetAttribute(attention_backward_key_tiled, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        const dim3 grid(ceil_div(T, QT), H, B);
        attention_backward_query_tiled<<<grid, 32 * WARPS, smem, s>>>(dqkv, ds, dout, p, qkv, B, T, D, H, W);
        LAUNCH_CHECK();
        attention_backward_key_tiled<<<grid, 32 * WARPS, smem, s>>>(dqkv, ds, dout, p, qkv, B, T, D, H, W);
        LAUNCH_CHECK();
        if (dqkv16) launch_f32_to_f16(dqkv16, dqkv, (size_t)B * T * 3 * D, s);
        return;
    }
    const unsigned int grid = ceil_div((size_t)B * H * T, WARPS);
    attention_backward_query_kernel<<<grid, 32 * WARPS, 0, s>>>(dqkv, ds, dout, p, qkv, B, T, D, H, W);
    LAUNCH_CHECK();
    attention_backward_key_kernel<<<grid, 32 * WARPS, 0, s>>>(dqkv, ds, dout, p, qkv, B, T, D, H, W);
    LAUNCH_CHECK();
    if (dqkv16) launch_f32_to_f16(dqkv16, dqkv, (size_t)B * T * 3 * D, s);
}
