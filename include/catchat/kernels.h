/* Launchers of the CUDA kernels in kernels/ (one .cu file per op), callable from C. FP16
 * buffers cross this boundary as `void *` (cuda_fp16.h's `half` is C++ only);
 * FP32 buffers as float *. Every launcher takes an explicit stream (and, where
 * it needs device scratch, the caller's gpu_scratch: below) and checks
 * its launch. Conventions as in the CPU reference: parameter gradients
 * accumulate (+=), activation gradients overwrite unless a comment says
 * "accumulates".
 *
 * Precision contract (written once, here, and enforced by these kernels):
 *   - FP32: master weights, AdamW moments, parameter gradients, the residual
 *     stream u, GRU state h, gate values, attention probabilities (FP32
 *     kernels) or log-sum-exps (tensor-core kernels), norm statistics,
 *     the classifier's log-sum-exp and loss, every reduction and every GEMM
 *     accumulator.
 *   - The logits are the lm_head GEMM's FP32 accumulation rounded once to
 *     FP16 (as an autocast matmul stores them), one chunk of rows at a time;
 *     the softmax reads them in FP32 and writes dlogits over them.
 *   - FP16: GEMM and MMA operands only — the weight copies (refreshed after
 *     each optimizer step) and the activations / activation gradients that
 *     feed a GEMM (normalised inputs, h_{t-1}, attention output, dlogits,
 *     gate gradients, dqkv, dc), the q, k, v and dO the tensor-core attention
 *     (head size 64) reads and its P and dS tiles, and inside the recurrence
 *     kernels the W_hh fragments, h_{t-1} and the gate gradients (the
 *     cluster BPTT exchanges its partial products in FP32, added in rank
 *     order, and sums the bias gradients in FP32 before rounding).
 *   - The loss scale enters in the classifier's backward: dlogits =
 *     S·(softmax − onehot), i.e. the gradient of the *summed* scaled loss, so
 *     FP16 gradient operands are O(S) rather than O(S/N) and do not flush to
 *     zero at S = 1. It leaves in the optimizer's unscale, which divides by
 *     the executor's gradient unit S·N. The grad_h clamp limit handed to the
 *     BPTT kernel is grad_h_clamp·S·N, computed once by the C dispatcher
 *     (cc_clamp_dispatch_limit in executor.h, called in src/gpu/scheduler_gpu.c):
 *     the same clamp on the mean loss under every loss scale. */
#ifndef CATCHAT_KERNELS_H
#define CATCHAT_KERNELS_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include "catchat/gpu_caps.h"
#include "catchat/layout.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- kernel scratch: the caller's, one per stream (convert.cu) ----
 * Some launchers need device scratch beside their operands: the column
 * reductions' partial rows (launch_rmsnorm_backward, launch_colsum_f16_acc)
 * and the persistent GRU's step counters, W_hhᵀ and split-K partial sums.
 * They take it from a gpu_scratch that the caller made before its first
 * launch and passes with the stream: one per stream (a stream's launches
 * run in order, so they share it; two streams that run at once never do),
 * freed by the caller after the stream's work. Nothing is kept per process.
 * A launcher whose scratch is smaller than its call needs stops the process
 * with one line naming the kernel and both sizes: it never grows it, since a
 * cudaMalloc (and the synchronisation before freeing the old buffer) is
 * illegal while a CUDA graph is being captured. What a call needs for a
 * shape: the *_scratch_bytes and *_scratch_need functions beside each
 * launcher. */
enum { SCRATCH_REDUCE, SCRATCH_GRU_FLAGS, SCRATCH_GRU_WT, SCRATCH_GRU_PART, SCRATCH_KINDS };
typedef struct gpu_scratch {
    void *buf[SCRATCH_KINDS]; /* device buffers, NULL where the kind is not needed */
    size_t cap[SCRATCH_KINDS]; /* their bytes */
} gpu_scratch;
/* need[k] bytes of each kind (0: none), allocated now; out of memory: one line, exit. */
gpu_scratch *gpu_scratch_create(const size_t need[SCRATCH_KINDS]);
/* Frees it (NULL: nothing); the caller first waits for the work that uses it. */
void gpu_scratch_destroy(gpu_scratch *sc);
/* need[kind] = max(need[kind], bytes): a stream's scratch covers every call it runs. */
static inline void gpu_scratch_need(size_t need[SCRATCH_KINDS], int kind, size_t bytes)
{
    if (bytes > need[kind]) need[kind] = bytes;
}

/* convert.cu */
/* What this binary holds for the current device (gpu_caps.h); non-zero: no image. */
int kernels_compiled_for(int *binary_version, int *ptx_version);
void launch_f32_to_f16(void *dst, const float *src, size_t n, cudaStream_t s);
void launch_f16_to_f32(float *dst, const void *src, size_t n, cudaStream_t s);
/* y = a + b (n elements) */
void launch_add(float *y, const float *a, const float *b, size_t n, cudaStream_t s);
/* column sums of an FP16 matrix [M,N] added into out[N] (bias gradients);
 * sc: colsum_f16_scratch_bytes(M, N) of SCRATCH_REDUCE */
void launch_colsum_f16_acc(float *out, const void *x, int M, int N, gpu_scratch *sc, cudaStream_t s);
size_t colsum_f16_scratch_bytes(int M, int N);
/* out[N] += the rows of partial[nchunks][N], added in row order (deterministic) */
void launch_sum_chunks_acc(float *out, const float *partial, int nchunks, int N, cudaStream_t s);

/* embedding.cu: out[M,D] = table[x]; dtable += scatter of dout (repeats add).
 * The backward takes the positions of each id as a CSR list: positions[offsets[v]
 * .. offsets[v+1]) are where id v occurs, in increasing order (see
 * cc_embedding_csr). */
void launch_embedding_forward(float *out, const int *x, const float *table, int M, int D, cudaStream_t s);
void launch_embedding_backward(float *dtable, const float *dout, const int *offsets, const int *positions, int V,
                               int D, cudaStream_t s);
/* The backward's CSR, made on the host from the token ids x[M]: positions
 * of each id by counting sort (increasing within an id). offsets[V+1],
 * positions[M]. */
void cc_embedding_csr(const int *x, int M, int V, int *offsets, int *positions);

/* Which rows a row-wise kernel visits: its M rows in segments of seg rows,
 * segment i starting at row i·stride past the base pointers. { M, M }
 * (row_window_all) is the plain block of M rows; the time window [t0, t0+len)
 * of nseq sequences of a [B,T,·] tensor is { len, T } over M = nseq·len rows,
 * from the pointers at the first sequence's row t0. A kernel's window-side
 * tensor (named at its launcher) takes segment i at row i·wstride instead
 * where wstride is set: { len, T, len } reads or writes a window buffer of
 * its own, the window's rows of every sequence one after another. */
typedef struct row_window {
    int seg, stride, wstride;
} row_window;
static inline row_window row_window_all(int M)
{
    const row_window w = { M > 0 ? M : 1, M > 0 ? M : 1, 0 };
    return w;
}
#ifdef __CUDACC__
__host__ __device__ static inline size_t window_row(row_window w, int i)
{
    return (size_t)(i / w.seg) * w.stride + i % w.seg;
}
/* The row of the window-side tensor: its own stride where set. */
__host__ __device__ static inline size_t window_row_own(row_window w, int i)
{
    return (size_t)(i / w.seg) * (w.wstride ? w.wstride : w.stride) + i % w.seg;
}
#endif

/* convert.cu: launch_f32_to_f16 on the rows of rw, D values a row; dst is the window side. */
void launch_f32_to_f16_rows(void *dst, const float *src, int M, int D, row_window rw, cudaStream_t s);

/* embedding.cu: recompute's rebuild of u^l on the rows of rw (out, x and the adds at the
 * window's first row): out = table[x] + adds[0] + ... + adds[nadds-1],
 * added in that order, so the values are the forward's residual sums bit
 * for bit. */
#define EMB_MAX_ADDS 8
typedef struct {
    const float *p[EMB_MAX_ADDS];
} emb_adds;
void launch_embedding_sum_rows(float *out, const int *x, const float *table, const float *const *adds, int nadds,
                               int M, int D, row_window rw, cudaStream_t s);

/* rmsnorm.cu: y32 and/or y16 may be NULL. dx accumulates; dg accumulates.
 * The forward and backward visit the rows of rw (row_window_all(M): all);
 * the window side is the forward's y32 and y16 and the backward's dy. */
/* The norm of x + res (res may be NULL), the sum written to sum (may be NULL):
 * a residual add and the next norm in one pass. */
void launch_add_rmsnorm_forward(float *sum, float *y32, void *y16, float *ir, const float *x, const float *res,
                                const float *g, int M, int D, row_window rw, const cc_norm_consts *nc, cudaStream_t s);
void launch_rmsnorm_forward(float *y32, void *y16, float *ir, const float *x, const float *g, int M, int D,
                            const cc_norm_consts *nc, cudaStream_t s);
/* The backward's sc: rmsnorm_backward_scratch_bytes(M, D, caps) of SCRATCH_REDUCE (growing with M). */
void launch_rmsnorm_backward(float *dx, float *dg, const float *dy, const float *x, const float *g,
                             const float *ir, int M, int D, row_window rw, const cc_norm_consts *nc,
                             const gpu_caps *caps, gpu_scratch *sc, cudaStream_t s);
size_t rmsnorm_backward_scratch_bytes(int M, int D, const gpu_caps *caps);

/* ---- the GRU layer: gru_cell.cu, gru_persistent.cu, gru_cluster.cu ----
 * Every recurrence launcher takes the layer as the same three values: its
 * shape, its tensors and (backward) their gradients. Each path reads the
 * members it needs and leaves the rest; a caller switching paths
 * (src/gpu/gru.c) fills the structs once instead of re-listing a dozen
 * pointers per launcher, where two swapped float * would still compile.
 * [B,T,·] tensors are sequence-major: sequence b's step t is row b·T + t. */
typedef struct gru_shape {
    int B, T, D; /* sequences, steps, hidden units */
    /* The window of steps a launch runs, 0 ≤ t0 < t1 ≤ T (all: 0, T); T stays
     * the row stride. Windows of a layer run in time order forward and in
     * reverse order backward, each on the state the one before left: the
     * forward's h and hprev16 at row t0 - 1 and t0, and the backward's
     * gradient into step t1 - 1 through the recurrence, carried in
     * gru_grads.dhrec between windows in each path's own form (the cluster
     * kernels and the per-step loop: the whole of it; the persistent ones:
     * z ⊙ g, taking W_hhᵀ·dgh of step t1 from dgh16 again), so every window
     * of a layer runs on the same path. A layer split into windows
     * computes what the whole launch does, bit for bit (the cluster BPTT's
     * bias sums excepted: they are added window by window). */
    int t0, t1;
    /* Where a window has buffers of its own (recompute, src/gpu/ops_layer_gpu.c):
     * gx, gates, ghn, dgx16 and dgh16 hold steps [wt0, wt0 + wT) of each
     * sequence, (b, t) at row b·wT + t − wt0, while h, hprev16 and dh_in stay
     * the layer's [B,T,·]. wT = 0: every tensor is the layer's (row b·T + t). */
    int wt0, wT;
} gru_shape;

/* The rows a sequence has in the window buffers of sh, and the first step they hold. */
static inline int gru_window_steps(gru_shape sh) { return sh.wT > 0 ? sh.wT : sh.T; }
static inline int gru_window_first(gru_shape sh) { return sh.wT > 0 ? sh.wt0 : 0; }

/* What a layer's forward reads (gx, W_hh, b_hh) and writes for its backward
 * to read (h, gates, ghn, hprev16). */
typedef struct gru_layer {
    const float *gx;   /* [B,T,3D] W_ih·a + b_ih: all steps' input projections, one GEMM before the recurrence */
    const void *whh16; /* [3D,D] FP16 W_hh */
    const float *bhh;  /* [3D] b_hh */
    float *h;          /* [B,T,D] h_t; step t reads h_{t-1} from row t-1 (h_{-1} = 0) */
    float *gates;      /* [B,T,3D] r, z, n after their nonlinearities */
    float *ghn;        /* [B,T,D] W_hn·h_{t-1} + b_hn, which the n gate reads through r */
    void *hprev16;     /* [B,T,D] FP16 h_{t-1} (zeros at t = 0): the operand of the recurrent GEMM and of dW_hh */
    float *gh;         /* [B,3D] one step's W_hh·h_{t-1} (no bias): the per-step loop's GEMM output, the cell's input */
} gru_layer;

/* A layer's gradients: what its BPTT reads (dh_in) and writes (the FP16 gate
 * gradients, operands of the weight and input GEMMs), its scratch, and the
 * parameter gradients the weight GEMMs accumulate (+=). */
typedef struct gru_grads {
    const float *dh_in; /* [B,T,D] dL/dh_t reaching each step from the residual stream */
    void *dgx16;        /* [B,T,3D] FP16 gradient of the gates' input pre-activations (the W_ih GEMMs' operand) */
    void *dgh16;        /* [B,T,3D] FP16 gradient of W_hh·h_{t-1} + b_hh (the W_hh GEMMs' operand) */
    /* With window buffers (gru_shape.wT) and t1 < T: the next window's dgh16
     * (its first row a sequence is step t1), which the persistent BPTT's
     * first step reads; NULL otherwise. */
    const void *dgh16_next;
    float *dhrec;       /* [B,D] dL/dh_{t-1} through the recurrence: the per-step loop's accumulator, and each
                         * path's carry from one window to the one before (gru_shape) */
    float *bias_part;   /* the cluster BPTT's per-cluster bias sums (gpu_gru_bias_part_floats), or NULL */
    float *dwhh, *dbhh; /* [3D,D], [3D] */
    float *dbih;        /* [3D], or NULL: db_ih from the same sums as db_hh */
} gru_grads;

/* The recurrence's state, one per owner (an executor, the ladder, a probe),
 * never the process's: what a refused persistent launch left, and the
 * ladder's testing aids. Zeroed: nothing refused, no aid. The recurrence
 * launchers and plan queries below take it; NULL reads as a zeroed state
 * (and a launch under NULL reports a refusal only by its return value).
 * Two executors in one process each keep their own, so one's refusal
 * leaves the other's plans as they were. */
typedef struct gpu_gru_state {
    /* non-empty once the runtime refused one of the owner's persistent
     * launches as more than can be resident: why. From then on its
     * persistent plans are unsupported (its recurrences run per step) */
    char refused[192];
    /* testing aid (the ladder): every persistent launch asks for one CTA
     * more than a cooperative launch admits, so the runtime refuses it */
    int plant_oversize;
    /* testing aid (the ladder): q > 1 plans every persistent shape with K
     * split over q CTAs where such a split fits (else the shape is
     * unsupported); 0 plans as usual */
    int forced_split;
    /* testing aid (the ladder's stress cases): non-zero, the cluster kernels
     * of 8 sequences sleep pseudo-random times at their exchange points
     * (kernels/gru_cluster.cu's header), from this seed; the forward's wide
     * kernels never do */
    unsigned cluster_jitter;
} gpu_gru_state;

/* gru_cell.cu: one timestep's element-wise work (the contract of gru_cell,
 * which the CPU's src/cpu/gru_cell.c keeps too); the W_hh·h GEMM is the
 * caller's. t selects the timestep. Forward: reads L->gh = W_hh·h_{t-1}
 * (FP32, no bias), b_hh, gx[:,t] (with b_ih) and h_{t-1} = h[:,t-1] (zeros at
 * t = 0); writes gates, ghn and h at [:,t] and the FP16 copy hprev16[:,t+1]
 * that the next step's GEMM reads. */
void launch_gru_cell_forward(const gru_layer *L, gru_shape sh, int t, cudaStream_t s);
/* Backward of step t: g = dh_in[:,t] + dhrec, clamped to ±clamp_limit (0 =
 * off); reads gates, ghn and h_{t-1}; writes dgx16[:,t], dgh16[:,t] (FP16
 * GEMM operands) and dhrec = z⊙g; the caller then adds dgh·W_hh into dhrec
 * with a GEMM. */
void launch_gru_cell_backward(const gru_layer *L, const gru_grads *G, gru_shape sh, int t, float clamp_limit,
                              cudaStream_t s);

/* Recompute: the gates and ghn of M rows rebuilt in place from their
 * products, as the forward cell makes them. In: gates = [gx + W_hh·h_{t-1}
 * (rows r, z) | gx (row n)] (gx with b_ih), ghn = W_hn·h_{t-1} (no bias);
 * out: gates = r, z, n and ghn = W_hn·h_{t-1} + b_hn. The products come
 * from GEMMs, not the recurrence kernels' MMAs, so the values agree with the
 * forward's to FP32 rounding, not bit for bit. */
void launch_gru_cell_rebuild(float *gates, float *ghn, const float *bhh, int M, int D, cudaStream_t s);

/* gru_persistent.cu: the whole recurrence of a layer in one cooperative
 * launch on any GPU from sm_80 on (no clusters): W_hh spread over a grid of
 * batch groups × CTAs sized from caps (SMs, shared memory) and D, held on
 * chip; steps handed over through per-group counters in L2, no grid barrier.
 * Same inputs and outputs as a loop over the per-step kernels above plus the
 * W_hh GEMMs; supported when D is a multiple of 32 and a split fits the GPU
 * (caps->sm_count CTAs at most: lanes pass their share). */
int gru_persistent_supported(const gpu_caps *caps, const gpu_gru_state *st, int B, int T, int D);
/* One line on the split the launchers take for this shape (for bench and
 * docs); 0 when unsupported. */
int gru_persistent_describe(const gpu_caps *caps, const gpu_gru_state *st, int B, int T, int D, char *buf, int len);
/* The launchers return 0, or 1 when the runtime refused the grid as more
 * than can be resident (MPS, a partition or another context holding SMs
 * that the device's attributes do not show): the recurrence did not run
 * (only its scratch was prepared: the counters cleared and, for the BPTT,
 * W_hhᵀ written, both harmless), the caller runs the per-step loop
 * instead, and the reason goes to st->refused: from then on
 * gru_persistent_supported is 0 under st (other states are untouched).
 * sc: gru_persistent_scratch_need's kinds for this shape under st.
 * The forward reads gx, whh16, bhh and writes h, gates, ghn, hprev16; the
 * BPTT reads h, gates, ghn, whh16 and dh_in and writes dgx16, dgh16. */
int launch_gru_forward_persistent(const gru_layer *L, gru_shape sh, const gpu_caps *caps, gpu_gru_state *st,
                                  gpu_scratch *sc, cudaStream_t s);
int launch_gru_backward_persistent(const gru_layer *L, const gru_grads *G, gru_shape sh, float clamp_limit,
                                   const gpu_caps *caps, gpu_gru_state *st, gpu_scratch *sc, cudaStream_t s);
/* The scratch a stream running this shape's persistent recurrence (forward
 * and BPTT) needs, added into need (gpu_scratch_need): the step counters,
 * W_hhᵀ and the partial sums where the plan splits K; nothing where no
 * plan fits. Windows of a shape (gru_shape t0, t1, wT) take its plan. */
void gru_persistent_scratch_need(size_t need[SCRATCH_KINDS], const gpu_caps *caps, const gpu_gru_state *st, int B,
                                 int T, int D);
/* Of that, the partial sums alone as a plan without testing aids makes them
 * (the memory plan's share, gpu_plan.h): where it splits K over several
 * CTAs (D=2048 on the H200), else 0. */
size_t gru_persistent_scratch_bytes(const gpu_caps *caps, int B, int T, int D);
/* Whether this shape's plan splits K over CTAs (forward or BPTT): the plan
 * does where the whole-K split would read 256 KB or more from L2 a CTA a
 * step (D=2048, B=64 on the H200); the default recurrence choice leaves
 * those shapes to the per-step loop (src/gpu/gru.c says why). */
int gru_persistent_splits_k(const gpu_caps *caps, const gpu_gru_state *st, int B, int T, int D);

/* gru_cluster.cu: the same two operations with one thread-block cluster of 8
 * CTAs per 8 sequences holding all of W_hh on chip (sm_90; D of 128, 256 or
 * 512, B a multiple of 8); h (forward) and partial products (backward) move
 * through distributed shared memory, and a step waits on an mbarrier for
 * its data instead of a grid barrier. */
int gru_cluster_supported(const gpu_caps *caps, int B, int T, int D);
/* Clusters of 8 sequences of the forward that fit on this GPU at once (caps'
 * cluster_resident, within its shared memory a block). */
int gru_cluster_resident(const gpu_caps *caps, int D);
/* The occupancy API's answers that caps records (gpu_caps.h), for the
 * current device as caps describes it (its compute capability, clusters
 * and the build's code for it): gpu_caps_query calls them. The cluster
 * query also raises the cluster kernels' shared-memory limits, which their
 * launches rely on; the persistent launches raise their own. */
void gru_cluster_query_residency(gpu_caps *caps);
void gru_persistent_query_occupancy(gpu_caps *caps);
/* wide: 16 sequences a cluster where B allows (more time a step, less a
 * sequence: for batches whose clusters of 8 would take several waves). */
/* st: its cluster_jitter (may be NULL); the cluster kernels need no scratch. */
void launch_gru_forward_cluster(const gru_layer *L, gru_shape sh, int wide, const gpu_caps *caps,
                                const gpu_gru_state *st, cudaStream_t s);
/* G->bias_part (may be NULL): [2][B/8][3D], each cluster's sums over its
 * sequences and all steps of dgx (first B/8 rows) and dgh (the rest), in
 * FP32 before the FP16 rounding: the bias gradients without another pass. */
void launch_gru_backward_cluster(const gru_layer *L, const gru_grads *G, gru_shape sh, float clamp_limit,
                                 const gpu_caps *caps, const gpu_gru_state *st, cudaStream_t s);

/* attention.cu, FP32 kernels for any head size and window: qkv[B,T,3D]
 * FP32; o16 [B,T,D] FP16 (GEMM operand), o32 optional; p[B,H,T,W] the
 * probabilities, which the backward reads. Backward: dqkv[B,T,3D] FP32 (=),
 * and its FP16 copy dqkv16 (the GEMM operand) if not NULL; ds: scratch of
 * the size of p. */
void launch_attention_forward(float *o32, void *o16, float *p, const float *qkv, int B, int T,
                              int D, int H, int W, const gpu_caps *caps, cudaStream_t s);
void launch_attention_backward(float *dqkv, void *dqkv16, float *ds, const float *dout, const float *p,
                               const float *qkv, int B, int T, int D, int H, int W, const gpu_caps *caps,
                               cudaStream_t s);
/* attention_tc.cu and attention_flash.cu: the same on tensor cores, from
 * FP16 qkv16 [B,T,3D] and dout16 [B,T,D] with FP32 accumulation, by one of
 * two kernels (attention_tc_kernel chooses; `tiled` forces the second):
 *   ATTN_TC_BANDED  each warp's whole band of scores in registers: head
 *                   sizes 64, 128 and 256, W ≤ 129 (the default config)
 *   ATTN_TC_TILED   tiled over the window, flash-attention style: any head
 *                   size up to 256 (padded to 16 inside), any W
 * ATTN_FP32 (0) where neither runs: the FP32 kernels above. The forward
 * keeps each query's log-sum-exp lse[B,H,T], from which the backward
 * recomputes the probabilities (p is written only if not NULL, for
 * checking); delta[B,H,T] is the backward's per-query Σ P·dP, which the
 * tiled backward takes as Σ dO ⊙ O from the forward's FP16 output o16 (the
 * banded one ignores o16). dqkv (FP32) and dqkv16 (the GEMM operand) may
 * each be NULL. */
enum { ATTN_FP32 = 0, ATTN_TC_BANDED = 1, ATTN_TC_TILED = 2 };
int attention_tc_kernel(const gpu_caps *caps, int D, int H, int W, int tiled);
int attention_tc_supported(const gpu_caps *caps, int D, int H, int W);
const char *attention_kernel_name(int kernel);
int attention_flash_supported(const gpu_caps *caps, int D, int H);
void launch_attention_forward_tc(int kernel, float *o32, void *o16, float *p, float *lse, const void *qkv16, int B,
                                 int T, int D, int H, int W, cudaStream_t s);
void launch_attention_backward_tc(int kernel, float *dqkv, void *dqkv16, float *delta, const void *dout16,
                                  const void *o16, const float *lse, const void *qkv16, int B, int T, int D, int H,
                                  int W, cudaStream_t s);
/* The same on the queries (forward, the backward's dq and δ) and keys (dk,
 * dv) of a time window [q0, q1) of every sequence; q0 a multiple of
 * ATTENTION_TC_BLOCK, q1 too or T. The forward reads k, v from q0 - W + 1
 * on and no row from q1 on; the backward's keys read the queries up to
 * q1 + W - 2 (their dO, lse and delta) and nothing past them, so windows
 * after this one run their backward first. */
#define ATTENTION_TC_BLOCK 64
void launch_attention_forward_tc_window(int kernel, float *o32, void *o16, float *p, float *lse, const void *qkv16,
                                        int B, int T, int D, int H, int W, int q0, int q1, cudaStream_t s);
void launch_attention_backward_tc_window(int kernel, float *dqkv, void *dqkv16, float *delta, const void *dout16,
                                         const void *o16, const float *lse, const void *qkv16, int B, int T, int D,
                                         int H, int W, int q0, int q1, cudaStream_t s);
/* attention_flash.cu's launchers (the tiled kernel), called through the above */
void launch_attention_forward_flash_window(float *o32, void *o16, float *p, float *lse, const void *qkv16, int B, int T,
                                           int D, int H, int W, int q0, int q1, cudaStream_t s);
void launch_attention_backward_flash_window(float *dqkv, void *dqkv16, float *delta, const void *dout16,
                                            const void *o16, const float *lse, const void *qkv16, int B, int T, int D,
                                            int H, int W, int q0, int q1, cudaStream_t s);

/* rownorm_clamp.cu: per-row L2 clamp of d[M,D] to `limit` (0 = off), in place, on the rows of rw. */
void launch_rownorm_clamp(float *d, int M, int D, row_window rw, float limit, cudaStream_t s);

/* crossentropy.cu: per row i < M of logits16 (FP16, row pitch ldv ≥ V, a
 * multiple of 8; one chunk of the classifier's rows, src/gpu/crossentropy.c):
 * loss[m] (0 when y < 0), rank_class[m] = 1 for top-1, 2 for top-5 only, 0
 * otherwise (−1 when not scored), m = window_row(rw, i); with with_grad the row
 * is overwritten in place by grad_scale·(softmax − onehot) in FP16 (0 where
 * y < 0 and in the padding columns V..ldv−1). */
void launch_crossentropy(float *loss, int *rank_class, void *logits16, int ldv, const int *y, int M, int V,
                         row_window rw, float grad_scale, int with_grad, cudaStream_t s);
/* The same with the warps a row takes set (1, 8 or 32; 0: launch_crossentropy's choice), for bench/classifier_probe. */
void launch_crossentropy_warps(float *loss, int *rank_class, void *logits16, int ldv, const int *y, int M, int V,
                               row_window rw, float grad_scale, int with_grad, int warps, cudaStream_t s);

/* grad_reduce.cu: g ← g·mul over n elements; partial sums of squares into
 * partials[grad_reduce_blocks()] (FP32 per block) and the count of non-finite values. */
int grad_reduce_blocks(void);
void launch_grad_reduce_sumsq(float *g, size_t n, float mul, float *partials, int *nonfinite, cudaStream_t s);
/* adamw.cu: one AdamW step over n elements; p16 gets the FP16 copy of p. */
void launch_adamw(float *p, void *p16, const float *g, float *m, float *v, size_t n, float lr,
                  float decay_factor, float beta1, float beta2, float bc1, float bc2, float eps,
                  cudaStream_t s);

/* finite.cu: *first = index of the first non-finite element (first must be
 * set to ULLONG_MAX beforehand; unchanged when all are finite). */
void launch_find_nonfinite(const void *x, size_t n, int is_half, unsigned long long *first, cudaStream_t s);
/* The same over nseq runs of len elements, run i at x + i·stride (elements):
 * *first becomes the least i·stride + offset of a non-finite element. */
void launch_find_nonfinite_rows(const void *x, int nseq, size_t stride, size_t len, int is_half,
                                unsigned long long *first, cudaStream_t s);
/* *value = x[*first] as FP32 where a scan found one (else left alone). */
void launch_fetch_at(const void *x, int is_half, const unsigned long long *first, float *value, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
