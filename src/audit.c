/* catchat audit: one long sequence through two executors (CPU and GPU by
 * default), compared token by token and tensor by tensor, with a verdict that
 * tells the seed's three causes of a gradient-norm disagreement apart:
 *   - one norm ratio everywhere          → a missing unscale or a scale applied twice
 *   - a ratio that varies per token      → a per-token scale difference
 *   - small relative errors, ratio ≈ 1   → summation order / FP16 rounding (no bug)
 * Per token the ratio is ‖du⁰_B[t]‖ / ‖du⁰_A[t]‖, the gradient reaching each
 * position's embedding output; per tensor it is ‖g_B‖ / ‖g_A‖ (unscaled). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/checkpoint.h"
#include "catchat/data.h"
#include "catchat/executor.h"
#include "catchat/stability.h"
#include "catchat/device.h"
#include "catchat/util.h"

#define NOISE_TOL 3e-2   /* FP16 operands through a whole backward: the ladder's stage-9 scale */
#define UNIFORM_CV 0.05  /* a ratio this steady across tokens is one scale */

const char *cc_audit_verdict_name(cc_audit_verdict v)
{
    switch (v) {
    case AUDIT_AGREE: return "agree: the differences are small noise (summation order, FP16 rounding)";
    case AUDIT_UNIFORM_SCALE: return "uniform norm ratio: a missing unscale or a scale applied twice";
    case AUDIT_PER_TOKEN: return "norm ratio varies per token: a per-token scale difference";
    case AUDIT_MISMATCH: return "large differences with no scale pattern: a stage computes something else "
                                "(run catchat ladder)";
    }
    return "?";
}

typedef struct {
    cc_executor *ex;
    float *g, *du0, *loss;
    double loss_mean;
} side;

static int run_side(side *sd, const cc_config *cfg, const char *which, const char *device, const float *params,
                    const int *x, const int *y, int T, double S)
{
    const int gpus = strcmp(device, "gpu") == 0 ? cc_gpu_count() : 1;
    if (gpus < 0) return -1; /* the driver fails: cc_gpu_count said why */
    if (gpus == 0)
        return cc_error("audit: --device-%s gpu, but no CUDA device is visible: run it where one is, or compare "
                        "with --device-%s cpu", which, which);
    cc_config c = *cfg;
    c.seq_len = T;
    c.batch_size = 1;
    snprintf(c.device, sizeof(c.device), "%s", device);
    sd->ex = cc_executor_create(&c, 1, T);
    if (!sd->ex) return -1;
    cc_executor *ex = sd->ex;
    ex->ops->set_params(ex, params);
    sd->loss_mean = ex->ops->forward_backward(ex, x, y, S);
    sd->g = cc_malloc(sizeof(float) * ex->lay.total);
    sd->du0 = cc_malloc(sizeof(float) * (size_t)T * ex->lay.dims.D);
    sd->loss = cc_malloc(sizeof(float) * T);
    ex->ops->get_grads(ex, sd->g);
    ex->ops->get_input_grad(ex, sd->du0);
    ex->ops->get_token_losses(ex, sd->loss);
    /* unscale: both sides in units of the mean loss */
    for (size_t i = 0; i < ex->lay.total; i++) sd->g[i] = (float)(sd->g[i] / ex->grad_unit);
    for (size_t i = 0; i < (size_t)T * ex->lay.dims.D; i++) sd->du0[i] = (float)(sd->du0[i] / ex->grad_unit);
    return 0;
}

static void free_side(side *sd)
{
    if (sd->ex) sd->ex->ops->destroy(sd->ex);
    free(sd->g);
    free(sd->du0);
    free(sd->loss);
}

static double norm2(const float *a, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * a[i];
    return sqrt(s);
}

static double rel_err(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return sqrt(num) / fmax(sqrt(den), 1e-30);
}

int cc_audit(const cc_config *cfg, const cc_audit_opts *o, cc_audit_verdict *verdict, FILE *out)
{
    const int T = o->length > 0 ? o->length : cfg->seq_len;
    const double S = o->loss_scale;
    cc_tokens tok;
    if (cc_tokens_load_as(&tok, cfg->val, cfg->vocab_size, cfg->data_format) != 0) return -1;
    if (tok.n < (size_t)T + 1) {
        cc_tokens_free(&tok);
        return cc_error("audit: %s has %zu tokens, fewer than --length %d + 1", cfg->val, tok.n, T);
    }
    int *x = cc_malloc(sizeof(int) * T), *y = cc_malloc(sizeof(int) * T);
    int bad = 0;
    for (int t = 0; t <= T && !bad; t++) { /* the ids as a batch reads them: checked */
        const uint32_t id = cc_tokens_at(&tok, (size_t)t);
        if ((bad = id >= (uint32_t)cfg->vocab_size))
            cc_error("%s: token %d has id %u >= vocab_size %d", cfg->val, t, id, cfg->vocab_size);
        if (t < T) x[t] = (int)id;
        if (t > 0) y[t - 1] = (int)id;
    }
    cc_tokens_free(&tok);
    if (bad) {
        free(x);
        free(y);
        return -1;
    }
    cc_dims d = cc_dims_from_config(cfg);
    cc_layout lay;
    cc_layout_build(&lay, &d);
    float *params = cc_calloc(lay.total, sizeof(float));
    cc_layout_init_params(&lay, params, cfg->seed);
    int rc = o->ckpt ? cc_checkpoint_load(o->ckpt, &lay, params, NULL, NULL, NULL, NULL, NULL) : 0;
    side a = { 0 }, b = { 0 };
    if (rc == 0) rc = run_side(&a, cfg, "a", o->device_a, params, x, y, T, S);
    if (rc == 0) rc = run_side(&b, cfg, "b", o->device_b, params, x, y, T, S);
    if (rc != 0) goto done;
    const int D = d.D;
    if (o->plant && strcmp(o->plant, "unscale") == 0) { /* side B forgot to divide by S */
        for (size_t i = 0; i < lay.total; i++) b.g[i] = (float)(b.g[i] * S);
        for (size_t i = 0; i < (size_t)T * D; i++) b.du0[i] = (float)(b.du0[i] * S);
    } else if (o->plant && strcmp(o->plant, "token-scale") == 0) { /* a scale that depends on the position */
        for (int t = 0; t < T; t++)
            for (int i = 0; i < D; i++) b.du0[(size_t)t * D + i] *= (float)(1.0 + (double)t / T);
    } else if (o->plant) {
        rc = cc_error("audit: --plant '%s': expected unscale or token-scale", o->plant);
        goto done;
    }
    fprintf(out, "catchat audit: %s (A) vs %s (B), one sequence of %d tokens, loss scale %g%s%s\n", o->device_a,
            o->device_b, T, S, o->plant ? ", planted fault on B: " : "", o->plant ? o->plant : "");
    double max_dl = 0, sum_dl = 0;
    for (int t = 0; t < T; t++) {
        const double dl = fabs((double)b.loss[t] - a.loss[t]);
        max_dl = fmax(max_dl, dl);
        sum_dl += dl;
    }
    fprintf(out, "loss: A %.6f, B %.6f; per token |B - A| max %.3e, mean %.3e\n", a.loss_mean, b.loss_mean, max_dl,
            sum_dl / T);
    fprintf(out, "%-24s %12s %12s %10s %10s\n", "tensor", "|g_A|", "|g_B|", "ratio", "rel err");
    double worst_rel = 0, rmin = INFINITY, rmax = 0;
    for (int i = 0; i < lay.n; i++) {
        const cc_tensor_info *t = &lay.t[i];
        const double na = norm2(a.g + t->offset, t->numel), nb = norm2(b.g + t->offset, t->numel);
        const double ratio = nb / fmax(na, 1e-30), re = rel_err(b.g + t->offset, a.g + t->offset, t->numel);
        fprintf(out, "%-24s %12.4e %12.4e %10.4f %10.3e\n", t->name, na, nb, ratio, re);
        worst_rel = fmax(worst_rel, isfinite(re) ? re : INFINITY);
        rmin = fmin(rmin, ratio);
        rmax = fmax(rmax, ratio);
    }
    /* per-token ratios of the gradient reaching each position */
    double sum = 0, sum2 = 0, tmin = INFINITY, tmax = 0;
    int counted = 0;
    for (int t = 0; t < T; t++) {
        const double na = norm2(a.du0 + (size_t)t * D, (size_t)D), nb = norm2(b.du0 + (size_t)t * D, (size_t)D);
        if (na < 1e-30) continue;
        const double r = nb / na;
        sum += r;
        sum2 += r * r;
        tmin = fmin(tmin, r);
        tmax = fmax(tmax, r);
        counted++;
    }
    const double mean = counted ? sum / counted : 1, cv = counted ? sqrt(fmax(sum2 / counted - mean * mean, 0)) / mean : 0;
    fprintf(out, "per-token ratio |du0_B[t]| / |du0_A[t]|: mean %.4f, min %.4f, max %.4f, spread (CV) %.3f\n", mean,
            tmin, tmax, cv);
    if (worst_rel <= NOISE_TOL && fabs(mean - 1) <= NOISE_TOL && cv <= UNIFORM_CV) *verdict = AUDIT_AGREE;
    else if (cv > UNIFORM_CV) *verdict = AUDIT_PER_TOKEN;
    else if (fabs(mean - 1) > NOISE_TOL && rmax / rmin < 1 + UNIFORM_CV) *verdict = AUDIT_UNIFORM_SCALE;
    else *verdict = AUDIT_MISMATCH;
    fprintf(out, "verdict: %s", cc_audit_verdict_name(*verdict));
    if (*verdict == AUDIT_UNIFORM_SCALE) fprintf(out, " (ratio %.4g; loss scale %g)", mean, S);
    fprintf(out, "\n");
done:
    free_side(&a);
    free_side(&b);
    free(params);
    free(x);
    free(y);
    return rc;
}
