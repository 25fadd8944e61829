/* What `train --resume` must check before its first step and what it
 * re-plans (resume.c; docs/training.md, "Resuming"). */
#ifndef CATCHAT_RESUME_H
#define CATCHAT_RESUME_H

#include <stddef.h>
#include <stdint.h>
#include "catchat/checkpoint.h"
#include "catchat/config.h"
#include "catchat/data.h"

/* A run with no step left: 1 (said by the lead rank, nothing written), -1
 * when its step is past max_steps or its tensors are unfit (said), else 0. */
int cc_resume_has_ended(const cc_config *cfg, const char *resume, int lead);
/* Refuses (-1, said) a resume on other data than the checkpoint's, unless
 * new_data: then a new best-eval record where the validation set changed
 * and the training data from its start where it did, described in `how`. */
int cc_resume_same_data(const cc_config *cfg, const char *resume, int new_data, cc_run_state *st, const cc_tokens *train,
                        const cc_tokens *val, char *how, size_t cap);
/* A max_steps other than the checkpoint's plan re-plans the schedule from
 * the step and lr reached (optim.h), appended to `how`. */
void cc_resume_replan_schedule(const cc_config *cfg, cc_run_state *st, char *how, size_t cap);

#endif
