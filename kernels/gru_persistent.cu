// Persistent, weight-stationary GRU recurrence (forward and BPTT): one
// cooperative launch covers all T steps of a layer. Block k owns hidden units
// [k·J, (k+1)·J): its slice of W_hh stays in shared memory for the whole
// launch, and only h (forward) or the gate gradients (backward) move between
// steps, through L2, with one grid-wide barrier per step.
//
// Forward, step t: acc[3J, B] = W_hh[rows of the slice] · h_{t-1}ᵀ on tensor
//   cores (WMMA 16×16×16, FP16 in, FP32 accumulate), then the gate math for the
//   block's (b, j) pairs, writing h, gates, ghn (FP32) and FP16 h for step t+1.
// Backward, step t: acc[J, B] = W_hh[:, slice]ᵀ · dgh_{t+1}ᵀ, then
//   g = dh_in + z⊙g_{t+1} + acc, the grad_h clamp, and the gate gradients.
// The arithmetic is that of gru.cu's per-step kernels (same FP16 operands),
// so ladder stages 5 and 6 hold for both paths.
#include <cooperative_groups.h>
#include <mma.h>
#include "catchat/kernels.h"
#include "common.cuh"

namespace cg = cooperative_groups;
using namespace nvcuda;

#define PW 8 // warps per block

#define STAGE_BYTES (112 * 1024) // shared memory for one chunk of the moving operand

struct persist_shape {
    int J, MT, NT, KS, rows, BC, ldk;
};

// rows: padded rows of the block's A operand (multiple of 16). The moving
// operand (h or dgh, [B, K]) is staged through shared memory BC batch rows at
// a time (ldk = K + 8 halfs per row avoids bank conflicts); NT tiles per
// chunk; KS: K split so that PW warps have work when tiles are few.
static __host__ __device__ persist_shape make_shape(int D, int B, int J, int rows_real, int K)
{
    persist_shape s;
    s.J = J;
    s.rows = (rows_real + 15) / 16 * 16;
    s.MT = s.rows / 16;
    s.ldk = K + 8;
    s.BC = 16;
    while (s.BC * 2 <= B && B % (s.BC * 2) == 0 && (size_t)s.BC * 2 * s.ldk * 2 <= STAGE_BYTES) s.BC *= 2;
    s.NT = s.BC / 16;
    const int tiles = s.MT * s.NT;
    s.KS = 1;
    while (tiles * s.KS * 2 <= PW && (K / 16) % (s.KS * 2) == 0) s.KS *= 2;
    return s;
}

// partial[ks][row][b] = A[rows, K-part] · Bᵀ where B is [B rows, K] FP16 in
// global memory with row stride ldb. Each chunk of BC rows is first copied to
// shared memory with 16-byte loads from all threads at once (one L2 round trip
// instead of one per fragment), then multiplied on tensor cores.
__device__ __forceinline__ void block_mma(float *partial, __half *stage, const __half *A, int lda, const __half *Bm,
                                          size_t ldb, const persist_shape &s, int K, int B)
{
    const int warp = threadIdx.x / 32;
    const int tiles = s.MT * s.NT;
    const int kpart = K / s.KS;
    const int vec_per_row = K / 8;
    for (int b0 = 0; b0 < B; b0 += s.BC) {
        for (int i = threadIdx.x; i < s.BC * vec_per_row; i += blockDim.x) {
            const int r = i / vec_per_row, c = i % vec_per_row;
            *(uint4 *)(stage + (size_t)r * s.ldk + c * 8) = *(const uint4 *)(Bm + (size_t)(b0 + r) * ldb + c * 8);
        }
        __syncthreads();
        for (int job = warp; job < tiles * s.KS; job += PW) {
            const int tile = job % tiles, ks = job / tiles;
            const int mt = tile % s.MT, nt = tile / s.MT;
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
            wmma::fill_fragment(c, 0.f);
            for (int k = ks * kpart; k < (ks + 1) * kpart; k += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b;
                wmma::load_matrix_sync(a, A + (size_t)mt * 16 * lda + k, lda);
                wmma::load_matrix_sync(b, stage + (size_t)nt * 16 * s.ldk + k, s.ldk);
                wmma::mma_sync(c, a, b, c);
            }
            // partial laid out [ks][rows][B]: row-major with ld = B
            wmma::store_matrix_sync(partial + ((size_t)ks * s.rows + mt * 16) * B + b0 + nt * 16, c, B,
                                    wmma::mem_row_major);
        }
        __syncthreads(); // the stage is refilled by the next chunk
    }
}

__device__ __forceinline__ float sum_parts(const float *partial, const persist_shape &s, int row, int b, int B)
{
    float v = 0.f;
    for (int ks = 0; ks < s.KS; ks++) v += partial[((size_t)ks * s.rows + row) * B + b];
    return v;
}

__device__ __forceinline__ float sigmoid_p(float x) { return 1.f / (1.f + __expf(-x)); }

__global__ void __launch_bounds__(PW * 32) gru_forward_persistent_kernel(
    float *h, float *gates, float *ghn, __half *hprev16, const float *gx, const __half *whh, const float *bhh, int B,
    int T, int D, int J)
{
    cg::grid_group grid = cg::this_grid();
    extern __shared__ __align__(16) unsigned char smem[];
    const persist_shape s = make_shape(D, B, J, 3 * J, D);
    __half *W = (__half *)smem;                          // [rows, D]: r rows, z rows, n rows of the slice
    float *partial = (float *)(W + (size_t)s.rows * D);  // [KS][rows][B]
    __half *stage = (__half *)(partial + (size_t)s.KS * s.rows * B); // [BC][ldk]
    const int u0 = blockIdx.x * J;
    for (int idx = threadIdx.x; idx < s.rows * D; idx += blockDim.x) {
        const int lr = idx / D, k = idx % D;
        const int gate = lr / J, j = lr % J;
        W[idx] = lr < 3 * J ? whh[((size_t)gate * D + u0 + j) * D + k] : __float2half(0.f);
    }
    // h_{-1} = 0 for the FP16 copy at t = 0
    for (int idx = threadIdx.x; idx < B * J; idx += blockDim.x)
        hprev16[(size_t)(idx / J) * T * D + u0 + idx % J] = __float2half(0.f);
    __syncthreads();
    for (int t = 0; t < T; t++) {
        if (t > 0) block_mma(partial, stage, W, D, hprev16 + (size_t)t * D, (size_t)T * D, s, D, B);
        __syncthreads();
        for (int idx = threadIdx.x; idx < B * J; idx += blockDim.x) {
            const int b = idx / J, j = idx % J, u = u0 + j;
            const size_t row = (size_t)b * T + t;
            const float *gxr = gx + row * 3 * D;
            float ar = 0.f, az = 0.f, an = 0.f;
            if (t > 0) {
                ar = sum_parts(partial, s, j, b, B);
                az = sum_parts(partial, s, J + j, b, B);
                an = sum_parts(partial, s, 2 * J + j, b, B);
            }
            const float hp = t > 0 ? h[(row - 1) * D + u] : 0.f;
            const float r = sigmoid_p(gxr[u] + ar + bhh[u]);
            const float z = sigmoid_p(gxr[D + u] + az + bhh[D + u]);
            const float hn = an + bhh[2 * D + u];
            const float n = tanhf(gxr[2 * D + u] + r * hn);
            const float hv = (1.f - z) * n + z * hp;
            float *gt = gates + row * 3 * D;
            gt[u] = r;
            gt[D + u] = z;
            gt[2 * D + u] = n;
            ghn[row * D + u] = hn;
            h[row * D + u] = hv;
            if (t + 1 < T) hprev16[(row + 1) * D + u] = __float2half_rn(hv);
        }
        grid.sync(); // h_t of every block is written before anyone reads it
    }
}

__global__ void __launch_bounds__(PW * 32) gru_backward_persistent_kernel(
    __half *dgx16, __half *dgh16, const float *dh_in, const float *h, const float *gates, const float *ghn,
    const __half *whh, int B, int T, int D, int J, float clamp_limit)
{
    cg::grid_group grid = cg::this_grid();
    extern __shared__ __align__(16) unsigned char smem[];
    const persist_shape s = make_shape(D, B, J, J, 3 * D);
    __half *Wt = (__half *)smem;                          // [rows, 3D] = W_hh[:, slice]ᵀ
    float *partial = (float *)(Wt + (size_t)s.rows * 3 * D);
    float *zg = partial + (size_t)s.KS * s.rows * B;      // [B, J]: z ⊙ g of the step after
    __half *stage = (__half *)(zg + (size_t)B * J + ((size_t)B * J) % 4); // [BC][ldk], 16-byte aligned
    const int u0 = blockIdx.x * J;
    for (int idx = threadIdx.x; idx < s.rows * 3 * D; idx += blockDim.x) {
        const int j = idx / (3 * D), r = idx % (3 * D);
        Wt[idx] = j < J ? whh[(size_t)r * D + u0 + j] : __float2half(0.f);
    }
    for (int idx = threadIdx.x; idx < B * J; idx += blockDim.x) zg[idx] = 0.f;
    __syncthreads();
    for (int t = T - 1; t >= 0; t--) {
        if (t < T - 1)
            block_mma(partial, stage, Wt, 3 * D, dgh16 + (size_t)(t + 1) * 3 * D, (size_t)T * 3 * D, s, 3 * D, B);
        __syncthreads();
        for (int idx = threadIdx.x; idx < B * J; idx += blockDim.x) {
            const int b = idx / J, j = idx % J, u = u0 + j;
            const size_t row = (size_t)b * T + t;
            float g = dh_in[row * D + u] + zg[idx];
            if (t < T - 1) g += sum_parts(partial, s, j, b, B);
            if (clamp_limit > 0.f) g = fminf(fmaxf(g, -clamp_limit), clamp_limit);
            const float *gt = gates + row * 3 * D;
            const float r = gt[u], z = gt[D + u], n = gt[2 * D + u];
            const float hp = t > 0 ? h[(row - 1) * D + u] : 0.f;
            const float dn_pre = g * (1.f - z) * (1.f - n * n);
            const float dz_pre = g * (hp - n) * z * (1.f - z);
            const float dr_pre = dn_pre * ghn[row * D + u] * r * (1.f - r);
            __half *dx = dgx16 + row * 3 * D, *dh = dgh16 + row * 3 * D;
            dx[u] = __float2half_rn(dr_pre);
            dx[D + u] = __float2half_rn(dz_pre);
            dx[2 * D + u] = __float2half_rn(dn_pre);
            dh[u] = __float2half_rn(dr_pre);
            dh[D + u] = __float2half_rn(dz_pre);
            dh[2 * D + u] = __float2half_rn(dn_pre * r);
            zg[idx] = g * z;
        }
        grid.sync(); // dgh_t of every block is written before step t-1 reads it
    }
}

// Hidden units per block: the fewest that keep the grid within one block per SM.
static int pick_units(int D, int sms)
{
    for (int J = 1; J <= D; J++)
        if (D % J == 0 && D / J <= sms) return J;
    return D;
}

static size_t fwd_smem(int D, int B, int J)
{
    persist_shape s = make_shape(D, B, J, 3 * J, D);
    return (size_t)s.rows * D * sizeof(__half) + (size_t)s.KS * s.rows * B * sizeof(float) +
           (size_t)s.BC * s.ldk * sizeof(__half);
}

static size_t bwd_smem(int D, int B, int J)
{
    persist_shape s = make_shape(D, B, J, J, 3 * D);
    return (size_t)s.rows * 3 * D * sizeof(__half) + (size_t)s.KS * s.rows * B * sizeof(float) +
           ((size_t)B * J + ((size_t)B * J) % 4) * sizeof(float) + (size_t)s.BC * s.ldk * sizeof(__half);
}

static int device_sms_and_smem(size_t *smem_max)
{
    int dev = 0, sms = 0, smem = 0, coop = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev);
    *smem_max = (size_t)smem;
    return coop ? sms : 0;
}

extern "C" int gru_persistent_supported(int B, int T, int D)
{
    size_t smax;
    const int sms = device_sms_and_smem(&smax);
    if (sms == 0 || B % 16 != 0 || D % 16 != 0 || T < 1) return 0;
    const int J = pick_units(D, sms);
    return fwd_smem(D, B, J) <= smax && bwd_smem(D, B, J) <= smax;
}

extern "C" void launch_gru_forward_persistent(float *h, float *gates, float *ghn, void *hprev16, const float *gx,
                                              const void *whh16, const float *bhh, int B, int T, int D,
                                              cudaStream_t s)
{
    size_t smax;
    const int J = pick_units(D, device_sms_and_smem(&smax));
    const size_t smem = fwd_smem(D, B, J);
    cudaFuncSetAttribute(gru_forward_persistent_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    const __half *w = (const __half *)whh16;
    __half *hp = (__half *)hprev16;
    void *args[] = { &h, &gates, &ghn, &hp, (void *)&gx, (void *)&w, (void *)&bhh, &B, &T, &D, (void *)&J };
    cudaError_t e = cudaLaunchCooperativeKernel((void *)gru_forward_persistent_kernel, dim3(D / J), dim3(PW * 32), args,
                                                smem, s);
    if (e != cudaSuccess) {
        fprintf(stderr, "catchat: persistent GRU forward launch failed: %s\n", cudaGetErrorString(e));
        exit(1);
    }
}

extern "C" void launch_gru_backward_persistent(void *dgx16, void *dgh16, const float *dh_in, const float *h,
                                               const float *gates, const float *ghn, const void *whh16, int B, int T,
                                               int D, float clamp_limit, cudaStream_t s)
{
    size_t smax;
    const int J = pick_units(D, device_sms_and_smem(&smax));
    const size_t smem = bwd_smem(D, B, J);
    cudaFuncSetAttribute(gru_backward_persistent_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    __half *dx = (__half *)dgx16, *dh = (__half *)dgh16;
    const __half *w = (const __half *)whh16;
    void *args[] = { &dx, &dh, (void *)&dh_in, (void *)&h, (void *)&gates, (void *)&ghn, (void *)&w, &B, &T, &D,
                     (void *)&J, &clamp_limit };
    cudaError_t e = cudaLaunchCooperativeKernel((void *)gru_backward_persistent_kernel, dim3(D / J), dim3(PW * 32),
                                                args, smem, s);
    if (e != cudaSuccess) {
        fprintf(stderr, "catchat: persistent GRU backward launch failed: %s\n", cudaGetErrorString(e));
        exit(1);
    }
}
