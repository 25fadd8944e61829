// Causal sliding-window attention of the context stream. Query t of head j
// reads positions τ ∈ [max(0, t−W+1), t]; probabilities are stored per query in
// W slots (slot w ↔ τ = t−W+1+w, slots before position 0 hold 0).
// Forward and the query-side backward run one warp per (sequence, head, query);
// the key/value-side backward runs one warp per (sequence, head, key) and walks
// the W queries that read that key, so no gradient needs an atomic add.
#include "catchat/kernels.h"
#include "common.cuh"

#define WARPS 4

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
    float mx = -INFINITY;
    for (int w = lane; w < W; w += 32) {
        const int tau = t - W + 1 + w;
        float sv = -INFINITY;
        if (tau >= 0) {
            const float *k = qkv + ((size_t)b * T + tau) * 3 * D + D + j * hd;
            float acc = 0.f;
            for (int i = 0; i < hd; i++) acc += q[i] * k[i];
            sv = acc * sc;
        }
        pr[w] = sv;
        mx = fmaxf(mx, sv);
    }
    mx = warp_max(mx);
    float sum = 0.f;
    for (int w = lane; w < W; w += 32) {
        const float e = t - W + 1 + w >= 0 ? __expf(pr[w] - mx) : 0.f;
        pr[w] = e;
        sum += e;
    }
    sum = warp_sum(sum);
    const float inv = 1.f / sum;
    for (int w = lane; w < W; w += 32) pr[w] *= inv;
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

// Per-token guard on the context-stream gradient: one warp per row.
__global__ void rownorm_clamp_kernel(float *d, int M, int D, float limit)
{
    const int row = blockIdx.x * WARPS + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (row >= M) return;
    float *r = d + (size_t)row * D;
    float ss = 0.f;
    for (int i = lane; i < D; i += 32) ss += r[i] * r[i];
    const float nrm = sqrtf(warp_sum(ss));
    if (nrm > limit) {
        const float f = limit / nrm;
        for (int i = lane; i < D; i += 32) r[i] *= f;
    }
}

extern "C" void launch_attention_forward(float *o32, void *o16, float *p, const float *qkv, int B, int T, int D,
                                         int H, int W, cudaStream_t s)
{
    attention_forward_kernel<<<ceil_div((size_t)B * H * T, WARPS), 32 * WARPS, 0, s>>>(o32, (__half *)o16, p, qkv,
                                                                                        B, T, D, H, W);
    LAUNCH_CHECK();
}

extern "C" void launch_attention_backward(float *dqkv, float *ds, const float *dout, const float *p,
                                          const float *qkv, int B, int T, int D, int H, int W, cudaStream_t s)
{
    const unsigned int grid = ceil_div((size_t)B * H * T, WARPS);
    attention_backward_query_kernel<<<grid, 32 * WARPS, 0, s>>>(dqkv, ds, dout, p, qkv, B, T, D, H, W);
    LAUNCH_CHECK();
    attention_backward_key_kernel<<<grid, 32 * WARPS, 0, s>>>(dqkv, ds, dout, p, qkv, B, T, D, H, W);
    LAUNCH_CHECK();
}

extern "C" void launch_rownorm_clamp(float *d, int M, int D, float limit, cudaStream_t s)
{
    if (limit <= 0.f) return;
    rownorm_clamp_kernel<<<ceil_div(M, WARPS), 32 * WARPS, 0, s>>>(d, M, D, limit);
    LAUNCH_CHECK();
}
