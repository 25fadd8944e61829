/* gru: a GRU layer of the CPU reference over T steps, one gru_cell step
 * (src/cpu/gru_cell.c) at a time, on the layer's [B,T,·] tensors. gx = W_i·a
 * + b_i for all T positions is one matmul done by the caller; only the W_hh
 * products are inside the recurrence, here, each on h_{t-1} gathered into a
 * contiguous [B,D] block. The GPU twin is src/gpu/gru.c. */
#include <string.h>
#include "cpu/real.h"

size_t cpu_gru_scratch_elems(int B, int D)
{
    /* h_{t-1} and (backward) dhrec, B·D each; gh or dgh, B·3D */
    return (size_t)B * D * 2 + (size_t)B * 3 * D;
}

/* Copy rows t of a [B,T,width] tensor into a contiguous [B,width] block. */
static void gather_t(real *dst, const real *src, int B, int T, int t, int width)
{
    for (int b = 0; b < B; b++)
        memcpy(dst + (size_t)b * width, src + ((size_t)b * T + t) * width, sizeof(real) * width);
}

/* h_{t-1} as a [B,D] block, the operand of step t's W_hh products (zeros at t = 0). */
static void hprev_block(real *hprev, const real *h, int B, int T, int D, int t)
{
    if (t > 0) gather_t(hprev, h, B, T, t - 1, D);
    else memset(hprev, 0, sizeof(real) * B * D);
}

void CC_FN(cpu_gru_forward)(real *h, real *gates, real *ghn, const real *gx, const real *whh,
                            const real *bhh, int B, int T, int D, real *scratch)
{
    real *hprev = scratch, *gh = hprev + (size_t)B * D;
    for (int t = 0; t < T; t++) {
        hprev_block(hprev, h, B, T, D, t);
        CC_FN(cpu_matmul_forward)(gh, hprev, whh, NULL, B, 3 * D, D); /* gh = W_hh·h_{t-1}, no bias */
        CC_FN(cpu_gru_cell_forward)(h, gates, ghn, gx, gh, bhh, B, T, D, t);
    }
}

void CC_FN(cpu_gru_backward)(real *dgx, real *dwhh, real *dbhh, const real *dh_in,
                             const real *h, const real *gates, const real *ghn,
                             const real *whh, int B, int T, int D, double clamp_limit,
                             real *scratch)
{
    real *hprev = scratch, *dhrec = hprev + (size_t)B * D, *dgh = dhrec + (size_t)B * D;
    memset(dhrec, 0, sizeof(real) * B * D); /* nothing comes back from step T */
    for (int t = T - 1; t >= 0; t--) {
        /* dgx[:,t], and dhrec = z ⊙ g of the clamped gradient g that reached h_t */
        CC_FN(cpu_gru_cell_backward)(dgx, NULL, dhrec, dh_in, h, gates, ghn, B, T, D, t, clamp_limit);
        /* The cell's dgh (the gradient of W_hh·h_{t-1} + b_hh), as the [B,3D]
         * block the step's products take: dgx[:,t] with the n rows times r,
         * through which the n gate reads W_hn·h. Formed here rather than
         * written by the cell into a [B,T,3D] tensor the layer has no room for;
         * the same values, bit for bit. */
        for (int b = 0; b < B; b++) {
            const size_t row = (size_t)b * T + t;
            const real *dx = dgx + row * 3 * D, *r = gates + row * 3 * D;
            real *dh = dgh + (size_t)b * 3 * D;
            memcpy(dh, dx, sizeof(real) * 2 * D);
            for (int i = 0; i < D; i++) dh[2 * D + i] = dx[2 * D + i] * r[i];
        }
        hprev_block(hprev, h, B, T, D, t);
        /* dhrec += dgh·W_hh (to step t-1); dW_hh += dghᵀ·h_{t-1}; db_hh += Σ dgh */
        CC_FN(cpu_matmul_backward)(dhrec, dwhh, dbhh, dgh, hprev, whh, B, 3 * D, D);
    }
}
