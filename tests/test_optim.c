/* Optimizer step of docs/model.md: AdamW against a hand computation, decay on 2-D
 * tensors only, clipping, the non-finite guard (no state changes), the
 * dynamic loss scale and the learning-rate schedule. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#include "catchat/optim.h"
#include "helpers.h"

static cc_executor *make(cc_config *c)
{
    th_tiny_config(c);
    c->d_model = 8;
    c->n_heads = 2;
    c->n_layers = 1;
    c->vocab_size = 16;
    c->ctx_window = 4;
    c->seq_len = 4;
    c->batch_size = 1;
    return cc_cpu_executor_create(c, 1, 4);
}

/* warmup to step 10, lr 1.0 decaying to lr_min 0.1 at max_steps 110 */
static void schedule_config(cc_config *c)
{
    cc_config_defaults(c);
    c->lr = 1.0;
    c->lr_min = 0.1;
    c->warmup_steps = 10;
    c->max_steps = 110;
}

/* Real gradients in the executor: one forward and backward on a fixed batch. */
static void run_fb(cc_executor *ex, double S)
{
    int x[4] = { 1, 2, 3, 4 }, y[4] = { 2, 3, 4, 5 };
    ex->ops->forward_backward(ex, x, y, S);
}

Test(optim, adamw_matches_hand_computation)
{
    cc_config c;
    cc_executor *ex = make(&c);
    const size_t n = ex->lay.total;
    float *p0 = malloc(sizeof(float) * n), *g = malloc(sizeof(float) * n),
          *p1 = malloc(sizeof(float) * n), *m = calloc(n, sizeof(float)), *v = calloc(n, sizeof(float));
    ex->ops->get_params(ex, p0);
    run_fb(ex, 1.0);
    ex->ops->get_grads(ex, g);
    c.max_grad_norm = 0; /* no clip in this test */
    ex->cfg = c;
    cc_scaler sc;
    cc_scaler_init(&sc, &c);
    cc_opt_counts oc = { 0, 0 };
    cc_step_report rep;
    cc_optimizer_step(ex, &c, &sc, &oc, NULL, 10, &rep);
    ex->ops->get_params(ex, p1);
    ex->ops->get_moments(ex, m, v);
    cr_expect_eq(oc.applied, 1);
    const double lr = cc_lr_at(&c, NULL, 10);
    double maxerr = 0;
    for (int ti = 0; ti < ex->lay.n; ti++) {
        const cc_tensor_info *t = &ex->lay.t[ti];
        for (size_t k = 0; k < t->numel; k++) {
            const size_t i = t->offset + k;
            const double gm = (1 - c.beta1) * g[i], gv = (1 - c.beta2) * (double)g[i] * g[i];
            const double mh = gm / (1 - c.beta1), vh = gv / (1 - c.beta2);
            const double decay = t->decay ? 1 - lr * c.weight_decay : 1.0;
            const double want = p0[i] * decay - lr * mh / (sqrt(vh) + c.adam_eps);
            const double err = fabs(p1[i] - want) / (fabs(want) + 1e-6);
            if (err > maxerr) maxerr = err;
        }
    }
    cr_expect(maxerr < 1e-5, "AdamW max rel err %.3e", maxerr);
    free(p0); free(g); free(p1); free(m); free(v);
    ex->ops->destroy(ex);
}

Test(optim, weight_decay_only_on_matrices)
{
    cc_config c;
    cc_executor *ex = make(&c);
    c.weight_decay = 0.5;
    c.lr = 0.1;
    c.warmup_steps = 0;
    ex->cfg = c;
    const size_t n = ex->lay.total;
    float *p0 = malloc(sizeof(float) * n), *p1 = malloc(sizeof(float) * n);
    float *zero = calloc(n, sizeof(float));
    ex->ops->get_params(ex, p0);
    ex->ops->adamw(ex, 0.1, 1); /* gradients are zero (fresh executor): only decay acts */
    ex->ops->get_params(ex, p1);
    for (int ti = 0; ti < ex->lay.n; ti++) {
        const cc_tensor_info *t = &ex->lay.t[ti];
        const float want = t->decay ? (float)(1 - 0.1 * 0.5) : 1.0f;
        for (size_t k = 0; k < t->numel; k++)
            cr_expect(fabsf(p1[t->offset + k] - p0[t->offset + k] * want) <= 1e-6f * fabsf(p0[t->offset + k]),
                      "%s decays wrongly", t->name);
    }
    cr_expect(ex->lay.t[ex->lay.gru_bih[0]].decay == 0 && ex->lay.t[ex->lay.gru_norm[0]].decay == 0);
    free(p0); free(p1); free(zero);
    ex->ops->destroy(ex);
}

Test(optim, clip_unscale_and_norms)
{
    cc_config c;
    cc_executor *ex = make(&c);
    c.max_grad_norm = 1e-3;
    ex->cfg = c;
    run_fb(ex, 1024.0);
    const size_t n = ex->lay.total;
    float *g = malloc(sizeof(float) * n);
    ex->ops->get_grads(ex, g);
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += ((double)g[i] / 1024) * ((double)g[i] / 1024);
    cc_scaler sc;
    c.loss_scale = 1024.0;
    cc_scaler_init(&sc, &c);
    cc_opt_counts oc = { 0, 0 };
    cc_step_report rep;
    cc_optimizer_step(ex, &c, &sc, &oc, NULL, 0, &rep);
    cr_expect(fabs(rep.norm - sqrt(ss)) < 1e-5 * sqrt(ss), "n0 %.9g vs unscaled %.9g", rep.norm, sqrt(ss));
    cr_expect(rep.norm > 1e-3, "test needs a norm above the clip");
    cr_expect(fabs(rep.norm_clipped - 1e-3) < 1e-6, "n1 = %.9g", rep.norm_clipped);
    free(g);
    ex->ops->destroy(ex);
}

Test(optim, nonfinite_gradient_skips_without_state_change)
{
    cc_config c;
    cc_executor *ex = make(&c);
    c.loss_scale_dynamic = 1;
    c.init_scale = 65536;
    ex->cfg = c;
    const size_t n = ex->lay.total;
    float *p0 = malloc(sizeof(float) * n), *p1 = malloc(sizeof(float) * n);
    float *m0 = malloc(sizeof(float) * n), *v0 = malloc(sizeof(float) * n);
    float *m1 = malloc(sizeof(float) * n), *v1 = malloc(sizeof(float) * n);
    /* One clean step so the moments are non-zero. */
    cc_scaler sc;
    cc_scaler_init(&sc, &c);
    cc_opt_counts oc = { 0, 0 };
    cc_step_report rep;
    run_fb(ex, sc.scale);
    cc_optimizer_step(ex, &c, &sc, &oc, NULL, 0, &rep);
    cr_assert_eq(rep.skipped, 0);
    ex->ops->get_params(ex, p0);
    ex->ops->get_moments(ex, m0, v0);
    /* Plant a NaN: a parameter set to NaN poisons the next backward's gradients. */
    float *bad = malloc(sizeof(float) * n);
    memcpy(bad, p0, sizeof(float) * n);
    bad[ex->lay.t[ex->lay.lm_head].offset] = NAN;
    ex->ops->set_params(ex, bad);
    run_fb(ex, sc.scale);
    ex->ops->set_params(ex, p0); /* weights as before; gradients hold the NaN */
    const double s_before = sc.scale;
    cc_optimizer_step(ex, &c, &sc, &oc, NULL, 1, &rep);
    cr_expect_eq(rep.skipped, 1);
    cr_expect_eq(oc.skipped, 1);
    cr_expect_eq(oc.applied, 1, "step count changed on a skipped step");
    cr_expect_eq(sc.scale, s_before / 2, "dynamic scale did not halve");
    ex->ops->get_params(ex, p1);
    ex->ops->get_moments(ex, m1, v1);
    cr_expect_eq(memcmp(p0, p1, sizeof(float) * n), 0, "weights changed on a skipped step");
    cr_expect_eq(memcmp(m0, m1, sizeof(float) * n), 0, "moments changed on a skipped step");
    cr_expect_eq(memcmp(v0, v1, sizeof(float) * n), 0);
    free(p0); free(p1); free(m0); free(v0); free(m1); free(v1); free(bad);
    ex->ops->destroy(ex);
}

Test(optim, dynamic_scale_grows_after_interval)
{
    cc_config c;
    cc_executor *ex = make(&c);
    c.loss_scale_dynamic = 1;
    c.init_scale = 256;
    c.scale_growth_interval = 3;
    ex->cfg = c;
    cc_scaler sc;
    cc_scaler_init(&sc, &c);
    cc_opt_counts oc = { 0, 0 };
    cc_step_report rep;
    for (int i = 0; i < 3; i++) {
        cr_expect_eq(sc.scale, 256.0);
        run_fb(ex, sc.scale);
        cc_optimizer_step(ex, &c, &sc, &oc, NULL, i, &rep);
    }
    cr_expect_eq(sc.scale, 512.0);
    cr_expect_eq(sc.growth_count, 0);
    ex->ops->destroy(ex);
}

Test(optim, zero_gradient_is_skipped)
{
    cc_config c;
    cc_executor *ex = make(&c);
    cc_scaler sc;
    cc_scaler_init(&sc, &c);
    cc_opt_counts oc = { 0, 0 };
    cc_step_report rep;
    cc_optimizer_step(ex, &c, &sc, &oc, NULL, 0, &rep); /* fresh executor: all gradients 0 */
    cr_expect_eq(rep.skipped, 1);
    cr_expect_eq(oc.applied, 0);
    cr_expect_eq(sc.scale, c.loss_scale);
    ex->ops->destroy(ex);
}

Test(optim, warmup_then_cosine)
{
    cc_config c;
    schedule_config(&c);
    cr_expect(fabs(cc_lr_at(&c, NULL, 0) - 0.1) < 1e-12);
    cr_expect(fabs(cc_lr_at(&c, NULL, 9) - 1.0) < 1e-12);
    cr_expect(fabs(cc_lr_at(&c, NULL, 10) - 1.0) < 1e-12);
    cr_expect(fabs(cc_lr_at(&c, NULL, 60) - 0.55) < 1e-12);
    cr_expect(fabs(cc_lr_at(&c, NULL, 110) - 0.1) < 1e-12);
}

/* The other schedules on the same steps: after warmup (step 10) the decay
 * spans 100 steps to lr_min at max_steps. */
Test(optim, linear_constant_and_wsd_schedules)
{
    cc_config c;
    schedule_config(&c);
    strcpy(c.lr_schedule, "linear");
    cr_expect(fabs(cc_lr_at(&c, NULL, 9) - 1.0) < 1e-12, "warmup is shared");
    cr_expect(fabs(cc_lr_at(&c, NULL, 35) - 0.775) < 1e-12);
    cr_expect(fabs(cc_lr_at(&c, NULL, 60) - 0.55) < 1e-12);
    cr_expect(fabs(cc_lr_at(&c, NULL, 110) - 0.1) < 1e-12);
    cr_expect(fabs(cc_lr_at(&c, NULL, 500) - 0.1) < 1e-12, "held at lr_min past max_steps");
    strcpy(c.lr_schedule, "constant");
    cr_expect(fabs(cc_lr_at(&c, NULL, 0) - 0.1) < 1e-12);
    cr_expect(fabs(cc_lr_at(&c, NULL, 60) - 1.0) < 1e-12);
    cr_expect(fabs(cc_lr_at(&c, NULL, 110) - 1.0) < 1e-12);
    strcpy(c.lr_schedule, "wsd");
    c.decay_fraction = 0.2; /* stable to step 90, then linear to 0.1 at 110 */
    cr_expect(fabs(cc_lr_at(&c, NULL, 60) - 1.0) < 1e-12);
    cr_expect(fabs(cc_lr_at(&c, NULL, 90) - 1.0) < 1e-12);
    cr_expect(fabs(cc_lr_at(&c, NULL, 100) - 0.55) < 1e-12);
    cr_expect(fabs(cc_lr_at(&c, NULL, 110) - 0.1) < 1e-12);
}

/* A re-planned schedule (a resume with max_steps changed): before from_step
 * the plan as it was; from there the same shape from from_lr to lr_min at
 * the new max_steps, so the lr at from_step is the one the run had reached. */
Test(optim, a_replanned_schedule_goes_on_from_the_lr_reached)
{
    cc_config c;
    schedule_config(&c);
    const cc_lr_segment mid = { 60, cc_lr_at(&c, NULL, 60) }; /* 0.55, then max_steps 110 -> 210 */
    c.max_steps = 210;
    cr_expect(fabs(cc_lr_at(&c, &mid, 30) - cc_lr_at(&c, NULL, 30)) < 1e-12, "before the segment: as planned");
    cr_expect(fabs(cc_lr_at(&c, &mid, 60) - 0.55) < 1e-12, "no jump at the segment's start");
    cr_expect(fabs(cc_lr_at(&c, &mid, 135) - 0.325) < 1e-12, "half-way: the cosine's middle");
    cr_expect(fabs(cc_lr_at(&c, &mid, 210) - 0.1) < 1e-12, "lr_min at the new max_steps");
    /* a finished run (lr_min reached at 110) given 100 more steps stays at lr_min */
    const cc_lr_segment done = { 110, 0.1 };
    for (long s = 110; s <= 210; s += 25) cr_expect(fabs(cc_lr_at(&c, &done, s) - 0.1) < 1e-12, "step %ld", s);
    strcpy(c.lr_schedule, "linear");
    cr_expect(fabs(cc_lr_at(&c, &mid, 135) - 0.325) < 1e-12, "linear: half-way between 0.55 and 0.1");
    /* wsd: still stable at the segment's start, a new stable phase; already decaying, a linear decay on */
    strcpy(c.lr_schedule, "wsd");
    c.decay_fraction = 0.2;
    const cc_lr_segment stable = { 60, 1.0 };
    cr_expect(fabs(cc_lr_at(&c, &stable, 150) - 1.0) < 1e-12, "wsd from lr: stable until 80%% of the segment");
    cr_expect(fabs(cc_lr_at(&c, &stable, 210) - 0.1) < 1e-12);
    cr_expect(fabs(cc_lr_at(&c, &mid, 61) - (0.55 - 0.45 / 150)) < 1e-12, "wsd mid-decay: the decay goes on at once");
    cr_expect(fabs(cc_lr_at(&c, &mid, 135) - 0.325) < 1e-12, "wsd mid-decay: linear to lr_min");
}

/* [run] threads sets the CPU reference's OpenMP team. */
Test(optim, threads_key_sets_the_cpu_team)
{
    cc_config c;
    cc_executor *ex = make(&c);
    ex->ops->destroy(ex);
    c.threads = 1;
    ex = cc_cpu_executor_create(&c, c.batch_size, c.seq_len);
    cr_expect_eq(omp_get_max_threads(), 1);
    ex->ops->destroy(ex);
}
