/* What the files of `catchat train` share (private to src/): one run's state,
 * from its opening to its end, and the steps around the training loop.
 *   trainer.c     the training loop (cc_train), and nothing else
 *   run_open.c    opening a run (ranks, data, executor, restored state, logs) and closing it
 *   run_checks.c  options checked against the model and the run before the first step
 *   run_say.c     what a run says about itself at its start and at its end */
#ifndef CATCHAT_RUN_CTX_H
#define CATCHAT_RUN_CTX_H

#include "catchat/checkpoint.h"
#include "catchat/data.h"
#include "catchat/dist.h"
#include "catchat/finite.h"
#include "catchat/gpu_plan.h"
#include "catchat/progress.h"
#include "catchat/run_lock.h"
#include "catchat/telemetry.h"
#include "catchat/tfevents.h"
#include "catchat/tokenizer.h"
#include "catchat/train.h"

typedef struct {
    cc_dist dist;
    cc_tokens train_tok, val_tok;
    cc_tokenizer tokenizer; /* what the ids mean: carried by every checkpoint */
    cc_loader train, val;
    cc_executor *ex;
    int *x, *y;
    int *peer_x, *peer_y; /* under NCCL: another rank's part of a batch, read for its ids */
    cc_telemetry tel;
    cc_tfevents tfe;
    cc_finite_report check; /* --check-finite's record of this step */
    int lead;               /* rank 0 writes */
    cc_progress prog;       /* the progress line (quiet on ranks other than 0) */
    int norms_header;       /* grad_norms.csv still needs its header */
    cc_run_lock lock;       /* rank 0: out_dir is this run's alone */
    gpu_step_plan plan; /* the GPU step's, made once (planned: 1), or none (0: on the CPU) */
    int planned;
    long plant_nan_at; /* --plant-nan: before this step (1-based), 0: none */
} run_ctx;

/* run_open.c. Everything before the first step: ranks, data, executor,
 * restored state, out_dir, logs. 1 when a resumed run has nothing left to do
 * (said, nothing written), 0 ready, -1 error (said). r and *res start zeroed. */
int run_open(run_ctx *r, const cc_config *cfg, const cc_train_opts *o, cc_run_state *st, cc_train_result *res);
/* Closes and frees whatever run_open opened, also after a failure half-way. */
void run_free(run_ctx *r);

/* run_checks.c: the options that name a place in the model or the run,
 * refused (said, -1) before anything is read or any step taken. */
int run_check_plant_grad_h(const cc_config *cfg, const cc_train_opts *o);
/* the end's sample prompt through the run's tokenizer: refused before the first step, not after the run */
int run_check_sample_prompt(const cc_tokenizer *tz, const cc_train_opts *o);
/* --plant-nan's tensor exists and its step is one this run takes (step: the last one taken) */
int run_check_plant_nan(const cc_executor *ex, const cc_config *cfg, const cc_train_opts *o, long step);

/* run_say.c */
/* The note that a config sized for a GPU takes long on the CPU reference. */
void run_say_cpu_duration(const cc_config *cfg, const cc_train_opts *o, long step);
/* The run's opening lines (what trains, on what, with which config; where a
 * resumed run goes on from). resumed_how: what a resume re-planned, or "". */
void run_say_start(const run_ctx *r, const cc_config *cfg, const cc_train_opts *o, const cc_run_state *st,
                   const char *resumed_how);
/* The summary of a run that ended as planned (also under --quiet): how it
 * ended, its losses and checkpoints, and how to go on. seconds: its length. */
void run_say_summary(const cc_config *cfg, const cc_train_opts *o, const cc_run_state *st,
                     const cc_train_result *res, int early, double seconds);

#endif
