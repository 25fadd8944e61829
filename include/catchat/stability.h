/* Stability tools: the length bisect and the CPU/GPU norm audit. */
#ifndef CATCHAT_STABILITY_H
#define CATCHAT_STABILITY_H

#include <stdio.h>
#include "catchat/config.h"
#include "catchat/finite.h"

#define CC_BISECT_MAX 16

typedef struct cc_bisect_result {
    int length;
    long steps_done;   /* steps that stayed finite */
    long nonfinite_step; /* 0 = finite through all steps */
    double first_loss, last_loss, ms_per_step;
    cc_finite_report where;
} cc_bisect_result;

/* Same initial weights (the config's seed) and the same batches at every cap:
 * windows of max(lengths)+1 tokens, truncated to each length. */
int cc_bisect(const cc_config *cfg, const int *lengths, int n, long steps, cc_bisect_result *res, FILE *out);

typedef enum {
    AUDIT_AGREE,          /* differences are small noise: summation order, FP16 rounding */
    AUDIT_UNIFORM_SCALE,  /* one norm ratio everywhere: a missing unscale or a scale applied twice */
    AUDIT_PER_TOKEN,      /* the ratio varies per token: a per-token scale difference */
    AUDIT_MISMATCH        /* large differences without a scale pattern */
} cc_audit_verdict;

typedef struct cc_audit_opts {
    const char *ckpt;       /* weights (NULL: the config's seed) */
    int length;             /* positions of the one sequence (0: the config's seq_len) */
    const char *device_a, *device_b;
    double loss_scale;      /* S for both sides */
    const char *plant;      /* NULL, "unscale" or "token-scale": a planted fault on side B */
} cc_audit_opts;

int cc_audit(const cc_config *cfg, const cc_audit_opts *o, cc_audit_verdict *verdict, FILE *out);
const char *cc_audit_verdict_name(cc_audit_verdict v);

#endif
