/* The per-token guard on the context-stream gradient ([train]
 * ctx_grad_clamp): each row of d[M,D] longer than `limit` in L2 norm is scaled
 * down to it (0 = off); limit is in the units of the scaled gradient
 * (cc_clamp_dispatch_limit). */
#include <math.h>
#include "cpu/real.h"

void CC_FN(cpu_rownorm_clamp)(real *d, int M, int D, double limit)
{
    if (limit <= 0) return;
    for (int m = 0; m < M; m++) {
        real *row = d + (size_t)m * D;
        double ss = 0;
        for (int i = 0; i < D; i++) ss += (double)row[i] * row[i];
        const double nrm = sqrt(ss);
        if (nrm > limit) {
            const real f = (real)(limit / nrm);
            for (int i = 0; i < D; i++) row[i] *= f;
        }
    }
}
