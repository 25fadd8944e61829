/* gru_cell (GRU gates): one cell step, forward and backward, the GPU's
 * kernels/gru_cell.cu against the CPU's src/cpu/gru_cell.c. Both keep one
 * contract (include/catchat/kernels.h, cpu_ref_api.inc): the element-wise
 * step t of a layer's [B,T,·] tensors given W_hh·h_{t-1}, with the grad_h
 * clamp; so both run on the same arrays, compared as they are. The W_hh
 * products are the layer's, checked with it (gru_forward, gru_backward).
 * Also recompute's element-wise rebuild of a window (rebuild_check). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/cpu_ref.h"
#include "catchat/kernels.h"
#include "catchat/safetensors.h"
#include "catchat/util.h"
#include "ladder/ladder.h"

/* An output tensor [B,T,width] for step t: NaN at the step's rows (the GPU's
 * copy is poisoned there, and the CPU overwrites them), zeros elsewhere, which
 * both sides must leave alone. */
static float *step_output(int B, int T, int t, int width)
{
    float *v = cc_calloc((size_t)B * T * width, 4);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < width; i++) v[((size_t)b * T + t) * width + i] = NAN;
    return v;
}

/* Recompute's element-wise rebuild of a window (op_regate in
 * src/gpu/ops_layer_gpu.c) at width D: the gate pass (launch_gru_cell_rebuild)
 * against the CPU's forward cell given the same products (gx with W_hh·h's r
 * and z rows added in, gh holding only W_hn·h, h_{t-1} unused), and FP16
 * h_{t-1} rows of a time window (launch_f32_to_f16_rows) bit for bit against
 * the host's conversion, nothing written past the window's buffer. D = 64
 * takes the kernels' 16-byte paths, D = 66 their scalar ones. */
static void rebuild_check(const ladder_ctx *cx, stage *st, int D)
{
    cc_rng *r = cx->rng;
    const int B = 5, T = 9, C = 4, t0 = 3, M = B * C; /* every sequence's steps t0 .. t0 + C - 1 */
    float *prod = rand_vec(r, (size_t)M * 3 * D, 1, 0), *hn = rand_vec(r, (size_t)M * D, 1, 0);
    float *bhh = rand_vec(r, 3 * D, 1.0 / sqrt(D), 0);
    float *d_prod = dev_f32(prod, (size_t)M * 3 * D), *d_hn = dev_f32(hn, (size_t)M * D), *d_bhh = dev_f32(bhh, 3 * D);
    launch_gru_cell_rebuild(d_prod, d_hn, d_bhh, M, D, 0);
    float *gh = cc_calloc((size_t)M * 3 * D, 4), *h = cc_calloc((size_t)M * D, 4);
    float *gates = cc_malloc(12 * (size_t)M * D), *ghn = cc_malloc(4 * (size_t)M * D);
    for (int m = 0; m < M; m++) memcpy(gh + ((size_t)m * 3 + 2) * D, hn + (size_t)m * D, 4 * (size_t)D);
    cpu_gru_cell_forward(h, gates, ghn, prod, gh, bhh, M, 1, D, 0);
    float *g_gates = get_f32(d_prod, (size_t)M * 3 * D), *g_ghn = get_f32(d_hn, (size_t)M * D);
    char what[96];
    snprintf(what, sizeof(what), "rebuild: gates from their products (D=%d)", D);
    check(st, what, g_gates, gates, (size_t)M * 3 * D, 1e-5, 0);
    snprintf(what, sizeof(what), "rebuild: ghn (D=%d)", D);
    check(st, what, g_ghn, ghn, (size_t)M * D, 1e-5, 0);
    /* h_{t-1} rows: rows t0 - 1 .. t0 + C - 2 of each sequence's h into the window buffer, one row of guard after it */
    const size_t WD = (size_t)M * D;
    float *hl = rand_vec(r, (size_t)B * T * D, 1, 0), *guard = cc_malloc(4 * (WD + D));
    for (size_t i = 0; i < WD + D; i++) guard[i] = 7.f;
    void *d_win = dev_f16(guard, WD + D);
    float *d_hl = dev_f32(hl, (size_t)B * T * D);
    const row_window rw = { C, T, C };
    launch_f32_to_f16_rows(d_win, d_hl + (size_t)(t0 - 1) * D, M, D, rw, 0);
    float *g_win = get_f16(d_win, WD + D);
    size_t wrong = 0;
    for (int b = 0; b < B; b++)
        for (int k = 0; k < C; k++)
            for (int u = 0; u < D; u++) {
                const float want = cc_half_to_float(cc_float_to_half(hl[((size_t)b * T + t0 - 1 + k) * D + u]));
                wrong += memcmp(&g_win[((size_t)b * C + k) * D + u], &want, 4) != 0;
            }
    for (size_t i = WD; i < WD + D; i++) wrong += g_win[i] != 7.f;
    snprintf(what, sizeof(what), "rebuild: FP16 h_{t-1} rows bit for bit, none past the window (D=%d): %zu differ", D,
             wrong);
    check_flag(st, what, wrong == 0);
    FREE_ALL(prod, hn, bhh, gh, h, gates, ghn, g_gates, g_ghn, hl, guard, g_win);
    DFREE_ALL(d_prod, d_hn, d_bhh, d_win, d_hl);
}

static void run_gru_cell(const ladder_ctx *cx, stage *st)
{
    cc_rng *r = cx->rng;
    const int B = 16, D = 64, T = 2, t = 1; /* step 1 reads h_{t-1} from row 0 */
    const size_t MD = (size_t)B * T * D, BD = (size_t)B * D;
    const float lim = 1.f; /* binds for about a third of g = dh_in + dhrec */
    snprintf(st->shape, sizeof(st->shape), "B=%d D=%d, one step given W_hh*h, clamp %g; the rebuild at D=64, 66", B, D,
             lim);
    /* inputs: h_{t-1} in h's row 0 (row 1 is the output), gx, gh = W_hh·h_{t-1}, b_hh; dh_in, dhrec */
    float *h = step_output(B, T, t, D);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < D; i++) h[(size_t)b * T * D + i] = (float)(0.5 * cc_rng_normal(r));
    float *gx = rand_vec(r, 3 * MD, 1, 0), *gh = rand_vec(r, 3 * BD, 1, 0), *bhh = rand_vec(r, 3 * D, 1.0 / sqrt(D), 0);
    float *dh_in = rand_vec(r, MD, 1, 0), *dhrec = rand_vec(r, BD, 0.5, 0);
    float *gates = step_output(B, T, t, 3 * D), *ghn = step_output(B, T, t, D);
    float *dgx = step_output(B, T, t, 3 * D), *dgh = step_output(B, T, t, 3 * D);
    /* the GPU's copies, before the CPU writes its outputs into the same arrays */
    float *d_h = dev_f32(h, MD), *d_gx = dev_f32(gx, 3 * MD), *d_gh = dev_f32(gh, 3 * BD), *d_bhh = dev_f32(bhh, 3 * D);
    float *d_gates = dev_f32(gates, 3 * MD), *d_ghn = dev_f32(ghn, MD), *d_dh_in = dev_f32(dh_in, MD);
    float *d_dhrec = dev_f32(dhrec, BD);
    void *d_hp16 = dev_f16(NULL, MD), *d_dgx16 = dev_f16(dgx, 3 * MD), *d_dgh16 = dev_f16(dgh, 3 * MD);
    const gru_layer L = { .gx = d_gx, .bhh = d_bhh, .h = d_h, .gates = d_gates, .ghn = d_ghn, .hprev16 = d_hp16,
                          .gh = d_gh };
    const gru_grads G = { .dh_in = d_dh_in, .dgx16 = d_dgx16, .dgh16 = d_dgh16, .dhrec = d_dhrec };
    const gru_shape sh = { B, T, D, 0, T, 0, 0 };
    launch_gru_cell_forward(&L, sh, t, 0);
    launch_gru_cell_backward(&L, &G, sh, t, lim, 0);
    /* the CPU, and once without the clamp, to show that it binds */
    float *dhrec_free = cc_malloc(4 * BD), *dgx_free = cc_calloc(3 * MD, 4);
    memcpy(dhrec_free, dhrec, 4 * BD);
    cpu_gru_cell_forward(h, gates, ghn, gx, gh, bhh, B, T, D, t);
    cpu_gru_cell_backward(dgx, dgh, dhrec, dh_in, h, gates, ghn, B, T, D, t, lim);
    cpu_gru_cell_backward(dgx_free, NULL, dhrec_free, dh_in, h, gates, ghn, B, T, D, t, 0);
    double diff = 0, nrm = 0;
    for (size_t i = 0; i < BD; i++) {
        diff += ((double)dhrec[i] - dhrec_free[i]) * ((double)dhrec[i] - dhrec_free[i]);
        nrm += (double)dhrec_free[i] * dhrec_free[i];
    }
    check_flag(st, "the clamp binds (moves dhrec by more than 1%)", sqrt(diff / nrm) > 1e-2);
    float *g_h = get_f32(d_h, MD), *g_gates = get_f32(d_gates, 3 * MD), *g_ghn = get_f32(d_ghn, MD);
    float *g_dgx = get_f16(d_dgx16, 3 * MD), *g_dgh = get_f16(d_dgh16, 3 * MD), *g_dhrec = get_f32(d_dhrec, BD);
    /* forward: the same FP32 operands; __expf and the device tanhf against the host's */
    check(st, "h", g_h, h, MD, 1e-5, 0);
    check(st, "gates", g_gates, gates, 3 * MD, 1e-5, 0);
    check(st, "ghn", g_ghn, ghn, MD, 1e-5, 0);
    /* backward: the gate gradients are stored in FP16 (rel. 2^-11), dhrec = z*g in FP32 */
    check(st, "dgx", g_dgx, dgx, 3 * MD, 1e-3, 0);
    check(st, "dgh", g_dgh, dgh, 3 * MD, 1e-3, 0);
    check(st, "dhrec", g_dhrec, dhrec, BD, 1e-5, 0);
    FREE_ALL(h, gx, gh, bhh, dh_in, dhrec, gates, ghn, dgx, dgh, dhrec_free, dgx_free, g_h, g_gates, g_ghn, g_dgx,
             g_dgh, g_dhrec);
    DFREE_ALL(d_h, d_gx, d_gh, d_bhh, d_gates, d_ghn, d_dh_in, d_dhrec, d_hp16, d_dgx16, d_dgh16);
    rebuild_check(cx, st, 64);
    rebuild_check(cx, st, 66);
}

const ladder_stage ladder_stage_gru_cell = { "gru_cell", "GRU gates", run_gru_cell };
