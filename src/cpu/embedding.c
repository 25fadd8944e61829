/* Token embedding: a row gather forward, a scatter-add backward (repeated ids
 * add up). */
#include <string.h>
#include "cpu/real.h"

void CC_FN(cpu_embedding_forward)(real *out, const int *x, const real *table, int M, int D)
{
    for (int m = 0; m < M; m++)
        memcpy(out + (size_t)m * D, table + (size_t)x[m] * D, sizeof(real) * D);
}

void CC_FN(cpu_embedding_backward)(real *dtable, const real *dout, const int *x, int M, int D)
{
    /* Sequential over positions: repeated ids add in position order. */
    for (int m = 0; m < M; m++) {
        real *row = dtable + (size_t)x[m] * D;
        const real *d = dout + (size_t)m * D;
        for (int i = 0; i < D; i++) row[i] += d[i];
    }
}
