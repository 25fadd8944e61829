// RMSNorm with the guards of docs/model.md, one warp per row:
//   ms ≤ floor → ir = 1 (identity); 1/sqrt(ms + eps) > cap → ir = cap.
// The backward recomputes the row's mean square to learn which case applied
// (same inputs, same decision), so no flag needs storing.
// Two forms of each kernel: for D = 128·NV (NV ≤ 8: every width the trainer
// is benchmarked at up to 1024) a lane keeps its NV float4 of the row in
// registers and the row is read once; the scalar form serves any D.
#include "catchat/kernels.h"
#include "common.cuh"

#define MAX_NV 8

__device__ __forceinline__ float row_inv_rms(float ss, int D, float eps, float floor_, float inv_max, bool *is_const)
{
    const float ms = ss / (float)D;
    if (ms <= floor_) { *is_const = true; return 1.f; }
    const float raw = rsqrtf(ms + eps);
    if (raw > inv_max) { *is_const = true; return inv_max; }
    *is_const = false;
    return raw;
}

// x (+ res, written to sum when sum is given) normalised into y32 and/or y16.
__global__ void rmsnorm_forward_kernel(float *sum, float *y32, __half *y16, float *ir, const float *x,
                                       const float *res, const float *g, int M, int D, row_window rw, float eps,
                                       float floor_, float inv_max)
{
    const int i_row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (i_row >= M) return;
    const size_t row = window_row(rw, i_row);
    const size_t base = (size_t)row * D, obase = window_row_own(rw, i_row) * D;
    float ss = 0.f;
    for (int i = lane; i < D; i += 32) {
        const float v = x[base + i] + (res ? res[base + i] : 0.f);
        if (sum) sum[base + i] = v;
        ss += v * v;
    }
    ss = warp_sum(ss);
    bool c;
    const float r = row_inv_rms(ss, D, eps, floor_, inv_max, &c);
    if (lane == 0) ir[row] = r;
    for (int i = lane; i < D; i += 32) {
        const float v = (sum ? sum[base + i] : x[base + i] + (res ? res[base + i] : 0.f)) * r * g[i];
        if (y32) y32[obase + i] = v;
        if (y16) y16[obase + i] = __float2half_rn(v);
    }
}

// sum may be x itself (recompute makes u^l over u^{l-1} in place): x and res
// are not __restrict__, and IN_PLACE reads them with plain loads (each element
// by the thread that then writes it), else through the read-only cache.
template <bool IN_PLACE>
__device__ __forceinline__ float4 load_x4(const float *p)
{
    return IN_PLACE ? *(const float4 *)p : __ldg((const float4 *)p);
}

template <int NV, bool IN_PLACE>
__global__ void rmsnorm_forward_vec(float *sum, float *y32, __half *y16, float *ir, const float *x, const float *res,
                                    const float *__restrict__ g, int M, row_window rw, float eps, float floor_,
                                    float inv_max)
{
    constexpr int D = 128 * NV;
    const int i_row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (i_row >= M) return;
    const size_t row = window_row(rw, i_row);
    const size_t base = (size_t)row * D + 4 * lane, obase = window_row_own(rw, i_row) * D + 4 * lane;
    float4 v[NV];
    float ss = 0.f;
#pragma unroll
    for (int k = 0; k < NV; k++) {
        v[k] = load_x4<IN_PLACE>(x + base + 128 * k);
        if (res) {
            const float4 b = load_x4<IN_PLACE>(res + base + 128 * k);
            v[k].x += b.x, v[k].y += b.y, v[k].z += b.z, v[k].w += b.w;
        }
        ss += v[k].x * v[k].x + v[k].y * v[k].y + v[k].z * v[k].z + v[k].w * v[k].w;
    }
    if (sum)
#pragma unroll
        for (int k = 0; k < NV; k++) *(float4 *)(sum + base + 128 * k) = v[k];
    ss = warp_sum(ss);
    bool c;
    const float r = row_inv_rms(ss, D, eps, floor_, inv_max, &c);
    if (lane == 0) ir[row] = r;
#pragma unroll
    for (int k = 0; k < NV; k++) {
        const float4 gk = __ldg((const float4 *)(g + 4 * lane + 128 * k));
        const float4 y = make_float4(v[k].x * r * gk.x, v[k].y * r * gk.y, v[k].z * r * gk.z, v[k].w * r * gk.w);
        if (y32) *(float4 *)(y32 + obase + 128 * k) = y;
        if (y16) {
            __half2 *d = (__half2 *)(y16 + obase + 128 * k);
            d[0] = __floats2half2_rn(y.x, y.y);
            d[1] = __floats2half2_rn(y.z, y.w);
        }
    }
}

// dx accumulates. Each block also sums dy·x·ir (the gain's gradient) of its
// rows per column into its own partial row: warp w keeps its rows' sums in
// shared row w, and the rows meet in warp order (deterministic, no atomics),
// so the pass over dy and x that dx needs also gives dg, without a separate
// column pass over the same rows.
#define RMS_BWD_WARPS 16 // at most; fewer where 16 rows of D floats exceed shared memory
#define RMS_BWD_ROWS_PER_WARP 4
__global__ void __launch_bounds__(RMS_BWD_WARPS * 32)
    rmsnorm_backward_kernel(float *dx, float *partial, const float *dy, const float *x, const float *g,
                            const float *ir, int M, int D, row_window rw, float eps, float floor_, float inv_max)
{
    extern __shared__ float colsum[]; // [warps][D]
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, nw = blockDim.x / 32;
    float *mine = colsum + (size_t)warp * D;
    for (int i = lane; i < D; i += 32) mine[i] = 0.f;
    const int row0 = (blockIdx.x * nw + warp) * RMS_BWD_ROWS_PER_WARP;
    const int row1 = min(M, row0 + RMS_BWD_ROWS_PER_WARP);
    for (int i_row = row0; i_row < row1; i_row++) {
        const size_t row = window_row(rw, i_row);
        const float *xr = x + row * D, *dyr = dy + window_row_own(rw, i_row) * D;
        float ss = 0.f, dot = 0.f;
        for (int i = lane; i < D; i += 32) {
            ss += xr[i] * xr[i];
            dot += dyr[i] * g[i] * xr[i];
        }
        ss = warp_sum(ss);
        dot = warp_sum(dot);
        bool c;
        row_inv_rms(ss, D, eps, floor_, inv_max, &c);
        const float r = ir[row];
        const float k = c ? 0.f : r * r * r / (float)D * dot;
        for (int i = lane; i < D; i += 32) {
            const float xv = xr[i], dyv = dyr[i];
            dx[row * D + i] += r * dyv * g[i] - k * xv;
            mine[i] += dyv * xv * r;
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < D; i += blockDim.x) {
        float sum = 0.f;
        for (int w = 0; w < nw; w++) sum += colsum[(size_t)w * D + i];
        partial[(size_t)blockIdx.x * D + i] = sum;
    }
}

template <int NV>
__global__ void __launch_bounds__(RMS_BWD_WARPS * 32)
    rmsnorm_backward_vec(float *dx, float *partial, const float *__restrict__ dy, const float *__restrict__ x,
                         const float *__restrict__ g, const float *__restrict__ ir, int M, row_window rw, float eps,
                         float floor_, float inv_max)
{
    constexpr int D = 128 * NV;
    extern __shared__ float colsum[]; // [warps][D]
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, nw = blockDim.x / 32;
    float4 gv[NV], acc[NV];
#pragma unroll
    for (int k = 0; k < NV; k++) {
        gv[k] = __ldg((const float4 *)(g + 4 * lane + 128 * k));
        acc[k] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    const int row0 = (blockIdx.x * nw + warp) * RMS_BWD_ROWS_PER_WARP;
    const int row1 = min(M, row0 + RMS_BWD_ROWS_PER_WARP);
    for (int i_row = row0; i_row < row1; i_row++) {
        const size_t row = window_row(rw, i_row), base = row * D + 4 * lane;
        const size_t dbase = window_row_own(rw, i_row) * D + 4 * lane;
        float4 xv[NV], dv[NV];
        float ss = 0.f, dot = 0.f;
#pragma unroll
        for (int k = 0; k < NV; k++) {
            xv[k] = __ldg((const float4 *)(x + base + 128 * k));
            dv[k] = __ldg((const float4 *)(dy + dbase + 128 * k));
            ss += xv[k].x * xv[k].x + xv[k].y * xv[k].y + xv[k].z * xv[k].z + xv[k].w * xv[k].w;
            dot += dv[k].x * gv[k].x * xv[k].x + dv[k].y * gv[k].y * xv[k].y + dv[k].z * gv[k].z * xv[k].z +
                   dv[k].w * gv[k].w * xv[k].w;
        }
        ss = warp_sum(ss);
        dot = warp_sum(dot);
        bool c;
        row_inv_rms(ss, D, eps, floor_, inv_max, &c);
        const float r = __ldg(ir + row);
        const float kk = c ? 0.f : r * r * r / (float)D * dot;
#pragma unroll
        for (int k = 0; k < NV; k++) {
            float4 *o = (float4 *)(dx + base + 128 * k);
            float4 d = *o;
            d.x += r * dv[k].x * gv[k].x - kk * xv[k].x;
            d.y += r * dv[k].y * gv[k].y - kk * xv[k].y;
            d.z += r * dv[k].z * gv[k].z - kk * xv[k].z;
            d.w += r * dv[k].w * gv[k].w - kk * xv[k].w;
            *o = d;
            acc[k].x += dv[k].x * xv[k].x * r, acc[k].y += dv[k].y * xv[k].y * r;
            acc[k].z += dv[k].z * xv[k].z * r, acc[k].w += dv[k].w * xv[k].w * r;
        }
    }
#pragma unroll
    for (int k = 0; k < NV; k++) *(float4 *)(colsum + (size_t)warp * D + 4 * lane + 128 * k) = acc[k];
    __syncthreads();
    for (int i = threadIdx.x; i < D; i += blockDim.x) {
        float sum = 0.f;
        for (int w = 0; w < nw; w++) sum += colsum[(size_t)w * D + i];
        partial[(size_t)blockIdx.x * D + i] = sum;
    }
}

// NV for the register forms, 0 for the scalar ones.
static int vec_width(int D) { return D % 128 == 0 && D / 128 <= MAX_NV ? D / 128 : 0; }

#define NV_DISPATCH(NVV, call)                                                                                     \
    switch (NVV) {                                                                                                 \
    case 1: call(1); break;                                                                                        \
    case 2: call(2); break;                                                                                        \
    case 3: call(3); break;                                                                                        \
    case 4: call(4); break;                                                                                        \
    case 5: call(5); break;                                                                                        \
    case 6: call(6); break;                                                                                        \
    case 7: call(7); break;                                                                                        \
    case 8: call(8); break;                                                                                        \
    }

extern "C" void launch_add_rmsnorm_forward(float *sum, float *y32, void *y16, float *ir, const float *x,
                                           const float *res, const float *g, int M, int D, row_window rw,
                                           const cc_norm_consts *nc, cudaStream_t s)
{
    const float eps = (float)nc->eps, floor_ = (float)nc->floor, inv_max = (float)nc->inv_max;
    const int nv = vec_width(D);
    const bool in_place = sum && (sum == x || sum == res);
#define FWD_VEC(N)                                                                                                 \
    (in_place ? rmsnorm_forward_vec<N, true> : rmsnorm_forward_vec<N, false>)<<<ceil_div(M, 8), 256, 0, s>>>(    \
        sum, y32, (__half *)y16, ir, x, res, g, M, rw, eps, floor_, inv_max)
    if (nv)
        NV_DISPATCH(nv, FWD_VEC)
    else
        rmsnorm_forward_kernel<<<ceil_div(M, 8), 256, 0, s>>>(sum, y32, (__half *)y16, ir, x, res, g, M, D, rw, eps,
                                                              floor_, inv_max);
#undef FWD_VEC
    LAUNCH_CHECK();
}

extern "C" void launch_rmsnorm_forward(float *y32, void *y16, float *ir, const float *x, const float *g, int M, int D,
                                       const cc_norm_consts *nc, cudaStream_t s)
{
    launch_add_rmsnorm_forward(NULL, y32, y16, ir, x, NULL, g, M, D, row_window_all(M), nc, s);
}

/* The backward's warps a block: as many as have a row of dg in shared memory, up to RMS_BWD_WARPS. */
static int rms_bwd_warps(const gpu_caps *caps, int D)
{
    const int nw = caps->smem_per_block_optin / (int)(sizeof(float) * D); /* warps whose rows of dg fit */
    return nw < 1 ? 1 : nw > RMS_BWD_WARPS ? RMS_BWD_WARPS : nw;
}

/* Its scratch: one partial row of dg a block. */
extern "C" size_t rmsnorm_backward_scratch_bytes(int M, int D, const gpu_caps *caps)
{
    if (M <= 0 || D <= 0) return 0;
    return (size_t)ceil_div(M, rms_bwd_warps(caps, D) * RMS_BWD_ROWS_PER_WARP) * D * sizeof(float);
}

extern "C" void launch_rmsnorm_backward(float *dx, float *dg, const float *dy, const float *x, const float *g,
                                        const float *ir, int M, int D, row_window rw, const cc_norm_consts *nc,
                                        const gpu_caps *caps, gpu_scratch *sc, cudaStream_t s)
{
    const float eps = (float)nc->eps, floor_ = (float)nc->floor, inv_max = (float)nc->inv_max;
    const int nw = rms_bwd_warps(caps, D);
    const int nblocks = (int)ceil_div(M, nw * RMS_BWD_ROWS_PER_WARP);
    const size_t smem = sizeof(float) * nw * D;
    float *partial = (float *)scratch_take(sc, SCRATCH_REDUCE, rmsnorm_backward_scratch_bytes(M, D, caps),
                                           "launch_rmsnorm_backward");
    const int nv = vec_width(D);
#define BWD_VEC(N)                                                                                                 \
    do {                                                                                                           \
        if (smem > 48 * 1024)                                                                                      \
            cudaFuncSetAttribute(rmsnorm_backward_vec<N>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem); \
        rmsnorm_backward_vec<N><<<nblocks, nw * 32, smem, s>>>(dx, partial, dy, x, g, ir, M, rw, eps, floor_, inv_max); \
    } while (0)
    if (nv)
        NV_DISPATCH(nv, BWD_VEC)
    else {
        if (smem > 48 * 1024) /* a failure here shows in LAUNCH_CHECK */
            cudaFuncSetAttribute(rmsnorm_backward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        rmsnorm_backward_kernel<<<nblocks, nw * 32, smem, s>>>(dx, partial, dy, x, g, ir, M, D, rw, eps, floor_,
                                                               inv_max);
    }
#undef BWD_VEC
    LAUNCH_CHECK();
    launch_sum_chunks_acc(dg, partial, nblocks, D, s);
}
