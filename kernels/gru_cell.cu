// GRU recurrence, element-wise part of one timestep (PyTorch gate order r, z, n).
// The recurrent product W_hh·h_{t-1} is a cuBLASLt GEMM issued by the host
// between these kernels; the input projections for all T steps were one GEMM
// before the loop. One thread per (sequence, hidden unit) keeps a unit's three
// gates together, so the blend and (backward) the grad_h clamp fuse here.
#include "catchat/kernels.h"
#include "common.cuh"
#include "gru_cell.cuh"

__global__ void gru_cell_forward_kernel(float *h, float *gates, float *ghn, __half *hprev16, const float *gx,
                                        const float *gh, const float *bhh, int B, int T, int D, int t)
{
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * D) return;
    const int b = idx / D, i = idx % D;
    const size_t row = (size_t)b * T + t;
    const float *gxr = gx + row * 3 * D, *ghr = gh + (size_t)b * 3 * D;
    const float g3[3] = { gxr[i], gxr[D + i], gxr[2 * D + i] };
    const float b3[3] = { bhh[i], bhh[D + i], bhh[2 * D + i] };
    gru_fwd_cell(h, gates, ghn, hprev16, g3, b3, ghr[i], ghr[D + i], ghr[2 * D + i],
                 t > 0 ? h[(row - 1) * D + i] : 0.f, row, i, D, T, t);
}

__global__ void gru_cell_backward_kernel(__half *dgx16, __half *dgh16, float *dhrec, const float *dh_in,
                                         const float *h, const float *gates, const float *ghn, int B, int T,
                                         int D, int t, float clamp_limit)
{
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * D) return;
    const int b = idx / D, i = idx % D;
    const size_t row = (size_t)b * T + t;
    const float *gt = gates + row * 3 * D;
    dhrec[idx] = gru_bwd_cell(dgx16, dgh16, dh_in[row * D + i] + dhrec[idx], clamp_limit, gt[i], gt[D + i],
                              gt[2 * D + i], ghn[row * D + i], t > 0 ? h[(row - 1) * D + i] : 0.f, row, i, D);
}

extern "C" void launch_gru_cell_forward(float *h, float *gates, float *ghn, void *hprev16, const float *gx,
                                        const float *gh, const float *bhh, int B, int T, int D, int t,
                                        cudaStream_t s)
{
    gru_cell_forward_kernel<<<ceil_div((size_t)B * D, 256), 256, 0, s>>>(h, gates, ghn, (__half *)hprev16, gx,
                                                                          gh, bhh, B, T, D, t);
    LAUNCH_CHECK();
}

extern "C" void launch_gru_cell_backward(void *dgx16, void *dgh16, float *dhrec, const float *dh_in,
                                         const float *h, const float *gates, const float *ghn, int B, int T,
                                         int D, int t, float clamp_limit, cudaStream_t s)
{
    gru_cell_backward_kernel<<<ceil_div((size_t)B * D, 256), 256, 0, s>>>(
        (__half *)dgx16, (__half *)dgh16, dhrec, dh_in, h, gates, ghn, B, T, D, t, clamp_limit);
    LAUNCH_CHECK();
}
