/* Context stream of the CPU reference: causal sliding-window attention.
 * Query t of head j reads positions τ ∈ [max(0, t−W+1), t] with
 * p = softmax(q·k / sqrt(hd)). Work is split by (sequence, head): every
 * gradient of a key or value is summed by the one thread that owns its head. */
#include <string.h>
#include "cpu/real.h"

void CC_FN(cpu_attention_forward)(real *o, real *p, const real *qkv, int B, int T, int D,
                                  int H, int W)
{
    const int hd = D / H;
    const real sc = (real)1 / R_SQRT((real)hd);
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int j = 0; j < H; j++) {
            for (int t = 0; t < T; t++) {
                const real *q = qkv + ((size_t)b * T + t) * 3 * D + j * hd;
                real *pr = p + (((size_t)b * H + j) * T + t) * W;
                const int t0 = t - W + 1 > 0 ? t - W + 1 : 0;
                real mx = -INFINITY;
                for (int w = 0; w < W; w++) {
                    const int tau = t - W + 1 + w;
                    if (tau < t0) { pr[w] = 0; continue; }
                    const real *k = qkv + ((size_t)b * T + tau) * 3 * D + D + j * hd;
                    real s = 0;
                    for (int i = 0; i < hd; i++) s += q[i] * k[i];
                    pr[w] = s * sc;
                    if (pr[w] > mx) mx = pr[w];
                }
                real sum = 0;
                for (int w = t0 - (t - W + 1); w < W; w++) {
                    pr[w] = R_EXP(pr[w] - mx);
                    sum += pr[w];
                }
                real *out = o + ((size_t)b * T + t) * D + j * hd;
                for (int i = 0; i < hd; i++) out[i] = 0;
                for (int w = t0 - (t - W + 1); w < W; w++) {
                    pr[w] /= sum;
                    const real *v = qkv + ((size_t)b * T + (t - W + 1 + w)) * 3 * D + 2 * D + j * hd;
                    for (int i = 0; i < hd; i++) out[i] += pr[w] * v[i];
                }
            }
        }
}

void CC_FN(cpu_attention_backward)(real *dqkv, const real *dout, const real *p,
                                   const real *qkv, int B, int T, int D, int H, int W)
{
    const int hd = D / H;
    const real sc = (real)1 / R_SQRT((real)hd);
    for (int b = 0; b < B; b++)
        memset(dqkv + (size_t)b * T * 3 * D, 0, sizeof(real) * T * 3 * D);
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int j = 0; j < H; j++) {
            for (int t = 0; t < T; t++) {
                const real *q = qkv + ((size_t)b * T + t) * 3 * D + j * hd;
                real *dq = dqkv + ((size_t)b * T + t) * 3 * D + j * hd;
                const real *pr = p + (((size_t)b * H + j) * T + t) * W;
                const real *dyo = dout + ((size_t)b * T + t) * D + j * hd;
                const int w0 = t - W + 1 >= 0 ? 0 : W - 1 - t;
                /* dp_w = dout·v_τ ; Σ p dp */
                real pdp = 0;
                for (int w = w0; w < W; w++) {
                    const real *v = qkv + ((size_t)b * T + (t - W + 1 + w)) * 3 * D + 2 * D + j * hd;
                    real dp = 0;
                    for (int i = 0; i < hd; i++) dp += dyo[i] * v[i];
                    pdp += pr[w] * dp;
                }
                for (int w = w0; w < W; w++) {
                    const size_t row = ((size_t)b * T + (t - W + 1 + w)) * 3 * D;
                    const real *k = qkv + row + D + j * hd, *v = qkv + row + 2 * D + j * hd;
                    real *dk = dqkv + row + D + j * hd, *dv = dqkv + row + 2 * D + j * hd;
                    real dp = 0;
                    for (int i = 0; i < hd; i++) dp += dyo[i] * v[i];
                    const real ds = pr[w] * (dp - pdp) * sc;
                    for (int i = 0; i < hd; i++) {
                        dv[i] += pr[w] * dyo[i];
                        dq[i] += ds * k[i];
                        dk[i] += ds * q[i];
                    }
                }
            }
        }
}
