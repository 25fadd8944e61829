/* Streaming generation on the CPU: one token at a time with constant memory,
 * the GRU state of each layer plus a ring buffer of the last W keys and
 * values. Computes the same function as cpu_model_forward at each position. */
#include <stdlib.h>
#include <string.h>
#include "cpu/real.h"
#include "catchat/util.h"

#define PARAM(base, idx) ((base) + lay->t[(idx)].offset)

int CC_FN(cpu_decoder_init)(CC_FN(cpu_decoder) *dec, const cc_dims *d)
{
    memset(dec, 0, sizeof(*dec));
    dec->d = *d;
    dec->h = cc_calloc((size_t)d->L * d->D, sizeof(real));
    dec->kv = cc_calloc((size_t)d->W * 2 * d->D, sizeof(real));
    /* u, a, gx(6D), gates(6D), ghn(2D), hh(2D), gh(3D), qkv(3D), o, c, f, scores(W), ir */
    dec->work = cc_calloc((size_t)d->D * 27 + d->W + 8, sizeof(real));
    return 0;
}

void CC_FN(cpu_decoder_free)(CC_FN(cpu_decoder) *dec)
{
    free(dec->h);
    free(dec->kv);
    free(dec->work);
    memset(dec, 0, sizeof(*dec));
}

void CC_FN(cpu_decoder_step)(CC_FN(cpu_decoder) *dec, const cc_layout *lay, const real *params,
                             int token, real *logits)
{
    const cc_dims *d = &dec->d;
    const int D = d->D, W = d->W, H = d->H, hd = D / H;
    const cc_norm_consts nc = cc_norm_consts_of(d);
    /* The GRU cell's tensors as [B,T,·] = [1,2,·] windows: step t = 1 reads
     * h_{t-1} from row 0 of hh and writes row 1 of each (rows 0 of gx, gates
     * and ghn are never read). */
    real *u = dec->work, *a = u + D, *gx = a + D, *gates = gx + 6 * D, *ghn = gates + 6 * D;
    real *hh = ghn + 2 * D, *gh = hh + 2 * D, *qkv = gh + 3 * D, *o = qkv + 3 * D, *c = o + D, *f = c + D;
    real *scores = f + D, *ir = scores + W;
    const real *hnew = hh + D;

    CC_FN(cpu_embedding_forward)(u, &token, PARAM(params, lay->embed), 1, D);
    for (int l = 0; l < d->L; l++) {
        real *hl = dec->h + (size_t)l * D;
        CC_FN(cpu_rmsnorm_forward)(a, ir, u, PARAM(params, lay->gru_norm[l]), 1, D, &nc);
        CC_FN(cpu_matmul_forward)(gx + 3 * D, a, PARAM(params, lay->gru_wih[l]),
                                  PARAM(params, lay->gru_bih[l]), 1, 3 * D, D);
        CC_FN(cpu_matmul_forward)(gh, hl, PARAM(params, lay->gru_whh[l]), NULL, 1, 3 * D, D);
        memcpy(hh, hl, sizeof(real) * D);
        CC_FN(cpu_gru_cell_forward)(hh, gates, ghn, gx, gh, PARAM(params, lay->gru_bhh[l]), 1, 2, D, 1);
        memcpy(hl, hnew, sizeof(real) * D);
        for (int i = 0; i < D; i++) u[i] += hnew[i];
    }
    CC_FN(cpu_rmsnorm_forward)(a, ir, u, PARAM(params, lay->ctx_norm), 1, D, &nc);
    CC_FN(cpu_matmul_forward)(qkv, a, PARAM(params, lay->ctx_qkv), NULL, 1, 3 * D, D);
    const long t = dec->pos;
    real *slot = dec->kv + (size_t)(t % W) * 2 * D;
    memcpy(slot, qkv + D, sizeof(real) * 2 * D);
    const long t0 = t - W + 1 > 0 ? t - W + 1 : 0;
    const real sc = (real)1 / R_SQRT((real)hd);
    for (int j = 0; j < H; j++) {
        const real *q = qkv + j * hd;
        real mx = -INFINITY;
        for (long tau = t0; tau <= t; tau++) {
            const real *k = dec->kv + (size_t)(tau % W) * 2 * D + j * hd;
            real s = 0;
            for (int i = 0; i < hd; i++) s += q[i] * k[i];
            scores[tau - t0] = s * sc;
            if (scores[tau - t0] > mx) mx = scores[tau - t0];
        }
        real sum = 0;
        for (long tau = t0; tau <= t; tau++) {
            scores[tau - t0] = R_EXP(scores[tau - t0] - mx);
            sum += scores[tau - t0];
        }
        real *oj = o + j * hd;
        for (int i = 0; i < hd; i++) oj[i] = 0;
        for (long tau = t0; tau <= t; tau++) {
            const real pw = scores[tau - t0] / sum;
            const real *v = dec->kv + (size_t)(tau % W) * 2 * D + D + j * hd;
            for (int i = 0; i < hd; i++) oj[i] += pw * v[i];
        }
    }
    CC_FN(cpu_matmul_forward)(c, o, PARAM(params, lay->ctx_out), NULL, 1, D, D);
    for (int i = 0; i < D; i++) c[i] += u[i]; /* m = uᴸ + c */
    CC_FN(cpu_rmsnorm_forward)(f, ir, c, PARAM(params, lay->final_norm), 1, D, &nc);
    CC_FN(cpu_matmul_forward)(logits, f, PARAM(params, lay->lm_head), NULL, 1, d->V, D);
    dec->pos++;
}
