/* `catchat train`: opening a run, everything before its first step, in this
 * order: the options checked against the model, the ranks (and the GPU
 * step's plan they agree on), the out_dir locked, the data and the
 * tokenizer, the preflight and the executor, the state (fresh or restored
 * from a checkpoint), the out_dir's verdict and the logs; and closing it
 * (run_free). The order is the contract: nothing is written to an out_dir
 * before it is this run's, and a run with nothing left to do reads nothing. */
#define _DEFAULT_SOURCE
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "run_ctx.h"
#include "catchat/optim.h"
#include "catchat/resume.h"
#include "catchat/run_dir.h"
#include "catchat/util.h"

void run_free(run_ctx *r)
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

/* The ranks, first: each process picks its GPU before anything touches CUDA.
 * Then the GPU step, planned once (its free memory read once): the
 * signature, the preflight and the executor take this plan. Under NCCL every
 * rank must run the same run, agreed before anything is read or written. */
static int join_ranks(run_ctx *r, const cc_config *cfg, const cc_train_opts *o)
{
    if (cc_dist_init(&r->dist, o->dist_mode ? o->dist_mode : "auto", o->dist_id, o->launch) != 0) return -1;
    r->lead = r->dist.rank == 0; /* rank 0 writes checkpoints, telemetry and progress */
    r->planned = cc_executor_plan(cfg, cfg->batch_size, cfg->seq_len, &r->plan);
    /* a rank whose GPU cannot take the plan has said why; under NCCL no rank starts (rank 0 names it) */
    if (cc_dist_all_passed(&r->dist, r->planned < 0, "the GPU step's plan") != 0) return -1;
    r->prog.quiet = o->quiet || !r->lead;
    r->prog.live = r->prog.quiet ? 0 : o->live;
    if (!r->dist.active) return 0;
    char *sig = run_signature(cfg, o, r->planned ? &r->plan : NULL);
    const int agreed = cc_dist_agree(&r->dist, sig);
    free(sig);
    if (agreed != 0) return -1;
    if (strcmp(cfg->device, "cpu") == 0) return cc_error("data parallelism runs on GPUs: set [run] device = gpu or auto");
    return 0;
}

/* The out_dir is this run's before anything is written there: the heartbeat
 * files of a run that holds it are not touched. Then, under NCCL, the
 * heartbeat, so a rank that fails from here on (its data, its GPU's memory)
 * is found lost instead of awaited for ever. */
static int hold_out_dir(run_ctx *r, const cc_config *cfg)
{
    if (lock_out_dir(r, cfg) != 0) return -1;
    if (!r->dist.active) return 0;
    if (cc_mkdir_p(cfg->out_dir) != 0) return -1;
    r->dist.stall_floor_s = cfg->collective_timeout;
    cc_dist_watch(&r->dist, cfg->out_dir);
    return 0;
}

/* The token files, the tokenizer that says what their ids mean, and a loader for each split. */
static int read_data(run_ctx *r, const cc_config *cfg)
{
    const int B = cfg->batch_size, T = cfg->seq_len;
    if (cc_data_check_split(cfg->train, cfg->val) != 0 ||
        cc_tokens_load_as(&r->train_tok, cfg->train, cfg->vocab_size, cfg->data_format) != 0 ||
        cc_tokens_load_as(&r->val_tok, cfg->val, cfg->vocab_size, cfg->data_format) != 0 ||
        cc_tokenizer_for_run(&r->tokenizer, cfg, &r->train_tok, &r->val_tok, r->lead) != 0 ||
        cc_loader_init(&r->train, &r->train_tok, B, T, 1, cfg->seed) != 0 ||
        cc_loader_init(&r->val, &r->val_tok, B, T, 0, cfg->seed) != 0)
        return -1;
    return 0;
}

/* The preflight on the run's own plan, then the executor made from it. */
static int make_executor(run_ctx *r, const cc_config *cfg, const cc_train_opts *o)
{
    const int B = cfg->batch_size, T = cfg->seq_len;
    const gpu_step_plan *plan = r->planned ? &r->plan : NULL;
    if (o->preflight && o->preflight(cfg, B, T, &r->dist, plan, o->preflight_arg) != 0) return -1;
    if (!(r->ex = cc_executor_create_planned(cfg, B, T, plan))) return -1;
    if (r->dist.active) {
        if (strcmp(r->ex->name, "gpu") != 0)
            return cc_error("data parallelism runs on GPUs: no GPU executor on rank %d", r->dist.rank);
        r->ex->dist = &r->dist;
    }
    return 0;
}

/* The run's state: fresh, or restored from --resume / --init (the weights
 * into the executor), checked against this run's tokenizer and data; what a
 * resume re-planned goes into resumed_how for the opening lines. */
static int start_state(run_ctx *r, const cc_config *cfg, const cc_train_opts *o, cc_run_state *st,
                       char *resumed_how, size_t cap)
{
    memset(st, 0, sizeof(*st));
    st->data_order = CC_ORDER_FEISTEL; /* a resumed run's checkpoint says its own */
    cc_scaler_init(&st->scaler, cfg);
    cc_rng_seed(&st->rng, cfg->seed);
    const char *from = o->resume ? o->resume : o->init_ckpt;
    /* a model of other ids would go on as if each id still meant its old token */
    if (from && (cc_tokenizer_check_checkpoint(from, o->resume ? "--resume" : "--init", r->tokenizer.id,
                                               cfg->train) != 0 ||
                 cc_checkpoint_restore(r->ex, from, o->resume != NULL, st) != 0))
        return -1;
    st->tokenizer = &r->tokenizer;
    if (o->resume && (cc_resume_same_data(cfg, o->resume, o->new_data, st, &r->train_tok, &r->val_tok, resumed_how,
                                          cap) != 0))
        return -1;
    if (o->resume) cc_resume_replan_schedule(cfg, st, resumed_how, cap);
    cc_loader_set_order(&r->train, st->data_order);
    st->sched_max_steps = cfg->max_steps;
    if (r->lead && strcmp(r->ex->name, "cpu") == 0) run_say_cpu_duration(cfg, o, st->step);
    st->digest_all = 0; /* this run's checkpoints hold the sampled digests */
    st->train_digest = cc_tokens_digest(&r->train_tok);
    st->val_digest = cc_tokens_digest(&r->val_tok);
    return 0;
}

/* The out_dir's verdict on this run (its inputs are not its outputs; another
 * run's files), then its logs: telemetry.csv and TensorBoard events beside
 * it (a resumed run starts a new event file, as TensorBoard expects). */
static int open_logs(run_ctx *r, const cc_config *cfg, const cc_train_opts *o, cc_run_state *st)
{
    if (cc_run_dir_check_inputs(cfg, o->init_ckpt) != 0 || prepare_out_dir(cfg, o, st, r->lead, &r->dist) != 0) return -1;
    if (st->best_step > 0) { /* resumed into a folder without that run's best checkpoint: the next eval writes one */
        char best[CC_PATH_MAX + 64];
        snprintf(best, sizeof(best), "%s/%s", cfg->out_dir, CC_CHECKPOINT_BEST_NAME);
        if (access(best, F_OK) != 0) st->best_step = 0;
    }
    char path[CC_PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/telemetry.csv", cfg->out_dir);
    if (r->lead && (cc_telemetry_open(&r->tel, path, o->resume ? st->step : -1) != 0 ||
                    cc_tfevents_open(&r->tfe, cfg->out_dir) != 0))
        return -1;
    return 0;
}

int run_open(run_ctx *r, const cc_config *cfg, const cc_train_opts *o, cc_run_state *st, cc_train_result *res)
{
    const int B = cfg->batch_size, T = cfg->seq_len;
    if (run_check_plant_grad_h(cfg, o) != 0 || join_ranks(r, cfg, o) != 0) return -1;
    if (o->resume) { /* a run with nothing left to do is said before anything is read, checked or written */
        const int done = cc_resume_has_ended(cfg, o->resume, r->lead);
        if (done != 0) {
            res->nothing_to_do = done > 0;
            return done;
        }
    }
    if (hold_out_dir(r, cfg) != 0 || read_data(r, cfg) != 0 || make_executor(r, cfg, o) != 0) return -1;
    if (r->lead && run_check_sample_prompt(&r->tokenizer, o) != 0) return -1;
    char resumed_how[512] = "";
    if (start_state(r, cfg, o, st, resumed_how, sizeof(resumed_how)) != 0 || open_logs(r, cfg, o, st) != 0) return -1;
    r->peer_x = cc_malloc(sizeof(int) * B * T);
    r->peer_y = cc_malloc(sizeof(int) * B * T);
    r->x = cc_malloc(sizeof(int) * B * T * cfg->grad_accum); /* every micro-batch of a step */
    r->y = cc_malloc(sizeof(int) * B * T * cfg->grad_accum);
    if (run_check_plant_nan(r->ex, cfg, o, st->step) != 0) return -1;
    /* without @STEP: before the first step this run takes (a resumed run's too) */
    r->plant_nan_at = !o->plant_nan ? 0 : o->plant_nan_step > 0 ? o->plant_nan_step : st->step + 1;
    if (o->check_finite) r->ex->check = &r->check;
    r->norms_header = !o->resume;
    run_say_start(r, cfg, o, st, resumed_how);
    return 0;
}
