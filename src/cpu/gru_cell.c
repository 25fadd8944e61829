/* One GRU cell step of the CPU reference (PyTorch nn.GRU convention, gate
 * rows r, z, n):
 *   r  = σ(gx_r + W_hr h + b_hr)
 *   z  = σ(gx_z + W_hz h + b_hz)
 *   n  = tanh(gx_n + r ⊙ (W_hn h + b_hn))
 *   h' = (1 − z) ⊙ n + z ⊙ h
 * on contiguous [B,·] blocks; gx = W_i·a + b_i is the caller's. The layer
 * over T steps is src/cpu/gru.c. */
#include <string.h>
#include "cpu/real.h"

void CC_FN(cpu_gru_cell_forward)(real *hnew, real *gates, real *ghn, const real *gx,
                                 const real *hprev, const real *whh, const real *bhh,
                                 int B, int D, real *scratch)
{
    real *gh = scratch; /* [B,3D] = W_h h + b_h */
    CC_FN(cpu_matmul_forward)(gh, hprev, whh, bhh, B, 3 * D, D);
    for (int b = 0; b < B; b++) {
        const real *gxb = gx + (size_t)b * 3 * D, *ghb = gh + (size_t)b * 3 * D;
        const real *hp = hprev + (size_t)b * D;
        real *gt = gates + (size_t)b * 3 * D, *hn = hnew + (size_t)b * D;
        for (int i = 0; i < D; i++) {
            const real r = r_sigmoid(gxb[i] + ghb[i]);
            const real z = r_sigmoid(gxb[D + i] + ghb[D + i]);
            const real n = R_TANH(gxb[2 * D + i] + r * ghb[2 * D + i]);
            gt[i] = r;
            gt[D + i] = z;
            gt[2 * D + i] = n;
            if (ghn) ghn[(size_t)b * D + i] = ghb[2 * D + i];
            hn[i] = (1 - z) * n + z * hp[i];
        }
    }
}

void CC_FN(cpu_gru_cell_backward)(real *dgx, real *dhprev, real *dwhh, real *dbhh,
                                  const real *g, const real *gates, const real *ghn,
                                  const real *hprev, const real *whh, int B, int D,
                                  real *scratch)
{
    real *dgh = scratch; /* [B,3D] gradient of W_h h + b_h */
    for (int b = 0; b < B; b++) {
        const real *gt = gates + (size_t)b * 3 * D, *gb = g + (size_t)b * D;
        const real *hp = hprev + (size_t)b * D, *ghnb = ghn + (size_t)b * D;
        real *dx = dgx + (size_t)b * 3 * D, *dh = dgh + (size_t)b * 3 * D;
        real *dhp = dhprev + (size_t)b * D;
        for (int i = 0; i < D; i++) {
            const real r = gt[i], z = gt[D + i], n = gt[2 * D + i];
            const real gi = gb[i];
            const real dn_pre = gi * (1 - z) * (1 - n * n);
            const real dz_pre = gi * (hp[i] - n) * z * (1 - z);
            const real dr_pre = dn_pre * ghnb[i] * r * (1 - r);
            dx[i] = dr_pre;
            dx[D + i] = dz_pre;
            dx[2 * D + i] = dn_pre;
            dh[i] = dr_pre;
            dh[D + i] = dz_pre;
            dh[2 * D + i] = dn_pre * r;
            dhp[i] = gi * z;
        }
    }
    CC_FN(cpu_matmul_backward)(dhprev, dwhh, dbhh, dgh, hprev, whh, B, 3 * D, D);
}
