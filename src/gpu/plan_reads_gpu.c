/* What is read off a plan (gpu_plan.h), by the planner (plan_gpu.c), the
 * layout of recompute's `work` (work_layout_gpu.c), the executor and its
 * programs (program_gpu.c) alike: the executor's device buffers
 * (gpu_plan_buffers, one row a buffer: what the executor allocates and
 * what the planner counts its bytes from), the layers with their own
 * gradient buffers, the wavefront's pair of streams of each layer, and
 * whether the context stream runs in the wavefront's chunks. Functions of
 * the plan alone: of src/gpu this file calls only the sizes of
 * crossentropy.c and gru.c, which call none of those above, so each of
 * them calls it and none calls back. */
#include <stddef.h>
#include "catchat/gpu_crossentropy.h"
#include "catchat/gpu_gru.h"
#include "catchat/gpu_plan.h"
#include "catchat/kernels.h"

int gpu_plan_top_chunked(const gpu_step_plan *p, int T)
{
    return p->wave_chunk > 0 && !p->recompute && p->attn_tc && p->wave_chunk % ATTENTION_TC_BLOCK == 0 &&
           p->wave_chunk < T;
}

int gpu_plan_wave_layers(const gpu_step_plan *p, const cc_dims *d)
{
    return p->wave_chunk && d->L > 2 ? d->L : 2;
}

int gpu_plan_wave_stream(const gpu_step_plan *p, int l) { return p->wave_group > 1 ? l / p->wave_group : l; }

int gpu_plan_buffers(const gpu_step_plan *p, const cc_dims *d, size_t n, int B, int T, gpu_plan_buffer *t)
{
    const size_t M = (size_t)B * T, D = d->D, L = d->L, V = d->V, MD = M * D;
    const size_t lanes = (size_t)p->lanes;
    /* every lane's classifier chunk (gpu_crossentropy.h) */
    const size_t ce = lanes * gpu_ce_chunk_bytes(p->ce_rows, (int)D, (int)V);
    /* The tensor-core attention reads q, k, v and dO in FP16, writes dqkv in
     * FP16 only and keeps one lse (and delta) per query and head; the FP32
     * kernels read FP32 and store the probabilities (and ds) of the band. */
    const int tc = p->attn_tc;
    const size_t band = (size_t)B * d->H * T * (tc ? 1 : d->W);
    /* under recompute: u in one block (and du by turns), the rest of the layers' and the top's in work */
    const int rc = p->recompute;
    const size_t kept = rc ? 0 : 1;
    /* `work` as its liveness laid it out at the plan's batch, in proportion at another (its window
     * buffers hold every sequence's rows; the context stream's part grows with the lanes' batch) */
    const size_t plan_B = (size_t)p->lane_B * (p->lanes > 0 ? p->lanes : 1);
    const size_t work = rc && plan_B ? p->work_bytes / plan_B * (size_t)B + p->work_bytes % plan_B : 0;
    /* lm_head's FP16 copy and its gradients carry the classifier's padding rows past the end (gpu_ce_pad_floats) */
    const size_t ng = n + gpu_ce_pad_floats((int)V, (int)D);
    const size_t WL = (size_t)gpu_plan_wave_layers(p, d); /* layers with their own scratch and gradient buffers */
#define BUF(id, size, name, zero, grp) t[GPU_BUF_##id] = (gpu_plan_buffer){ GPU_BUF_##id, (size), (name), (zero), (grp) }
    BUF(P32, 4 * n, "parameters", 0, GPU_MEM_WEIGHTS);
    BUF(G32, 4 * ng, "gradients", 1, GPU_MEM_WEIGHTS);
    BUF(G32_LANES, lanes > 1 ? 4 * ng * (lanes - 1) : 0, "gradients of lanes 1..", 1, GPU_MEM_LANES);
    BUF(M, 4 * n, "AdamW m", 1, GPU_MEM_WEIGHTS);
    BUF(V, 4 * n, "AdamW v", 1, GPU_MEM_WEIGHTS);
    BUF(P16, 2 * ng, "FP16 weights", 1, GPU_MEM_WEIGHTS); /* zeroed: the padding rows stay 0 */
    BUF(X, 4 * M, "tokens", 0, GPU_MEM_WORKSPACE);
    BUF(Y, 4 * M, "targets", 0, GPU_MEM_WORKSPACE);
    BUF(WORK, work, "a layer's windows and a part's context stream (recompute)", 0, GPU_MEM_LAYERS);
    BUF(U, 4 * (rc ? 1 : L + 1) * MD, "residual stream", 0, GPU_MEM_LAYERS);
    BUF(A_IR, 4 * L * M, "norm stats", 0, GPU_MEM_LAYERS);
    BUF(GX, kept * 4 * L * 3 * MD, "input projections", 0, GPU_MEM_LAYERS);
    BUF(GATES, kept * 4 * L * 3 * MD, "gates", 0, GPU_MEM_LAYERS);
    BUF(GHN, kept * 4 * L * MD, "ghn", 0, GPU_MEM_LAYERS);
    BUF(H, 4 * L * MD, "GRU states", 0, GPU_MEM_LAYERS);
    BUF(GH, 4 * WL * B * 3 * D, "recurrent product", 0, GPU_MEM_LAYERS);
    BUF(A16, kept * 2 * L * MD, "normalised inputs", 0, GPU_MEM_LAYERS); /* under recompute a layer's: in work */
    BUF(HPREV16, kept * 2 * L * MD, "h_{t-1} FP16", 0, GPU_MEM_LAYERS);
    BUF(S_IR, 4 * M, "ctx norm stats", 0, GPU_MEM_ATTENTION);
    BUF(QKV16, tc ? kept * 2 * 3 * MD : 0, "qkv FP16", 0, GPU_MEM_ATTENTION);
    BUF(DO16, tc ? kept * 2 * MD : 0, "attention dO FP16", 0, GPU_MEM_ATTENTION);
    BUF(LSE, tc ? 4 * band : 0, "attention log-sum-exp", 0, GPU_MEM_ATTENTION);
    BUF(DELTA, tc ? 4 * band : 0, "attention delta", 0, GPU_MEM_ATTENTION);
    BUF(QKV, tc ? 0 : 4 * 3 * MD, "qkv", 0, GPU_MEM_ATTENTION);
    BUF(DQKV, tc ? 0 : 4 * 3 * MD, "dqkv", 0, GPU_MEM_ATTENTION);
    BUF(P, tc ? 0 : 4 * band, "attention probabilities", 0, GPU_MEM_ATTENTION);
    BUF(DSBUF, tc ? 0 : 4 * band, "attention ds", 0, GPU_MEM_ATTENTION);
    BUF(C, kept * 4 * MD, "context output, then the merge", 0, GPU_MEM_ATTENTION);
    BUF(F_IR, 4 * M, "final norm stats", 0, GPU_MEM_CLASSIFIER);
    /* zeroed: a chunk's padding columns hold no stale NaN for [gpu] check's scans */
    BUF(CE_BUFS, ce, "classifier chunks (logits, final norm out, its gradient)", 1, GPU_MEM_CLASSIFIER);
    BUF(LOSS_ROW, 4 * M, "losses", 0, GPU_MEM_CLASSIFIER);
    BUF(RANK, 4 * M, "ranks", 0, GPU_MEM_CLASSIFIER);
    BUF(S16, kept * 2 * MD, "ctx norm out", 0, GPU_MEM_ATTENTION);
    BUF(O16, kept * 2 * MD, "attention out", 0, GPU_MEM_ATTENTION);
    BUF(DU, 4 * MD, "du", 0, GPU_MEM_LAYERS);
    BUF(DTMP, kept * 4 * MD, "dtmp", 0, GPU_MEM_LAYERS);
    BUF(DHREC, 4 * WL * B * D, "dh recurrent", 0, GPU_MEM_LAYERS);
    BUF(DGX16, kept * 2 * WL * 3 * MD, "dgx (a layer's worth each)", 0, GPU_MEM_LAYERS);
    BUF(DGH16, kept * 2 * WL * 3 * MD, "dgh (a layer's worth each)", 0, GPU_MEM_LAYERS);
    BUF(BIAS_PART, 4 * WL * gpu_gru_bias_part_floats(B, (int)D), "BPTT bias sums (a layer's worth each)", 0,
        GPU_MEM_LAYERS);
    BUF(D16, kept * 2 * 3 * MD, "FP16 dqkv", 0, GPU_MEM_ATTENTION);
    BUF(DC16, kept * 2 * MD, "FP16 context-stream gradient", 0, GPU_MEM_ATTENTION);
    BUF(PARTIALS, 4 * (size_t)grad_reduce_blocks(), "norm partials", 0, GPU_MEM_WORKSPACE);
    BUF(NONFINITE, sizeof(int), "non-finite count", 0, GPU_MEM_WORKSPACE);
    BUF(FIRST_BAD, sizeof(unsigned long long), "non-finite index", 0, GPU_MEM_WORKSPACE);
    BUF(TOK_OFF, 4 * (V + 1) * GPU_MAX_LANES, "token offsets", 0, GPU_MEM_WORKSPACE);
    BUF(TOK_POS, 4 * M, "token positions", 0, GPU_MEM_WORKSPACE);
#undef BUF
    return GPU_BUF_COUNT;
}
