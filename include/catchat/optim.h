/* The optimizer step of docs/model.md, shared by every executor:
 * unscale → global norm → clip → non-finite guard → AdamW → loss-scale update.
 * The decisions live here; the executor does the element-wise work. */
#ifndef CATCHAT_OPTIM_H
#define CATCHAT_OPTIM_H

#include "catchat/executor.h"

typedef struct cc_scaler {
    int dynamic;
    double scale;       /* S */
    long growth_count;  /* consecutive applied steps since the last change */
    long growth_interval;
} cc_scaler;

typedef struct cc_opt_counts {
    long applied; /* AdamW's k */
    long skipped;
} cc_opt_counts;

typedef struct cc_step_report {
    double lr, norm, norm_clipped, scale_used;
    int skipped;
} cc_step_report;

/* A schedule re-planned when a resumed run's max_steps changed: from step
 * from_step on, the schedule's shape runs from from_lr (the lr the run had
 * reached there) to lr_min at the new max_steps, in place of warmup and lr,
 * so the lr never jumps. from_step 0: the schedule as the config plans it. */
typedef struct cc_lr_segment {
    long from_step;
    double from_lr;
} cc_lr_segment;

void cc_scaler_init(cc_scaler *s, const cc_config *cfg);
/* Learning rate at `step` (0-based): linear warmup, then [train] lr_schedule
 * (cosine, linear or wsd to lr_min at max_steps, or constant); seg (NULL:
 * none) re-plans it from seg->from_step on. */
double cc_lr_at(const cc_config *cfg, const cc_lr_segment *seg, long step);
/* One optimizer step on the gradients the executor holds (of loss·S), at
 * the lr of cc_lr_at(cfg, seg, step). */
void cc_optimizer_step(cc_executor *ex, const cc_config *cfg, cc_scaler *sc, cc_opt_counts *oc,
                       const cc_lr_segment *seg, long step, cc_step_report *rep);

/* CPU element-wise backends (src/cpu/grad_reduce.c, src/cpu/adamw.c; the
 * reference for kernels/grad_reduce.cu and kernels/adamw.cu). */
double cpu_grad_reduce_sumsq(float *g, size_t n, double mul);
void cpu_adamw(const cc_layout *lay, float *params, const float *grads, float *m, float *v,
                  double lr, double wd, double beta1, double beta2, double eps, long k);

#endif
