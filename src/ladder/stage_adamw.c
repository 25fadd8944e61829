/* adamw (optimizer): the AdamW update on both executors, a step skipped on a
 * planted NaN gradient (weights untouched), and the dynamic loss scale
 * halving and growing back. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/executor.h"
#include "catchat/optim.h"
#include "catchat/util.h"
#include "ladder/ladder.h"

static void run_adamw(const ladder_ctx *cx, stage *st)
{
    cc_rng *r = cx->rng;
    cc_config c;
    small_config(cx, &c);
    c.loss_scale_dynamic = 1;
    c.init_scale = 1024;
    c.scale_growth_interval = 2;
    c.weight_decay = 0.1;
    snprintf(st->shape, sizeof(st->shape), "AdamW x2, planted NaN skip, dynamic scale 1024 -> 512 -> 1024");
    cc_executor *cpu, *gpu;
    if (!executor_pair(st, &c, 1, 8, &cpu, &gpu)) return;
    const size_t n = cpu->lay.total;
    float *p = rand_vec(r, n, 0.1, 1), *m = rand_vec(r, n, 1e-3, 0), *v = cc_malloc(4 * n);
    for (size_t i = 0; i < n; i++) v[i] = (float)(1e-5 * fabs(cc_rng_normal(r)));
    cpu->ops->set_params(cpu, p);
    gpu->ops->set_params(gpu, p);
    cpu->ops->set_moments(cpu, m, v);
    gpu->ops->set_moments(gpu, m, v);
    cc_scaler scc, scg;
    cc_scaler_init(&scc, &c);
    cc_scaler_init(&scg, &c);
    cc_opt_counts occ = { 3, 0 }, ocg = { 3, 0 };
    cc_step_report rc, rg;
    /* step 1: clean; step 2: planted NaN (skipped, scale halves); step 3, 4: clean (scale doubles) */
    int skip_ok = 1, scale_ok = 1;
    float *before = cc_malloc(4 * n), *after = cc_malloc(4 * n);
    for (int k = 0; k < 4; k++) {
        float *g = plant_grads(r, cpu, gpu, scc.scale, scg.scale * 96);
        if (k == 1) {
            float *gg = cc_malloc(4 * n);
            gpu->ops->get_grads(gpu, gg);
            gg[7] = NAN;
            gpu->ops->set_grads(gpu, gg, gpu->grad_unit);
            cpu->ops->get_grads(cpu, gg);
            gg[7] = NAN;
            cpu->ops->set_grads(cpu, gg, cpu->grad_unit);
            free(gg);
            gpu->ops->get_params(gpu, before);
        }
        cc_optimizer_step(cpu, &c, &scc, &occ, NULL, 10 + k, &rc);
        cc_optimizer_step(gpu, &c, &scg, &ocg, NULL, 10 + k, &rg);
        if (k == 1) {
            gpu->ops->get_params(gpu, after);
            skip_ok &= rg.skipped && rc.skipped && memcmp(before, after, 4 * n) == 0;
            scale_ok &= scg.scale == 512 && scc.scale == 512;
        }
        free(g);
    }
    scale_ok &= scg.scale == 1024 && scc.scale == 1024 && ocg.applied == occ.applied && ocg.skipped == 1;
    check_flag(st, "NaN step skipped, weights untouched", skip_ok);
    check_flag(st, "dynamic loss scale", scale_ok);
    float *pc = cc_malloc(4 * n), *pg = cc_malloc(4 * n), *mc = cc_malloc(4 * n), *mg = cc_malloc(4 * n);
    float *vc = cc_malloc(4 * n), *vg = cc_malloc(4 * n);
    cpu->ops->get_params(cpu, pc);
    gpu->ops->get_params(gpu, pg);
    cpu->ops->get_moments(cpu, mc, vc);
    gpu->ops->get_moments(gpu, mg, vg);
    /* FP32 element-wise on both sides; the GPU's gradients went through its own unscale */
    check(st, "params", pg, pc, n, 1e-5, 0);
    check(st, "m", mg, mc, n, 1e-5, 0);
    check(st, "v", vg, vc, n, 1e-5, 0);
    FREE_ALL(p, m, v, before, after, pc, pg, mc, mg, vc, vg);
    cpu->ops->destroy(cpu);
    gpu->ops->destroy(gpu);
}

const ladder_stage ladder_stage_adamw = { "adamw", "optimizer", run_adamw };
