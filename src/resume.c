/* What a resume must check and re-plan (resume.h). */
#include "catchat/resume.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/util.h"

/* --resume of a run with no step left: 1 (said, nothing written), -1 when
 * its step is past max_steps (an error), else 0. Read from the checkpoint's
 * metadata, so no data, preflight or executor comes first. */
int cc_resume_has_ended(const cc_config *cfg, const char *resume, int lead)
{
    const long step = cc_checkpoint_step(resume);
    if (step < cfg->max_steps) return 0; /* -1 too: cc_checkpoint_restore names what is wrong with the file */
    /* a checkpoint unfit to resume (a NaN weight, a missing tensor) is said as such, ended or not */
    const cc_dims d = cc_dims_from_config(cfg);
    cc_layout lay;
    cc_layout_build(&lay, &d);
    float *p = cc_calloc(lay.total, sizeof(float));
    const int loaded = cc_checkpoint_load(resume, &lay, p, NULL, NULL, NULL, NULL, NULL);
    free(p);
    if (loaded != 0) return -1;
    if (step > cfg->max_steps)
        return cc_error("%s is at step %ld, past max_steps %ld: raise max_steps (--set max_steps=N) to train on",
                        resume, step, cfg->max_steps);
    if (lead)
        printf("catchat train: %s is already at max_steps %ld: nothing to do (raise max_steps with "
               "--set max_steps=N to train further)\n", resume, cfg->max_steps);
    return 1;
}

/* A resume must go on with the data its checkpoint was trained and
 * evaluated on: its best eval loss was measured on that validation set and
 * its data position counts batches of that training set. With --new-data a
 * changed set is taken: a new best-eval record (and overfitting watch) where
 * the validation set changed, the training data from its start where it
 * did. Checkpoints older than the digests (0) are taken as they are. */
int cc_resume_same_data(const cc_config *cfg, const char *resume, int new_data, cc_run_state *st, const cc_tokens *train,
                        const cc_tokens *val, char *how, size_t cap)
{
    /* an earlier catchat's checkpoint holds digests of every token: one pass over the data, this once */
    uint64_t (*digest)(const cc_tokens *) = st->digest_all ? cc_tokens_digest_all : cc_tokens_digest;
    const int train_differs = st->train_digest && st->train_digest != digest(train);
    const int val_differs = st->val_digest && st->val_digest != digest(val);
    if (!train_differs && !val_differs) return 0;
    const char *which = train_differs && val_differs ? "training and validation data ([data] train, val)"
                        : train_differs              ? "training data ([data] train)"
                                                     : "validation data ([data] val)";
    if (!new_data)
        return cc_error("%s was trained on other %s than %s%s%s: resume with the same data, or pass --new-data to go "
                        "on with this data (%s)",
                        resume, which, train_differs ? cfg->train : cfg->val,
                        train_differs && val_differs ? " and " : "", train_differs && val_differs ? cfg->val : "",
                        train_differs && val_differs ? "a new best-eval record; the training data from its start"
                        : train_differs            ? "the training data from its start"
                                                   : "a new best-eval record");
    if (val_differs) {
        st->best_step = 0; /* the next eval starts the record (and writes checkpoint_best) */
        st->best_eval = 0;
        st->rising = 0;
        st->last_eval = st->last_train = 0;
    }
    if (train_differs) { /* other windows from their start: in the order of new runs */
        st->data_pos = 0;
        st->data_order = CC_ORDER_FEISTEL;
    }
    snprintf(how, cap, "; --new-data: other %s%s%s", which, val_differs ? ", a new best-eval record" : "",
             train_differs ? ", read from its start" : "");
    return 0;
}

/* A resume with max_steps changed re-plans the schedule from the lr the
 * run has reached (optim.h), so the lr never jumps: raised on a finished
 * run, it stays at lr_min; raised or lowered mid-decay, it decays from where
 * it is to lr_min at the new max_steps. During warmup the plan needs no
 * change (warmup does not depend on max_steps). */
void cc_resume_replan_schedule(const cc_config *cfg, cc_run_state *st, char *how, size_t cap)
{
    if (st->sched_max_steps <= 0 || st->sched_max_steps == cfg->max_steps) return;
    if (st->step < cfg->warmup_steps) { /* warmup does not depend on max_steps: the plan stands */
        const size_t len = strlen(how);
        snprintf(how + len, cap - len, "; max_steps %ld -> %ld (in warmup: the schedule is planned to the new one)",
                 st->sched_max_steps, cfg->max_steps);
        return;
    }
    cc_config planned = *cfg;
    planned.max_steps = st->sched_max_steps;
    const double from = cc_lr_at(&planned, &st->lr_seg, st->step);
    st->lr_seg = (cc_lr_segment){ st->step, from };
    const size_t len = strlen(how);
    snprintf(how + len, cap - len, "; max_steps %ld -> %ld: the lr goes on from %.3g toward lr_min %.3g at max_steps %ld (%s)",
             st->sched_max_steps, cfg->max_steps, from, cfg->lr_min, cfg->max_steps, cfg->lr_schedule);
}
