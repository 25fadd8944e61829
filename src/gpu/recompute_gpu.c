/* Recompute ([gpu] recompute, gpu_impl.h): a layer's recurrence over time
 * windows whose normalised input, gx (the gates in place), ghn, FP16
 * h_{t-1}, gate gradients and input gradient live in two buffers of
 * rc_window steps a sequence, taken by turns.
 *
 * Forward, window k: u^l's rows of k made in place from u^{l-1} and
 * h^{l-1} (the residual add) and normalised into buffer k & 1, the input
 * GEMM of k from there, on the lane's stream; then the recurrence of k on
 * the recurrence stream, from the state window k-1 left (h and hprev16
 * stay the layer's), while the lane's stream makes window k+1's input. The
 * gates are dropped.
 *
 * Backward, layer l: u^l for all T (the embedding plus the stored h below,
 * summed in the forward's order: bit for bit the forward's); then from the
 * last window down: the BPTT of k on the recurrence stream (carried into
 * k-1 as the whole-layer launch carries between steps), while the lane's
 * stream rebuilds window k-1 into the other buffer (the norm of its u^l
 * rows, its FP16 h_{t-1} from h, one GEMM of W_ih and two of W_hh, then the
 * cell's gate math) and, once the BPTT of k is done, the input gradient and
 * norm backward of k; k's weight GEMMs go to the side stream, from its
 * buffer's operands. A buffer is rebuilt once the weight GEMMs of the
 * window two before (or of the layer above's last window in it) are done
 * with it. */
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

/* Window k's rows of u^l in the lane's rows of u (full T), and the row window of a window's rows. */
static float *rc_urows(const lane_ctx *c, int k) { return ROWS(c, c->g->u, c->D) + (size_t)k * c->g->rc_window * c->D; }
static row_window rc_rows(const lane_ctx *c)
{
    const row_window rw = { c->g->rc_window, c->T, c->g->rc_window };
    return rw;
}

void rc_forward_windows(lane_ctx *c, int l)
{
    cc_executor *ex = c->ex;
    gpu_impl *g = c->g;
    gpu_lane *ln = c->ln;
    const cc_layout *lay = &ex->lay;
    const int D = c->D, B = c->B, C = g->rc_window, nw = rc_windows(c);
    cudaStream_t s = ln->stream, rec = ln->rec_stream;
    lane_mark(c, PH_INPUT);
    for (int k = 0; k < nw; k++) {
        const int j = k & 1;
        const size_t at = (size_t)k * C;
        if (k >= 2) stream_wait(s, ln->ev_wrec[j]); /* the recurrence of window k-2 is done with the buffer */
        const gru_layer gl = rc_layer(c, l, j);
        uint16_t *a16 = WINROWS(c, g->win_a16[j], D);
        float *ul = rc_urows(c, k);
        /* u^l = u^{l-1} + h^{l-1} on the window's rows (in place), and its norm */
        launch_add_rmsnorm_forward(l > 0 ? ul : NULL, NULL, a16, LROWS(c, g->a_ir, l, 1) + at, ul,
                                   l > 0 ? LROWS(c, g->h, l - 1, D) + at * D : NULL, P32(ex, lay->gru_norm[l]), B * C,
                                   D, rc_rows(c), &c->nc, s);
        lane_check(c, "rmsnorm", "a", l, a16, (size_t)B * C * D, 1, D);
        gpu_matmul_rows(ln->gemm, (float *)gl.gx, 3 * D, C, a16, D, C, P16(ex, lay->gru_wih[l]), D, 1, B, C, 3 * D, D,
                        0.f, P32(ex, lay->gru_bih[l]), s);
        lane_check(c, "input_projection", "gx", l, gl.gx, (size_t)3 * B * C * D, 0, 3 * D);
        event_record(ln->ev_wfeed[j], s);
        stream_wait(rec, ln->ev_wfeed[j]);
        gpu_trace_point(ln->index, rec);
        gpu_gru_forward(ln->rec_gemm[0], &g->rec_caps, &g->gru, g->gru_path, &gl, rc_shape(c, k), g->gru_wide,
                        ln->rec_sc[0], rec);
        gpu_trace_point(ln->index, rec);
        event_record(ln->ev_wrec[j], rec);
    }
    stream_wait(s, ln->ev_wrec[(nw - 1) & 1]); /* and so every window's */
}

/* u^l into u's block, in place: the embedding plus h^0 .. h^{l-1}, in the
 * forward's order. */
static void rebuild_u(lane_ctx *c, int l)
{
    cc_executor *ex = c->ex;
    gpu_impl *g = c->g;
    const size_t MD = (size_t)c->M * c->D;
    cudaStream_t s = c->ln->stream;
    float *ul = ROWS(c, g->u, c->D);
    launch_embedding_forward(ul, ROWS(c, g->x, 1), P32(ex, ex->lay.embed), c->M, c->D, s);
    for (int j = 0; j < l; j++) launch_add(ul, ul, LROWS(c, g->h, j, c->D), MD, s);
}

/* Window k's operands and gates into buffer j, as the forward made them:
 * the normalised input of its u^l rows (their 1/rms again, the same
 * values), FP16 h_{t-1} (h shifted by one row, each sequence's h_{-1} = 0
 * in window 0), gx (with b_ih), W_hh·h_{t-1} added into rows r and z,
 * W_hn·h_{t-1} into ghn, then the gate math (the products from GEMMs rather
 * than the recurrence's MMAs: equal to FP32 rounding, not bit for bit). */
static void rebuild_window(lane_ctx *c, int l, int k, int j)
{
    cc_executor *ex = c->ex;
    gpu_impl *g = c->g;
    const cc_layout *lay = &ex->lay;
    const int D = c->D, B = c->B, C = g->rc_window;
    const size_t at = (size_t)k * C;
    cudaStream_t s = c->ln->stream;
    gpu_matmul_ctx *gm = c->ln->gemm;
    const gru_layer gl = rc_layer(c, l, j);
    float *gates = gl.gates, *ghn = gl.ghn;
    uint16_t *a16 = WINROWS(c, g->win_a16[j], D), *hp = WINROWS(c, g->win_hp16[j], D);
    launch_add_rmsnorm_forward(NULL, NULL, a16, LROWS(c, g->a_ir, l, 1) + at, rc_urows(c, k), NULL,
                               P32(ex, lay->gru_norm[l]), B * C, D, rc_rows(c), &c->nc, s);
    /* h_{t-1} for t in the window: rows at - 1 .. at + C - 2 of h, into rows 0 .. C - 1 */
    const float *hl = LROWS(c, g->h, l, D);
    if (k > 0) {
        launch_f32_to_f16_rows(hp, hl + (at - 1) * D, B * C, D, rc_rows(c), s);
    } else {
        const row_window rw = { C - 1, c->T, C };
        if (C > 1) launch_f32_to_f16_rows(hp + D, hl, B * (C - 1), D, rw, s);
        cudaCheck(cudaMemset2DAsync(hp, sizeof(uint16_t) * (size_t)C * D, 0, sizeof(uint16_t) * D, B, s));
    }
    const uint16_t *whh = P16(ex, lay->gru_whh[l]);
    gpu_matmul_rows(gm, gates, 3 * D, C, a16, D, C, P16(ex, lay->gru_wih[l]), D, 1, B, C, 3 * D, D, 0.f,
                    P32(ex, lay->gru_bih[l]), s);
    gpu_matmul_rows(gm, gates, 3 * D, C, hp, D, C, whh, D, 1, B, C, 2 * D, D, 1.f, NULL, s);
    gpu_matmul_rows(gm, ghn, D, C, hp, D, C, whh + (size_t)2 * D * D, D, 1, B, C, D, D, 0.f, NULL, s);
    launch_gru_cell_rebuild(gates, ghn, P32(ex, lay->gru_bhh[l]), B * C, D, s);
    lane_check(c, "gru_rebuild", "gates", l, gates, (size_t)3 * B * C * D, 0, 3 * D);
}

/* Window k's weight gradients on the side stream (buffer j; nparts: the
 * cluster BPTT's bias sums, added with the last window to run, k = 0). */
static void window_weight_grads(lane_ctx *c, int l, int k, int j, int nparts)
{
    const cc_layout *lay = &c->ex->lay;
    gpu_lane *ln = c->ln;
    const int D = c->D, B = c->B, C = c->g->rc_window;
    cudaStream_t side = ln->wgrad_stream;
    side_stream_after(ln);
    gpu_trace_point(GPU_MAX_LANES + ln->index, side);
    gru_layer gl = rc_layer(c, l, j);
    const gru_grads gg = rc_grads(c, l, j, k);
    gl.hprev16 = WINROWS(c, c->g->win_hp16[j], D);
    gpu_gru_weight_grads(ln->gemm_wgrad, &gl, &gg, nparts > 0 && k > 0 ? -1 : nparts, rc_shape(c, k), ln->wgrad_sc,
                         side);
    gpu_matmul_dw(ln->gemm_wgrad, G32L(c, lay->gru_wih[l]), gg.dgx16, WINROWS(c, c->g->win_a16[j], D), B * C, 3 * D,
                  D, side);
    event_record(ln->ev_wfree[j], side);
    gpu_trace_point(GPU_MAX_LANES + ln->index, side);
}

void rc_backward_layer(lane_ctx *c, int l, float clamp_limit)
{
    cc_executor *ex = c->ex;
    gpu_impl *g = c->g;
    gpu_lane *ln = c->ln;
    const cc_layout *lay = &ex->lay;
    const int D = c->D, B = c->B, C = g->rc_window, nw = rc_windows(c);
    cudaStream_t s = ln->stream, rec = ln->rec_stream;
    float *du = ROWS(c, g->du, D);
    rebuild_u(c, l);
    float *planted = plant_begin(c, l, du, s);
    const int planted_k = planted ? ex->plant_grad_h.t / C : -1;
    /* a buffer is rebuilt once the weight GEMMs that last read it are done: the layer above's
     * (for its last windows, while its first window's still run) or this layer's window k+1's */
    const int above = l + 1 < c->L;
    if (above) stream_wait(s, ln->ev_wfree[(nw - 1) & 1]);
    rebuild_window(c, l, nw - 1, (nw - 1) & 1);
    event_record(ln->ev_wfeed[(nw - 1) & 1], s);
    int nparts = 0;
    for (int k = nw - 1; k >= 0; k--) {
        const int j = k & 1;
        const gru_layer gl = rc_layer(c, l, j);
        const gru_grads gg = rc_grads(c, l, j, k);
        stream_wait(rec, ln->ev_wfeed[j]);
        gpu_trace_point(ln->index, rec);
        /* every window of the layer takes the same path, as the carries differ (the persistent kernels'
         * z*g, the per-step loop's dhrec with W_hh^T dgh): they are one grid, which the runtime admits or
         * refuses by its size (gp_launch), and a refusal sends every later launch of the executor per step too */
        nparts = gpu_gru_bptt(ln->rec_gemm[0], &g->rec_caps, &g->gru, g->gru_path, &gl, &gg, rc_shape(c, k),
                              clamp_limit, ln->rec_sc[0], rec);
        gpu_trace_point(ln->index, rec);
        event_record(ln->ev_wrec[j], rec);
        if (k > 0) { /* the window before, rebuilt beside this BPTT */
            if (k + 1 < nw || above) stream_wait(s, ln->ev_wfree[j ^ 1]);
            rebuild_window(c, l, k - 1, j ^ 1);
            event_record(ln->ev_wfeed[j ^ 1], s);
        }
        stream_wait(s, ln->ev_wrec[j]);
        if (k == planted_k) /* the residual path keeps its value */
            cudaCheck(cudaMemcpyAsync(planted, g->plant_slot + 1, sizeof(float), cudaMemcpyDeviceToDevice, s));
        lane_check(c, "gru_backward", "dgx", l, gg.dgx16, (size_t)3 * B * C * D, 1, 3 * D);
        /* the input gradient and norm backward on the window's rows, on the critical path */
        const size_t at = (size_t)k * C;
        float *dtmp = WINROWS(c, g->win_dtmp[j], D);
        gpu_matmul_rows(ln->gemm, dtmp, D, C, gg.dgx16, 3 * D, C, P16(ex, lay->gru_wih[l]), D, 0, B, C, D, 3 * D, 0.f,
                        NULL, s);
        launch_rmsnorm_backward(du + at * D, G32L(c, lay->gru_norm[l]), dtmp, rc_urows(c, k), P32(ex, lay->gru_norm[l]),
                                LROWS(c, g->a_ir, l, 1) + at, B * C, D, rc_rows(c), &c->nc, &g->caps, ln->sc, s);
        window_weight_grads(c, l, k, j, nparts);
    }
    lane_mark(c, PH_BPTT);
    lane_check(c, "rmsnorm_backward", "du", l, du, (size_t)c->M * D, 0, D);
    event_record(ln->ev_wgrad[l & 1], ln->wgrad_stream);
    if (l == 0) lane_embedding_backward(c);
}
