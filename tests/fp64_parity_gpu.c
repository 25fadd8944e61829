/* The GPU step at a wide model against the CPU reference in double
 * precision: one forward and backward of the same seeded weights and batch,
 * the loss within 1e-3 and every parameter tensor's gradient within 3e-2
 * (relative L2 error), NaN failing. The ladder's full-step stage checks the
 * GPU against the FP32 reference at small widths; this checks the kernels a
 * wide model takes (D=2048 by default: the per-step recurrence on the
 * H100, the band attention at head size 256; with --set ctx_window=160 the
 * tiled one) against an exact reference, at a size the double-precision
 * CPU model runs in seconds.
 *
 *   fp64_parity_gpu [D=2048] [--set key=value]...
 *
 * B=4, T=48, L=2, H=8, W=32, V=256 unless --set says otherwise; loss scale
 * 128 and the grad_h clamp 1000 (unscaled), as the ladder's cases. Exit 0 on
 * a pass, 1 on a failure, 77 without a GPU (CTest: skipped). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/config.h"
#include "catchat/cpu_ref.h"
#include "catchat/device.h"
#include "catchat/executor.h"
#include "catchat/layout.h"
#include "catchat/rng.h"

#define LOSS_TOL 1e-3
#define GRAD_TOL 3e-2

int main(int argc, char **argv)
{
    cc_config c;
    cc_config_defaults(&c);
    c.d_model = 2048;
    c.n_layers = 2;
    c.n_heads = 8;
    c.ctx_window = 32;
    c.seq_len = 48;
    c.batch_size = 4;
    c.vocab_size = 256;
    c.loss_scale = 128;
    c.loss_scale_dynamic = 0;
    c.grad_h_clamp = 1000;
    snprintf(c.device, sizeof(c.device), "gpu");
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--set") == 0 && i + 1 < argc) {
            if (cc_config_set_arg(&c, argv[++i]) != 0) return 2; /* said why */
        } else if (argv[i][0] != '-') {
            c.d_model = atoi(argv[i]);
        } else {
            fprintf(stderr, "usage: fp64_parity_gpu [D] [--set key=value]...\n");
            return 2;
        }
    }
    if (cc_gpu_count() <= 0) {
        printf("fp64_parity_gpu: skipped (no CUDA device)\n");
        return 77;
    }
    const int B = c.batch_size, T = c.seq_len;
    const double S = c.loss_scale;
    cc_dims d = cc_dims_from_config(&c);
    cc_layout lay;
    cc_layout_build(&lay, &d);
    const size_t n = lay.total;
    float *pf = malloc(sizeof(float) * n), *gg = malloc(sizeof(float) * n);
    double *pd = malloc(sizeof(double) * n), *gd = calloc(n, sizeof(double));
    int *x = malloc(sizeof(int) * B * T), *y = malloc(sizeof(int) * B * T);
    cc_layout_init_params(&lay, pf, 11);
    for (size_t i = 0; i < n; i++) pd[i] = pf[i];
    cc_rng r;
    cc_rng_seed(&r, 5);
    for (int i = 0; i < B * T; i++) {
        x[i] = (int)cc_rng_below(&r, (uint64_t)d.V);
        y[i] = i % T >= T - 3 ? -1 : (int)cc_rng_below(&r, (uint64_t)d.V); /* the last 3 positions not scored */
    }

    cc_executor *gpu = cc_gpu_executor_create(&c, B, T);
    if (!gpu) return 1; /* said why */
    gpu->ops->set_params(gpu, pf);
    const double loss_g = gpu->ops->forward_backward(gpu, x, y, S);
    gpu->ops->get_grads(gpu, gg);
    const double unit = gpu->grad_unit;
    gpu->ops->destroy(gpu);

    cpu_acts_f64 acts;
    if (cpu_acts_alloc_f64(&acts, &d, B, T) != 0) return 1;
    const double loss_r = cpu_model_forward_f64(&lay, pd, &acts, x, y, NULL);
    cpu_model_backward_f64(&lay, pd, gd, &acts, x, y, S, cc_clamp_dispatch_limit(c.grad_h_clamp, S, 1),
                           cc_clamp_dispatch_limit(c.ctx_grad_clamp, S, 1));
    cpu_acts_free_f64(&acts);

    int fails = 0;
    const double le = fabs(loss_g - loss_r) / fabs(loss_r);
    printf("fp64 parity: D=%d L=%d H=%d W=%d B=%d T=%d V=%d, loss scale %g\n", d.D, d.L, d.H, d.W, B, T, d.V, S);
    printf("  %-28s %12.6g %12.6g rel %.3e  %s\n", "loss (GPU, FP64)", loss_g, loss_r, le,
           le <= LOSS_TOL ? "PASS" : "FAIL");
    fails += !(le <= LOSS_TOL);
    for (int t = 0; t < lay.n; t++) {
        const cc_tensor_info *ti = &lay.t[t];
        double diff = 0, den = 0;
        for (size_t k = 0; k < ti->numel; k++) {
            const double a = gg[ti->offset + k] / unit, b = gd[ti->offset + k] / S;
            diff += (a - b) * (a - b);
            den += b * b;
        }
        const double rel = den > 0 ? sqrt(diff / den) : sqrt(diff);
        const int ok = rel <= GRAD_TOL; /* NaN fails */
        printf("  %-28s %12s %12s rel %.3e  %s\n", ti->name, "", "", rel, ok ? "PASS" : "FAIL");
        fails += !ok;
    }
    printf("fp64 parity: %s (loss %g, gradients %g relative)\n", fails ? "FAILED" : "passed", LOSS_TOL, GRAD_TOL);
    free(pf), free(gg), free(pd), free(gd), free(x), free(y);
    return fails ? 1 : 0;
}
