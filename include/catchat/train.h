/* The commands' engines: training loop, evaluation, sampling, dump-state. */
#ifndef CATCHAT_TRAIN_H
#define CATCHAT_TRAIN_H

#include "catchat/config.h"
#include "catchat/cpu_ref.h"
#include "catchat/data.h"
#include "catchat/executor.h"

typedef struct cc_train_opts {
    const char *resume;    /* checkpoint to continue from, or NULL */
    const char *init_ckpt; /* weights to start from (fresh optimizer), or NULL */
    int quiet;             /* no per-step progress lines */
    long stop_after;       /* run at most this many steps now, then checkpoint (0 = to max_steps) */
    const char *sample_prompt; /* sample written at the end ("" = none) */
    int sample_tokens;
} cc_train_opts;

typedef struct cc_train_result {
    long steps_run;
    double last_loss, eval_loss, eval_top1, eval_top5;
    double *losses;       /* per step of this invocation (malloc'd, caller frees) */
    long n_losses;
} cc_train_result;

int cc_train(const cc_config *cfg, const cc_train_opts *opts, cc_train_result *res);

/* Mean loss, top-1 and top-5 over `batches` validation batches. */
typedef struct cc_eval_result { double loss, top1, top5; long scored; } cc_eval_result;
int cc_evaluate(cc_executor *ex, cc_loader *val, long batches, cc_eval_result *out);

/* dump-state: one forward + backward on the first training batch. */
int cc_dump_state(const cc_config *cfg, const char *ckpt, const char *out_path);

/* Sampling helpers */
typedef struct cc_sample_opts {
    const char *prompt;
    int tokens;
    double temperature; /* 0 = greedy */
    int top_k;          /* 0 = all */
    uint64_t seed;
} cc_sample_opts;
/* Stream prompt + continuation as bytes to `out`. */
int cc_sample(const cc_layout *lay, const float *params, const cc_sample_opts *o, FILE *out);

#endif
