/* What a training run reports as it goes (progress.c): the step's row to
 * telemetry.csv and TensorBoard, per-tensor gradient norms, and the
 * progress line on stdout. */
#ifndef CATCHAT_PROGRESS_H
#define CATCHAT_PROGRESS_H

#include <stddef.h>
#include "catchat/executor.h"
#include "catchat/telemetry.h"
#include "catchat/tfevents.h"

/* Where the run is beside its telemetry row: epochs of the training data
 * consumed, seconds since this invocation started, and (at an eval) how many
 * evals in a row the overfitting watch has counted. */
typedef struct cc_run_progress {
    double epoch, elapsed_s;
    int rising;
} cc_run_progress;

/* The progress line's state: nothing printed when quiet; on a terminal
 * (live = its width) one line rewritten in place, open while it is on
 * screen unended; otherwise a line per step. */
typedef struct cc_progress {
    int quiet, live, open;
} cc_progress;

/* The step's row to the CSV and TensorBoard; TensorBoard also gets the
 * epoch, the elapsed time and the overfitting count. */
int cc_progress_log_row(cc_telemetry *tel, cc_tfevents *tfe, const cc_telemetry_row *row, const cc_run_progress *pr);
/* Per-tensor gradient norms (after unscale and clip) as a row of
 * <out_dir>/grad_norms.csv; `first` writes the header and starts the file. */
void cc_progress_grad_norms(const char *out_dir, cc_executor *ex, long step, int first);
/* The step's progress line; first..end are this invocation's steps (for the ETA). */
void cc_progress_print(cc_progress *p, const cc_telemetry_row *row, long max_steps, long first, long end,
                       const cc_run_progress *pr);
/* Ends a progress line left open in place, before anything else is printed. */
void cc_progress_break(cc_progress *p);
struct cc_tokenizer;
/* The sample at the end of a run, through the run's tokenizer: <out_dir>/sample.txt, TensorBoard's text
 * tab (tag "sample", at `step`) and stdout unless quiet. */
void cc_progress_sample(const cc_progress *pg, cc_executor *ex, const cc_config *cfg,
                        const struct cc_tokenizer *tokenizer, cc_tfevents *tfe, const char *prompt, int tokens,
                        long step);

#endif
