/* gru_cell (GRU gates): one cell step, forward and backward, with its two
 * W_hh GEMMs, against the CPU reference. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/cpu_ref.h"
#include "catchat/kernels.h"
#include "catchat/util.h"
#include "ladder/ladder.h"

static void run_gru_cell(const ladder_ctx *cx, stage *st)
{
    cc_rng *r = cx->rng;
    gpu_matmul_ctx *gm = cx->gemm;
    const int B = 16, D = 64, T = 2; /* the step is t = 1; t = 0 holds h_{t-1} */
    snprintf(st->shape, sizeof(st->shape), "B=%d D=%d, one step", B, D);
    const double ws = 1.0 / sqrt(D);
    float *whh = rand_vec(r, (size_t)3 * D * D, ws, 1), *bhh = rand_vec(r, 3 * D, ws, 0);
    float *hprev = rand_vec(r, (size_t)B * D, 0.5, 1), *gx = rand_vec(r, (size_t)B * 3 * D, 1, 0);
    float *gin = rand_vec(r, (size_t)B * D, 1, 0);
    /* [B,2,·] device layouts */
    float *h2 = cc_calloc((size_t)B * T * D, 4), *gx2 = cc_calloc((size_t)B * T * 3 * D, 4);
    float *dh2 = cc_calloc((size_t)B * T * D, 4), *hp2 = cc_calloc((size_t)B * T * D, 4);
    for (int b = 0; b < B; b++) {
        memcpy(h2 + (size_t)(b * T) * D, hprev + (size_t)b * D, 4 * D);
        memcpy(hp2 + (size_t)(b * T + 1) * D, hprev + (size_t)b * D, 4 * D);
        memcpy(gx2 + (size_t)(b * T + 1) * 3 * D, gx + (size_t)b * 3 * D, 12 * D);
        memcpy(dh2 + (size_t)(b * T + 1) * D, gin + (size_t)b * D, 4 * D);
    }
    void *dwhh16 = dev_f16(whh, (size_t)3 * D * D), *dhp16 = dev_f16(hp2, (size_t)B * T * D);
    float *dbhh = dev_f32(bhh, 3 * D), *dh = dev_f32(h2, (size_t)B * T * D), *dgx = dev_f32(gx2, (size_t)B * T * 3 * D);
    float *dgates = dev_f32(NULL, (size_t)B * T * 3 * D), *dghn = dev_f32(NULL, (size_t)B * T * D);
    float *dgh = dev_f32(NULL, (size_t)B * 3 * D), *ddh = dev_f32(dh2, (size_t)B * T * D);
    void *ddgx16 = dev_f16(NULL, (size_t)B * T * 3 * D), *ddgh16 = dev_f16(NULL, (size_t)B * T * 3 * D);
    float *dhrec = dev_f32(NULL, (size_t)B * D), *ddwhh = dev_f32(NULL, (size_t)3 * D * D);
    cudaCheck(cudaMemset(dhrec, 0, 4 * (size_t)B * D));
    cudaCheck(cudaMemset(ddwhh, 0, 4 * (size_t)3 * D * D));
    uint16_t *hp16 = dhp16;
    gpu_matmul(gm, dgh, 3 * D, hp16 + D, T * D, 0, dwhh16, D, 1, B, 3 * D, D, 1.f, 0.f, NULL, 0);
    launch_gru_cell_forward(dh, dgates, dghn, dhp16, dgx, dgh, dbhh, B, T, D, 1, 0);
    launch_gru_cell_backward(ddgx16, ddgh16, dhrec, ddh, dh, dgates, dghn, B, T, D, 1, 0.f, 0);
    uint16_t *dgh16p = ddgh16;
    gpu_matmul(gm, dhrec, D, dgh16p + 3 * D, T * 3 * D, 0, dwhh16, D, 0, B, D, 3 * D, 1.f, 1.f, NULL, 0);
    gpu_matmul(gm, ddwhh, D, dgh16p + 3 * D, T * 3 * D, 1, hp16 + D, T * D, 0, 3 * D, D, B, 1.f, 1.f, NULL, 0);
    float *gh_all = get_f32(dh, (size_t)B * T * D), *gg_all = get_f32(dgates, (size_t)B * T * 3 * D);
    float *gdgx_all = get_f16(ddgx16, (size_t)B * T * 3 * D), *gdhp = get_f32(dhrec, (size_t)B * D);
    float *gdw = get_f32(ddwhh, (size_t)3 * D * D);
    float *gh1 = cc_malloc(4 * (size_t)B * D), *gg1 = cc_malloc(12 * (size_t)B * D), *gdgx1 = cc_malloc(12 * (size_t)B * D);
    for (int b = 0; b < B; b++) {
        memcpy(gh1 + (size_t)b * D, gh_all + (size_t)(b * T + 1) * D, 4 * D);
        memcpy(gg1 + (size_t)b * 3 * D, gg_all + (size_t)(b * T + 1) * 3 * D, 12 * D);
        memcpy(gdgx1 + (size_t)b * 3 * D, gdgx_all + (size_t)(b * T + 1) * 3 * D, 12 * D);
    }
    float *rh = cc_malloc(4 * (size_t)B * D), *rg = cc_malloc(12 * (size_t)B * D), *rghn = cc_malloc(4 * (size_t)B * D);
    float *scr = cc_malloc(12 * (size_t)B * D), *rdgx = cc_malloc(12 * (size_t)B * D), *rdhp = cc_malloc(4 * (size_t)B * D);
    float *rdw = cc_calloc((size_t)3 * D * D, 4), *rdb = cc_calloc(3 * D, 4);
    cpu_gru_cell_forward(rh, rg, rghn, gx, hprev, whh, bhh, B, D, scr);
    cpu_gru_cell_backward(rdgx, rdhp, rdw, rdb, gin, rg, rghn, hprev, whh, B, D, scr);
    /* forward: FP16-exact operands, FP32 accumulation */
    check(st, "h", gh1, rh, (size_t)B * D, 1e-5, 0);
    check(st, "gates", gg1, rg, (size_t)B * 3 * D, 1e-5, 0);
    /* backward: gate gradients are rounded to FP16 (rel. 2^-11) before their GEMMs */
    check(st, "dgx", gdgx1, rdgx, (size_t)B * 3 * D, 1e-3, 0);
    check(st, "dh_prev", gdhp, rdhp, (size_t)B * D, 2e-3, 0);
    check(st, "dW_hh", gdw, rdw, (size_t)3 * D * D, 2e-3, 0);
    FREE_ALL(whh, bhh, hprev, gx, gin, h2, gx2, dh2, hp2, gh_all, gg_all, gdgx_all, gdhp, gdw, gh1, gg1, gdgx1, rh, rg,
             rghn, scr, rdgx, rdhp, rdw, rdb);
    DFREE_ALL(dwhh16, dhp16, dbhh, dh, dgx, dgates, dghn, dgh, ddh, ddgx16, ddgh16, dhrec, ddwhh);
}

const ladder_stage ladder_stage_gru_cell = { "gru_cell", "GRU gates", run_gru_cell };
