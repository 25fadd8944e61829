/* `catchat train`: the training loop, and only the loop (a run's opening
 * and closing are run_open.c's, the checks of its options run_checks.c's,
 * what it says at its start and end run_say.c's: src/run_ctx.h). Per step:
 * next batch → forward/backward on the executor (loss × S) → shared
 * optimizer step → telemetry row and a progress line; evaluation and
 * checkpoints at their intervals and at the end, then a sample. All state a
 * resumed run needs is in the checkpoint. */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include "run_ctx.h"
#include "catchat/optim.h"
#include "catchat/run_dir.h"
#include "catchat/safetensors.h"
#include "catchat/util.h"

#define DATA_ERROR 2 /* train_step: a batch held an id past vocab_size (said) */
#define RUNNING_ALPHA 0.05 /* running_loss is an EMA with this weight on the newest step */

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
    if (r.lead && rc == 0 && !res->stopped_by) /* the summary, --quiet too */
        run_say_summary(cfg, o, &st, res, early, (cc_now_ms() - t_start) * 1e-3);
    r.dist.finished = rc == 0 || r.dist.finished; /* the others see this rank end as planned, not lost */
    run_free(&r);
    return rc;
}
