/* The optimizer step's decisions (docs/model.md), shared by every executor:
 *   1. unscale g ← g/S (FP32)         2. n₀ = ‖g‖₂ over all parameters
 *   3. clip to max_grad_norm          4. skip if n₀ or n₁ is non-finite or n₀ = 0
 *   5. AdamW (decay on 2-D tensors)   6. dynamic loss scale (GradScaler rules)
 * The loss scale enters in the backward pass (dlogits carry S) and leaves
 * here, in step 1, before any norm is taken: the executor reports the factor
 * its gradients carry (grad_unit: S on the CPU, S·N on the GPU). */
#include "catchat/optim.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void cc_scaler_init(cc_scaler *s, const cc_config *cfg)
{
    s->dynamic = cfg->loss_scale_dynamic;
    s->scale = cfg->loss_scale_dynamic ? cfg->init_scale : cfg->loss_scale;
    s->growth_count = 0;
    s->growth_interval = cfg->scale_growth_interval;
}

static double planned_lr(const cc_config *cfg, long step)
{
    if (step < cfg->warmup_steps) return cfg->lr * (double)(step + 1) / (double)cfg->warmup_steps;
    const long span = cfg->max_steps - cfg->warmup_steps;
    if (span <= 0 || strcmp(cfg->lr_schedule, "constant") == 0) return cfg->lr;
    double progress = (double)(step - cfg->warmup_steps) / (double)span;
    if (progress > 1) progress = 1;
    if (strcmp(cfg->lr_schedule, "linear") == 0) return cfg->lr + (cfg->lr_min - cfg->lr) * progress;
    if (strcmp(cfg->lr_schedule, "wsd") == 0) {
        const double decay_from = 1.0 - cfg->decay_fraction; /* stable until here, then linear to lr_min */
        if (progress <= decay_from) return cfg->lr;
        return cfg->lr + (cfg->lr_min - cfg->lr) * (progress - decay_from) / cfg->decay_fraction;
    }
    return cfg->lr_min + 0.5 * (cfg->lr - cfg->lr_min) * (1.0 + cos(3.14159265358979323846 * progress));
}

double cc_lr_at(const cc_config *cfg, const cc_lr_segment *seg, long step)
{
    if (!seg || seg->from_step <= 0 || step < seg->from_step) return planned_lr(cfg, step);
    /* the segment: the same shape with its start as the end of warmup and from_lr as the peak */
    cc_config c = *cfg;
    c.warmup_steps = seg->from_step;
    c.lr = seg->from_lr;
    /* wsd already decaying (below lr) goes on decaying, linearly, instead of holding a new stable phase */
    if (strcmp(cfg->lr_schedule, "wsd") == 0 && seg->from_lr < cfg->lr) snprintf(c.lr_schedule, sizeof(c.lr_schedule), "linear");
    return planned_lr(&c, step);
}

void cc_optimizer_step(cc_executor *ex, const cc_config *cfg, cc_scaler *sc, cc_opt_counts *oc,
                       const cc_lr_segment *seg, long step, cc_step_report *rep)
{
    rep->lr = cc_lr_at(cfg, seg, step);
    rep->scale_used = sc->scale;
    const double n0 = sqrt(ex->ops->grad_scale_sumsq(ex, 1.0 / ex->grad_unit));
    double n1 = n0;
    if (cfg->max_grad_norm > 0 && n0 > cfg->max_grad_norm && isfinite(n0))
        n1 = sqrt(ex->ops->grad_scale_sumsq(ex, cfg->max_grad_norm / (n0 + 1e-6)));
    rep->norm = n0;
    rep->norm_clipped = n1;
    rep->skipped = !isfinite(n0) || !isfinite(n1) || n0 == 0.0;
    if (rep->skipped) {
        oc->skipped++;
        if (sc->dynamic && !isfinite(n0)) {
            sc->scale *= 0.5;
            sc->growth_count = 0;
        }
        return;
    }
    oc->applied++;
    ex->ops->adamw(ex, rep->lr, oc->applied);
    if (sc->dynamic && ++sc->growth_count >= sc->growth_interval) {
        sc->scale *= 2.0;
        sc->growth_count = 0;
    }
}
