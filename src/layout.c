/* The parameter table of docs/model.md and the offsets of each tensor in the one
 * contiguous buffer. Offsets are rounded up to 64 elements so GPU kernels can
 * use wide loads on every tensor; the padding stays zero. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "catchat/layout.h"
#include "catchat/rng.h"

#define ALIGN_ELEMS 64

cc_dims cc_dims_from_config(const cc_config *c)
{
    cc_dims d = { c->vocab_size, c->d_model, c->n_layers, c->n_heads, c->ctx_window,
                  c->rms_eps, c->rms_floor, c->inv_rms_max };
    return d;
}

static int add(cc_layout *lay, const char *name, int rows, int cols, int decay)
{
    cc_tensor_info *t = &lay->t[lay->n];
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->ndim = cols ? 2 : 1;
    t->shape[0] = rows;
    t->shape[1] = cols;
    t->decay = decay;
    t->numel = (size_t)rows * (cols ? cols : 1);
    t->offset = lay->total;
    lay->total += (t->numel + ALIGN_ELEMS - 1) / ALIGN_ELEMS * ALIGN_ELEMS;
    return lay->n++;
}

void cc_layout_build(cc_layout *lay, const cc_dims *d)
{
    memset(lay, 0, sizeof(*lay));
    lay->dims = *d;
    const int V = d->V, D = d->D;
    char name[CC_NAME_MAX];
    /* name, shape, decays? — matrices decay; norms and biases do not */
    lay->embed = add(lay, "embed.weight", V, D, 1);
    for (int l = 0; l < d->L; l++) {
        snprintf(name, sizeof(name), "gru.%d.norm.weight", l);
        lay->gru_norm[l] = add(lay, name, D, 0, 0);
        snprintf(name, sizeof(name), "gru.%d.weight_ih", l);
        lay->gru_wih[l] = add(lay, name, 3 * D, D, 1);
        snprintf(name, sizeof(name), "gru.%d.weight_hh", l);
        lay->gru_whh[l] = add(lay, name, 3 * D, D, 1);
        snprintf(name, sizeof(name), "gru.%d.bias_ih", l);
        lay->gru_bih[l] = add(lay, name, 3 * D, 0, 0);
        snprintf(name, sizeof(name), "gru.%d.bias_hh", l);
        lay->gru_bhh[l] = add(lay, name, 3 * D, 0, 0);
    }
    lay->ctx_norm = add(lay, "ctx.norm.weight", D, 0, 0);
    lay->ctx_qkv = add(lay, "ctx.qkv.weight", 3 * D, D, 1);
    lay->ctx_out = add(lay, "ctx.out.weight", D, D, 1);
    lay->final_norm = add(lay, "final_norm.weight", D, 0, 0);
    lay->lm_head = add(lay, "lm_head.weight", V, D, 1);
}

int cc_layout_find(const cc_layout *lay, const char *name)
{
    for (int i = 0; i < lay->n; i++)
        if (strcmp(lay->t[i].name, name) == 0) return i;
    return -1;
}

void cc_layout_init_params(const cc_layout *lay, float *params, uint64_t seed)
{
    memset(params, 0, sizeof(float) * lay->total);
    cc_rng rng;
    cc_rng_seed(&rng, seed);
    const double bound = 1.0 / sqrt((double)lay->dims.D);
    for (int i = 0; i < lay->n; i++) {
        const cc_tensor_info *t = &lay->t[i];
        float *p = params + t->offset;
        const int is_norm = strstr(t->name, "norm") != NULL;
        for (size_t k = 0; k < t->numel; k++) {
            if (is_norm) p[k] = 1.0f;
            else if (i == lay->embed) p[k] = (float)cc_rng_normal(&rng);
            else p[k] = (float)((2.0 * cc_rng_uniform(&rng) - 1.0) * bound);
        }
    }
}
