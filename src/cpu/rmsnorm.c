/* RMSNorm with the two guards of docs/model.md:
 *   ms ≤ rms_floor            → ir = 1 (identity fallback: a near-zero state
 *                                passes through instead of being blown up)
 *   1/sqrt(ms + eps) > cap    → ir = cap
 * In both cases ir is a constant of x, so the backward drops the ir³ term. */
#include "cpu/real.h"

/* The factor for one row; *is_const tells the backward which formula to use. */
static real row_inv_rms(const real *x, int D, const cc_norm_consts *nc, int *is_const)
{
    real ss = 0;
    for (int i = 0; i < D; i++) ss += x[i] * x[i];
    const real ms = ss / (real)D;
    if (ms <= (real)nc->floor) { *is_const = 1; return 1; }
    const real raw = (real)1 / R_SQRT(ms + (real)nc->eps);
    if (raw > (real)nc->inv_max) { *is_const = 1; return (real)nc->inv_max; }
    *is_const = 0;
    return raw;
}

void CC_FN(cpu_rmsnorm_forward)(real *y, real *ir, const real *x, const real *g, int M, int D,
                                const cc_norm_consts *nc)
{
#pragma omp parallel for schedule(static) if ((long)M * D > 65536)
    for (int m = 0; m < M; m++) {
        const real *xr = x + (size_t)m * D;
        real *yr = y + (size_t)m * D;
        int is_const;
        const real r = row_inv_rms(xr, D, nc, &is_const);
        ir[m] = r;
        for (int i = 0; i < D; i++) yr[i] = xr[i] * r * g[i];
    }
}

void CC_FN(cpu_rmsnorm_backward)(real *dx, real *dg, const real *dy, const real *x,
                                 const real *g, const real *ir, int M, int D,
                                 const cc_norm_consts *nc)
{
#pragma omp parallel for schedule(static) if ((long)M * D > 65536)
    for (int m = 0; m < M; m++) {
        const real *xr = x + (size_t)m * D, *dyr = dy + (size_t)m * D;
        real *dxr = dx + (size_t)m * D;
        int is_const;
        row_inv_rms(xr, D, nc, &is_const); /* recomputed: same inputs, same decision */
        const real r = ir[m];
        if (is_const) {
            for (int i = 0; i < D; i++) dxr[i] += dyr[i] * g[i] * r;
            continue;
        }
        real dot = 0;
        for (int i = 0; i < D; i++) dot += dyr[i] * g[i] * xr[i];
        const real k = r * r * r / (real)D * dot;
        for (int i = 0; i < D; i++) dxr[i] += r * dyr[i] * g[i] - k * xr[i];
    }
    /* Gain gradient by column so each sum has one owner and a fixed order. */
#pragma omp parallel for schedule(static) if ((long)M * D > 65536)
    for (int i = 0; i < D; i++) {
        real acc = 0;
        for (int m = 0; m < M; m++) acc += dy[(size_t)m * D + i] * x[(size_t)m * D + i] * ir[m];
        dg[i] += acc;
    }
}
