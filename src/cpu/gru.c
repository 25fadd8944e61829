/* A GRU layer of the CPU reference over T steps, one cell step
 * (src/cpu/gru_cell.c) at a time. gx = W_i·a + b_i for all T positions is one
 * matmul done by the caller; only W_h·h is inside the recurrence. Activations are [B,T,·]; each step gathers
 * its rows into contiguous scratch so the cell works on plain [B,·] blocks. */
#include <string.h>
#include "cpu/real.h"

size_t cpu_gru_scratch_elems(int B, int D)
{
    /* hprev, gx_t, gates_t, ghn_t, hnew, g, dhprev: B·D or B·3D each, plus B·3D inner scratch */
    return (size_t)B * D * 4 + (size_t)B * 3 * D * 3;
}

/* Copy rows t of a [B,T,width] tensor into / out of a contiguous [B,width] block. */
static void gather_t(real *dst, const real *src, int B, int T, int t, int width)
{
    for (int b = 0; b < B; b++)
        memcpy(dst + (size_t)b * width, src + ((size_t)b * T + t) * width, sizeof(real) * width);
}
static void scatter_t(real *dst, const real *src, int B, int T, int t, int width)
{
    for (int b = 0; b < B; b++)
        memcpy(dst + ((size_t)b * T + t) * width, src + (size_t)b * width, sizeof(real) * width);
}

void CC_FN(cpu_gru_forward)(real *h, real *gates, real *ghn, const real *gx, const real *whh,
                            const real *bhh, int B, int T, int D, real *scratch)
{
    real *hprev = scratch, *hnew = hprev + (size_t)B * D, *ghn_t = hnew + (size_t)B * D;
    real *gx_t = ghn_t + (size_t)B * D, *gates_t = gx_t + (size_t)B * 3 * D;
    real *inner = gates_t + (size_t)B * 3 * D;
    memset(hprev, 0, sizeof(real) * B * D);
    for (int t = 0; t < T; t++) {
        gather_t(gx_t, gx, B, T, t, 3 * D);
        CC_FN(cpu_gru_cell_forward)(hnew, gates_t, ghn_t, gx_t, hprev, whh, bhh, B, D, inner);
        scatter_t(h, hnew, B, T, t, D);
        scatter_t(gates, gates_t, B, T, t, 3 * D);
        scatter_t(ghn, ghn_t, B, T, t, D);
        memcpy(hprev, hnew, sizeof(real) * B * D);
    }
}

void CC_FN(cpu_gru_backward)(real *dgx, real *dwhh, real *dbhh, const real *dh_in,
                             const real *h, const real *gates, const real *ghn,
                             const real *whh, int B, int T, int D, double clamp_limit,
                             real *scratch)
{
    real *hprev = scratch, *g = hprev + (size_t)B * D, *ghn_t = g + (size_t)B * D;
    real *dhrec = ghn_t + (size_t)B * D;
    real *gates_t = dhrec + (size_t)B * D, *dgx_t = gates_t + (size_t)B * 3 * D;
    real *inner = dgx_t + (size_t)B * 3 * D;
    const real lim = (real)clamp_limit;
    memset(dhrec, 0, sizeof(real) * B * D); /* nothing comes back from step T */
    for (int t = T - 1; t >= 0; t--) {
        gather_t(g, dh_in, B, T, t, D);
        for (size_t i = 0; i < (size_t)B * D; i++) {
            real v = g[i] + dhrec[i];
            if (lim > 0) v = v > lim ? lim : (v < -lim ? -lim : v);
            g[i] = v;
        }
        if (t > 0) gather_t(hprev, h, B, T, t - 1, D);
        else memset(hprev, 0, sizeof(real) * B * D);
        gather_t(gates_t, gates, B, T, t, 3 * D);
        gather_t(ghn_t, ghn, B, T, t, D);
        CC_FN(cpu_gru_cell_backward)(dgx_t, dhrec, dwhh, dbhh, g, gates_t, ghn_t, hprev, whh,
                                     B, D, inner);
        scatter_t(dgx, dgx_t, B, T, t, 3 * D);
    }
}
