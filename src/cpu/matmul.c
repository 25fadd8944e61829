/* Dense layers of the CPU reference: out = in · wᵀ + bias and its backward.
 * Every output element is owned by one thread and summed in a fixed order, so
 * results do not depend on the thread count (resume is bit-exact). */
#include "cpu/real.h"

/* One output element: the same code, so the same sum in the same order,
 * whichever loop below calls it. */
static inline real dot(const real *x, const real *wr, int K)
{
    real acc = 0;
#pragma omp simd reduction(+ : acc)
    for (int k = 0; k < K; k++) acc += x[k] * wr[k];
    return acc;
}

void CC_FN(cpu_matmul_forward)(real *out, const real *in, const real *w, const real *bias,
                               int M, int N, int K)
{
    const int par = (long)M * N * K > 100000;
    if (M == 1) {
        /* A matrix-vector product (the decoder, one token at a time, where the
         * classifier's V rows of weights dominate): the threads share the
         * columns, else one core would do it all. */
#pragma omp parallel for schedule(static) if (par)
        for (int n = 0; n < N; n++) out[n] = dot(in, w + (size_t)n * K, K) + (bias ? bias[n] : 0);
        return;
    }
#pragma omp parallel for schedule(static) if (par)
    for (int m = 0; m < M; m++) {
        const real *x = in + (size_t)m * K;
        real *o = out + (size_t)m * N;
        for (int n = 0; n < N; n++) o[n] = dot(x, w + (size_t)n * K, K) + (bias ? bias[n] : 0);
    }
}

void CC_FN(cpu_matmul_backward)(real *din, real *dw, real *dbias, const real *dout,
                                const real *in, const real *w, int M, int N, int K)
{
    const int par = (long)M * N * K > 100000;
    if (din) {
#pragma omp parallel for schedule(static) if (par)
        for (int m = 0; m < M; m++) {
            real *di = din + (size_t)m * K;
            const real *dorow = dout + (size_t)m * N;
            for (int n = 0; n < N; n++) {
                const real d = dorow[n];
                const real *wr = w + (size_t)n * K;
#pragma omp simd
                for (int k = 0; k < K; k++) di[k] += d * wr[k];
            }
        }
    }
    /* dw rows in blocks of 4 so each input row is read once per block. */
#pragma omp parallel for schedule(static) if (par)
    for (int n0 = 0; n0 < N; n0 += 4) {
        const int nb = N - n0 < 4 ? N - n0 : 4;
        for (int m = 0; m < M; m++) {
            const real *x = in + (size_t)m * K;
            for (int j = 0; j < nb; j++) {
                const real d = dout[(size_t)m * N + n0 + j];
                if (d == 0) continue;
                real *dwr = dw + (size_t)(n0 + j) * K;
#pragma omp simd
                for (int k = 0; k < K; k++) dwr[k] += d * x[k];
            }
        }
        if (dbias) {
            for (int j = 0; j < nb; j++) {
                real acc = 0;
                for (int m = 0; m < M; m++) acc += dout[(size_t)m * N + n0 + j];
                dbias[n0 + j] += acc;
            }
        }
    }
}
