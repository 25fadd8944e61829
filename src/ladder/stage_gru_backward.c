/* gru_backward (GRU BPTT): a whole layer backward on every recurrence
 * implementation (the cases of gru_forward), with loss_scale = 128 and a
 * grad_h clamp that binds, against the CPU reference; the GPU's unscaled
 * gradients at S = 128 against S = 1; a NaN in the incoming gradient carried
 * exactly as the CPU carries it, through the clamp; and the stress cases of
 * gru_forward (cluster kernels with random delays, a refused persistent
 * launch), gru_cases.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/cpu_ref.h"
#include "catchat/gpu_gru.h"
#include "catchat/util.h"
#include "ladder/ladder.h"

/* GPU BPTT on the CPU forward's states; returns host dgx, dW_hh, db_hh.
 * chunk > 0: the recurrence in windows of that many steps, the last window
 * first (the wavefront's launches), then the weight gradients once. */
static void gpu_bptt(const ladder_ctx *cx, gpu_scratch *sc, gpu_gru_path gpath, const gru_case *c, const float *dh_in,
                     float clamp_limit, int chunk, float **dgx_out, float **dw_out, float **db_out)
{
    gpu_matmul_ctx *gm = cx->gemm;
    const gpu_caps *caps = cx->caps;
    const int B = c->B, T = c->T, D = c->D;
    const size_t MD = (size_t)B * T * D;
    float *hp = cc_calloc(MD, 4);
    for (int b = 0; b < B; b++)
        for (int t = 1; t < T; t++) memcpy(hp + ((size_t)b * T + t) * D, c->h + ((size_t)b * T + t - 1) * D, 4 * D);
    void *whh16 = dev_f16(c->whh, (size_t)3 * D * D), *hp16 = dev_f16(hp, MD);
    float *h = dev_f32(c->h, MD), *gates = dev_f32(c->gates, 3 * MD), *ghn = dev_f32(c->ghn, MD);
    float *dh = dev_f32(dh_in, MD), *dhrec = dev_f32(NULL, (size_t)B * D);
    float *bias_part = dev_f32(NULL, gpu_gru_bias_part_floats(B, D));
    void *dgx16 = dev_f16(NULL, 3 * MD), *dgh16 = dev_f16(NULL, 3 * MD);
    float *dw = dev_f32(NULL, (size_t)3 * D * D), *db = dev_f32(NULL, 3 * D);
    cudaCheck(cudaMemset(dw, 0, 12 * (size_t)D * D));
    cudaCheck(cudaMemset(db, 0, 12 * (size_t)D));
    /* the forward's states as the CPU left them; gx and b_hh are the forward's only */
    const gru_layer L = { .whh16 = whh16, .h = h, .gates = gates, .ghn = ghn, .hprev16 = hp16 };
    const gru_grads G = { .dh_in = dh, .dgx16 = dgx16, .dgh16 = dgh16, .dhrec = dhrec, .bias_part = bias_part,
                          .dwhh = dw, .dbhh = db };
    const gru_shape sh = { B, T, D, 0, T, 0, 0 };
    if (chunk <= 0) {
        gpu_gru_backward(gm, caps, cx->gru, gpath, &L, &G, sh, clamp_limit, sc, 0);
    } else {
        int nparts = 0;
        for (int t0 = (T - 1) / chunk * chunk; t0 >= 0; t0 -= chunk) {
            gru_shape w = sh;
            w.t0 = t0;
            w.t1 = t0 + chunk < T ? t0 + chunk : T;
            nparts = gpu_gru_bptt(gm, caps, cx->gru, gpath, &L, &G, w, clamp_limit, sc, 0);
        }
        gpu_gru_weight_grads(gm, &L, &G, nparts, sh, sc, 0);
    }
    *dgx_out = get_f16(dgx16, 3 * MD);
    *dw_out = get_f32(dw, (size_t)3 * D * D);
    *db_out = get_f32(db, 3 * D);
    free(hp);
    DFREE_ALL(whh16, hp16, h, gates, ghn, dh, dhrec, bias_part, dgx16, dgh16, dw, db);
}

/* The BPTT in windows of `chunk` steps with buffers of their own, as
 * recompute runs it (src/gpu/ops_layer_gpu.c): each window's gates and ghn
 * copied into [B, chunk, ·] buffers, its gate gradients into one of two
 * [B, chunk, 3D] pairs by turns (the persistent BPTT's first step reads the
 * window after's dgh there), its weight gradients from them and a copy of its
 * h_{t-1} rows. Returns host dgx (the windows' rows put back in place), dW_hh
 * and db_hh. */
static void gpu_bptt_own_buffers(const ladder_ctx *cx, gpu_scratch *sc, gpu_gru_path gpath, const gru_case *c,
                                 const float *dh_in, float clamp_limit, int chunk, float **dgx_out, float **dw_out,
                                 float **db_out)
{
    gpu_matmul_ctx *gm = cx->gemm;
    const gpu_caps *caps = cx->caps;
    const int B = c->B, T = c->T, D = c->D;
    const size_t MD = (size_t)B * T * D, WD = (size_t)B * chunk * D;
    float *hp = cc_calloc(MD, 4), *wbuf = cc_calloc(12 * WD, 1), *dgx = cc_malloc(12 * MD);
    for (int b = 0; b < B; b++)
        for (int t = 1; t < T; t++) memcpy(hp + ((size_t)b * T + t) * D, c->h + ((size_t)b * T + t - 1) * D, 4 * D);
    void *whh16 = dev_f16(c->whh, (size_t)3 * D * D);
    float *h = dev_f32(c->h, MD), *gates = dev_f32(NULL, 3 * WD), *ghn = dev_f32(NULL, WD);
    float *dh = dev_f32(dh_in, MD), *dhrec = dev_f32(NULL, (size_t)B * D);
    float *bias_part = dev_f32(NULL, gpu_gru_bias_part_floats(B, D));
    void *dgx16[2] = { dev_f16(NULL, 3 * WD), dev_f16(NULL, 3 * WD) }, *dgh16[2] = { dev_f16(NULL, 3 * WD), dev_f16(NULL, 3 * WD) };
    void *hpw = dev_f16(NULL, WD);
    float *dw = dev_f32(NULL, (size_t)3 * D * D), *db = dev_f32(NULL, 3 * D);
    cudaCheck(cudaMemset(dw, 0, 12 * (size_t)D * D));
    cudaCheck(cudaMemset(db, 0, 12 * (size_t)D));
    const int nw = (T + chunk - 1) / chunk;
    for (int k = nw - 1; k >= 0; k--) {
        const int j = k & 1, t0 = k * chunk, len = t0 + chunk < T ? chunk : T - t0;
        /* rows past a short window's end stay zero: its weight GEMMs run over all B·chunk rows */
        memset(wbuf, 0, 12 * WD);
        for (int b = 0; b < B; b++)
            memcpy(wbuf + (size_t)b * chunk * 3 * D, c->gates + ((size_t)b * T + t0) * 3 * D, 12 * (size_t)len * D);
        cudaCheck(cudaMemcpy(gates, wbuf, 12 * WD, cudaMemcpyHostToDevice));
        memset(wbuf, 0, 4 * WD);
        for (int b = 0; b < B; b++)
            memcpy(wbuf + (size_t)b * chunk * D, c->ghn + ((size_t)b * T + t0) * D, 4 * (size_t)len * D);
        cudaCheck(cudaMemcpy(ghn, wbuf, 4 * WD, cudaMemcpyHostToDevice));
        memset(wbuf, 0, 4 * WD);
        for (int b = 0; b < B; b++)
            memcpy(wbuf + (size_t)b * chunk * D, hp + ((size_t)b * T + t0) * D, 4 * (size_t)len * D);
        void *hp16 = dev_f16(wbuf, WD);
        cudaCheck(cudaMemcpy(hpw, hp16, 2 * WD, cudaMemcpyDeviceToDevice));
        cudaCheck(cudaMemset(dgx16[j], 0, 6 * WD));
        cudaCheck(cudaMemset(dgh16[j], 0, 6 * WD));
        const gru_layer L = { .whh16 = whh16, .h = h, .gates = gates, .ghn = ghn, .hprev16 = hpw };
        const gru_grads G = { .dh_in = dh, .dgx16 = dgx16[j], .dgh16 = dgh16[j], .dgh16_next = k + 1 < nw ? dgh16[j ^ 1] : NULL,
                              .dhrec = dhrec, .bias_part = bias_part, .dwhh = dw, .dbhh = db };
        const gru_shape w = { B, T, D, t0, t0 + len, t0, chunk };
        const int nparts = gpu_gru_bptt(gm, caps, cx->gru, gpath, &L, &G, w, clamp_limit, sc, 0);
        gpu_gru_weight_grads(gm, &L, &G, nparts > 0 && k > 0 ? -1 : nparts, w, sc, 0);
        float *got = get_f16(dgx16[j], 3 * WD);
        for (int b = 0; b < B; b++)
            memcpy(dgx + ((size_t)b * T + t0) * 3 * D, got + (size_t)b * chunk * 3 * D, 12 * (size_t)len * D);
        free(got);
        DFREE_ALL(hp16);
    }
    *dgx_out = dgx;
    *dw_out = get_f32(dw, (size_t)3 * D * D);
    *db_out = get_f32(db, 3 * D);
    FREE_ALL(hp, wbuf);
    DFREE_ALL(whh16, h, gates, ghn, dh, dhrec, bias_part, dgx16[0], dgx16[1], dgh16[0], dgh16[1], hpw, dw, db);
}

void gru_backward_check(const ladder_ctx *cx, stage *st, gpu_gru_path gpath, int B, int T, int D, int chunk,
                        const char *path)
{
    cc_rng *r = cx->rng;
    const double S = 128, c_user = 0.05;
    gru_case c;
    gru_case_init(&c, r, B, T, D);
    const size_t MD = (size_t)B * T * D;
    float *dh1 = rand_vec(r, MD, 0.03, 0), *dhS = cc_malloc(4 * MD);
    for (size_t i = 0; i < MD; i++) dhS[i] = (float)(dh1[i] * S);
    /* CPU reference at S (the clamp limit c·S), and unclamped to show it binds */
    float *rdgx = cc_malloc(12 * MD), *rdw = cc_calloc((size_t)3 * D * D, 4), *rdb = cc_calloc(3 * D, 4);
    float *fdgx = cc_malloc(12 * MD), *fdw = cc_calloc((size_t)3 * D * D, 4), *fdb = cc_calloc(3 * D, 4);
    cpu_gru_backward(rdgx, rdw, rdb, dhS, c.h, c.gates, c.ghn, c.whh, B, T, D, c_user * S, c.scratch);
    cpu_gru_backward(fdgx, fdw, fdb, dhS, c.h, c.gates, c.ghn, c.whh, B, T, D, 0, c.scratch);
    double diff = 0, nrm = 0;
    for (size_t i = 0; i < (size_t)3 * D * D; i++) {
        diff += ((double)rdw[i] - fdw[i]) * ((double)rdw[i] - fdw[i]);
        nrm += (double)fdw[i] * fdw[i];
    }
    snprintf(st->shape, sizeof(st->shape), "the shapes of gru_forward, S=128, the clamp moves dW_hh %.0f%% at D=%d",
             100 * sqrt(diff / nrm), D);
    char what[128];
    snprintf(what, sizeof(what), "clamp binds (%s shape)", path);
    check_flag(st, what, sqrt(diff / nrm) > 1e-2);
    float *gdgx, *gdw, *gdb, *g1dgx, *g1dw, *g1db;
    gpu_scratch *sc = gru_scratch(cx, gpath, B, T, D);
    gpu_bptt(cx, sc, gpath, &c, dhS, (float)(c_user * S), 0, &gdgx, &gdw, &gdb);
    /* FP16 gate gradients feed T recurrent GEMMs: 1e-2 */
    snprintf(what, sizeof(what), "dgx (%s)", path);
    check(st, what, gdgx, rdgx, 3 * MD, 1e-2, 0);
    snprintf(what, sizeof(what), "dW_hh (%s)", path);
    check(st, what, gdw, rdw, (size_t)3 * D * D, 1e-2, 0);
    snprintf(what, sizeof(what), "db_hh (%s)", path);
    check(st, what, gdb, rdb, 3 * D, 1e-2, 0);
    /* The same clamp at S = 1 must give the same unscaled gradients. */
    gpu_bptt(cx, sc, gpath, &c, dh1, (float)c_user, 0, &g1dgx, &g1dw, &g1db);
    if (chunk > 0) { /* in windows: the gate gradients and dW_hh bit for bit; the cluster's bias sums add up by window */
        float *wdgx, *wdw, *wdb;
        gpu_bptt(cx, sc, gpath, &c, dhS, (float)(c_user * S), chunk, &wdgx, &wdw, &wdb);
        snprintf(what, sizeof(what), "in windows of %d steps: dgx and dW_hh bit for bit the whole launch's (%s)", chunk,
                 path);
        check_flag(st, what, memcmp(wdgx, gdgx, 12 * MD) == 0 && memcmp(wdw, gdw, 12 * (size_t)D * D) == 0);
        snprintf(what, sizeof(what), "db_hh in windows of %d (%s)", chunk, path);
        check(st, what, wdb, rdb, 3 * D, 1e-2, 0);
        FREE_ALL(wdgx, wdw, wdb);
        /* with buffers of their own: dgx bit for bit; the weight gradients a GEMM a window */
        gpu_bptt_own_buffers(cx, sc, gpath, &c, dhS, (float)(c_user * S), chunk, &wdgx, &wdw, &wdb);
        snprintf(what, sizeof(what), "windows of %d steps with their own buffers: dgx bit for bit the whole launch's (%s)",
                 chunk, path);
        check_flag(st, what, memcmp(wdgx, gdgx, 12 * MD) == 0);
        snprintf(what, sizeof(what), "dW_hh, windows with their own buffers (%s)", path);
        check(st, what, wdw, rdw, (size_t)3 * D * D, 1e-2, 0);
        snprintf(what, sizeof(what), "db_hh, windows with their own buffers (%s)", path);
        check(st, what, wdb, rdb, 3 * D, 1e-2, 0);
        FREE_ALL(wdgx, wdw, wdb);
    }
    for (size_t i = 0; i < (size_t)3 * D * D; i++) gdw[i] = (float)(gdw[i] / S);
    snprintf(what, sizeof(what), "dW_hh S=128 vs S=1 (%s)", path);
    check(st, what, gdw, g1dw, (size_t)3 * D * D, 1e-2, 0);
    FREE_ALL(dh1, dhS, rdgx, rdw, rdb, fdgx, fdw, fdb, gdgx, gdw, gdb, g1dgx, g1dw, g1db);
    gpu_scratch_destroy(sc); /* gpu_bptt's read-backs synchronised the device */
    gru_case_free(&c);
}

/* A NaN in the incoming hidden-state gradient at one (b, t, unit), with the
 * clamp on (as an inf − inf inside W_hhᵀ·dgh makes one): the recurrence must
 * carry it to every earlier step of that sequence and into dW_hh exactly as
 * the CPU does, or the non-finite guard would let the step through (a clamp
 * written fminf(fmaxf(g, -L), L) turns a NaN into -L). Elements both sides
 * keep finite are compared as in gru_backward_check. */
static void gru_backward_nan_check(const ladder_ctx *cx, stage *st, gpu_gru_path gpath, int B, int T, int D,
                                   const char *path)
{
    const double S = 128, c_user = 0.05;
    gru_case c;
    gru_case_init(&c, cx->rng, B, T, D);
    const size_t MD = (size_t)B * T * D;
    float *dh = rand_vec(cx->rng, MD, 0.03 * S, 0);
    dh[((size_t)(B / 2) * T + T / 2) * D + D / 3] = NAN;
    float *rdgx = cc_malloc(12 * MD), *rdw = cc_calloc((size_t)3 * D * D, 4), *rdb = cc_calloc(3 * D, 4);
    cpu_gru_backward(rdgx, rdw, rdb, dh, c.h, c.gates, c.ghn, c.whh, B, T, D, c_user * S, c.scratch);
    float *gdgx, *gdw, *gdb;
    gpu_scratch *sc = gru_scratch(cx, gpath, B, T, D);
    gpu_bptt(cx, sc, gpath, &c, dh, (float)(c_user * S), 0, &gdgx, &gdw, &gdb);
    gpu_scratch_destroy(sc);
    size_t differ = 0, bad = 0, kept = 0;
    float *gk = cc_malloc(12 * MD), *rk = cc_malloc(12 * MD);
    for (size_t i = 0; i < 3 * MD; i++) {
        const int gf = isfinite(gdgx[i]), rf = isfinite(rdgx[i]);
        differ += gf != rf;
        bad += !rf;
        if (gf && rf) {
            gk[kept] = gdgx[i];
            rk[kept++] = rdgx[i];
        }
    }
    size_t wbad_g = 0, wbad_r = 0;
    for (size_t i = 0; i < (size_t)3 * D * D; i++) {
        wbad_g += !isfinite(gdw[i]);
        wbad_r += !isfinite(rdw[i]);
    }
    char what[160];
    snprintf(what, sizeof(what), "NaN in dh: non-finite dgx where the CPU's is (%s): %zu of %zu differ", path, differ,
             bad);
    check_flag(st, what, bad > 0 && differ == 0);
    snprintf(what, sizeof(what), "NaN in dh: dW_hh non-finite on both (%s)", path);
    check_flag(st, what, wbad_g > 0 && wbad_r > 0);
    snprintf(what, sizeof(what), "dgx beside the NaN (%s)", path);
    check(st, what, gk, rk, kept, 1e-2, 0);
    FREE_ALL(dh, rdgx, rdw, rdb, gdgx, gdw, gdb, gk, rk);
    gru_case_free(&c);
}

static void bptt_case(const ladder_ctx *cx, stage *st, const gru_path_case *pc, const char *name)
{
    gru_backward_check(cx, st, pc->path, pc->B, pc->T, pc->D, gru_case_chunk(pc), name);
}

static void run_gru_backward(const ladder_ctx *cx, stage *st)
{
    for (int i = 0; i < N_GRU_PATHS; i++) {
        const gru_path_case *pc = &k_gru_paths[i];
        char name[64];
        if (!gru_path_begin(cx, st, pc, name, sizeof(name))) continue;
        gru_backward_check(cx, st, pc->path, pc->B, pc->T, pc->D, gru_case_chunk(pc), name);
        gru_backward_nan_check(cx, st, pc->path, pc->B, pc->T, pc->D, name);
        gru_path_end(cx);
    }
    gru_stress_cases(cx, st, bptt_case);
}

const ladder_stage ladder_stage_gru_backward = { "gru_backward", "GRU BPTT", run_gru_backward };
