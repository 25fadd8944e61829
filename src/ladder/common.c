/* The ladder's shared checks and buffers (declared in ladder.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/safetensors.h"
#include "catchat/util.h"
#include "ladder/ladder.h"

/* ---- checks ---- */
void check(stage *st, const char *what, const float *gpu, const float *ref, size_t n, double tol, int warn_only)
{
    double num = 0, den = 0, mx = 0;
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        const double g = st->plant ? 1.25 * gpu[i] : gpu[i];
        if (!isfinite(g) || !isfinite(ref[i])) { bad = 1; break; }
        const double d = g - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
        if (fabs(d) > mx) mx = fabs(d);
    }
    const double rel = bad ? INFINITY : sqrt(num) / fmax(sqrt(den), 1e-30);
    if (mx > st->max_abs || bad) st->max_abs = bad ? INFINITY : mx;
    const double ratio = rel / tol;
    if (ratio >= st->worst_ratio || bad) {
        st->worst_ratio = bad ? INFINITY : ratio;
        st->worst_rel = rel;
        st->worst_tol = tol;
        snprintf(st->worst, sizeof(st->worst), "%s", what);
    }
    if (bad || rel > tol) {
        if (warn_only && !bad) st->warn = 1;
        else st->fail = 1;
    }
}

void check_flag(stage *st, const char *what, int ok)
{
    if (!ok) {
        st->fail = 1;
        snprintf(st->note, sizeof(st->note), "%s: FAILED", what);
    }
}

void check_plan(stage *st, const char *what, int ok)
{
    if (!ok && !st->fail) st->plan_off = 1; /* numbers that failed first stay the verdict */
    check_flag(st, what, ok);
}

void stage_skip_part(stage *st, const char *why)
{
    const size_t len = strlen(st->part_skipped);
    if (!strstr(st->part_skipped, why))
        snprintf(st->part_skipped + len, sizeof(st->part_skipped) - len, "%s%s", len ? "; " : "", why);
}

void stage_skip(stage *st, const char *why)
{
    if (!st->skip) snprintf(st->why, sizeof(st->why), "%s", why);
    st->skip = 1;
}

/* ---- device buffers ---- */
float *dev_f32(const float *host, size_t n)
{
    float *d = cc_device_alloc(4 * n, "ladder buffer");
    if (host) cudaCheck(cudaMemcpy(d, host, 4 * n, cudaMemcpyHostToDevice));
    else cudaCheck(cudaMemset(d, 0xff, 4 * n)); /* poison: NaN */
    return d;
}

void *dev_f16(const float *host, size_t n)
{
    uint16_t *h = cc_malloc(2 * (n ? n : 1));
    for (size_t i = 0; i < n; i++) h[i] = host ? cc_float_to_half(host[i]) : 0xffff;
    void *d = cc_device_alloc(2 * n, "ladder buffer");
    cudaCheck(cudaMemcpy(d, h, 2 * n, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

gpu_scratch *norm_scratch(const gpu_caps *caps, int M, int D)
{
    size_t need[SCRATCH_KINDS] = { 0 };
    gpu_scratch_need(need, SCRATCH_REDUCE, rmsnorm_backward_scratch_bytes(M, D, caps));
    return gpu_scratch_create(need);
}

float *get_f32(const float *dev, size_t n)
{
    float *h = cc_malloc(4 * n);
    cudaCheck(cudaDeviceSynchronize());
    cudaCheck(cudaMemcpy(h, dev, 4 * n, cudaMemcpyDeviceToHost));
    return h;
}

float *get_f16(const void *dev, size_t n)
{
    uint16_t *h = cc_malloc(2 * n);
    float *f = cc_malloc(4 * n);
    cudaCheck(cudaDeviceSynchronize());
    cudaCheck(cudaMemcpy(h, dev, 2 * n, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) f[i] = cc_half_to_float(h[i]);
    free(h);
    return f;
}

uint16_t *dev_f16_guarded(const float *host, size_t n, size_t guard)
{
    uint16_t *h = cc_malloc(2 * (n + 2 * guard));
    for (size_t i = 0; i < n + 2 * guard; i++) h[i] = 0x7e00; /* FP16 NaN */
    for (size_t i = 0; i < n; i++) h[guard + i] = cc_float_to_half(host[i]);
    uint16_t *d = cc_device_alloc(2 * (n + 2 * guard), "ladder buffer");
    cudaCheck(cudaMemcpy(d, h, 2 * (n + 2 * guard), cudaMemcpyHostToDevice));
    free(h);
    return d + guard;
}

float *rand_vec(cc_rng *r, size_t n, double sd, int f16)
{
    float *v = cc_malloc(4 * n);
    for (size_t i = 0; i < n; i++) {
        v[i] = (float)(sd * cc_rng_normal(r));
        if (f16) v[i] = cc_half_to_float(cc_float_to_half(v[i]));
    }
    return v;
}

/* ---- the executor stages ---- */
void small_config(const ladder_ctx *cx, cc_config *c)
{
    cc_config_tiny(c);
    snprintf(c->gpu_profile, sizeof(c->gpu_profile), "%s", cx->gpu_profile);
    c->loss_scale = 128;
    c->grad_h_clamp = 1000;
}

float *plant_grads(cc_rng *r, cc_executor *a, cc_executor *b, double unit_a, double unit_b)
{
    const size_t n = a->lay.total;
    float *g = rand_vec(r, n, 1e-2, 0), *ga = cc_malloc(4 * n), *gb = cc_malloc(4 * n);
    for (size_t i = 0; i < n; i++) {
        ga[i] = (float)(g[i] * unit_a);
        gb[i] = (float)(g[i] * unit_b);
    }
    a->ops->set_grads(a, ga, unit_a);
    b->ops->set_grads(b, gb, unit_b);
    FREE_ALL(ga, gb);
    return g;
}

int executor_pair(stage *st, const cc_config *c, int B, int T, cc_executor **cpu, cc_executor **gpu)
{
    *cpu = cc_cpu_executor_create(c, B, T);
    *gpu = cc_gpu_executor_create(c, B, T);
    /* every step the ladder runs keeps to the memory its operations declare, or stops saying where */
    if (*gpu) cc_gpu_check_accesses(*gpu, 1);
    if (*gpu) return 1;
    (*cpu)->ops->destroy(*cpu); /* the executor said why (one line above) */
    stage_skip(st, "the GPU executor does not run on this GPU");
    return 0;
}
