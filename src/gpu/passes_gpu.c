/* The GPU forward and backward passes of docs/model.md, one lane (a group of whole
 * sequences, see gpu_impl.h) at a time: every launch of a lane goes to the
 * lane's streams and touches only the lane's rows of the activations and its
 * own gradient accumulator, so lanes may run concurrently. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "catchat/dist.h"
#include "catchat/gpu_gru.h"
#include "catchat/kernels.h"
#include "gpu/gpu_impl.h"
#include "gpu/lane_gpu.h"

lane_ctx lane_view(cc_executor *ex, gpu_lane *ln, int nlanes)
{
    const cc_dims *d = &ex->lay.dims;
    lane_ctx c = { ex, IMPL(ex), ln, nlanes, ln->B, ex->T, ln->B * ex->T, d->D, d->L, d->H, d->W, d->V,
                   (size_t)ln->b0 * ex->T, (size_t)ex->B * ex->T, ln->b0, (size_t)ln->b0 * ex->T,
                   cc_norm_consts_of(d) };
    return c;
}

/* u^l's rows in the forward: its own block, or under recompute the one
 * block, u^l made in place from u^{l-1} (recompute_gpu.c). */
static float *forward_u(const lane_ctx *c, int l)
{
    const gpu_impl *g = c->g;
    return g->recompute ? ROWS(c, g->u, c->D) : LROWS(c, g->u, l, c->D);
}

/* Layer l's normalised input and FP16 h_{t-1}: its own blocks, or under
 * recompute one block of hprev16 for every layer (each layer's, in turn),
 * and the normalised input only in window buffers (NULL here). */
uint16_t *layer_a16(const lane_ctx *c, int l)
{
    return c->g->recompute ? NULL : LROWS(c, c->g->a16, l, c->D);
}
uint16_t *layer_hprev16(const lane_ctx *c, int l) { return LROWS(c, c->g->hprev16, block_one(c->g, l), c->D); }

void lane_check(lane_ctx *c, const char *stage, const char *tensor, int layer, const void *ptr, size_t n, int half,
                int width)
{
    if (c->ex->check) gpu_check_dev(c->ex, stage, tensor, layer, ptr, n, half, width);
}

void lane_mark(lane_ctx *c, int ph)
{
    if (c->ln == &c->g->lane[0]) gpu_mark(c->g, ph);
}

/* Hand the lane's stream over to its recurrence stream and back. */
static cudaStream_t to_rec(gpu_lane *ln)
{
    cudaCheck(cudaEventRecord(ln->ev_to_rec, ln->stream));
    cudaCheck(cudaStreamWaitEvent(ln->rec_stream, ln->ev_to_rec, 0));
    gpu_trace_point(ln->index, ln->rec_stream);
    return ln->rec_stream;
}

static void from_rec(gpu_lane *ln)
{
    gpu_trace_point(ln->index, ln->rec_stream);
    cudaCheck(cudaEventRecord(ln->ev_from_rec, ln->rec_stream));
    cudaCheck(cudaStreamWaitEvent(ln->stream, ln->ev_from_rec, 0));
}

/* The lane's B sequences of a GRU layer, and layer l's tensors in the
 * lane's rows (gh: the lane's block of the per-step loop's scratch). */
gru_shape gru_shape_of(const lane_ctx *c)
{
    const gru_shape sh = { c->B, c->T, c->D, 0, c->T, 0, 0 };
    return sh;
}

gru_layer gru_layer_of(const lane_ctx *c, int l)
{
    const cc_executor *ex = c->ex;
    const gpu_impl *g = c->g;
    const cc_layout *lay = &ex->lay;
    const int D = c->D;
    /* under recompute gx, the gates and ghn are a window's (recompute_gpu.c) */
    const int own = !g->recompute;
    const gru_layer L = {
        .gx = own ? LROWS(c, g->gx, l, 3 * D) : NULL,
        .whh16 = P16(ex, lay->gru_whh[l]),
        .bhh = P32(ex, lay->gru_bhh[l]),
        .h = LROWS(c, g->h, l, D),
        .gates = own ? LROWS(c, g->gates, l, 3 * D) : NULL,
        .ghn = own ? LROWS(c, g->ghn, l, D) : NULL,
        .hprev16 = layer_hprev16(c, l),
        .gh = g->gh + ((size_t)layer_slot(g, l) * c->ex->B + c->ln->b0) * 3 * D,
    };
    return L;
}

/* Layer l's forward (after the embedding, for l = 0). */
static void forward_layer(lane_ctx *c, int l)
{
    cc_executor *ex = c->ex;
    gpu_impl *g = c->g;
    const cc_layout *lay = &ex->lay;
    const int M = c->M, D = c->D;
    const size_t MD = (size_t)M * D;
    cudaStream_t s = c->ln->stream;

    const gru_layer gl = gru_layer_of(c, l);
    float *ul = forward_u(c, l), *hl = gl.h;
    if (g->recompute) { /* the norm, input GEMM and recurrence window by window, u^{l+1} in place */
        if (l == 0) {
            launch_embedding_forward(ul, ROWS(c, g->x, 1), P32(ex, lay->embed), M, D, s);
            lane_check(c, "embedding", "u0", -1, ul, MD, 0, D);
        }
        rc_forward_windows(c, l);
        lane_mark(c, PH_REC_FWD);
        lane_check(c, "gru_forward", "h", l, hl, MD, 0, D);
        if (l + 1 == c->L) launch_add(ul, ul, hl, MD, s); /* u^L; the context stream's norm: forward_top */
        return;
    }
    uint16_t *al = layer_a16(c, l);
    if (l == 0) { /* later layers' norms ran with the residual add below */
        lane_mark(c, PH_INPUT);
        launch_embedding_forward(ul, ROWS(c, g->x, 1), P32(ex, lay->embed), M, D, s);
        lane_check(c, "embedding", "u0", -1, ul, MD, 0, D);
        launch_rmsnorm_forward(NULL, al, LROWS(c, g->a_ir, l, 1), ul, P32(ex, lay->gru_norm[l]), M, D, &c->nc, s);
        lane_check(c, "rmsnorm", "a", l, al, MD, 1, D);
    }
    float *gxl = LROWS(c, g->gx, l, 3 * D);
    gpu_matmul_fwd(c->ln->gemm, gxl, al, P16(ex, lay->gru_wih[l]), P32(ex, lay->gru_bih[l]), M, 3 * D, D, s);
    lane_check(c, "input_projection", "gx", l, gxl, 3 * MD, 0, 3 * D);
    lane_mark(c, PH_INPUT);
    gpu_gru_forward(c->ln->gemm, &g->rec_caps, &g->gru, g->gru_path, &gl, gru_shape_of(c), g->gru_wide,
                    c->ln->rec_sc[0], to_rec(c->ln));
    from_rec(c->ln);
    lane_mark(c, PH_REC_FWD);
    lane_check(c, "gru_forward", "h", l, hl, MD, 0, D);
    /* the residual and the norm after it in one pass: layer l+1's input, or the context stream's */
    float *unext = forward_u(c, l + 1);
    if (l + 1 < c->L) {
        uint16_t *anext = layer_a16(c, l + 1);
        launch_add_rmsnorm_forward(unext, NULL, anext, LROWS(c, g->a_ir, l + 1, 1), ul, hl,
                                   P32(ex, lay->gru_norm[l + 1]), M, D, row_window_all(M), &c->nc, s);
        lane_check(c, "rmsnorm", "a", l + 1, anext, MD, 1, D);
    } else {
        uint16_t *s16 = ROWS(c, g->s16, D);
        launch_add_rmsnorm_forward(unext, NULL, s16, ROWS(c, g->s_ir, 1), ul, hl, P32(ex, lay->ctx_norm), M, D,
                                   row_window_all(M), &c->nc, s);
        lane_check(c, "ctx_rmsnorm", "s", -1, s16, MD, 1, D);
    }
}

/* The context stream, up to its output c (the merge, the final norm and the
 * classifier: classifier_lane). */
static void forward_top(lane_ctx *c)
{
    cc_executor *ex = c->ex;
    gpu_impl *g = c->g;
    const cc_layout *lay = &ex->lay;
    const int M = c->M, D = c->D, T = c->T;
    const size_t MD = (size_t)M * D;
    cudaStream_t s = c->ln->stream;
    const float *uL = forward_u(c, c->L);
    uint16_t *s16 = TOPROWS(c, g->s16, D), *o16 = TOPROWS(c, g->o16, D);
    float *cc = TOPROWS(c, g->c, D);
    /* s = RMSNorm(u^L) ran with the last layer's residual add, except under recompute */
    if (g->recompute) {
        launch_rmsnorm_forward(NULL, s16, ROWS(c, g->s_ir, 1), uL, P32(ex, lay->ctx_norm), M, D, &c->nc, s);
        lane_check(c, "ctx_rmsnorm", "s", -1, s16, MD, 1, D);
    }
    if (g->attn_tc) { /* q, k, v only ever feed FP16 operands: the GEMM rounds them once */
        uint16_t *qkv16 = TOPROWS(c, g->qkv16, 3 * D);
        gpu_matmul_fwd_f16(c->ln->gemm, qkv16, s16, P16(ex, lay->ctx_qkv), M, 3 * D, D, s);
        lane_check(c, "qkv_projection", "qkv", -1, qkv16, 3 * MD, 1, 3 * D);
        launch_attention_forward_tc(NULL, o16, NULL, HROWS(c, g->lse), qkv16, c->B, T, D, c->H, c->W, s);
    } else {
        float *qkv = ROWS(c, g->qkv, 3 * D);
        gpu_matmul_fwd(c->ln->gemm, qkv, s16, P16(ex, lay->ctx_qkv), NULL, M, 3 * D, D, s);
        lane_check(c, "qkv_projection", "qkv", -1, qkv, 3 * MD, 0, 3 * D);
        launch_attention_forward(NULL, o16, ROWS(c, g->p, (size_t)c->H * c->W), qkv, c->B, T, D, c->H, c->W,
                                 &g->caps, s);
    }
    lane_check(c, "attention_forward", "o", -1, o16, MD, 1, D);
    gpu_matmul_fwd(c->ln->gemm, cc, o16, P16(ex, lay->ctx_out), NULL, M, D, D, s);
    lane_check(c, "ctx_out_projection", "c", -1, cc, MD, 0, D);
    lane_mark(c, PH_CONTEXT_FWD);
}

static void ce_check(void *ctx, const char *stage, const char *tensor, const void *ptr, size_t n, int half, int width)
{
    lane_check(ctx, stage, tensor, -1, ptr, n, half, width);
}

/* The classifier's call for rows of the lane from its first sequence's step
 * t0: M rows in windows of rw (gpu_crossentropy.h), the context output at
 * cc; with a gradient, dL/dm into du's rows and the lm_head and final norm
 * gradients into the lane's (the last chunk's weight GEMM on the side
 * stream). Also the wavefront's, chunk by chunk (wavefront_gpu.c). */
void classifier_rows(lane_ctx *c, int t0, int M, row_window rw, float *cc, float loss_scale, int with_grad)
{
    cc_executor *ex = c->ex;
    gpu_impl *g = c->g;
    gpu_lane *ln = c->ln;
    const cc_layout *lay = &ex->lay;
    const int D = c->D;
    const size_t at = (size_t)t0;
    const gpu_ce_args a = {
        .M = M, .D = D, .V = c->V, .rw = rw,
        .u = forward_u(c, c->L) + at * D, .c = cc, .f_ir = ROWS(c, g->f_ir, 1) + at,
        .g_final = P32(ex, lay->final_norm), .w16 = P16(ex, lay->lm_head),
        .y = ROWS(c, g->y, 1) + at, .loss = ROWS(c, g->loss_row, 1) + at, .rank = ROWS(c, g->rank, 1) + at,
        .du = with_grad ? ROWS(c, g->du, D) + at * D : NULL,
        .dg_final = G32L(c, lay->final_norm), .dw = G32L(c, lay->lm_head),
        .grad_scale = loss_scale, .nc = &c->nc, .caps = &g->caps,
        .side = ln->wgrad_stream, .side_gemm = ln->gemm_wgrad, .ev_fork = ln->ev_ce_fork, .ev_free = ln->ev_ce_free, .pending = &ln->ce_pending,
        .check = c->ex->check ? ce_check : NULL, .check_ctx = c,
    };
    gpu_crossentropy(ln->gemm, &ln->ce, &a, ln->sc, ln->stream);
}

/* The merge, the final norm, the classifier and the loss of the lane's rows
 * (with a gradient, down to dL/dm in du). */
static void classifier_lane(lane_ctx *c, float loss_scale, int with_grad)
{
    classifier_rows(c, 0, c->M, row_window_all(c->M), TOPROWS(c, c->g->c, c->D), loss_scale, with_grad);
    lane_mark(c, PH_CLASSIFIER);
    if (with_grad) lane_check(c, "final_rmsnorm_backward", "dm", -1, ROWS(c, c->g->du, c->D), (size_t)c->M * c->D, 0, c->D);
}

/* The ctx.*, final_norm and lm_head gradients lie at the end of the buffer
 * and are final once the context stream's backward is done: with one lane,
 * reduce them over ranks on the side stream while the recurrence runs. */
void allreduce_tail_early(lane_ctx *c)
{
    cc_executor *ex = c->ex;
    gpu_impl *g = c->g;
    const size_t tail = ex->lay.t[ex->lay.ctx_norm].offset;
    cudaCheck(cudaEventRecord(g->ev_tail, c->ln->stream));
    cudaCheck(cudaStreamWaitEvent(g->comm_stream, g->ev_tail, 0));
    cudaCheck(cudaStreamWaitEvent(g->comm_stream, c->ln->ev_top_wgrad, 0)); /* the weight GEMMs on the side stream */
    cc_dist_allreduce_f32(ex->dist, g->g32 + tail, ex->lay.total - tail, g->comm_stream);
}

/* The side stream starts what follows once the lane's stream has reached this point. */
void side_stream_after(gpu_lane *ln)
{
    cudaCheck(cudaEventRecord(ln->ev_side, ln->stream));
    cudaCheck(cudaStreamWaitEvent(ln->wgrad_stream, ln->ev_side, 0));
}

/* The context stream backward from dL/dm (classifier_lane left it in du),
 * down to dL/du^L, in two halves: the gradient into the context stream
 * (dc16), then the attention and the context norm. Their weight gradients
 * go to the side stream as soon as their operands exist: nothing
 * on the way to the first BPTT waits for them, and there they run beside it
 * instead of in the window before it, where every lane's context stream
 * already fills the GPU (under recompute, whose parts and layers reuse
 * their operands' memory, the next part and the first rebuild wait for
 * them: top_in_parts). */
static void backward_context_out(lane_ctx *c, float ctx_limit)
{
    cc_executor *ex = c->ex;
    gpu_impl *g = c->g;
    gpu_lane *ln = c->ln;
    const cc_layout *lay = &ex->lay;
    const int M = c->M, D = c->D;
    const size_t MD = (size_t)M * D;
    cudaStream_t s = ln->stream;
    float *du = ROWS(c, g->du, D), *dc = TOPROWS(c, g->dc, D);
    /* dc16: the FP16 gradient into the context stream */
    uint16_t *dc16 = TOPROWS(c, g->dc16, D);
    cudaStream_t side = ln->wgrad_stream;
    if (ctx_limit > 0) { /* the guard rescales a copy: du itself flows on down the residual */
        cudaCheck(cudaMemcpyAsync(dc, du, sizeof(float) * MD, cudaMemcpyDeviceToDevice, s));
        launch_rownorm_clamp(dc, M, D, row_window_all(M), ctx_limit, s);
    }
    launch_f32_to_f16(dc16, ctx_limit > 0 ? dc : du, MD, s);
    side_stream_after(ln);
    gpu_matmul_dw(ln->gemm_wgrad, G32L(c, lay->ctx_out), dc16, TOPROWS(c, g->o16, D), M, D, D, side);
}

static void backward_context(lane_ctx *c)
{
    cc_executor *ex = c->ex;
    gpu_impl *g = c->g;
    gpu_lane *ln = c->ln;
    const cc_layout *lay = &ex->lay;
    const int M = c->M, D = c->D, T = c->T;
    const size_t MD = (size_t)M * D;
    cudaStream_t s = ln->stream, side = ln->wgrad_stream;
    float *du = ROWS(c, g->du, D), *dtmp = TOPROWS(c, g->dtmp, D);
    /* d16: the FP16 dqkv */
    uint16_t *d16 = TOPROWS(c, g->d16, 3 * D), *dc16 = TOPROWS(c, g->dc16, D);
    /* dO, then dqkv into d16: the operand of the qkv GEMMs */
    if (g->attn_tc) { /* the tensor-core kernels read dO and write dqkv in FP16 only */
        uint16_t *do16 = TOPROWS(c, g->do16, D);
        gpu_matmul_dx_f16(ln->gemm, do16, dc16, P16(ex, lay->ctx_out), M, D, D, s);
        launch_attention_backward_tc(NULL, d16, HROWS(c, g->delta), do16, HROWS(c, g->lse), TOPROWS(c, g->qkv16, 3 * D),
                                     c->B, T, D, c->H, c->W, s);
        lane_check(c, "attention_backward", "dqkv", -1, d16, 3 * MD, 1, 3 * D);
    } else {
        float *dqkv = ROWS(c, g->dqkv, 3 * D);
        gpu_matmul_dx(ln->gemm, dtmp, dc16, P16(ex, lay->ctx_out), M, D, D, 0, s);
        launch_attention_backward(dqkv, d16, ROWS(c, g->dsbuf, (size_t)c->H * c->W), dtmp,
                                  ROWS(c, g->p, (size_t)c->H * c->W), ROWS(c, g->qkv, 3 * D), c->B, T, D, c->H, c->W, &g->caps, s);
        lane_check(c, "attention_backward", "dqkv", -1, dqkv, 3 * MD, 0, 3 * D);
    }
    side_stream_after(ln);
    gpu_matmul_dw(ln->gemm_wgrad, G32L(c, lay->ctx_qkv), d16, TOPROWS(c, g->s16, D), M, 3 * D, D, side);
    cudaCheck(cudaEventRecord(ln->ev_top_wgrad, side));
    gpu_matmul_dx(ln->gemm, dtmp, d16, P16(ex, lay->ctx_qkv), M, 3 * D, D, 0, s);
    launch_rmsnorm_backward(du, G32L(c, lay->ctx_norm), dtmp, forward_u(c, c->L), P32(ex, lay->ctx_norm),
                            ROWS(c, g->s_ir, 1), M, D, row_window_all(M), &c->nc, &g->caps, ln->sc, s);
    lane_check(c, "ctx_rmsnorm_backward", "du", -1, du, MD, 0, D);
}

/* The lane's block of the BPTT's per-cluster bias sums for buffer slot par (layer_slot)
 * (NULL where its batch share does not run the cluster kernels). */
static float *bias_part(const lane_ctx *c, int par)
{
    if (c->B % 8) return NULL;
    /* per buffer slot, the lanes' [2][B_lane/8][3D] blocks one after another */
    const size_t all = gpu_gru_bias_part_floats(c->ex->B, c->D);
    return c->g->bias_part + par * all + (size_t)2 * (c->ln->b0 / 8) * 3 * c->D;
}


/* Layer l's gradients in the lane's rows: dh_in is du (see backward_layer);
 * the gate gradients go to the buffers of the layer's slot (layer_slot). */
gru_grads gru_grads_of(const lane_ctx *c, int l)
{
    const cc_layout *lay = &c->ex->lay;
    const gpu_impl *g = c->g;
    const int D = c->D, par = layer_slot(c->g, l), own = !g->recompute; /* recompute: a window's (recompute_gpu.c) */
    const gru_grads G = {
        .dh_in = ROWS(c, g->du, D),
        /* the slots' buffers are [M_all, 3D] each; the lane's rows within */
        .dgx16 = own ? LROWS(c, g->dgx16, par, 3 * D) : NULL,
        .dgh16 = own ? LROWS(c, g->dgh16, par, 3 * D) : NULL,
        .dhrec = g->dhrec + ((size_t)par * c->ex->B + c->ln->b0) * D,
        .bias_part = bias_part(c, par),
        .dwhh = G32L(c, lay->gru_whh[l]),
        .dbhh = G32L(c, lay->gru_bhh[l]),
        .dbih = G32L(c, lay->gru_bih[l]),
    };
    return G;
}

/* Layer l's weight gradients on the lane's side stream, from the gate
 * gradients its BPTT left in dgx and dgh (and the bias sums, nparts rows of
 * them, where its cluster kernels wrote them). */
static void weight_grads(lane_ctx *c, int l, const gru_layer *gl, const gru_grads *gg, int nparts)
{
    const cc_layout *lay = &c->ex->lay;
    gpu_lane *ln = c->ln;
    const int D = c->D, par = l & 1;
    side_stream_after(ln);
    gpu_trace_point(GPU_MAX_LANES + ln->index, ln->wgrad_stream);
    gpu_gru_weight_grads(ln->gemm_wgrad, gl, gg, nparts, gru_shape_of(c), ln->wgrad_sc, ln->wgrad_stream);
    gpu_matmul_dw(ln->gemm_wgrad, G32L(c, lay->gru_wih[l]), gg->dgx16, layer_a16(c, l), c->M, 3 * D, D,
                  ln->wgrad_stream);
    cudaCheck(cudaEventRecord(ln->ev_wgrad[par], ln->wgrad_stream));
    gpu_trace_point(GPU_MAX_LANES + ln->index, ln->wgrad_stream);
}

/* --plant-nan-grad-h (finite.h): where the planted element is in this lane
 * and layer, a pointer to it in du; its value is kept in plant_slot[1] and
 * a NaN stands in its place for the BPTT (stream-ordered copies; graphs are
 * off while planting). NULL elsewhere. */
float *plant_begin(lane_ctx *c, int l, float *du, cudaStream_t s)
{
    const cc_plant_grad_h *pl = &c->ex->plant_grad_h;
    const int b = pl->b - c->ln->b0;
    if (!pl->on || pl->layer != l || b < 0 || b >= c->B || pl->t >= c->T || pl->unit >= c->D) return NULL;
    gpu_impl *g = c->g;
    if (!g->plant_slot) {
        const float nan = NAN;
        cudaCheck(cudaMalloc((void **)&g->plant_slot, 2 * sizeof(float)));
        cudaCheck(cudaMemcpy(g->plant_slot, &nan, sizeof(float), cudaMemcpyHostToDevice));
    }
    float *at = du + ((size_t)b * c->T + pl->t) * c->D + pl->unit;
    cudaCheck(cudaMemcpyAsync(g->plant_slot + 1, at, sizeof(float), cudaMemcpyDeviceToDevice, s));
    cudaCheck(cudaMemcpyAsync(at, g->plant_slot, sizeof(float), cudaMemcpyDeviceToDevice, s));
    return at;
}

/* Layer l's BPTT; its weight gradients go to the side stream. du holds
 * dL/du^{l+1}, which is also dL/dh^l through the residual, and leaves as dL/du^l. */
static void backward_layer(lane_ctx *c, int l, float clamp_limit)
{
    cc_executor *ex = c->ex;
    gpu_impl *g = c->g;
    gpu_lane *ln = c->ln;
    const cc_layout *lay = &ex->lay;
    const int M = c->M, D = c->D;
    const size_t MD = (size_t)M * D;
    cudaStream_t s = ln->stream;
    float *du = ROWS(c, g->du, D), *dtmp = ROWS(c, g->dtmp, D);
    const float *ul = LROWS(c, g->u, l, D);
    lane_mark(c, l == c->L - 1 ? PH_CONTEXT_BWD : PH_WGRAD);
    if (l == c->L - 1 && gpu_overlaps_allreduce(ex, c->nlanes)) allreduce_tail_early(c);
    if (g->recompute) { /* window by window from the rebuilt activations */
        rc_backward_layer(c, l, clamp_limit);
        return;
    }
    const int par = l & 1;
    const gru_layer gl = gru_layer_of(c, l);
    const gru_grads gg = gru_grads_of(c, l);
    const uint16_t *dgx = gg.dgx16;
    if (l + 2 < c->L) /* layer l+2's weight gradients read this buffer pair */
        cudaCheck(cudaStreamWaitEvent(s, ln->ev_wgrad[par], 0));
    float *planted = plant_begin(c, l, du, s);
    const int nparts = gpu_gru_bptt(ln->gemm, &g->rec_caps, &g->gru, g->gru_path, &gl, &gg, gru_shape_of(c),
                                    clamp_limit, ln->rec_sc[0], to_rec(ln));
    from_rec(ln);
    if (planted) /* the residual path keeps its value */
        cudaCheck(cudaMemcpyAsync(planted, c->g->plant_slot + 1, sizeof(float), cudaMemcpyDeviceToDevice, s));
    lane_mark(c, PH_BPTT);
    lane_check(c, "gru_backward", "dgx", l, dgx, 3 * MD, 1, 3 * D);
    /* The weight gradients, each one GEMM over the lane's positions, on the
     * side stream. Below layer 0 they are issued after the input gradient,
     * so they run beside the next layer's BPTT (on the SMs its clusters leave
     * free) instead of taking SMs from the input gradient, which the next
     * BPTT waits for; layer 0's run beside the embedding backward. */
    if (l == 0) weight_grads(c, l, &gl, &gg, nparts);
    /* the input gradient stays on the critical path */
    gpu_matmul_dx(ln->gemm, dtmp, dgx, P16(ex, lay->gru_wih[l]), M, 3 * D, D, 0, s);
    launch_rmsnorm_backward(du, G32L(c, lay->gru_norm[l]), dtmp, ul, P32(ex, lay->gru_norm[l]),
                            LROWS(c, g->a_ir, l, 1), M, D, row_window_all(M), &c->nc, &g->caps, ln->sc, s);
    lane_check(c, "rmsnorm_backward", "du", l, du, MD, 0, D);
    if (l > 0) weight_grads(c, l, &gl, &gg, nparts);
    if (l == 0) lane_embedding_backward(c);
}

void lane_embedding_backward(lane_ctx *c)
{
    gpu_impl *g = c->g;
    gpu_lane *ln = c->ln;
    launch_embedding_backward(G32L(c, c->ex->lay.embed), ROWS(c, g->du, c->D), g->tok_off + (size_t)ln->index * (c->V + 1),
                              ROWS(c, g->tok_pos, 1), c->V, c->D, ln->stream);
    cudaCheck(cudaStreamWaitEvent(ln->stream, ln->ev_wgrad[0], 0)); /* layer 0's weight gradients, and so all of them */
}


/* Recompute: every lane waits until each of the others has reached this
 * point, since they share `work` (top_in_parts). */
static void lanes_join(gpu_impl *g, int n)
{
    for (int i = 0; i < n; i++) cudaCheck(cudaEventRecord(g->lane[i].ev_join, g->lane[i].stream));
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            if (j != i) cudaCheck(cudaStreamWaitEvent(g->lane[i].stream, g->lane[j].ev_join, 0));
}

/* Lane i covers sequences [i·B/n, (i+1)·B/n); n divides B (checked at creation). */
void gpu_set_lanes(cc_executor *ex, int n)
{
    gpu_impl *g = IMPL(ex);
    for (int i = 0; i < n; i++) {
        g->lane[i].B = ex->B / n;
        g->lane[i].b0 = i * (ex->B / n);
    }
}

/* Lane c's sequences [b, b + nseq) as a lane of their own, for the context
 * stream and classifier under recompute, whose buffers hold one such part
 * (their rows start at the part's first: top_r0 = 0). */
static lane_ctx top_part(const lane_ctx *c, int b, int nseq)
{
    lane_ctx p = *c;
    p.B = nseq;
    p.M = nseq * c->T;
    p.b0 = c->b0 + b;
    p.r0 = c->r0 + (size_t)b * c->T;
    p.top_r0 = 0;
    return p;
}

/* Recompute: the context stream, classifier and loss (and with scored > 0
 * their backward) of every lane, part after part of g->top_seqs sequences,
 * since their buffers hold one part and lie over the layers' in `work`: the
 * lanes join before (every layer's forward is done) and after (every part's
 * weight GEMMs are, before the first rebuild writes there); each part waits
 * for the one before and its weight GEMMs, which read what it overwrites. */
static void top_in_parts(gpu_impl *g, lane_ctx *c, int n, float loss_scale, long scored, float ctx_limit)
{
    lanes_join(g, n);
    const gpu_lane *prev = NULL;
    for (int i = 0; i < n; i++)
        for (int b = 0; b < c[i].B; b += g->top_seqs) {
            gpu_lane *ln = c[i].ln;
            lane_ctx p = top_part(&c[i], b, g->top_seqs);
            if (prev && prev != ln) cudaCheck(cudaStreamWaitEvent(ln->stream, prev->ev_join, 0));
            forward_top(&p);
            classifier_lane(&p, loss_scale, scored > 0);
            if (scored > 0) {
                backward_context_out(&p, ctx_limit);
                backward_context(&p);
                cudaCheck(cudaStreamWaitEvent(ln->stream, ln->ev_top_wgrad, 0));
            }
            cudaCheck(cudaEventRecord(ln->ev_join, ln->stream));
            prev = ln;
        }
    lanes_join(g, n);
}

void gpu_score_all(cc_executor *ex)
{
    gpu_impl *g = IMPL(ex);
    gpu_set_lanes(ex, 1);
    lane_ctx c = lane_view(ex, &g->lane[0], 1);
    g->lane[0].ce_pending = 0;
    for (int l = 0; l < c.L; l++) forward_layer(&c, l);
    if (g->recompute) {
        top_in_parts(g, &c, 1, 1.f, 0, 0.f);
        return;
    }
    forward_top(&c);
    classifier_lane(&c, 1.f, 0);
}

int gpu_step_lanes(const cc_executor *ex) { return IMPL(ex)->profile || ex->check ? 1 : IMPL(ex)->nlanes; }

/* Every lane's forward and backward, issued on the lanes' streams; ends
 * joined into the main stream. */
void gpu_issue_passes(cc_executor *ex, double loss_scale, long scored, int n)
{
    gpu_impl *g = IMPL(ex);
    /* the kernels see gradients of the loss × S summed over the scored positions */
    const float clamp_limit = (float)cc_clamp_dispatch_limit(ex->cfg.grad_h_clamp, loss_scale, (double)scored);
    const float ctx_limit = (float)cc_clamp_dispatch_limit(ex->cfg.ctx_grad_clamp, loss_scale, (double)scored);
    const size_t total = ex->lay.total;

    /* the batch and the zeroed gradients are on the main stream (lane 0's) */
    for (int i = 1; i < n; i++)
        cudaCheck(cudaMemsetAsync(g->lane[i].g32, 0, sizeof(float) * total, g->stream));
    cudaCheck(cudaEventRecord(g->ev_batch, g->stream));
    gpu_trace_start(g->stream);
    /* Issued phase by phase across the lanes, so every lane's work reaches
     * the GPU early: issued lane after lane, the last lane's first kernel
     * waits for the host to enqueue the other lanes' whole steps. Lanes
     * started apart (after the first lane's input GEMM or its first
     * recurrence) were measured no faster at B=64 and slower at B=256. */
    const int L = ex->lay.dims.L;
    lane_ctx c[GPU_MAX_LANES];
    for (int i = 0; i < n; i++) {
        c[i] = lane_view(ex, &g->lane[i], n);
        g->lane[i].ce_pending = 0; /* the last step's side streams joined their lanes */
        if (i > 0) cudaCheck(cudaStreamWaitEvent(g->lane[i].stream, g->ev_batch, 0));
    }
    const int wave = wave_on(ex), nchunks = wave ? wave_chunks(&c[0]) : 0, top = wave && wave_top_chunked(ex);
    g->wave_ran = wave ? g->wave_chunk : 0;
    g->wave_top_ran = top;
    if (wave) /* chunk by chunk, layer by layer, lane by lane */
        for (int k = 0; k < nchunks; k++) {
            for (int l = 0; l < L; l++)
                for (int i = 0; i < n; i++) wave_forward_chunk(&c[i], l, k);
            for (int i = 0; top && i < n; i++) wave_top_forward(&c[i], k, (float)loss_scale, scored > 0);
        }
    else
        for (int l = 0; l < L; l++)
            for (int i = 0; i < n; i++) forward_layer(&c[i], l);
    if (g->recompute) top_in_parts(g, c, n, (float)loss_scale, scored, ctx_limit);
    for (int i = 0; !top && !g->recompute && i < n; i++) {
        forward_top(&c[i]);
        classifier_lane(&c[i], (float)loss_scale, scored > 0);
        if (scored > 0) {
            backward_context_out(&c[i], ctx_limit);
            backward_context(&c[i]);
        }
    }
    if (wave && scored > 0) {
        for (int i = 0; !top && i < n; i++)
            if (gpu_overlaps_allreduce(ex, n)) allreduce_tail_early(&c[i]);
        for (int k = nchunks - 1; k >= 0; k--) {
            for (int i = 0; top && i < n; i++) wave_top_backward(&c[i], k, ctx_limit);
            for (int l = L - 1; l >= 0; l--)
                for (int i = 0; i < n; i++) wave_backward_chunk(&c[i], l, k, clamp_limit);
        }
    }
    for (int l = L - 1; !wave && scored > 0 && l >= 0; l--)
        for (int i = 0; i < n; i++) backward_layer(&c[i], l, clamp_limit);
    for (int i = 0; i < n; i++) {
        gpu_trace_end(i, g->lane[i].stream);
        if (i > 0) cudaCheck(cudaEventRecord(g->lane[i].ev_finished, g->lane[i].stream));
    }
    for (int i = 1; i < n; i++) cudaCheck(cudaStreamWaitEvent(g->stream, g->lane[i].ev_finished, 0));
    if (scored > 0) /* the lanes' gradients, added in lane order */
        for (int i = 1; i < n; i++) launch_add(g->g32, g->g32, g->lane[i].g32, total, g->stream);
}

