// The GRU gate math of one hidden unit at one timestep (PyTorch order r, z, n),
// shared by the per-step kernels (gru.cu) and the persistent ones
// (gru_persistent.cu), so both paths compute the same function.
#pragma once
#include <cuda_fp16.h>

__device__ __forceinline__ float gru_sigmoid(float x) { return 1.f / (1.f + __expf(-x)); }

// One unit's forward gate math; writes every output of (b, t, u).
__device__ __forceinline__ float gru_fwd_cell(float *h, float *gates, float *ghn, __half *hprev16, const float gxv[3],
                                          const float bh[3], float ar, float az, float an, float hp, size_t row, int u,
                                          int D, int T, int t)
{
    const float r = gru_sigmoid(gxv[0] + ar + bh[0]);
    const float z = gru_sigmoid(gxv[1] + az + bh[1]);
    const float hn = an + bh[2];
    const float n = tanhf(gxv[2] + r * hn);
    const float hv = (1.f - z) * n + z * hp;
    float *gt = gates + row * 3 * D;
    gt[u] = r;
    gt[D + u] = z;
    gt[2 * D + u] = n;
    ghn[row * D + u] = hn;
    h[row * D + u] = hv;
    if (t + 1 < T) hprev16[(row + 1) * D + u] = __float2half_rn(hv);
    return hv;
}

// One unit's backward gate math; returns z ⊙ g for the step before.
__device__ __forceinline__ float gru_bwd_cell(__half *dgx16, __half *dgh16, float g, float clamp_limit, float r, float z,
                                          float n, float hn, float hp, size_t row, int u, int D)
{
    if (clamp_limit > 0.f) g = fminf(fmaxf(g, -clamp_limit), clamp_limit);
    const float dn_pre = g * (1.f - z) * (1.f - n * n);
    const float dz_pre = g * (hp - n) * z * (1.f - z);
    const float dr_pre = dn_pre * hn * r * (1.f - r);
    __half *dx = dgx16 + row * 3 * D, *dh = dgh16 + row * 3 * D;
    dx[u] = __float2half_rn(dr_pre);
    dx[D + u] = __float2half_rn(dz_pre);
    dx[2 * D + u] = __float2half_rn(dn_pre);
    dh[u] = __float2half_rn(dr_pre);
    dh[D + u] = __float2half_rn(dz_pre);
    dh[2 * D + u] = __float2half_rn(dn_pre * r);
    return g * z;
}

