/* crossentropy (classifier + loss): the GPU's classifier as the step runs it
 * (src/gpu/crossentropy.c: the merge, the final norm, the lm_head GEMM, the
 * softmax cross-entropy and its gradient, dx, dW_lm and the final norm's
 * backward, chunk by chunk of rows) against the CPU reference's merge,
 * cpu_rmsnorm, cpu_matmul and cpu_crossentropy over the whole batch. Cases:
 * the byte vocabulary; a V that is not a multiple of 8; V = 50257 (GPT-2's,
 * padded on the GPU); chunks that cut the rows unevenly; the wavefront's time
 * windows, with chunks of whole segments and chunks inside one. Every 7th
 * target is ignored; the ranks give top-1 and top-5 as the CPU counts them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/cpu_ref.h"
#include "catchat/gpu_crossentropy.h"
#include "catchat/kernels.h"
#include "catchat/safetensors.h"
#include "catchat/util.h"
#include "ladder/ladder.h"

typedef struct {
    int nseq, T, t0, len; /* the rows: steps [t0, t0+len) of nseq sequences of T (len = T: all rows) */
    int D, V, rows;       /* rows: a chunk's */
} ce_case;

static const float CE_SCALE = 128; /* the loss scale S the gradients carry */
static const cc_norm_consts CE_NORM = { 1e-6, 1e-6, 1000.0 };

/* A case's inputs over every row of its [nseq, T] tensors, and the CPU
 * reference's results over the window's rows, one after another. */
typedef struct {
    float *u, *c, *g, *w; /* the streams, the final norm's gain, lm_head [V, D] */
    int *y;               /* targets; every 7th ignored (-1) */
    float *m, *f, *ir;    /* the window's merge, its normed rows (FP16-rounded), their inverse RMS */
    int *yw;              /* the window's targets */
    float *logits, *dlog, *rloss, *df, *rW, *rdg, *rdm;
    cc_score sc;
} ce_ref;

/* What the GPU returned, read back: per-row results over every row (the
 * rows outside the window must stay as poisoned), the weight gradients of
 * the first call and of the second (from the merge itself). */
typedef struct {
    float *loss_all, *dm_all, *W, *dg, *W2, *dg2;
    int *rank_all;
} ce_gpu;

/* The random inputs, drawn from the ladder's RNG in a fixed order (u, c, g,
 * w, y), so a case's numbers depend only on the seed and the stages before. */
static void ce_draw(cc_rng *r, const ce_case *k, ce_ref *ref)
{
    const int D = k->D, V = k->V, Mall = k->nseq * k->T;
    ref->u = rand_vec(r, (size_t)Mall * D, 1, 0);
    ref->c = rand_vec(r, (size_t)Mall * D, 0.5, 0);
    ref->g = rand_vec(r, D, 0.2, 0);
    ref->w = rand_vec(r, (size_t)V * D, 0.3, 1);
    for (int i = 0; i < D; i++) ref->g[i] += 1.f;
    ref->y = cc_malloc(sizeof(int) * Mall);
    for (int i = 0; i < Mall; i++) ref->y[i] = i % 7 == 6 ? -1 : (int)cc_rng_below(r, V);
}

/* The CPU reference: merge, final norm, lm_head, loss and their backward over the window's rows. */
static void ce_cpu(const ce_case *k, ce_ref *ref)
{
    const int D = k->D, V = k->V, M = k->nseq * k->len;
    ref->m = cc_malloc(4 * (size_t)M * D);
    ref->f = cc_malloc(4 * (size_t)M * D);
    ref->ir = cc_malloc(4 * (size_t)M);
    ref->yw = cc_malloc(sizeof(int) * M);
    for (int b = 0, i = 0; b < k->nseq; b++)
        for (int t = k->t0; t < k->t0 + k->len; t++, i++) {
            const size_t src = (size_t)b * k->T + t;
            for (int j = 0; j < D; j++) ref->m[(size_t)i * D + j] = ref->u[src * D + j] + ref->c[src * D + j];
            ref->yw[i] = ref->y[src];
        }
    cpu_rmsnorm_forward(ref->f, ref->ir, ref->m, ref->g, M, D, &CE_NORM);
    /* the GEMM operand is FP16 on the GPU: the CPU takes the same rounded f */
    for (size_t i = 0; i < (size_t)M * D; i++) ref->f[i] = cc_half_to_float(cc_float_to_half(ref->f[i]));
    ref->logits = cc_malloc(4 * (size_t)M * V);
    ref->dlog = cc_malloc(4 * (size_t)M * V);
    ref->rloss = cc_malloc(4 * (size_t)M);
    cpu_matmul_forward(ref->logits, ref->f, ref->w, NULL, M, V, D);
    memset(&ref->sc, 0, sizeof(ref->sc));
    cpu_crossentropy(ref->dlog, ref->rloss, ref->logits, ref->yw, M, V, CE_SCALE, &ref->sc);
    ref->df = cc_calloc((size_t)M * D, 4);
    ref->rW = cc_calloc((size_t)V * D, 4);
    ref->rdg = cc_calloc(D, 4);
    ref->rdm = cc_calloc((size_t)M * D, 4);
    cpu_matmul_backward(ref->df, ref->rW, NULL, ref->dlog, ref->f, ref->w, M, V, D);
    cpu_rmsnorm_backward(ref->rdm, ref->rdg, ref->df, ref->m, ref->g, ref->ir, M, D, &CE_NORM);
}

/* The GPU's classifier on the case's window, as the step runs it (chunks of
 * k->rows, the last chunk's weight GEMM left to its own call), then again from
 * the merge itself (c zero) into second gradients; results read back into out. */
static void ce_gpu_run(const ladder_ctx *cx, stage *st, const ce_case *k, const ce_ref *ref, ce_gpu *out)
{
    const int D = k->D, V = k->V, Mall = k->nseq * k->T, M = k->nseq * k->len;
    float *du_ = dev_f32(ref->u, (size_t)Mall * D), *dc_ = dev_f32(ref->c, (size_t)Mall * D), *dg_ = dev_f32(ref->g, D);
    float *dir = dev_f32(NULL, Mall), *dloss = dev_f32(NULL, Mall), *ddm = dev_f32(NULL, (size_t)Mall * D);
    /* W and dW with the padding rows the products run over (gpu_ce_pad_floats): W's zero */
    const size_t pad = gpu_ce_pad_floats(V, D);
    float *dW = dev_f32(NULL, (size_t)V * D + pad), *ddg = dev_f32(NULL, D);
    cudaCheck(cudaMemset(dW, 0, 4 * (size_t)V * D));
    cudaCheck(cudaMemset(ddg, 0, 4 * (size_t)D));
    float *wpad = cc_calloc((size_t)V * D + pad, 4);
    memcpy(wpad, ref->w, 4 * (size_t)V * D);
    void *dw16 = dev_f16(wpad, (size_t)V * D + pad);
    int *dy = cc_device_alloc(sizeof(int) * Mall, "targets"), *drank = cc_device_alloc(sizeof(int) * Mall, "ranks");
    cudaCheck(cudaMemcpy(dy, ref->y, sizeof(int) * Mall, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemset(drank, 0x7f, sizeof(int) * Mall));
    gpu_ce_chunk ck;
    void *cbuf = cc_device_alloc(gpu_ce_chunk_bytes(k->rows, D, V), "classifier chunk");
    cudaCheck(cudaMemset(cbuf, 0xff, gpu_ce_chunk_bytes(k->rows, D, V))); /* NaN: an unwritten element shows */
    gpu_ce_chunk_place(&ck, cbuf, k->rows, D, V);
    const size_t at = (size_t)k->t0;
    const row_window rw = k->len < k->T ? (row_window){ k->len, k->T, 0 } : row_window_all(M);
    /* the last chunk's weight GEMM left out and run after, with a cuBLASLt context of its own, as the
     * step runs it (an operation of its own on the side stream) */
    gpu_matmul_ctx *side_gemm = gpu_matmul_create();
    gpu_ce_args a = {
        .M = M, .D = D, .V = V, .rw = rw, .u = du_ + at * D, .c = dc_ + at * D, .f_ir = dir + at, .g_final = dg_,
        .w16 = dw16, .y = dy + at, .loss = dloss + at, .rank = drank + at, .du = ddm + at * D, .dg_final = ddg,
        .dw = dW, .grad_scale = CE_SCALE, .nc = &CE_NORM, .caps = cx->caps, .defer_last_dw = 1,
    };
    gpu_scratch *scratch = norm_scratch(cx->caps, k->rows, D); /* the final norm's backward over a chunk */
    gpu_crossentropy(cx->gemm, &ck, &a, scratch, 0);
    float *W_left = get_f32(dW, (size_t)V * D); /* without the last chunk's share */
    gpu_crossentropy_last_dw(side_gemm, &ck, &a, 0);
    /* again from u and the merge m (now in c) with c zero: the same merge, the same results */
    float *dW2 = dev_f32(NULL, (size_t)V * D + pad), *ddg2 = dev_f32(NULL, D);
    cudaCheck(cudaMemset(dW2, 0, 4 * (size_t)V * D));
    cudaCheck(cudaMemset(ddg2, 0, 4 * (size_t)D));
    float *dm_ = dev_f32(NULL, (size_t)Mall * D), *dzero = dev_f32(NULL, (size_t)Mall * D);
    cudaCheck(cudaMemcpy(dm_, dc_, 4 * (size_t)Mall * D, cudaMemcpyDeviceToDevice)); /* m in the window's rows */
    cudaCheck(cudaMemset(dzero, 0, 4 * (size_t)Mall * D));
    gpu_ce_args a2 = a;
    a2.u = dm_ + at * D;
    a2.c = dzero + at * D;
    a2.dw = dW2;
    a2.dg_final = ddg2;
    gpu_crossentropy(cx->gemm, &ck, &a2, scratch, 0);
    gpu_crossentropy_last_dw(side_gemm, &ck, &a2, 0);
    cudaCheck(cudaDeviceSynchronize());
    out->W2 = get_f32(dW2, (size_t)V * D);
    out->loss_all = get_f32(dloss, Mall);
    out->dm_all = get_f32(ddm, (size_t)Mall * D);
    out->W = get_f32(dW, (size_t)V * D);
    size_t moved = 0;
    for (size_t i = 0; i < (size_t)V * D; i++) moved += W_left[i] != out->W[i];
    /* the last chunk holds the window's last row: where its target is scored, its share is not 0 */
    const int last_scored = ref->y[(size_t)(k->nseq - 1) * k->T + k->t0 + k->len - 1] >= 0;
    check_flag(st, "the last chunk's weight GEMM left to gpu_crossentropy_last_dw, and added by it",
               moved > 0 || !last_scored);
    free(W_left);
    out->dg = get_f32(ddg, D);
    out->dg2 = get_f32(ddg2, D);
    out->rank_all = cc_malloc(sizeof(int) * Mall);
    cudaCheck(cudaMemcpy(out->rank_all, drank, sizeof(int) * Mall, cudaMemcpyDeviceToHost));
    gpu_matmul_destroy(side_gemm);
    free(wpad);
    DFREE_ALL(dW2, ddg2, dm_, dzero);
    DFREE_ALL(du_, dc_, dg_, dir, dloss, ddm, dW, ddg, dw16, dy, drank, cbuf);
    gpu_scratch_destroy(scratch);
}

/* The GPU's results against the CPU's: the loss, per-row losses, the
 * gradients (twice), the ranks' top-1 and top-5 counts, ignored rows, and the
 * rows outside the window left alone. */
static void ce_compare(stage *st, const ce_case *k, const ce_ref *ref, const ce_gpu *gpu, const char *tag)
{
    const int D = k->D, V = k->V, M = k->nseq * k->len;
    /* the window's rows of the GPU's per-row results */
    float *gloss = cc_malloc(4 * (size_t)M), *gdm = cc_malloc(4 * (size_t)M * D);
    double gsum = 0, rsum = ref->sc.loss_sum;
    long top1 = 0, top5 = 0, ignored_ok = 1;
    for (int b = 0, i = 0; b < k->nseq; b++)
        for (int t = k->t0; t < k->t0 + k->len; t++, i++) {
            const size_t src = (size_t)b * k->T + t;
            gloss[i] = gpu->loss_all[src];
            memcpy(gdm + (size_t)i * D, gpu->dm_all + src * D, 4 * (size_t)D);
            gsum += gloss[i];
            const int rk = gpu->rank_all[src];
            if (ref->yw[i] < 0) ignored_ok &= rk == -1 && gloss[i] == 0.f;
            top1 += rk == 1;
            top5 += rk >= 1;
        }
    /* the GPU kept no rows outside the window */
    int outside_ok = 1;
    for (int b = 0; b < k->nseq; b++)
        for (int t = 0; t < k->T; t++)
            if (t < k->t0 || t >= k->t0 + k->len) outside_ok &= gpu->rank_all[(size_t)b * k->T + t] == 0x7f7f7f7f;
    float gs = (float)gsum, rs = (float)rsum;
    char what[160];
    /* the logits are the FP32 accumulation rounded once to FP16 (2^-11
     * relative); a loss sums M of them: ~1e-4 */
    snprintf(what, sizeof(what), "loss (%s)", tag);
    check(st, what, &gs, &rs, 1, 2e-4, 0);
    snprintf(what, sizeof(what), "row losses (%s)", tag);
    check(st, what, gloss, ref->rloss, M, 1e-3, 0);
    /* FP16 logits and dlogits (the GEMM operand): ~1e-3 */
    snprintf(what, sizeof(what), "dW_lm (%s)", tag);
    check(st, what, gpu->W, ref->rW, (size_t)V * D, 3e-3, 0);
    snprintf(what, sizeof(what), "dm (%s)", tag);
    check(st, what, gdm, ref->rdm, (size_t)M * D, 3e-3, 0);
    snprintf(what, sizeof(what), "dg_final (%s)", tag);
    check(st, what, gpu->dg, ref->rdg, D, 3e-3, 0);
    snprintf(what, sizeof(what), "dW_lm and dg_final again after the side-stream GEMM (%s)", tag);
    check(st, what, gpu->W2, ref->rW, (size_t)V * D, 3e-3, 0);
    check(st, what, gpu->dg2, ref->rdg, D, 3e-3, 0);
    /* ties and near-ties between FP16 logits may move a rank by one: the
     * counts agree to a few positions in a hundred */
    const cc_score *sc = &ref->sc;
    const long slack = 1 + (long)sc->scored / 50;
    snprintf(what, sizeof(what), "top-1 %ld/%ld and top-5 %ld/%ld of %ld (%s)", top1, sc->top1, top5, sc->top5,
             sc->scored, tag);
    check_flag(st, what, labs(top1 - sc->top1) <= slack && labs(top5 - sc->top5) <= slack && top5 >= top1);
    snprintf(what, sizeof(what), "ignored rows give no loss or rank (%s)", tag);
    check_flag(st, what, (int)ignored_ok);
    snprintf(what, sizeof(what), "rows outside the window untouched (%s)", tag);
    check_flag(st, what, outside_ok);
    FREE_ALL(gloss, gdm);
}

static void run_case(const ladder_ctx *cx, stage *st, const ce_case *k)
{
    char tag[48];
    snprintf(tag, sizeof(tag), "V=%d rows=%d%s", k->V, k->rows, k->len < k->T ? " window" : "");
    ce_ref ref;
    ce_gpu gpu;
    ce_draw(cx->rng, k, &ref);
    ce_cpu(k, &ref);
    ce_gpu_run(cx, st, k, &ref, &gpu);
    ce_compare(st, k, &ref, &gpu, tag);
    FREE_ALL(ref.u, ref.c, ref.g, ref.w, ref.y, ref.m, ref.f, ref.ir, ref.yw, ref.logits, ref.dlog, ref.rloss, ref.df,
             ref.rW, ref.rdg, ref.rdm);
    FREE_ALL(gpu.loss_all, gpu.dm_all, gpu.W, gpu.dg, gpu.W2, gpu.dg2, gpu.rank_all);
}

static void run_crossentropy(const ladder_ctx *cx, stage *st)
{
    static const ce_case cases[] = {
        { 3, 32, 0, 32, 64, 256, 40 },      /* bytes; chunks of 40 cut a sequence: 40, 40, 16 */
        { 4, 50, 0, 50, 64, 1003, 64 },     /* V not a multiple of 8, a warp a row */
        { 2, 65, 0, 65, 64, 50257, 48 },    /* GPT-2's V, a block a row, padded to 50304 */
        { 4, 40, 8, 24, 64, 32003, 48 },    /* a time window, chunks of two whole segments */
        { 3, 40, 16, 16, 128, 4099, 5 },    /* a time window, chunks inside a segment */
    };
    snprintf(st->shape, sizeof(st->shape), "V=256..50257, uneven chunks, time windows, every 7th target ignored, S=128");
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) run_case(cx, st, &cases[i]);
}

const ladder_stage ladder_stage_crossentropy = { "crossentropy", "classifier + loss", run_crossentropy };
