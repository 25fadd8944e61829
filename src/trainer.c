/* `catchat train`: the training loop. Per step: next batch → forward/backward
 * on the executor (loss × S) → shared optimizer step → telemetry row and a
 * progress line; evaluation and checkpoints at their intervals and at the end,
 * then a sample. All state a resumed run needs is in the checkpoint. */
#define _DEFAULT_SOURCE
#include <math.h>
#include <signal.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/checkpoint.h"
#include "catchat/gpu_plan.h"
#include "catchat/optim.h"
#include "catchat/progress.h"
#include "catchat/resume.h"
#include "catchat/run_dir.h"
#include "catchat/run_lock.h"
#include "catchat/safetensors.h"
#include "catchat/telemetry.h"
#include "catchat/tfevents.h"
#include "catchat/tokenizer.h"
#include "catchat/train.h"
#include "catchat/util.h"

#define DATA_ERROR 2 /* train_step: a batch held an id past vocab_size (said) */
#define RUNNING_ALPHA 0.05 /* running_loss is an EMA with this weight on the newest step */

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
    cc_tokenizer_free(&r->tokenizer);
    free(r->x);
    free(r->y);
    free(r->peer_x);
    free(r->peer_y);
    cc_run_lock_release(&r->lock); /* last: every file of the run is closed */
}

/* --plant-nan: poison a whole parameter tensor (a testing aid for provenance;
 * the name was checked when the run started). Between two steps it changes
 * nothing a CUDA graph is keyed by, so a replayed step meets it. */
static void plant_nan(cc_executor *ex, const char *name)
{
    const int i = cc_layout_find(&ex->lay, name);
    float *p = cc_malloc(sizeof(float) * ex->lay.total);
    ex->ops->get_params(ex, p);
    for (size_t k = 0; k < ex->lay.t[i].numel; k++) p[ex->lay.t[i].offset + k] = NAN;
    ex->ops->set_params(ex, p);
    free(p);
}

/* Keep the batch that went non-finite for replay: x, y and the provenance. */
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

/* out_dir's verdict (cc_run_dir_prepare) is the lead rank's, shared with the others. */
static int prepare_out_dir(const cc_config *cfg, const cc_train_opts *o, const cc_run_state *st, int lead,
                           cc_dist *dist)
{
    const cc_run_intent in = { o->resume, o->init_ckpt, o->force, o->resume_auto, st->step };
    double refused = lead && cc_run_dir_prepare(cfg, &in) != 0;
    cc_dist_allreduce_host(dist, &refused, 1, 0);
    if (refused && !lead) return cc_error("rank %d: rank 0 refused the out_dir (see its message)", dist->rank);
    return refused ? -1 : 0;
}

/* Rank 0 locks its out_dir before anything is read or written, so a second
 * run there (a requeued job beside the one still running) stops at once; the
 * verdict is shared so that the other ranks stop too. */
static int lock_out_dir(run_ctx *r, const cc_config *cfg)
{
    double refused = r->lead && cc_run_lock_take(&r->lock, cfg->out_dir) != 0;
    cc_dist_allreduce_host(&r->dist, &refused, 1, 0);
    if (refused && !r->lead) return cc_error("rank %d: rank 0 could not lock the out_dir (see its message)", r->dist.rank);
    return refused ? -1 : 0;
}

/* What every rank of a data-parallel run must share (cc_dist_agree): the
 * config, the options that change which collectives a step makes or when
 * the run ends, and whether the step's gradients are all-reduced during the
 * BPTT (a one-lane step: lanes are chosen per GPU, so mixed GPUs can differ). */
static char *run_signature(const cc_config *cfg, const cc_train_opts *o, const gpu_step_plan *plan)
{
    char *text = cc_run_signature(cfg);
    if (!text) return NULL;
    const int one_lane = o->check_finite || (plan && plan->lanes == 1);
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

/* A config sized for a GPU (the default: minutes a step on a CPU) planned on
 * the CPU reference is said before the first step, with its length and the
 * config made for a CPU, instead of a silent day-long run. */
#define CPU_RUN_NOTE_S 300.0
/* configs/cpu.ini's step is about 2e9 multiply-adds: five times that is a model sized for a GPU */
#define CPU_SIZED_STEP_MACS 1e10
static void say_cpu_duration(const cc_config *cfg, const cc_train_opts *o, long step)
{
    long steps = cfg->max_steps - step;
    if (o->stop_after > 0 && o->stop_after < steps) steps = o->stop_after;
    if (steps <= 0) return;
    /* a long run of a model sized for a CPU is the user's plan, said by the progress line's ETA */
    if (cc_step_macs(cfg) < CPU_SIZED_STEP_MACS) return;
    const double per_step = cc_cpu_step_estimate_s(cfg);
    if (per_step * steps < CPU_RUN_NOTE_S) return;
    char each[32], all[32];
    if (per_step < 60) snprintf(each, sizeof(each), "%.1f s", per_step);
    else cc_format_duration(each, sizeof(each), per_step);
    cc_format_duration(all, sizeof(all), per_step * steps);
    fprintf(stderr, "catchat: note: on the CPU reference a step of this config takes about %s, %ld steps about %s: "
                    "configs/cpu.ini is a model sized for a CPU (or train this one on a GPU)\n", each, steps, all);
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
    /* the GPU step planned once (its free memory read once): the signature, the preflight and the executor take
     * this plan */
    r->planned = cc_executor_plan(cfg, B, T, &r->plan);
    /* a rank whose GPU cannot take the plan has said why; under NCCL no rank starts (rank 0 names it) */
    if (cc_dist_all_passed(&r->dist, r->planned < 0, "the GPU step's plan") != 0) return -1;
    r->prog.quiet = o->quiet || !r->lead;
    r->prog.live = r->prog.quiet ? 0 : o->live;
    if (r->dist.active) {
        /* every rank the same run, before anything is read or written */
        char *sig = run_signature(cfg, o, r->planned ? &r->plan : NULL);
        const int agreed = cc_dist_agree(&r->dist, sig);
        free(sig);
        if (agreed != 0) return -1;
        if (strcmp(cfg->device, "cpu") == 0) return cc_error("data parallelism runs on GPUs: set [run] device = gpu or auto");
    }
    if (o->resume) { /* a run with nothing left to do is said before anything is read, checked or written */
        const int done = cc_resume_has_ended(cfg, o->resume, r->lead);
        if (done != 0) {
            res->nothing_to_do = done > 0;
            return done;
        }
    }
    /* the out_dir is this run's before anything is written there: the heartbeat files of a run that holds it
     * are not touched */
    if (lock_out_dir(r, cfg) != 0) return -1;
    if (r->dist.active) {
        /* the heartbeat, so a rank that fails from here on (its data, its GPU's memory) is found lost instead of
         * awaited for ever */
        if (cc_mkdir_p(cfg->out_dir) != 0) return -1;
        r->dist.stall_floor_s = cfg->collective_timeout;
        cc_dist_watch(&r->dist, cfg->out_dir);
    }
    if (cc_data_check_split(cfg->train, cfg->val) != 0 ||
        cc_tokens_load_as(&r->train_tok, cfg->train, cfg->vocab_size, cfg->data_format) != 0 ||
        cc_tokens_load_as(&r->val_tok, cfg->val, cfg->vocab_size, cfg->data_format) != 0 ||
        cc_tokenizer_for_run(&r->tokenizer, cfg, &r->train_tok, &r->val_tok, r->lead) != 0 ||
        cc_loader_init(&r->train, &r->train_tok, B, T, 1, cfg->seed) != 0 ||
        cc_loader_init(&r->val, &r->val_tok, B, T, 0, cfg->seed) != 0)
        return -1;
    const gpu_step_plan *plan = r->planned ? &r->plan : NULL;
    if (o->preflight && o->preflight(cfg, B, T, &r->dist, plan, o->preflight_arg) != 0) return -1;
    if (!(r->ex = cc_executor_create_planned(cfg, B, T, plan))) return -1;
    cc_executor *ex = r->ex;
    if (r->dist.active) {
        if (strcmp(ex->name, "gpu") != 0)
            return cc_error("data parallelism runs on GPUs: no GPU executor on rank %d", r->dist.rank);
        ex->dist = &r->dist;
    }
    memset(st, 0, sizeof(*st));
    st->data_order = CC_ORDER_FEISTEL; /* a resumed run's checkpoint says its own */
    cc_scaler_init(&st->scaler, cfg);
    cc_rng_seed(&st->rng, cfg->seed);
    if (r->lead && o->sample_prompt && o->sample_prompt[0] && o->sample_tokens > 0) {
        /* the end's sample prompt through the run's tokenizer, before any step: not a failure after the run */
        int *ids = NULL, n;
        const int quiet = cc_error_quiet;
        cc_error_quiet = 1; /* one line, this one, naming the option */
        const int bad = cc_tokenizer_encode(&r->tokenizer, o->sample_prompt, &ids, &n) != 0;
        cc_error_quiet = quiet;
        free(ids);
        if (bad)
            return cc_error("--sample-prompt: the run's tokenizer cannot encode it (%s)",
                            r->tokenizer.bpe ? "not UTF-8 text" : "bytes no token covers");
    }
    const char *from = o->resume ? o->resume : o->init_ckpt;
    /* a model of other ids would go on as if each id still meant its old token */
    if (from && (cc_tokenizer_check_checkpoint(from, o->resume ? "--resume" : "--init", r->tokenizer.id,
                                               cfg->train) != 0 ||
                 cc_checkpoint_restore(ex, from, o->resume != NULL, st) != 0))
        return -1;
    st->tokenizer = &r->tokenizer;
    char resumed_how[512] = "";
    if (o->resume && (cc_resume_same_data(cfg, o->resume, o->new_data, st, &r->train_tok, &r->val_tok, resumed_how, sizeof(resumed_how)) != 0))
        return -1;
    if (o->resume) cc_resume_replan_schedule(cfg, st, resumed_how, sizeof(resumed_how));
    cc_loader_set_order(&r->train, st->data_order);
    st->sched_max_steps = cfg->max_steps;
    if (r->lead && strcmp(ex->name, "cpu") == 0) say_cpu_duration(cfg, o, st->step);
    st->digest_all = 0; /* this run's checkpoints hold the sampled digests */
    st->train_digest = cc_tokens_digest(&r->train_tok);
    st->val_digest = cc_tokens_digest(&r->val_tok);
    if (cc_run_dir_check_inputs(cfg, o->init_ckpt) != 0 || prepare_out_dir(cfg, o, st, r->lead, &r->dist) != 0) return -1;
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
    r->peer_x = cc_malloc(sizeof(int) * B * T);
    r->peer_y = cc_malloc(sizeof(int) * B * T);
    r->x = cc_malloc(sizeof(int) * B * T * cfg->grad_accum); /* every micro-batch of a step */
    r->y = cc_malloc(sizeof(int) * B * T * cfg->grad_accum);
    if (o->plant_nan && cc_layout_find(&ex->lay, o->plant_nan) < 0)
        return cc_error("--plant-nan: no parameter tensor named '%s'", o->plant_nan);
    if (o->plant_nan && o->plant_nan_step > 0 && (o->plant_nan_step <= st->step || o->plant_nan_step > cfg->max_steps))
        return cc_error("--plant-nan %s@%ld: this run takes steps %ld to %ld", o->plant_nan, o->plant_nan_step,
                        st->step + 1, cfg->max_steps);
    /* without @STEP: before the first step this run takes (a resumed run's too) */
    r->plant_nan_at = !o->plant_nan ? 0 : o->plant_nan_step > 0 ? o->plant_nan_step : st->step + 1;
    if (o->check_finite) ex->check = &r->check;
    r->norms_header = !o->resume;
    if (!r->prog.quiet) {
        printf("catchat train: %s, %zu parameters, %zu train / %zu val tokens\n", ex->name, ex->lay.total,
               r->train_tok.n, r->val_tok.n);
        if (r->dist.active)
            printf("world size %d (NCCL, %s bootstrap)\n", r->dist.world, r->dist.used_mpi ? "MPI" : "env");
        printf("config (the keys that differ from the defaults; all are in each checkpoint):\n");
        cc_config_print_changed(cfg, stdout); /* the other keys are the defaults: `catchat help config` */
        if (strcmp(ex->name, "gpu") == 0) {
            const gpu_step_plan *p = cc_gpu_plan(ex);
            char plan[900];
            gpu_step_plan_describe(p, cfg, T, plan, sizeof(plan));
            printf("GPU step: %s\nGPU memory: %.2f GiB planned; recompute %s\n", plan, p->device_bytes / 1073741824.0,
                   p->recompute_why);
        } else if (strcmp(cfg->gpu_recompute, "auto") != 0 || cfg->gpu_memory_limit) {
            printf("[gpu] recompute and memory_limit plan the GPU step: the CPU reference keeps every activation\n");
        }
        fflush(stdout);
    }
    /* --quiet too: where a run goes on from, and a re-planned schedule, are not progress */
    if (r->lead && o->resume) {
        printf("resumed from %s at step %ld%s\n", o->resume, st->step, resumed_how);
        fflush(stdout);
    }
    return 0;
}

/* --check-finite: every rank learns whether any found a non-finite value in
 * this step (or the next all-reduce hangs); 1 when the run stops here. */
static int nonfinite_found(run_ctx *r, const cc_config *cfg, const cc_train_opts *o, long step, int micro,
                           int replayed, cc_train_result *res)
{
    if (!o->check_finite) return 0;
    double any_found = r->check.found;
    cc_dist_allreduce_host(&r->dist, &any_found, 1, 0);
    if (any_found <= 0) return 0;
    char desc[256], kept[CC_PATH_MAX + 64];
    if (r->check.found) cc_finite_describe(&r->check, desc, sizeof(desc));
    else snprintf(desc, sizeof(desc), "another rank (see its message)");
    cc_progress_break(&r->prog);
    const size_t off = (size_t)micro * cfg->batch_size * cfg->seq_len; /* the micro-batch ([train] grad_accum) */
    if (r->lead) keep_batch(cfg, r->x + off, r->y + off, step, desc, kept, sizeof(kept));
    else snprintf(kept, sizeof(kept), "rank 0's out_dir");
    /* a replayed CUDA graph ran the same operations and scans as an eager step; said, since rerunning the batch
     * eagerly (bisect, dump-state) is the next thing to try */
    cc_error("non-finite value at step %ld, first in %s%s; batch kept in %s", step, desc,
             replayed ? " (the step was a replayed CUDA graph)" : "", kept);
    res->nonfinite_step = step;
    res->provenance = r->check;
    return 1;
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
        if (r->lead && cc_checkpoint_save_run(cfg, r->ex, st, CC_CHECKPOINT_BEST_NAME) != 0) return -1;
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
    cc_progress_break(&r->prog);
    if (r->lead && st->rising == cfg->patience)
        fprintf(stderr, "catchat: overfitting: eval loss rose for %d evals in a row (%.4f -> %.4f) while the train "
                        "loss fell (%.4f -> %.4f); the best eval loss, %.4f at step %ld, is in %s/%s%s\n",
                st->rising, st->rise_from_eval, ev, st->rise_from_train, tr, st->best_eval, st->best_step,
                cfg->out_dir, CC_CHECKPOINT_BEST_NAME,
                cfg->early_stop ? "; stopping ([train] early_stop = 1)" : " ([train] early_stop = 1 stops here)");
    return cfg->early_stop ? 1 : 0;
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
        /* an id past vocab_size (a damaged shard: ids are checked where they are read) stops the run before
         * this step, with a checkpoint of the steps before it. Under NCCL every rank reads every rank's part
         * (the order is a pure function of the seed and the position), so all reach one verdict before any
         * collective, and rank 0 alone says it. */
        for (int part = 0; part < world; part++) {
            if (part == r->dist.rank) continue;
            const int quiet = cc_error_quiet;
            cc_error_quiet = quiet || !r->lead;
            const int bad = cc_loader_batch_part(&r->train, st->data_pos + (uint64_t)k, part, world, r->peer_x,
                                                 r->peer_y) != 0;
            cc_error_quiet = quiet;
            if (bad) return DATA_ERROR;
        }
        if (cc_loader_batch_part(&r->train, st->data_pos + (uint64_t)k, r->dist.rank, world, r->x + k * BT,
                                 r->y + k * BT) != 0)
            return DATA_ERROR;
        n_step += scored_in(r->y + k * BT, BT);
    }
    st->data_pos += (uint64_t)A;
    memset(&r->check, 0, sizeof(r->check));
    const int on_gpu = strcmp(ex->name, "gpu") == 0;
    if (r->plant_nan_at == st->step + 1) plant_nan(ex, o->plant_nan);
    double loss = 0;
    ex->plant_grad_h = o->plant_grad_h;
    ex->plant_grad_h.on = o->plant_grad_h_step == st->step + 1;
    for (int k = 0; k < A; k++) {
        if (A > 1) {
            ex->accum.n = n_step > 0 ? n_step : 1;
            ex->accum.index = k;
            ex->accum.count = A;
        }
        const int replays = on_gpu ? cc_gpu_graph_replays(ex) : 0;
        const double lk = ex->ops->forward_backward(ex, r->x + k * BT, r->y + k * BT, st->scaler.scale);
        const int replayed = on_gpu && cc_gpu_graph_replays(ex) > replays;
        /* the step's loss: the micro-batches' means weighted by their scored positions */
        loss += A == 1 ? lk : lk * (double)scored_in(r->y + k * BT, BT) / (double)(n_step > 0 ? n_step : A);
        if (nonfinite_found(r, cfg, o, st->step + 1, k, replayed, res)) {
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
        if (cc_evaluate(ex, &r->val, cfg->eval_batches * cfg->grad_accum, &ev) != 0) /* batches of the step's size */
            return DATA_ERROR;
        row->has_eval = 1;
        row->eval_loss = res->eval_loss = ev.loss;
        row->eval_top1 = res->eval_top1 = ev.top1;
        row->eval_top5 = res->eval_top5 = ev.top5;
        if (r->lead) cc_progress_grad_norms(cfg->out_dir, ex, st->step, r->norms_header);
        r->norms_header = 0;
    }
    return 0;
}

int cc_train(const cc_config *cfg, const cc_train_opts *o, cc_train_result *res)
{
    run_ctx r;
    memset(&r, 0, sizeof(r));
    memset(res, 0, sizeof(*res));
    cc_run_state st;
    const int opened = run_open(&r, cfg, o, &st, res);
    if (opened != 0) {
        r.dist.finished = opened > 0; /* nothing to do: an end as planned, its heartbeat file removed */
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
        const int stepped = train_step(&r, cfg, o, &st, res, &row);
        if (stepped == DATA_ERROR) { /* said (every rank agrees on it); the steps taken are kept */
            cc_progress_break(&r.prog);
            if (r.lead && cc_checkpoint_save_run(cfg, ex, &st, CC_CHECKPOINT_NAME) == 0)
                fprintf(stderr, "  the run stopped after step %ld; checkpoint %s/%s written (catchat data check "
                                "FILE finds a file's first bad id at once)\n", st.step, cfg->out_dir, CC_CHECKPOINT_NAME);
            r.dist.finished = 1; /* an agreed stop: no rank takes another for lost while rank 0 writes */
            rc = -1;
            break;
        }
        if (stepped != 0) { rc = -1; break; }
        if (row.has_eval && (early = track_eval(&r, cfg, &st, &row)) < 0) { rc = -1; break; }
        const cc_run_progress pr = { (double)st.data_pos * windows_per_batch / (double)r.train.nwin,
                                  (cc_now_ms() - t_start) * 1e-3, st.rising };
        if (r.lead && cc_progress_log_row(&r.tel, &r.tfe, &row, &pr) != 0) { rc = -1; break; }
        cc_progress_print(&r.prog, &row, cfg->max_steps, first, end, &pr);
        /* Under NCCL the step's all-reduce told every rank whether any was signalled. */
        const int stop = ex->dist ? r.dist.stop_agreed > 0 : (o->stop_signal && *o->stop_signal);
        const int periodic = cfg->checkpoint_interval > 0 && st.step % cfg->checkpoint_interval == 0;
        if (periodic || st.step == end || stop || early) {
            if (r.lead && cc_checkpoint_save_run(cfg, ex, &st, CC_CHECKPOINT_NAME) != 0) { rc = -1; break; }
            /* every rank: a second signal on any of them names rank 0's checkpoint (one out_dir) */
            if (o->saved_step) *o->saved_step = (sig_atomic_t)st.step;
            if (r.lead && periodic && cc_checkpoint_keep_step(cfg, st.step) != 0) { rc = -1; break; }
        }
        if (early) {
            res->early_stopped = 1;
            break;
        }
        if (stop) {
            res->stopped_by = o->stop_signal && *o->stop_signal ? (int)*o->stop_signal : SIGTERM;
            cc_progress_break(&r.prog);
            if (r.lead)
                fprintf(stderr, "catchat: stopped by %s after step %ld; checkpoint written. Resume with:\n"
                                "  %s train --resume %s/%s\n",
                        cc_signal_name(res->stopped_by),
                        st.step, o->prog ? o->prog : "catchat", cfg->out_dir, CC_CHECKPOINT_NAME);
            break;
        }
        skipped_in_a_row = row.skipped ? skipped_in_a_row + 1 : 0;
        if (cfg->max_skipped_steps > 0 && skipped_in_a_row >= cfg->max_skipped_steps) {
            cc_progress_break(&r.prog);
            rc = cc_error("%ld steps in a row were skipped (non-finite gradients at every loss scale tried): "
                          "training has diverged or the weights are broken; the last checkpoint is kept "
                          "(see docs/stability.md; [train] max_skipped_steps = 0 never stops)", skipped_in_a_row);
            break;
        }
    }
    cc_progress_break(&r.prog);
    res->steps_run = st.step - first;
    res->skipped = st.counts.skipped;
    res->best_eval = st.best_eval;
    res->best_step = st.best_step;
    if (rc == 0 && !res->stopped_by && r.lead && o->sample_prompt && o->sample_prompt[0] && o->sample_tokens > 0)
        cc_progress_sample(&r.prog, ex, cfg, &r.tokenizer, &r.tfe, o->sample_prompt, o->sample_tokens, st.step);
    cc_telemetry_close(&r.tel);
    cc_tfevents_close(&r.tfe);
    if (r.lead && rc == 0 && !res->stopped_by) { /* the summary, --quiet too */
        char took[32];
        cc_format_duration(took, sizeof(took), (cc_now_ms() - t_start) * 1e-3);
        /* --steps N ends a run short of max_steps: not "done", and how to go on */
        const int short_of_max = !early && st.step < cfg->max_steps;
        /* a short first line, then a line each (an 80-column terminal: the paths on lines of their own) */
        printf("catchat train: %s after step %ld (%ld step%s in %s)\n",
               early ? "stopped early" : short_of_max ? "paused (--steps)" : "done", st.step, res->steps_run,
               res->steps_run == 1 ? "" : "s", took);
        printf("  last loss %.4f", res->last_loss);
        if (st.best_step > 0) printf("; best eval loss %.4f at step %ld", st.best_eval, st.best_step);
        printf("\n  checkpoint       %s/%s\n", cfg->out_dir, CC_CHECKPOINT_NAME);
        if (st.best_step > 0) printf("  best checkpoint  %s/%s\n", cfg->out_dir, CC_CHECKPOINT_BEST_NAME);
        if (short_of_max)
            printf("catchat train: max_steps %ld not reached; go on with:\n  %s train --resume %s/%s\n",
                   cfg->max_steps, o->prog ? o->prog : "catchat", cfg->out_dir, CC_CHECKPOINT_NAME);
        fflush(stdout);
    }
    r.dist.finished = rc == 0 || r.dist.finished; /* the others see this rank end as planned, not lost */
    run_free(&r);
    return rc;
}
