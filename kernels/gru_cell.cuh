// The GRU gate math of one hidden unit at one timestep (PyTorch order r, z, n),
// shared by the per-step kernels (gru_cell.cu), the persistent ones
// (gru_persistent.cu) and the cluster ones (gru_cluster.cu), so every path
// computes the same function. The math and the stores are separate so a
// kernel can publish h (or the gate gradients) to its peers first and write
// the rest to global memory while it waits for them.
#pragma once
#include <cuda_fp16.h>

__device__ __forceinline__ float gru_sigmoid(float x) { return 1.f / (1.f + __expf(-x)); }

struct gru_fwd_vals {
    float r, z, n, hn, h;
};

// gxv: the input projection (with b_ih); bh: b_hh; a*: W_hh·h_{t-1} rows r, z, n.
__device__ __forceinline__ gru_fwd_vals gru_fwd_math(const float gxv[3], const float bh[3], float ar, float az,
                                                     float an, float hp)
{
    gru_fwd_vals v;
    v.r = gru_sigmoid(gxv[0] + ar + bh[0]);
    v.z = gru_sigmoid(gxv[1] + az + bh[1]);
    v.hn = an + bh[2];
    v.n = tanhf(gxv[2] + v.r * v.hn);
    v.h = (1.f - v.z) * v.n + v.z * hp;
    return v;
}

// The row of (sequence b, step t) in a window's own buffers (gru_shape: wT
// steps a sequence from step wt0; the whole layer's: wT = T, wt0 = 0).
__device__ __forceinline__ size_t gru_wrow(size_t b, int t, int wT, int wt0) { return b * wT + (t - wt0); }

// The FP32 states of (b, t, u) the backward reads: h at the layer's row
// (b·T + t), the gates and ghn at the window's (gru_wrow).
__device__ __forceinline__ void gru_fwd_store_states(float *h, float *gates, float *ghn, const gru_fwd_vals &v,
                                                     size_t row, size_t wrow, int u, int D)
{
    float *gt = gates + wrow * 3 * D;
    gt[u] = v.r;
    gt[D + u] = v.z;
    gt[2 * D + u] = v.n;
    ghn[wrow * D + u] = v.hn;
    h[row * D + u] = v.h;
}

// Every output of (b, t, u): the FP32 states and the FP16 h_t that is the
// next step's (and dW_hh's) GEMM operand.
__device__ __forceinline__ void gru_fwd_store(float *h, float *gates, float *ghn, __half *hprev16,
                                              const gru_fwd_vals &v, size_t row, size_t wrow, int u, int D, int T, int t)
{
    gru_fwd_store_states(h, gates, ghn, v, row, wrow, u, D);
    if (t + 1 < T) hprev16[(row + 1) * D + u] = __float2half_rn(v.h);
}

__device__ __forceinline__ float gru_fwd_cell(float *h, float *gates, float *ghn, __half *hprev16, const float gxv[3],
                                          const float bh[3], float ar, float az, float an, float hp, size_t row,
                                          size_t wrow, int u, int D, int T, int t)
{
    const gru_fwd_vals v = gru_fwd_math(gxv, bh, ar, az, an, hp);
    gru_fwd_store(h, gates, ghn, hprev16, v, row, wrow, u, D, T, t);
    return v.h;
}

// What the backward cell of (row = b·T + t, u) reads, in the order
// gru_bwd_math takes it: dh_in, r, z, n, ghn, h_{t-1} (0 at t = 0); the
// gates and ghn at the window's row wrow. The recurrence kernels load it a
// step ahead, so the loads hide behind the step.
__device__ __forceinline__ void gru_bwd_operands(float pre[6], const float *dh_in, const float *gates,
                                                 const float *ghn, const float *h, size_t row, size_t wrow, int u,
                                                 int D, int t)
{
    pre[0] = dh_in[row * D + u];
    pre[1] = gates[wrow * 3 * D + u];
    pre[2] = gates[wrow * 3 * D + D + u];
    pre[3] = gates[wrow * 3 * D + 2 * D + u];
    pre[4] = ghn[wrow * D + u];
    pre[5] = t > 0 ? h[(row - 1) * D + u] : 0.f;
}

// Gate gradients of one unit; dnr = dn ⊙ r is what W_hn sees (the n gate
// reads W_hn·h through r). zg = z ⊙ g goes to the step before.
struct gru_bwd_vals {
    float dr, dz, dn, dnr, zg;
};

__device__ __forceinline__ gru_bwd_vals gru_bwd_math(float g, float clamp_limit, float r, float z, float n, float hn,
                                                     float hp)
{
    // Comparisons, not fminf/fmaxf: those return the other operand for a NaN,
    // which would turn a NaN gradient into -limit and hide it from the
    // non-finite guard. A NaN fails both tests and passes through, as on the CPU.
    if (clamp_limit > 0.f) g = g > clamp_limit ? clamp_limit : (g < -clamp_limit ? -clamp_limit : g);
    gru_bwd_vals v;
    v.dn = g * (1.f - z) * (1.f - n * n);
    v.dz = g * (hp - n) * z * (1.f - z);
    v.dr = v.dn * hn * r * (1.f - r);
    v.dnr = v.dn * r;
    v.zg = g * z;
    return v;
}

// The gradient of W_hh·h_{t-1} + b_hh at (b, t, u): what the recurrence's
// next step (t - 1) reads, and dW_hh's GEMM operand.
__device__ __forceinline__ void gru_bwd_store_dgh(__half *dgh16, const gru_bwd_vals &v, size_t row, int u, int D)
{
    __half *dh = dgh16 + row * 3 * D;
    dh[u] = __float2half_rn(v.dr);
    dh[D + u] = __float2half_rn(v.dz);
    dh[2 * D + u] = __float2half_rn(v.dnr);
}

// The gradient of the input pre-activations at (b, t, u): the W_ih GEMMs' operand.
__device__ __forceinline__ void gru_bwd_store_dgx(__half *dgx16, const gru_bwd_vals &v, size_t row, int u, int D)
{
    __half *dx = dgx16 + row * 3 * D;
    dx[u] = __float2half_rn(v.dr);
    dx[D + u] = __float2half_rn(v.dz);
    dx[2 * D + u] = __float2half_rn(v.dn);
}

__device__ __forceinline__ void gru_bwd_store(__half *dgx16, __half *dgh16, const gru_bwd_vals &v, size_t row, int u,
                                              int D)
{
    gru_bwd_store_dgx(dgx16, v, row, u, D);
    gru_bwd_store_dgh(dgh16, v, row, u, D);
}

// One unit's backward gate math and stores; returns z ⊙ g for the step before.
__device__ __forceinline__ float gru_bwd_cell(__half *dgx16, __half *dgh16, float g, float clamp_limit, float r, float z,
                                          float n, float hn, float hp, size_t row, int u, int D)
{
    const gru_bwd_vals v = gru_bwd_math(g, clamp_limit, r, z, n, hn, hp);
    gru_bwd_store(dgx16, dgh16, v, row, u, D);
    return v.zg;
}
