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
// so the ladder's gru_forward and gru_backward stages hold for both paths.
#include <cooperative_groups.h>
#include <cuda_pipeline.h>
#include <mma.h>
#include "catchat/kernels.h"
#include "common.cuh"
#include "gru_cell.cuh"

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

#define AREG 32  // A fragments a warp can keep in registers (K-part ≤ 512)
#define NI_MAX 4 // (b, j) pairs per thread whose operands are prefetched into registers

typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> afrag;

// The stationary operand A (the block's slice of W_hh, [rows, K] in shared
// memory with row stride lda = K + 8 halfs so fragment rows fall in different
// banks) is, when every warp has one job and its K-part is short enough, also
// held in registers as fragments for the whole launch.
struct mma_plan {
    int tiles, jobs, kpart, nk;
    bool reg;
};

__device__ __forceinline__ mma_plan make_plan(const persist_shape &s, int K)
{
    mma_plan m;
    m.tiles = s.MT * s.NT;
    m.jobs = m.tiles * s.KS;
    m.kpart = K / s.KS;
    m.nk = m.kpart / 16;
    m.reg = m.jobs <= PW && m.nk <= AREG;
    return m;
}

__device__ __forceinline__ void preload_a(afrag *afr, const __half *A, int lda, const persist_shape &s, const mma_plan &m)
{
    const int warp = threadIdx.x / 32;
    if (!m.reg || warp >= m.jobs) return;
    const int mt = (warp % m.tiles) % s.MT, ks = warp / m.tiles;
#pragma unroll
    for (int kk = 0; kk < AREG; kk++)
        if (kk < m.nk) wmma::load_matrix_sync(afr[kk], A + (size_t)mt * 16 * lda + ks * m.kpart + kk * 16, lda);
}

// partial[ks][row][b] = A[rows, K-part] · Bᵀ where B is [B rows, K] FP16 in
// global memory with row stride ldb. Each chunk of BC rows is first copied to
// shared memory by asynchronous 16-byte copies from all threads at once (one
// L2 round trip, not one per fragment nor one per copy: a plain load followed
// by its shared store would stall each thread once per copy), then multiplied
// on tensor cores.
__device__ __forceinline__ void block_mma(float *partial, __half *stage, const __half *A, int lda, const afrag *afr,
                                          const __half *Bm, size_t ldb, const persist_shape &s, const mma_plan &m,
                                          int K, int B)
{
    const int warp = threadIdx.x / 32;
    const int vec_per_row = K / 8;
    for (int b0 = 0; b0 < B; b0 += s.BC) {
        for (int i = threadIdx.x; i < s.BC * vec_per_row; i += blockDim.x) {
            const int r = i / vec_per_row, c = i % vec_per_row;
            __pipeline_memcpy_async(stage + (size_t)r * s.ldk + c * 8, Bm + (size_t)(b0 + r) * ldb + c * 8, 16);
        }
        __pipeline_commit();
        __pipeline_wait_prior(0);
        __syncthreads();
        for (int job = warp; job < m.jobs; job += PW) {
            const int tile = job % m.tiles, ks = job / m.tiles;
            const int mt = tile % s.MT, nt = tile / s.MT;
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
            wmma::fill_fragment(c, 0.f);
            const __half *bbase = stage + (size_t)nt * 16 * s.ldk + ks * m.kpart;
            if (m.reg) {
#pragma unroll
                for (int kk = 0; kk < AREG; kk++) {
                    if (kk < m.nk) {
                        wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> bf;
                        wmma::load_matrix_sync(bf, bbase + kk * 16, s.ldk);
                        wmma::mma_sync(c, afr[kk], bf, c);
                    }
                }
            } else {
                for (int kk = 0; kk < m.nk; kk++) {
                    afrag af;
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> bf;
                    wmma::load_matrix_sync(af, A + (size_t)mt * 16 * lda + ks * m.kpart + kk * 16, lda);
                    wmma::load_matrix_sync(bf, bbase + kk * 16, s.ldk);
                    wmma::mma_sync(c, af, bf, c);
                }
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

// B is the batch group's row count (the launch has D/J slices × groups blocks).
// skip: workbench knob for bench/gru_probe (bit 0: no copy+MMA, bit 1: no gate
// math, bit 2: no grid barrier); 0 in training.
__global__ void __launch_bounds__(PW * 32) gru_forward_persistent_kernel(
    float *h, float *gates, float *ghn, __half *hprev16, const float *gx, const __half *whh, const float *bhh, int B,
    int T, int D, int J, int skip)
{
    cg::grid_group grid = cg::this_grid();
    extern __shared__ __align__(16) unsigned char smem[];
    // Block = (unit slice, batch group): sequences are independent, so a block
    // needs h_{t-1} of its own B rows only. Shift the tensors to the group.
    const int nslices = D / J, slice = blockIdx.x % nslices;
    const size_t shift = (size_t)(blockIdx.x / nslices) * B * T;
    h += shift * D; gates += shift * 3 * D; ghn += shift * D; hprev16 += shift * D; gx += shift * 3 * D;
    const persist_shape s = make_shape(D, B, J, 3 * J, D);
    const int lda = D + 8;
    __half *W = (__half *)smem;                            // [rows, lda]: r rows, z rows, n rows of the slice
    float *partial = (float *)(W + (size_t)s.rows * lda);  // [KS][rows][B]
    __half *stage = (__half *)(partial + (size_t)s.KS * s.rows * B); // [BC][ldk]
    const int u0 = slice * J, BJ = B * J;
    for (int idx = threadIdx.x; idx < s.rows * lda; idx += blockDim.x) {
        const int lr = idx / lda, k = idx % lda;
        const int gate = lr / J, j = lr % J;
        W[idx] = lr < 3 * J && k < D ? whh[((size_t)gate * D + u0 + j) * D + k] : __float2half(0.f);
    }
    // h_{-1} = 0 for the FP16 copy at t = 0
    for (int idx = threadIdx.x; idx < BJ; idx += blockDim.x)
        hprev16[(size_t)(idx / J) * T * D + u0 + idx % J] = __float2half(0.f);
    __syncthreads();
    const mma_plan m = make_plan(s, D);
    afrag afr[AREG];
    preload_a(afr, W, lda, s, m);
    // per-thread state for its first NI_MAX pairs: biases, h_{t-1}, prefetched gx
    float bh[NI_MAX][3], hpv[NI_MAX], gxv[NI_MAX][3];
#pragma unroll
    for (int ii = 0; ii < NI_MAX; ii++) {
        const int idx = threadIdx.x + ii * blockDim.x, u = u0 + idx % J;
        hpv[ii] = 0.f;
        for (int g = 0; g < 3; g++) bh[ii][g] = idx < BJ ? bhh[g * D + u] : 0.f;
    }
    for (int t = 0; t < T; t++) {
#pragma unroll
        for (int ii = 0; ii < NI_MAX; ii++) { // issued now, used after the MMA: the load latency hides
            const int idx = threadIdx.x + ii * blockDim.x;
            if (idx < BJ) {
                const float *gxr = gx + ((size_t)(idx / J) * T + t) * 3 * D + u0 + idx % J;
                gxv[ii][0] = gxr[0];
                gxv[ii][1] = gxr[D];
                gxv[ii][2] = gxr[2 * D];
            }
        }
        if (t > 0 && !(skip & 1))
            block_mma(partial, stage, W, lda, afr, hprev16 + (size_t)t * D, (size_t)T * D, s, m, D, B);
        __syncthreads();
        if (!(skip & 2)) {
#pragma unroll
            for (int ii = 0; ii < NI_MAX; ii++) {
                const int idx = threadIdx.x + ii * blockDim.x;
                if (idx >= BJ) break;
                const int b = idx / J, j = idx % J;
                const float ar = t > 0 ? sum_parts(partial, s, j, b, B) : 0.f;
                const float az = t > 0 ? sum_parts(partial, s, J + j, b, B) : 0.f;
                const float an = t > 0 ? sum_parts(partial, s, 2 * J + j, b, B) : 0.f;
                hpv[ii] = gru_fwd_cell(h, gates, ghn, hprev16, gxv[ii], bh[ii], ar, az, an, hpv[ii], (size_t)b * T + t,
                                   u0 + j, D, T, t);
            }
            for (int idx = threadIdx.x + NI_MAX * blockDim.x; idx < BJ; idx += blockDim.x) { // large B·J
                const int b = idx / J, j = idx % J, u = u0 + j;
                const size_t row = (size_t)b * T + t;
                const float g3[3] = { gx[row * 3 * D + u], gx[row * 3 * D + D + u], gx[row * 3 * D + 2 * D + u] };
                const float b3[3] = { bhh[u], bhh[D + u], bhh[2 * D + u] };
                const float ar = t > 0 ? sum_parts(partial, s, j, b, B) : 0.f;
                const float az = t > 0 ? sum_parts(partial, s, J + j, b, B) : 0.f;
                const float an = t > 0 ? sum_parts(partial, s, 2 * J + j, b, B) : 0.f;
                gru_fwd_cell(h, gates, ghn, hprev16, g3, b3, ar, az, an, t > 0 ? h[(row - 1) * D + u] : 0.f, row, u, D, T, t);
            }
        }
        if (!(skip & 4)) grid.sync(); // h_t of every block is written before anyone reads it
    }
}

__global__ void __launch_bounds__(PW * 32) gru_backward_persistent_kernel(
    __half *dgx16, __half *dgh16, const float *dh_in, const float *h, const float *gates, const float *ghn,
    const __half *whh, int B, int T, int D, int J, float clamp_limit)
{
    cg::grid_group grid = cg::this_grid();
    extern __shared__ __align__(16) unsigned char smem[];
    const int nslices = D / J, slice = blockIdx.x % nslices;
    const size_t shift = (size_t)(blockIdx.x / nslices) * B * T; // this block's batch group, as in the forward
    dgx16 += shift * 3 * D; dgh16 += shift * 3 * D; dh_in += shift * D; h += shift * D; gates += shift * 3 * D;
    ghn += shift * D;
    const persist_shape s = make_shape(D, B, J, J, 3 * D);
    const int lda = 3 * D + 8;
    __half *Wt = (__half *)smem;                            // [rows, lda] = W_hh[:, slice]ᵀ
    float *partial = (float *)(Wt + (size_t)s.rows * lda);  // [KS][rows][B]
    float *zg = partial + (size_t)s.KS * s.rows * B;        // [B, J]: z ⊙ g of the step after (pairs past NI_MAX)
    __half *stage = (__half *)(zg + (size_t)B * J);         // [BC][ldk]
    const int u0 = slice * J, BJ = B * J;
    for (int idx = threadIdx.x; idx < s.rows * lda; idx += blockDim.x) {
        const int j = idx / lda, r = idx % lda;
        Wt[idx] = j < J && r < 3 * D ? whh[(size_t)r * D + u0 + j] : __float2half(0.f);
    }
    for (int idx = threadIdx.x; idx < BJ; idx += blockDim.x) zg[idx] = 0.f;
    __syncthreads();
    const mma_plan m = make_plan(s, 3 * D);
    afrag afr[AREG];
    preload_a(afr, Wt, lda, s, m);
    float zgv[NI_MAX], pre[NI_MAX][6]; // z⊙g carried; prefetched dh_in, r, z, n, ghn, h_{t-1}
#pragma unroll
    for (int ii = 0; ii < NI_MAX; ii++) zgv[ii] = 0.f;
    for (int t = T - 1; t >= 0; t--) {
#pragma unroll
        for (int ii = 0; ii < NI_MAX; ii++) {
            const int idx = threadIdx.x + ii * blockDim.x;
            if (idx < BJ) {
                gru_bwd_operands(pre[ii], dh_in, gates, ghn, h, (size_t)(idx / J) * T + t, u0 + idx % J, D, t);
            }
        }
        if (t < T - 1)
            block_mma(partial, stage, Wt, lda, afr, dgh16 + (size_t)(t + 1) * 3 * D, (size_t)T * 3 * D, s, m, 3 * D, B);
        __syncthreads();
#pragma unroll
        for (int ii = 0; ii < NI_MAX; ii++) {
            const int idx = threadIdx.x + ii * blockDim.x;
            if (idx >= BJ) break;
            const int b = idx / J, j = idx % J;
            float g = pre[ii][0] + zgv[ii];
            if (t < T - 1) g += sum_parts(partial, s, j, b, B);
            zgv[ii] = gru_bwd_cell(dgx16, dgh16, g, clamp_limit, pre[ii][1], pre[ii][2], pre[ii][3], pre[ii][4], pre[ii][5],
                               (size_t)b * T + t, u0 + j, D);
        }
        for (int idx = threadIdx.x + NI_MAX * blockDim.x; idx < BJ; idx += blockDim.x) { // large B·J
            const int b = idx / J, j = idx % J, u = u0 + j;
            const size_t row = (size_t)b * T + t;
            float g = dh_in[row * D + u] + zg[idx];
            if (t < T - 1) g += sum_parts(partial, s, j, b, B);
            const float *gt = gates + row * 3 * D;
            zg[idx] = gru_bwd_cell(dgx16, dgh16, g, clamp_limit, gt[u], gt[D + u], gt[2 * D + u], ghn[row * D + u],
                               t > 0 ? h[(row - 1) * D + u] : 0.f, row, u, D);
        }
        grid.sync(); // dgh_t of every block is written before step t-1 reads it
    }
}

// The grid: D/J unit slices × B/Bl batch groups, one block per SM. Every block
// reads its group's h (or dgh) each step, so small groups mean small copies;
// J is then the fewest units that keep the grid within the block limit: one
// block per SM, at most 128 (bench/gru_probe sweeps the limit by lowering
// caps->sm_count).
#define PERSIST_MAX_BLOCKS 128

static size_t fwd_smem(int D, int B, int J)
{
    persist_shape s = make_shape(D, B, J, 3 * J, D);
    return (size_t)s.rows * (D + 8) * sizeof(__half) + (size_t)s.KS * s.rows * B * sizeof(float) +
           (size_t)s.BC * s.ldk * sizeof(__half);
}

static size_t bwd_smem(int D, int B, int J)
{
    persist_shape s = make_shape(D, B, J, J, 3 * D);
    return (size_t)s.rows * (3 * D + 8) * sizeof(__half) + (size_t)s.KS * s.rows * B * sizeof(float) +
           (size_t)B * J * sizeof(float) + (size_t)s.BC * s.ldk * sizeof(__half);
}

// Returns 0 when no split fits (the caller then takes the per-step path).
static int pick_split(const gpu_caps *caps, int B, int D, int *J_out, int *Bl_out)
{
    const size_t smax = (size_t)caps->smem_per_block_optin;
    const int sms = caps->cooperative_launch ? caps->sm_count : 0;
    if (sms == 0 || B % 16 != 0 || D % 16 != 0) return 0;
    const int limit = sms < PERSIST_MAX_BLOCKS ? sms : PERSIST_MAX_BLOCKS;
    for (int Bl = 16; Bl <= B; Bl += 16) {
        if (B % Bl) continue;
        const int groups = B / Bl;
        if (groups > limit) continue;
        int J = 0;
        for (int j = 1; j <= D; j++)
            if (D % j == 0 && (D / j) * groups <= limit) { J = j; break; }
        if (!J || 3 * J > 48) continue; // keep the forward slice within three MMA row tiles
        if (fwd_smem(D, Bl, J) > smax || bwd_smem(D, Bl, J) > smax) continue;
        *J_out = J;
        *Bl_out = Bl;
        return 1;
    }
    return 0;
}

extern "C" int gru_persistent_supported(const gpu_caps *caps, int B, int T, int D)
{
    int J, Bl;
    return T >= 1 && pick_split(caps, B, D, &J, &Bl);
}

extern "C" void launch_gru_forward_persistent_probe(float *h, float *gates, float *ghn, void *hprev16,
                                                    const float *gx, const void *whh16, const float *bhh, int B, int T,
                                                    int D, int skip, const gpu_caps *caps, cudaStream_t s)
{
    int J, Bl;
    if (!pick_split(caps, B, D, &J, &Bl)) {
        fprintf(stderr, "catchat: persistent GRU forward: unsupported shape B=%d D=%d\n", B, D);
        exit(1);
    }
    const size_t smem = fwd_smem(D, Bl, J);
    cudaFuncSetAttribute(gru_forward_persistent_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    const __half *w = (const __half *)whh16;
    __half *hp = (__half *)hprev16;
    void *args[] = { &h, &gates, &ghn, &hp, (void *)&gx, (void *)&w, (void *)&bhh, &Bl, &T, &D, (void *)&J, &skip };
    cudaError_t e = cudaLaunchCooperativeKernel((void *)gru_forward_persistent_kernel, dim3(D / J * (B / Bl)),
                                                dim3(PW * 32), args, smem, s);
    if (e != cudaSuccess) {
        fprintf(stderr, "catchat: persistent GRU forward launch failed: %s\n", cudaGetErrorString(e));
        exit(1);
    }
}

extern "C" void launch_gru_forward_persistent(float *h, float *gates, float *ghn, void *hprev16, const float *gx,
                                              const void *whh16, const float *bhh, int B, int T, int D,
                                              const gpu_caps *caps, cudaStream_t s)
{
    launch_gru_forward_persistent_probe(h, gates, ghn, hprev16, gx, whh16, bhh, B, T, D, 0, caps, s);
}

extern "C" void launch_gru_backward_persistent(void *dgx16, void *dgh16, const float *dh_in, const float *h,
                                               const float *gates, const float *ghn, const void *whh16, int B, int T,
                                               int D, float clamp_limit, const gpu_caps *caps, cudaStream_t s)
{
    int J, Bl;
    if (!pick_split(caps, B, D, &J, &Bl)) {
        fprintf(stderr, "catchat: persistent GRU backward: unsupported shape B=%d D=%d\n", B, D);
        exit(1);
    }
    const size_t smem = bwd_smem(D, Bl, J);
    cudaFuncSetAttribute(gru_backward_persistent_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    __half *dx = (__half *)dgx16, *dh = (__half *)dgh16;
    const __half *w = (const __half *)whh16;
    void *args[] = { &dx, &dh, (void *)&dh_in, (void *)&h, (void *)&gates, (void *)&ghn, (void *)&w, &Bl, &T, &D,
                     (void *)&J, &clamp_limit };
    cudaError_t e = cudaLaunchCooperativeKernel((void *)gru_backward_persistent_kernel, dim3(D / J * (B / Bl)),
                                                dim3(PW * 32), args, smem, s);
    if (e != cudaSuccess) {
        fprintf(stderr, "catchat: persistent GRU backward launch failed: %s\n", cudaGetErrorString(e));
        exit(1);
    }
}
