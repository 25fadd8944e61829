/* The operations of the context stream, the classifier and the loss
 * (step_gpu.h), each written once: over a lane's (or, under recompute, a
 * part's) sequences and all of T, or under the wavefront a chunk of steps
 * where the chunks are whole blocks of the tensor-core attention (the
 * queries of a chunk read keys from up to W - 1 steps before it; in the
 * backward, the keys of a chunk take the gradients of the queries up to
 * W - 1 steps after it, whose chunks ran before). Under recompute the
 * context stream's tensors hold one part (top_r0 = 0), and the parts,
 * which share them, run one after another: their accesses overlap, so the
 * scheduler orders them (as it orders them after the layers' tensors whose
 * bytes they share in `work`: work_layout_gpu.c). */
#include <stdio.h>
#include "catchat/dist.h"
#include "catchat/kernels.h"
#include "gpu/gpu_impl.h"
#include "gpu/step_gpu.h"

static int chunked(const step_run *r) { return r->p->top_chunked; }
static int op_len(const step_run *r) { return r->op->t1 - r->op->t0; }
static row_window chunk_rows(const step_run *r)
{
    const row_window w = { op_len(r), r->c.T, 0 };
    return w;
}
/* u^L: its own block, or under recompute u's one block. */
static const float *uL_rows(const lane_ctx *c) { return c->g->plan.recompute ? ROWS(c, c->g->u, c->D) : LROWS(c, c->g->u, c->L, c->D); }
/* The first step whose keys the queries of [t0, ·) read. */
static int key_first(const step_run *r) { return r->op->t0 - r->c.W + 1 > 0 ? r->op->t0 - r->c.W + 1 : 0; }
/* The last query (exclusive) whose window reaches the op's keys: the
 * backward's key side reads their q and dO, which later chunks wrote. */
static int query_last(const step_run *r) { return r->op->t1 + r->c.W - 1 < r->c.T ? r->op->t1 + r->c.W - 1 : r->c.T; }
/* A lane's (or part's) per-query, per-head [B, H, T] tensor, whole. */
static void use_heads(step_run *r, int write, const float *base)
{
    use_flat(r, write, HROWS(&r->c, base), sizeof(float) * (size_t)r->c.B * r->c.H * r->c.T);
}

/* q, k, v, the attention and its output c. */
void op_top_ctx(step_run *r)
{
    const lane_ctx *c = &r->c;
    cc_executor *ex = c->ex;
    gpu_impl *g = c->g;
    const cc_layout *lay = &ex->lay;
    const int D = c->D, T = c->T, t0 = r->op->t0, t1 = r->op->t1, M = c->B * op_len(r);
    const size_t at = (size_t)t0, HW = (size_t)c->H * c->W;
    uint16_t *s16 = TOPROWS(c, g->s16, D), *o16 = TOPROWS(c, g->o16, D);
    float *cc = TOPROWS(c, g->c, D);
    use_rows(r, 0, s16, D, 2, t0, t1);
    if (g->plan.attn_tc) {
        uint16_t *qkv16 = TOPROWS(c, g->qkv16, 3 * D);
        use_rows(r, ACC_DEFINE, qkv16, 3 * D, 2, t0, t1);
        use_rows(r, 0, qkv16, 3 * D, 2, key_first(r), t1);
        use_heads(r, 1, g->lse);
        scan_rows(r, "qkv_projection", "qkv", -1, qkv16, 3 * D, 1, t0, t1, 0);
    } else {
        use_rows(r, 1, ROWS(c, g->qkv, 3 * D), 3 * D, 4, t0, t1);
        use_rows(r, 1, ROWS(c, g->p, HW), HW, 4, t0, t1);
        scan_rows(r, "qkv_projection", "qkv", -1, ROWS(c, g->qkv, 3 * D), 3 * D, 0, t0, t1, 0);
    }
    use_rows(r, ACC_DEFINE, o16, D, 2, t0, t1);
    use_rows(r, ACC_DEFINE, cc, D, 4, t0, t1);
    scan_rows(r, "attention_forward", "o", -1, o16, D, 1, t0, t1, 0);
    scan_rows(r, "ctx_out_projection", "c", -1, cc, D, 0, t0, t1, 0);
    if (r->declaring) return;

    cudaStream_t s = r->s;
    if (chunked(r)) { /* tensor cores only (program_gpu.c) */
        const int len = op_len(r);
        uint16_t *qkv16 = TOPROWS(c, g->qkv16, 3 * D);
        gpu_matmul_fwd_f16_window(r->gm, qkv16 + at * 3 * D, s16 + at * D, P16(ex, lay->ctx_qkv), c->B, len, T, 3 * D,
                                  D, s);
        launch_attention_forward_tc_window(g->plan.attn_tc, NULL, o16, NULL, HROWS(c, g->lse), qkv16, c->B, T, D, c->H, c->W, t0, t1, s);
        gpu_matmul_fwd_window(r->gm, cc + at * D, o16 + at * D, P16(ex, lay->ctx_out), NULL, c->B, len, T, D, D, s);
        return;
    }
    if (g->plan.attn_tc) { /* q, k, v only ever feed FP16 operands: the GEMM rounds them once */
        uint16_t *qkv16 = TOPROWS(c, g->qkv16, 3 * D);
        gpu_matmul_fwd_f16(r->gm, qkv16, s16, P16(ex, lay->ctx_qkv), M, 3 * D, D, s);
        launch_attention_forward_tc(g->plan.attn_tc, NULL, o16, NULL, HROWS(c, g->lse), qkv16, c->B, T, D, c->H, c->W, s);
    } else {
        float *qkv = ROWS(c, g->qkv, 3 * D);
        gpu_matmul_fwd(r->gm, qkv, s16, P16(ex, lay->ctx_qkv), NULL, M, 3 * D, D, s);
        launch_attention_forward(NULL, o16, ROWS(c, g->p, HW), qkv, c->B, T, D, c->H, c->W, &g->plan.caps, s);
    }
    gpu_matmul_fwd(r->gm, cc, o16, P16(ex, lay->ctx_out), NULL, M, D, D, s);
}

static void ce_scan(void *ctx, const char *stage, const char *tensor, const void *ptr, size_t n, int half, int width)
{
    scan_flat(ctx, stage, tensor, ptr, n, half, width);
}

/* The merge, the final norm, the classifier and the loss on the op's rows
 * (gpu_crossentropy.h): with a gradient, dL/dm into du and the lm_head and
 * final norm gradients into the lane's (the last chunk's weight GEMM on the
 * side stream, which the context stream's weight GEMMs follow there; on its
 * own stream in a serial program, which has no other). */
void op_classifier(step_run *r)
{
    const lane_ctx *c = &r->c;
    cc_executor *ex = c->ex;
    gpu_impl *g = c->g;
    gpu_lane *ln = c->ln;
    const cc_layout *lay = &ex->lay;
    const int D = c->D, t0 = r->op->t0, t1 = r->op->t1, grad = r->p->with_grad;
    const size_t at = (size_t)t0;
    float *cc = TOPROWS(c, g->c, D);
    use_rows(r, 0, uL_rows(c), D, 4, t0, t1);
    use_rows(r, 1, cc, D, 4, t0, t1); /* the merge over c */
    use_rows(r, 1, ROWS(c, g->f_ir, 1), 1, 4, t0, t1);
    use_rows(r, 1, ROWS(c, g->loss_row, 1), 1, 4, t0, t1);
    use_rows(r, 1, ROWS(c, g->rank, 1), 1, 4, t0, t1);
    use_flat(r, 1, ln->ce.logits16, gpu_ce_chunk_bytes(g->plan.ce_rows, D, c->V));
    if (grad) {
        use_rows(r, 1, ROWS(c, g->du, D), D, 4, t0, t1);
        use_grad(r, lay->final_norm);
        use_grad(r, lay->lm_head);
        scan_rows(r, "final_rmsnorm_backward", "dm", -1, ROWS(c, g->du, D), D, 0, t0, t1, 0);
    }
    if (r->declaring) return;

    const row_window rw = chunked(r) ? chunk_rows(r) : row_window_all(c->M);
    const gpu_ce_args a = {
        .M = c->B * (t1 - t0), .D = D, .V = c->V, .rw = rw,
        .u = uL_rows(c) + at * D, .c = cc + at * D, .f_ir = ROWS(c, g->f_ir, 1) + at,
        .g_final = P32(ex, lay->final_norm), .w16 = P16(ex, lay->lm_head),
        .y = ROWS(c, g->y, 1) + at, .loss = ROWS(c, g->loss_row, 1) + at, .rank = ROWS(c, g->rank, 1) + at,
        .du = grad ? ROWS(c, g->du, D) + at * D : NULL,
        .dg_final = G32L(c, lay->final_norm), .dw = G32L(c, lay->lm_head),
        .grad_scale = r->loss_scale, .nc = &c->nc, .caps = &g->plan.caps,
        .side = r->p->serial ? NULL : ln->wgrad_stream, .side_gemm = ln->gemm_wgrad, .ev_fork = ln->ev_ce_fork, .ev_free = ln->ev_ce_free,
        .pending = &ln->ce_pending,
        .check = ex->check ? ce_scan : NULL, .check_ctx = r,
    };
    /* the scans inside run at issue only; the rows' own scan above covers the serial order's place */
    gpu_crossentropy(r->gm, &ln->ce, &a, r->sc, r->s);
}

/* The gradient into the context stream, dc16, from dL/dm in du: through the
 * guard's rescaled copy where [train] ctx_grad_clamp is set (du itself flows
 * on down the residual). dc lies over c, which the final norm's backward
 * (in the classifier) was the last to read. */
void op_top_dc(step_run *r)
{
    const lane_ctx *c = &r->c;
    gpu_impl *g = c->g;
    const int D = c->D, t0 = r->op->t0, t1 = r->op->t1, M = c->B * op_len(r);
    const size_t at = (size_t)t0;
    float *du = ROWS(c, g->du, D) + at * D, *dc = TOPROWS(c, g->dc, D) + at * D;
    uint16_t *dc16 = TOPROWS(c, g->dc16, D) + at * D;
    const int guard = c->ex->cfg.ctx_grad_clamp > 0;
    use_rows(r, 0, ROWS(c, g->du, D), D, 4, t0, t1);
    if (guard) use_rows(r, ACC_DEFINE, TOPROWS(c, g->dc, D), D, 4, t0, t1); /* du's copy, clamped */
    use_rows(r, ACC_DEFINE, TOPROWS(c, g->dc16, D), D, 2, t0, t1);
    if (r->declaring) return;

    cudaStream_t s = r->s;
    const int guarded = r->ctx_limit > 0;
    if (chunked(r)) {
        const size_t pitch = sizeof(float) * (size_t)c->T * D, width = sizeof(float) * (size_t)op_len(r) * D;
        if (guarded) {
            cudaCheck(cudaMemcpy2DAsync(dc, pitch, du, pitch, width, c->B, cudaMemcpyDeviceToDevice, s));
            launch_rownorm_clamp(dc, M, D, chunk_rows(r), r->ctx_limit, s);
        }
        launch_f32_to_f16_rows(dc16, guarded ? dc : du, M, D, chunk_rows(r), s);
        return;
    }
    if (guarded) {
        cudaCheck(cudaMemcpyAsync(dc, du, sizeof(float) * (size_t)M * D, cudaMemcpyDeviceToDevice, s));
        launch_rownorm_clamp(dc, M, D, row_window_all(M), r->ctx_limit, s);
    }
    launch_f32_to_f16(dc16, guarded ? dc : du, (size_t)M * D, s);
}

/* ctx_out's weight gradient over the op's rows (all T). */
void op_wg_ctx_out(step_run *r)
{
    const lane_ctx *c = &r->c;
    gpu_impl *g = c->g;
    const int D = c->D;
    use_rows(r, 0, TOPROWS(c, g->dc16, D), D, 2, 0, c->T);
    use_rows(r, 0, TOPROWS(c, g->o16, D), D, 2, 0, c->T);
    use_grad(r, c->ex->lay.ctx_out);
    if (r->declaring) return;
    gpu_matmul_dw(r->gm, G32L(c, c->ex->lay.ctx_out), TOPROWS(c, g->dc16, D), TOPROWS(c, g->o16, D), c->M, D, D, r->s);
}

/* dO = dc16·W_out, then the attention backward: dqkv in d16. */
void op_top_attn(step_run *r)
{
    const lane_ctx *c = &r->c;
    cc_executor *ex = c->ex;
    gpu_impl *g = c->g;
    const cc_layout *lay = &ex->lay;
    const int D = c->D, T = c->T, t0 = r->op->t0, t1 = r->op->t1, M = c->B * op_len(r);
    const size_t at = (size_t)t0, HW = (size_t)c->H * c->W;
    uint16_t *dc16 = TOPROWS(c, g->dc16, D), *d16 = TOPROWS(c, g->d16, 3 * D);
    use_rows(r, 0, dc16, D, 2, t0, t1);
    /* the keys' gradients reach back W - 1 steps (added to a chunk's before; over all T, written once) */
    use_rows(r, chunked(r) ? ACC_WRITE : ACC_DEFINE, d16, 3 * D, 2, key_first(r), t1);
    if (g->plan.attn_tc) {
        use_rows(r, ACC_DEFINE, TOPROWS(c, g->do16, D), D, 2, t0, t1);
        /* the tiled kernel's δ = Σ dO ⊙ O reads the forward's output */
        if (g->plan.attn_tc == ATTN_TC_TILED) use_rows(r, 0, TOPROWS(c, g->o16, D), D, 2, t0, t1);
        use_rows(r, 0, TOPROWS(c, g->qkv16, 3 * D), 3 * D, 2, key_first(r), query_last(r));
        if (query_last(r) > t1) use_rows(r, 0, TOPROWS(c, g->do16, D), D, 2, t1, query_last(r));
        use_heads(r, 0, g->lse);
        use_heads(r, 1, g->delta);
        scan_rows(r, "attention_backward", "dqkv", -1, d16, 3 * D, 1, t0, t1, 0);
    } else {
        use_rows(r, ACC_DEFINE, TOPROWS(c, g->dtmp, D), D, 4, t0, t1);
        use_rows(r, 0, ROWS(c, g->qkv, 3 * D), 3 * D, 4, 0, T);
        use_rows(r, 0, ROWS(c, g->p, HW), HW, 4, 0, T);
        use_rows(r, 1, ROWS(c, g->dsbuf, HW), HW, 4, 0, T);
        use_rows(r, 1, ROWS(c, g->dqkv, 3 * D), 3 * D, 4, 0, T);
        scan_rows(r, "attention_backward", "dqkv", -1, ROWS(c, g->dqkv, 3 * D), 3 * D, 0, t0, t1, 0);
    }
    if (r->declaring) return;

    cudaStream_t s = r->s;
    if (chunked(r)) {
        uint16_t *do16 = TOPROWS(c, g->do16, D);
        gpu_matmul_dx_f16_window(r->gm, do16 + at * D, dc16 + at * D, P16(ex, lay->ctx_out), c->B, op_len(r), T, D,
                                 D, s);
        launch_attention_backward_tc_window(g->plan.attn_tc, NULL, d16, HROWS(c, g->delta), do16,
                                            TOPROWS(c, g->o16, D), HROWS(c, g->lse),
                                            TOPROWS(c, g->qkv16, 3 * D), c->B, T, D, c->H, c->W, t0, t1, s);
        return;
    }
    if (g->plan.attn_tc) { /* the tensor-core kernels read dO and write dqkv in FP16 only */
        uint16_t *do16 = TOPROWS(c, g->do16, D);
        gpu_matmul_dx_f16(r->gm, do16, dc16, P16(ex, lay->ctx_out), M, D, D, s);
        launch_attention_backward_tc(g->plan.attn_tc, NULL, d16, HROWS(c, g->delta), do16, TOPROWS(c, g->o16, D),
                                     HROWS(c, g->lse),
                                     TOPROWS(c, g->qkv16, 3 * D), c->B, T, D, c->H, c->W, s);
    } else {
        float *dtmp = TOPROWS(c, g->dtmp, D);
        gpu_matmul_dx(r->gm, dtmp, dc16, P16(ex, lay->ctx_out), M, D, D, 0, s);
        launch_attention_backward(ROWS(c, g->dqkv, 3 * D), d16, ROWS(c, g->dsbuf, HW), dtmp, ROWS(c, g->p, HW),
                                  ROWS(c, g->qkv, 3 * D), c->B, T, D, c->H, c->W, &g->plan.caps, s);
    }
}

/* ctx_qkv's weight gradient over the op's rows (all T). */
void op_wg_ctx_qkv(step_run *r)
{
    const lane_ctx *c = &r->c;
    gpu_impl *g = c->g;
    const int D = c->D;
    use_rows(r, 0, TOPROWS(c, g->d16, 3 * D), 3 * D, 2, 0, c->T);
    use_rows(r, 0, TOPROWS(c, g->s16, D), D, 2, 0, c->T);
    use_grad(r, c->ex->lay.ctx_qkv);
    if (r->declaring) return;
    gpu_matmul_dw(r->gm, G32L(c, c->ex->lay.ctx_qkv), TOPROWS(c, g->d16, 3 * D), TOPROWS(c, g->s16, D), c->M, 3 * D,
                  D, r->s);
}

/* dqkv through ctx_qkv and the context norm's backward, added into du: dL/du^L. */
void op_top_dx(step_run *r)
{
    const lane_ctx *c = &r->c;
    cc_executor *ex = c->ex;
    gpu_impl *g = c->g;
    const cc_layout *lay = &ex->lay;
    const int D = c->D, t0 = r->op->t0, t1 = r->op->t1, M = c->B * op_len(r);
    const size_t at = (size_t)t0;
    uint16_t *d16 = TOPROWS(c, g->d16, 3 * D) + at * 3 * D;
    float *dtmp = TOPROWS(c, g->dtmp, D) + at * D, *du = ROWS(c, g->du, D);
    use_rows(r, 0, TOPROWS(c, g->d16, 3 * D), 3 * D, 2, t0, t1);
    use_rows(r, ACC_DEFINE, TOPROWS(c, g->dtmp, D), D, 4, t0, t1);
    use_rows(r, 1, du, D, 4, t0, t1);
    use_rows(r, 0, uL_rows(c), D, 4, t0, t1);
    use_rows(r, 0, ROWS(c, g->s_ir, 1), 1, 4, t0, t1);
    use_grad(r, lay->ctx_norm);
    scan_rows(r, "ctx_rmsnorm_backward", "du", -1, du, D, 0, t0, t1, 0);
    if (r->declaring) return;

    cudaStream_t s = r->s;
    const uint16_t *w = P16(ex, lay->ctx_qkv);
    if (chunked(r))
        gpu_matmul_dx_window(r->gm, dtmp, d16, w, c->B, op_len(r), c->T, 3 * D, D, s);
    else
        gpu_matmul_dx(r->gm, dtmp, d16, w, M, 3 * D, D, 0, s);
    launch_rmsnorm_backward(du + at * D, G32L(c, lay->ctx_norm), dtmp, uL_rows(c) + at * D, P32(ex, lay->ctx_norm),
                            ROWS(c, g->s_ir, 1) + at, M, D, chunked(r) ? chunk_rows(r) : row_window_all(M), &c->nc,
                            &g->plan.caps, r->sc, s);
}

/* The ctx.*, final_norm and lm_head gradients lie at the end of the buffer
 * and are final once the context stream's backward is done: with one lane,
 * reduce them over ranks on the communication stream while the BPTT runs.
 * The classifier's last lm_head GEMM runs on the side stream inside its
 * operation; the context stream's weight GEMMs follow it there, and this
 * waits for them (their gradients lie in the tail too). */
void op_allreduce_tail(step_run *r)
{
    cc_executor *ex = r->ex;
    gpu_impl *g = r->g;
    const size_t tail = ex->lay.t[ex->lay.ctx_norm].offset;
    use_flat(r, 1, g->g32 + tail, sizeof(float) * (ex->lay.total - tail));
    if (r->declaring) return;
    cc_dist_allreduce_f32(ex->dist, g->g32 + tail, ex->lay.total - tail, r->s);
}
