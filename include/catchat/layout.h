/* The model's parameter table (docs/model.md): name, shape, whether AdamW decays
 * it, and its offset in the one contiguous parameter buffer. Gradients and
 * optimizer moments mirror the same offsets. Adding a tensor is one row in
 * cc_layout_build. */
#ifndef CATCHAT_LAYOUT_H
#define CATCHAT_LAYOUT_H

#include <stddef.h>
#include <stdint.h>
#include "catchat/config.h"

#define CC_MAX_LAYERS 32
#define CC_MAX_TENSORS (8 + 5 * CC_MAX_LAYERS)
#define CC_NAME_MAX 48

/* Shapes of the model (the [model] section, as the executors need them). */
typedef struct cc_dims {
    int V, D, L, H, W;
    double rms_eps, rms_floor, inv_rms_max;
} cc_dims;

/* Constants of RMSNorm with its guards (docs/model.md: rms_eps, rms_floor,
 * inv_rms_max), carried together from the config to every norm, CPU and GPU. */
typedef struct cc_norm_consts { double eps, floor, inv_max; } cc_norm_consts;
static inline cc_norm_consts cc_norm_consts_of(const cc_dims *d)
{
    cc_norm_consts n = { d->rms_eps, d->rms_floor, d->inv_rms_max };
    return n;
}

typedef struct cc_tensor_info {
    char name[CC_NAME_MAX];
    int ndim;
    int shape[2];
    int decay;      /* AdamW weight decay applies: 2-D tensors only */
    size_t offset;  /* in elements from the start of the buffer */
    size_t numel;
} cc_tensor_info;

typedef struct cc_layout {
    cc_dims dims;
    int n;
    cc_tensor_info t[CC_MAX_TENSORS];
    size_t total; /* elements, including alignment padding (always zero) */
    /* indices into t[] */
    int embed, ctx_norm, ctx_qkv, ctx_out, final_norm, lm_head;
    int gru_norm[CC_MAX_LAYERS], gru_wih[CC_MAX_LAYERS], gru_whh[CC_MAX_LAYERS];
    int gru_bih[CC_MAX_LAYERS], gru_bhh[CC_MAX_LAYERS];
} cc_layout;

cc_dims cc_dims_from_config(const cc_config *c);
void cc_layout_build(cc_layout *lay, const cc_dims *d);
int cc_layout_find(const cc_layout *lay, const char *name); /* -1 if absent */

/* Initialise parameters from a seed (FP32 buffer of lay->total elements):
 * embeddings N(0,1), matrices and biases U(-1/sqrt(D), 1/sqrt(D)) as PyTorch's
 * nn.GRU / nn.Linear do, norm gains 1, padding 0. */
void cc_layout_init_params(const cc_layout *lay, float *params, uint64_t seed);

#endif
