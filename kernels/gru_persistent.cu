// Grid-persistent GRU recurrence (forward and BPTT) for every GPU from sm_80
// on: no clusters, no grid barrier. One cooperative launch covers all T steps
// of a layer. The grid is G batch groups × N CTAs; CTA c of a group owns the
// J = 16·MU hidden units [c·J, (c+1)·J), and its slice of the stationary
// operand stays on chip for the whole launch: in registers first, then in
// shared memory, the rest (only where neither holds it: wide models on small
// GPUs) read from L2 each step.
//
// Forward, step t: acc[3J, Bg] = W_hh[rows r, z, n of the slice] · h_{t-1}ᵀ.
// Backward, step t: acc[J, Bg] = W_hhᵀ[slice rows] · dgh_{t+1}ᵀ (K = 3D), from
//   a transposed FP16 copy of W_hh made by the launcher.
// The moving operand (h_{t-1} or dgh_{t+1}, FP16, all D or 3D columns of the
// group's Bg sequences) is read from L2 by every CTA: each warp streams its
// own K-slice through a small ring of shared memory with cp.async, so the
// loads of the whole slice are in flight at once and need no registers. The
// 8 warps split K; their partial sums meet in shared memory and are added in
// warp order (deterministic), then each thread runs the gate math of its
// (sequence, unit) pairs: the same gru_cell.cuh functions as every other path
// (the sums' order differs from the per-step loop's, so the paths agree to
// rounding, each one bit-reproducible on its own).
//
// Handshake: after a CTA has stored its slice of step t it adds 1 to its
// group's counter (release, GPU scope); a CTA starts step t+1 once the counter
// reaches N·(t+1) (acquire). A CTA waits only for its own group, values never
// go through atomics, and the sums' order is fixed, so results are
// bit-reproducible. The cooperative launch guarantees that all CTAs are
// resident, so the spin cannot wait on a CTA that never runs, and each
// launch (one per lane) is resident on its own: lanes cannot deadlock each
// other.
//
// The k-pair layout: a lane's 16-byte load of 8 consecutive K values of a row
// feeds two m16n8k16 steps. Lane (g, c) holds K = kb + 8c .. kb + 8c + 7 of A
// row g (and g + 8) and of B column g; logical k = 2c, 2c+1 ↔ halfs 0, 1,
// 2c+8, 2c+9 ↔ halfs 2, 3 in the first step, halfs 4..7 in the second. The
// same permutation of K on both operands leaves the product unchanged.
#include <stdint.h>
#include "catchat/kernels.h"
#include "common.cuh"
#include "gru_cell.cuh"
#include "mma.cuh"

#define GP_WARPS 8
#define GP_THREADS (GP_WARPS * 32)
#define GP_STAGES 3 // ring depth of the moving operand, per warp
#define GP_RS 20    // floats a column of 16 units takes in the reduction buffer (padded: no bank conflicts)

// What the host chose for one launch; the same struct on both sides.
struct gp_plan {
    int D, T, B;   // B: sequences in all (the last group may be partly empty)
    int t0, t1;    // the window of steps this launch runs (gru_shape)
    int wT, wt0;   // gx, gates, ghn, dgx16, dgh16: steps a sequence and the first step (gru_shape: T, 0 for the layer's)
    const __half *dgh_next; // the BPTT's dgh of step t1 where the window has buffers of its own (gru_grads.dgh16_next)
    int K, KP;     // reduction length (D forward, 3D backward) and its 32-wide k-pairs
    int MU, J, N;  // 16-unit blocks a CTA owns, units a CTA owns, CTAs a group
    int G, Bg, NT; // groups, sequences a group, 8-sequence tiles a CTA computes (NT·8 ≥ Bg)
    int ks;        // k-pairs per warp held in shared memory (after the register ones)
    int Q;         // CTAs that split the K of a slice's unit blocks (1: each CTA the whole K; split kernels below)
    int l2_bytes;  // what a CTA reads from L2 a step: the moving operand and any streamed part of A
};

// Register budget: 8 registers per (row tile, k-pair) of A, 4 per accumulator
// tile; A + accumulators up to 144 so the pairs' state and addresses fit in
// 255 without spills. 0: all of A in shared memory or L2 (wide slices).
__host__ __device__ constexpr int gp_kr(int MT, int NT)
{
    return MT >= 6 && MT * NT >= 24 ? 0 // wide slices at 24 tiles: a register k-pair would spill
           : (144 - 4 * MT * NT) / (8 * MT) < 0 ? 0
           : (144 - 4 * MT * NT) / (8 * MT) < 12 / MT ? (144 - 4 * MT * NT) / (8 * MT)
                                                      : 12 / MT;
}

// One thread of the CTA, after a __syncthreads that follows every store the
// peers read. The release is cumulative: the CTA's stores, ordered before it
// by the barrier, are visible to whoever acquires the count (no separate
// fence; the same pattern as CUTLASS's inter-CTA barrier).
__device__ __forceinline__ void gp_signal(unsigned *flag)
{
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;\n" ::"l"(flag) : "memory");
}

// Lane 0 of each warp, then __syncwarp: a warp starts its loads as soon as
// the count is reached, without waiting for the CTA's other warps (the
// partial sums they read last step were read before the signal's barrier).
__device__ __forceinline__ void gp_wait(const unsigned *flag, unsigned target)
{
    unsigned v;
    do {
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(flag) : "memory");
    } while (v < target);
}

// The per-warp ring of the moving operand: stage i holds k-pair kp = warp + 8·i
// of the NT·8 sequences, one 16-byte chunk per (tile, lane).
template <int NT>
__device__ __forceinline__ void gp_issue(uint4 *ring, int i, int kpw, const __half *Bm, size_t ldb, int nvalid,
                                         int warp, int lane)
{
    if (i < kpw) {
        const int kp = warp + GP_WARPS * i, g = lane >> 2, c = lane & 3;
        uint4 *st = ring + (i % GP_STAGES) * NT * 32;
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            const int n = nt * 8 + g;
            const __half *src = Bm + (size_t)(n < nvalid ? n : 0) * ldb + kp * 32 + 8 * c;
            cp_async16(st + nt * 32 + lane, src, n < nvalid);
        }
    }
    cp_async_commit(); // empty groups keep the count the waits rely on
}

template <int MT, int NT>
__device__ __forceinline__ void gp_mma_pair(float (&acc)[MT][NT][4], const uint4 (&a)[MT][2], const uint4 *stage,
                                            int lane)
{
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        const uint4 b = stage[nt * 32 + lane];
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            mma16816(acc[mt][nt], make_uint4(a[mt][0].x, a[mt][1].x, a[mt][0].y, a[mt][1].y), b.x, b.y);
            mma16816(acc[mt][nt], make_uint4(a[mt][0].z, a[mt][1].z, a[mt][0].w, a[mt][1].w), b.z, b.w);
        }
    }
}

// A fragments of k-pair kp for the MT row tiles: rows arow[mt] + g and + 8.
template <int MT>
__device__ __forceinline__ void gp_load_a(uint4 (&a)[MT][2], const __half *A, const int (&arow)[MT], int lda, int kp,
                                          int lane)
{
    const int g = lane >> 2, c = lane & 3;
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        const __half *p = A + (size_t)(arow[mt] + g) * lda + kp * 32 + 8 * c;
        a[mt][0] = __ldg((const uint4 *)p);
        a[mt][1] = __ldg((const uint4 *)(p + (size_t)8 * lda));
    }
}

template <int MT, int NT> __device__ __forceinline__ void gp_zero(float (&acc)[MT][NT][4])
{
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++) acc[mt][nt][0] = acc[mt][nt][1] = acc[mt][nt][2] = acc[mt][nt][3] = 0.f;
}

// A fragments of the warp's k-pair kp past the register tier: its slot is of
// the shared memory tier (slot < ks), else read from L2.
template <int MT>
__device__ __forceinline__ void gp_tier_a(uint4 (&a)[MT][2], const uint4 *asm_, int slot, int ks, const __half *A,
                                          const int (&arow)[MT], int lda, int kp, int lane)
{
    if (slot < ks) {
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            a[mt][0] = asm_[((slot * MT + mt) * 32 + lane) * 2];
            a[mt][1] = asm_[((slot * MT + mt) * 32 + lane) * 2 + 1];
        }
    } else {
        gp_load_a<MT>(a, A, arow, lda, kp, lane);
    }
}

// acc = the warp's K-slice of A_slice · Bᵀ for one step. areg: the first KR
// k-pairs; asm_: the next plan.ks (shared memory, [i][mt][lane][2]); the rest from A.
template <int MT, int NT, int KR, int KRA>
__device__ __forceinline__ void gp_step(float (&acc)[MT][NT][4], const uint4 (&areg)[KRA][MT][2], const uint4 *asm_,
                                        const __half *A, const int (&arow)[MT], int lda, uint4 *ring,
                                        const __half *Bm, size_t ldb, int nvalid, int kpw, int ks, int warp, int lane)
{
    gp_zero<MT, NT>(acc);
#pragma unroll
    for (int s = 0; s < GP_STAGES - 1; s++) gp_issue<NT>(ring, s, kpw, Bm, ldb, nvalid, warp, lane);
#pragma unroll
    for (int i = 0; i < KR; i++) {
        if (i < kpw) {
            cp_async_wait<GP_STAGES - 2>();
            __syncwarp();
            gp_issue<NT>(ring, i + GP_STAGES - 1, kpw, Bm, ldb, nvalid, warp, lane);
            gp_mma_pair<MT, NT>(acc, areg[i], ring + (i % GP_STAGES) * NT * 32, lane);
        }
    }
    for (int i = KR; i < kpw; i++) {
        cp_async_wait<GP_STAGES - 2>();
        __syncwarp();
        gp_issue<NT>(ring, i + GP_STAGES - 1, kpw, Bm, ldb, nvalid, warp, lane);
        uint4 a[MT][2];
        gp_tier_a<MT>(a, asm_, i - KR, ks, A, arow, lda, warp + GP_WARPS * i, lane);
        gp_mma_pair<MT, NT>(acc, a, ring + (i % GP_STAGES) * NT * 32, lane);
    }
    cp_async_wait<0>();
    __syncwarp(); // the ring is refilled by the next step
}

// Loads the stationary operand: registers, then this warp's shared memory
// tier. The warp's i-th k-pair is kfirst + kstep·i.
template <int MT, int KR, int KRA>
__device__ __forceinline__ void gp_load_stationary(uint4 (&areg)[KRA][MT][2], uint4 *asm_, const __half *A,
                                                   const int (&arow)[MT], int lda, int kpw, int ks, int kfirst,
                                                   int kstep, int lane)
{
#pragma unroll
    for (int i = 0; i < KR; i++)
        if (i < kpw) gp_load_a<MT>(areg[i], A, arow, lda, kfirst + kstep * i, lane);
    for (int i = KR; i < kpw && i - KR < ks; i++) {
        uint4 a[MT][2];
        gp_load_a<MT>(a, A, arow, lda, kfirst + kstep * i, lane);
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            asm_[(((i - KR) * MT + mt) * 32 + lane) * 2] = a[mt][0];
            asm_[(((i - KR) * MT + mt) * 32 + lane) * 2 + 1] = a[mt][1];
        }
    }
}

// Partial sums in two rounds where a warp holds 24 tiles (15 KB of partials a
// warp: a 99 KB block takes the 6·4 and 12·2 tile shapes only this way; at 3·8
// the ring, 12 KB a warp, still keeps that shape off 99 KB parts). Those
// kernels also store a step's outputs as they go: holding them until after
// the signal would spill.
__host__ __device__ constexpr int gp_rounds(int MT, int NT) { return MT * NT >= 24 ? 2 : 1; }

// Each warp has one region of shared memory: its ring while it multiplies,
// then its partial sums red[mt][column n][unit row] (row stride GP_RS) once
// its ring is drained. Other warps read the partials only after a barrier, and
// the ring is refilled only after the next one, so the two never meet. Where
// all of a warp's partials would not fit (a 99 KB block, 24 tiles), they go
// in two rounds of half the sequence tiles each.
__host__ __device__ inline size_t gp_warp_bytes(int MT, int NT)
{
    const int rounds = gp_rounds(MT, NT);
    const size_t red = (size_t)MT * (NT / rounds) * 8 * GP_RS * sizeof(float), ring = (size_t)GP_STAGES * NT * 32 * 16;
    return red > ring ? red : ring;
}

// Stores the tiles of round hf (all of them when rounds = 1).
template <int MT, int NT>
__device__ __forceinline__ void gp_store_partial(float *red, const float (&acc)[MT][NT][4], int lane, int rounds, int hf)
{
    const int g = lane >> 2, c = lane & 3, ntr = NT / rounds;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            if (nt / ntr != hf) continue;
            float *r = red + ((size_t)mt * ntr * 8 + (nt - hf * ntr) * 8 + 2 * c) * GP_RS;
            r[g] = acc[mt][nt][0];
            r[GP_RS + g] = acc[mt][nt][1];
            r[g + 8] = acc[mt][nt][2];
            r[GP_RS + g + 8] = acc[mt][nt][3];
        }
}

// The warps' partials of (row tile mt, column n of the round, row) added in warp order.
__device__ __forceinline__ float gp_sum(const unsigned char *regions, size_t wb, int cols, int mt, int n, int row)
{
    const size_t off = ((size_t)mt * cols + n) * GP_RS + row;
    float v = 0.f;
#pragma unroll
    for (int w = 0; w < GP_WARPS; w++) v += ((const float *)(regions + w * wb))[off];
    return v;
}

// Shared memory of a launch, in bytes: the warps' regions, the A tier, the pairs' state.
static __host__ __device__ size_t gp_smem_bytes(int MT, int NT, int ks, int J)
{
    return (size_t)GP_WARPS * gp_warp_bytes(MT, NT) + (size_t)GP_WARPS * ks * MT * 32 * 32 +
           (size_t)NT * 8 * J * sizeof(float);
}

struct gp_smem {
    unsigned char *regions; // the warps' regions
    size_t wb;              // bytes of one
    uint4 *ring;            // this warp's region as a ring
    float *red;             // this warp's region as partial sums
    uint4 *asm_;            // this warp's A tier
    float *state;           // [NT·8][J]: h_{t-1} (forward) or z ⊙ g of the step after (backward), FP32
};

template <int MT, int NT>
__device__ __forceinline__ gp_smem gp_carve(unsigned char *smem, int ks, int J, int warp)
{
    gp_smem m;
    m.wb = gp_warp_bytes(MT, NT);
    m.regions = smem;
    m.ring = (uint4 *)(smem + warp * m.wb);
    m.red = (float *)(smem + warp * m.wb);
    uint4 *atier = (uint4 *)(smem + GP_WARPS * m.wb);
    m.asm_ = atier + (size_t)warp * ks * MT * 32 * 2;
    m.state = (float *)(atier + (size_t)GP_WARPS * ks * MT * 32 * 2);
    return m;
}

// The BPTT's moving operand at step t: dgh of step t + 1 for the group's
// first sequence b0, rows P.wT·K apart. At a window's first step (t + 1 = t1)
// with buffers of its own that row is the next window's first (P.dgh_next).
__device__ __forceinline__ const __half *gp_dgh_after(const __half *dgh16, const gp_plan &P, int b0, int t)
{
    const int K = 3 * P.D;
    if (t + 1 == P.t1 && P.dgh_next) return P.dgh_next + (size_t)b0 * P.wT * K;
    return dgh16 + gru_wrow(b0, t + 1, P.wT, P.wt0) * K;
}

// PP pairs (sequence n, unit j) per thread: pair p = threadIdx.x + 256·i, j = p % J, n = p / J.
template <int MU, int NT> struct gp_pairs {
    static constexpr int PP = MU * NT / 2; // NT·8·16·MU pairs over 256 threads
};


template <int MU, int NT>
__global__ void __launch_bounds__(GP_THREADS, 1)
    gru_forward_persistent_kernel(float *h, float *gates, float *ghn, __half *hprev16, const float *gx, const __half *whh,
                            const float *bhh, unsigned *flags, gp_plan P)
{
    const int t0 = P.t0, t1 = P.t1;
    constexpr int MT = 3 * MU, KR = gp_kr(MT, NT), KRA = KR > 0 ? KR : 1, PP = gp_pairs<MU, NT>::PP;
    extern __shared__ __align__(16) unsigned char smem[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (blockIdx.x >= P.G * P.N) return; // only a grid the runtime should have refused has more (gp_launch)
    const int slice = blockIdx.x % P.N, group = blockIdx.x / P.N;
    const int b0 = group * P.Bg, nvalid = min(P.Bg, P.B - b0);
    const int u0 = slice * P.J, D = P.D, T = P.T, J = P.J;
    const int kpw = (P.KP - warp + GP_WARPS - 1) / GP_WARPS;
    gp_smem m = gp_carve<MT, NT>(smem, P.ks, J, warp);
    int arow[MT]; // row tile (mu, gate) = W_hh rows gate·D + u0 + 16·mu ...
#pragma unroll
    for (int mt = 0; mt < MT; mt++) arow[mt] = (mt % 3) * D + u0 + 16 * (mt / 3);
    uint4 areg[KRA][MT][2];
    gp_load_stationary<MT, KR, KRA>(areg, m.asm_, whh, arow, D, kpw, P.ks, warp, GP_WARPS, lane);
    unsigned *flag = flags + group;
#pragma unroll
    for (int i = 0; i < PP; i++) {
        const int p = threadIdx.x + GP_THREADS * i, j = p % J, n = p / J;
        // a window after the first starts from the h_{t0-1} the window before stored (its FP16
        // copy, hprev16 row t0, is where the first step's product reads it)
        m.state[p] = t0 > 0 && n < nvalid ? h[((size_t)(b0 + n) * T + t0 - 1) * D + u0 + j] : 0.f;
        if (t0 == 0 && n < nvalid) hprev16[(size_t)(b0 + n) * T * D + u0 + j] = __float2half(0.f); // h_{-1}
    }
    float acc[MT][NT][4];
    for (int t = t0; t < t1; t++) {
        float gxv[PP][3]; // issued before the wait, used after it
#pragma unroll
        for (int i = 0; i < PP; i++) {
            const int p = threadIdx.x + GP_THREADS * i, j = p % J, n = p / J;
            if (n < nvalid) {
                const float *gr = gx + gru_wrow(b0 + n, t, P.wT, P.wt0) * 3 * D + u0 + j;
                gxv[i][0] = gr[0];
                gxv[i][1] = gr[D];
                gxv[i][2] = gr[2 * D];
            }
        }
        if (t > 0) {
            if (lane == 0 && t > t0) gp_wait(flag, (unsigned)(P.N * (t - t0)));
            __syncwarp();
            gp_step<MT, NT, KR, KRA>(acc, areg, m.asm_, whh, arow, D, m.ring, hprev16 + (size_t)b0 * T * D + (size_t)t * D,
                                (size_t)T * D, nvalid, kpw, P.ks, warp, lane);
        }
        constexpr int ROUNDS = gp_rounds(MT, NT);
        constexpr bool DEFER = ROUNDS == 1; // outputs the peers do not read go after the signal
        gru_fwd_vals v[DEFER ? PP : 1];
        const int cols = NT * 8 / ROUNDS; // sequences a round
#pragma unroll
        for (int hf = 0; hf < ROUNDS; hf++) {
            if (hf) __syncthreads(); // the first round's partials are read
            if (t > 0) gp_store_partial<MT, NT>(m.red, acc, lane, ROUNDS, hf);
            __syncthreads();
#pragma unroll
            for (int i = 0; i < PP; i++) {
                const int p = threadIdx.x + GP_THREADS * i, j = p % J, n = p / J;
                if (n >= nvalid || n / cols != hf) continue;
                const int mu = j / 16, r = j % 16, nl = n - hf * cols;
                const float ar = t > 0 ? gp_sum(m.regions, m.wb, cols, 3 * mu, nl, r) : 0.f;
                const float az = t > 0 ? gp_sum(m.regions, m.wb, cols, 3 * mu + 1, nl, r) : 0.f;
                const float an = t > 0 ? gp_sum(m.regions, m.wb, cols, 3 * mu + 2, nl, r) : 0.f;
                const float bh[3] = { __ldg(bhh + u0 + j), __ldg(bhh + D + u0 + j), __ldg(bhh + 2 * D + u0 + j) };
                const gru_fwd_vals vi = gru_fwd_math(gxv[i], bh, ar, az, an, m.state[p]);
                m.state[p] = vi.h;
                // the peers need only the FP16 h_t: published first, so the signal waits for nothing else
                if (t + 1 < T) hprev16[((size_t)(b0 + n) * T + t + 1) * D + u0 + j] = __float2half_rn(vi.h);
                if constexpr (DEFER) v[i] = vi;
                else gru_fwd_store_states(h, gates, ghn, vi, (size_t)(b0 + n) * T + t, gru_wrow(b0 + n, t, P.wT, P.wt0),
                                          u0 + j, D);
            }
        }
        __syncthreads(); // every h_t store of the CTA precedes the signal; red is free again
        if (threadIdx.x == 0 && t + 1 < t1) gp_signal(flag);
        if constexpr (DEFER) {
#pragma unroll
            for (int i = 0; i < PP; i++) { // what only the backward reads, after the signal
                const int p = threadIdx.x + GP_THREADS * i, j = p % J, n = p / J;
                if (n < nvalid)
                    gru_fwd_store_states(h, gates, ghn, v[i], (size_t)(b0 + n) * T + t,
                                         gru_wrow(b0 + n, t, P.wT, P.wt0), u0 + j, D);
            }
        }
    }
}

template <int MU, int NT>
__global__ void __launch_bounds__(GP_THREADS, 1)
    gru_backward_persistent_kernel(__half *dgx16, __half *dgh16, const float *dh_in, const float *h, const float *gates,
                             const float *ghn, const __half *whh_t, float clamp_limit, float *carry_io,
                             unsigned *flags, gp_plan P)
{
    const int t0 = P.t0, t1 = P.t1;
    constexpr int MT = MU, KR = gp_kr(MT, NT), KRA = KR > 0 ? KR : 1, PP = gp_pairs<MU, NT>::PP;
    extern __shared__ __align__(16) unsigned char smem[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (blockIdx.x >= P.G * P.N) return; // only a grid the runtime should have refused has more (gp_launch)
    const int slice = blockIdx.x % P.N, group = blockIdx.x / P.N;
    const int b0 = group * P.Bg, nvalid = min(P.Bg, P.B - b0);
    const int u0 = slice * P.J, D = P.D, T = P.T, J = P.J, K = 3 * D;
    const int kpw = (P.KP - warp + GP_WARPS - 1) / GP_WARPS;
    gp_smem m = gp_carve<MT, NT>(smem, P.ks, J, warp);
    int arow[MT]; // W_hhᵀ rows = units u0 + 16·mu ...
#pragma unroll
    for (int mt = 0; mt < MT; mt++) arow[mt] = u0 + 16 * mt;
    uint4 areg[KRA][MT][2];
    gp_load_stationary<MT, KR, KRA>(areg, m.asm_, whh_t, arow, K, kpw, P.ks, warp, GP_WARPS, lane);
    unsigned *flag = flags + group;
    // z⊙g of step t1 where a window after this one ran first (its dgh_{t1} is in dgh16)
#pragma unroll
    for (int i = 0; i < PP; i++) {
        const int p = threadIdx.x + GP_THREADS * i, j = p % J, n = p / J;
        m.state[p] = t1 < T && n < nvalid ? carry_io[(size_t)(b0 + n) * D + u0 + j] : 0.f;
    }
    float acc[MT][NT][4];
    for (int t = t1 - 1; t >= t0; t--) {
        float pre[PP][6]; // dh_in, r, z, n, ghn, h_{t-1}: issued before the wait
#pragma unroll
        for (int i = 0; i < PP; i++) {
            const int p = threadIdx.x + GP_THREADS * i, j = p % J, n = p / J;
            if (n < nvalid)
                gru_bwd_operands(pre[i], dh_in, gates, ghn, h, (size_t)(b0 + n) * T + t,
                                 gru_wrow(b0 + n, t, P.wT, P.wt0), u0 + j, D, t);
        }
        if (t < T - 1) {
            if (lane == 0 && t < t1 - 1) gp_wait(flag, (unsigned)(P.N * (t1 - 1 - t)));
            __syncwarp();
            gp_step<MT, NT, KR, KRA>(acc, areg, m.asm_, whh_t, arow, K, m.ring, gp_dgh_after(dgh16, P, b0, t),
                                (size_t)P.wT * K, nvalid, kpw, P.ks, warp, lane);
        }
        constexpr int ROUNDS = gp_rounds(MT, NT);
        gru_bwd_vals v[PP];
        const int cols = NT * 8 / ROUNDS; // sequences a round
#pragma unroll
        for (int hf = 0; hf < ROUNDS; hf++) {
            if (hf) __syncthreads(); // the first round's partials are read
            if (t < T - 1) gp_store_partial<MT, NT>(m.red, acc, lane, ROUNDS, hf);
            __syncthreads();
#pragma unroll
            for (int i = 0; i < PP; i++) {
                const int p = threadIdx.x + GP_THREADS * i, j = p % J, n = p / J;
                if (n >= nvalid || n / cols != hf) continue;
                float g = pre[i][0] + m.state[p];
                if (t < T - 1) g += gp_sum(m.regions, m.wb, cols, j / 16, n - hf * cols, j % 16);
                v[i] = gru_bwd_math(g, clamp_limit, pre[i][1], pre[i][2], pre[i][3], pre[i][4], pre[i][5]);
                m.state[p] = v[i].zg;
                // the peers need only dgh_t: published first, so the signal waits for nothing else
                gru_bwd_store_dgh(dgh16, v[i], gru_wrow(b0 + n, t, P.wT, P.wt0), u0 + j, D);
            }
        }
        __syncthreads();
        if (threadIdx.x == 0 && t > t0) gp_signal(flag);
#pragma unroll
        for (int i = 0; i < PP; i++) { // the input-side gradients, after the signal
            const int p = threadIdx.x + GP_THREADS * i, j = p % J, n = p / J;
            if (n >= nvalid) continue;
            gru_bwd_store_dgx(dgx16, v[i], gru_wrow(b0 + n, t, P.wT, P.wt0), u0 + j, D);
        }
    }
    if (t0 > 0) // z⊙g of step t0, for the window before
#pragma unroll
        for (int i = 0; i < PP; i++) {
            const int p = threadIdx.x + GP_THREADS * i, j = p % J, n = p / J;
            if (n < nvalid) carry_io[(size_t)(b0 + n) * D + u0 + j] = m.state[p];
        }
}

// ---- Split K: the stationary operand of one unit block over several CTAs ----
//
// Where one copy of W_hh needs the whole GPU (D=2048: 24 MB), every CTA of
// the kernels above reads the group's whole moving operand each step (256 KB
// of h forward, 768 KB of gate gradients backward, on every SM), and that
// broadcast sets the step time. These kernels cut K instead: Q CTAs (a slice)
// share Q blocks of 16 units, CTA kq holding the K range [kq, kq+1)·K/Q of
// all Q blocks' rows. A CTA reads only its K/Q columns of the moving operand,
// once into shared memory for all its warps (warp w: unit block w / WK of the
// slice, k-pairs w % WK + WK·i of the range, WK = 8 / Q), so a warp holds the
// same slice of W_hh as in the kernels above. Each CTA then publishes its
// partial sums of the Q blocks (the WK warps of a block added in warp order
// first) to L2, the slice's CTAs meet on a second counter, and CTA kq adds the
// Q partials of block kq in kq order and runs that block's gate math. Every
// sum has a fixed order: bit-reproducible, and equal to the other paths to
// rounding. The group's counter still hands h_t (dgh_t) on, and it also says
// that every CTA has read the partials of the step, so one partial buffer
// serves every step.

// Shared memory of a split launch: the moving operand's K range (reused for
// the WK - 1 warps' partials of each block once the MMAs are done), the A
// tier, the finalised block's state.
static __host__ __device__ size_t gp_split_region(int MT, int NT, int Q, int KPq)
{
    const int slots = GP_WARPS - Q > Q ? GP_WARPS - Q : Q; // k-pair lanes 1.., then the blocks' sums
    const size_t bs = (size_t)KPq * NT * 32 * 16, red = (size_t)slots * MT * NT * 8 * GP_RS * sizeof(float);
    return bs > red ? bs : red;
}
static __host__ __device__ size_t gp_split_smem_bytes(int MT, int NT, int Q, int KPq, int ks)
{
    return gp_split_region(MT, NT, Q, KPq) + (size_t)GP_WARPS * ks * MT * 32 * 32 + (size_t)NT * 8 * 16 * sizeof(float);
}

// Where a CTA and its warp sit in the split (Q CTAs a slice, WK = 8 / Q warps a block).
struct gp_split {
    int wm, wk;       // the warp's unit block in the slice and its k-pair lane
    int b0, nvalid;   // the group's first sequence and how many it has
    int kbase, kpw;   // the CTA's first k-pair and the warp's count of them
    int ufin;         // first unit of the block this CTA finalises
    int kq, cslice;   // the CTA's place in its slice, and the slice's index over all groups
};

template <int Q>
__device__ __forceinline__ gp_split gp_split_of(const gp_plan &P, int warp)
{
    constexpr int WK = GP_WARPS / Q;
    gp_split S;
    const int within = blockIdx.x % P.N, group = blockIdx.x / P.N, slice = within / Q, KPq = P.KP / Q;
    S.kq = within % Q;
    S.cslice = group * (P.N / Q) + slice;
    S.wm = warp / WK;
    S.wk = warp % WK;
    S.b0 = group * P.Bg;
    S.nvalid = min(P.Bg, P.B - S.b0);
    S.kbase = S.kq * KPq;
    S.kpw = (KPq - S.wk + WK - 1) / WK;
    S.ufin = 16 * (slice * Q + S.kq);
    return S;
}

// The CTA's K range of the moving operand into shared memory, chunk c = (k-pair,
// tile, lane) as gp_issue lays out a ring stage; each warp issues its share.
template <int NT>
__device__ __forceinline__ void gp_split_load(uint4 *bs, const __half *Bm, size_t ldb, int nvalid, int KPq, int warp,
                                              int lane)
{
    const int g = lane >> 2, c = lane & 3;
    for (int st = warp; st < KPq * NT; st += GP_WARPS) { // st = k-pair · NT + tile
        const int kp = st / NT, n = (st % NT) * 8 + g;
        cp_async16(bs + st * 32 + lane, Bm + (size_t)(n < nvalid ? n : 0) * ldb + kp * 32 + 8 * c, n < nvalid);
    }
    cp_async_commit();
    cp_async_wait<0>();
}

// acc = this warp's k-pairs of A_slice · Bᵀ with B in shared memory.
template <int MT, int NT, int KR, int KRA, int Q>
__device__ __forceinline__ void gp_split_mma(float (&acc)[MT][NT][4], const uint4 (&areg)[KRA][MT][2],
                                             const uint4 *asm_, const __half *A, const int (&arow)[MT], int lda,
                                             const uint4 *bs, const gp_split &S, int ks, int lane)
{
    gp_zero<MT, NT>(acc);
    constexpr int WK = GP_WARPS / Q;
#pragma unroll
    for (int i = 0; i < KR; i++)
        if (i < S.kpw) gp_mma_pair<MT, NT>(acc, areg[i], bs + (S.wk + WK * i) * NT * 32, lane);
    for (int i = KR; i < S.kpw; i++) {
        uint4 a[MT][2];
        gp_tier_a<MT>(a, asm_, i - KR, ks, A, arow, lda, S.kbase + S.wk + WK * i, lane);
        gp_mma_pair<MT, NT>(acc, a, bs + (S.wk + WK * i) * NT * 32, lane);
    }
}

// The CTA's partial sums of its Q blocks to L2. The warps of k-pair lane
// 1.. leave theirs in shared memory (over the moving operand, read by now),
// the warp of lane 0 adds them in order to its own and leaves the block's sum
// in slot wm, and the whole CTA copies the Q slots to the slice's buffer
// (block wm, source kq: [MT][NT·8][16] floats). Then the slice's counter.
// Every thread of the CTA calls it.
template <int MT, int NT, int Q>
__device__ __forceinline__ void gp_split_publish(unsigned char *smem, float (&acc)[MT][NT][4], float *part_slice,
                                                 const gp_split &S, unsigned *slice_flag, int lane)
{
    constexpr int COLS = NT * 8, WK = GP_WARPS / Q;
    constexpr size_t slot = (size_t)MT * COLS * GP_RS; // floats of one warp's partials in shared memory
    float *red = (float *)smem;
    __syncthreads(); // every warp's MMAs have read the moving operand
    if constexpr (WK > 1) {
        float *mine = red + (S.wm * (WK - 1)) * slot; // the block's WK - 1 slots
        if (S.wk > 0) gp_store_partial<MT, NT>(mine + (S.wk - 1) * slot, acc, lane, 1, 0);
        __syncthreads();
        if (S.wk == 0) {
            const int g = lane >> 2, c = lane & 3;
#pragma unroll
            for (int w = 1; w < WK; w++)
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
#pragma unroll
                    for (int nt = 0; nt < NT; nt++)
#pragma unroll
                        for (int e = 0; e < 4; e++)
                            acc[mt][nt][e] += mine[(w - 1) * slot + (mt * COLS + nt * 8 + 2 * c + (e & 1)) * GP_RS + g +
                                                   (e >> 1) * 8];
        }
        __syncthreads(); // the slots are read
    }
    if (S.wk == 0) gp_store_partial<MT, NT>(red + S.wm * slot, acc, lane, 1, 0);
    __syncthreads();
    constexpr int V4 = MT * COLS * 4; // float4s of one block's partial
    for (int x = threadIdx.x; x < Q * V4; x += GP_THREADS) {
        const int blk = x / V4, y = x % V4, row = y / 4, r4 = (y % 4) * 4; // row = mt·COLS + n
        const float4 v = *(const float4 *)(red + blk * slot + row * GP_RS + r4);
        __stcg((float4 *)(part_slice + ((size_t)blk * Q + S.kq) * MT * COLS * 16 + row * 16 + r4), v);
    }
    __syncthreads(); // the partials are stored and shared memory is free again
    if (threadIdx.x == 0) gp_signal(slice_flag);
}

// Gate row gate of the finalised block, sequence n, unit j: the Q partials in source order.
template <int MT, int NT, int Q>
__device__ __forceinline__ float gp_split_sum(const float *part_slice, const gp_split &S, int gate, int n, int j)
{
    constexpr int COLS = NT * 8;
    const float *in = part_slice + (size_t)S.kq * Q * MT * COLS * 16 + (gate * COLS + n) * 16 + j;
    float v = 0.f;
#pragma unroll
    for (int q = 0; q < Q; q++) v += __ldcg(in + (size_t)q * MT * COLS * 16);
    return v;
}

// The counters of a split launch: one a group (h_t or dgh_t of the whole
// group stored), then one a slice (the slice's partials of the step stored).
__device__ __forceinline__ unsigned *gp_split_flag(unsigned *flags, const gp_plan &P, const gp_split &S)
{
    return flags + P.G + S.cslice;
}

// Floats of a slice's partial buffer: Q blocks × Q sources × MT rows of 16 units × the tile's sequences.
__host__ __device__ inline size_t gp_split_part_floats(int MT, int NT, int Q) { return (size_t)Q * Q * MT * NT * 8 * 16; }

// The forward's outputs that only the backward reads go after the signal,
// except at 8 sequence tiles, where holding them would spill (as above).
template <int NT, int Q>
__global__ void __launch_bounds__(GP_THREADS, 1)
    gru_forward_split_kernel(float *h, float *gates, float *ghn, __half *hprev16, const float *gx, const __half *whh,
                             const float *bhh, unsigned *flags, float *part, gp_plan P)
{
    const int t0 = P.t0, t1 = P.t1;
    constexpr int MT = 3, KR = gp_kr(MT, NT), KRA = KR > 0 ? KR : 1, PP = NT / 2; // 16 units × NT·8 sequences
    constexpr int WK = GP_WARPS / Q;
    constexpr bool DEFER = NT < 8;
    extern __shared__ __align__(16) unsigned char smem[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (blockIdx.x >= P.G * P.N) return; // only a grid the runtime should have refused has more (gp_launch)
    const gp_split S = gp_split_of<Q>(P, warp);
    const int D = P.D, T = P.T, b0 = S.b0, nvalid = S.nvalid, u0 = S.ufin;
    uint4 *bs = (uint4 *)smem;
    const size_t region = gp_split_region(MT, NT, Q, P.KP / Q);
    uint4 *asm_ = (uint4 *)(smem + region) + (size_t)warp * P.ks * MT * 64;
    float *state = (float *)(smem + region + (size_t)GP_WARPS * P.ks * MT * 1024);
    int arow[MT]; // gate rows of the warp's block
    const int ub = S.ufin - 16 * S.kq + 16 * S.wm;
#pragma unroll
    for (int mt = 0; mt < MT; mt++) arow[mt] = mt * D + ub;
    uint4 areg[KRA][MT][2];
    gp_load_stationary<MT, KR, KRA>(areg, asm_, whh, arow, D, S.kpw, P.ks, S.kbase + S.wk, WK, lane);
    unsigned *flag = flags + blockIdx.x / P.N, *slice_flag = gp_split_flag(flags, P, S);
    float *part_slice = part + (size_t)S.cslice * gp_split_part_floats(MT, NT, Q);
#pragma unroll
    for (int i = 0; i < PP; i++) {
        const int p = threadIdx.x + GP_THREADS * i, j = p % 16, n = p / 16;
        state[p] = t0 > 0 && n < nvalid ? h[((size_t)(b0 + n) * T + t0 - 1) * D + u0 + j] : 0.f;
        if (t0 == 0 && n < nvalid) hprev16[(size_t)(b0 + n) * T * D + u0 + j] = __float2half(0.f); // h_{-1}
    }
    float acc[MT][NT][4];
    const int tfirst = t0 > 1 ? t0 : 1; // the window's first step with a product
    for (int t = t0; t < t1; t++) {
        if (t > 0) {
            if (lane == 0 && t > t0) gp_wait(flag, (unsigned)(P.N * (t - t0)));
            __syncwarp();
            gp_split_load<NT>(bs, hprev16 + ((size_t)b0 * T + t) * D + S.kbase * 32, (size_t)T * D, nvalid, P.KP / Q,
                              warp, lane);
            __syncthreads();
            gp_split_mma<MT, NT, KR, KRA, Q>(acc, areg, asm_, whh, arow, D, bs, S, P.ks, lane);
            gp_split_publish<MT, NT, Q>(smem, acc, part_slice, S, slice_flag, lane);
        }
        float gxv[PP][3]; // issued before the slice's wait (not the group's: the MMAs need the registers)
#pragma unroll
        for (int i = 0; i < PP; i++) {
            const int p = threadIdx.x + GP_THREADS * i, j = p % 16, n = p / 16;
            if (n < nvalid) {
                const float *gr = gx + gru_wrow(b0 + n, t, P.wT, P.wt0) * 3 * D + u0 + j;
                gxv[i][0] = gr[0];
                gxv[i][1] = gr[D];
                gxv[i][2] = gr[2 * D];
            }
        }
        if (t > 0) {
            if (lane == 0) gp_wait(slice_flag, (unsigned)(Q * (t - tfirst + 1)));
            __syncwarp();
        }
        gru_fwd_vals v[DEFER ? PP : 1];
#pragma unroll
        for (int i = 0; i < PP; i++) {
            const int p = threadIdx.x + GP_THREADS * i, j = p % 16, n = p / 16;
            if (n >= nvalid) continue;
            const float ar = t > 0 ? gp_split_sum<MT, NT, Q>(part_slice, S, 0, n, j) : 0.f;
            const float az = t > 0 ? gp_split_sum<MT, NT, Q>(part_slice, S, 1, n, j) : 0.f;
            const float an = t > 0 ? gp_split_sum<MT, NT, Q>(part_slice, S, 2, n, j) : 0.f;
            const float bh[3] = { __ldg(bhh + u0 + j), __ldg(bhh + D + u0 + j), __ldg(bhh + 2 * D + u0 + j) };
            const gru_fwd_vals vi = gru_fwd_math(gxv[i], bh, ar, az, an, state[p]);
            state[p] = vi.h;
            if (t + 1 < T) hprev16[((size_t)(b0 + n) * T + t + 1) * D + u0 + j] = __float2half_rn(vi.h);
            if constexpr (DEFER) v[i] = vi;
            else gru_fwd_store_states(h, gates, ghn, vi, (size_t)(b0 + n) * T + t, gru_wrow(b0 + n, t, P.wT, P.wt0),
                                      u0 + j, D);
        }
        __syncthreads(); // h_t stored and the partials read by the whole CTA
        if (threadIdx.x == 0 && t + 1 < t1) gp_signal(flag);
        if constexpr (DEFER) {
#pragma unroll
            for (int i = 0; i < PP; i++) {
                const int p = threadIdx.x + GP_THREADS * i, j = p % 16, n = p / 16;
                if (n < nvalid)
                    gru_fwd_store_states(h, gates, ghn, v[i], (size_t)(b0 + n) * T + t,
                                         gru_wrow(b0 + n, t, P.wT, P.wt0), u0 + j, D);
            }
        }
    }
}

template <int NT, int Q>
__global__ void __launch_bounds__(GP_THREADS, 1)
    gru_backward_split_kernel(__half *dgx16, __half *dgh16, const float *dh_in, const float *h, const float *gates,
                              const float *ghn, const __half *whh_t, float clamp_limit, float *carry_io,
                              unsigned *flags, float *part, gp_plan P)
{
    const int t0 = P.t0, t1 = P.t1;
    constexpr int MT = 1, KR = gp_kr(MT, NT), KRA = KR > 0 ? KR : 1, PP = NT / 2, WK = GP_WARPS / Q;
    extern __shared__ __align__(16) unsigned char smem[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (blockIdx.x >= P.G * P.N) return; // only a grid the runtime should have refused has more (gp_launch)
    const gp_split S = gp_split_of<Q>(P, warp);
    const int D = P.D, T = P.T, K = 3 * D, b0 = S.b0, nvalid = S.nvalid, u0 = S.ufin;
    uint4 *bs = (uint4 *)smem;
    const size_t region = gp_split_region(MT, NT, Q, P.KP / Q);
    uint4 *asm_ = (uint4 *)(smem + region) + (size_t)warp * P.ks * MT * 64;
    float *state = (float *)(smem + region + (size_t)GP_WARPS * P.ks * MT * 1024);
    int arow[MT] = { S.ufin - 16 * S.kq + 16 * S.wm }; // W_hhᵀ rows: the warp's block of units
    uint4 areg[KRA][MT][2];
    gp_load_stationary<MT, KR, KRA>(areg, asm_, whh_t, arow, K, S.kpw, P.ks, S.kbase + S.wk, WK, lane);
    unsigned *flag = flags + blockIdx.x / P.N, *slice_flag = gp_split_flag(flags, P, S);
    float *part_slice = part + (size_t)S.cslice * gp_split_part_floats(MT, NT, Q);
#pragma unroll
    for (int i = 0; i < PP; i++) {
        const int p = threadIdx.x + GP_THREADS * i, j = p % 16, n = p / 16;
        state[p] = t1 < T && n < nvalid ? carry_io[(size_t)(b0 + n) * D + u0 + j] : 0.f;
    }
    float acc[MT][NT][4];
    const int tlast = t1 - 1 < T - 2 ? t1 - 1 : T - 2; // the window's last step with a product
    for (int t = t1 - 1; t >= t0; t--) {
        if (t < T - 1) {
            if (lane == 0 && t < t1 - 1) gp_wait(flag, (unsigned)(P.N * (t1 - 1 - t)));
            __syncwarp();
            gp_split_load<NT>(bs, gp_dgh_after(dgh16, P, b0, t) + S.kbase * 32, (size_t)P.wT * K, nvalid, P.KP / Q,
                              warp, lane);
            __syncthreads();
            gp_split_mma<MT, NT, KR, KRA, Q>(acc, areg, asm_, whh_t, arow, K, bs, S, P.ks, lane);
            gp_split_publish<MT, NT, Q>(smem, acc, part_slice, S, slice_flag, lane);
        }
        float pre[PP][6]; // dh_in, r, z, n, ghn, h_{t-1}: issued before the slice's wait
#pragma unroll
        for (int i = 0; i < PP; i++) {
            const int p = threadIdx.x + GP_THREADS * i, j = p % 16, n = p / 16;
            if (n < nvalid)
                gru_bwd_operands(pre[i], dh_in, gates, ghn, h, (size_t)(b0 + n) * T + t,
                                 gru_wrow(b0 + n, t, P.wT, P.wt0), u0 + j, D, t);
        }
        if (t < T - 1) {
            if (lane == 0) gp_wait(slice_flag, (unsigned)(Q * (tlast - t + 1)));
            __syncwarp();
        }
        gru_bwd_vals v[PP];
#pragma unroll
        for (int i = 0; i < PP; i++) {
            const int p = threadIdx.x + GP_THREADS * i, j = p % 16, n = p / 16;
            if (n >= nvalid) continue;
            float g = pre[i][0] + state[p];
            if (t < T - 1) g += gp_split_sum<MT, NT, Q>(part_slice, S, 0, n, j);
            v[i] = gru_bwd_math(g, clamp_limit, pre[i][1], pre[i][2], pre[i][3], pre[i][4], pre[i][5]);
            state[p] = v[i].zg;
            gru_bwd_store_dgh(dgh16, v[i], gru_wrow(b0 + n, t, P.wT, P.wt0), u0 + j, D);
        }
        __syncthreads(); // dgh_t stored and the partials read by the whole CTA
        if (threadIdx.x == 0 && t > t0) gp_signal(flag);
#pragma unroll
        for (int i = 0; i < PP; i++) {
            const int p = threadIdx.x + GP_THREADS * i, j = p % 16, n = p / 16;
            if (n >= nvalid) continue;
            gru_bwd_store_dgx(dgx16, v[i], gru_wrow(b0 + n, t, P.wT, P.wt0), u0 + j, D);
        }
    }
    if (t0 > 0) // z⊙g of step t0, for the window before
#pragma unroll
        for (int i = 0; i < PP; i++) {
            const int p = threadIdx.x + GP_THREADS * i, j = p % 16, n = p / 16;
            if (n < nvalid) carry_io[(size_t)(b0 + n) * D + u0 + j] = state[p];
        }
}

// W_hh [3D, D] → W_hhᵀ [D, 3D] (FP16), 32×32 tiles through shared memory.
__global__ void transpose_whh_kernel(__half *out, const __half *in, int rows, int cols)
{
    __shared__ __half tile[32][33];
    const int c0 = blockIdx.x * 32, r0 = blockIdx.y * 32;
    for (int i = threadIdx.y; i < 32; i += blockDim.y) {
        const int r = r0 + i, c = c0 + threadIdx.x;
        tile[i][threadIdx.x] = r < rows && c < cols ? in[(size_t)r * cols + c] : __float2half(0.f);
    }
    __syncthreads();
    for (int i = threadIdx.y; i < 32; i += blockDim.y) {
        const int c = c0 + i, r = r0 + threadIdx.x;
        if (c < cols && r < rows) out[(size_t)c * rows + r] = tile[threadIdx.x][i];
    }
}

// ---- host side: the plan ----

// Template instances: MU ∈ {1, 2, 4} with NT ∈ {2, 4, 8} while MU·NT ≤ 8.
static int gp_nt_max(int MU) { return 8 / MU; }

static int gp_round_nt(int tiles)
{
    int nt = 2;
    while (nt < tiles) nt *= 2;
    return nt;
}

// The instances: (MU, NT) ∈ {(1,2), (1,4), (1,8), (2,2), (2,4), (4,2)}, what
// gp_make_plan returns (gp_nt_max, gp_round_nt); anything else is refused.
static bool gp_instance(int MU, int NT)
{
    return (MU == 1 && (NT == 2 || NT == 4 || NT == 8)) || (MU == 2 && (NT == 2 || NT == 4)) || (MU == 4 && NT == 2);
}
#define GP_PICK(KERNEL, MU, NT)                                                                                      \
    ((MU) == 1 ? ((NT) == 2 ? KERNEL<1, 2> : (NT) == 4 ? KERNEL<1, 4> : KERNEL<1, 8>)                              \
     : (MU) == 2 ? ((NT) == 2 ? KERNEL<2, 2> : KERNEL<2, 4>)                                                         \
                 : KERNEL<4, 2>)

static const void *gp_kernel(int fwd, int MU, int NT)
{
    return fwd ? (const void *)GP_PICK(gru_forward_persistent_kernel, MU, NT)
               : (const void *)GP_PICK(gru_backward_persistent_kernel, MU, NT);
}

// The split kernels: one 16-unit block a finalising CTA, NT ∈ {2, 4, 8}, Q ∈ {4, 8}.
#define GP_SPLIT_PICK(KERNEL, NT, Q)                                                                                 \
    ((Q) == 4 ? ((NT) == 2 ? KERNEL<2, 4> : (NT) == 4 ? KERNEL<4, 4> : KERNEL<8, 4>)                               \
              : ((NT) == 2 ? KERNEL<2, 8> : (NT) == 4 ? KERNEL<4, 8> : KERNEL<8, 8>))
static const void *gp_split_kernel(int fwd, int NT, int Q)
{
    return fwd ? (const void *)GP_SPLIT_PICK(gru_forward_split_kernel, NT, Q)
               : (const void *)GP_SPLIT_PICK(gru_backward_split_kernel, NT, Q);
}

// The occupancy API's blocks an SM of every persistent kernel at the
// opt-in shared memory a block (after raising each kernel's limit to it),
// the fewest of them (gpu_caps.h: persistent_ctas_per_sm). A kernel given
// less shared memory by its plan fits at least as many. 0 where a query
// failed: no persistent plan on these caps (the next gpu_caps_query asks
// again).
extern "C" void gru_persistent_query_occupancy(gpu_caps *caps)
{
    // every kernel: the whole-K instances (gp_instance) and the split ones, forward and BPTT
    const void *all[2 * (6 + 6)];
    int n = 0;
    for (int fwd = 0; fwd < 2; fwd++) {
        for (int MU = 1; MU <= 4; MU *= 2)
            for (int NT = 2; NT <= gp_nt_max(MU); NT *= 2) all[n++] = gp_kernel(fwd, MU, NT);
        for (int Q = 4; Q <= 8; Q *= 2)
            for (int NT = 2; NT <= 8; NT *= 2) all[n++] = gp_split_kernel(fwd, NT, Q);
    }
    int fewest = -1;
    const size_t smem = (size_t)caps->smem_per_block_optin;
    for (int i = 0; i < n; i++) {
        int per_sm = 0;
        if (cudaFuncSetAttribute(all[i], cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess ||
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, all[i], GP_THREADS, smem) != cudaSuccess) {
            cudaGetLastError(); // a failed query leaves an error the next launch would report
            per_sm = 0;
        }
        if (fewest < 0 || per_sm < fewest) fewest = per_sm;
    }
    caps->persistent_ctas_per_sm = fewest < 0 ? 0 : fewest;
}

// How many CTAs of a persistent kernel a cooperative launch admits at once:
// caps' blocks an SM (persistent_ctas_per_sm, the occupancy API's answer
// for the kernels' registers and shared memory) times the device's own SMs,
// the limit the runtime itself applies. The SM count alone does not say it:
// a kernel whose registers or shared memory do not fit an SM would
// otherwise fail at launch. Caps that describe a GPU (device_sm_count 0, as
// the CPU tests make them) count their SMs.
static int gp_resident_ctas(const gpu_caps *caps)
{
    const int sms = caps->device_sm_count > 0 ? caps->device_sm_count : caps->sm_count;
    return caps->persistent_ctas_per_sm * sms;
}

// A launch the runtime refused as too large for the device (a partition, MPS
// or another context holding SMs that the attributes do not show) is
// recorded in the caller's gpu_gru_state (catchat/kernels.h), never in the
// process: after it, that caller's persistent plans are unsupported (its
// recurrences take the per-step loop) while another caller's stay as they
// were. The state also carries the ladder's testing aids (a planted
// refusal, a forced split of K). NULL reads as a zeroed state.
static int gp_forced_split(const gpu_gru_state *st) { return st ? st->forced_split : 0; }

// Chooses the split for B sequences of width D on this GPU (fwd: K = D, row
// tiles 3·MU; else K = 3D, MU). Every candidate (units a CTA, groups) whose
// CTAs are all resident (one an SM, within caps' SMs and what a cooperative
// launch admits, gp_resident_ctas) and whose buffers fit is scored by an
// estimate of a step in bytes a CTA reads from L2: its group's moving
// operand (Bg·K·2), the part of its W_hh slice that neither registers nor
// shared memory hold, its shared-memory tier at half (a loop that is not
// unrolled), and 384 bytes per mma.sync a warp issues (tiles of sequences
// past B included). The weights come from the H200 (CHANGELOG.md): at D=512
// 16 units a CTA won the forward and 32 the BPTT, at D=1024 the same. More
// units a CTA means fewer CTAs a group and less of the broadcast, as long as
// the slice stays on chip. Returns 0 when nothing fits.
static int gp_make_whole_plan(const gpu_caps *caps, int B, int T, int D, int fwd, gp_plan *out)
{
    if (!caps->cooperative_launch || B < 1 || T < 1 || D % 32 != 0 || caps->cc_major < 8) return 0;
    const int ctas = caps->sm_count;
    const size_t smax = (size_t)caps->smem_per_block_optin;
    double best = -1;
    for (int MU = 1; MU <= 4; MU *= 2) {
        const int J = 16 * MU;
        if (D % J) continue;
        const int N = D / J;
        if (N > ctas) continue;
        const int MT = fwd ? 3 * MU : MU;
        const int K = fwd ? D : 3 * D, KP = K / 32;
        const int kpw = (KP + GP_WARPS - 1) / GP_WARPS;
        for (int G = ctas / N < (B + 7) / 8 ? ctas / N : (B + 7) / 8; G >= 1; G--) {
            const int Bg = (B + G - 1) / G;
            const int NT = gp_round_nt((Bg + 7) / 8);
            if (NT > gp_nt_max(MU)) break; // fewer groups only make NT larger
            if ((G - 1) * Bg >= B) continue; // an empty last group
            if (gp_smem_bytes(MT, NT, 0, J) > smax) break;
            // the shared memory tier: what registers do not hold, as far as it fits
            const int kr = gp_kr(MT, NT);
            int ks = kpw > kr ? kpw - kr : 0;
            while (ks > 0 && gp_smem_bytes(MT, NT, ks, J) > smax) ks--;
            if (!gp_instance(MU, NT) ||
                gp_resident_ctas(caps) < G * N)
                continue;
            const int streamed = kpw - kr - ks > 0 ? kpw - kr - ks : 0;
            const double frag = (double)GP_WARPS * MT * 1024; // bytes of one k-pair of A over the warps
            const double l2 = (double)Bg * K * 2 + streamed * frag;
            const double cost = l2 + ks * frag / 2 + 384.0 * MT * NT * kpw * 2;
            if (best < 0 || cost < best) {
                best = cost;
                out->D = D; out->T = T; out->B = B; out->t0 = 0; out->t1 = T; out->K = K; out->KP = KP;
                out->MU = MU; out->J = J; out->N = N; out->G = G; out->Bg = Bg; out->NT = NT; out->ks = ks;
                out->Q = 1; out->l2_bytes = (int)l2;
            }
        }
    }
    return best >= 0;
}

// The split of K (kernels above): Q ∈ {4, 8} CTAs a slice of Q 16-unit
// blocks, scored like the whole-K plans, plus what the partials move through
// L2 (each CTA writes its Q blocks' partials and reads Q of its own block's)
// and a second handshake, counted as 32 KB of reads. only > 0 (the ladder's
// testing aid) plans that Q alone. Returns 0 when nothing fits.
#define GP_SPLIT_HANDSHAKE_BYTES (32 * 1024)
static int gp_make_split_plan(const gpu_caps *caps, int B, int T, int D, int fwd, int only, gp_plan *out)
{
    if (!caps->cooperative_launch || B < 1 || T < 1 || D % 32 != 0 || caps->cc_major < 8) return 0;
    const int ctas = caps->sm_count, N = D / 16, MT = fwd ? 3 : 1, K = fwd ? D : 3 * D, KP = K / 32;
    const size_t smax = (size_t)caps->smem_per_block_optin;
    if (N > ctas) return 0;
    double best = -1;
    for (int Q = 4; Q <= 8; Q *= 2) {
        if (N % Q || KP % Q || (only && Q != only)) continue;
        const int KPq = KP / Q, WK = GP_WARPS / Q, kpw = (KPq + WK - 1) / WK;
        for (int G = ctas / N < (B + 7) / 8 ? ctas / N : (B + 7) / 8; G >= 1; G--) {
            const int Bg = (B + G - 1) / G, NT = gp_round_nt((Bg + 7) / 8);
            if (NT > 8) break; // fewer groups only make NT larger
            if ((G - 1) * Bg >= B) continue;
            if (gp_split_smem_bytes(MT, NT, Q, KPq, 0) > smax) break;
            const int kr = gp_kr(MT, NT);
            int ks = kpw > kr ? kpw - kr : 0;
            while (ks > 0 && gp_split_smem_bytes(MT, NT, Q, KPq, ks) > smax) ks--;
            if (gp_resident_ctas(caps) < G * N)
                continue;
            const int streamed = kpw - kr - ks > 0 ? kpw - kr - ks : 0;
            const double frag = (double)GP_WARPS * MT * 1024;
            const double l2 = (double)Bg * K * 2 / Q + streamed * frag + 2.0 * Q * MT * 16 * NT * 8 * sizeof(float);
            const double cost = l2 + ks * frag / 2 + 384.0 * MT * NT * kpw * 2 + GP_SPLIT_HANDSHAKE_BYTES;
            if (best < 0 || cost < best) {
                best = cost;
                out->D = D; out->T = T; out->B = B; out->t0 = 0; out->t1 = T; out->K = K; out->KP = KP;
                out->MU = 1; out->J = 16; out->N = N; out->G = G; out->Bg = Bg; out->NT = NT; out->ks = ks;
                out->Q = Q; out->l2_bytes = (int)l2;
            }
        }
    }
    return best >= 0;
}

// Every CTA reads its group's whole moving operand each step, so the L2
// traffic of a step is N·B·K·2 bytes (N CTAs a group), plus any part of W_hh
// streamed from L2. From ~256 KB a CTA the per-step loop, whose GEMM reads
// W_hh from L2 once a step, is as fast or faster: on the H200 the BPTT at
// D=2048, B=64 (768 KB a CTA) took 37 µs a step against 18 µs, its forward
// (316 KB) 13.9 against 12.6, and under the sm86 profile D=1024 (208 and
// 256 KB) the whole step 39.7 ms against 34.2 ms (CHANGELOG.md). Those shapes
// take the per-step loop.
#define GP_MAX_STEP_READ (256 * 1024)

// The plan of a launch: the whole-K split where its step reads less than
// that; else a split of K where one reads less than the whole-K plan (and
// every shape that took the whole-K kernels before keeps them).
static int gp_make_plan(const gpu_caps *caps, const gpu_gru_state *st, int B, int T, int D, int fwd, gp_plan *out)
{
    if (gp_forced_split(st)) return gp_make_split_plan(caps, B, T, D, fwd, gp_forced_split(st), out);
    gp_plan split;
    const int whole = gp_make_whole_plan(caps, B, T, D, fwd, out);
    if (whole && out->l2_bytes < GP_MAX_STEP_READ) return 1;
    if (gp_make_split_plan(caps, B, T, D, fwd, 0, &split) && (!whole || split.l2_bytes < out->l2_bytes)) {
        *out = split;
        return 1;
    }
    return whole;
}

extern "C" int gru_persistent_supported(const gpu_caps *caps, const gpu_gru_state *st, int B, int T, int D)
{
    gp_plan f, b;
    return !(st && st->refused[0]) && gp_make_plan(caps, st, B, T, D, 1, &f) &&
           gp_make_plan(caps, st, B, T, D, 0, &b) && f.l2_bytes < GP_MAX_STEP_READ && b.l2_bytes < GP_MAX_STEP_READ;
}

// Whether a plan's warps hold all of their W_hh slice on chip (registers and shared memory).
static bool gp_on_chip(const gp_plan &P, int fwd)
{
    const int MT = fwd ? 3 * P.MU : P.MU, kpw = P.Q > 1 ? P.KP / 8 : (P.KP + 7) / 8;
    return kpw <= gp_kr(MT, P.NT) + P.ks;
}

extern "C" int gru_persistent_describe(const gpu_caps *caps, const gpu_gru_state *st, int B, int T, int D, char *buf,
                                       int len)
{
    gp_plan f, b;
    if (!gp_make_plan(caps, st, B, T, D, 1, &f) || !gp_make_plan(caps, st, B, T, D, 0, &b)) return 0;
    char kf[48] = "", kb[48] = "";
    if (f.Q > 1) snprintf(kf, sizeof(kf), ", K split over %d", f.Q);
    if (b.Q > 1) snprintf(kb, sizeof(kb), ", K split over %d", b.Q);
    snprintf(buf, len, "forward %d groups x %d CTAs of %d units (%d sequences a group%s), BPTT %d x %d of %d (%d%s); "
             "W_hh slice on chip: %s forward, %s BPTT",
             f.G, f.N, f.J, f.Bg, kf, b.G, b.N, b.J, b.Bg, kb, gp_on_chip(f, 1) ? "all" : "part (rest from L2)",
             gp_on_chip(b, 0) ? "all" : "part (rest from L2)");
    return 1;
}

// Bytes of the split's partials a launch on one stream needs (0: whole K).
static size_t gp_part_bytes(const gp_plan &P, int fwd)
{
    return P.Q > 1 ? (size_t)P.G * (P.N / P.Q) * gp_split_part_floats(fwd ? 3 : 1, P.NT, P.Q) * sizeof(float) : 0;
}

extern "C" size_t gru_persistent_scratch_bytes(const gpu_caps *caps, int B, int T, int D)
{
    gp_plan f, b;
    if (!gp_make_plan(caps, NULL, B, T, D, 1, &f) || !gp_make_plan(caps, NULL, B, T, D, 0, &b)) return 0;
    const size_t pf = gp_part_bytes(f, 1), pb = gp_part_bytes(b, 0);
    return pf > pb ? pf : pb;
}

extern "C" int gru_persistent_splits_k(const gpu_caps *caps, const gpu_gru_state *st, int B, int T, int D)
{
    gp_plan f, b;
    return (gp_make_plan(caps, st, B, T, D, 1, &f) && f.Q > 1) || (gp_make_plan(caps, st, B, T, D, 0, &b) && b.Q > 1);
}

// Scratch of a launch, from the caller's (catchat/kernels.h): the counters
// (cleared here), a split's partials and, for the backward, W_hhᵀ.
// The counters take a fixed size: a CUDA graph captured on the stream keeps
// the buffer's address (G ≤ the GPU's SMs).
#define GP_MAX_GROUPS 1024
#define GP_FLAG_BYTES (GP_MAX_GROUPS * sizeof(unsigned))
#define GP_WT_BYTES(D) ((size_t)3 * (D) * (D) * sizeof(__half))

extern "C" void gru_persistent_scratch_need(size_t need[SCRATCH_KINDS], const gpu_caps *caps, const gpu_gru_state *st,
                                           int B, int T, int D)
{
    gp_plan f, b;
    const int fwd = gp_make_plan(caps, st, B, T, D, 1, &f), bwd = gp_make_plan(caps, st, B, T, D, 0, &b);
    if (fwd || bwd) gpu_scratch_need(need, SCRATCH_GRU_FLAGS, GP_FLAG_BYTES);
    if (fwd) gpu_scratch_need(need, SCRATCH_GRU_PART, gp_part_bytes(f, 1));
    if (bwd) {
        gpu_scratch_need(need, SCRATCH_GRU_WT, GP_WT_BYTES(D));
        gpu_scratch_need(need, SCRATCH_GRU_PART, gp_part_bytes(b, 0));
    }
}

static unsigned *gp_flags(const gp_plan &P, gpu_scratch *sc, cudaStream_t s, const char *kernel)
{
    const int n = P.G + (P.Q > 1 ? P.G * (P.N / P.Q) : 0); // a group's counter, then a split's slice counters
    if (n > GP_MAX_GROUPS) {
        fprintf(stderr, "catchat: persistent GRU: %d step counters over the %d there are\n", n, GP_MAX_GROUPS);
        exit(1);
    }
    unsigned *f = (unsigned *)scratch_take(sc, SCRATCH_GRU_FLAGS, GP_FLAG_BYTES, kernel);
    const cudaError_t e = cudaMemsetAsync(f, 0, (size_t)n * sizeof(unsigned), s);
    if (e != cudaSuccess) {
        fprintf(stderr, "catchat: persistent GRU: clearing the step counters: %s\n", cudaGetErrorString(e));
        exit(1);
    }
    return f;
}

static void gp_fail(const char *what, cudaError_t e)
{
    fprintf(stderr, "catchat: persistent GRU %s: %s\n", what, cudaGetErrorString(e));
    exit(1);
}

// The cooperative launch of a plan: 0, or 1 when the runtime refused the grid
// as larger than what can be resident (the caller then runs the per-step
// loop, and so does every later launch under the same state: st->refused).
// Any other error ends the process. The first step of a run is issued
// eagerly, so a refusal comes before any CUDA graph capture.
static int gp_launch(const gpu_caps *caps, gpu_gru_state *st, const void *fn, const gp_plan &P, void **args,
                     size_t smem, cudaStream_t s, const char *what)
{
    cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) gp_fail(what, e);
    int grid = P.G * P.N;
    if (st && st->plant_oversize) { // more than the device admits (its own SMs, not a profile's)
        const int admitted = gp_resident_ctas(caps);
        grid = (admitted > caps->device_sm_count ? admitted : caps->device_sm_count) + 1;
    }
    e = cudaLaunchCooperativeKernel(fn, dim3(grid), dim3(GP_THREADS), args, smem, s);
    if (e == cudaSuccess) return 0;
    if (e != cudaErrorCooperativeLaunchTooLarge) gp_fail(what, e);
    cudaGetLastError();
    char why[sizeof(st->refused)];
    snprintf(why, sizeof(why),
             "the runtime refused a %s grid of %d CTAs as more than can be resident (%s: MPS, a partition "
             "or another context may hold SMs)", what, grid, cudaGetErrorString(e));
    if (st) memcpy(st->refused, why, sizeof(why));
    fprintf(stderr, "catchat: %s; the recurrence runs per step from here on\n", why);
    return 1;
}

extern "C" int launch_gru_forward_persistent(const gru_layer *L, gru_shape sh, const gpu_caps *caps,
                                             gpu_gru_state *st, gpu_scratch *sc, cudaStream_t s)
{
    const int B = sh.B, T = sh.T, D = sh.D;
    gp_plan P;
    if (!gp_make_plan(caps, st, B, T, D, 1, &P)) {
        fprintf(stderr, "catchat: persistent GRU forward: unsupported shape B=%d D=%d\n", B, D);
        exit(1);
    }
    if (P.Q == 1 && !gp_instance(P.MU, P.NT)) gp_fail("forward: no kernel for this split", cudaErrorInvalidValue);
    P.t0 = sh.t0;
    P.t1 = sh.t1;
    P.wT = gru_window_steps(sh);
    P.wt0 = gru_window_first(sh);
    P.dgh_next = NULL;
    unsigned *flags = gp_flags(P, sc, s, "launch_gru_forward_persistent");
    float *h = L->h, *gates = L->gates, *ghn = L->ghn;
    const float *gx = L->gx, *bhh = L->bhh;
    __half *hp = (__half *)L->hprev16;
    const __half *w = (const __half *)L->whh16;
    if (P.Q > 1) {
        float *part =
            (float *)scratch_take(sc, SCRATCH_GRU_PART, gp_part_bytes(P, 1), "launch_gru_forward_persistent");
        void *args[] = { &h, &gates, &ghn, &hp, (void *)&gx, (void *)&w, (void *)&bhh, &flags, &part, &P };
        return gp_launch(caps, st, gp_split_kernel(1, P.NT, P.Q), P, args,
                         gp_split_smem_bytes(3, P.NT, P.Q, P.KP / P.Q, P.ks), s, "forward");
    }
    void *args[] = { &h, &gates, &ghn, &hp, (void *)&gx, (void *)&w, (void *)&bhh, &flags, &P };
    return gp_launch(caps, st, gp_kernel(1, P.MU, P.NT), P, args, gp_smem_bytes(3 * P.MU, P.NT, P.ks, P.J), s,
                     "forward");
}

extern "C" int launch_gru_backward_persistent(const gru_layer *L, const gru_grads *G, gru_shape sh,
                                              float clamp_limit, const gpu_caps *caps, gpu_gru_state *st,
                                              gpu_scratch *sc, cudaStream_t s)
{
    const int B = sh.B, T = sh.T, D = sh.D;
    gp_plan P;
    if (!gp_make_plan(caps, st, B, T, D, 0, &P)) {
        fprintf(stderr, "catchat: persistent GRU backward: unsupported shape B=%d D=%d\n", B, D);
        exit(1);
    }
    __half *wt = (__half *)scratch_take(sc, SCRATCH_GRU_WT, GP_WT_BYTES(D), "launch_gru_backward_persistent");
    transpose_whh_kernel<<<dim3(ceil_div(D, 32), ceil_div(3 * D, 32)), dim3(32, 8), 0, s>>>(
        wt, (const __half *)L->whh16, 3 * D, D);
    LAUNCH_CHECK();
    if (P.Q == 1 && !gp_instance(P.MU, P.NT)) gp_fail("backward: no kernel for this split", cudaErrorInvalidValue);
    P.t0 = sh.t0;
    P.t1 = sh.t1;
    P.wT = gru_window_steps(sh);
    P.wt0 = gru_window_first(sh);
    /* a window's first step reads dgh of step t1: in its own buffers' row t1 or, where they end there, the next's */
    P.dgh_next = sh.t1 < T && sh.t1 == P.wt0 + P.wT ? (const __half *)G->dgh16_next : NULL;
    if (sh.t1 < T && sh.t1 == P.wt0 + P.wT && !P.dgh_next) {
        fprintf(stderr, "catchat: persistent GRU BPTT: window [%d, %d) ends its buffers without the next window's dgh\n",
                sh.t0, sh.t1);
        exit(1);
    }
    unsigned *flags = gp_flags(P, sc, s, "launch_gru_backward_persistent");
    __half *dx = (__half *)G->dgx16, *dh = (__half *)G->dgh16;
    float *carry = G->dhrec;
    const float *dh_in = G->dh_in, *h = L->h, *gates = L->gates, *ghn = L->ghn;
    const __half *w = wt;
    if (P.Q > 1) {
        float *part =
            (float *)scratch_take(sc, SCRATCH_GRU_PART, gp_part_bytes(P, 0), "launch_gru_backward_persistent");
        void *args[] = { &dx, &dh, (void *)&dh_in, (void *)&h, (void *)&gates, (void *)&ghn, (void *)&w,
                         &clamp_limit, &carry, &flags, &part, &P };
        return gp_launch(caps, st, gp_split_kernel(0, P.NT, P.Q), P, args,
                         gp_split_smem_bytes(1, P.NT, P.Q, P.KP / P.Q, P.ks), s, "BPTT");
    }
    void *args[] = { &dx, &dh, (void *)&dh_in, (void *)&h, (void *)&gates, (void *)&ghn, (void *)&w, &clamp_limit,
                     &carry, &flags, &P };
    return gp_launch(caps, st, gp_kernel(0, P.MU, P.NT), P, args, gp_smem_bytes(P.MU, P.NT, P.ks, P.J), s, "BPTT");
}
