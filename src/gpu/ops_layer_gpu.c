/* The operations of a GRU layer (step_gpu.h), each written once for every
 * schedule: over a lane's sequences and a window of steps [t0, t1), which is
 * all of T layer after layer, a chunk under the wavefront and a window of
 * rc_window steps under recompute, whose normalised input, gates and their
 * gradients live in window buffers by turns (gpu_impl.h, recompute) rather
 * than in the layer's own tensors. Each declares what it reads and writes
 * (the pointers it hands its kernels) before it launches anything; where the
 * window is the whole of T it takes the whole-tensor kernels, so layer
 * after layer runs the launches it always ran. */
#include <math.h>
#include <stdio.h>
#include "catchat/gpu_gru.h"
#include "catchat/kernels.h"
#include "gpu/gpu_impl.h"
#include "gpu/step_gpu.h"

lane_ctx lane_view(cc_executor *ex, gpu_lane *ln)
{
    const cc_dims *d = &ex->lay.dims;
    lane_ctx c = { ex, IMPL(ex), ln, ln->B, ex->T, ln->B * ex->T, d->D, d->L, d->H, d->W, d->V,
                   (size_t)ln->b0 * ex->T, (size_t)ex->B * ex->T, ln->b0, (size_t)ln->b0 * ex->T,
                   cc_norm_consts_of(d) };
    return c;
}

lane_ctx lane_part(const lane_ctx *c, int s0, int ns, int part_buffers)
{
    lane_ctx p = *c;
    p.B = ns;
    p.M = ns * c->T;
    p.b0 = c->b0 + s0;
    p.r0 = c->r0 + (size_t)s0 * c->T;
    p.top_r0 = part_buffers ? 0 : p.r0;
    return p;
}

/* ---- what every layer operation shares ---- */

static int whole(const step_run *r) { return r->op->t0 == 0 && r->op->t1 == r->c.T; }
static int window_buffers(const step_run *r) { return r->g->plan.recompute; }
/* The window buffer of the op's window (recompute: two by turns), in the
 * op's layer's set under the wavefront (the layers run at once; a set a
 * layer, not a pair of streams: a BPTT reads the next window's dgh, its own
 * layer's), else the one. */
static int wbuf(const step_run *r) { return r->op->k & 1; }
static int wset(const step_run *r) { return r->g->plan.rc_sets > 1 ? r->op->layer : 0; }
/* The op's rows as a row window: all rows, or a time window of every sequence. */
static row_window op_rows(const step_run *r)
{
    const row_window w = { r->op->t1 - r->op->t0, r->c.T, 0 };
    return whole(r) ? row_window_all(r->c.M) : w;
}
/* A window buffer's row window: the window's rows of the [B, T] tensors, the buffer's own. */
static row_window buf_rows(const step_run *r)
{
    const row_window w = { r->g->plan.rc_window, r->c.T, r->g->plan.rc_window };
    return w;
}
static int op_M(const step_run *r) { return r->c.B * (r->op->t1 - r->op->t0); }

/* Which of the per-layer buffer slots (gpu_impl.h) layer l uses: by parity
 * (the weight GEMMs of layer l+2 wait for it), or under the wavefront, where
 * the layers' recurrences overlap, its own, also where it shares a pair of
 * streams with the layers beside it (gpu_plan_wave_stream): its gate
 * gradients live until its weight GEMMs after its last chunk, and dhrec
 * (the per-step loop's) and gh carry its state from one chunk to the next,
 * so a slot by pair would hand a layer the other's. */
static int layer_slot(const gpu_impl *g, int l) { return g->plan.wave_layers > 2 ? l : l & 1; }

/* u^l's lane rows: its own block, or under recompute the one block that
 * holds u^l for each layer in turn (made in place from u^{l-1}). */
static float *u_rows(const lane_ctx *c, int l) { return c->g->plan.recompute ? ROWS(c, c->g->u, c->D) : LROWS(c, c->g->u, l, c->D); }
/* The FP16 h_{t-1}: a block a layer, or under recompute one block for all
 * (a layer's own under the wavefront: a chunk's first step reads the row
 * the chunk before wrote). */
static uint16_t *hprev_rows(const lane_ctx *c, int l)
{
    const gpu_impl *g = c->g;
    return LROWS(c, g->hprev16, !g->plan.recompute || g->plan.rc_sets > 1 ? l : 0, c->D);
}
/* The window buffer's rows of the lane. */
#define WIN(r, base, width) WINROWS(&(r)->c, (base)[wset(r)][wbuf(r)], (width))

/* The lane's block of the BPTT's per-cluster bias sums for buffer slot par
 * (NULL where its batch share does not run the cluster kernels). */
static float *bias_part(const lane_ctx *c, int par)
{
    if (c->B % 8) return NULL;
    /* per buffer slot, the lanes' [2][B_lane/8][3D] blocks one after another */
    const size_t all = gpu_gru_bias_part_floats(c->ex->B, c->D);
    return c->g->bias_part + par * all + (size_t)2 * (c->ln->b0 / 8) * 3 * c->D;
}
static size_t bias_part_bytes(const lane_ctx *c) { return sizeof(float) * 2 * (size_t)(c->B / 8) * 3 * c->D; }

/* Where layer l's recurrence tensors lie: the layer's own rows, or under
 * recompute gx (the gates over it in place) and ghn in the op's window
 * buffer; and its gate gradients, in the buffers of the layer's slot or
 * under recompute the window's. An operation hands its kernels these
 * through views (gru_layer and gru_grads start empty: a member a kernel
 * reads that the operation did not view is NULL). */
static float *gates_rows(const step_run *r, int l)
{
    return window_buffers(r) ? WIN(r, r->g->win_gates, 3 * r->c.D) : LROWS(&r->c, r->g->gates, l, 3 * r->c.D);
}
static float *gx_rows(const step_run *r, int l)
{
    return window_buffers(r) ? WIN(r, r->g->win_gates, 3 * r->c.D) : LROWS(&r->c, r->g->gx, l, 3 * r->c.D);
}
static float *ghn_rows(const step_run *r, int l)
{
    return window_buffers(r) ? WIN(r, r->g->win_ghn, r->c.D) : LROWS(&r->c, r->g->ghn, l, r->c.D);
}
static uint16_t *dgx_rows(const step_run *r, int l)
{
    const int D = r->c.D;
    return window_buffers(r) ? WIN(r, r->g->win_dgx16, 3 * D) : LROWS(&r->c, r->g->dgx16, layer_slot(r->g, l), 3 * D);
}
static uint16_t *dgh_rows(const step_run *r, int l)
{
    const int D = r->c.D;
    return window_buffers(r) ? WIN(r, r->g->win_dgh16, 3 * D) : LROWS(&r->c, r->g->dgh16, layer_slot(r->g, l), 3 * D);
}
/* The per-step loop's one step of W_hh·h_{t-1}, by layer slot. */
static float *gh_of(const step_run *r, int l)
{
    return r->g->gh + ((size_t)layer_slot(r->g, l) * r->ex->B + r->c.ln->b0) * 3 * r->c.D;
}
/* The BPTT's carry between steps and windows, by layer slot. */
static float *dhrec_of(const step_run *r, int l)
{
    return r->g->dhrec + ((size_t)layer_slot(r->g, l) * r->ex->B + r->c.ln->b0) * r->c.D;
}

/* Whether the recurrence may take the per-step loop, whose GEMMs write the
 * layer slot's gh: the plan's kernels, any after a refused persistent launch
 * (the program is built again then), or a persistent launch the runtime
 * refuses now (its call falls through to the loop); and whether the cluster
 * BPTT writes its bias sums. */
static int per_step_possible(const step_run *r)
{
    const gpu_step_plan *p = &r->g->plan;
    return p->impl != GRU_IMPL_CLUSTER || p->eval_impl != GRU_IMPL_CLUSTER || r->g->gru.refused[0];
}
static int cluster_sums(const step_run *r) { return r->g->plan.impl == GRU_IMPL_CLUSTER && !r->g->gru.refused[0]; }

/* The op's window as the recurrence kernels take it. */
static gru_shape shape_of(const step_run *r)
{
    const lane_ctx *c = &r->c;
    gru_shape sh = { c->B, c->T, c->D, r->op->t0, r->op->t1, 0, 0 };
    if (window_buffers(r)) {
        sh.wt0 = r->op->t0;
        sh.wT = r->g->plan.rc_window;
    }
    return sh;
}

/* ---- forward ---- */

/* u^j on the op's rows: the embedding of the lane's tokens plus h^0 ..
 * h^{j-1} added in the forward's order (j = layer). The forward makes u^0
 * over all T (the residual adds are op_feed's); recompute's rebuild of a
 * window makes u^{l-1} there again, so that op_feed, run again, adds
 * h^{l-1} to it as the forward did. */
void op_embed(step_run *r)
{
    const lane_ctx *c = &r->c;
    cc_executor *ex = c->ex;
    gpu_impl *g = c->g;
    const int j = r->op->layer, D = c->D, t0 = r->op->t0, t1 = r->op->t1;
    float *u = view_rows(r, ACC_WRITE, u_rows(c, j), D, 4, t0, t1);
    const int *x = view_rows(r, ACC_READ, ROWS(c, g->x, 1), 1, 4, t0, t1);
    const float *table = view_param32(r, ex->lay.embed);
    const float *below[CC_MAX_LAYERS];
    for (int i = 0; i < j; i++) below[i] = view_rows(r, ACC_READ, LROWS(c, g->h, i, D), D, 4, t0, t1);
    if (j == 0) scan_rows(r, "embedding", "u0", -1, u_rows(c, j), D, 0, t0, t1, 0);
    if (r->declaring) return;
    if (j == 0 && whole(r)) {
        launch_embedding_forward(u, x, table, c->M, D, r->s);
    } else {
        const row_window rw = { t1 - t0, c->T, 0 };
        launch_embedding_sum_rows(u, x, table, below, j, op_M(r), D, rw, r->s);
    }
}

/* Layer l's input on the op's window: u^l = u^{l-1} + h^{l-1} (l > 0; in
 * place under recompute) and its norm, then the input GEMM; for l = L, u^L
 * and the context stream's norm s (under recompute over a part's
 * sequences, into the part's buffer). Recompute's backward runs it again
 * on each window, into the window's buffers, after op_embed remade u^{l-1}
 * there: the forward's own kernels, so the rebuilt a and gx are the
 * forward's bit for bit. */
void op_feed(step_run *r)
{
    const lane_ctx *c = &r->c;
    cc_executor *ex = c->ex;
    gpu_impl *g = c->g;
    const cc_layout *lay = &ex->lay;
    const int l = r->op->layer, D = c->D, L = c->L, t0 = r->op->t0, t1 = r->op->t1, M = op_M(r);
    const int top = l == L, wb = window_buffers(r) && !top;
    const float *uin = view_rows(r, ACC_READ, u_rows(c, l > 0 ? l - 1 : 0), D, 4, t0, t1);
    const float *hin = l > 0 ? view_rows(r, ACC_READ, LROWS(c, g->h, l - 1, D), D, 4, t0, t1) : NULL;
    float *uout = l > 0 ? view_rows(r, ACC_WRITE, u_rows(c, l), D, 4, t0, t1) : NULL;
    float *ir = view_rows(r, ACC_WRITE, top ? ROWS(c, g->s_ir, 1) : LROWS(c, g->a_ir, l, 1), 1, 4, t0, t1);
    const float *gnorm = view_param32(r, top ? lay->ctx_norm : lay->gru_norm[l]);
    uint16_t *y16;
    float *gx = NULL;
    if (top) {
        y16 = view_rows(r, ACC_DEFINE, TOPROWS(c, g->s16, D), D, 2, t0, t1);
        scan_rows(r, "ctx_rmsnorm", "s", -1, TOPROWS(c, g->s16, D), D, 1, t0, t1, 0);
    } else if (wb) {
        y16 = view_window(r, ACC_DEFINE, WIN(r, g->win_a16, D), D, 2);
        gx = view_window(r, ACC_DEFINE, gx_rows(r, l), 3 * D, 4);
        scan_rows(r, "rmsnorm", "a", l, y16, D, 1, t0, t1, 1);
        scan_rows(r, "input_projection", "gx", l, gx, 3 * D, 0, t0, t1, 1);
    } else {
        y16 = view_rows(r, ACC_WRITE, LROWS(c, g->a16, l, D), D, 2, t0, t1);
        gx = view_rows(r, ACC_WRITE, gx_rows(r, l), 3 * D, 4, t0, t1);
        scan_rows(r, "rmsnorm", "a", l, LROWS(c, g->a16, l, D), D, 1, t0, t1, 0);
        scan_rows(r, "input_projection", "gx", l, gx_rows(r, l), 3 * D, 0, t0, t1, 0);
    }
    const uint16_t *wih = top ? NULL : view_param16(r, lay->gru_wih[l]);
    const float *bih = top ? NULL : view_param32(r, lay->gru_bih[l]);
    if (r->declaring) return;

    cudaStream_t s = r->s;
    if (wb) { /* a window buffer: its rows of every sequence one after another */
        launch_add_rmsnorm_forward(uout, NULL, y16, ir, uin, hin, gnorm, M, D, buf_rows(r), &c->nc, s);
        const int C = g->plan.rc_window;
        gpu_matmul_rows(r->gm, gx, 3 * D, C, y16, D, C, wih, D, 1, c->B, C, 3 * D, D, 0.f, bih, s);
        return;
    }
    if (l == 0 && whole(r)) /* nothing to add before layer 0 */
        launch_rmsnorm_forward(NULL, y16, ir, uin, gnorm, M, D, &c->nc, s);
    else
        launch_add_rmsnorm_forward(uout, NULL, y16, ir, uin, hin, gnorm, M, D, op_rows(r), &c->nc, s);
    if (top) return;
    if (whole(r))
        gpu_matmul_fwd(r->gm, gx, y16, wih, bih, M, 3 * D, D, s);
    else
        gpu_matmul_fwd_window(r->gm, gx, y16, wih, bih, c->B, t1 - t0, c->T, 3 * D, D, s);
}

/* Layer l's recurrence on the window, from the state the window before left. */
void op_recur(step_run *r)
{
    const lane_ctx *c = &r->c;
    gpu_impl *g = c->g;
    const cc_layout *lay = &c->ex->lay;
    const int l = r->op->layer, D = c->D, t0 = r->op->t0, t1 = r->op->t1;
    gru_layer gl = { 0 };
    if (window_buffers(r)) { /* gx in, the gates out in place */
        gl.gates = view_window(r, ACC_WRITE, gates_rows(r, l), 3 * D, 4);
        gl.gx = gl.gates;
        gl.ghn = view_window(r, ACC_DEFINE, ghn_rows(r, l), D, 4);
    } else {
        gl.gx = view_lane(r, ACC_READ, gx_rows(r, l), 3 * D, 4, t0, t1);
        gl.gates = view_lane(r, ACC_WRITE, gates_rows(r, l), 3 * D, 4, t0, t1);
        gl.ghn = view_lane(r, ACC_WRITE, ghn_rows(r, l), D, 4, t0, t1);
    }
    view_lane(r, ACC_READ, LROWS(c, g->h, l, D), D, 4, t0 > 0 ? t0 - 1 : 0, t1); /* h_{t0-1}: the state carried in */
    gl.h = view_lane(r, ACC_WRITE, LROWS(c, g->h, l, D), D, 4, t0, t1);
    /* each step t also stores FP16 h_t as the next step's h_{t-1}: row t1 too */
    gl.hprev16 = view_lane(r, ACC_WRITE, hprev_rows(c, l), D, 2, t0, t1 < c->T ? t1 + 1 : t1);
    if (per_step_possible(r)) gl.gh = view_flat(r, ACC_WRITE, gh_of(r, l), sizeof(float) * (size_t)c->B * 3 * D);
    gl.whh16 = view_param16(r, lay->gru_whh[l]);
    gl.bhh = view_param32(r, lay->gru_bhh[l]);
    scan_rows(r, "gru_forward", "h", l, gl.h, D, 0, t0, t1, 0);
    if (r->declaring) return;
    const gpu_caps *caps = r->p->wave ? &g->plan.wave_caps : &g->plan.rec_caps;
    gpu_gru_forward(r->gm, caps, &g->gru, g->plan.path, &gl, shape_of(r), g->plan.wide, r->sc, r->s);
}

/* ---- recompute's rebuild ---- */

/* The recurrence's operands of a window from the h the forward kept (after
 * op_embed and op_feed made its input again): FP16 h_{t-1} (h shifted by
 * one row, each sequence's h_{-1} = 0 in the first window), W_hh·h_{t-1}
 * added into rows r and z of the gates (which hold gx), W_hn·h_{t-1} into
 * ghn, then the gate math (the products from GEMMs rather than the
 * recurrence's MMAs: equal to FP32 rounding, not bit for bit). */
void op_regate(step_run *r)
{
    const lane_ctx *c = &r->c;
    cc_executor *ex = c->ex;
    gpu_impl *g = c->g;
    const cc_layout *lay = &ex->lay;
    const int l = r->op->layer, D = c->D, B = c->B, C = g->plan.rc_window, t0 = r->op->t0;
    /* h_{t-1} for t in the window: rows t0 - 1 .. t0 + C - 2 of h */
    const float *hl = view_rows(r, ACC_READ, LROWS(c, g->h, l, D), D, 4, t0 > 0 ? t0 - 1 : 0,
                                t0 + C - 1 > t0 ? t0 + C - 1 : t0 + 1);
    uint16_t *hp = view_window(r, ACC_DEFINE, WIN(r, g->win_hp16, D), D, 2);
    float *gates = view_window(r, ACC_WRITE, gates_rows(r, l), 3 * D, 4); /* gx in, the gates out */
    float *ghn = view_window(r, ACC_DEFINE, ghn_rows(r, l), D, 4);
    const uint16_t *whh = view_param16(r, lay->gru_whh[l]);
    const float *bhh = view_param32(r, lay->gru_bhh[l]);
    scan_rows(r, "gru_rebuild", "gates", l, gates, 3 * D, 0, t0, t0 + C, 1);
    if (r->declaring) return;

    cudaStream_t s = r->s;
    if (t0 > 0) {
        launch_f32_to_f16_rows(hp, hl, B * C, D, buf_rows(r), s);
    } else { /* rows 0 .. C - 2 of h into rows 1 .. C - 1, row 0 zeros */
        const row_window rw = { C - 1, c->T, C };
        if (C > 1) launch_f32_to_f16_rows(hp + D, hl, B * (C - 1), D, rw, s);
        cudaCheck(cudaMemset2DAsync(hp, sizeof(uint16_t) * (size_t)C * D, 0, sizeof(uint16_t) * D, B, s));
    }
    gpu_matmul_rows(r->gm, gates, 3 * D, C, hp, D, C, whh, D, 1, B, C, 2 * D, D, 1.f, NULL, s);
    gpu_matmul_rows(r->gm, ghn, D, C, hp, D, C, whh + (size_t)2 * D * D, D, 1, B, C, D, D, 0.f, NULL, s);
    launch_gru_cell_rebuild(gates, ghn, bhh, B * C, D, s);
}

/* ---- backward ---- */

/* --plant-nan-grad-h (finite.h): the planted element of du where it falls
 * in this op's lane, layer and window, else NULL. */
static float *plant_at(const step_run *r)
{
    const lane_ctx *c = &r->c;
    const cc_plant_grad_h *pl = &c->ex->plant_grad_h;
    const int b = pl->b - c->b0;
    if (!pl->on || pl->layer != r->op->layer || b < 0 || b >= c->B || pl->t < r->op->t0 || pl->t >= r->op->t1 ||
        pl->unit >= c->D)
        return NULL;
    return ROWS(c, c->g->du, c->D) + ((size_t)b * c->T + pl->t) * c->D + pl->unit;
}

/* Layer l's BPTT on the window (windows run from the last): du holds
 * dL/du^{l+1}, which is also dL/dh^l through the residual. A planted NaN
 * stands in du's element for this BPTT only (stream-ordered copies: the
 * residual path keeps its value). */
void op_bptt(step_run *r)
{
    const lane_ctx *c = &r->c;
    gpu_impl *g = c->g;
    const cc_layout *lay = &c->ex->lay;
    const int l = r->op->layer, D = c->D, t0 = r->op->t0, t1 = r->op->t1, wb = window_buffers(r);
    gru_layer gl = { 0 };
    gru_grads gg = { 0 };
    float *planted = plant_at(r);
    gg.dh_in = view_lane(r, planted ? ACC_WRITE : ACC_READ, ROWS(c, g->du, D), D, 4, t0, t1);
    gl.h = view_lane(r, ACC_READ, LROWS(c, g->h, l, D), D, 4, t0 > 0 ? t0 - 1 : 0, t1); /* h_{t-1} of each step */
    if (wb) {
        gl.gates = view_window(r, ACC_READ, gates_rows(r, l), 3 * D, 4);
        gl.ghn = view_window(r, ACC_READ, ghn_rows(r, l), D, 4);
        gg.dgx16 = view_window(r, ACC_DEFINE, dgx_rows(r, l), 3 * D, 2);
        gg.dgh16 = view_window(r, ACC_DEFINE, dgh_rows(r, l), 3 * D, 2);
        /* the persistent BPTT's first step reads the next window's first dgh row (the carry) */
        if (t1 < c->T)
            gg.dgh16_next = view_window(r, ACC_READ, WINROWS(c, g->win_dgh16[wset(r)][wbuf(r) ^ 1], 3 * D), 3 * D, 2);
        scan_rows(r, "gru_backward", "dgx", l, gg.dgx16, 3 * D, 1, t0, t1, 1);
    } else {
        gl.gates = view_lane(r, ACC_READ, gates_rows(r, l), 3 * D, 4, t0, t1);
        gl.ghn = view_lane(r, ACC_READ, ghn_rows(r, l), D, 4, t0, t1);
        gg.dgx16 = view_lane(r, ACC_WRITE, dgx_rows(r, l), 3 * D, 2, t0, t1);
        gg.dgh16 = view_lane(r, ACC_WRITE, dgh_rows(r, l), 3 * D, 2, t0, t1);
        /* the persistent BPTT's first step reads the next window's first dgh row (the carry) */
        if (t1 < c->T) view_lane(r, ACC_READ, dgh_rows(r, l), 3 * D, 2, t1, t1 + 1);
        scan_rows(r, "gru_backward", "dgx", l, gg.dgx16, 3 * D, 1, t0, t1, 0);
    }
    gg.dhrec = view_flat(r, ACC_WRITE, dhrec_of(r, l), sizeof(float) * (size_t)c->B * D);
    if (per_step_possible(r)) view_flat(r, ACC_WRITE, gh_of(r, l), sizeof(float) * (size_t)c->B * 3 * D);
    float *sums = bias_part(c, layer_slot(g, l));
    if (sums && cluster_sums(r)) gg.bias_part = view_flat(r, ACC_WRITE, sums, bias_part_bytes(c));
    gl.whh16 = view_param16(r, lay->gru_whh[l]);
    if (r->declaring) return;

    cudaStream_t s = r->s;
    if (planted) { /* plant_slot: [0] the NaN, [1] the value it stands in for */
        cudaCheck(cudaMemcpyAsync(g->plant_slot + 1, planted, sizeof(float), cudaMemcpyDeviceToDevice, s));
        cudaCheck(cudaMemcpyAsync(planted, g->plant_slot, sizeof(float), cudaMemcpyDeviceToDevice, s));
    }
    const gpu_caps *caps = r->p->wave ? &g->plan.wave_caps : &g->plan.rec_caps;
    /* under recompute every window of a layer takes the same path, as the carries differ (the persistent
     * kernels' z*g, the per-step loop's dhrec with W_hh^T dgh): one grid, which the runtime admits or
     * refuses by its size, and a refusal sends every later launch per step too */
    gpu_gru_bptt(r->gm, caps, &g->gru, g->plan.path, &gl, &gg, shape_of(r), r->clamp_limit, r->sc, s);
    if (planted) cudaCheck(cudaMemcpyAsync(planted, g->plant_slot + 1, sizeof(float), cudaMemcpyDeviceToDevice, s));
}

/* Layer l's input gradient and norm backward on the window: du becomes dL/du^l there. */
void op_dx(step_run *r)
{
    const lane_ctx *c = &r->c;
    cc_executor *ex = c->ex;
    gpu_impl *g = c->g;
    const cc_layout *lay = &ex->lay;
    const int l = r->op->layer, D = c->D, t0 = r->op->t0, t1 = r->op->t1, M = op_M(r), wb = window_buffers(r);
    const uint16_t *dgx;
    float *dtmp;
    if (wb) { /* under recompute the set's one buffer: the input gradient lives within this op */
        dgx = view_window(r, ACC_READ, dgx_rows(r, l), 3 * D, 2);
        dtmp = view_window(r, ACC_DEFINE, WINROWS(c, g->win_dtmp[wset(r)], D), D, 4);
    } else {
        dgx = view_rows(r, ACC_READ, dgx_rows(r, l), 3 * D, 2, t0, t1);
        dtmp = view_rows(r, ACC_WRITE, ROWS(c, g->dtmp, D), D, 4, t0, t1);
    }
    float *du = view_rows(r, ACC_WRITE, ROWS(c, g->du, D), D, 4, t0, t1);
    const float *u = view_rows(r, ACC_READ, u_rows(c, l), D, 4, t0, t1);
    const float *ir = view_rows(r, ACC_READ, LROWS(c, g->a_ir, l, 1), 1, 4, t0, t1);
    float *dgnorm = view_grad(r, lay->gru_norm[l]);
    const float *gnorm = view_param32(r, lay->gru_norm[l]);
    const uint16_t *w = view_param16(r, lay->gru_wih[l]);
    scan_rows(r, "rmsnorm_backward", "du", l, ROWS(c, g->du, D), D, 0, t0, t1, 0);
    if (r->declaring) return;

    cudaStream_t s = r->s;
    const int C = g->plan.rc_window;
    if (wb)
        gpu_matmul_rows(r->gm, dtmp, D, C, dgx, 3 * D, C, w, D, 0, c->B, C, D, 3 * D, 0.f, NULL, s);
    else if (whole(r))
        gpu_matmul_dx(r->gm, dtmp, dgx, w, M, 3 * D, D, 0, s);
    else
        gpu_matmul_dx_window(r->gm, dtmp, dgx, w, c->B, t1 - t0, c->T, 3 * D, D, s);
    launch_rmsnorm_backward(du, dgnorm, dtmp, u, gnorm, ir, M, D, wb ? buf_rows(r) : op_rows(r), &c->nc,
                            &g->plan.caps, r->sc, s);
}

/* Layer l's weight gradients from the gate gradients its BPTT left (and the
 * bias sums where its cluster kernels wrote them: as many parts as the
 * BPTT's kernels, which the plan and the shape decide, gpu_gru_bptt_parts):
 * over all T, or under recompute the window's, from its buffer's operands
 * (the cluster BPTT sums the biases over every window: the first window,
 * the last to run, adds them). */
void op_wgrad(step_run *r)
{
    const lane_ctx *c = &r->c;
    const cc_layout *lay = &c->ex->lay;
    gpu_impl *g = c->g;
    const int l = r->op->layer, D = c->D, t0 = r->op->t0, t1 = r->op->t1, wb = window_buffers(r);
    gru_layer gl = { 0 };
    gru_grads gg = { 0 };
    const uint16_t *a16;
    if (wb) {
        gg.dgx16 = view_window(r, ACC_READ, dgx_rows(r, l), 3 * D, 2);
        gg.dgh16 = view_window(r, ACC_READ, dgh_rows(r, l), 3 * D, 2);
        gl.hprev16 = view_window(r, ACC_READ, WIN(r, g->win_hp16, D), D, 2);
        a16 = view_window(r, ACC_READ, WIN(r, g->win_a16, D), D, 2);
    } else {
        gg.dgx16 = view_lane(r, ACC_READ, dgx_rows(r, l), 3 * D, 2, t0, t1);
        gg.dgh16 = view_lane(r, ACC_READ, dgh_rows(r, l), 3 * D, 2, t0, t1);
        gl.hprev16 = view_lane(r, ACC_READ, hprev_rows(c, l), D, 2, t0, t1);
        a16 = view_lane(r, ACC_READ, LROWS(c, g->a16, l, D), D, 2, t0, t1);
    }
    float *sums = bias_part(c, layer_slot(g, l));
    const gpu_caps *caps = r->p->wave ? &g->plan.wave_caps : &g->plan.rec_caps;
    /* the parts the BPTT wrote (op_bptt hands its kernels the sums where cluster_sums says) */
    const int parts = gpu_gru_bptt_parts(caps, g->plan.path, c->B, c->T, D, sums && cluster_sums(r));
    /* the cluster BPTT's bias sums: read once, by the first window's (the last to run) */
    const int adds_sums = parts > 0 && (!wb || t0 == 0);
    if (adds_sums) gg.bias_part = view_flat(r, ACC_READ, sums, bias_part_bytes(c));
    gg.dwhh = view_grad(r, lay->gru_whh[l]);
    gg.dbhh = view_grad(r, lay->gru_bhh[l]);
    gg.dbih = view_grad(r, lay->gru_bih[l]);
    float *dwih = view_grad(r, lay->gru_wih[l]);
    if (r->declaring) return;

    gpu_gru_weight_grads(r->gm, &gl, &gg, adds_sums ? parts : parts > 0 ? -1 : 0, shape_of(r), r->sc, r->s);
    gpu_matmul_dw(r->gm, dwih, gg.dgx16, a16, op_M(r), 3 * D, D, r->s);
}

/* The embedding's gradient from du^0. */
void op_embed_bwd(step_run *r)
{
    const lane_ctx *c = &r->c;
    gpu_impl *g = c->g;
    const float *du = view_rows(r, ACC_READ, ROWS(c, g->du, c->D), c->D, 4, 0, c->T);
    float *dtable = view_grad(r, c->ex->lay.embed);
    const int *off = view_flat(r, ACC_READ, g->tok_off + (size_t)c->ln->index * (c->V + 1), sizeof(int) * (size_t)(c->V + 1));
    const int *pos = view_rows(r, ACC_READ, ROWS(c, g->tok_pos, 1), 1, 4, 0, c->T);
    if (r->declaring) return;
    launch_embedding_backward(dtable, du, off, pos, c->V, c->D, r->s);
}
