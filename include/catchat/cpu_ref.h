/* The CPU reference of docs/model.md, in plain C. The same sources are compiled
 * twice: with `real` = float (names as written: cpu_rmsnorm_forward, ...) for
 * training and as the ladder's reference, and with `real` = double (names with
 * an _f64 suffix) for the finite-difference gradient check. The declarations
 * live in cpu_ref_api.inc, included once per precision. */
#ifndef CATCHAT_CPU_REF_H
#define CATCHAT_CPU_REF_H

#include <stddef.h>
#include "catchat/finite.h"
#include "catchat/layout.h"

/* Scored-position counts for loss / top-1 / top-5. */
typedef struct cc_score {
    double loss_sum; /* sum of CE over scored positions (nats) */
    long scored, top1, top5;
} cc_score;

#define CC_R float
#define CC_FN(name) name
#include "catchat/cpu_ref_api.inc"
#undef CC_R
#undef CC_FN

#define CC_R double
#define CC_FN(name) name##_f64
#include "catchat/cpu_ref_api.inc"
#undef CC_R
#undef CC_FN

#endif
