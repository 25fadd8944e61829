/* The commands' engines: training loop, evaluation, sampling, dump-state. */
#ifndef CATCHAT_TRAIN_H
#define CATCHAT_TRAIN_H

#include <signal.h>
#include "catchat/config.h"
#include "catchat/cpu_ref.h"
#include "catchat/data.h"
#include "catchat/executor.h"
#include "catchat/finite.h"

struct gpu_step_plan;
typedef struct cc_train_opts {
    const char *resume;    /* checkpoint to continue from, or NULL */
    const char *init_ckpt; /* weights to start from (fresh optimizer), or NULL */
    int force;             /* out_dir holds an earlier run: clear what it wrote and start over */
    int resume_auto;       /* --resume auto found no checkpoint (said in a refusal over old logs) */
    int new_data;          /* a resume on other data than the checkpoint's goes on: a new best-eval
                            * record, and the training data from its start where it changed */
    const char *prog;      /* the program as the user ran it, for the hints printed (NULL: "catchat") */
    /* Set (to the signal number) by the caller's SIGINT/SIGTERM handler: the
     * step in flight finishes, the checkpoint is written and the run stops. */
    volatile sig_atomic_t *stop_signal;
    /* When non-NULL, set to the step of each checkpoint this invocation
     * writes, so the caller's handler of a second signal can say what is saved. */
    volatile sig_atomic_t *saved_step;
    int quiet;             /* no per-step progress lines (the summary at the end is still printed) */
    int live;              /* stdout is a terminal this many columns wide (0: not a terminal): one
                            * progress line rewritten in place (eval steps stay as lines), cut to the
                            * width, instead of a line per step */
    long stop_after;       /* run at most this many steps now, then checkpoint (0 = to max_steps) */
    const char *sample_prompt; /* sample written at the end ("" = none) */
    int sample_tokens;
    int check_finite;      /* NaN provenance: scan every stage, stop at the first non-finite value */
    const char *dist_mode; /* data parallelism: auto, mpi, env, none (NULL = auto) */
    const char *dist_id;   /* env bootstrap: the NCCL id file on a shared path */
    const struct cc_dist_launch *launch; /* the launcher's ranks (NULL: one process) */
    /* testing aids (the stability tests plant faults through these) */
    const char *plant_nan; /* set every element of this parameter tensor to NaN before step plant_nan_step */
    long plant_nan_step;   /* from 1; 0: the first step the run takes (a resumed run's too) */
    long plant_overflow_step; /* at this step (1-based), set one gradient to +Inf before the optimizer */
    long plant_grad_h_step;   /* at this step (1-based), the NaN of plant_grad_h (finite.h) */
    cc_plant_grad_h plant_grad_h;
    /* Called once the ranks are up and the data is read, before the executor
     * exists (the CLI's preflight: preflight.h); non-zero refuses the run.
     * NULL: none. plan: what the run's executor will be made from (NULL: the
     * run is on the CPU). */
    int (*preflight)(const cc_config *cfg, int B, int T, struct cc_dist *dist, const struct gpu_step_plan *plan,
                     const void *arg);
    const void *preflight_arg;
} cc_train_opts;

typedef struct cc_train_result {
    long steps_run;
    double last_loss, eval_loss, eval_top1, eval_top5;
    double *losses;       /* per step of this invocation (malloc'd, caller frees) */
    long n_losses;
    long skipped;         /* optimizer steps skipped by the non-finite guard */
    long nonfinite_step;  /* with check_finite: the step that went non-finite (0 = none) */
    int stopped_by;       /* the signal that stopped the run (checkpoint written), 0 = none */
    int nothing_to_do;    /* --resume of a run already at max_steps: no step taken, nothing written */
    int early_stopped;    /* [train] early_stop ended the run at the overfitting warning */
    double best_eval;     /* the lowest eval loss of the run and its step (0: no eval yet) */
    long best_step;
    cc_finite_report provenance;
} cc_train_result;

int cc_train(const cc_config *cfg, const cc_train_opts *opts, cc_train_result *res);

/* Mean loss, top-1 and top-5 over `batches` validation batches; -1 (said)
 * when a batch holds an id past vocab_size. */
typedef struct cc_eval_result { double loss, top1, top5; long scored; } cc_eval_result;
int cc_evaluate(cc_executor *ex, cc_loader *val, long batches, cc_eval_result *out);

/* dump-state: one forward + backward on the first training batch. */
struct gpu_step_plan;
/* plan: the GPU step's (cc_executor_plan, checked by the preflight), NULL: the executor plans it. */
int cc_dump_state(const cc_config *cfg, const char *ckpt, const char *out_path, const struct gpu_step_plan *plan);

/* Sampling helpers */
struct cc_tokenizer;
typedef struct cc_sample_opts {
    const char *prompt;
    int tokens;
    double temperature; /* 0 = greedy */
    int top_k;          /* 0 = all */
    uint64_t seed;
    /* encodes the prompt and decodes ids (NULL, or one without tokens: ids
     * are bytes). A prompt encoded with multi-byte tokens is healed: its last
     * token is taken back and the first generated token must begin with that
     * token's text, so a prompt that ends inside a token (a trailing space)
     * goes on as training text did, not from a split it never saw. */
    const struct cc_tokenizer *tokenizer;
    const int *prompt_ids;        /* exact prompt ids instead of `prompt` (NULL: encode the text; never healed) */
    int n_prompt_ids;
    double top_p;                 /* nucleus: the fewest tokens whose probability reaches top_p (0 or 1: off) */
    double repetition_penalty;    /* > 1: logits of tokens already in the context divided (positive) or
                                   * multiplied (negative) by it (0 or 1: off) */
    int no_echo;                  /* the prompt is not written out */
    const char *stop;             /* generation ends once the output ends with this text (NULL: none) */
    int json;                     /* one JSON object at the end instead of streamed text */
} cc_sample_opts;
/* Stream prompt + continuation as bytes to `out`. */
int cc_sample(const cc_layout *lay, const float *params, const cc_sample_opts *o, FILE *out);

#endif
