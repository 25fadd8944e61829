// GRU recurrence, element-wise part of one timestep (PyTorch gate order r, z, n).
// The recurrent product W_hh·h_{t-1} is a cuBLASLt GEMM issued by the host
// between these kernels; the input projections for all T steps were one GEMM
// before the loop. One thread per (sequence, hidden unit) keeps a unit's three
// gates together, so the blend and (backward) the grad_h clamp fuse here.
#include "catchat/kernels.h"
#include "common.cuh"

__device__ __forceinline__ float sigmoidf_(float x) { return 1.f / (1.f + __expf(-x)); }

__global__ void gru_forward_step_kernel(float *h, float *gates, float *ghn, __half *hprev16, const float *gx,
                                        const float *gh, const float *bhh, int B, int T, int D, int t)
{
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * D) return;
    const int b = idx / D, i = idx % D;
    const size_t row = (size_t)b * T + t;
    const float *gxr = gx + row * 3 * D, *ghr = gh + (size_t)b * 3 * D;
    const float hp = t > 0 ? h[(row - 1) * D + i] : 0.f;
    const float r = sigmoidf_(gxr[i] + ghr[i] + bhh[i]);
    const float z = sigmoidf_(gxr[D + i] + ghr[D + i] + bhh[D + i]);
    const float hn = ghr[2 * D + i] + bhh[2 * D + i];
    const float n = tanhf(gxr[2 * D + i] + r * hn);
    const float hv = (1.f - z) * n + z * hp;
    float *gt = gates + row * 3 * D;
    gt[i] = r;
    gt[D + i] = z;
    gt[2 * D + i] = n;
    ghn[row * D + i] = hn;
    h[row * D + i] = hv;
    if (t + 1 < T) hprev16[(row + 1) * D + i] = __float2half_rn(hv);
}

__global__ void gru_backward_step_kernel(__half *dgx16, __half *dgh16, float *dhrec, const float *dh_in,
                                         const float *h, const float *gates, const float *ghn, int B, int T,
                                         int D, int t, float clamp_limit)
{
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * D) return;
    const int b = idx / D, i = idx % D;
    const size_t row = (size_t)b * T + t;
    float g = dh_in[row * D + i] + dhrec[idx];
    if (clamp_limit > 0.f) g = fminf(fmaxf(g, -clamp_limit), clamp_limit);
    const float *gt = gates + row * 3 * D;
    const float r = gt[i], z = gt[D + i], n = gt[2 * D + i];
    const float hp = t > 0 ? h[(row - 1) * D + i] : 0.f;
    const float dn_pre = g * (1.f - z) * (1.f - n * n);
    const float dz_pre = g * (hp - n) * z * (1.f - z);
    const float dr_pre = dn_pre * ghn[row * D + i] * r * (1.f - r);
    __half *dx = dgx16 + row * 3 * D, *dh = dgh16 + row * 3 * D;
    dx[i] = __float2half_rn(dr_pre);
    dx[D + i] = __float2half_rn(dz_pre);
    dx[2 * D + i] = __float2half_rn(dn_pre);
    dh[i] = __float2half_rn(dr_pre);
    dh[D + i] = __float2half_rn(dz_pre);
    dh[2 * D + i] = __float2half_rn(dn_pre * r);
    dhrec[idx] = g * z;
}

extern "C" void launch_gru_forward_step(float *h, float *gates, float *ghn, void *hprev16, const float *gx,
                                        const float *gh, const float *bhh, int B, int T, int D, int t,
                                        cudaStream_t s)
{
    gru_forward_step_kernel<<<ceil_div((size_t)B * D, 256), 256, 0, s>>>(h, gates, ghn, (__half *)hprev16, gx,
                                                                          gh, bhh, B, T, D, t);
    LAUNCH_CHECK();
}

extern "C" void launch_gru_backward_step(void *dgx16, void *dgh16, float *dhrec, const float *dh_in,
                                         const float *h, const float *gates, const float *ghn, int B, int T,
                                         int D, int t, float clamp_limit, cudaStream_t s)
{
    gru_backward_step_kernel<<<ceil_div((size_t)B * D, 256), 256, 0, s>>>(
        (__half *)dgx16, (__half *)dgh16, dhrec, dh_in, h, gates, ghn, B, T, D, t, clamp_limit);
    LAUNCH_CHECK();
}
