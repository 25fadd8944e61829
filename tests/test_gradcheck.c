/* The CPU reference against central finite differences, in double precision:
 * every parameter tensor's analytic gradient on sampled entries. Also the
 * grad_h clamp (binds; invariant under the loss scale), RMSNorm's guards in
 * both directions, and ignored targets. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/cpu_ref.h"
#include "catchat/executor.h"
#include "catchat/rng.h"
#include "helpers.h"

typedef struct {
    cc_layout lay;
    double *params, *grads;
    cpu_acts_f64 acts;
    int *x, *y;
    int B, T;
} fixture;

/* Tiny model; B=2, T=12 with W=5 so windows are both shorter and (early on)
 * longer than the history. */
static void fx_init(fixture *f, int T, int W, double rms_eps)
{
    cc_config c;
    th_tiny_config(&c);
    c.ctx_window = W;
    c.rms_eps = rms_eps;
    cc_dims d = cc_dims_from_config(&c);
    cc_layout_build(&f->lay, &d);
    float *pf = malloc(sizeof(float) * f->lay.total);
    cc_layout_init_params(&f->lay, pf, 7);
    f->params = calloc(f->lay.total, sizeof(double));
    f->grads = calloc(f->lay.total, sizeof(double));
    cc_rng r;
    cc_rng_seed(&r, 99);
    for (size_t i = 0; i < f->lay.total; i++) f->params[i] = pf[i];
    /* norm gains away from 1 and nonzero biases, so their gradients are tested generically */
    for (int i = 0; i < f->lay.n; i++) {
        const cc_tensor_info *t = &f->lay.t[i];
        if (t->ndim == 1)
            for (size_t k = 0; k < t->numel; k++)
                f->params[t->offset + k] += 0.3 * (cc_rng_uniform(&r) - 0.5);
    }
    free(pf);
    f->B = 2;
    f->T = T;
    cpu_acts_alloc_f64(&f->acts, &d, f->B, T);
    f->x = malloc(sizeof(int) * f->B * T);
    f->y = malloc(sizeof(int) * f->B * T);
    th_random_tokens(f->x, f->y, f->B * T, d.V, 5, 5);
}

static void fx_free(fixture *f)
{
    cpu_acts_free_f64(&f->acts);
    free(f->params);
    free(f->grads);
    free(f->x);
    free(f->y);
}

static double loss_at(fixture *f)
{
    return cpu_model_forward_f64(&f->lay, f->params, &f->acts, f->x, f->y, NULL);
}

static void grads_at(fixture *f, double S, double clamp, double ctx_clamp)
{
    memset(f->grads, 0, sizeof(double) * f->lay.total);
    cpu_model_forward_f64(&f->lay, f->params, &f->acts, f->x, f->y, NULL);
    cpu_model_backward_f64(&f->lay, f->params, f->grads, &f->acts, f->x, f->y, S,
                           cc_clamp_dispatch_limit(clamp, S, 1), cc_clamp_dispatch_limit(ctx_clamp, S, 1));
}

Test(gradcheck, every_tensor_matches_finite_differences)
{
    fixture f;
    fx_init(&f, 12, 5, 1e-6);
    grads_at(&f, 1.0, 1000.0, 0.0);
    cc_rng r;
    cc_rng_seed(&r, 3);
    const double h = 1e-5;
    for (int ti = 0; ti < f.lay.n; ti++) {
        const cc_tensor_info *t = &f.lay.t[ti];
        enum { NS = 12 };
        double an[NS], fd[NS];
        for (int s = 0; s < NS; s++) {
            size_t k;
            if (ti == f.lay.embed) /* rows of tokens that occur: other rows are exactly 0 */
                k = (size_t)f.x[cc_rng_below(&r, (uint64_t)(f.B * f.T))] * t->shape[1] +
                    cc_rng_below(&r, (uint64_t)t->shape[1]);
            else
                k = cc_rng_below(&r, t->numel);
            double *p = &f.params[t->offset + k];
            const double keep = *p;
            *p = keep + h;
            const double lp = loss_at(&f);
            *p = keep - h;
            const double lm = loss_at(&f);
            *p = keep;
            fd[s] = (lp - lm) / (2 * h);
            an[s] = f.grads[t->offset + k];
        }
        const double err = th_rel_err_d(an, fd, NS);
        fprintf(stderr, "gradcheck %-22s rel err %.3e\n", t->name, err);
        cr_expect(err < 1e-6, "%s: analytic vs finite-difference rel err %.3e", t->name, err);
        double nrm = 0;
        for (int s = 0; s < NS; s++) nrm += fd[s] * fd[s];
        cr_expect(nrm > 0, "%s: sampled gradients are all zero: the check would be vacuous", t->name);
    }
    fx_free(&f);
}

Test(gradcheck, grad_h_clamp_binds_and_ignores_loss_scale)
{
    fixture f;
    fx_init(&f, 12, 5, 1e-6);
    const size_t n = f.lay.total;
    double *free_g = malloc(sizeof(double) * n), *g1 = malloc(sizeof(double) * n);
    grads_at(&f, 1.0, 0.0, 0.0); /* clamp off */
    memcpy(free_g, f.grads, sizeof(double) * n);
    const double clamp = 2e-3; /* per-element dL/dh is ~1e-2 here: binds on many steps */
    grads_at(&f, 1.0, clamp, 0.0);
    memcpy(g1, f.grads, sizeof(double) * n);
    cr_expect(th_rel_err_d(g1, free_g, n) > 1e-3, "the clamp did not change the gradients");
    grads_at(&f, 128.0, clamp, 0.0);
    size_t differ = 0;
    for (size_t i = 0; i < n; i++) differ += f.grads[i] / 128.0 != g1[i];
    cr_expect_eq(differ, 0, "%zu unscaled gradients differ between loss scales 1 and 128", differ);
    /* A dispatcher that forgot the multiplication would clamp at c, not c·S: */
    grads_at(&f, 128.0, clamp / 128.0, 0.0);
    cr_expect(th_rel_err_d(f.grads, g1, n) > 1e-3, "clamp limit is not scaled with S");
    free(free_g);
    free(g1);
    fx_free(&f);
}

Test(gradcheck, ctx_grad_clamp_binds_and_ignores_loss_scale)
{
    fixture f;
    fx_init(&f, 12, 5, 1e-6);
    const size_t n = f.lay.total;
    double *g0 = malloc(sizeof(double) * n), *g1 = malloc(sizeof(double) * n);
    grads_at(&f, 1.0, 0.0, 0.0);
    memcpy(g0, f.grads, sizeof(double) * n);
    grads_at(&f, 1.0, 0.0, 1e-3);
    memcpy(g1, f.grads, sizeof(double) * n);
    cr_expect(th_rel_err_d(g1, g0, n) > 1e-3, "ctx_grad_clamp did not change the gradients");
    grads_at(&f, 128.0, 0.0, 1e-3);
    for (size_t i = 0; i < n; i++) f.grads[i] /= 128.0;
    cr_expect(th_rel_err_d(f.grads, g1, n) < 1e-14, "ctx_grad_clamp depends on the loss scale");
    free(g0);
    free(g1);
    fx_free(&f);
}

/* Ignored targets (-1) at the end of a sequence: the loss and every gradient
 * equal those of the same model on the scored prefix alone. */
Test(loss, ignored_targets_score_only_the_rest)
{
    fixture full, part;
    fx_init(&full, 12, 5, 1e-6);
    fx_init(&part, 8, 5, 1e-6);
    for (int b = 0; b < 2; b++)
        for (int t = 0; t < 12; t++) {
            full.y[b * 12 + t] = t < 8 ? (t * 7 + b) % 256 : -1;
            full.x[b * 12 + t] = (t * 13 + b * 5) % 256;
            if (t < 8) {
                part.y[b * 8 + t] = full.y[b * 12 + t];
                part.x[b * 8 + t] = full.x[b * 12 + t];
            }
        }
    cc_score sf = { 0 }, sp = { 0 };
    double lf = cpu_model_forward_f64(&full.lay, full.params, &full.acts, full.x, full.y, &sf);
    double lp = cpu_model_forward_f64(&part.lay, part.params, &part.acts, part.x, part.y, &sp);
    cr_expect_eq(sf.scored, 16);
    cr_expect(fabs(lf - lp) < 1e-12 * fabs(lp), "loss %.15g vs prefix-only %.15g", lf, lp);
    grads_at(&full, 1.0, 1000.0, 0.0);
    grads_at(&part, 1.0, 1000.0, 0.0);
    cr_expect(th_rel_err_d(full.grads, part.grads, full.lay.total) < 1e-12);
    fx_free(&full);
    fx_free(&part);
}
