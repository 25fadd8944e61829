/* RMSNorm of the CPU reference (src/cpu/rmsnorm.c): its guards (the identity
 * fallback, the cap on the inverse RMS) exactly, and the ordinary branch
 * against finite differences in double precision. The GPU kernels are checked
 * against it by the ladder's rmsnorm stage. */
#include <criterion/criterion.h>
#include <math.h>
#include "catchat/cpu_ref.h"
#include "catchat/rng.h"
#include "helpers.h"

/* RMSNorm rows at the identity fallback, under the cap, and ordinary rows. */
Test(rmsnorm, guards_forward_and_backward)
{
    enum { D = 8, M = 3 };
    const cc_norm_consts nc = { 0.0, 1e-8, 1000.0 }; /* eps 0 lets the cap bind */
    double x[M * D], g[D], y[M * D], ir[M], dy[M * D], dx[M * D] = { 0 }, dg[D] = { 0 };
    cc_rng r;
    cc_rng_seed(&r, 11);
    for (int i = 0; i < D; i++) g[i] = 0.5 + cc_rng_uniform(&r);
    for (int i = 0; i < M * D; i++) dy[i] = cc_rng_normal(&r);
    for (int i = 0; i < D; i++) {
        x[i] = 1e-5 * cc_rng_normal(&r);            /* row 0: ms ~1e-10 ≤ floor: identity */
        x[D + i] = (i % 2 ? 3e-4 : -3e-4);           /* row 1: ms 9e-8, 1/rms 3333 > cap */
        x[2 * D + i] = cc_rng_normal(&r);            /* row 2: ordinary */
    }
    cpu_rmsnorm_forward_f64(y, ir, x, g, M, D, &nc);
    cr_expect_eq(ir[0], 1.0);
    cr_expect_eq(ir[1], 1000.0);
    for (int i = 0; i < D; i++) {
        cr_expect(fabs(y[i] - x[i] * g[i]) <= 1e-15 * fabs(x[i] * g[i]) + 1e-300, "fallback forward");
        cr_expect(fabs(y[D + i] - 1000.0 * x[D + i] * g[i]) <= 1e-12 * fabs(y[D + i]), "cap forward");
    }
    cpu_rmsnorm_backward_f64(dx, dg, dy, x, g, ir, M, D, &nc);
    for (int i = 0; i < D; i++) {
        cr_expect(fabs(dx[i] - dy[i] * g[i]) <= 1e-15 * fabs(dy[i] * g[i]), "fallback backward");
        cr_expect(fabs(dx[D + i] - 1000.0 * dy[D + i] * g[i]) <= 1e-12 * fabs(dx[D + i]), "cap backward");
    }
    /* ordinary row: finite differences of L = Σ dy·y over x and g */
    const double h = 1e-6;
    double an[2 * D], fd[2 * D];
    for (int i = 0; i < 2 * D; i++) {
        double *p = i < D ? &x[2 * D + i] : &g[i - D];
        const double keep = *p;
        double lp = 0, lm = 0, yy[D], irr;
        *p = keep + h;
        cpu_rmsnorm_forward_f64(yy, &irr, x + 2 * D, g, 1, D, &nc);
        for (int k = 0; k < D; k++) lp += dy[2 * D + k] * yy[k];
        *p = keep - h;
        cpu_rmsnorm_forward_f64(yy, &irr, x + 2 * D, g, 1, D, &nc);
        for (int k = 0; k < D; k++) lm += dy[2 * D + k] * yy[k];
        *p = keep;
        fd[i] = (lp - lm) / (2 * h);
    }
    /* dg of the ordinary row alone: recompute backward for that row */
    double dx2[D] = { 0 }, dg2[D] = { 0 };
    cpu_rmsnorm_backward_f64(dx2, dg2, dy + 2 * D, x + 2 * D, g, ir + 2, 1, D, &nc);
    for (int i = 0; i < D; i++) {
        an[i] = dx2[i];
        an[D + i] = dg2[i];
    }
    cr_expect(th_rel_err_d(an, fd, 2 * D) < 1e-8, "ordinary row vs finite differences: %.3e",
              th_rel_err_d(an, fd, 2 * D));
}
