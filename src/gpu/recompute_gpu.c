/* Recompute ([gpu] recompute, gpu_impl.h): a layer's recurrence over time
 * windows whose gx, gates, ghn and gate gradients live in two buffers of
 * rc_window steps a sequence, taken by turns.
 *
 * Forward, window k: the input GEMM of k from the layer's a16 into buffer
 * k & 1 on the lane's stream, then the recurrence of k on the recurrence
 * stream, from the state window k-1 left (h and hprev16 stay the layer's);
 * the GEMM of k+1 runs beside the recurrence of k. The gates are dropped.
 *
 * Backward, layer l: u^l (the embedding plus the stored h below, summed in
 * the forward's order: bit for bit the forward's), a16 and FP16 h_{t-1} for
 * all T; then from the last window down: the BPTT of k on the recurrence
 * stream (carried into k-1 as the whole-layer launch carries between
 * steps), while the lane's stream rebuilds window k-1's gates and ghn into
 * the other buffer (one GEMM of W_ih, two of W_hh over the window's h_{t-1},
 * then the cell's gate math) and, once the BPTT of k is done, the input
 * gradient and norm backward of k on its rows; k's weight GEMMs go to the
 * side stream, from copies of its a16 and h_{t-1} rows in its ghn's bytes
 * (contiguous, as the GEMMs over the window's rows need). A buffer is
 * rebuilt once the weight GEMMs of the window before are done with it. */
#include <stdio.h>
#include "catchat/gpu_gru.h"
#include "catchat/kernels.h"
#include "gpu/gpu_impl.h"
#include "gpu/lane_gpu.h"

static int rc_windows(const lane_ctx *c) { return c->T / c->g->rc_window; }

static gru_shape rc_shape(const lane_ctx *c, int k)
{
    const int C = c->g->rc_window;
    const gru_shape sh = { c->B, c->T, c->D, k * C, (k + 1) * C, k * C, C };
    return sh;
}

/* Layer l with window buffer j's gx (the gates in place) and ghn. */
static gru_layer rc_layer(const lane_ctx *c, int l, int j)
{
    gru_layer L = gru_layer_of(c, l);
    L.gx = L.gates = WINROWS(c, c->g->win_gates[j], 3 * c->D);
    L.ghn = WINROWS(c, c->g->win_ghn[j], c->D);
    return L;
}

/* Window k's gradients in buffer j, with the next window's dgh (buffer j^1) for the persistent BPTT. */
static gru_grads rc_grads(const lane_ctx *c, int l, int j, int k)
{
    const gpu_impl *g = c->g;
    gru_grads G = gru_grads_of(c, l);
    G.dgx16 = WINROWS(c, g->win_dgx16[j], 3 * c->D);
    G.dgh16 = WINROWS(c, g->win_dgh16[j], 3 * c->D);
    G.dgh16_next = k + 1 < rc_windows(c) ? WINROWS(c, g->win_dgh16[j ^ 1], 3 * c->D) : NULL;
    return G;
}

static void wait_ev(cudaStream_t s, cudaEvent_t ev) { cudaCheck(cudaStreamWaitEvent(s, ev, 0)); }
static void record_ev(cudaEvent_t ev, cudaStream_t s) { cudaCheck(cudaEventRecord(ev, s)); }

void rc_forward_windows(lane_ctx *c, int l)
{
    cc_executor *ex = c->ex;
    gpu_impl *g = c->g;
    gpu_lane *ln = c->ln;
    const cc_layout *lay = &ex->lay;
    const int D = c->D, T = c->T, B = c->B, C = g->rc_window, nw = rc_windows(c);
    cudaStream_t s = ln->stream, rec = ln->rec_stream;
    const uint16_t *a16 = layer_a16(c, l);
    lane_mark(c, PH_INPUT);
    for (int k = 0; k < nw; k++) {
        const int j = k & 1;
        if (k >= 2) wait_ev(s, ln->ev_wrec[j]); /* the recurrence of window k-2 is done with the buffer */
        const gru_layer gl = rc_layer(c, l, j);
        gpu_matmul_rows(ln->gemm, (float *)gl.gx, 3 * D, C, a16 + (size_t)k * C * D, D, T, P16(ex, lay->gru_wih[l]), D,
                        1, B, C, 3 * D, D, 0.f, P32(ex, lay->gru_bih[l]), s);
        lane_check(c, "input_projection", "gx", l, gl.gx, (size_t)3 * B * C * D, 0, 3 * D);
        record_ev(ln->ev_wfeed[j], s);
        wait_ev(rec, ln->ev_wfeed[j]);
        gpu_trace_point(ln->index, rec);
        gpu_gru_forward(ln->rec_gemm[0], &g->rec_caps, g->gru_path, &gl, rc_shape(c, k), g->gru_wide, rec);
        gpu_trace_point(ln->index, rec);
        record_ev(ln->ev_wrec[j], rec);
    }
    wait_ev(s, ln->ev_wrec[(nw - 1) & 1]); /* and so every window's */
}

/* u^l into u's block: the embedding plus h^0 .. h^{l-1}, the partial sums
 * alternating between dtmp and the block so they end in the block. */
static void rebuild_u(lane_ctx *c, int l)
{
    cc_executor *ex = c->ex;
    gpu_impl *g = c->g;
    const size_t MD = (size_t)c->M * c->D;
    cudaStream_t s = c->ln->stream;
    float *ul = ROWS(c, g->u, c->D), *scratch = ROWS(c, g->dtmp, c->D);
    launch_embedding_forward(l % 2 == 0 ? ul : scratch, ROWS(c, g->x, 1), P32(ex, ex->lay.embed), c->M, c->D, s);
    for (int j = 0; j < l; j++) {
        const int in_block = (l - j) % 2 == 0;
        launch_add(in_block ? scratch : ul, in_block ? ul : scratch, LROWS(c, g->h, j, c->D), MD, s);
    }
}

/* Layer l's GEMM operands for all T: the normalised input of u^l (its
 * 1/rms again, the same values) and FP16 h_{t-1}, h shifted by one row,
 * then each sequence's row t = 0 zeroed. */
static void rebuild_operands(lane_ctx *c, int l)
{
    gpu_impl *g = c->g;
    const int M = c->M, D = c->D;
    cudaStream_t s = c->ln->stream;
    uint16_t *hp = layer_hprev16(c, l);
    launch_rmsnorm_forward(NULL, layer_a16(c, l), LROWS(c, g->a_ir, l, 1), ROWS(c, g->u, D),
                           P32(c->ex, c->ex->lay.gru_norm[l]), M, D, &c->nc, s);
    launch_f32_to_f16(hp + D, LROWS(c, g->h, l, D), (size_t)M * D - D, s);
    cudaCheck(cudaMemset2DAsync(hp, sizeof(uint16_t) * (size_t)c->T * D, 0, sizeof(uint16_t) * D, c->B, s));
}

/* Window k's gates and ghn into buffer j, as the forward's cell made them:
 * gx (with b_ih), W_hh·h_{t-1} added into rows r and z, W_hn·h_{t-1} into
 * ghn, then the gate math (the products from GEMMs rather than the
 * recurrence's MMAs: equal to FP32 rounding, not bit for bit). */
static void rebuild_window(lane_ctx *c, int l, int k, int j)
{
    cc_executor *ex = c->ex;
    const cc_layout *lay = &ex->lay;
    const int D = c->D, T = c->T, B = c->B, C = c->g->rc_window;
    cudaStream_t s = c->ln->stream;
    gpu_matmul_ctx *gm = c->ln->gemm;
    const gru_layer gl = rc_layer(c, l, j);
    float *gates = gl.gates, *ghn = gl.ghn;
    const uint16_t *a16 = layer_a16(c, l) + (size_t)k * C * D, *hp = layer_hprev16(c, l) + (size_t)k * C * D;
    const uint16_t *whh = P16(ex, lay->gru_whh[l]);
    gpu_matmul_rows(gm, gates, 3 * D, C, a16, D, T, P16(ex, lay->gru_wih[l]), D, 1, B, C, 3 * D, D, 0.f,
                    P32(ex, lay->gru_bih[l]), s);
    gpu_matmul_rows(gm, gates, 3 * D, C, hp, D, T, whh, D, 1, B, C, 2 * D, D, 1.f, NULL, s);
    gpu_matmul_rows(gm, ghn, D, C, hp, D, T, whh + (size_t)2 * D * D, D, 1, B, C, D, D, 0.f, NULL, s);
    launch_gru_cell_rebuild(gates, ghn, P32(ex, lay->gru_bhh[l]), B * C, D, s);
    lane_check(c, "gru_rebuild", "gates", l, gates, (size_t)3 * B * C * D, 0, 3 * D);
}

/* Window k's weight gradients on the side stream (buffer j; nparts: the
 * cluster BPTT's bias sums, added with the last window to run, k = 0). */
static void window_weight_grads(lane_ctx *c, int l, int k, int j, int nparts)
{
    const cc_layout *lay = &c->ex->lay;
    gpu_lane *ln = c->ln;
    const int D = c->D, T = c->T, B = c->B, C = c->g->rc_window;
    cudaStream_t side = ln->wgrad_stream;
    side_stream_after(ln);
    gpu_trace_point(GPU_MAX_LANES + ln->index, side);
    gru_layer gl = rc_layer(c, l, j);
    const gru_grads gg = rc_grads(c, l, j, k);
    /* the window's rows of a16 and h_{t-1}, contiguous, where its ghn was (spent with its BPTT) */
    uint16_t *a16w = (uint16_t *)gl.ghn, *hpw = a16w + (size_t)B * C * D;
    const size_t row = sizeof(uint16_t) * (size_t)D, off = (size_t)k * C * D;
    cudaCheck(cudaMemcpy2DAsync(a16w, row * C, layer_a16(c, l) + off, row * T, row * C, B, cudaMemcpyDeviceToDevice, side));
    cudaCheck(cudaMemcpy2DAsync(hpw, row * C, layer_hprev16(c, l) + off, row * T, row * C, B, cudaMemcpyDeviceToDevice,
                                side));
    gl.hprev16 = hpw;
    gpu_gru_weight_grads(ln->gemm_wgrad, &gl, &gg, nparts > 0 && k > 0 ? -1 : nparts, rc_shape(c, k), side);
    gpu_matmul_dw(ln->gemm_wgrad, G32L(c, lay->gru_wih[l]), gg.dgx16, a16w, B * C, 3 * D, D, side);
    record_ev(ln->ev_wfree[j], side);
    gpu_trace_point(GPU_MAX_LANES + ln->index, side);
}

void rc_backward_layer(lane_ctx *c, int l, float clamp_limit)
{
    cc_executor *ex = c->ex;
    gpu_impl *g = c->g;
    gpu_lane *ln = c->ln;
    const cc_layout *lay = &ex->lay;
    const int D = c->D, T = c->T, B = c->B, C = g->rc_window, nw = rc_windows(c);
    cudaStream_t s = ln->stream, rec = ln->rec_stream;
    float *du = ROWS(c, g->du, D), *dtmp = ROWS(c, g->dtmp, D);
    const float *ul = ROWS(c, g->u, D);
    /* the layer above's weight GEMMs read the window buffers, a16 and hprev16 */
    if (l + 1 < c->L) wait_ev(s, ln->ev_wgrad[(l + 1) & 1]);
    rebuild_u(c, l);
    rebuild_operands(c, l);
    float *planted = plant_begin(c, l, du, s);
    const int planted_k = planted ? ex->plant_grad_h.t / C : -1;
    rebuild_window(c, l, nw - 1, (nw - 1) & 1);
    record_ev(ln->ev_wfeed[(nw - 1) & 1], s);
    int nparts = 0;
    for (int k = nw - 1; k >= 0; k--) {
        const int j = k & 1;
        const gru_layer gl = rc_layer(c, l, j);
        const gru_grads gg = rc_grads(c, l, j, k);
        wait_ev(rec, ln->ev_wfeed[j]);
        gpu_trace_point(ln->index, rec);
        nparts = gpu_gru_bptt(ln->rec_gemm[0], &g->rec_caps, g->gru_path, &gl, &gg, rc_shape(c, k), clamp_limit, rec);
        gpu_trace_point(ln->index, rec);
        record_ev(ln->ev_wrec[j], rec);
        if (k > 0) { /* the window before, rebuilt beside this BPTT once window k+1's weight GEMMs are done */
            if (k + 1 < nw) wait_ev(s, ln->ev_wfree[j ^ 1]);
            rebuild_window(c, l, k - 1, j ^ 1);
            record_ev(ln->ev_wfeed[j ^ 1], s);
        }
        wait_ev(s, ln->ev_wrec[j]);
        if (k == planted_k) /* the residual path keeps its value */
            cudaCheck(cudaMemcpyAsync(planted, g->plant_slot + 1, sizeof(float), cudaMemcpyDeviceToDevice, s));
        lane_check(c, "gru_backward", "dgx", l, gg.dgx16, (size_t)3 * B * C * D, 1, 3 * D);
        /* the input gradient and norm backward on the window's rows, on the critical path */
        const size_t at = (size_t)k * C;
        const row_window rw = { C, T };
        gpu_matmul_rows(ln->gemm, dtmp + at * D, D, T, gg.dgx16, 3 * D, C, P16(ex, lay->gru_wih[l]), D, 0, B, C, D,
                        3 * D, 0.f, NULL, s);
        launch_rmsnorm_backward(du + at * D, G32L(c, lay->gru_norm[l]), dtmp + at * D, ul + at * D,
                                P32(ex, lay->gru_norm[l]), LROWS(c, g->a_ir, l, 1) + at, B * C, D, rw, &c->nc, &g->caps,
                                s);
        window_weight_grads(c, l, k, j, nparts);
    }
    lane_mark(c, PH_BPTT);
    lane_check(c, "rmsnorm_backward", "du", l, du, (size_t)c->M * D, 0, D);
    record_ev(ln->ev_wgrad[l & 1], ln->wgrad_stream);
    if (l == 0) lane_embedding_backward(c);
}
