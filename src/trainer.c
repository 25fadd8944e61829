/* `catchat train`: the training loop. Per step: next batch → forward/backward
 * on the executor (loss × S) → shared optimizer step → telemetry row and a
 * progress line; evaluation and checkpoints at their intervals and at the end,
 * then a sample. All state a resumed run needs is in the checkpoint. */
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include "catchat/checkpoint.h"
#include "catchat/gpu_plan.h"
#include "catchat/optim.h"
#include "catchat/run_dir.h"
#include "catchat/safetensors.h"
#include "catchat/telemetry.h"
#include "catchat/tfevents.h"
#include "catchat/train.h"
#include "catchat/util.h"

#define RUNNING_ALPHA 0.05 /* running_loss is an EMA with this weight on the newest step */

typedef struct {
    cc_dist dist;
    cc_tokens train_tok, val_tok;
    cc_loader train, val;
    cc_executor *ex;
    int *x, *y;
    cc_telemetry tel;
    cc_tfevents tfe;
    cc_finite_report check; /* --check-finite's record of this step */
    int lead, quiet;        /* rank 0 writes; nothing printed when quiet */
    int live, live_open;    /* progress rewritten in place (the terminal's width); a line is open on screen */
    int norms_header;       /* grad_norms.csv still needs its header */
} run_ctx;

static void run_free(run_ctx *r)
{
    /* the heartbeat first: a rank stuck in the teardown below is not taken for alive */
    cc_watchdog_stop(r->dist.watchdog, r->dist.finished);
    r->dist.watchdog = NULL;
    cc_telemetry_close(&r->tel);
    cc_tfevents_close(&r->tfe);
    if (r->ex) r->ex->ops->destroy(r->ex);
    cc_dist_finalize(&r->dist);
    cc_loader_free(&r->train);
    cc_loader_free(&r->val);
    cc_tokens_free(&r->train_tok);
    cc_tokens_free(&r->val_tok);
    free(r->x);
    free(r->y);
}

static int save_checkpoint_as(const cc_config *cfg, cc_executor *ex, const cc_run_state *st, const char *name)
{
    const size_t n = ex->lay.total;
    float *p = cc_malloc(sizeof(float) * n), *m = cc_malloc(sizeof(float) * n),
          *v = cc_malloc(sizeof(float) * n);
    ex->ops->get_params(ex, p);
    ex->ops->get_moments(ex, m, v);
    char path[CC_PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/%s", cfg->out_dir, name);
    int rc = cc_checkpoint_save(path, cfg, &ex->lay, p, m, v, st);
    free(p);
    free(m);
    free(v);
    return rc;
}

static int save_checkpoint(const cc_config *cfg, cc_executor *ex, const cc_run_state *st)
{
    return save_checkpoint_as(cfg, ex, st, CC_CHECKPOINT_NAME);
}

static int step_name_filter(const struct dirent *e)
{
    const size_t n = strlen(CC_CHECKPOINT_STEP_PREFIX);
    return strncmp(e->d_name, CC_CHECKPOINT_STEP_PREFIX, n) == 0 && e->d_name[n] >= '0' && e->d_name[n] <= '9' &&
           !strstr(e->d_name, ".tmp.");
}

/* [train] keep_last: the checkpoint just written is also kept as
 * checkpoint_step<N>.safetensors (a hard link, a copy where links fail), and
 * the oldest such files beyond keep_last are removed. */
static int keep_step_copy(const cc_config *cfg, long step)
{
    if (cfg->keep_last <= 0) return 0;
    char cur[CC_PATH_MAX + 32], kept[CC_PATH_MAX + 300];
    snprintf(cur, sizeof(cur), "%s/%s", cfg->out_dir, CC_CHECKPOINT_NAME);
    snprintf(kept, sizeof(kept), "%s/%s%012ld.safetensors", cfg->out_dir, CC_CHECKPOINT_STEP_PREFIX, step);
    unlink(kept);
    if (link(cur, kept) != 0 && cc_copy_file(cur, kept) != 0) return -1;
    struct dirent **names;
    const int n = scandir(cfg->out_dir, &names, step_name_filter, alphasort); /* zero-padded: oldest first */
    for (int i = 0; i < n; i++) {
        if (i < n - cfg->keep_last) {
            snprintf(kept, sizeof(kept), "%s/%s", cfg->out_dir, names[i]->d_name);
            unlink(kept);
        }
        free(names[i]);
    }
    if (n >= 0) free(names);
    return 0;
}

static int restore(const cc_train_opts *o, cc_executor *ex, cc_run_state *st)
{
    const size_t n = ex->lay.total;
    float *p = cc_calloc(n, sizeof(float)), *m = cc_calloc(n, sizeof(float)),
          *v = cc_calloc(n, sizeof(float));
    int has_m = 0, has_state = 0, rc;
    const char *path = o->resume ? o->resume : o->init_ckpt;
    ex->ops->get_params(ex, p); /* padding and anything not loaded keep their values */
    rc = cc_checkpoint_load(path, &ex->lay, p, o->resume ? m : NULL, o->resume ? v : NULL,
                            &has_m, o->resume ? st : NULL, &has_state);
    if (rc == 0 && o->resume && (!has_m || !has_state))
        rc = cc_error("%s: no optimizer moments or run state: use --init to start from its "
                      "weights instead of --resume", path);
    if (rc == 0) {
        ex->ops->set_params(ex, p);
        if (o->resume) ex->ops->set_moments(ex, m, v);
    }
    free(p);
    free(m);
    free(v);
    return rc;
}

/* --plant-nan: poison a whole parameter tensor (a testing aid for provenance). */
static int plant_nan(cc_executor *ex, const char *name)
{
    const int i = cc_layout_find(&ex->lay, name);
    if (i < 0) return cc_error("--plant-nan: no parameter tensor named '%s'", name);
    float *p = cc_malloc(sizeof(float) * ex->lay.total);
    ex->ops->get_params(ex, p);
    for (size_t k = 0; k < ex->lay.t[i].numel; k++) p[ex->lay.t[i].offset + k] = NAN;
    ex->ops->set_params(ex, p);
    free(p);
    return 0;
}

/* Keep the batch that went non-finite for replay: x, y and the provenance. */
/* Ends a progress line left open in place, before anything else is printed. */
static void live_break(run_ctx *r)
{
    if (r->live_open) {
        putchar('\n');
        fflush(stdout);
        r->live_open = 0;
    }
}

static void keep_batch(const cc_config *cfg, const int *x, const int *y, long step, const char *desc, char *path,
                       size_t cap)
{
    snprintf(path, cap, "%s/nonfinite_batch.safetensors", cfg->out_dir);
    char stepbuf[32];
    snprintf(stepbuf, sizeof(stepbuf), "%ld", step);
    const cc_st_entry e[2] = { { "x", ST_I32, 2, { cfg->batch_size, cfg->seq_len }, x },
                               { "y", ST_I32, 2, { cfg->batch_size, cfg->seq_len }, y } };
    const char *keys[] = { "step", "provenance" }, *vals[] = { stepbuf, desc };
    if (cc_st_write(path, e, 2, keys, vals, 2) != 0) snprintf(path, cap, "(could not be written)");
}

/* Per-tensor gradient norms (after unscale and clip) to a second CSV at eval steps. */
static void write_grad_norms(const cc_config *cfg, cc_executor *ex, long step, int first)
{
    char path[CC_PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/grad_norms.csv", cfg->out_dir);
    FILE *f = fopen(path, first ? "w" : "a");
    if (!f) return;
    if (first) {
        fputs("step", f);
        for (int i = 0; i < ex->lay.n; i++) fprintf(f, ",%s", ex->lay.t[i].name);
        fputc('\n', f);
    }
    float *g = cc_malloc(sizeof(float) * ex->lay.total);
    ex->ops->get_grads(ex, g);
    fprintf(f, "%ld", step);
    for (int i = 0; i < ex->lay.n; i++) {
        double ss = 0;
        for (size_t k = 0; k < ex->lay.t[i].numel; k++) ss += (double)g[ex->lay.t[i].offset + k] * g[ex->lay.t[i].offset + k];
        fprintf(f, ",%.6g", sqrt(ss));
    }
    fputc('\n', f);
    fclose(f);
    free(g);
}

/* Decide what the run may do with out_dir before anything is written there:
 * a new run (or one resumed from a checkpoint elsewhere) refuses a folder
 * that holds an earlier run, unless --force, which clears what that run
 * wrote; a resume of the folder's own checkpoint keeps its logs, cut back to
 * the checkpoint's step. Only the lead rank looks; the verdict is shared. */
static int prepare_out_dir(const cc_config *cfg, const cc_train_opts *o, const cc_run_state *st, int lead,
                           cc_dist *dist)
{
    double refused = 0;
    if (lead) {
        char own[CC_PATH_MAX + 64];
        snprintf(own, sizeof(own), "%s/%s", cfg->out_dir, CC_CHECKPOINT_NAME);
        cc_run_dir_info info;
        cc_run_dir_probe(cfg->out_dir, &info);
        const int resuming_own = o->resume && info.has_checkpoint && cc_same_file(o->resume, own);
        const char *input = o->init_ckpt ? o->init_ckpt : o->resume;
        if (o->init_ckpt && cc_same_file(o->init_ckpt, own) && o->force)
            refused = cc_error("--init %s is the checkpoint this run would replace: copy it elsewhere first, "
                               "or --resume it", o->init_ckpt);
        else if (o->force && input && !resuming_own && cc_run_dir_holds(cfg->out_dir, input))
            refused = cc_error("%s is one of the files --force would delete from %s: copy it elsewhere first",
                               input, cfg->out_dir);
        else if (!resuming_own && !o->force && info.has_checkpoint) {
            char at[48] = "";
            if (info.checkpoint_step >= 0) snprintf(at, sizeof(at), " at step %ld", info.checkpoint_step);
            refused = cc_error("%s holds a run%s: --resume it, or pass --force to start over", cfg->out_dir, at);
        } else if (!o->resume && !o->force && info.first_log[0])
            refused = cc_error("%s holds the logs of an earlier run (%s) but no checkpoint%s: pass --force to "
                               "start over, or choose another [run] out_dir", cfg->out_dir, info.first_log,
                               o->resume_auto ? " for --resume auto to resume" : "");
        else if (!resuming_own && o->force && cc_run_dir_clear(cfg->out_dir) != 0)
            refused = -1;
        else if (cc_mkdir_p(cfg->out_dir) != 0)
            refused = -1;
        if (!refused) {
            cc_run_dir_clear_temporaries(cfg->out_dir);
            /* a resumed run continues its logs from the checkpoint's step: nothing twice */
            char path[CC_PATH_MAX + 32];
            snprintf(path, sizeof(path), "%s/grad_norms.csv", cfg->out_dir);
            if (o->resume && (cc_csv_truncate_after(path, NULL, st->step) != 0 ||
                              cc_tfevents_truncate_after(cfg->out_dir, st->step) != 0))
                refused = -1;
        }
        refused = refused != 0;
    }
    cc_dist_allreduce_host(dist, &refused, 1, 0);
    if (refused && !lead) return cc_error("rank %d: rank 0 refused the out_dir (see its message)", dist->rank);
    return refused ? -1 : 0;
}

/* Inputs the run reads must not be among the files it writes. */
static int check_inputs_not_outputs(const cc_config *cfg, const cc_train_opts *o)
{
    static const char *const written[] = { "telemetry.csv", "grad_norms.csv", "sample.txt", CC_CHECKPOINT_BEST_NAME,
                                           CC_CHECKPOINT_NAME };
    const char *inputs[] = { cfg->train, cfg->val, o->init_ckpt };
    const char *names[] = { "[data] train", "[data] val", "--init" };
    char path[CC_PATH_MAX + 64];
    for (int i = 0; i < 5; i++) { /* the data never; the checkpoint only as --resume (the last one) */
        snprintf(path, sizeof(path), "%s/%s", cfg->out_dir, written[i]);
        if (cc_refuse_output_over_input("the run's output", path, inputs, names, i == 4 ? 2 : 3) != 0) return -1;
    }
    return 0;
}

static void fmt_duration(char *buf, size_t cap, double seconds)
{
    if (seconds < 0 || !isfinite(seconds)) seconds = 0;
    long s = (long)seconds;
    if (s >= 3600) snprintf(buf, cap, "%ldh%02ldm", s / 3600, s / 60 % 60);
    else snprintf(buf, cap, "%ldm%02lds", s / 60, s % 60);
}

/* What every rank of a data-parallel run must share (cc_dist_agree): the
 * config, the options that change which collectives a step makes or when
 * the run ends, and whether the step's gradients are all-reduced during the
 * BPTT (a one-lane step: lanes are chosen per GPU, so mixed GPUs can differ). */
static char *run_signature(const cc_config *cfg, const cc_train_opts *o)
{
    char *text = cc_run_signature(cfg);
    if (!text) return NULL;
    int one_lane = o->check_finite;
    gpu_step_plan plan;
    const int quiet = cc_error_quiet; /* a plan the GPU cannot take is said once, by the executor */
    cc_error_quiet = 1;
    if (!one_lane && strcmp(cfg->device, "cpu") != 0 && gpu_step_plan_for(&plan, cfg, cfg->batch_size, cfg->seq_len) == 0)
        one_lane = plan.lanes == 1;
    cc_error_quiet = quiet;
    const int overlap = one_lane && cfg->grad_accum == 1 && strcmp(cfg->allreduce_overlap, "on") == 0;
    char extra[3 * CC_PATH_MAX + 256];
    snprintf(extra, sizeof(extra),
             "\n[options]\ncheck_finite = %d\nsteps = %ld\nresume = %s\ninit = %s\nforce = %d\nnew_data = %d\n"
             "[step]\nallreduce_during_bptt = %s\n",
             o->check_finite, o->stop_after, o->resume ? o->resume : "", o->init_ckpt ? o->init_ckpt : "", o->force,
             o->new_data,
             overlap ? "yes (one lane: [gpu] lanes)" : "no");
    const size_t n = strlen(text) + strlen(extra) + 1;
    text = cc_realloc(text, n);
    strcat(text, extra);
    return text;
}

/* --resume of a run with no step left: 1 (said, nothing written), -1 when
 * its step is past max_steps (an error), else 0. Read from the checkpoint's
 * metadata, so no data, preflight or executor comes first. */
static int resume_has_ended(const cc_config *cfg, const cc_train_opts *o, int lead)
{
    const long step = cc_checkpoint_step(o->resume);
    if (step < cfg->max_steps) return 0; /* -1 too: restore() names what is wrong with the file */
    /* a checkpoint unfit to resume (a NaN weight, a missing tensor) is said as such, ended or not */
    const cc_dims d = cc_dims_from_config(cfg);
    cc_layout lay;
    cc_layout_build(&lay, &d);
    float *p = cc_calloc(lay.total, sizeof(float));
    const int loaded = cc_checkpoint_load(o->resume, &lay, p, NULL, NULL, NULL, NULL, NULL);
    free(p);
    if (loaded != 0) return -1;
    if (step > cfg->max_steps)
        return cc_error("%s is at step %ld, past max_steps %ld: raise max_steps (--set max_steps=N) to train on",
                        o->resume, step, cfg->max_steps);
    if (lead)
        printf("catchat train: %s is already at max_steps %ld: nothing to do (raise max_steps with "
               "--set max_steps=N to train further)\n", o->resume, cfg->max_steps);
    return 1;
}

/* A token stream's identity: its tokens in order (where the files lie does not matter). */
static uint64_t tokens_digest(const cc_tokens *t)
{
    const uint64_t d = XXH3_64bits(t->tok, t->n * sizeof(t->tok[0]));
    return d ? d : 1; /* 0 means "unknown" in a checkpoint */
}

/* A resume must go on with the data its checkpoint was trained and
 * evaluated on: its best eval loss was measured on that validation set and
 * its data position counts batches of that training set. With --new-data a
 * changed set is taken: a new best-eval record (and overfitting watch) where
 * the validation set changed, the training data from its start where it
 * did. Checkpoints older than the digests (0) are taken as they are. */
static int resume_same_data(const cc_config *cfg, const cc_train_opts *o, cc_run_state *st, const cc_tokens *train,
                            const cc_tokens *val, char *how, size_t cap)
{
    const int train_differs = st->train_digest && st->train_digest != tokens_digest(train);
    const int val_differs = st->val_digest && st->val_digest != tokens_digest(val);
    if (!train_differs && !val_differs) return 0;
    const char *which = train_differs && val_differs ? "training and validation data ([data] train, val)"
                        : train_differs              ? "training data ([data] train)"
                                                     : "validation data ([data] val)";
    if (!o->new_data)
        return cc_error("%s was trained on other %s than %s%s%s: resume with the same data, or pass --new-data to go "
                        "on with this data (a new best-eval record; the training data from its start)",
                        o->resume, which, train_differs ? cfg->train : cfg->val,
                        train_differs && val_differs ? " and " : "", train_differs && val_differs ? cfg->val : "");
    if (val_differs) {
        st->best_step = 0; /* the next eval starts the record (and writes checkpoint_best) */
        st->best_eval = 0;
        st->rising = 0;
        st->last_eval = st->last_train = 0;
    }
    if (train_differs) st->data_pos = 0;
    snprintf(how, cap, "; --new-data: other %s%s%s", which, val_differs ? ", a new best-eval record" : "",
             train_differs ? ", read from its start" : "");
    return 0;
}

/* A resume with max_steps changed re-plans the schedule from the lr the
 * run has reached (optim.h), so the lr never jumps: raised on a finished
 * run, it stays at lr_min; raised or lowered mid-decay, it decays from where
 * it is to lr_min at the new max_steps. During warmup the plan needs no
 * change (warmup does not depend on max_steps). */
static void replan_schedule(const cc_config *cfg, cc_run_state *st, char *how, size_t cap)
{
    if (st->sched_max_steps <= 0 || st->sched_max_steps == cfg->max_steps || st->step < cfg->warmup_steps) return;
    cc_config planned = *cfg;
    planned.max_steps = st->sched_max_steps;
    const double from = cc_lr_at(&planned, &st->lr_seg, st->step);
    st->lr_seg = (cc_lr_segment){ st->step, from };
    const size_t len = strlen(how);
    snprintf(how + len, cap - len, "; max_steps %ld -> %ld: the lr goes on from %.3g to lr_min %.3g at step %ld (%s)",
             st->sched_max_steps, cfg->max_steps, from, cfg->lr_min, cfg->max_steps, cfg->lr_schedule);
}

/* Everything before the first step: ranks, data, executor, restored state,
 * out_dir, logs. 1 when a resumed run has nothing left to do (said, nothing
 * written), 0 ready, -1 error. */
static int run_open(run_ctx *r, const cc_config *cfg, const cc_train_opts *o, cc_run_state *st, cc_train_result *res)
{
    const int B = cfg->batch_size, T = cfg->seq_len;
    const cc_plant_grad_h *pg = &o->plant_grad_h;
    if (o->plant_grad_h_step > 0 && (pg->layer >= cfg->n_layers || pg->b >= cfg->batch_size || pg->t >= cfg->seq_len ||
                                     pg->unit >= cfg->d_model))
        return cc_error("--plant-nan-grad-h %ld:%d,%d,%d,%d: outside the model (layers %d, batch_size %d, seq_len %d, "
                        "d_model %d)", o->plant_grad_h_step, pg->layer, pg->b, pg->t, pg->unit, cfg->n_layers,
                        cfg->batch_size, cfg->seq_len, cfg->d_model);
    /* ranks first: each process picks its GPU before anything touches CUDA */
    if (cc_dist_init(&r->dist, o->dist_mode ? o->dist_mode : "auto", o->dist_id, o->launch) != 0) return -1;
    r->lead = r->dist.rank == 0; /* rank 0 writes checkpoints, telemetry and progress */
    r->quiet = o->quiet || !r->lead;
    r->live = r->quiet ? 0 : o->live;
    if (r->dist.active) {
        /* every rank the same run, before anything is read or written; then its heartbeat, so a rank that
         * fails from here on (its data, its GPU's memory) is found lost instead of awaited for ever */
        char *sig = run_signature(cfg, o);
        const int agreed = cc_dist_agree(&r->dist, sig);
        free(sig);
        if (agreed != 0) return -1;
        if (cc_mkdir_p(cfg->out_dir) != 0) return -1;
        r->dist.stall_floor_s = cfg->collective_timeout;
        cc_dist_watch(&r->dist, cfg->out_dir);
    }
    if (r->dist.active && strcmp(cfg->device, "cpu") == 0)
        return cc_error("data parallelism runs on GPUs: set [run] device = gpu or auto");
    if (o->resume) { /* a run with nothing left to do is said before anything is read or checked */
        const int done = resume_has_ended(cfg, o, r->lead);
        if (done != 0) {
            res->nothing_to_do = done > 0;
            return done;
        }
    }
    if (cc_data_check_split(cfg->train, cfg->val) != 0 ||
        cc_tokens_load_as(&r->train_tok, cfg->train, cfg->vocab_size, cfg->data_format) != 0 ||
        cc_tokens_load_as(&r->val_tok, cfg->val, cfg->vocab_size, cfg->data_format) != 0 ||
        cc_loader_init(&r->train, &r->train_tok, B, T, 1, cfg->seed) != 0 ||
        cc_loader_init(&r->val, &r->val_tok, B, T, 0, cfg->seed) != 0)
        return -1;
    if (o->preflight && o->preflight(cfg, B, T, &r->dist, o->preflight_arg) != 0) return -1;
    if (!(r->ex = cc_executor_create(cfg, B, T))) return -1;
    cc_executor *ex = r->ex;
    if (r->dist.active) {
        if (strcmp(ex->name, "gpu") != 0)
            return cc_error("data parallelism runs on GPUs: no GPU executor on rank %d", r->dist.rank);
        ex->dist = &r->dist;
    }
    memset(st, 0, sizeof(*st));
    cc_scaler_init(&st->scaler, cfg);
    cc_rng_seed(&st->rng, cfg->seed);
    if ((o->resume || o->init_ckpt) && restore(o, ex, st) != 0) return -1;
    char resumed_how[512] = "";
    if (o->resume && (resume_same_data(cfg, o, st, &r->train_tok, &r->val_tok, resumed_how, sizeof(resumed_how)) != 0))
        return -1;
    if (o->resume) replan_schedule(cfg, st, resumed_how, sizeof(resumed_how));
    st->sched_max_steps = cfg->max_steps;
    st->train_digest = tokens_digest(&r->train_tok);
    st->val_digest = tokens_digest(&r->val_tok);
    if (check_inputs_not_outputs(cfg, o) != 0 || prepare_out_dir(cfg, o, st, r->lead, &r->dist) != 0) return -1;
    if (st->best_step > 0) { /* resumed into a folder without that run's best checkpoint: the next eval writes one */
        char best[CC_PATH_MAX + 64];
        snprintf(best, sizeof(best), "%s/%s", cfg->out_dir, CC_CHECKPOINT_BEST_NAME);
        if (access(best, F_OK) != 0) st->best_step = 0;
    }
    char path[CC_PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/telemetry.csv", cfg->out_dir);
    /* TensorBoard events beside the CSV (a resumed run starts a new event file, as TensorBoard expects) */
    if (r->lead && (cc_telemetry_open(&r->tel, path, o->resume ? st->step : -1) != 0 ||
                    cc_tfevents_open(&r->tfe, cfg->out_dir) != 0))
        return -1;
    r->x = cc_malloc(sizeof(int) * B * T * cfg->grad_accum); /* every micro-batch of a step */
    r->y = cc_malloc(sizeof(int) * B * T * cfg->grad_accum);
    if (o->plant_nan && plant_nan(ex, o->plant_nan) != 0) return -1;
    if (o->check_finite) ex->check = &r->check;
    r->norms_header = !o->resume;
    if (!r->quiet) {
        printf("catchat train: %s executor, %zu parameters, %zu train / %zu val tokens, world size %d%s, "
               "resolved config:\n", ex->name, ex->lay.total, r->train_tok.n, r->val_tok.n, r->dist.world,
               r->dist.active ? (r->dist.used_mpi ? " (NCCL, MPI bootstrap)" : " (NCCL, env bootstrap)") : "");
        cc_config_print(cfg, stdout);
        if (o->resume) printf("resumed from %s at step %ld%s\n", o->resume, st->step, resumed_how);
        fflush(stdout);
    }
    return 0;
}

/* --check-finite: every rank learns whether any found a non-finite value in
 * this step (or the next all-reduce hangs); 1 when the run stops here. */
static int nonfinite_found(run_ctx *r, const cc_config *cfg, const cc_train_opts *o, long step, int micro,
                           cc_train_result *res)
{
    if (!o->check_finite) return 0;
    double any_found = r->check.found;
    cc_dist_allreduce_host(&r->dist, &any_found, 1, 0);
    if (any_found <= 0) return 0;
    char desc[256], kept[CC_PATH_MAX + 64];
    if (r->check.found) cc_finite_describe(&r->check, desc, sizeof(desc));
    else snprintf(desc, sizeof(desc), "another rank (see its message)");
    live_break(r);
    const size_t off = (size_t)micro * cfg->batch_size * cfg->seq_len; /* the micro-batch ([train] grad_accum) */
    if (r->lead) keep_batch(cfg, r->x + off, r->y + off, step, desc, kept, sizeof(kept));
    else snprintf(kept, sizeof(kept), "rank 0's out_dir");
    cc_error("non-finite value at step %ld, first in %s; batch kept in %s", step, desc, kept);
    res->nonfinite_step = step;
    res->provenance = r->check;
    return 1;
}

/* Where the run is beside its telemetry row: epochs of the training data
 * consumed, seconds since this invocation started, and (at an eval) how many
 * evals in a row the overfitting watch has counted. */
typedef struct {
    double epoch, elapsed_s;
    int rising;
} run_progress;

/* The step's row to telemetry.csv and TensorBoard (lead rank); TensorBoard
 * also gets the epoch, the elapsed time and the overfitting count. */
static int log_row(run_ctx *r, const cc_telemetry_row *row, const run_progress *pr)
{
    if (!r->lead) return 0;
    if (cc_telemetry_write(&r->tel, row) != 0) return -1;
    static const char *const tags[] = { "train/loss",   "train/running_loss", "train/lr",
                                        "train/loss_scale", "train/grad_norm", "train/grad_norm_clipped",
                                        "perf/tokens_per_s", "train/epoch", "perf/elapsed_s",
                                        "eval/loss", "eval/top1", "eval/top5", "eval/overfitting_evals" };
    const float vals[] = { (float)row->loss, (float)row->running_loss, (float)row->lr, (float)row->loss_scale,
                           (float)row->grad_norm, (float)row->grad_norm_clipped, (float)row->tok_per_s,
                           (float)pr->epoch, (float)pr->elapsed_s, (float)row->eval_loss, (float)row->eval_top1,
                           (float)row->eval_top5, (float)pr->rising };
    return cc_tfevents_scalars(&r->tfe, row->step, tags, vals, row->has_eval ? 13 : 9);
}

/* After an eval: the best checkpoint (lowest eval loss so far) and the
 * overfitting watch: eval loss up while the running train loss went down,
 * [train] patience evals in a row, warns once per streak (and stops the run
 * with early_stop). Returns 1 to stop, -1 on a write error, else 0. */
static int track_eval(run_ctx *r, const cc_config *cfg, cc_run_state *st, const cc_telemetry_row *row)
{
    const double ev = row->eval_loss, tr = st->running_loss;
    if (st->best_step == 0 || ev < st->best_eval) {
        st->best_eval = ev;
        st->best_step = row->step;
        if (r->lead && save_checkpoint_as(cfg, r->ex, st, CC_CHECKPOINT_BEST_NAME) != 0) return -1;
    }
    if (st->last_eval > 0 && ev > st->last_eval && tr < st->last_train) {
        if (st->rising == 0) {
            st->rise_from_eval = st->last_eval;
            st->rise_from_train = st->last_train;
        }
        st->rising++;
    } else {
        st->rising = 0;
    }
    st->last_eval = ev;
    st->last_train = tr;
    if (cfg->patience <= 0 || st->rising < cfg->patience) return 0;
    live_break(r);
    if (r->lead && st->rising == cfg->patience)
        fprintf(stderr, "catchat: overfitting: eval loss rose for %d evals in a row (%.4f -> %.4f) while the train "
                        "loss fell (%.4f -> %.4f); the best eval loss, %.4f at step %ld, is in %s/%s%s\n",
                st->rising, st->rise_from_eval, ev, st->rise_from_train, tr, st->best_eval, st->best_step,
                cfg->out_dir, CC_CHECKPOINT_BEST_NAME,
                cfg->early_stop ? "; stopping ([train] early_stop = 1)" : " ([train] early_stop = 1 stops here)");
    return cfg->early_stop ? 1 : 0;
}

/* tokens/s in at most 5 characters before the unit: 9876, 98.8k, 3.40M */
static void fmt_rate(char *buf, size_t cap, double per_s)
{
    if (per_s < 1e4) snprintf(buf, cap, "%.0f", per_s);
    else if (per_s < 1e6) snprintf(buf, cap, "%.1fk", per_s * 1e-3);
    else snprintf(buf, cap, "%.2fM", per_s * 1e-6);
}

/* The progress line, its fields in the order a user looks for them: where
 * the run is, how it learns, how fast, how long; then the optimizer's state.
 * On a terminal the line is rewritten in place and must fit one row (a
 * longer one wraps, and \r returns to its last row only), so the fields
 * that do not fit are left off whole, from the end; in a log every field. */
static void print_progress(run_ctx *r, const cc_config *cfg, const cc_telemetry_row *row, long first, long end,
                           const run_progress *pr)
{
    if (r->quiet) return;
    const double per = pr->elapsed_s / (double)(row->step - first);
    char eta[32], took[32], rate[32];
    fmt_duration(eta, sizeof(eta), per * (double)(end - row->step));
    fmt_duration(took, sizeof(took), pr->elapsed_s);
    fmt_rate(rate, sizeof(rate), row->tok_per_s);
    char field[9][96];
    snprintf(field[0], sizeof(field[0]), "step %ld/%ld", row->step, cfg->max_steps);
    snprintf(field[1], sizeof(field[1]), "loss %.4f%s", row->loss, row->skipped ? " SKIPPED" : "");
    snprintf(field[2], sizeof(field[2]), "%.1f ms", row->step_ms);
    snprintf(field[3], sizeof(field[3]), "%s tok/s", rate);
    snprintf(field[4], sizeof(field[4]), "%s ETA %s", took, eta);
    snprintf(field[5], sizeof(field[5]), "lr %.2e", row->lr);
    snprintf(field[6], sizeof(field[6]), "norm %.3f", row->grad_norm);
    snprintf(field[7], sizeof(field[7]), "scale %g", row->loss_scale);
    snprintf(field[8], sizeof(field[8]), "epoch %.2f", pr->epoch);
    const int fit = r->live && !row->has_eval; /* eval lines stay on screen: they may wrap */
    char line[1024];
    int len = 0;
    for (int i = 0; i < 9; i++) {
        const int add = (i ? 3 : 0) + (int)strlen(field[i]);
        if (fit && i > 0 && len + add > r->live - 1) break;
        len += snprintf(line + len, sizeof(line) - (size_t)len, "%s%s", i ? " | " : "", field[i]);
    }
    if (row->has_eval)
        snprintf(line + len, sizeof(line) - (size_t)len, " | eval loss %.4f top1 %.2f%% top5 %.2f%%", row->eval_loss,
                 100 * row->eval_top1, 100 * row->eval_top5);
    printf("%s%s%s", r->live ? "\r" : "", line, r->live ? "\033[K" : ""); /* \033[K: what a longer line left */
    if (fit) {
        r->live_open = 1; /* rewritten by the next step; eval steps stay on screen */
    } else {
        putchar('\n');
        r->live_open = 0;
    }
    fflush(stdout);
}

static long scored_in(const int *y, size_t n)
{
    long k = 0;
    for (size_t i = 0; i < n; i++) k += y[i] >= 0;
    return k;
}

/* One optimizer step: batch, forward/backward, optimizer, evaluation at its
 * interval; fills the telemetry row. 1: stop (non-finite value found). */
static int train_step(run_ctx *r, const cc_config *cfg, const cc_train_opts *o, cc_run_state *st,
                      cc_train_result *res, cc_telemetry_row *row)
{
    cc_executor *ex = r->ex;
    const int B = cfg->batch_size, T = cfg->seq_len, world = r->dist.world;
    const double t0 = cc_now_ms();
    r->dist.stop_request = o->stop_signal ? *o->stop_signal : 0;
    cc_dist_step(&r->dist, st->step + 1); /* the step the collectives below belong to; step times for the hang watch */
    /* [train] grad_accum micro-batches, consecutive in the data order: the
     * windows of one batch of batch_size·grad_accum sequences */
    const int A = cfg->grad_accum;
    const size_t BT = (size_t)B * T;
    long n_step = 0;
    for (int k = 0; k < A; k++) {
        cc_loader_batch_part(&r->train, st->data_pos + (uint64_t)k, r->dist.rank, world, r->x + k * BT, r->y + k * BT);
        n_step += scored_in(r->y + k * BT, BT);
    }
    st->data_pos += (uint64_t)A;
    memset(&r->check, 0, sizeof(r->check));
    double loss = 0;
    ex->plant_grad_h = o->plant_grad_h;
    ex->plant_grad_h.on = o->plant_grad_h_step == st->step + 1;
    for (int k = 0; k < A; k++) {
        if (A > 1) {
            ex->accum.n = n_step > 0 ? n_step : 1;
            ex->accum.index = k;
            ex->accum.count = A;
        }
        const double lk = ex->ops->forward_backward(ex, r->x + k * BT, r->y + k * BT, st->scaler.scale);
        /* the step's loss: the micro-batches' means weighted by their scored positions */
        loss += A == 1 ? lk : lk * (double)scored_in(r->y + k * BT, BT) / (double)(n_step > 0 ? n_step : A);
        if (nonfinite_found(r, cfg, o, st->step + 1, k, res)) {
            ex->accum.n = 0;
            ex->plant_grad_h.on = 0;
            return 1;
        }
    }
    ex->accum.n = 0;
    ex->plant_grad_h.on = 0;
    if (o->plant_overflow_step == st->step + 1) {
        float *g = cc_malloc(sizeof(float) * ex->lay.total);
        ex->ops->get_grads(ex, g);
        g[0] = INFINITY;
        ex->ops->set_grads(ex, g, ex->grad_unit);
        free(g);
    }
    cc_step_report rep;
    cc_optimizer_step(ex, cfg, &st->scaler, &st->counts, &st->lr_seg, st->step, &rep);
    const double ms = cc_now_ms() - t0;
    st->running_loss = (st->step == 0 || !isfinite(st->running_loss))
                           ? loss
                           : (1 - RUNNING_ALPHA) * st->running_loss + RUNNING_ALPHA * loss;
    st->step++;
    res->losses[res->n_losses++] = loss;
    res->last_loss = loss;
    *row = (cc_telemetry_row){ st->step, (long)st->step * B * T * world * A, loss, st->running_loss, rep.lr,
                               rep.scale_used, rep.norm, rep.norm_clipped, rep.skipped, ms,
                               (double)B * T * world * A / (ms * 1e-3), (double)B * world * A / (ms * 1e-3), 0, 0, 0,
                               0 };
    if ((cfg->eval_interval > 0 && st->step % cfg->eval_interval == 0) || st->step == cfg->max_steps) {
        cc_eval_result ev;
        cc_evaluate(ex, &r->val, cfg->eval_batches * cfg->grad_accum, &ev); /* batches of the step's size */
        row->has_eval = 1;
        row->eval_loss = res->eval_loss = ev.loss;
        row->eval_top1 = res->eval_top1 = ev.top1;
        row->eval_top5 = res->eval_top5 = ev.top5;
        if (r->lead) write_grad_norms(cfg, ex, st->step, r->norms_header);
        r->norms_header = 0;
    }
    return 0;
}

/* The sample at the end of a run: <out_dir>/sample.txt, TensorBoard's text
 * tab (tag "sample", at the last step) and stdout. */
static void write_sample(run_ctx *r, const cc_config *cfg, const cc_train_opts *o, long step)
{
    cc_executor *ex = r->ex;
    float *p = cc_malloc(sizeof(float) * ex->lay.total);
    ex->ops->get_params(ex, p);
    char path[CC_PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/sample.txt", cfg->out_dir);
    cc_sample_opts so = { .prompt = o->sample_prompt, .tokens = o->sample_tokens, .temperature = 0.8, .top_k = 40,
                          .seed = cfg->seed };
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    const int rc = mem ? cc_sample(&ex->lay, p, &so, mem) : -1;
    if (mem) fclose(mem);
    if (rc == 0) {
        FILE *sf = fopen(path, "w");
        if (sf) {
            fwrite(text, 1, len, sf);
            fclose(sf);
        }
        char *utf8 = cc_valid_utf8(text, len); /* TensorBoard's text tab takes UTF-8 only */
        cc_tfevents_text(&r->tfe, step, "sample", utf8);
        free(utf8);
        if (!r->quiet) {
            printf("sample (%s):\n", path);
            fwrite(text, 1, len, stdout);
            putchar('\n');
        }
    }
    free(text);
    free(p);
}

int cc_train(const cc_config *cfg, const cc_train_opts *o, cc_train_result *res)
{
    run_ctx r;
    memset(&r, 0, sizeof(r));
    memset(res, 0, sizeof(*res));
    cc_run_state st;
    const int opened = run_open(&r, cfg, o, &st, res);
    if (opened != 0) {
        run_free(&r);
        return opened > 0 ? 0 : -1;
    }
    cc_executor *ex = r.ex;
    long end = cfg->max_steps;
    if (o->stop_after > 0 && st.step + o->stop_after < end) end = st.step + o->stop_after;
    res->losses = cc_calloc((size_t)(end > st.step ? end - st.step : 1), sizeof(double));
    const double t_start = cc_now_ms();
    const long first = st.step;
    long skipped_in_a_row = 0;
    int rc = 0;
    const double windows_per_batch = (double)cfg->batch_size * r.dist.world; /* an epoch: every training window once */
    int early = 0;
    while (st.step < end) {
        cc_telemetry_row row;
        if (train_step(&r, cfg, o, &st, res, &row) != 0) { rc = -1; break; }
        if (row.has_eval && (early = track_eval(&r, cfg, &st, &row)) < 0) { rc = -1; break; }
        const run_progress pr = { (double)st.data_pos * windows_per_batch / (double)r.train.nwin,
                                  (cc_now_ms() - t_start) * 1e-3, st.rising };
        if (log_row(&r, &row, &pr) != 0) { rc = -1; break; }
        print_progress(&r, cfg, &row, first, end, &pr);
        /* Under NCCL the step's all-reduce told every rank whether any was signalled. */
        const int stop = ex->dist ? r.dist.stop_agreed > 0 : (o->stop_signal && *o->stop_signal);
        const int periodic = cfg->checkpoint_interval > 0 && st.step % cfg->checkpoint_interval == 0;
        if (r.lead && (periodic || st.step == end || stop || early)) {
            if (save_checkpoint(cfg, ex, &st) != 0) { rc = -1; break; }
            if (o->saved_step) *o->saved_step = (sig_atomic_t)st.step;
            if (periodic && keep_step_copy(cfg, st.step) != 0) { rc = -1; break; }
        }
        if (early) {
            res->early_stopped = 1;
            break;
        }
        if (stop) {
            res->stopped_by = o->stop_signal && *o->stop_signal ? (int)*o->stop_signal : SIGTERM;
            live_break(&r);
            if (r.lead)
                fprintf(stderr, "catchat: stopped by %s after step %ld; checkpoint written. Resume with:\n"
                                "  %s train --resume %s/%s\n",
                        res->stopped_by == SIGINT ? "SIGINT" : res->stopped_by == SIGTERM ? "SIGTERM" : "a signal",
                        st.step, o->prog ? o->prog : "catchat", cfg->out_dir, CC_CHECKPOINT_NAME);
            break;
        }
        skipped_in_a_row = row.skipped ? skipped_in_a_row + 1 : 0;
        if (cfg->max_skipped_steps > 0 && skipped_in_a_row >= cfg->max_skipped_steps) {
            live_break(&r);
            rc = cc_error("%ld steps in a row were skipped (non-finite gradients at every loss scale tried): "
                          "training has diverged or the weights are broken; the last checkpoint is kept "
                          "(see docs/stability.md; [train] max_skipped_steps = 0 never stops)", skipped_in_a_row);
            break;
        }
    }
    live_break(&r);
    res->steps_run = st.step - first;
    res->skipped = st.counts.skipped;
    res->best_eval = st.best_eval;
    res->best_step = st.best_step;
    if (rc == 0 && !res->stopped_by && r.lead && o->sample_prompt && o->sample_prompt[0] && o->sample_tokens > 0)
        write_sample(&r, cfg, o, st.step);
    cc_telemetry_close(&r.tel);
    cc_tfevents_close(&r.tfe);
    if (r.lead && rc == 0 && !res->stopped_by) { /* the summary, --quiet too */
        char took[32];
        fmt_duration(took, sizeof(took), (cc_now_ms() - t_start) * 1e-3);
        printf("catchat train: %s after step %ld (%ld steps in %s), last loss %.4f", early ? "stopped early" : "done",
               st.step, res->steps_run, took, res->last_loss);
        if (st.best_step > 0)
            printf("; best eval loss %.4f at step %ld: %s/%s", st.best_eval, st.best_step, cfg->out_dir,
                   CC_CHECKPOINT_BEST_NAME);
        printf("; checkpoint %s/%s\n", cfg->out_dir, CC_CHECKPOINT_NAME);
        fflush(stdout);
    }
    r.dist.finished = rc == 0; /* the others see this rank end as planned, not lost */
    run_free(&r);
    return rc;
}
