/* Gradient reduction of the CPU reference (the ladder's grad_reduce twin):
 * g ← g·mul and the sum of squares, sequentially in double so the value does
 * not depend on the thread count. Float only: the optimizer's state is FP32. */
#include "catchat/optim.h"

double cpu_grad_reduce_sumsq(float *g, size_t n, double mul)
{
    double ss = 0;
    const float f = (float)mul;
    for (size_t i = 0; i < n; i++) {
        if (mul != 1.0) g[i] *= f;
        ss += (double)g[i] * g[i];
    }
    return ss;
}

