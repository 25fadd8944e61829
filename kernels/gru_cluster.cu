// Cluster-resident GRU recurrence (forward and BPTT) for D ≤ 512: one
// thread-block cluster of CL_C CTAs holds all of a layer's W_hh on chip and
// runs all T steps for BL sequences; clusters are independent (sequences do
// not interact), so there is no grid-wide barrier and no trip through L2 per
// step. CTA `rank` owns hidden units [rank·J, (rank+1)·J), J = D / CL_C.
//
// Forward, step t: acc[3J, BL] = W_hh[rows r, z, n of the slice] · h_{t-1}ᵀ on
//   tensor cores (mma.sync m16n8k16, FP16 in, FP32 accumulate), the gate math,
//   then the FP16 h_t slice goes into every peer's shared memory (distributed
//   shared memory) with one bulk copy per peer; the next step waits on its
//   own mbarrier until all of h_t has arrived (no cluster barrier).
// Backward, step t: the gate gradients of the slice (FP16, as in the other
//   paths) multiply W_hh[slice rows]ᵀ locally: a partial of W_hhᵀ·dgh for all
//   D units over this CTA's rows, which goes to the CTA owning those units;
//   the owner adds the CL_C partials in rank order at step t-1 (deterministic).
//   Sending FP32 partials of D·BL values costs less than sending every CTA
//   the whole 3D-wide gate gradient. Each thread also sums its (sequence,
//   unit)'s gate gradients over the steps: at the end one row per cluster
//   of the bias gradients' sums, so no later pass reads dgx16 and dgh16 for
//   them.
// The stationary operand is loaded once as MMA fragments: most of it stays in
// registers, the rest in shared memory in fragment order (one 16-byte load
// per lane, no bank conflicts). The global stores of a step (states for the
// backward, gradients for the GEMMs) are issued after the copies, so they
// overlap the wait for the peers' data.
//
// Stated assumption: the staging buffers a CTA copies from (hstage in the
// forward, pout in the BPTT, both by step parity) are rewritten two steps
// later with no wait on the copies' own completion. What orders the rewrite
// after the copy's reads is a causal chain through the peers: a CTA reaches
// step t+2 only after every peer's step t+1 data has arrived, and each peer
// computed that data from what this CTA sent at step t, so that copy had
// completed at the peer's mbarrier. The PTX memory model does not promise
// this ordering (complete_tx "does not transitively establish ordering with
// respect to prior instructions"); the hardware keeps it because a bulk
// copy has read its source before it signals the destination. The ladder's
// cluster cases also run with random per-CTA delays injected at the
// exchange points (gpu_gru_state.cluster_jitter), in every ladder run.
//
// bench/cluster_probe measures the exchange: a push to 16 peers costs more
// than twice a push to 8, hence clusters of 8; bulk copies and mbarriers
// (below) cost less than plain DSMEM stores and a barrier
// (docs/results/cluster_probe_2026-11-29.txt, docs/design-notes.md).
#include <cooperative_groups.h>
#include <stdint.h>
#include <string.h>
#include "catchat/kernels.h"
#include "common.cuh"
#include "mma.cuh"
#include "gru_cell.cuh"

namespace cg = cooperative_groups;

#define CL_C 8                   // CTAs per cluster
#define CL_NW 16                 // warps per CTA
#define CL_THREADS (CL_NW * 32)
#define CL_AREGS 64              // registers per thread for stationary fragments
#define CL_SMEM_MAX (227 * 1024) // opt-in shared memory per block on sm_90

constexpr int cmin(int a, int b) { return a < b ? a : b; }
constexpr int cdiv(int a, int b) { return (a + b - 1) / b; }

// K split of the forward: at most 3 row tiles per warp, at least 4 k-steps each.
constexpr int fwd_kp(int mt, int kst)
{
    int kp = 8;
    while (kp > 1 && (mt * kp > 3 * CL_NW || kst / kp < 4 || kst % kp)) kp /= 2;
    return kp;
}

template <int D, int BL> struct cl_shape {
    static constexpr int J = D / CL_C, NT = BL / 8;
    // forward: A = the slice's W_hh rows [3J, D]; B = h_{t-1} [BL, D]
    // Warp w takes K part w / F_WPK and row tiles w % F_WPK + s·F_WPK (slot s):
    // its tiles share the k-range, so each h fragment it loads serves them all.
    static constexpr int F_MT = 3 * J / 16, F_KST = D / 16, F_KP = fwd_kp(F_MT, F_KST);
    static constexpr int F_WPK = CL_NW / F_KP, F_KSJ = F_KST / F_KP, F_NSLOT = cdiv(F_MT, F_WPK);
    static constexpr int F_RSLOT = cmin(F_NSLOT, CL_AREGS / (4 * F_KSJ));
    // backward: A = (the slice's W_hh rows)ᵀ [D, 3J]; B = the slice's gate gradients [BL, 3J];
    // warp w takes row tiles w + s·CL_NW over the whole K
    static constexpr int B_MT = D / 16, B_KSJ = 3 * J / 16, B_NSLOT = cdiv(B_MT, CL_NW);
    static constexpr int B_RSLOT = cmin(B_NSLOT, CL_AREGS / (4 * B_KSJ));
    // Row strides chosen so the fragment loads and partial stores hit distinct
    // banks. h_{t-1} arrives as CL_C blocks [BL][LDS], one per producing CTA
    // (one bulk copy each).
    static constexpr int LDS = J + 8;     // halfs, h buffers [2][CL_C][BL][LDS]
    static constexpr int LDP = 3 * J + 4; // floats, forward partials [KP][BL][LDP]
    static constexpr int LDG = 3 * J + 8; // halfs, gate gradients [BL][LDG]
    static constexpr int LDR = BL + 2;    // floats, received partials [2][CL_C][J][LDR]
    static constexpr int NP = cdiv(BL * J, CL_THREADS); // (b, j) pairs per thread
    static constexpr size_t F_WSM = (size_t)(F_NSLOT - F_RSLOT) * CL_NW * F_KSJ * 32 * 16;
    static constexpr size_t F_HB = (size_t)2 * CL_C * BL * LDS * 2;
    static constexpr size_t F_PART = (size_t)F_KP * BL * LDP * 4;
    static constexpr size_t BARS = 16; // two mbarriers, one per buffer parity
    static constexpr size_t F_STAGE = (size_t)2 * BL * LDS * 2; // h_t slice, by step parity (bulk-copy source)
    static constexpr size_t F_SMEM = BARS + F_WSM + F_HB + F_PART + F_STAGE;
    static constexpr size_t B_WSM = (size_t)(B_NSLOT - B_RSLOT) * CL_NW * B_KSJ * 32 * 16;
    static constexpr size_t B_RECV = (size_t)2 * CL_C * J * LDR * 4;
    static constexpr size_t B_G = (size_t)2 * BL * LDG * 2; // by step parity
    static constexpr size_t B_SMEM = BARS + B_WSM + 2 * B_RECV + B_G; // received and outgoing partials
    static_assert(J % 16 == 0, "a unit slice is whole MMA row tiles");
};

// The A fragment of a 16×16 tile at (m0, k0) for this lane (PTX m16n8k16
// layout: rows g and g+8, columns 2c, 2c+1 and 2c+8, 2c+9), from an
// element accessor.
template <typename Elem> __device__ __forceinline__ uint4 load_afrag(Elem e, int m0, int k0, int lane)
{
    const int g = lane >> 2, c = (lane & 3) * 2;
    uint4 a;
    a.x = pack2(e(m0 + g, k0 + c), e(m0 + g, k0 + c + 1));
    a.y = pack2(e(m0 + g + 8, k0 + c), e(m0 + g + 8, k0 + c + 1));
    a.z = pack2(e(m0 + g, k0 + c + 8), e(m0 + g, k0 + c + 9));
    a.w = pack2(e(m0 + g + 8, k0 + c + 8), e(m0 + g + 8, k0 + c + 9));
    return a;
}

// Testing aid (gpu_gru_state.cluster_jitter): with JITTER, a CTA (or one copying
// thread) sleeps a pseudo-random 0-4 µs at a quarter of the exchange points
// of a step, so that peers reach the handshake in orders an unloaded GPU
// seldom shows. The instances without it compile to nothing here.
template <bool JITTER> __device__ __forceinline__ void cl_jitter(unsigned seed, int t, int site)
{
    if (!JITTER) return;
    unsigned x = seed ^ (blockIdx.x * 0x9E3779B9u) ^ ((unsigned)t * 0x85EBCA6Bu) ^ ((unsigned)site * 0xC2B2AE35u);
    x ^= x >> 16;
    x *= 0x7FEB352Du;
    x ^= x >> 15;
    x *= 0x846CA68Bu;
    x ^= x >> 16;
    if ((x & 3) == 0) __nanosleep((x >> 4) & 4095);
}

// Step handshake without a cluster barrier: a producer copies into a peer's
// buffer with a bulk copy (cp.async.bulk, shared::cta to shared::cluster)
// whose bytes count against the peer's mbarrier for that buffer; the
// consumer waits for the phase to complete (all bytes of the step arrived).
// Each buffer's mbarrier is re-armed (expect_tx) by one thread once its phase
// has been consumed; bytes that arrive before the re-arm are allowed (the
// transaction count goes negative until the expect). Buffers
// alternate by step parity, and a producer can be at most one step ahead of a
// consumer (it needs the consumer's data of the previous step), so a buffer
// is never overwritten while it is read.
__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ uint32_t peer_addr(uint32_t local, int rank)
{
    uint32_t r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(local), "r"(rank));
    return r;
}

__device__ __forceinline__ void mbar_init(uint64_t *bar)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(bar)) : "memory");
}

__device__ __forceinline__ void mbar_expect(uint64_t *bar, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbar_wait(uint64_t *bar, uint32_t parity)
{
    asm volatile("{\n\t.reg .pred p;\n"
                 "WAIT_%=:\n\t"
                 "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%0], %1;\n\t"
                 "@!p bra WAIT_%=;\n}" ::"r"(smem_u32(bar)),
                 "r"(parity)
                 : "memory");
}

// One bulk copy (async proxy) of `bytes` from this CTA's shared memory into a
// peer's, counted on the peer's mbarrier. The source must have been made
// visible to the async proxy (fence_async_smem) by the threads that wrote it.
__device__ __forceinline__ void bulk_to_peer(uint32_t dst, uint32_t src, uint32_t bytes, uint32_t bar)
{
    asm volatile("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
                 "r"(src), "r"(bytes), "r"(bar)
                 : "memory");
}

__device__ __forceinline__ void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// Both barriers initialised and armed for the first two uses before any peer
// may write (the caller's cluster.sync follows).
__device__ __forceinline__ void mbar_setup(uint64_t *bars, uint32_t bytes, bool use0, bool use1)
{
    if (threadIdx.x == 0) {
        mbar_init(&bars[0]);
        mbar_init(&bars[1]);
        if (use0) mbar_expect(&bars[0], bytes);
        if (use1) mbar_expect(&bars[1], bytes);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
}

// A warp's slots: register-held ones first, the rest in shared memory.
#define WSM_INDEX(slot, rslot, warp, ksj, ks, lane) (((((slot) - (rslot)) * CL_NW + (warp)) * (ksj) + (ks)) * 32 + (lane))

// One warp's share of a step's product: acc[slot] = A(slot) · B over the
// warp's KSJ k-steps, for its NSLOT row tiles (those with has_slot(slot)).
// The slots share the k-range, so each B fragment (load_b(ks, nt, frag))
// is loaded once for all of them.
template <int NSLOT, int RSLOT, int KSJ, int NT, typename LoadB, typename HasSlot>
__device__ __forceinline__ void warp_slots_mma(float (&acc)[NSLOT][NT][4], const uint4 (&areg)[RSLOT > 0 ? RSLOT : 1][KSJ],
                                               const uint4 *wsm, int warp, int lane, LoadB load_b, HasSlot has_slot)
{
#pragma unroll
    for (int slot = 0; slot < NSLOT; slot++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++) acc[slot][nt][0] = acc[slot][nt][1] = acc[slot][nt][2] = acc[slot][nt][3] = 0.f;
#pragma unroll
    for (int ks = 0; ks < KSJ; ks++) {
        uint32_t bf[NT][2];
#pragma unroll
        for (int nt = 0; nt < NT; nt++) load_b(ks, nt, bf[nt]);
#pragma unroll
        for (int slot = 0; slot < NSLOT; slot++) {
            if (!has_slot(slot)) break;
            const uint4 a = slot < RSLOT ? areg[slot < RSLOT ? slot : 0][ks] : wsm[WSM_INDEX(slot, RSLOT, warp, KSJ, ks, lane)];
#pragma unroll
            for (int nt = 0; nt < NT; nt++) mma16816(acc[slot][nt], a, bf[nt][0], bf[nt][1]);
        }
    }
}

template <int D, int BL, bool JITTER = false>
__global__ void __launch_bounds__(CL_THREADS, 1)
    gru_forward_cluster_kernel(float *h, float *gates, float *ghn, __half *hprev16, const float *gx,
                               const __half *whh, const float *bhh, int T, int wT, int wt0, int t0, int t1,
                               unsigned jitter)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 // clusters are sm_90+; host code never launches it below
    using S = cl_shape<D, BL>;
    static_assert(S::F_SMEM <= CL_SMEM_MAX, "shared memory");
    constexpr int J = S::J;
    cg::cluster_group cluster = cg::this_cluster();
    extern __shared__ __align__(16) unsigned char smem[];
    uint64_t *bars = (uint64_t *)smem; // bars[b]: h_t with t & 1 == b has arrived
    uint4 *wsm = (uint4 *)(smem + S::BARS);
    __half *hbuf = (__half *)(smem + S::BARS + S::F_WSM);
    float *part = (float *)(smem + S::BARS + S::F_WSM + S::F_HB);
    __half *hstage = (__half *)(smem + S::BARS + S::F_WSM + S::F_HB + S::F_PART);
    const int rank = (int)cluster.block_rank(), u0 = rank * J;
    const int seq0 = (blockIdx.x / CL_C) * BL;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c2 = (lane & 3) * 2;

    auto welem = [&](int m, int k) { return whh[((size_t)(m / J) * D + u0 + m % J) * D + k]; };
    uint4 areg[S::F_RSLOT > 0 ? S::F_RSLOT : 1][S::F_KSJ];
    const int kp = warp / S::F_WPK, mt0 = warp % S::F_WPK;
#pragma unroll
    for (int slot = 0; slot < S::F_NSLOT; slot++) {
        const int mt = mt0 + slot * S::F_WPK;
        if (mt >= S::F_MT) break;
#pragma unroll
        for (int ks = 0; ks < S::F_KSJ; ks++) {
            const uint4 a = load_afrag(welem, mt * 16, (kp * S::F_KSJ + ks) * 16, lane);
            if (slot < S::F_RSLOT) areg[slot < S::F_RSLOT ? slot : 0][ks] = a;
            else wsm[WSM_INDEX(slot, S::F_RSLOT, warp, S::F_KSJ, ks, lane)] = a;
        }
    }
    float hpv[S::NP], bh[S::NP][3], gxv[S::NP][3];
#pragma unroll
    for (int p = 0; p < S::NP; p++) {
        const int idx = threadIdx.x + p * CL_THREADS, j = idx % J;
        // a window after the first starts from the h_{t0-1} the window before stored
        hpv[p] = t0 > 0 && idx < BL * J ? h[((size_t)(seq0 + idx / J) * T + t0 - 1) * D + u0 + j] : 0.f;
        for (int q = 0; q < 3; q++) bh[p][q] = idx < BL * J ? bhh[q * D + u0 + j] : 0.f;
    }
    if (t0 > 0) { // and its FP16 copy (hprev16 row t0), all D units, into the buffer step t0 reads
        __half *hb = hbuf + (size_t)((t0 - 1) & 1) * CL_C * BL * S::LDS;
        for (int i = threadIdx.x; i < BL * D; i += CL_THREADS) {
            const int b = i / D, k = i % D;
            hb[((size_t)(k / J) * BL + b) * S::LDS + k % J] = hprev16[((size_t)(seq0 + b) * T + t0) * D + k];
        }
    }
    // gx of step t, issued a step ahead (while the peers' h of the step before is in flight)
    auto prefetch_gx = [&](int t) {
#pragma unroll
        for (int p = 0; p < S::NP; p++) {
            const int idx = threadIdx.x + p * CL_THREADS;
            if (idx < BL * J) {
                const float *gr = gx + gru_wrow(seq0 + idx / J, t, wT, wt0) * 3 * D + u0 + idx % J;
                gxv[p][0] = gr[0];
                gxv[p][1] = gr[D];
                gxv[p][2] = gr[2 * D];
            }
        }
    };
    prefetch_gx(t0);
    // h_t is pushed for t0 ≤ t ≤ t1-2; every CTA receives CL_C blocks of [BL][LDS] halfs a step
    constexpr uint32_t STEP_BYTES = CL_C * BL * S::LDS * 2;
    const int n = t1 - t0; // first uses: bars[t0 & 1] for h_{t0}, the other for h_{t0+1}
    mbar_setup(bars, STEP_BYTES, (t0 & 1) == 0 ? n >= 2 : n >= 3, (t0 & 1) == 1 ? n >= 2 : n >= 3);
    uint32_t phase = 0; // bit b: parity of bars[b]'s next phase
    cluster.sync(); // every peer has started, and its barriers are armed, before anyone writes to it

    for (int t = t0; t < t1; t++) {
        cl_jitter<JITTER>(jitter, t, 0);
        if (t > 0) { // h_{-1} = 0: nothing to multiply at t = 0
            const int pb = (t - 1) & 1;
            if (t > t0) { // h_{t0-1} was loaded above
                mbar_wait(&bars[pb], (phase >> pb) & 1);
                phase ^= 1u << pb;
                if (threadIdx.x == 0 && t + 1 <= t1 - 2) mbar_expect(&bars[pb], STEP_BYTES); // for h_{t+1}
            }
            const __half *hb = hbuf + (size_t)((t - 1) & 1) * CL_C * BL * S::LDS;
            float acc[S::F_NSLOT][S::NT][4];
            warp_slots_mma<S::F_NSLOT, S::F_RSLOT, S::F_KSJ, S::NT>(
                acc, areg, wsm, warp, lane,
                [&](int ks, int nt, uint32_t *bf) { // h_{t-1}: block k0 / J holds units k0 .. k0+15
                    const int k0 = (kp * S::F_KSJ + ks) * 16;
                    const __half *bp = hb + (size_t)((k0 / J) * BL + nt * 8 + g) * S::LDS + k0 % J + c2;
                    bf[0] = *(const uint32_t *)bp;
                    bf[1] = *(const uint32_t *)(bp + 8);
                },
                [&](int slot) { return mt0 + slot * S::F_WPK < S::F_MT; });
#pragma unroll
            for (int slot = 0; slot < S::F_NSLOT; slot++) {
                const int mt = mt0 + slot * S::F_WPK;
                if (mt >= S::F_MT) break;
                float *pp = part + (size_t)kp * BL * S::LDP + mt * 16 + g;
#pragma unroll
                for (int nt = 0; nt < S::NT; nt++) {
                    const int b = nt * 8 + c2;
                    pp[b * S::LDP] = acc[slot][nt][0];
                    pp[(b + 1) * S::LDP] = acc[slot][nt][1];
                    pp[b * S::LDP + 8] = acc[slot][nt][2];
                    pp[(b + 1) * S::LDP + 8] = acc[slot][nt][3];
                }
            }
        }
        __syncthreads();
        gru_fwd_vals v[S::NP];
#pragma unroll
        for (int p = 0; p < S::NP; p++) {
            const int idx = threadIdx.x + p * CL_THREADS, b = idx / J, j = idx % J;
            if (idx >= BL * J) break;
            float ar = 0.f, az = 0.f, an = 0.f;
            if (t > 0)
                for (int kp = 0; kp < S::F_KP; kp++) {
                    const float *pp = part + ((size_t)kp * BL + b) * S::LDP + j;
                    ar += pp[0];
                    az += pp[J];
                    an += pp[2 * J];
                }
            v[p] = gru_fwd_math(gxv[p], bh[p], ar, az, an, hpv[p]);
            hpv[p] = v[p].h;
            hstage[((t & 1) * BL + b) * S::LDS + j] = __float2half_rn(v[p].h);
        }
        fence_async_smem();
        __syncthreads();
        // h_t into every peer's buffer (t & 1), block `rank`: one bulk copy per peer.
        // hstage alternates by parity: its copy of step t has landed everywhere before this CTA
        // can reach step t+2 (each peer needs it to produce the h_{t+1} waited for there).
        if (t + 1 < t1 && threadIdx.x < CL_C) {
            const int peer = threadIdx.x;
            cl_jitter<JITTER>(jitter, t, 1 + peer);
            const uint32_t dst = smem_u32(hbuf + ((size_t)(t & 1) * CL_C + rank) * BL * S::LDS);
            bulk_to_peer(peer_addr(dst, peer), smem_u32(hstage + (t & 1) * BL * S::LDS), BL * S::LDS * 2,
                         peer_addr(smem_u32(&bars[t & 1]), peer));
        }
#pragma unroll
        for (int p = 0; p < S::NP; p++) {
            const int idx = threadIdx.x + p * CL_THREADS, u = u0 + idx % J;
            if (idx >= BL * J) break;
            const size_t row = (size_t)(seq0 + idx / J) * T + t;
            gru_fwd_store(h, gates, ghn, hprev16, v[p], row, gru_wrow(seq0 + idx / J, t, wT, wt0), u, D, T, t);
            if (t == 0) hprev16[row * D + u] = __float2half(0.f); // h_{-1} = 0 for dW_hh
        }
        if (t + 1 < t1) prefetch_gx(t + 1);
    }
    cluster.sync(); // no CTA leaves while a peer's writes into it may be in flight
#endif
}

template <int D, int BL, bool JITTER = false>
__global__ void __launch_bounds__(CL_THREADS, 1)
    gru_backward_cluster_kernel(__half *dgx16, __half *dgh16, float *bias_part, float *carry_io, const float *dh_in,
                                const float *h, const float *gates, const float *ghn, const __half *whh, int T,
                                int wT, int wt0, int t0, int t1, float clamp_limit, unsigned jitter)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    using S = cl_shape<D, BL>;
    static_assert(S::B_SMEM <= CL_SMEM_MAX, "shared memory");
    constexpr int J = S::J;
    cg::cluster_group cluster = cg::this_cluster();
    extern __shared__ __align__(16) unsigned char smem[];
    uint64_t *bars = (uint64_t *)smem; // bars[b]: the partials of step t with t & 1 == b have arrived
    uint4 *wsm = (uint4 *)(smem + S::BARS);
    float *recv = (float *)(smem + S::BARS + S::B_WSM);
    __half *Gbuf = (__half *)(smem + S::BARS + S::B_WSM + S::B_RECV); // [2][BL][LDG], by step parity
    // outgoing partials [2][owner][J][LDR], the layout of the owner's slot in recv
    float *pout = (float *)(smem + S::BARS + S::B_WSM + S::B_RECV + S::B_G);
    const int rank = (int)cluster.block_rank(), u0 = rank * J;
    const int seq0 = (blockIdx.x / CL_C) * BL;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c2 = (lane & 3) * 2;

    // A[m = unit u][k = gate·J + j] = W_hh[gate·D + u0 + j][u]
    auto welem = [&](int m, int k) { return whh[((size_t)(k / J) * D + u0 + k % J) * D + m]; };
    uint4 areg[S::B_RSLOT > 0 ? S::B_RSLOT : 1][S::B_KSJ];
#pragma unroll
    for (int slot = 0; slot < S::B_NSLOT; slot++) {
        const int mt = slot * CL_NW + warp;
        if (mt >= S::B_MT) break;
#pragma unroll
        for (int ks = 0; ks < S::B_KSJ; ks++) {
            const uint4 a = load_afrag(welem, mt * 16, ks * 16, lane);
            if (slot < S::B_RSLOT) areg[slot < S::B_RSLOT ? slot : 0][ks] = a;
            else wsm[WSM_INDEX(slot, S::B_RSLOT, warp, S::B_KSJ, ks, lane)] = a;
        }
    }
    float zg[S::NP], pre[S::NP][6]; // z⊙g carried; prefetched dh_in, r, z, n, ghn, h_{t-1}
    float bsum[S::NP][4];           // Σ_t dr, dz, dn, dn⊙r: the bias gradients' share of this (b, j)
    // carry into step t1-1 when a window after it ran first: z⊙g plus W_hhᵀ·dgh of step t1, as stored there
    const bool carried = t1 < T;
#pragma unroll
    for (int p = 0; p < S::NP; p++) {
        const int idx = threadIdx.x + p * CL_THREADS;
        zg[p] = carried && idx < BL * J ? carry_io[(size_t)(seq0 + idx / J) * D + u0 + idx % J] : 0.f;
        bsum[p][0] = bsum[p][1] = bsum[p][2] = bsum[p][3] = 0.f;
    }
    // the step's operands, issued a step ahead (while the peers' partials are in flight)
    auto prefetch = [&](int t) {
#pragma unroll
        for (int p = 0; p < S::NP; p++) {
            const int idx = threadIdx.x + p * CL_THREADS;
            if (idx < BL * J)
                gru_bwd_operands(pre[p], dh_in, gates, ghn, h, (size_t)(seq0 + idx / J) * T + t,
                                 gru_wrow(seq0 + idx / J, t, wT, wt0), u0 + idx % J, D, t);
        }
    };
    prefetch(t1 - 1);
    // partials are sent at steps t1-1 .. lo (a window from t0 = 0 sends none at step 0); each
    // owner receives CL_C slots of [J][LDR] floats a step and waits for all of them, those of
    // step t0 > 0 after the loop (they are the carry into the window before)
    constexpr uint32_t SLOT_BYTES = J * S::LDR * 4, STEP_BYTES = CL_C * SLOT_BYTES;
    const int lo = t0 > 1 ? t0 : 1, nsend = t1 - lo;
    // first uses: bars[(t1-1) & 1] for step t1-1, the other for step t1-2
    const int last = (t1 - 1) & 1;
    mbar_setup(bars, STEP_BYTES, last == 0 ? nsend >= 1 : nsend >= 2, last == 1 ? nsend >= 1 : nsend >= 2);
    uint32_t phase = 0;
    cluster.sync();

    for (int t = t1 - 1; t >= t0; t--) {
        cl_jitter<JITTER>(jitter, t, 0);
        __half *G = Gbuf + (size_t)(t & 1) * BL * S::LDG;
        if (t < t1 - 1) { // the partials of step t+1
            const int pb = (t + 1) & 1;
            mbar_wait(&bars[pb], (phase >> pb) & 1);
            phase ^= 1u << pb;
            if (threadIdx.x == 0 && t - 1 >= lo) mbar_expect(&bars[pb], STEP_BYTES); // for step t-1
        }
        gru_bwd_vals v[S::NP];
#pragma unroll
        for (int p = 0; p < S::NP; p++) {
            const int idx = threadIdx.x + p * CL_THREADS, b = idx / J, j = idx % J;
            if (idx >= BL * J) break;
            // the gradient through the recurrence first (z⊙g, then what step t+1 sent back, in
            // rank order), then dh_in: the carry a window boundary stores is the same sum
            float carry = zg[p];
            if (t < t1 - 1) {
                const float *rp = recv + ((size_t)((t + 1) & 1) * CL_C * J + j) * S::LDR + b;
                for (int c = 0; c < CL_C; c++) carry += rp[(size_t)c * J * S::LDR];
            }
            const float g_tot = pre[p][0] + carry;
            v[p] = gru_bwd_math(g_tot, clamp_limit, pre[p][1], pre[p][2], pre[p][3], pre[p][4], pre[p][5]);
            zg[p] = v[p].zg;
            bsum[p][0] += v[p].dr;
            bsum[p][1] += v[p].dz;
            bsum[p][2] += v[p].dn;
            bsum[p][3] += v[p].dnr;
            __half *gp = G + b * S::LDG + j;
            gp[0] = __float2half_rn(v[p].dr);
            gp[J] = __float2half_rn(v[p].dz);
            gp[2 * J] = __float2half_rn(v[p].dnr);
        }
        __syncthreads();
        if (t > 0) { // partial W_hhᵀ·dgh for every unit, to the unit's owner
            float acc[S::B_NSLOT][S::NT][4];
            warp_slots_mma<S::B_NSLOT, S::B_RSLOT, S::B_KSJ, S::NT>(
                acc, areg, wsm, warp, lane,
                [&](int ks, int nt, uint32_t *bf) { // the slice's gate gradients
                    const __half *bp = G + (nt * 8 + g) * S::LDG + ks * 16 + c2;
                    bf[0] = *(const uint32_t *)bp;
                    bf[1] = *(const uint32_t *)(bp + 8);
                },
                [&](int slot) { return slot * CL_NW + warp < S::B_MT; });
#pragma unroll
            for (int slot = 0; slot < S::B_NSLOT; slot++) {
                const int mt = slot * CL_NW + warp;
                if (mt >= S::B_MT) break;
                const int owner = mt * 16 / J, jl = mt * 16 - owner * J + g;
                float *dst = pout + ((size_t)((t & 1) * CL_C + owner) * J + jl) * S::LDR + c2;
#pragma unroll
                for (int nt = 0; nt < S::NT; nt++) {
                    *(float2 *)(dst + nt * 8) = make_float2(acc[slot][nt][0], acc[slot][nt][1]);
                    *(float2 *)(dst + 8 * S::LDR + nt * 8) = make_float2(acc[slot][nt][2], acc[slot][nt][3]);
                }
            }
            fence_async_smem();
            __syncthreads();
            // one bulk copy per owner; pout alternates by parity: the copy of step t has landed
            // before this CTA can reach step t-2 (each owner needs it to send the step t-1 partials)
            if (threadIdx.x < CL_C) {
                const int owner = threadIdx.x;
                cl_jitter<JITTER>(jitter, t, 1 + owner);
                const uint32_t src = smem_u32(pout + (size_t)((t & 1) * CL_C + owner) * J * S::LDR);
                const uint32_t dst = smem_u32(recv + (size_t)((t & 1) * CL_C + rank) * J * S::LDR);
                bulk_to_peer(peer_addr(dst, owner), src, SLOT_BYTES, peer_addr(smem_u32(&bars[t & 1]), owner));
            }
        }
#pragma unroll
        for (int p = 0; p < S::NP; p++) {
            const int idx = threadIdx.x + p * CL_THREADS;
            if (idx >= BL * J) break;
            gru_bwd_store(dgx16, dgh16, v[p], gru_wrow(seq0 + idx / J, t, wT, wt0), u0 + idx % J, D);
        }
        if (t > t0) prefetch(t - 1);
    }
    if (t0 > 0) { // the carry into step t0-1: z⊙g of step t0 and the partials it sent, for the window before
        const int pb = t0 & 1;
        mbar_wait(&bars[pb], (phase >> pb) & 1);
#pragma unroll
        for (int p = 0; p < S::NP; p++) {
            const int idx = threadIdx.x + p * CL_THREADS, b = idx / J, j = idx % J;
            if (idx >= BL * J) break;
            float carry = zg[p];
            const float *rp = recv + ((size_t)pb * CL_C * J + j) * S::LDR + b;
            for (int c = 0; c < CL_C; c++) carry += rp[(size_t)c * J * S::LDR];
            carry_io[(size_t)(seq0 + b) * D + u0 + j] = carry;
        }
    }
    if (bias_part) { // this CTA's units summed over its sequences in order, into the cluster's row
        // recv is free: every partial sent to this CTA arrived before its step t0 went on (or, for t0 > 0,
        // was waited for and read into the carry above)
        float *bs = recv;
        __syncthreads();
#pragma unroll
        for (int p = 0; p < S::NP; p++) {
            const int idx = threadIdx.x + p * CL_THREADS;
            if (idx >= BL * J) break;
            for (int q = 0; q < 4; q++) bs[(q * BL + idx / J) * J + idx % J] = bsum[p][q];
        }
        __syncthreads();
        // rows of bias_part: [dgx sums | dgh sums] per cluster, 3D each: dr, dz the same in both
        const int ncl = gridDim.x / CL_C, cl = blockIdx.x / CL_C;
        for (int i = threadIdx.x; i < 4 * J; i += CL_THREADS) {
            const int q = i / J, j = i % J;
            float acc = 0.f;
            for (int b = 0; b < BL; b++) acc += bs[(q * BL + b) * J + j];
            float *px = bias_part + (size_t)cl * 3 * D, *ph = bias_part + ((size_t)ncl + cl) * 3 * D;
            const int u = u0 + j;
            // windows run from the last: the first one sets the sums, the ones before add to them
            if (q < 2) px[q * D + u] = ph[q * D + u] = carried ? px[q * D + u] + acc : acc;
            else if (q == 2) px[2 * D + u] = carried ? px[2 * D + u] + acc : acc;
            else ph[2 * D + u] = carried ? ph[2 * D + u] + acc : acc;
        }
    }
    cluster.sync();
#endif
}

// ---- host side ----

// Sequences per cluster. 8 gives the shortest step (the latency that bounds
// B=64). The forward also comes with 16 ("wide"): a step takes longer but
// serves twice the sequences, less time per sequence, which wins where the
// clusters of 8 would take two waves or more and the recurrence holds the
// SMs for longer than the rest of the step needs them (B=256 on the H200;
// the host decides, gpu_gru_wide_for; numbers in CHANGELOG.md, 0.4.0). The backward stays at 8: with 16 its buffers
// and the outgoing partials no longer fit in shared memory.
#define CL_BL 8
#define CL_BL_WIDE 16

static cudaLaunchConfig_t cluster_config(dim3 grid, size_t smem, cudaStream_t s,
                                                                  cudaLaunchAttribute *attr)
{
    cudaLaunchConfig_t cfg = {};
    attr->id = cudaLaunchAttributeClusterDimension;
    attr->val.clusterDim.x = CL_C;
    attr->val.clusterDim.y = 1;
    attr->val.clusterDim.z = 1;
    cfg.gridDim = grid;
    cfg.blockDim = dim3(CL_THREADS);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cfg;
}

// The seed of the caller's gpu_gru_state.cluster_jitter (0, or no state: the kernels without delays).
static unsigned cl_jitter_seed(const gpu_gru_state *st) { return st ? st->cluster_jitter : 0; }

// The delayed instances' shared-memory limit, raised at each of their
// launches (a testing aid: the cost does not matter; gru_cluster_query_residency
// raises the others').
template <typename K> static void raise_smem(K kernel, size_t smem)
{
    const cudaError_t e = cudaFuncSetAttribute((const void *)kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) {
        fprintf(stderr, "catchat: cluster GRU: shared memory of the delayed kernels: %s\n", cudaGetErrorString(e));
        exit(1);
    }
}

// The launches of one instance: the layer's tensors as the kernels take them.
template <int D, int BL, bool JITTER = false>
static void fwd_launch(const gru_layer *L, gru_shape sh, unsigned jitter, cudaStream_t s)
{
    using S = cl_shape<D, BL>; // the shared-memory limit was raised by gru_cluster_query_residency
    if (JITTER) raise_smem(gru_forward_cluster_kernel<D, BL, JITTER>, S::F_SMEM);
    float *h = L->h, *gates = L->gates, *ghn = L->ghn;
    __half *hp = (__half *)L->hprev16;
    const float *gx = L->gx, *bhh = L->bhh;
    const __half *w = (const __half *)L->whh16;
    cudaLaunchAttribute attr;
    cudaLaunchConfig_t cfg = cluster_config(dim3(CL_C * (sh.B / BL)), S::F_SMEM, s, &attr);
    cudaError_t e = cudaLaunchKernelEx(&cfg, gru_forward_cluster_kernel<D, BL, JITTER>, h, gates, ghn, hp, gx, w, bhh,
                                       sh.T, gru_window_steps(sh), gru_window_first(sh), sh.t0, sh.t1,
                                       jitter);
    if (e != cudaSuccess) {
        fprintf(stderr, "catchat: cluster GRU forward launch failed: %s\n", cudaGetErrorString(e));
        exit(1);
    }
}

template <int D, int BL, bool JITTER = false>
static void bwd_launch(const gru_layer *L, const gru_grads *G, gru_shape sh, float clamp_limit, unsigned jitter,
                       cudaStream_t s)
{
    using S = cl_shape<D, BL>; // the shared-memory limit was raised by gru_cluster_query_residency
    static_assert((size_t)4 * BL * D / CL_C * sizeof(float) <= S::B_RECV, "bias sums fit in recv");
    if (JITTER) raise_smem(gru_backward_cluster_kernel<D, BL, JITTER>, S::B_SMEM);
    __half *dgx = (__half *)G->dgx16, *dgh = (__half *)G->dgh16;
    float *bias_part = G->bias_part, *carry = G->dhrec;
    const float *dh_in = G->dh_in, *h = L->h, *gates = L->gates, *ghn = L->ghn;
    const __half *w = (const __half *)L->whh16;
    cudaLaunchAttribute attr;
    cudaLaunchConfig_t cfg = cluster_config(dim3(CL_C * (sh.B / BL)), S::B_SMEM, s, &attr);
    cudaError_t e = cudaLaunchKernelEx(&cfg, gru_backward_cluster_kernel<D, BL, JITTER>, dgx, dgh, bias_part, carry,
                                       dh_in, h, gates, ghn, w, sh.T, gru_window_steps(sh), gru_window_first(sh),
                                       sh.t0, sh.t1, clamp_limit, jitter);
    if (e != cudaSuccess) {
        fprintf(stderr, "catchat: cluster GRU backward launch failed: %s\n", cudaGetErrorString(e));
        exit(1);
    }
}

// How many clusters of this kernel can be resident at once (0: none), after
// raising its shared-memory limit for the launchers.
static int max_clusters(const void *kernel, size_t smem)
{
    int n = 0;
    cudaLaunchAttribute attr;
    cudaLaunchConfig_t cfg = cluster_config(dim3(CL_C), smem, 0, &attr);
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess ||
        cudaOccupancyMaxActiveClusters(&n, kernel, &cfg) != cudaSuccess) {
        cudaGetLastError(); // a failed query leaves an error the next launch would report
        return 0;
    }
    return n;
}

// Per D: [0] resident forward clusters of 8 sequences (0 if the forward or
// backward cannot be placed at all), [1] of 16.
template <int D> static void clusters_fit(int fit[2])
{
    using S = cl_shape<D, CL_BL>;
    using W = cl_shape<D, CL_BL_WIDE>;
    fit[0] = max_clusters((const void *)gru_forward_cluster_kernel<D, CL_BL>, S::F_SMEM);
    if (max_clusters((const void *)gru_backward_cluster_kernel<D, CL_BL>, S::B_SMEM) < 1) fit[0] = 0;
    fit[1] = fit[0] ? max_clusters((const void *)gru_forward_cluster_kernel<D, CL_BL_WIDE>, W::F_SMEM) : 0;
}

// Dynamic shared memory a block of the forward (wide or not) and the backward need.
template <int D> static size_t cluster_smem(bool wide)
{
    using S = cl_shape<D, CL_BL>;
    using W = cl_shape<D, CL_BL_WIDE>;
    return wide ? (size_t)W::F_SMEM : (size_t)(S::F_SMEM > S::B_SMEM ? S::F_SMEM : S::B_SMEM);
}

static size_t cluster_smem_for(int D, bool wide)
{
    return D == 128 ? cluster_smem<128>(wide) : D == 256 ? cluster_smem<256>(wide) : cluster_smem<512>(wide);
}

// What the occupancy API says of this D's kernels on the current device
// (gpu_caps.h: cluster_resident): asked only for sm_90 features with this
// binary's code for them (the kernels' bodies exist only when compiled for
// sm_90+), 0 otherwise or where a query failed (asked again by the next
// gpu_caps_query). A MIG slice or another partitioning may forbid any.
extern "C" void gru_cluster_query_residency(gpu_caps *caps)
{
    memset(caps->cluster_resident, 0, sizeof(caps->cluster_resident));
    if (!gpu_caps_has_sm90_features(caps)) return;
    clusters_fit<128>(caps->cluster_resident[0]);
    clusters_fit<256>(caps->cluster_resident[1]);
    clusters_fit<512>(caps->cluster_resident[2]);
}

// Whether a cluster of this D's kernels can run here at all: sm_90 features,
// at least one cluster of the forward and of the backward resident (caps'
// answers), and their shared memory within what caps gives a block (a
// profile may narrow it). Otherwise the dispatcher takes the persistent or
// per-step path instead of failing at launch.
static const int *cluster_fit(const gpu_caps *caps, int D)
{
    static const int none[2] = { 0, 0 };
    if (!gpu_caps_has_sm90_features(caps)) return none;
    return caps->cluster_resident[D == 128 ? 0 : D == 256 ? 1 : 2];
}

static bool cluster_path_ok(const gpu_caps *caps, int D)
{
    return cluster_fit(caps, D)[0] > 0 && cluster_smem_for(D, false) <= (size_t)caps->smem_per_block_optin;
}
static bool cluster_wide_ok(const gpu_caps *caps, int D)
{
    return cluster_fit(caps, D)[1] > 0 && cluster_smem_for(D, true) <= (size_t)caps->smem_per_block_optin;
}

extern "C" int gru_cluster_resident(const gpu_caps *caps, int D)
{
    return (D == 128 || D == 256 || D == 512) && cluster_path_ok(caps, D) ? cluster_fit(caps, D)[0] : 0;
}

extern "C" int gru_cluster_supported(const gpu_caps *caps, int B, int T, int D)
{
    return T >= 1 && B % CL_BL == 0 && (D == 128 || D == 256 || D == 512) && cluster_path_ok(caps, D);
}

#define CL_DISPATCH(D_, CALL)                                                                                 \
    do {                                                                                                      \
        if (D_ == 128) CALL(128);                                                                             \
        else if (D_ == 256) CALL(256);                                                                        \
        else CALL(512);                                                                                       \
    } while (0)

extern "C" void launch_gru_forward_cluster(const gru_layer *L, gru_shape sh, int wide, const gpu_caps *caps,
                                           const gpu_gru_state *st, cudaStream_t s)
{
    const int B = sh.B, T = sh.T, D = sh.D;
    if (!gru_cluster_supported(caps, B, T, D)) {
        fprintf(stderr, "catchat: cluster GRU forward: unsupported shape B=%d D=%d\n", B, D);
        exit(1);
    }
    if (wide && B % CL_BL_WIDE == 0 && cluster_wide_ok(caps, D)) {
#define FWD_WIDE_CALL(d) fwd_launch<d, CL_BL_WIDE>(L, sh, 0, s)
        CL_DISPATCH(D, FWD_WIDE_CALL);
#undef FWD_WIDE_CALL
        return;
    }
#define FWD_CALL(d) fwd_launch<d, CL_BL>(L, sh, 0, s)
#define FWD_JITTER_CALL(d) fwd_launch<d, CL_BL, true>(L, sh, jitter, s)
    const unsigned jitter = cl_jitter_seed(st);
    if (jitter) CL_DISPATCH(D, FWD_JITTER_CALL);
    else CL_DISPATCH(D, FWD_CALL);
#undef FWD_JITTER_CALL
#undef FWD_CALL
}

extern "C" void launch_gru_backward_cluster(const gru_layer *L, const gru_grads *G, gru_shape sh, float clamp_limit,
                                            const gpu_caps *caps, const gpu_gru_state *st, cudaStream_t s)
{
    const int B = sh.B, T = sh.T, D = sh.D;
    if (!gru_cluster_supported(caps, B, T, D)) {
        fprintf(stderr, "catchat: cluster GRU backward: unsupported shape B=%d D=%d\n", B, D);
        exit(1);
    }
#define BWD_CALL(d) bwd_launch<d, CL_BL>(L, G, sh, clamp_limit, 0, s)
#define BWD_JITTER_CALL(d) bwd_launch<d, CL_BL, true>(L, G, sh, clamp_limit, jitter, s)
    const unsigned jitter = cl_jitter_seed(st);
    if (jitter) CL_DISPATCH(D, BWD_JITTER_CALL);
    else CL_DISPATCH(D, BWD_CALL);
#undef BWD_JITTER_CALL
#undef BWD_CALL
}
