/* The files a training run writes into its out_dir, and the rules that keep
 * one run from overwriting another: a new run refuses an out_dir that holds
 * an earlier one unless told to start over (--force), and a command never
 * writes over one of its own inputs. */
#ifndef CATCHAT_RUN_DIR_H
#define CATCHAT_RUN_DIR_H

#include "catchat/config.h"

#define CC_CHECKPOINT_NAME "checkpoint.safetensors"
/* The checkpoint of the lowest eval loss so far, and (with [train]
 * keep_last) copies of earlier periodic checkpoints, checkpoint_step<N>. */
#define CC_CHECKPOINT_BEST_NAME "checkpoint_best.safetensors"
#define CC_CHECKPOINT_STEP_PREFIX "checkpoint_step"

typedef struct cc_run_dir_info {
    int has_checkpoint;   /* <dir>/checkpoint.safetensors exists */
    long checkpoint_step; /* its "step" metadata (-1 unreadable or absent) */
    char first_log[256];  /* name of a log file an earlier run left, "" if none */
} cc_run_dir_info;

/* What an earlier run left in dir (a missing dir holds nothing). */
void cc_run_dir_probe(const char *dir, cc_run_dir_info *info);

/* Remove what a run writes (checkpoint, telemetry.csv, grad_norms.csv,
 * TensorBoard event files, sample.txt, nonfinite_batch.safetensors);
 * nothing else in dir is touched. */
int cc_run_dir_clear(const char *dir);
/* Whether `path` is one of the files cc_run_dir_clear would delete from dir. */
int cc_run_dir_holds(const char *dir, const char *path);

/* A run killed while writing leaves <file>.tmp.<pid> behind (the file itself
 * is intact: it is replaced by rename). Remove those. */
void cc_run_dir_clear_temporaries(const char *dir);

/* 1 when a and b name the same file (same device and inode, or, for a file
 * not there yet, the same resolved path), else 0. */
int cc_same_file(const char *a, const char *b);

/* Refuse (one-line error, -1) when `output` is one of the n inputs (NULL
 * entries are skipped); `what` names the output's option in the message. */
int cc_refuse_output_over_input(const char *what, const char *output, const char *const *inputs,
                                const char *const *input_names, int n);

/* What a run means to do with its out_dir. */
typedef struct cc_run_intent {
    const char *resume, *init_ckpt; /* the checkpoint resumed or started from, or NULL */
    int force;                      /* --force: an earlier run's files may be deleted */
    int resume_auto;                /* --resume auto found no checkpoint (said in a refusal) */
    long resume_step;               /* a resume's step: the logs are cut back to it */
} cc_run_intent;
/* Decide what the run may do with out_dir before anything is written there:
 * a new run (or one resumed from a checkpoint elsewhere) refuses a folder
 * that holds an earlier run, its checkpoint or only its logs, unless force,
 * which clears what that run wrote; a resume of the folder's own checkpoint
 * keeps its logs, cut back to its step. -1 refused (said). */
int cc_run_dir_prepare(const cc_config *cfg, const cc_run_intent *in);
/* The files a run writes must not be its inputs (the data, --init). */
int cc_run_dir_check_inputs(const cc_config *cfg, const char *init_ckpt);

#endif
