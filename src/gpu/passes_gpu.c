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
                   (size_t)ln->b0 * ex->T, (size_t)ex->B * ex->T,
                   cc_norm_consts_of(d) };
    return c;
}

/* u^l's rows in the forward: its own block, or under recompute the one
 * block and du by turns, so that u^L, which the context stream reads, is in
 * the block (du is not used before the backward). */
static float *forward_u(const lane_ctx *c, int l)
{
    const gpu_impl *g = c->g;
    if (!g->recompute) return LROWS(c, g->u, l, c->D);
    return (c->L - l) % 2 == 0 ? ROWS(c, g->u, c->D) : ROWS(c, g->du, c->D);
}

/* Under recompute, M x D floats of the lane's own rows of gx's block: free
 * before a rebuild's gx GEMM (the rebuild's partial sums of u) and after
 * the BPTT (the input gradient's dtmp). Within the lane's rows, since the
 * lanes run their layers at once. */
static float *lane_scratch(const lane_ctx *c) { return LROWS(c, c->g->gx, 0, 3 * c->D); }

/* Layer l's normalised input and FP16 h_{t-1}: its own blocks, or under
 * recompute, for the forward and the rebuild's GEMMs, in the lane's rows of
 * dgh16 (which the BPTT then writes) and, for the weight GEMMs after the
 * BPTT, in the lane's rows of gx after dtmp (the gates are spent then). */
static uint16_t *layer_a16(const lane_ctx *c, int l, int after_bptt)
{
    const gpu_impl *g = c->g;
    if (!g->recompute) return LROWS(c, g->a16, l, c->D);
    if (after_bptt) return (uint16_t *)(lane_scratch(c) + (size_t)c->M * c->D);
    return LROWS(c, g->dgh16, 0, 3 * c->D);
}

static uint16_t *layer_hprev16(const lane_ctx *c, int l, int after_bptt)
{
    if (!c->g->recompute) return LROWS(c, c->g->hprev16, l, c->D);
    return layer_a16(c, l, after_bptt) + (size_t)c->M * c->D;
}

static void check(lane_ctx *c, const char *stage, const char *tensor, int layer, const void *ptr, size_t n, int half,
                  int width)
{
    if (c->ex->check) gpu_check_dev(c->ex, stage, tensor, layer, ptr, n, half, width);
}

static void mark(lane_ctx *c, int ph)
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
    const gru_shape sh = { c->B, c->T, c->D, 0, c->T };
    return sh;
}

gru_layer gru_layer_of(const lane_ctx *c, int l)
{
    const cc_executor *ex = c->ex;
    const gpu_impl *g = c->g;
    const cc_layout *lay = &ex->lay;
    const int D = c->D;
    const gru_layer L = {
        .gx = LROWS(c, g->gx, block_one(g, l), 3 * D),
        .whh16 = P16(ex, lay->gru_whh[l]),
        .bhh = P32(ex, lay->gru_bhh[l]),
        .h = LROWS(c, g->h, l, D),
        .gates = LROWS(c, g->gates, block_one(g, l), 3 * D),
        .ghn = LROWS(c, g->ghn, block_one(g, l), D),
        .hprev16 = layer_hprev16(c, l, 0),
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
    float *ul = forward_u(c, l), *hl = gl.h, *gxl = LROWS(c, g->gx, block_one(g, l), 3 * D);
    uint16_t *al = layer_a16(c, l, 0);
    if (l == 0) { /* later layers' norms ran with the residual add below */
        mark(c, PH_INPUT);
        launch_embedding_forward(ul, ROWS(c, g->x, 1), P32(ex, lay->embed), M, D, s);
        check(c, "embedding", "u0", -1, ul, MD, 0, D);
        launch_rmsnorm_forward(NULL, al, LROWS(c, g->a_ir, l, 1), ul, P32(ex, lay->gru_norm[l]), M, D, &c->nc, s);
        check(c, "rmsnorm", "a", l, al, MD, 1, D);
    }
    gpu_matmul_fwd(c->ln->gemm, gxl, al, P16(ex, lay->gru_wih[l]), P32(ex, lay->gru_bih[l]), M, 3 * D, D, s);
    check(c, "input_projection", "gx", l, gxl, 3 * MD, 0, 3 * D);
    mark(c, PH_INPUT);
    gpu_gru_forward(c->ln->gemm, &g->rec_caps, g->gru_path, &gl, gru_shape_of(c), g->gru_wide, to_rec(c->ln));
    from_rec(c->ln);
    mark(c, PH_REC_FWD);
    check(c, "gru_forward", "h", l, hl, MD, 0, D);
    /* the residual and the norm after it in one pass: layer l+1's input, or the context stream's */
    float *unext = forward_u(c, l + 1);
    if (l + 1 < c->L) {
        uint16_t *anext = layer_a16(c, l + 1, 0);
        launch_add_rmsnorm_forward(unext, NULL, anext, LROWS(c, g->a_ir, l + 1, 1), ul, hl,
                                   P32(ex, lay->gru_norm[l + 1]), M, D, row_window_all(M), &c->nc, s);
        check(c, "rmsnorm", "a", l + 1, anext, MD, 1, D);
    } else {
        uint16_t *s16 = ROWS(c, g->s16, D);
        launch_add_rmsnorm_forward(unext, NULL, s16, ROWS(c, g->s_ir, 1), ul, hl, P32(ex, lay->ctx_norm), M, D,
                                   row_window_all(M), &c->nc, s);
        check(c, "ctx_rmsnorm", "s", -1, s16, MD, 1, D);
    }
}

/* The context stream, the merge and the classifier. */
static void forward_top(lane_ctx *c)
{
    cc_executor *ex = c->ex;
    gpu_impl *g = c->g;
    const cc_layout *lay = &ex->lay;
    const int M = c->M, D = c->D, T = c->T;
    const size_t MD = (size_t)M * D;
    cudaStream_t s = c->ln->stream;
    const float *uL = forward_u(c, c->L);
    uint16_t *s16 = ROWS(c, g->s16, D), *o16 = ROWS(c, g->o16, D), *f16 = ROWS(c, g->f16, D);
    float *cc = ROWS(c, g->c, D), *mm = ROWS(c, g->mm, D);
    /* s = RMSNorm(u^L) ran with the last layer's residual add */
    if (g->attn_tc) { /* q, k, v only ever feed FP16 operands: the GEMM rounds them once */
        uint16_t *qkv16 = ROWS(c, g->qkv16, 3 * D);
        gpu_matmul_fwd_f16(c->ln->gemm, qkv16, s16, P16(ex, lay->ctx_qkv), M, 3 * D, D, s);
        check(c, "qkv_projection", "qkv", -1, qkv16, 3 * MD, 1, 3 * D);
        launch_attention_forward_tc(NULL, o16, NULL, HROWS(c, g->lse), qkv16, c->B, T, D, c->H, c->W, s);
    } else {
        float *qkv = ROWS(c, g->qkv, 3 * D);
        gpu_matmul_fwd(c->ln->gemm, qkv, s16, P16(ex, lay->ctx_qkv), NULL, M, 3 * D, D, s);
        check(c, "qkv_projection", "qkv", -1, qkv, 3 * MD, 0, 3 * D);
        launch_attention_forward(NULL, o16, ROWS(c, g->p, (size_t)c->H * c->W), qkv, c->B, T, D, c->H, c->W,
                                 &g->caps, s);
    }
    check(c, "attention_forward", "o", -1, o16, MD, 1, D);
    gpu_matmul_fwd(c->ln->gemm, cc, o16, P16(ex, lay->ctx_out), NULL, M, D, D, s);
    check(c, "ctx_out_projection", "c", -1, cc, MD, 0, D);
    launch_add_rmsnorm_forward(mm, NULL, f16, ROWS(c, g->f_ir, 1), uL, cc, P32(ex, lay->final_norm), M, D, row_window_all(M), &c->nc, s);
    check(c, "final_rmsnorm", "f", -1, f16, MD, 1, D);
    mark(c, PH_CONTEXT_FWD);
    float *logits = ROWS(c, g->logits, c->V);
    gpu_matmul_fwd(c->ln->gemm, logits, f16, P16(ex, lay->lm_head), NULL, M, c->V, D, s);
    check(c, "classifier", "logits", -1, logits, (size_t)M * c->V, 0, c->V);
}

static void crossentropy_lane(lane_ctx *c, float loss_scale, int with_grad)
{
    gpu_impl *g = c->g;
    launch_crossentropy(ROWS(c, g->loss_row, 1), ROWS(c, g->rank, 1), with_grad ? ROWS(c, g->dlogits16, c->V) : NULL,
                        ROWS(c, g->logits, c->V), ROWS(c, g->y, 1), c->M, c->V, row_window_all(c->M), loss_scale,
                        c->ln->stream);
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

/* The classifier and the context stream backward, down to dL/du^L, in two
 * halves: the classifier, the final norm and the gradient into the context
 * stream (dc16), then the attention and the context norm. Their weight
 * gradients go to the side stream as soon as their operands exist: nothing
 * on the way to the first BPTT waits for them, and there they run beside it
 * instead of in the window before it, where every lane's context stream
 * already fills the GPU (under recompute, whose layers reuse their
 * operands' memory, the first rebuild waits for them). Under recompute the
 * lanes also join between the halves:
 * the second half's dO and dqkv lie over the first's context output, merge
 * and logits (executor_gpu.c, work_layout), rows of other widths, so one
 * lane's would land on another's. */
static void backward_context(lane_ctx *c);

static void backward_classifier(lane_ctx *c, float ctx_limit)
{
    cc_executor *ex = c->ex;
    gpu_impl *g = c->g;
    gpu_lane *ln = c->ln;
    const cc_layout *lay = &ex->lay;
    const int M = c->M, D = c->D, V = c->V;
    const size_t MD = (size_t)M * D;
    cudaStream_t s = ln->stream;
    float *du = ROWS(c, g->du, D), *dtmp = ROWS(c, g->dtmp, D), *dc = ROWS(c, g->dc, D);
    /* dc16: the FP16 gradient into the context stream */
    uint16_t *dlogits = ROWS(c, g->dlogits16, V), *dc16 = ROWS(c, g->dc16, D);
    cudaStream_t side = ln->wgrad_stream;

    /* classifier */
    check(c, "classifier_backward", "dlogits", -1, dlogits, (size_t)M * V, 1, V);
    side_stream_after(ln);
    gpu_matmul_dw(ln->gemm_wgrad, G32L(c, lay->lm_head), dlogits, ROWS(c, g->f16, D), M, V, D, side);
    gpu_matmul_dx(ln->gemm, dtmp, dlogits, P16(ex, lay->lm_head), M, V, D, 0, s);
    cudaCheck(cudaMemsetAsync(du, 0, sizeof(float) * MD, s));
    launch_rmsnorm_backward(du, G32L(c, lay->final_norm), dtmp, ROWS(c, g->mm, D), P32(ex, lay->final_norm),
                            ROWS(c, g->f_ir, 1), M, D, row_window_all(M), &c->nc, &g->caps, s);
    mark(c, PH_CLASSIFIER);
    check(c, "final_rmsnorm_backward", "dm", -1, du, MD, 0, D);
    /* context stream */
    if (ctx_limit > 0) { /* the guard rescales a copy: du itself flows on down the residual */
        cudaCheck(cudaMemcpyAsync(dc, du, sizeof(float) * MD, cudaMemcpyDeviceToDevice, s));
        launch_rownorm_clamp(dc, M, D, row_window_all(M), ctx_limit, s);
    }
    launch_f32_to_f16(dc16, ctx_limit > 0 ? dc : du, MD, s);
    side_stream_after(ln);
    gpu_matmul_dw(ln->gemm_wgrad, G32L(c, lay->ctx_out), dc16, ROWS(c, g->o16, D), M, D, D, side);
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
    float *du = ROWS(c, g->du, D), *dtmp = ROWS(c, g->dtmp, D);
    /* d16: the FP16 dqkv */
    uint16_t *d16 = ROWS(c, g->d16, 3 * D), *dc16 = ROWS(c, g->dc16, D);
    /* dO, then dqkv into d16: the operand of the qkv GEMMs */
    if (g->attn_tc) { /* the tensor-core kernels read dO and write dqkv in FP16 only */
        uint16_t *do16 = ROWS(c, g->do16, D);
        gpu_matmul_dx_f16(ln->gemm, do16, dc16, P16(ex, lay->ctx_out), M, D, D, s);
        launch_attention_backward_tc(NULL, d16, HROWS(c, g->delta), do16, HROWS(c, g->lse), ROWS(c, g->qkv16, 3 * D),
                                     c->B, T, D, c->H, c->W, s);
        check(c, "attention_backward", "dqkv", -1, d16, 3 * MD, 1, 3 * D);
    } else {
        float *dqkv = ROWS(c, g->dqkv, 3 * D);
        gpu_matmul_dx(ln->gemm, dtmp, dc16, P16(ex, lay->ctx_out), M, D, D, 0, s);
        launch_attention_backward(dqkv, d16, ROWS(c, g->dsbuf, (size_t)c->H * c->W), dtmp,
                                  ROWS(c, g->p, (size_t)c->H * c->W), ROWS(c, g->qkv, 3 * D), c->B, T, D, c->H, c->W, &g->caps, s);
        check(c, "attention_backward", "dqkv", -1, dqkv, 3 * MD, 0, 3 * D);
    }
    side_stream_after(ln);
    gpu_matmul_dw(ln->gemm_wgrad, G32L(c, lay->ctx_qkv), d16, ROWS(c, g->s16, D), M, 3 * D, D, side);
    cudaCheck(cudaEventRecord(ln->ev_top_wgrad, side));
    gpu_matmul_dx(ln->gemm, dtmp, d16, P16(ex, lay->ctx_qkv), M, 3 * D, D, 0, s);
    launch_rmsnorm_backward(du, G32L(c, lay->ctx_norm), dtmp, forward_u(c, c->L), P32(ex, lay->ctx_norm),
                            ROWS(c, g->s_ir, 1), M, D, row_window_all(M), &c->nc, &g->caps, s);
    check(c, "ctx_rmsnorm_backward", "du", -1, du, MD, 0, D);
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
    const int D = c->D, par = layer_slot(c->g, l), dg = g->recompute ? 0 : par; /* recompute: one pair */
    const gru_grads G = {
        .dh_in = ROWS(c, g->du, D),
        /* the slots' buffers are [M_all, 3D] each; the lane's rows within */
        .dgx16 = LROWS(c, g->dgx16, dg, 3 * D),
        .dgh16 = LROWS(c, g->dgh16, dg, 3 * D),
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
    gru_layer after = *gl; /* under recompute the weight GEMMs' h_{t-1} is rebuilt after the BPTT */
    after.hprev16 = layer_hprev16(c, l, 1);
    side_stream_after(ln);
    gpu_trace_point(GPU_MAX_LANES + ln->index, ln->wgrad_stream);
    gpu_gru_weight_grads(ln->gemm_wgrad, &after, gg, nparts, gru_shape_of(c), ln->wgrad_stream);
    gpu_matmul_dw(ln->gemm_wgrad, G32L(c, lay->gru_wih[l]), gg->dgx16, layer_a16(c, l, 1), c->M, 3 * D, D,
                  ln->wgrad_stream);
    cudaCheck(cudaEventRecord(ln->ev_wgrad[par], ln->wgrad_stream));
    gpu_trace_point(GPU_MAX_LANES + ln->index, ln->wgrad_stream);
}

/* --plant-nan-grad-h (finite.h): where the planted element is in this lane
 * and layer, a pointer to it in du; its value is kept in plant_slot[1] and
 * a NaN stands in its place for the BPTT (stream-ordered copies; graphs are
 * off while planting). NULL elsewhere. */
static float *plant_begin(lane_ctx *c, int l, float *du, cudaStream_t s)
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

/* Recompute: layer l's GEMM operands from u^l (in u's block) and its h: the
 * normalised input (its 1/rms again, the same values) and FP16 h_{t-1}, the
 * whole block shifted by one row, then each sequence's row t = 0 zeroed. */
static void rebuild_operands(lane_ctx *c, int l, uint16_t *al, uint16_t *hp)
{
    const cc_layout *lay = &c->ex->lay;
    gpu_impl *g = c->g;
    const int M = c->M, D = c->D;
    cudaStream_t s = c->ln->stream;
    launch_rmsnorm_forward(NULL, al, LROWS(c, g->a_ir, l, 1), ROWS(c, g->u, D), P32(c->ex, lay->gru_norm[l]), M, D,
                           &c->nc, s);
    launch_f32_to_f16(hp + D, LROWS(c, g->h, l, D), (size_t)M * D - D, s);
    cudaCheck(cudaMemset2DAsync(hp, sizeof(uint16_t) * (size_t)c->T * D, 0, sizeof(uint16_t) * D, c->B, s));
}

/* Recompute (gpu_impl.h): what layer l's BPTT and weight GEMMs read, rebuilt
 * from the stored h and the weights: u^l = u^0 + h^0 + ... + h^{l-1}, each
 * sum the forward's in its order, so u, the norm a16 and gx are the
 * forward's bit for bit;
 * hprev16 = FP16 h_{t-1}; then the gates from gx and one W_hh GEMM over all
 * T (every h_{t-1} is known), in place in gx's rows. */
static void rebuild_layer(lane_ctx *c, int l)
{
    cc_executor *ex = c->ex;
    gpu_impl *g = c->g;
    const cc_layout *lay = &ex->lay;
    const int M = c->M, D = c->D;
    const size_t MD = (size_t)M * D;
    cudaStream_t s = c->ln->stream;
    gpu_matmul_ctx *gm = c->ln->gemm;
    /* the partial sums alternate between the scratch and u's block, and end in the block */
    float *ul = ROWS(c, g->u, D), *scratch = lane_scratch(c);
    launch_embedding_forward(l % 2 == 0 ? ul : scratch, ROWS(c, g->x, 1), P32(ex, lay->embed), M, D, s);
    for (int j = 0; j < l; j++) {
        const int in_block = (l - j) % 2 == 0;
        launch_add(in_block ? scratch : ul, in_block ? ul : scratch, LROWS(c, g->h, j, D), MD, s);
    }
    uint16_t *al = layer_a16(c, l, 0), *hp = layer_hprev16(c, l, 0);
    rebuild_operands(c, l, al, hp);
    float *gates = LROWS(c, g->gx, 0, 3 * D), *ghn = LROWS(c, g->ghn, 0, D);
    const uint16_t *whh = P16(ex, lay->gru_whh[l]);
    gpu_matmul_fwd(gm, gates, al, P16(ex, lay->gru_wih[l]), P32(ex, lay->gru_bih[l]), M, 3 * D, D, s);
    /* rows r and z take W_hh·h_{t-1} on top of gx; row n's product goes to ghn (the n gate reads it through r) */
    gpu_matmul(gm, gates, 3 * D, hp, D, 0, whh, D, 1, M, 2 * D, D, 1.f, 1.f, NULL, s);
    gpu_matmul(gm, ghn, D, hp, D, 0, whh + (size_t)2 * D * D, D, 1, M, D, D, 1.f, 0.f, NULL, s);
    launch_gru_cell_rebuild(gates, ghn, P32(ex, lay->gru_bhh[l]), M, D, s);
    check(c, "gru_rebuild", "gates", l, gates, 3 * MD, 0, 3 * D);
}

/* Layer l's BPTT; its weight gradients go to the side stream. du holds
 * dL/du^{l+1}, which is also dL/dh^l through the residual, and leaves as dL/du^l. */
static void backward_layer(lane_ctx *c, int l, float clamp_limit)
{
    cc_executor *ex = c->ex;
    gpu_impl *g = c->g;
    gpu_lane *ln = c->ln;
    const cc_layout *lay = &ex->lay;
    const int M = c->M, D = c->D, V = c->V;
    const size_t MD = (size_t)M * D;
    cudaStream_t s = ln->stream;
    float *du = ROWS(c, g->du, D), *dtmp = g->recompute ? lane_scratch(c) : ROWS(c, g->dtmp, D);
    const float *ul = g->recompute ? ROWS(c, g->u, D) : LROWS(c, g->u, l, D); /* recompute: rebuilt there */
    mark(c, l == c->L - 1 ? PH_CONTEXT_BWD : PH_WGRAD);
    if (l == c->L - 1 && gpu_overlaps_allreduce(ex, c->nlanes)) allreduce_tail_early(c);
    const int par = l & 1;
    const gru_layer gl = gru_layer_of(c, l);
    const gru_grads gg = gru_grads_of(c, l);
    const uint16_t *dgx = gg.dgx16;
    if (g->recompute) { /* one layer's buffers: layer l+1's weight gradients read them (and l+2's before) */
        if (l + 1 < c->L) cudaCheck(cudaStreamWaitEvent(s, ln->ev_wgrad[(l + 1) & 1], 0));
        rebuild_layer(c, l);
    } else if (l + 2 < c->L) { /* layer l+2's weight gradients read this buffer pair */
        cudaCheck(cudaStreamWaitEvent(s, ln->ev_wgrad[par], 0));
    }
    float *planted = plant_begin(c, l, du, s);
    const int nparts = gpu_gru_bptt(ln->gemm, &g->rec_caps, g->gru_path, &gl, &gg, gru_shape_of(c), clamp_limit,
                                    to_rec(ln));
    from_rec(ln);
    if (planted) /* the residual path keeps its value */
        cudaCheck(cudaMemcpyAsync(planted, c->g->plant_slot + 1, sizeof(float), cudaMemcpyDeviceToDevice, s));
    mark(c, PH_BPTT);
    check(c, "gru_backward", "dgx", l, dgx, 3 * MD, 1, 3 * D);
    if (g->recompute) /* the weight GEMMs' operands, again, where the gates were */
        rebuild_operands(c, l, layer_a16(c, l, 1), layer_hprev16(c, l, 1));
    /* The weight gradients, each one GEMM over the lane's positions, on the
     * side stream. Below layer 0 they are issued after the input gradient,
     * so they run beside the next layer's BPTT (on the SMs its clusters leave
     * free) instead of taking SMs from the input gradient, which the next
     * BPTT waits for; layer 0's run beside the embedding backward. */
    if (l == 0) weight_grads(c, l, &gl, &gg, nparts);
    /* the input gradient stays on the critical path */
    gpu_matmul_dx(ln->gemm, dtmp, dgx, P16(ex, lay->gru_wih[l]), M, 3 * D, D, 0, s);
    launch_rmsnorm_backward(du, G32L(c, lay->gru_norm[l]), dtmp, ul, P32(ex, lay->gru_norm[l]),
                            LROWS(c, g->a_ir, l, 1), M, D, row_window_all(M), &c->nc, &g->caps, s);
    check(c, "rmsnorm_backward", "du", l, du, MD, 0, D);
    if (l > 0) weight_grads(c, l, &gl, &gg, nparts);
    if (l == 0) {
        launch_embedding_backward(G32L(c, lay->embed), du, g->tok_off + (size_t)ln->index * (V + 1),
                                  ROWS(c, g->tok_pos, 1), V, D, s);
        cudaCheck(cudaStreamWaitEvent(s, ln->ev_wgrad[0], 0)); /* layer 0's weight gradients, and so all of them */
    }
}


/* Recompute with several lanes: every lane waits until each of the others
 * has reached this point (and, with_top_wgrad, until their context stream's
 * and classifier's weight GEMMs are done), since they share `work`. */
static void lanes_join(gpu_impl *g, int n, int with_top_wgrad)
{
    for (int i = 0; i < n; i++) cudaCheck(cudaEventRecord(g->lane[i].ev_join, g->lane[i].stream));
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            if (j != i) cudaCheck(cudaStreamWaitEvent(g->lane[i].stream, g->lane[j].ev_join, 0));
            if (with_top_wgrad) cudaCheck(cudaStreamWaitEvent(g->lane[i].stream, g->lane[j].ev_top_wgrad, 0));
        }
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

static void forward_lane(lane_ctx *c)
{
    for (int l = 0; l < c->L; l++) forward_layer(c, l);
    forward_top(c);
}

void gpu_forward_all(cc_executor *ex)
{
    gpu_set_lanes(ex, 1);
    lane_ctx c = lane_view(ex, &IMPL(ex)->lane[0], 1);
    forward_lane(&c);
}

void gpu_crossentropy_all(cc_executor *ex, float loss_scale, int with_grad)
{
    gpu_set_lanes(ex, 1);
    lane_ctx c = lane_view(ex, &IMPL(ex)->lane[0], 1);
    crossentropy_lane(&c, loss_scale, with_grad);
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
    if (g->recompute) lanes_join(g, n, 0);
    for (int i = 0; !top && i < n; i++) {
        forward_top(&c[i]);
        crossentropy_lane(&c[i], (float)loss_scale, scored > 0);
        if (scored > 0) backward_classifier(&c[i], ctx_limit);
        if (scored > 0 && !g->recompute) backward_context(&c[i]);
    }
    if (g->recompute && scored > 0) { /* backward_classifier says why the lanes join here */
        lanes_join(g, n, 0);
        for (int i = 0; i < n; i++) backward_context(&c[i]);
        lanes_join(g, n, 1);
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

