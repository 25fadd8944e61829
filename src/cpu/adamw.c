/* AdamW of the CPU reference (the ladder's adamw twin): FP32 master weights
 * and moments, decoupled weight decay on the tensors the layout marks. */
#include <math.h>
#include "catchat/optim.h"

void cpu_adamw(const cc_layout *lay, float *params, const float *grads, float *m, float *v,
                  double lr, double wd, double beta1, double beta2, double eps, long k)
{
    const double bc1 = 1.0 - pow(beta1, (double)k), bc2 = 1.0 - pow(beta2, (double)k);
    for (int i = 0; i < lay->n; i++) {
        const cc_tensor_info *t = &lay->t[i];
        const float decay = t->decay ? (float)(1.0 - lr * wd) : 1.0f;
        float *p = params + t->offset, *mi = m + t->offset, *vi = v + t->offset;
        const float *g = grads + t->offset;
#pragma omp parallel for schedule(static) if (t->numel > 65536)
        for (size_t j = 0; j < t->numel; j++) {
            mi[j] = (float)beta1 * mi[j] + (float)(1.0 - beta1) * g[j];
            vi[j] = (float)beta2 * vi[j] + (float)(1.0 - beta2) * g[j] * g[j];
            const float mhat = mi[j] / (float)bc1, vhat = vi[j] / (float)bc2;
            p[j] = p[j] * decay - (float)lr * mhat / (sqrtf(vhat) + (float)eps);
        }
    }
}
