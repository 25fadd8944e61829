/* gru_cell: one GRU timestep of the CPU reference, element-wise (PyTorch
 * nn.GRU convention, gate rows r, z, n), given the recurrent product
 * gh = W_hh·h_{t-1} from the caller:
 *   r   = σ(gx_r + (gh_r + b_hr))
 *   z   = σ(gx_z + (gh_z + b_hz))
 *   n   = tanh(gx_n + r ⊙ (gh_n + b_hn))
 *   h_t = (1 − z) ⊙ n + z ⊙ h_{t-1}
 * The contract of the GPU's kernels/gru_cell.cu (include/catchat/kernels.h):
 * the layer's [B,T,·] tensors at step t, h_{t-1} read from row t-1 of h
 * (zero at t = 0), and the backward clamps the gradient it takes in. Each
 * side adds gh's three terms in its own order; the ladder's tolerances
 * cover the rounding. The
 * layer over T steps, with the W_hh products, is src/cpu/gru.c. */
#include "cpu/real.h"

void CC_FN(cpu_gru_cell_forward)(real *h, real *gates, real *ghn, const real *gx, const real *gh,
                                 const real *bhh, int B, int T, int D, int t)
{
    for (int b = 0; b < B; b++) {
        const size_t row = (size_t)b * T + t;
        const real *gxr = gx + row * 3 * D, *ghb = gh + (size_t)b * 3 * D;
        const real *hp = t > 0 ? h + (row - 1) * D : NULL;
        real *gt = gates + row * 3 * D, *hr = h + row * D, *hnr = ghn + row * D;
        for (int i = 0; i < D; i++) {
            const real r = r_sigmoid(gxr[i] + (ghb[i] + bhh[i]));
            const real z = r_sigmoid(gxr[D + i] + (ghb[D + i] + bhh[D + i]));
            const real hn = ghb[2 * D + i] + bhh[2 * D + i];
            const real n = R_TANH(gxr[2 * D + i] + r * hn);
            gt[i] = r;
            gt[D + i] = z;
            gt[2 * D + i] = n;
            hnr[i] = hn;
            hr[i] = (1 - z) * n + z * (hp ? hp[i] : 0);
        }
    }
}

void CC_FN(cpu_gru_cell_backward)(real *dgx, real *dgh, real *dhrec, const real *dh_in, const real *h,
                                  const real *gates, const real *ghn, int B, int T, int D, int t,
                                  double clamp_limit)
{
    const real lim = (real)clamp_limit;
    for (int b = 0; b < B; b++) {
        const size_t row = (size_t)b * T + t;
        const real *gt = gates + row * 3 * D, *ghnr = ghn + row * D, *dhr = dh_in + row * D;
        const real *hp = t > 0 ? h + (row - 1) * D : NULL;
        real *dx = dgx + row * 3 * D, *dh = dgh ? dgh + row * 3 * D : NULL, *dr = dhrec + (size_t)b * D;
        for (int i = 0; i < D; i++) {
            real g = dhr[i] + dr[i]; /* what reaches h_t: from above and from step t+1 */
            /* comparisons, so a NaN passes through as it does on the GPU */
            if (lim > 0) g = g > lim ? lim : (g < -lim ? -lim : g);
            const real r = gt[i], z = gt[D + i], n = gt[2 * D + i];
            const real dn_pre = g * (1 - z) * (1 - n * n);
            const real dz_pre = g * ((hp ? hp[i] : 0) - n) * z * (1 - z);
            const real dr_pre = dn_pre * ghnr[i] * r * (1 - r);
            dx[i] = dr_pre;
            dx[D + i] = dz_pre;
            dx[2 * D + i] = dn_pre;
            if (dh) {
                dh[i] = dr_pre;
                dh[D + i] = dz_pre;
                dh[2 * D + i] = dn_pre * r;
            }
            dr[i] = g * z;
        }
    }
}
