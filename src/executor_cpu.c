/* The CPU reference as an executor: FP32 parameters, gradients and AdamW
 * moments in three buffers laid out by the parameter table. */
#define _DEFAULT_SOURCE /* sysinfo, getrlimit */
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/sysinfo.h>
#include "catchat/executor.h"
#include "catchat/optim.h"
#include "catchat/util.h"

typedef struct {
    float *params, *grads, *m, *v;
    cpu_acts acts;
    float *acc; /* gradient accumulation: the step's gradient so far (allocated on first use) */
} cpu_impl;

#define IMPL(ex) ((cpu_impl *)(ex)->impl)

static double cpu_forward_backward(cc_executor *ex, const int *x, const int *y, double scale)
{
    cpu_impl *c = IMPL(ex);
    const size_t n = ex->lay.total;
    memset(c->grads, 0, sizeof(float) * n);
    c->acts.check = ex->check;
    c->acts.plant = &ex->plant_grad_h;
    double loss = cpu_model_forward(&ex->lay, c->params, &c->acts, x, y, NULL);
    /* The CPU reference differentiates the mean loss: one summed position.
     * A micro-batch of n_k of the step's N scored positions scales its loss
     * by S·n_k/N: its per-position gradients are then those of the whole
     * step's mean, which the clamps (at c·S) see as in one batch. */
    double loss_scale = scale;
    if (ex->accum.n > 0) {
        long nk = 0;
        for (int i = 0; i < ex->B * ex->T; i++) nk += y[i] >= 0;
        loss_scale = scale * (double)nk / (double)ex->accum.n;
    }
    cpu_model_backward(&ex->lay, c->params, c->grads, &c->acts, x, y, loss_scale,
                       cc_clamp_dispatch_limit(ex->cfg.grad_h_clamp, scale, 1),
                       cc_clamp_dispatch_limit(ex->cfg.ctx_grad_clamp, scale, 1));
    if (ex->accum.n > 0) { /* the step's gradient so far, in its own buffer */
        if (!c->acc) c->acc = cc_malloc(sizeof(float) * n);
        if (ex->accum.index == 0) memcpy(c->acc, c->grads, sizeof(float) * n);
        else
            for (size_t i = 0; i < n; i++) c->acc[i] += c->grads[i];
        if (ex->accum.index == ex->accum.count - 1) memcpy(c->grads, c->acc, sizeof(float) * n);
    }
    ex->grad_unit = scale;
    return loss;
}

static void cpu_score(cc_executor *ex, const int *x, const int *y, cc_score *score)
{
    IMPL(ex)->acts.check = ex->check;
    cpu_model_forward(&ex->lay, IMPL(ex)->params, &IMPL(ex)->acts, x, y, score);
}

static double cpu_ex_grad_scale_sumsq(cc_executor *ex, double mul)
{
    return cpu_grad_reduce_sumsq(IMPL(ex)->grads, ex->lay.total, mul);
}

static void cpu_ex_adamw(cc_executor *ex, double lr, long k)
{
    cpu_impl *c = IMPL(ex);
    const cc_config *cf = &ex->cfg;
    cpu_adamw(&ex->lay, c->params, c->grads, c->m, c->v, lr, cf->weight_decay, cf->beta1, cf->beta2, cf->adam_eps, k);
}

static void cpu_get_params(cc_executor *ex, float *p) { memcpy(p, IMPL(ex)->params, sizeof(float) * ex->lay.total); }
static void cpu_set_params(cc_executor *ex, const float *p) { memcpy(IMPL(ex)->params, p, sizeof(float) * ex->lay.total); }
static void cpu_get_grads(cc_executor *ex, float *g) { memcpy(g, IMPL(ex)->grads, sizeof(float) * ex->lay.total); }
static void cpu_set_grads(cc_executor *ex, const float *g, double unit)
{
    memcpy(IMPL(ex)->grads, g, sizeof(float) * ex->lay.total);
    ex->grad_unit = unit;
}

static void cpu_get_moments(cc_executor *ex, float *m, float *v)
{
    memcpy(m, IMPL(ex)->m, sizeof(float) * ex->lay.total);
    memcpy(v, IMPL(ex)->v, sizeof(float) * ex->lay.total);
}

static void cpu_set_moments(cc_executor *ex, const float *m, const float *v)
{
    memcpy(IMPL(ex)->m, m, sizeof(float) * ex->lay.total);
    memcpy(IMPL(ex)->v, v, sizeof(float) * ex->lay.total);
}

static void cpu_get_token_losses(cc_executor *ex, float *loss)
{
    memcpy(loss, IMPL(ex)->acts.row_loss, sizeof(float) * ex->B * ex->T);
}

static void cpu_get_input_grad(cc_executor *ex, float *du0)
{
    memcpy(du0, IMPL(ex)->acts.du, sizeof(float) * (size_t)ex->B * ex->T * ex->lay.dims.D);
}

static void cpu_destroy(cc_executor *ex)
{
    cpu_impl *c = IMPL(ex);
    cpu_acts_free(&c->acts);
    free(c->params);
    free(c->grads);
    free(c->acc);
    free(c->m);
    free(c->v);
    free(c);
    free(ex);
}

static const cc_executor_ops CPU_OPS = {
    .forward_backward = cpu_forward_backward,
    .score = cpu_score,
    .grad_scale_sumsq = cpu_ex_grad_scale_sumsq,
    .adamw = cpu_ex_adamw,
    .get_params = cpu_get_params,
    .set_params = cpu_set_params,
    .get_grads = cpu_get_grads,
    .set_grads = cpu_set_grads,
    .get_moments = cpu_get_moments,
    .set_moments = cpu_set_moments,
    .get_token_losses = cpu_get_token_losses,
    .get_input_grad = cpu_get_input_grad,
    .destroy = cpu_destroy,
};

/* Host bytes of the executor at batch B: `fixed` for parameters, gradients,
 * AdamW moments and the accumulation buffer, `per_seq` for each sequence's
 * activations (cpu_acts_alloc's table, at one sequence: every buffer is
 * linear in the batch). */
static void cpu_bytes(const cc_config *cfg, size_t params, int T, double *fixed, double *per_seq)
{
    const cc_dims d = cc_dims_from_config(cfg);
    *per_seq = sizeof(float) * (double)cpu_acts_elems(&d, 1, T);
    *fixed = sizeof(float) * (double)params * (cfg->grad_accum > 1 ? 5 : 4);
}

/* The most host memory this process can hold: memory and swap, or ulimit -v
 * or the cgroup's limit where lower; *what names which. 0 when unknown. */
static double host_memory_limit(const char **what)
{
    double lim = 0;
    struct sysinfo si;
    if (sysinfo(&si) == 0) {
        lim = ((double)si.totalram + (double)si.totalswap) * si.mem_unit;
        *what = "memory and swap";
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && (!lim || rl.rlim_cur < lim)) {
        lim = (double)rl.rlim_cur;
        *what = "address space (ulimit -v)";
    }
    const char *cgroup[] = { "/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes" };
    for (int i = 0; i < 2; i++) {
        FILE *f = fopen(cgroup[i], "r");
        unsigned long long n; /* "max" (no limit) does not scan */
        if (f && fscanf(f, "%llu", &n) == 1 && (!lim || n < lim)) {
            lim = (double)n;
            *what = "memory of this cgroup";
        }
        if (f) fclose(f);
    }
    return lim;
}

/* A run whose buffers cannot fit in what the host can give is refused
 * before anything is allocated: the allocations would otherwise fail one by
 * one with sizes that name no key, or succeed (pages are only reserved) and
 * the run be killed mid-step when they are touched. Sizes that fit are not
 * judged: whether the memory is free is the allocations' business. */
static int check_host_memory(const cc_config *cfg, size_t params, int B, int T)
{
    const char *what = "";
    const double limit = host_memory_limit(&what);
    double fixed, per_seq;
    cpu_bytes(cfg, params, T, &fixed, &per_seq);
    const double need = fixed + per_seq * B;
    if (!limit || need <= limit) return 0;
    /* a smaller batch: a divisor keeps the step's sequences through
     * grad_accum where that stays within the key's range */
    const double most = (limit - fixed) / per_seq;
    char fit[160] = "not even batch_size = 1 fits: lower seq_len (or d_model, n_layers)";
    if (most >= 1) snprintf(fit, sizeof(fit), "batch_size = %ld fits", (long)most);
    for (int k = 2; most >= 1 && k <= B; k++)
        if (B % k == 0 && B / k <= most && (long)k * cfg->grad_accum <= 1 << 16) {
            snprintf(fit, sizeof(fit), "batch_size = %d fits, with grad_accum = %d to keep the step's %d sequences",
                     B / k, k * cfg->grad_accum, B * cfg->grad_accum);
            break;
        }
    char need_h[32], seq_h[32], limit_h[32];
    cc_format_bytes(need_h, sizeof(need_h), need);
    cc_format_bytes(seq_h, sizeof(seq_h), per_seq);
    cc_format_bytes(limit_h, sizeof(limit_h), limit);
    return cc_error("the CPU reference needs about %s of host memory for batch_size %d x seq_len %d (%s a sequence at "
                    "d_model %d, n_layers %d, vocab_size %d, n_heads %d x ctx_window %d), more than the %s of %s: "
                    "lower batch_size or seq_len (%s)", need_h, B, T, seq_h, cfg->d_model, cfg->n_layers,
                    cfg->vocab_size, cfg->n_heads, cfg->ctx_window, limit_h, what, fit);
}

cc_executor *cc_cpu_executor_create(const cc_config *cfg, int B, int T)
{
    /* [run] threads: OpenMP's team size for the whole process (the reference
     * is the only OpenMP user); 0 leaves OpenMP's default, all cores. */
    if (cfg->threads > 0) omp_set_num_threads(cfg->threads);
    cc_executor *ex = cc_calloc(1, sizeof(*ex));
    ex->ops = &CPU_OPS;
    ex->name = "cpu";
    ex->cfg = *cfg;
    ex->B = B;
    ex->T = T;
    ex->grad_unit = 1.0;
    cc_dims d = cc_dims_from_config(cfg);
    cc_layout_build(&ex->lay, &d);
    if (check_host_memory(cfg, ex->lay.total, B, T) != 0) {
        free(ex);
        return NULL;
    }
    cpu_impl *c = cc_calloc(1, sizeof(*c));
    c->params = cc_calloc(ex->lay.total, sizeof(float));
    c->grads = cc_calloc(ex->lay.total, sizeof(float));
    c->m = cc_calloc(ex->lay.total, sizeof(float));
    c->v = cc_calloc(ex->lay.total, sizeof(float));
    cpu_acts_alloc(&c->acts, &d, B, T);
    cc_layout_init_params(&ex->lay, c->params, cfg->seed);
    ex->impl = c;
    return ex;
}
