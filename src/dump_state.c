/* `catchat dump-state`: one forward and backward pass on the first training
 * batch, written as safetensors (x, y, loss, grad.<name> unscaled) so any
 * framework can recompute the batch from the checkpoint and compare. No
 * optimizer step; the checkpoint is not touched. */
#include <stdlib.h>
#include <string.h>
#include "catchat/checkpoint.h"
#include "catchat/executor.h"
#include "catchat/safetensors.h"
#include "catchat/train.h"
#include "catchat/util.h"

int cc_dump_state(const cc_config *cfg, const char *ckpt, const char *out_path, const struct gpu_step_plan *plan)
{
    const int B = cfg->batch_size, T = cfg->seq_len;
    cc_tokens tok;
    cc_loader ld;
    if (cc_tokens_load_as(&tok, cfg->train, cfg->vocab_size, cfg->data_format) != 0) return -1;
    if (cc_loader_init(&ld, &tok, B, T, 1, cfg->seed) != 0) {
        cc_tokens_free(&tok);
        return -1;
    }
    cc_executor *ex = cc_executor_create_planned(cfg, B, T, plan);
    int rc = ex ? 0 : -1;
    const size_t n = ex ? ex->lay.total : 0;
    float *p = cc_calloc(n, sizeof(float)), *g = cc_calloc(n, sizeof(float));
    int *x = cc_malloc(sizeof(int) * B * T), *y = cc_malloc(sizeof(int) * B * T);
    if (rc == 0 && ckpt) {
        rc = cc_checkpoint_load(ckpt, &ex->lay, p, NULL, NULL, NULL, NULL, NULL);
        if (rc == 0) ex->ops->set_params(ex, p);
    }
    if (rc == 0) {
        rc = cc_loader_batch(&ld, 0, x, y); /* an id past vocab_size: said */
    }
    if (rc == 0) {
        const double S = cfg->loss_scale_dynamic ? cfg->init_scale : cfg->loss_scale;
        double loss = ex->ops->forward_backward(ex, x, y, S);
        ex->ops->get_grads(ex, g);
        for (size_t i = 0; i < n; i++) g[i] = (float)(g[i] / ex->grad_unit);
        const cc_layout *lay = &ex->lay;
        cc_st_entry *e = cc_calloc((size_t)lay->n + 3, sizeof(cc_st_entry));
        char (*names)[CC_NAME_MAX + 8] = cc_calloc((size_t)lay->n, sizeof(*names));
        e[0] = (cc_st_entry){ "x", ST_I32, 2, { B, T }, x };
        e[1] = (cc_st_entry){ "y", ST_I32, 2, { B, T }, y };
        e[2] = (cc_st_entry){ "loss", ST_F64, 1, { 1 }, &loss };
        for (int i = 0; i < lay->n; i++) {
            const cc_tensor_info *t = &lay->t[i];
            snprintf(names[i], sizeof(names[i]), "grad.%s", t->name);
            e[3 + i] = (cc_st_entry){ names[i], ST_F32, t->ndim, { t->shape[0], t->shape[1] },
                                      g + t->offset };
        }
        const char *keys[] = { "device", "loss_scale" };
        char sbuf[64];
        snprintf(sbuf, sizeof(sbuf), "%.17g", S);
        const char *vals[] = { ex->name, sbuf };
        rc = cc_st_write(out_path, e, lay->n + 3, keys, vals, 2);
        if (rc == 0) printf("dump-state: loss %.6f on %s, written to %s\n", loss, ex->name, out_path);
        free(e);
        free(names);
    }
    free(p);
    free(g);
    free(x);
    free(y);
    if (ex) ex->ops->destroy(ex);
    cc_loader_free(&ld);
    cc_tokens_free(&tok);
    return rc;
}
