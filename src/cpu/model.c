/* The whole dual-stream model on the CPU, composed from the ops in this
 * folder, exactly as docs/model.md writes it:
 *   u⁰ = embed[x];  uˡ⁺¹ = uˡ + GRU_l(RMSNorm(uˡ))           token stream
 *   s = RMSNorm(uᴸ); c = out · attn(qkv · s)                  context stream
 *   logits = lm_head · RMSNorm(uᴸ + c)                        merge, classify
 * Backward follows the same path in reverse on the scaled loss. */
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include "cpu/real.h"
#include "catchat/util.h"

#define PARAM(base, idx) ((base) + lay->t[(idx)].offset)

/* NaN provenance: scan a stage's output when checking is on. */
static void check_out(CC_FN(cpu_acts) *a, const char *stage, const char *tensor, int layer, const real *x, size_t n,
                      int width)
{
    if (!a->check || a->check->found) return;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) {
            cc_finite_set(a->check, stage, tensor, layer, (long)i, (float)x[i], width, a->T);
            return;
        }
}
#define CHECK(stage, tensor, layer, ptr, n, width) check_out(a, stage, tensor, layer, ptr, n, width)

/* The activation buffers, in one table: each field and its element count.
 * Allocation, release and the byte count the CPU executor checks host memory
 * with all walk it, so a buffer added here is in all three. */
#define N_ACT_BUFS 24
static int act_table(CC_FN(cpu_acts) *a, const cc_dims *d, int B, int T, real **ptr[N_ACT_BUFS],
                     size_t elems[N_ACT_BUFS])
{
    const size_t M = (size_t)B * T, D = d->D, L = d->L;
    const struct {
        real **p;
        size_t n;
    } t[N_ACT_BUFS] = {
        { &a->u, (L + 1) * M * D }, { &a->a, L * M * D },         { &a->a_ir, L * M },
        { &a->gx, L * M * 3 * D },  { &a->gates, L * M * 3 * D }, { &a->ghn, L * M * D },
        { &a->h, L * M * D },       { &a->s, M * D },             { &a->s_ir, M },
        { &a->qkv, M * 3 * D },     { &a->p, (size_t)B * d->H * T * d->W },
        { &a->o, M * D },           { &a->c, M * D },             { &a->m, M * D },
        { &a->f, M * D },           { &a->f_ir, M },              { &a->logits, M * d->V },
        { &a->row_loss, M },        { &a->scratch, cpu_gru_scratch_elems(B, d->D) },
        { &a->du, M * D },          { &a->dtmp, M * D },          { &a->dgx, M * 3 * D },
        { &a->dqkv, M * 3 * D },    { &a->dc, M * D },
    };
    for (int i = 0; i < N_ACT_BUFS; i++) {
        ptr[i] = t[i].p;
        elems[i] = t[i].n;
    }
    return N_ACT_BUFS;
}

int CC_FN(cpu_acts_alloc)(CC_FN(cpu_acts) *a, const cc_dims *d, int B, int T)
{
    memset(a, 0, sizeof(*a));
    a->B = B;
    a->T = T;
    a->d = *d;
    real **ptr[N_ACT_BUFS];
    size_t elems[N_ACT_BUFS];
    const int n = act_table(a, d, B, T, ptr, elems);
    for (int i = 0; i < n; i++) *ptr[i] = cc_calloc(elems[i], sizeof(real));
    return 0;
}

void CC_FN(cpu_acts_free)(CC_FN(cpu_acts) *a)
{
    real **ptr[N_ACT_BUFS];
    size_t elems[N_ACT_BUFS];
    const int n = act_table(a, &a->d, a->B, a->T, ptr, elems);
    for (int i = 0; i < n; i++) free(*ptr[i]);
    memset(a, 0, sizeof(*a));
}

size_t CC_FN(cpu_acts_elems)(const cc_dims *d, int B, int T)
{
    CC_FN(cpu_acts) a;
    real **ptr[N_ACT_BUFS];
    size_t elems[N_ACT_BUFS], total = 0;
    const int n = act_table(&a, d, B, T, ptr, elems);
    for (int i = 0; i < n; i++) total += elems[i];
    return total;
}

double CC_FN(cpu_model_forward)(const cc_layout *lay, const real *params, CC_FN(cpu_acts) *a,
                                const int *x, const int *y, cc_score *score)
{
    const cc_dims *d = &lay->dims;
    const int B = a->B, T = a->T, M = B * T, D = d->D, L = d->L;
    const size_t MD = (size_t)M * D;
    const cc_norm_consts nc = cc_norm_consts_of(d);

    CC_FN(cpu_embedding_forward)(a->u, x, PARAM(params, lay->embed), M, D);
    CHECK("embedding", "u0", -1, a->u, MD, D);
    for (int l = 0; l < L; l++) {
        real *ul = a->u + l * MD, *al = a->a + l * MD, *hl = a->h + l * MD;
        real *gxl = a->gx + l * 3 * MD;
        CC_FN(cpu_rmsnorm_forward)(al, a->a_ir + (size_t)l * M, ul, PARAM(params, lay->gru_norm[l]),
                                   M, D, &nc);
        CHECK("rmsnorm", "a", l, al, MD, D);
        CC_FN(cpu_matmul_forward)(gxl, al, PARAM(params, lay->gru_wih[l]),
                                  PARAM(params, lay->gru_bih[l]), M, 3 * D, D);
        CHECK("input_projection", "gx", l, gxl, 3 * MD, 3 * D);
        CC_FN(cpu_gru_forward)(hl, a->gates + l * 3 * MD, a->ghn + l * MD, gxl,
                               PARAM(params, lay->gru_whh[l]), PARAM(params, lay->gru_bhh[l]),
                               B, T, D, a->scratch);
        CHECK("gru_forward", "h", l, hl, MD, D);
        real *un = ul + MD;
        for (size_t i = 0; i < MD; i++) un[i] = ul[i] + hl[i];
    }
    const real *uL = a->u + (size_t)L * MD;
    CC_FN(cpu_rmsnorm_forward)(a->s, a->s_ir, uL, PARAM(params, lay->ctx_norm), M, D, &nc);
    CHECK("ctx_rmsnorm", "s", -1, a->s, MD, D);
    CC_FN(cpu_matmul_forward)(a->qkv, a->s, PARAM(params, lay->ctx_qkv), NULL, M, 3 * D, D);
    CHECK("qkv_projection", "qkv", -1, a->qkv, 3 * MD, 3 * D);
    CC_FN(cpu_attention_forward)(a->o, a->p, a->qkv, B, T, D, d->H, d->W);
    CHECK("attention_forward", "o", -1, a->o, MD, D);
    CC_FN(cpu_matmul_forward)(a->c, a->o, PARAM(params, lay->ctx_out), NULL, M, D, D);
    CHECK("ctx_out_projection", "c", -1, a->c, MD, D);
    for (size_t i = 0; i < MD; i++) a->m[i] = uL[i] + a->c[i];
    CC_FN(cpu_rmsnorm_forward)(a->f, a->f_ir, a->m, PARAM(params, lay->final_norm), M, D, &nc);
    CHECK("final_rmsnorm", "f", -1, a->f, MD, D);
    CC_FN(cpu_matmul_forward)(a->logits, a->f, PARAM(params, lay->lm_head), NULL, M, d->V, D);
    CHECK("classifier", "logits", -1, a->logits, (size_t)M * d->V, d->V);
    if (!y) return 0;
    cc_score local = { 0 };
    CC_FN(cpu_crossentropy)(NULL, a->row_loss, a->logits, y, M, d->V, 0, &local);
    if (score) {
        score->loss_sum += local.loss_sum;
        score->scored += local.scored;
        score->top1 += local.top1;
        score->top5 += local.top5;
    }
    return local.scored ? local.loss_sum / (double)local.scored : 0.0;
}

void CC_FN(cpu_model_backward)(const cc_layout *lay, const real *params, real *grads,
                               CC_FN(cpu_acts) *a, const int *x, const int *y,
                               double loss_scale, double grad_h_limit, double ctx_limit)
{
    const cc_dims *d = &lay->dims;
    const int B = a->B, T = a->T, M = B * T, D = d->D, L = d->L;
    const size_t MD = (size_t)M * D;
    const cc_norm_consts nc = cc_norm_consts_of(d);
    long scored = 0;
    for (int i = 0; i < M; i++) scored += y[i] >= 0;
    if (scored == 0) return; /* nothing scored: the loss is a constant 0 */

    /* classifier: dlogits = (S/N)(softmax − onehot), in place over the logits */
    real *dlogits = a->logits;
    CC_FN(cpu_crossentropy)(dlogits, NULL, a->logits, y, M, d->V, loss_scale / (double)scored, NULL);
    CHECK("classifier_backward", "dlogits", -1, dlogits, (size_t)M * d->V, d->V);
    real *df = a->dtmp;
    memset(df, 0, sizeof(real) * MD);
    CC_FN(cpu_matmul_backward)(df, PARAM(grads, lay->lm_head), NULL, dlogits, a->f,
                               PARAM(params, lay->lm_head), M, d->V, D);
    /* merge: dm flows to the residual stream and to the context output */
    real *du = a->du;
    memset(du, 0, sizeof(real) * MD);
    CC_FN(cpu_rmsnorm_backward)(du, PARAM(grads, lay->final_norm), df, a->m,
                                PARAM(params, lay->final_norm), a->f_ir, M, D, &nc);
    CHECK("final_rmsnorm_backward", "dm", -1, du, MD, D);
    memcpy(a->dc, du, sizeof(real) * MD);
    /* per-token context guard (limit in units of the scaled loss: cc_clamp_dispatch_limit) */
    CC_FN(cpu_rownorm_clamp)(a->dc, M, D, ctx_limit);
    real *dout_o = a->dtmp;
    memset(dout_o, 0, sizeof(real) * MD);
    CC_FN(cpu_matmul_backward)(dout_o, PARAM(grads, lay->ctx_out), NULL, a->dc, a->o,
                               PARAM(params, lay->ctx_out), M, D, D);
    CC_FN(cpu_attention_backward)(a->dqkv, dout_o, a->p, a->qkv, B, T, D, d->H, d->W);
    CHECK("attention_backward", "dqkv", -1, a->dqkv, 3 * MD, 3 * D);
    real *ds = a->dtmp;
    memset(ds, 0, sizeof(real) * MD);
    CC_FN(cpu_matmul_backward)(ds, PARAM(grads, lay->ctx_qkv), NULL, a->dqkv, a->s,
                               PARAM(params, lay->ctx_qkv), M, 3 * D, D);
    CC_FN(cpu_rmsnorm_backward)(du, PARAM(grads, lay->ctx_norm), ds, a->u + (size_t)L * MD,
                                PARAM(params, lay->ctx_norm), a->s_ir, M, D, &nc);
    CHECK("ctx_rmsnorm_backward", "du", -1, du, MD, D);
    /* token stream, top layer first. du holds dL/duˡ⁺¹, which is also dL/dhˡ
     * (residual) and part of dL/duˡ. */
    for (int l = L - 1; l >= 0; l--) {
        const cc_plant_grad_h *pl = a->plant;
        const int planted = pl && pl->on && pl->layer == l && pl->b < B && pl->t < T && pl->unit < D;
        const size_t pi = planted ? ((size_t)pl->b * T + pl->t) * D + pl->unit : 0;
        const real kept = du[pi];
        if (planted) du[pi] = (real)NAN;
        CC_FN(cpu_gru_backward)(a->dgx, PARAM(grads, lay->gru_whh[l]),
                                PARAM(grads, lay->gru_bhh[l]), du, a->h + l * MD,
                                a->gates + l * 3 * MD, a->ghn + l * MD,
                                PARAM(params, lay->gru_whh[l]), B, T, D, grad_h_limit, a->scratch);
        if (planted) du[pi] = kept; /* the residual path keeps its value */
        CHECK("gru_backward", "dgx", l, a->dgx, 3 * MD, 3 * D);
        real *da = a->dtmp;
        memset(da, 0, sizeof(real) * MD);
        CC_FN(cpu_matmul_backward)(da, PARAM(grads, lay->gru_wih[l]), PARAM(grads, lay->gru_bih[l]),
                                   a->dgx, a->a + l * MD, PARAM(params, lay->gru_wih[l]),
                                   M, 3 * D, D);
        CC_FN(cpu_rmsnorm_backward)(du, PARAM(grads, lay->gru_norm[l]), da, a->u + l * MD,
                                    PARAM(params, lay->gru_norm[l]), a->a_ir + (size_t)l * M,
                                    M, D, &nc);
        CHECK("rmsnorm_backward", "du", l, du, MD, D);
    }
    CC_FN(cpu_embedding_backward)(PARAM(grads, lay->embed), du, x, M, D);
    for (int i = 0; a->check && i < lay->n; i++) {
        char name[CC_NAME_MAX + 8];
        snprintf(name, sizeof(name), "grad.%s", lay->t[i].name);
        CHECK("parameter_gradients", name, -1, grads + lay->t[i].offset, lay->t[i].numel, 0);
    }
}
