/* Checkpoints: model tensors under docs/model.md's names (F32), optionally the
 * AdamW moments (opt.m.<name>, opt.v.<name>) and the run state in
 * __metadata__, so --resume continues the same run. */
#ifndef CATCHAT_CHECKPOINT_H
#define CATCHAT_CHECKPOINT_H

#include "catchat/config.h"
#include "catchat/data.h"
#include "catchat/executor.h"
#include "catchat/layout.h"
#include "catchat/optim.h"
#include "catchat/rng.h"

typedef struct cc_run_state {
    long step;        /* steps taken (including skipped ones) */
    cc_opt_counts counts;
    cc_scaler scaler;
    uint64_t data_pos; /* batches consumed */
    double running_loss; /* telemetry's running mean, so a resumed CSV continues it */
    /* The evals so far: the best (lowest) eval loss and its step (best_step 0:
     * none yet), and the overfitting watch (train.c): how many evals in a
     * row rose while the train loss fell, from which eval and train loss. */
    double best_eval;
    long best_step;
    int rising;
    double last_eval, last_train, rise_from_eval, rise_from_train;
    cc_rng rng;
    /* The schedule: the max_steps it was planned for (0: unknown, a
     * checkpoint of catchat before 0.8) and its re-planned segment. */
    long sched_max_steps;
    cc_lr_segment lr_seg;
    /* What the run trains and evaluates on: digests of the token streams
     * (XXH3 of the tokens; 0: unknown), so a resume on other data is seen. */
    uint64_t train_digest, val_digest;
    int digest_all; /* they are an earlier catchat's (cc_tokens_digest_all), not the sampled one */
    /* The order its training windows are visited in (data.h: CC_ORDER_*). */
    int data_order;
    /* The tokenizer of those tokens, which every checkpoint carries (NULL:
     * none; not read back by a load: see cc_tokenizer_from_checkpoint). */
    const struct cc_tokenizer *tokenizer;
} cc_run_state;

/* m and v may be NULL (weights only); state may be NULL. */
int cc_checkpoint_save(const char *path, const cc_config *cfg, const cc_layout *lay,
                       const float *params, const float *m, const float *v,
                       const cc_run_state *state);

/* Read the config stored in a checkpoint's metadata over *cfg, its relative
 * [data] paths put under the folder its run started in (so they read the
 * same data from anywhere). Returns 1 if the file holds one, 0 if not, -1 on
 * error. Only the header is read, and no checksum is checked:
 * cc_checkpoint_verify the file first. */
int cc_checkpoint_read_config(const char *path, cc_config *cfg);

/* Read the whole file and check what a load checks before any tensor is
 * used: the safetensors structure and the stored checksums. 0 if sound, -1
 * (said) if not. A command calls it before it reads anything else, so a
 * damaged checkpoint is reported as damaged, not as a later error. */
int cc_checkpoint_verify(const char *path);

/* 1 if the file holds every model tensor of `lay` in that shape (what
 * loading weights under another config needs: train --init), 0 if not, -1
 * (said) if the file cannot be read. */
int cc_checkpoint_fits(const char *path, const cc_layout *lay);


/* The step a resumable checkpoint is at, from its metadata alone (no
 * tensor is read): -1 when the file has none or cannot be read (said). */
long cc_checkpoint_step(const char *path);

/* Load tensors into params (and m, v when non-NULL and present). *has_moments
 * and *has_state tell what the file held; missing state starts fresh. */
int cc_checkpoint_load(const char *path, const cc_layout *lay, float *params, float *m,
                       float *v, int *has_moments, cc_run_state *state, int *has_state);

/* A run's checkpoints, from and into an executor. */
/* <out_dir>/<name> from the executor's weights and moments and the run state. */
int cc_checkpoint_save_run(const cc_config *cfg, cc_executor *ex, const cc_run_state *st, const char *name);
/* [train] keep_last: the checkpoint just written is also kept as
 * checkpoint_step<N>.safetensors (a hard link, a copy where links fail), and
 * the oldest such files beyond keep_last are removed. */
int cc_checkpoint_keep_step(const cc_config *cfg, long step);
/* The weights of `path` into the executor; with `resume`, its moments and
 * run state too (a file without them is refused: use --init). */
int cc_checkpoint_restore(cc_executor *ex, const char *path, int resume, cc_run_state *st);

#endif
