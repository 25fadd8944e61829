// gru_cell: the element-wise part of one GRU timestep (PyTorch gate order r,
// z, n), on [B,T,·] tensors at step t. The recurrent product W_hh·h_{t-1} is
// the caller's, a cuBLASLt GEMM between these kernels (src/gpu/gru.c, the
// per-step loop); the input projections for all T steps were one GEMM before
// the loop. src/cpu/gru_cell.c is the same function on the CPU, with the same
// contract (kernels.h). One thread per (sequence, hidden unit) keeps a unit's
// three gates together, so the blend and (backward) the grad_h clamp fuse here.
#include <stdint.h>
#include "catchat/kernels.h"
#include "common.cuh"
#include "gru_cell.cuh"

__global__ void gru_cell_forward_kernel(float *h, float *gates, float *ghn, __half *hprev16, const float *gx,
                                        const float *gh, const float *bhh, int B, int T, int D, int t, int wT,
                                        int wt0)
{
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * D) return;
    const int b = idx / D, i = idx % D;
    const size_t row = (size_t)b * T + t, wrow = gru_wrow(b, t, wT, wt0);
    const float *gxr = gx + wrow * 3 * D, *ghr = gh + (size_t)b * 3 * D;
    const float g3[3] = { gxr[i], gxr[D + i], gxr[2 * D + i] };
    const float b3[3] = { bhh[i], bhh[D + i], bhh[2 * D + i] };
    gru_fwd_cell(h, gates, ghn, hprev16, g3, b3, ghr[i], ghr[D + i], ghr[2 * D + i],
                 t > 0 ? h[(row - 1) * D + i] : 0.f, row, wrow, i, D, T, t);
}

__global__ void gru_cell_backward_kernel(__half *dgx16, __half *dgh16, float *dhrec, const float *dh_in,
                                         const float *h, const float *gates, const float *ghn, int B, int T,
                                         int D, int t, int wT, int wt0, float clamp_limit)
{
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * D) return;
    const int b = idx / D, i = idx % D;
    const size_t row = (size_t)b * T + t, wrow = gru_wrow(b, t, wT, wt0);
    const float *gt = gates + wrow * 3 * D;
    dhrec[idx] = gru_bwd_cell(dgx16, dgh16, dh_in[row * D + i] + dhrec[idx], clamp_limit, gt[i], gt[D + i],
                              gt[2 * D + i], ghn[wrow * D + i], t > 0 ? h[(row - 1) * D + i] : 0.f, wrow, i, D);
}

extern "C" void launch_gru_cell_forward(const gru_layer *L, gru_shape sh, int t, cudaStream_t s)
{
    gru_cell_forward_kernel<<<ceil_div((size_t)sh.B * sh.D, 256), 256, 0, s>>>(
        L->h, L->gates, L->ghn, (__half *)L->hprev16, L->gx, L->gh, L->bhh, sh.B, sh.T, sh.D, t,
        gru_window_steps(sh), gru_window_first(sh));
    LAUNCH_CHECK();
}

extern "C" void launch_gru_cell_backward(const gru_layer *L, const gru_grads *G, gru_shape sh, int t,
                                         float clamp_limit, cudaStream_t s)
{
    gru_cell_backward_kernel<<<ceil_div((size_t)sh.B * sh.D, 256), 256, 0, s>>>(
        (__half *)G->dgx16, (__half *)G->dgh16, G->dhrec, G->dh_in, L->h, L->gates, L->ghn, sh.B, sh.T, sh.D, t,
        gru_window_steps(sh), gru_window_first(sh), clamp_limit);
    LAUNCH_CHECK();
}

// The gates a forward step wrote, rebuilt from its two products (recompute:
// src/gpu/ops_layer_gpu.c): in gates, gx + W_hh·h_{t-1} in the r and z rows
// and gx alone in the n row; in ghn, W_hn·h_{t-1} without its bias. The
// same gate math as the forward cell with h_{t-1}'s products already added.
// A pass over the window's gates that memory bounds: W units a thread, with
// 16-byte loads and stores where D and the pointers allow them.
__device__ __forceinline__ void unpack4(float *d, float4 v) { d[0] = v.x, d[1] = v.y, d[2] = v.z, d[3] = v.w; }
__device__ __forceinline__ float4 pack4(const float *v) { return make_float4(v[0], v[1], v[2], v[3]); }

template <int W>
__global__ void gru_cell_rebuild_kernel(float *gates, float *ghn, const float *bhh, size_t M, int D)
{
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x, per_row = (size_t)D / W;
    if (idx >= M * per_row) return;
    const size_t row = idx / per_row;
    const int i0 = (int)(idx % per_row) * W;
    float *gt = gates + row * 3 * D, *hn = ghn + row * D;
    float r[W], z[W], n[W], a[W];
    if constexpr (W == 4) {
        unpack4(r, *(const float4 *)(gt + i0));
        unpack4(z, *(const float4 *)(gt + D + i0));
        unpack4(n, *(const float4 *)(gt + 2 * D + i0));
        unpack4(a, *(const float4 *)(hn + i0));
    } else {
        r[0] = gt[i0], z[0] = gt[D + i0], n[0] = gt[2 * D + i0], a[0] = hn[i0];
    }
#pragma unroll
    for (int k = 0; k < W; k++) {
        const int i = i0 + k;
        const float g3[3] = { r[k], z[k], n[k] };
        const float b3[3] = { bhh[i], bhh[D + i], bhh[2 * D + i] };
        const gru_fwd_vals v = gru_fwd_math(g3, b3, 0.f, 0.f, a[k], 0.f);
        r[k] = v.r, z[k] = v.z, n[k] = v.n, a[k] = v.hn;
    }
    if constexpr (W == 4) {
        *(float4 *)(gt + i0) = pack4(r);
        *(float4 *)(gt + D + i0) = pack4(z);
        *(float4 *)(gt + 2 * D + i0) = pack4(n);
        *(float4 *)(hn + i0) = pack4(a);
    } else {
        gt[i0] = r[0], gt[D + i0] = z[0], gt[2 * D + i0] = n[0], hn[i0] = a[0];
    }
}

extern "C" void launch_gru_cell_rebuild(float *gates, float *ghn, const float *bhh, int M, int D, cudaStream_t s)
{
    if (D % 4 == 0 && (((uintptr_t)gates | (uintptr_t)ghn) & 15) == 0)
        gru_cell_rebuild_kernel<4><<<ceil_div((size_t)M * D / 4, 256), 256, 0, s>>>(gates, ghn, bhh, (size_t)M, D);
    else
        gru_cell_rebuild_kernel<1><<<ceil_div((size_t)M * D, 256), 256, 0, s>>>(gates, ghn, bhh, (size_t)M, D);
    LAUNCH_CHECK();
}
