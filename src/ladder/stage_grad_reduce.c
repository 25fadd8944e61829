/* grad_reduce (gradient reduction): unscale, global norm, clip and non-finite
 * detection on both executors; with a communicator, also the NCCL all-reduce
 * against the sum of every rank's plants. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/dist.h"
#include "catchat/executor.h"
#include "catchat/util.h"
#include "ladder/ladder.h"

/* With a communicator: every rank plants its own gradients (seeded by rank),
 * the NCCL sum must equal the sum of all ranks' plants computed here. */
static void check_allreduce(stage *st, cc_dist *d, uint64_t seed)
{
    const size_t n = 100003; /* not a multiple of anything NCCL chunks by */
    float *mine = cc_malloc(4 * n), *want = cc_calloc(n, 4);
    for (int rk = 0; rk < d->world; rk++) {
        cc_rng rr;
        cc_rng_seed(&rr, seed + 1000003ULL * (uint64_t)rk);
        for (size_t i = 0; i < n; i++) {
            const float v = (float)cc_rng_normal(&rr);
            want[i] += v;
            if (rk == d->rank) mine[i] = v;
        }
    }
    float *dev = dev_f32(mine, n);
    cc_dist_allreduce_f32(d, dev, n, 0);
    float *got = get_f32(dev, n);
    check(st, "NCCL all-reduce (sum over ranks)", got, want, n, 1e-6, 0); /* FP32 sums in another order */
    FREE_ALL(mine, want, got);
    cudaFree(dev);
}

static void run_grad_reduce(const ladder_ctx *cx, stage *st)
{
    cc_rng *r = cx->rng;
    cc_dist *d = cx->dist;
    cc_config c;
    small_config(cx, &c);
    c.max_grad_norm = 0.5;
    snprintf(st->shape, sizeof(st->shape), "unscale S*N=128*96, clip to 0.5, planted NaN; world size %d%s",
             d ? d->world : 1, d && d->active ? " (NCCL)" : "");
    if (d && d->active) check_allreduce(st, d, 77);
    cc_executor *cpu, *gpu;
    if (!executor_pair(st, &c, 1, 8, &cpu, &gpu)) return;
    const size_t n = cpu->lay.total;
    float *g = plant_grads(r, cpu, gpu, 128.0, 128.0 * 96);
    const double sc = cpu->ops->grad_scale_sumsq(cpu, 1.0 / cpu->grad_unit);
    const double sg = gpu->ops->grad_scale_sumsq(gpu, 1.0 / gpu->grad_unit);
    float n0c = (float)sqrt(sc), n0g = (float)sqrt(sg);
    check(st, "n0", &n0g, &n0c, 1, 1e-5, 0); /* FP32 partial sums vs a double sum */
    const double mul = c.max_grad_norm / (n0c + 1e-6);
    float n1c = (float)sqrt(cpu->ops->grad_scale_sumsq(cpu, mul)), n1g = (float)sqrt(gpu->ops->grad_scale_sumsq(gpu, mul));
    check(st, "n1 (clipped)", &n1g, &n1c, 1, 1e-5, 0);
    float *gc = cc_malloc(4 * n), *gg = cc_malloc(4 * n);
    cpu->ops->get_grads(cpu, gc);
    gpu->ops->get_grads(gpu, gg);
    check(st, "clipped grads", gg, gc, n, 1e-5, 0);
    gg[n / 2] = NAN; /* non-finite detection */
    gpu->ops->set_grads(gpu, gg, 1.0);
    gc[n / 2] = NAN;
    cpu->ops->set_grads(cpu, gc, 1.0);
    const double bad_g = gpu->ops->grad_scale_sumsq(gpu, 1.0), bad_c = cpu->ops->grad_scale_sumsq(cpu, 1.0);
    check_flag(st, "planted NaN detected", !isfinite(bad_g) && !isfinite(bad_c));
    FREE_ALL(g, gc, gg);
    cpu->ops->destroy(cpu);
    gpu->ops->destroy(gpu);
}

const ladder_stage ladder_stage_grad_reduce = { "grad_reduce", "gradient reduction", run_grad_reduce };
