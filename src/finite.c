/* NaN provenance records (see finite.h). */
#include "catchat/finite.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void cc_finite_set(cc_finite_report *r, const char *stage, const char *tensor, int layer, long index, float value,
                   int width, int T)
{
    if (r->found) return;
    r->found = 1;
    snprintf(r->stage, sizeof(r->stage), "%s", stage);
    snprintf(r->tensor, sizeof(r->tensor), "%s", tensor);
    r->layer = layer;
    r->index = index;
    r->value = value;
    r->b = r->t = -1;
    if (width > 0 && T > 0) {
        const long row = index / width;
        r->b = (int)(row / T);
        r->t = (int)(row % T);
    }
}

void cc_finite_scan(cc_finite_report *r, const char *stage, const char *tensor, int layer, const float *host,
                    size_t n, int width, int T)
{
    if (!r || r->found) return;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(host[i])) {
            cc_finite_set(r, stage, tensor, layer, (long)i, host[i], width, T);
            return;
        }
}

void cc_finite_describe(const cc_finite_report *r, char *buf, size_t cap)
{
    if (!r->found) {
        snprintf(buf, cap, "all values finite");
        return;
    }
    char where[96] = "";
    size_t len = 0;
    if (r->layer >= 0) len += (size_t)snprintf(where + len, sizeof(where) - len, "layer %d", r->layer);
    if (r->t >= 0)
        len += (size_t)snprintf(where + len, sizeof(where) - len, "%stimestep %d, sequence %d", len ? ", " : "",
                                r->t, r->b);
    snprintf(buf, cap, "%s%s%s%s: %s[%ld] = %g", r->stage, len ? " (" : "", where, len ? ")" : "", r->tensor,
             r->index, (double)r->value);
}
