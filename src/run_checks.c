/* `catchat train`: the options that name a place in the model or the run
 * (the testing aids' tensor, step and element; the end's sample prompt),
 * checked before the first step, so that a wrong one is refused at once
 * rather than found (or silently ignored) after a long run. */
#include <stdlib.h>
#include "run_ctx.h"
#include "catchat/util.h"

/* Before the ranks start: the element lies in this model's [layers, B, T, D]. */
int run_check_plant_grad_h(const cc_config *cfg, const cc_train_opts *o)
{
    const cc_plant_grad_h *pg = &o->plant_grad_h;
    if (o->plant_grad_h_step > 0 && (pg->layer >= cfg->n_layers || pg->b >= cfg->batch_size || pg->t >= cfg->seq_len ||
                                     pg->unit >= cfg->d_model))
        return cc_error("--plant-nan-grad-h %ld:%d,%d,%d,%d: outside the model (layers %d, batch_size %d, seq_len %d, "
                        "d_model %d)", o->plant_grad_h_step, pg->layer, pg->b, pg->t, pg->unit, cfg->n_layers,
                        cfg->batch_size, cfg->seq_len, cfg->d_model);
    return 0;
}

int run_check_sample_prompt(const cc_tokenizer *tz, const cc_train_opts *o)
{
    if (!o->sample_prompt || !o->sample_prompt[0] || o->sample_tokens <= 0) return 0;
    int *ids = NULL, n;
    const int quiet = cc_error_quiet;
    cc_error_quiet = 1; /* one line, this one, naming the option */
    const int bad = cc_tokenizer_encode(tz, o->sample_prompt, &ids, &n) != 0;
    cc_error_quiet = quiet;
    free(ids);
    if (bad)
        return cc_error("--sample-prompt: the run's tokenizer cannot encode it (%s)",
                        tz->bpe ? "not UTF-8 text" : "bytes no token covers");
    return 0;
}

/* After the restore: a resumed run's steps are known only then. */
int run_check_plant_nan(const cc_executor *ex, const cc_config *cfg, const cc_train_opts *o, long step)
{
    if (o->plant_nan && cc_layout_find(&ex->lay, o->plant_nan) < 0)
        return cc_error("--plant-nan: no parameter tensor named '%s'", o->plant_nan);
    if (o->plant_nan && o->plant_nan_step > 0 && (o->plant_nan_step <= step || o->plant_nan_step > cfg->max_steps))
        return cc_error("--plant-nan %s@%ld: this run takes steps %ld to %ld", o->plant_nan, o->plant_nan_step,
                        step + 1, cfg->max_steps);
    return 0;
}
