/* `catchat bench`: step time of a config on the GPU (median after warm-up),
 * its breakdown by phase (CUDA events), µs per timestep per layer of the
 * recurrence, and the CPU reference on the same fixture. */
#ifndef CATCHAT_BENCH_H
#define CATCHAT_BENCH_H

#include <stdio.h>
#include "catchat/config.h"

struct gpu_step_plan;
typedef struct cc_bench_opts {
    int steps, warmup, cpu_steps, json;
    const struct gpu_step_plan *plan; /* the GPU executor's (cc_executor_plan), checked by the preflight; NULL:
                                       * made by the executor */
} cc_bench_opts;

/* 0, -1 on error, or CC_BENCH_NOTHING_MEASURED when there was no GPU to time
 * and no CPU steps were asked for (the CLI exits 77: skipped). */
#define CC_BENCH_NOTHING_MEASURED 77
int cc_bench(const cc_config *cfg, const cc_bench_opts *o, FILE *out);

#endif
