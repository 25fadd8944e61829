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
static float *view_heads(step_run *r, int acc, const float *base)
{
    return view_flat(r, acc, HROWS(&r->c, base), sizeof(float) * (size_t)r->c.B * r->c.H * r->c.T);
}

/* q, k, v, the attention and its output c. */
void op_top_ctx(step_run *r)
{
    const lane_ctx *c = &r->c;
    cc_executor *ex = c->ex;
    gpu_impl *g = c->g;
    const cc_layout *lay = &ex->lay;
    const int D = c->D, T = c->T, t0 = r->op->t0, t1 = r->op->t1, M = c->B * op_len(r);
    const size_t HW = (size_t)c->H * c->W;
    const uint16_t *s16 = view_rows(r, ACC_READ, TOPROWS(c, g->s16, D), D, 2, t0, t1);
    uint16_t *qkv16 = NULL, *qkv16_at = NULL;
    float *lse = NULL, *qkv = NULL, *pr = NULL;
    if (g->plan.attn_tc) {
        qkv16_at = view_rows(r, ACC_DEFINE, TOPROWS(c, g->qkv16, 3 * D), 3 * D, 2, t0, t1);
        /* the queries' keys reach back W - 1 steps: the attention takes the lane block */
        qkv16 = view_lane(r, ACC_READ, TOPROWS(c, g->qkv16, 3 * D), 3 * D, 2, key_first(r), t1);
        lse = view_heads(r, ACC_WRITE, g->lse);
        scan_rows(r, "qkv_projection", "qkv", -1, qkv16, 3 * D, 1, t0, t1, 0);
    } else {
        qkv = view_rows(r, ACC_WRITE, ROWS(c, g->qkv, 3 * D), 3 * D, 4, t0, t1);
        pr = view_rows(r, ACC_WRITE, ROWS(c, g->p, HW), HW, 4, t0, t1);
        scan_rows(r, "qkv_projection", "qkv", -1, ROWS(c, g->qkv, 3 * D), 3 * D, 0, t0, t1, 0);
    }
    uint16_t *o16 = view_lane(r, ACC_DEFINE, TOPROWS(c, g->o16, D), D, 2, t0, t1);
    float *cc = view_rows(r, ACC_DEFINE, TOPROWS(c, g->c, D), D, 4, t0, t1);
    const uint16_t *wqkv = view_param16(r, lay->ctx_qkv), *wout = view_param16(r, lay->ctx_out);
    scan_rows(r, "attention_forward", "o", -1, o16, D, 1, t0, t1, 0);
    scan_rows(r, "ctx_out_projection", "c", -1, TOPROWS(c, g->c, D), D, 0, t0, t1, 0);
    if (r->declaring) return;

    cudaStream_t s = r->s;
    const uint16_t *o16_at = o16 + (size_t)t0 * D;
    if (chunked(r)) { /* tensor cores only (program_gpu.c) */
        const int len = op_len(r);
        gpu_matmul_fwd_f16_window(r->gm, qkv16_at, s16, wqkv, c->B, len, T, 3 * D, D, s);
        launch_attention_forward_tc_window(g->plan.attn_tc, NULL, o16, NULL, lse, qkv16, c->B, T, D, c->H, c->W, t0, t1, s);
        gpu_matmul_fwd_window(r->gm, cc, o16_at, wout, NULL, c->B, len, T, D, D, s);
        return;
    }
    if (g->plan.attn_tc) { /* q, k, v only ever feed FP16 operands: the GEMM rounds them once */
        gpu_matmul_fwd_f16(r->gm, qkv16_at, s16, wqkv, M, 3 * D, D, s);
        launch_attention_forward_tc(g->plan.attn_tc, NULL, o16, NULL, lse, qkv16, c->B, T, D, c->H, c->W, s);
    } else {
        gpu_matmul_fwd(r->gm, qkv, s16, wqkv, NULL, M, 3 * D, D, s);
        launch_attention_forward(NULL, o16, pr, qkv, c->B, T, D, c->H, c->W, &g->plan.caps, s);
    }
    gpu_matmul_fwd(r->gm, cc, o16_at, wout, NULL, M, D, D, s);
}

/* lm_head's elements with the classifier's padding rows past its end
 * (gpu_ce_pad_floats: lm_head is the layout's last tensor), which the GEMMs
 * over ldv classes read (its FP16 copy) and write (its gradient). */
static size_t lm_head_padded(const step_run *r)
{
    const cc_layout *lay = &r->ex->lay;
    return lay->t[lay->lm_head].numel + gpu_ce_pad_floats(r->c.V, r->c.D);
}
static float *view_lm_head_grad(step_run *r)
{
    return view_flat(r, ACC_WRITE, G32L(&r->c, r->ex->lay.lm_head), sizeof(float) * lm_head_padded(r));
}

/* The classifier's rows: a time window of the lane's sequences, or all. */
static row_window classifier_rows(const step_run *r) { return chunked(r) ? chunk_rows(r) : row_window_all(r->c.M); }

static void ce_scan(void *ctx, const char *stage, const char *tensor, const void *ptr, size_t n, int half, int width)
{
    scan_flat(ctx, stage, tensor, ptr, n, half, width);
}

/* The classifier's arguments on the op's rows, each tensor a view
 * (gpu_crossentropy.h); with a gradient, dL/dm into du and the lm_head and
 * final norm gradients into the lane's. */
static gpu_ce_args classifier_args(step_run *r, int grad)
{
    const lane_ctx *c = &r->c;
    cc_executor *ex = c->ex;
    gpu_impl *g = c->g;
    const cc_layout *lay = &ex->lay;
    const int D = c->D, t0 = r->op->t0, t1 = r->op->t1;
    const gpu_ce_args a = {
        .M = c->B * (t1 - t0), .D = D, .V = c->V, .rw = classifier_rows(r),
        .u = view_rows(r, ACC_READ, uL_rows(c), D, 4, t0, t1),
        .c = view_rows(r, ACC_WRITE, TOPROWS(c, g->c, D), D, 4, t0, t1), /* the merge over c */
        .f_ir = view_rows(r, ACC_WRITE, ROWS(c, g->f_ir, 1), 1, 4, t0, t1),
        .g_final = view_param32(r, lay->final_norm),
        .w16 = view_flat(r, ACC_READ, P16(ex, lay->lm_head), sizeof(uint16_t) * lm_head_padded(r)),
        .y = view_rows(r, ACC_READ, ROWS(c, g->y, 1), 1, 4, t0, t1),
        .loss = view_rows(r, ACC_WRITE, ROWS(c, g->loss_row, 1), 1, 4, t0, t1),
        .rank = view_rows(r, ACC_WRITE, ROWS(c, g->rank, 1), 1, 4, t0, t1),
        .du = grad ? view_rows(r, ACC_WRITE, ROWS(c, g->du, D), D, 4, t0, t1) : NULL,
        .dg_final = grad ? view_grad(r, lay->final_norm) : NULL,
        .dw = grad ? view_lm_head_grad(r) : NULL,
        .grad_scale = r->loss_scale, .nc = &c->nc, .caps = &g->plan.caps,
        /* the last chunk's weight GEMM is an operation of its own (op_classifier_dw) */
        .defer_last_dw = grad,
        .check = ex->check ? ce_scan : NULL, .check_ctx = r,
    };
    return a;
}

/* The lane's classifier chunk buffers (gpu_crossentropy.h). */
static const gpu_ce_chunk *chunk_view(step_run *r, int acc)
{
    const lane_ctx *c = &r->c;
    view_flat(r, acc, c->ln->ce.logits16, gpu_ce_chunk_bytes(c->g->plan.ce_rows, c->D, c->V));
    return &c->ln->ce;
}

/* The merge, the final norm, the classifier and the loss on the op's rows
 * (gpu_crossentropy.h): with a gradient, dL/dm into du and the lm_head and
 * final norm gradients into the lane's, all but the last chunk's lm_head
 * weight GEMM, which op_classifier_dw runs (on the side stream: the
 * scheduler orders it after this op, by the chunk buffers it reads, and
 * the next use of those buffers after it). */
void op_classifier(step_run *r)
{
    const int grad = r->p->with_grad;
    const gpu_ce_args a = classifier_args(r, grad);
    const gpu_ce_chunk *ck = chunk_view(r, ACC_WRITE);
    if (grad) scan_rows(r, "final_rmsnorm_backward", "dm", -1, ROWS(&r->c, r->g->du, r->c.D), r->c.D, 0, r->op->t0, r->op->t1, 0);
    if (r->declaring) return;
    /* the scans inside run at issue only; the rows' own scan above covers the serial order's place */
    gpu_crossentropy(r->gm, ck, &a, r->sc, r->s);
}

/* The classifier's last chunk's lm_head weight GEMM, from the chunk buffers
 * op_classifier left. */
void op_classifier_dw(step_run *r)
{
    const gpu_ce_chunk *ck = chunk_view(r, ACC_READ);
    const lane_ctx *c = &r->c;
    const int t0 = r->op->t0, t1 = r->op->t1;
    const gpu_ce_args a = { .M = c->B * (t1 - t0), .D = c->D, .V = c->V,
                            .rw = classifier_rows(r),
                            .dw = view_lm_head_grad(r) };
    if (r->declaring) return;
    gpu_crossentropy_last_dw(r->gm, ck, &a, r->s);
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
    const int guard = c->ex->cfg.ctx_grad_clamp > 0;
    const float *du = view_rows(r, ACC_READ, ROWS(c, g->du, D), D, 4, t0, t1);
    float *dc = guard ? view_rows(r, ACC_DEFINE, TOPROWS(c, g->dc, D), D, 4, t0, t1) : NULL; /* du's copy, clamped */
    uint16_t *dc16 = view_rows(r, ACC_DEFINE, TOPROWS(c, g->dc16, D), D, 2, t0, t1);
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
    const uint16_t *dc16 = view_rows(r, ACC_READ, TOPROWS(c, g->dc16, D), D, 2, 0, c->T);
    const uint16_t *o16 = view_rows(r, ACC_READ, TOPROWS(c, g->o16, D), D, 2, 0, c->T);
    float *dw = view_grad(r, c->ex->lay.ctx_out);
    if (r->declaring) return;
    gpu_matmul_dw(r->gm, dw, dc16, o16, c->M, D, D, r->s);
}

/* dO = dc16·W_out, then the attention backward: dqkv in d16. */
void op_top_attn(step_run *r)
{
    const lane_ctx *c = &r->c;
    cc_executor *ex = c->ex;
    gpu_impl *g = c->g;
    const int D = c->D, T = c->T, t0 = r->op->t0, t1 = r->op->t1, M = c->B * op_len(r);
    const size_t HW = (size_t)c->H * c->W;
    const uint16_t *dc16 = view_rows(r, ACC_READ, TOPROWS(c, g->dc16, D), D, 2, t0, t1);
    /* the keys' gradients reach back W - 1 steps (added to a chunk's before; over all T, written once) */
    uint16_t *d16 = view_lane(r, chunked(r) ? ACC_WRITE : ACC_DEFINE, TOPROWS(c, g->d16, 3 * D), 3 * D, 2, key_first(r), t1);
    const uint16_t *wout = view_param16(r, ex->lay.ctx_out);
    uint16_t *do16 = NULL;
    const uint16_t *o16 = NULL, *qkv16 = NULL;
    float *lse = NULL, *delta = NULL, *dtmp = NULL, *dsbuf = NULL, *dqkv = NULL;
    const float *qkv = NULL, *pr = NULL;
    if (g->plan.attn_tc) {
        do16 = view_lane(r, ACC_DEFINE, TOPROWS(c, g->do16, D), D, 2, t0, t1);
        /* the tiled kernel's δ = Σ dO ⊙ O reads the forward's output */
        if (g->plan.attn_tc == ATTN_TC_TILED) o16 = view_lane(r, ACC_READ, TOPROWS(c, g->o16, D), D, 2, t0, t1);
        qkv16 = view_lane(r, ACC_READ, TOPROWS(c, g->qkv16, 3 * D), 3 * D, 2, key_first(r), query_last(r));
        /* the key side reads the later queries' dO, which later chunks wrote */
        if (query_last(r) > t1) view_lane(r, ACC_READ, TOPROWS(c, g->do16, D), D, 2, t1, query_last(r));
        lse = view_heads(r, ACC_READ, g->lse);
        delta = view_heads(r, ACC_WRITE, g->delta);
        scan_rows(r, "attention_backward", "dqkv", -1, d16, 3 * D, 1, t0, t1, 0);
    } else {
        dtmp = view_rows(r, ACC_DEFINE, TOPROWS(c, g->dtmp, D), D, 4, t0, t1);
        qkv = view_rows(r, ACC_READ, ROWS(c, g->qkv, 3 * D), 3 * D, 4, 0, T);
        pr = view_rows(r, ACC_READ, ROWS(c, g->p, HW), HW, 4, 0, T);
        dsbuf = view_rows(r, ACC_WRITE, ROWS(c, g->dsbuf, HW), HW, 4, 0, T);
        dqkv = view_rows(r, ACC_WRITE, ROWS(c, g->dqkv, 3 * D), 3 * D, 4, 0, T);
        scan_rows(r, "attention_backward", "dqkv", -1, dqkv, 3 * D, 0, t0, t1, 0);
    }
    if (r->declaring) return;

    cudaStream_t s = r->s;
    if (chunked(r)) {
        gpu_matmul_dx_f16_window(r->gm, do16 + (size_t)t0 * D, dc16, wout, c->B, op_len(r), T, D, D, s);
        launch_attention_backward_tc_window(g->plan.attn_tc, NULL, d16, delta, do16, o16, lse, qkv16, c->B, T, D, c->H,
                                            c->W, t0, t1, s);
        return;
    }
    if (g->plan.attn_tc) { /* the tensor-core kernels read dO and write dqkv in FP16 only */
        gpu_matmul_dx_f16(r->gm, do16, dc16, wout, M, D, D, s);
        launch_attention_backward_tc(g->plan.attn_tc, NULL, d16, delta, do16, o16, lse, qkv16, c->B, T, D, c->H, c->W, s);
    } else {
        gpu_matmul_dx(r->gm, dtmp, dc16, wout, M, D, D, 0, s);
        launch_attention_backward(dqkv, d16, dsbuf, dtmp, pr, qkv, c->B, T, D, c->H, c->W, &g->plan.caps, s);
    }
}

/* ctx_qkv's weight gradient over the op's rows (all T). */
void op_wg_ctx_qkv(step_run *r)
{
    const lane_ctx *c = &r->c;
    gpu_impl *g = c->g;
    const int D = c->D;
    const uint16_t *d16 = view_rows(r, ACC_READ, TOPROWS(c, g->d16, 3 * D), 3 * D, 2, 0, c->T);
    const uint16_t *s16 = view_rows(r, ACC_READ, TOPROWS(c, g->s16, D), D, 2, 0, c->T);
    float *dw = view_grad(r, c->ex->lay.ctx_qkv);
    if (r->declaring) return;
    gpu_matmul_dw(r->gm, dw, d16, s16, c->M, 3 * D, D, r->s);
}

/* dqkv through ctx_qkv and the context norm's backward, added into du: dL/du^L. */
void op_top_dx(step_run *r)
{
    const lane_ctx *c = &r->c;
    cc_executor *ex = c->ex;
    gpu_impl *g = c->g;
    const cc_layout *lay = &ex->lay;
    const int D = c->D, t0 = r->op->t0, t1 = r->op->t1, M = c->B * op_len(r);
    const uint16_t *d16 = view_rows(r, ACC_READ, TOPROWS(c, g->d16, 3 * D), 3 * D, 2, t0, t1);
    float *dtmp = view_rows(r, ACC_DEFINE, TOPROWS(c, g->dtmp, D), D, 4, t0, t1);
    float *du = view_rows(r, ACC_WRITE, ROWS(c, g->du, D), D, 4, t0, t1);
    const float *u = view_rows(r, ACC_READ, uL_rows(c), D, 4, t0, t1);
    const float *ir = view_rows(r, ACC_READ, ROWS(c, g->s_ir, 1), 1, 4, t0, t1);
    float *dgnorm = view_grad(r, lay->ctx_norm);
    const float *gnorm = view_param32(r, lay->ctx_norm);
    const uint16_t *w = view_param16(r, lay->ctx_qkv);
    scan_rows(r, "ctx_rmsnorm_backward", "du", -1, ROWS(c, g->du, D), D, 0, t0, t1, 0);
    if (r->declaring) return;

    cudaStream_t s = r->s;
    if (chunked(r))
        gpu_matmul_dx_window(r->gm, dtmp, d16, w, c->B, op_len(r), c->T, 3 * D, D, s);
    else
        gpu_matmul_dx(r->gm, dtmp, d16, w, M, 3 * D, D, 0, s);
    launch_rmsnorm_backward(du, dgnorm, dtmp, u, gnorm, ir, M, D, chunked(r) ? chunk_rows(r) : row_window_all(M), &c->nc,
                            &g->plan.caps, r->sc, s);
}

/* The ctx.*, final_norm and lm_head gradients lie at the end of the buffer
 * and are final once the context stream's backward and the classifier's
 * last weight GEMM are done (its declarations order it after them): with
 * one lane, reduce them over ranks on the communication stream while the
 * BPTT runs. */
void op_allreduce_tail(step_run *r)
{
    cc_executor *ex = r->ex;
    gpu_impl *g = r->g;
    const size_t tail = ex->lay.t[ex->lay.ctx_norm].offset;
    float *grads = view_flat(r, ACC_WRITE, g->g32 + tail, sizeof(float) * (ex->lay.total - tail));
    if (r->declaring) return;
    cc_dist_allreduce_f32(ex->dist, grads, ex->lay.total - tail, r->s);
}
