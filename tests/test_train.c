/* The training loop on the CPU: N steps + resume + N steps gives bit-identical
 * losses to 2N steps straight; telemetry rows are complete; a fresh tiny run
 * learns; every step applies the schedule's lr for that step (telemetry and
 * the weights against a hand AdamW), resumed or not. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "catchat/checkpoint.h"
#include "catchat/optim.h"
#include "catchat/run_dir.h"
#include "catchat/train.h"
#include "helpers.h"

static void setup(cc_config *c, char *dir, size_t cap)
{
    th_tiny_config(c);
    th_tmpdir(dir, cap);
    snprintf(c->train, sizeof(c->train), "%s/train.txt", dir);
    snprintf(c->val, sizeof(c->val), "%s/val.txt", dir);
    th_write_text(c->train, 20000, 1);
    th_write_text(c->val, 3000, 2);
    c->max_steps = 12;
    c->eval_interval = 4;
    c->checkpoint_interval = 0;
    c->loss_scale_dynamic = 1; /* the scaler's state must survive the resume too */
    c->init_scale = 1024;
    c->scale_growth_interval = 4;
}

static long count_lines(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long n = 0;
    int ch;
    while ((ch = fgetc(f)) != EOF) n += ch == '\n';
    fclose(f);
    return n;
}

Test(train, resume_is_bit_identical)
{
    cc_config c;
    char dir[256];
    setup(&c, dir, sizeof(dir));
    cc_train_opts o = { .quiet = 1 };
    cc_train_result straight, first, second;
    snprintf(c.out_dir, sizeof(c.out_dir), "%s/straight", dir);
    cr_assert_eq(cc_train(&c, &o, &straight), 0);
    cr_assert_eq(straight.n_losses, 12);

    snprintf(c.out_dir, sizeof(c.out_dir), "%s/resumed", dir);
    o.stop_after = 6;
    cr_assert_eq(cc_train(&c, &o, &first), 0);
    cr_assert_eq(first.n_losses, 6);
    char ck[1100];
    snprintf(ck, sizeof(ck), "%s/checkpoint.safetensors", c.out_dir);
    o.stop_after = 0;
    o.resume = ck;
    cr_assert_eq(cc_train(&c, &o, &second), 0);
    cr_assert_eq(second.n_losses, 6);
    for (int i = 0; i < 6; i++) {
        cr_expect_eq(first.losses[i], straight.losses[i], "step %d", i + 1);
        cr_expect_eq(second.losses[i], straight.losses[6 + i], "step %d: %.17g vs %.17g", 7 + i,
                     second.losses[i], straight.losses[6 + i]);
    }
    cr_expect_eq(second.eval_loss, straight.eval_loss);
    /* the resumed telemetry holds one row per step, header first */
    char tel[1100];
    snprintf(tel, sizeof(tel), "%s/telemetry.csv", c.out_dir);
    cr_expect_eq(count_lines(tel), 13);
    free(straight.losses);
    free(first.losses);
    free(second.losses);
}

Test(train, tiny_model_learns)
{
    cc_config c;
    char dir[256];
    setup(&c, dir, sizeof(dir));
    c.max_steps = 60;
    c.lr = 1e-2;
    c.eval_interval = 60;
    snprintf(c.out_dir, sizeof(c.out_dir), "%s/learn", dir);
    cc_train_opts o = { .quiet = 1 };
    cc_train_result r;
    cr_assert_eq(cc_train(&c, &o, &r), 0);
    /* The text uses 15 words of 18 letters: far below ln 256 = 5.55 once learned. */
    cr_expect(r.losses[0] > 5.0, "initial loss %.3f", r.losses[0]);
    cr_expect(r.eval_loss < 2.5, "eval loss %.3f after 60 steps", r.eval_loss);
    cr_expect(r.eval_top5 > 0.5, "eval top-5 %.3f", r.eval_top5);
    free(r.losses);
}

/* Text made of one short phrase repeated: a model memorises it quickly. */
static void write_repeated(const char *path, const char *phrase, size_t bytes)
{
    FILE *f = fopen(path, "w");
    cr_assert(f);
    for (size_t n = 0; n < bytes; n += strlen(phrase)) fputs(phrase, f);
    fclose(f);
}

/* A model that memorises one phrase gets worse on another: the eval loss
 * rises while the train loss falls. The best checkpoint is the lowest eval
 * so far, the warning fires after [train] patience such evals, and with
 * early_stop the run ends there (checkpoint written, success). */
Test(train, best_checkpoint_overfitting_warning_and_early_stop)
{
    cc_config c;
    char dir[256];
    setup(&c, dir, sizeof(dir));
    write_repeated(c.train, "the cat sat on the mat. ", 20000);
    write_repeated(c.val, "QUIZ: JOX VEX BY WYNG? ", 3000);
    c.max_steps = 200;
    c.eval_interval = 5;
    c.lr = 1e-2;
    c.warmup_steps = 5;
    c.patience = 2;
    c.early_stop = 1;
    c.keep_last = 0;
    snprintf(c.out_dir, sizeof(c.out_dir), "%s/overfit", dir);
    cc_train_opts o = { .quiet = 1 };
    cc_train_result res;
    th_stderr_begin();
    cr_assert_eq(cc_train(&c, &o, &res), 0);
    const char *err = th_stderr_end();
    cr_expect(res.early_stopped, "the run did not stop early; stderr: %s", err);
    cr_expect_lt(res.steps_run, 200);
    cr_expect(strstr(err, "catchat: overfitting: eval loss rose for 2 evals in a row") != NULL, "stderr: %s", err);
    cr_expect_gt(res.best_step, 0);
    cr_expect_lt(res.best_step, res.steps_run, "the best eval came before the rise");
    cr_expect_gt(res.eval_loss, res.best_eval);
    char best[1100];
    snprintf(best, sizeof(best), "%s/checkpoint_best.safetensors", c.out_dir);
    FILE *f = fopen(best, "rb");
    cr_expect(f != NULL, "no %s", best);
    if (f) fclose(f);
    free(res.losses);
}

/* keep_last = 2 keeps the two newest periodic checkpoints as
 * checkpoint_step<N>.safetensors; --force clears them with the rest. */
Test(train, keep_last_keeps_the_newest_periodic_checkpoints)
{
    cc_config c;
    char dir[256], path[1200];
    setup(&c, dir, sizeof(dir));
    c.max_steps = 12;
    c.checkpoint_interval = 3;
    c.keep_last = 2;
    snprintf(c.out_dir, sizeof(c.out_dir), "%s/keep", dir);
    cc_train_opts o = { .quiet = 1 };
    cc_train_result res;
    cr_assert_eq(cc_train(&c, &o, &res), 0);
    free(res.losses);
    const long want[] = { 9, 12 }, gone[] = { 3, 6 };
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof(path), "%s/checkpoint_step%012ld.safetensors", c.out_dir, want[i]);
        cr_expect(access(path, F_OK) == 0, "missing %s", path);
        snprintf(path, sizeof(path), "%s/checkpoint_step%012ld.safetensors", c.out_dir, gone[i]);
        cr_expect(access(path, F_OK) != 0, "kept %s", path);
    }
    o.force = 1;
    c.keep_last = 0;
    cr_assert_eq(cc_train(&c, &o, &res), 0);
    free(res.losses);
    snprintf(path, sizeof(path), "%s/checkpoint_step%012ld.safetensors", c.out_dir, 12L);
    cr_expect(access(path, F_OK) != 0, "--force left %s", path);
}

/* Gradient accumulation: four micro-batches of 2 sequences give the gradient
 * of one batch of 8 (the same windows), to FP32 rounding, with a grad_h
 * clamp that binds and ignored targets. */
Test(train, accumulated_gradient_equals_the_big_batch)
{
    cc_config c;
    th_tiny_config(&c);
    c.grad_h_clamp = 1e-4;      /* binds */
    const int T = c.seq_len, V = c.vocab_size, A = 4, Bm = 2, B = Bm * A;
    int *x = malloc(sizeof(int) * B * T), *y = malloc(sizeof(int) * B * T);
    th_random_tokens(x, y, B * T, V, 11, 7); /* every 7th target ignored */
    cc_executor *big = cc_cpu_executor_create(&c, B, T), *micro = cc_cpu_executor_create(&c, Bm, T);
    const size_t n = big->lay.total;
    float *p = malloc(sizeof(float) * n), *g1 = malloc(sizeof(float) * n), *g2 = malloc(sizeof(float) * n);
    big->ops->get_params(big, p);
    micro->ops->set_params(micro, p);
    const double S = 64;
    const double l1 = big->ops->forward_backward(big, x, y, S);
    big->ops->get_grads(big, g1);
    long n_step = 0;
    for (int i = 0; i < B * T; i++) n_step += y[i] >= 0;
    double l2 = 0;
    for (int k = 0; k < A; k++) {
        micro->accum.n = n_step;
        micro->accum.index = k;
        micro->accum.count = A;
        long nk = 0;
        for (int i = 0; i < Bm * T; i++) nk += y[k * Bm * T + i] >= 0;
        l2 += micro->ops->forward_backward(micro, x + k * Bm * T, y + k * Bm * T, S) * (double)nk / (double)n_step;
    }
    micro->ops->get_grads(micro, g2);
    cr_expect(fabs(l1 - l2) <= 1e-6 * fabs(l1), "loss %.9g vs %.9g", l1, l2);
    cr_expect_eq(big->grad_unit, micro->grad_unit);
    const double e = th_rel_err_f(g2, g1, n);
    cr_expect(e < 1e-5, "gradient rel err %.3e", e);
    /* and the clamp did bind: without it the gradient differs */
    c.grad_h_clamp = 0;
    cc_executor *free_ex = cc_cpu_executor_create(&c, B, T);
    free_ex->ops->set_params(free_ex, p);
    free_ex->ops->forward_backward(free_ex, x, y, S);
    free_ex->ops->get_grads(free_ex, g2);
    cr_expect(th_rel_err_f(g2, g1, n) > 1e-3, "the clamp did not bind");
    big->ops->destroy(big);
    micro->ops->destroy(micro);
    free_ex->ops->destroy(free_ex);
    free(x);
    free(y);
    free(p);
    free(g1);
    free(g2);
}

/* The same through the training loop: batch_size 2 × grad_accum 4 trains as
 * batch_size 8 (the same losses and eval, to FP32 rounding). */
Test(train, grad_accum_trains_as_the_big_batch)
{
    cc_config c;
    char dir[256];
    setup(&c, dir, sizeof(dir));
    c.max_steps = 4;
    c.eval_interval = 4;
    c.loss_scale_dynamic = 0;
    c.batch_size = 8;
    cc_train_opts o = { .quiet = 1 };
    cc_train_result big, acc;
    snprintf(c.out_dir, sizeof(c.out_dir), "%s/big", dir);
    cr_assert_eq(cc_train(&c, &o, &big), 0);
    c.batch_size = 2;
    c.grad_accum = 4;
    snprintf(c.out_dir, sizeof(c.out_dir), "%s/acc", dir);
    cr_assert_eq(cc_train(&c, &o, &acc), 0);
    cr_assert_eq(acc.n_losses, 4);
    for (int i = 0; i < 4; i++)
        cr_expect(fabs(acc.losses[i] - big.losses[i]) <= 1e-5 * big.losses[i], "step %d: %.9g vs %.9g", i + 1,
                  acc.losses[i], big.losses[i]);
    cr_expect(fabs(acc.eval_loss - big.eval_loss) <= 1e-5 * big.eval_loss);
    free(big.losses);
    free(acc.losses);
}

/* A run resumed into another out_dir has no best checkpoint there: it does
 * not name one until an eval writes it; --force never deletes the checkpoint
 * the run starts from. */
Test(train, best_checkpoint_after_resume_elsewhere_and_force)
{
    cc_config c;
    char dir[256], ck[1200], best[1200];
    setup(&c, dir, sizeof(dir));
    snprintf(c.out_dir, sizeof(c.out_dir), "%s/first", dir);
    cc_train_opts o = { .quiet = 1 };
    cc_train_result res;
    cr_assert_eq(cc_train(&c, &o, &res), 0);
    free(res.losses);
    cr_expect_gt(res.best_step, 0);
    snprintf(ck, sizeof(ck), "%s/first/checkpoint.safetensors", dir);
    snprintf(best, sizeof(best), "%s/first/checkpoint_best.safetensors", dir);
    c.max_steps = 20;
    snprintf(c.out_dir, sizeof(c.out_dir), "%s/second", dir);
    o.resume = ck;
    o.stop_after = 1; /* one step, no eval */
    cr_assert_eq(cc_train(&c, &o, &res), 0);
    free(res.losses);
    cr_expect_eq(res.best_step, 0, "names a best checkpoint the folder does not hold");
    /* --init of the folder's own best checkpoint with --force: refused, the file kept */
    cc_train_opts f = { .quiet = 1, .init_ckpt = best, .force = 1 };
    snprintf(c.out_dir, sizeof(c.out_dir), "%s/first", dir);
    th_stderr_begin();
    cr_expect_neq(cc_train(&c, &f, &res), 0);
    const char *err = th_stderr_end();
    cr_expect(strstr(err, "checkpoint_best.safetensors") != NULL, "stderr: %s", err);
    cr_expect(access(best, F_OK) == 0, "--force deleted the --init checkpoint");
    free(res.losses);
}

/* ---- The learning rate a step really applies ----
 * cc_lr_at has its own tests (test_optim); these check that the loop hands
 * the optimizer the schedule at the right step: step s (1-based, as
 * telemetry and checkpoints count) is the optimizer's step s − 1 of the
 * schedule and AdamW's s-th applied step. Comparing two runs with each other
 * cannot see a shift both share, so every check is against the schedule or a
 * hand computation. */

/* telemetry.csv prints lr with 6 significant digits: 5e-6 relative at worst. */
#define LR_PRINT_TOL 1e-5
/* A hand AdamW in double against the FP32 one: the updates of these runs
 * agree to 3e-5 (an FP32 weight near 1 moved by ~1e-3 keeps few digits of
 * the move); an lr one step off moves them by a few percent where the
 * schedule moves, a bias correction one step off by 26% at step 1, 0.1%
 * at its least (steps 12-13 with betas 0.9, 0.99): the early steps tell. */
#define UPDATE_TOL 1e-3
#define MAX_ROWS 64

typedef struct {
    long step;
    double lr;
} lr_row;

/* A run of the schedules' shape: warmup to step 4, then 8 steps of decay
 * from lr to lr_min (wsd: stable, then decaying over the last half). */
static void schedule_setup(cc_config *c, char *dir, size_t cap, const char *schedule)
{
    setup(c, dir, cap);
    strcpy(c->lr_schedule, schedule);
    c->max_steps = 12;
    c->warmup_steps = 4;
    c->lr = 1e-2;
    c->lr_min = 1e-3;
    c->decay_fraction = 0.5;
    c->eval_interval = 0; /* one eval, at the end */
}

/* The step and lr columns of a telemetry file, in file order; the row count. */
static int read_lr_column(const char *path, lr_row *rows, int cap)
{
    FILE *f = fopen(path, "r");
    cr_assert(f, "no %s", path);
    char line[4096];
    cr_assert(fgets(line, sizeof(line), f), "%s is empty", path);
    cr_assert(strncmp(line, "step,tokens,loss,running_loss,lr,", 33) == 0, "lr is not the 5th column: %s", line);
    int n = 0;
    while (n < cap && fgets(line, sizeof(line), f)) {
        const char *field = line;
        for (int col = 0; col < 4 && field; col++)
            if ((field = strchr(field, ','))) field++;
        rows[n].step = atol(line);
        rows[n].lr = field ? strtod(field, NULL) : NAN;
        n++;
    }
    fclose(f);
    return n;
}

static void telemetry_lrs(const cc_config *c, lr_row *rows, int *n)
{
    char path[1200];
    snprintf(path, sizeof(path), "%s/telemetry.csv", c->out_dir);
    *n = read_lr_column(path, rows, MAX_ROWS);
}

/* Rows of steps from..to hold those steps in order, each with the lr of the
 * schedule of `c` at its optimizer step. NaN fails (the comparison is false). */
static void expect_lr_rows(const lr_row *rows, int n, const cc_config *c, const cc_lr_segment *seg, long from, long to,
                           const char *what)
{
    cr_assert_geq(n, to, "%s: %d telemetry rows, want %ld", what, n, to);
    for (long s = from; s <= to; s++) {
        const lr_row *r = &rows[s - 1];
        cr_expect_eq(r->step, s, "%s: row %ld is step %ld", what, s, r->step);
        const double want = cc_lr_at(c, seg, s - 1);
        cr_expect(fabs(r->lr - want) <= LR_PRINT_TOL * want, "%s: step %ld applied lr %.6g, the schedule gives %.6g",
                  what, s, r->lr, want);
    }
}

/* What a checkpoint holds of the optimizer. */
typedef struct {
    float *p, *m, *v;
    cc_run_state st;
} opt_state;

static void opt_state_alloc(opt_state *s, const cc_layout *lay)
{
    s->p = calloc(lay->total, sizeof(float));
    s->m = calloc(lay->total, sizeof(float));
    s->v = calloc(lay->total, sizeof(float));
    memset(&s->st, 0, sizeof(s->st));
}

static void opt_state_free(opt_state *s)
{
    free(s->p);
    free(s->m);
    free(s->v);
}

/* Before step 1 of a fresh run: the seeded initial weights, zero moments. */
static void initial_state(const cc_config *c, const cc_layout *lay, opt_state *s)
{
    cc_layout_init_params(lay, s->p, c->seed);
    memset(s->m, 0, sizeof(float) * lay->total);
    memset(s->v, 0, sizeof(float) * lay->total);
    memset(&s->st, 0, sizeof(s->st));
    cc_scaler_init(&s->st.scaler, c);
}

/* The state after `step`, from the copy keep_last kept of that step's checkpoint. */
static void load_step(const cc_config *c, const cc_layout *lay, long step, opt_state *s)
{
    char path[1200];
    snprintf(path, sizeof(path), "%s/%s%012ld.safetensors", c->out_dir, CC_CHECKPOINT_STEP_PREFIX, step);
    int has_m = 0, has_st = 0;
    cr_assert_eq(cc_checkpoint_load(path, lay, s->p, s->m, s->v, &has_m, &s->st, &has_st), 0, "%s", path);
    cr_assert(has_m && has_st, "%s holds no moments or run state", path);
}

/* ‖a − b‖ / ‖b‖ from sums of squares; +inf when anything is not finite. */
static double rel_from_sums(double diff_ss, double ref_ss)
{
    if (!isfinite(diff_ss) || !isfinite(ref_ss) || ref_ss <= 0) return INFINITY;
    return sqrt(diff_ss / ref_ss);
}

typedef struct {
    double update, m, v;
} step_error;

/* Step `step` redone by hand from the state before it: the gradient of the
 * batch it read (the loader at the state's data position, the CPU executor
 * at its weights and loss scale), unscaled and clipped as src/optim.c does,
 * then AdamW in double with the lr of the schedule at step − 1 and the bias
 * correction of `step` applied steps. Relative errors of the weight update
 * (after − before) and of both moments against what the trainer wrote. */
static step_error adamw_step_error(const cc_config *c, const opt_state *before, const opt_state *after, long step)
{
    const int B = c->batch_size, T = c->seq_len;
    cc_tokens tok;
    cc_loader ld;
    cr_assert_eq(cc_tokens_load_as(&tok, c->train, c->vocab_size, c->data_format), 0);
    cr_assert_eq(cc_loader_init(&ld, &tok, B, T, 1, c->seed), 0);
    int *x = malloc(sizeof(int) * B * T), *y = malloc(sizeof(int) * B * T);
    cc_loader_batch(&ld, before->st.data_pos, x, y);
    cc_executor *ex = cc_cpu_executor_create(c, B, T);
    const cc_layout *lay = &ex->lay;
    float *g = malloc(sizeof(float) * lay->total);
    ex->ops->set_params(ex, before->p);
    ex->ops->forward_backward(ex, x, y, before->st.scaler.scale);
    ex->ops->get_grads(ex, g);
    const double unit = ex->grad_unit;
    double ss = 0;
    for (size_t i = 0; i < lay->total; i++) ss += ((double)g[i] / unit) * ((double)g[i] / unit);
    const double n0 = sqrt(ss);
    const double clip = c->max_grad_norm > 0 && n0 > c->max_grad_norm ? c->max_grad_norm / (n0 + 1e-6) : 1.0;
    const double lr = cc_lr_at(c, &after->st.lr_seg, step - 1), b1 = c->beta1, b2 = c->beta2;
    const double bc1 = 1 - pow(b1, (double)step), bc2 = 1 - pow(b2, (double)step);
    double du = 0, u = 0, dm = 0, mm = 0, dv = 0, vv = 0;
    for (int ti = 0; ti < lay->n; ti++) {
        const cc_tensor_info *t = &lay->t[ti];
        const double decay = t->decay ? 1 - lr * c->weight_decay : 1.0;
        for (size_t k = 0; k < t->numel; k++) {
            const size_t i = t->offset + k;
            const double gi = (double)g[i] / unit * clip;
            const double m = b1 * before->m[i] + (1 - b1) * gi, v = b2 * before->v[i] + (1 - b2) * gi * gi;
            const double p = before->p[i] * decay - lr * (m / bc1) / (sqrt(v / bc2) + c->adam_eps);
            du += ((double)after->p[i] - p) * ((double)after->p[i] - p);
            u += (p - before->p[i]) * (p - before->p[i]);
            dm += (after->m[i] - m) * (after->m[i] - m);
            mm += m * m;
            dv += (after->v[i] - v) * (after->v[i] - v);
            vv += v * v;
        }
    }
    ex->ops->destroy(ex);
    cc_loader_free(&ld);
    cc_tokens_free(&tok);
    free(x);
    free(y);
    free(g);
    return (step_error){ rel_from_sums(du, u), rel_from_sums(dm, mm), rel_from_sums(dv, vv) };
}

/* Steps first..last of the run in c->out_dir (checkpoint_interval 1 and
 * keep_last keeping them all) are each the hand AdamW step from the one
 * before; `before` holds the state before step `first`. */
static void expect_adamw_steps(const cc_config *c, const opt_state *before, long first, long last, const char *what)
{
    const cc_dims d = cc_dims_from_config(c);
    cc_layout lay;
    cc_layout_build(&lay, &d);
    opt_state prev = *before, cur;
    opt_state_alloc(&cur, &lay);
    for (long s = first; s <= last; s++) {
        load_step(c, &lay, s, &cur);
        cr_expect_eq(cur.st.step, s, "%s: checkpoint of step %ld says step %ld", what, s, cur.st.step);
        cr_expect(cur.st.counts.applied == s && cur.st.counts.skipped == 0,
                  "%s: step %ld: %ld applied, %ld skipped (the hand step assumes none skipped)", what, s,
                  cur.st.counts.applied, cur.st.counts.skipped);
        const step_error e = adamw_step_error(c, &prev, &cur, s);
        cr_expect(e.update < UPDATE_TOL && e.m < UPDATE_TOL && e.v < UPDATE_TOL,
                  "%s: step %ld (lr %.6g) against a hand AdamW: update rel err %.3e, m %.3e, v %.3e", what, s,
                  cc_lr_at(c, &cur.st.lr_seg, s - 1), e.update, e.m, e.v);
        if (s > first) opt_state_free(&prev);
        prev = cur;
        opt_state_alloc(&cur, &lay);
    }
    if (last >= first) opt_state_free(&prev);
    opt_state_free(&cur);
}

/* Every step's telemetry row carries the lr of the schedule at that step,
 * for each schedule, through warmup and decay. */
Test(train, telemetry_lr_is_the_schedule_at_every_step)
{
    static const char *const schedules[] = { "cosine", "linear", "constant", "wsd" };
    for (int i = 0; i < 4; i++) {
        cc_config c;
        char dir[256];
        schedule_setup(&c, dir, sizeof(dir), schedules[i]);
        /* the schedule must move from step to step, or a shifted one reads the same */
        int moves = 0;
        for (long s = 0; s < c.max_steps; s++)
            moves += fabs(cc_lr_at(&c, NULL, s + 1) - cc_lr_at(&c, NULL, s)) > 100 * LR_PRINT_TOL * cc_lr_at(&c, NULL, s);
        cr_assert_geq(moves, 3, "%s: the lr changes at %d steps only", schedules[i], moves);
        snprintf(c.out_dir, sizeof(c.out_dir), "%s/%s", dir, schedules[i]);
        cc_train_opts o = { .quiet = 1 };
        cc_train_result res;
        cr_assert_eq(cc_train(&c, &o, &res), 0, "%s", schedules[i]);
        free(res.losses);
        lr_row rows[MAX_ROWS];
        int n;
        telemetry_lrs(&c, rows, &n);
        cr_expect_eq(n, 12, "%s: %d rows", schedules[i], n);
        expect_lr_rows(rows, n, &c, NULL, 1, 12, schedules[i]);
    }
}

/* The weights and moments each step leaves are AdamW's at the schedule's lr
 * for that step (warmup then cosine, and wsd), from step 1 on. */
Test(train, each_step_is_adamw_at_the_scheduled_lr)
{
    static const char *const schedules[] = { "cosine", "wsd" };
    for (int i = 0; i < 2; i++) {
        cc_config c;
        char dir[256];
        schedule_setup(&c, dir, sizeof(dir), schedules[i]);
        c.checkpoint_interval = 1;
        c.keep_last = 100; /* every step's checkpoint kept */
        snprintf(c.out_dir, sizeof(c.out_dir), "%s/%s", dir, schedules[i]);
        cc_train_opts o = { .quiet = 1 };
        cc_train_result res;
        cr_assert_eq(cc_train(&c, &o, &res), 0, "%s", schedules[i]);
        free(res.losses);
        const cc_dims d = cc_dims_from_config(&c);
        cc_layout lay;
        cc_layout_build(&lay, &d);
        opt_state start;
        opt_state_alloc(&start, &lay);
        initial_state(&c, &lay, &start);
        expect_adamw_steps(&c, &start, 1, c.max_steps, schedules[i]);
    }
}

/* Stopped after 5 steps and resumed, a run applies the lrs of the run that
 * went straight through, and its first steps after the resume continue
 * AdamW's step count. A finished run resumed with max_steps raised keeps its
 * rows and goes on at lr_min (its schedule had ended there: the lr does not
 * go back up); one stopped mid-decay and resumed with max_steps raised
 * decays from the lr it had reached to lr_min at the new max_steps. */
Test(train, resumed_run_applies_the_scheduled_lrs)
{
    cc_config c;
    char dir[256], ck[1200];
    schedule_setup(&c, dir, sizeof(dir), "cosine");
    c.checkpoint_interval = 1;
    c.keep_last = 100;
    cc_train_opts o = { .quiet = 1 };
    cc_train_result res;
    snprintf(c.out_dir, sizeof(c.out_dir), "%s/straight", dir);
    cr_assert_eq(cc_train(&c, &o, &res), 0);
    free(res.losses);
    snprintf(c.out_dir, sizeof(c.out_dir), "%s/resumed", dir);
    o.stop_after = 5;
    cr_assert_eq(cc_train(&c, &o, &res), 0);
    free(res.losses);
    snprintf(ck, sizeof(ck), "%s/checkpoint.safetensors", c.out_dir);
    o.stop_after = 0;
    o.resume = ck;
    cr_assert_eq(cc_train(&c, &o, &res), 0);
    free(res.losses);

    lr_row straight[MAX_ROWS], resumed[MAX_ROWS];
    int ns, nr;
    telemetry_lrs(&c, resumed, &nr);
    snprintf(c.out_dir, sizeof(c.out_dir), "%s/straight", dir);
    telemetry_lrs(&c, straight, &ns);
    cr_expect_eq(nr, 12, "resumed: %d rows", nr);
    expect_lr_rows(resumed, nr, &c, NULL, 1, 12, "resumed");
    for (int i = 0; i < nr && i < ns; i++)
        cr_expect_eq(resumed[i].lr, straight[i].lr, "step %ld: resumed lr %.6g, straight %.6g", resumed[i].step,
                     resumed[i].lr, straight[i].lr);
    const cc_dims d = cc_dims_from_config(&c);
    cc_layout lay;
    cc_layout_build(&lay, &d);
    opt_state at5;
    opt_state_alloc(&at5, &lay);
    snprintf(c.out_dir, sizeof(c.out_dir), "%s/resumed", dir);
    load_step(&c, &lay, 5, &at5);
    expect_adamw_steps(&c, &at5, 6, 12, "resumed at step 5");
    opt_state_free(&at5);

    /* the finished straight run, resumed with max_steps raised to 20 */
    cc_config longer = c;
    longer.max_steps = 20;
    snprintf(longer.out_dir, sizeof(longer.out_dir), "%s/straight", dir);
    snprintf(ck, sizeof(ck), "%s/checkpoint.safetensors", longer.out_dir);
    o.resume = ck;
    cr_assert_eq(cc_train(&longer, &o, &res), 0);
    free(res.losses);
    lr_row raised[MAX_ROWS];
    int nx;
    telemetry_lrs(&longer, raised, &nx);
    cr_expect_eq(nx, 20, "raised: %d rows", nx);
    expect_lr_rows(raised, nx, &c, NULL, 1, 12, "raised max_steps, the rows before");
    for (int s = 13; s <= 20; s++)
        cr_expect(fabs(raised[s - 1].lr - c.lr_min) <= LR_PRINT_TOL * c.lr_min, "raised: step %d at lr %.6g, not lr_min",
                  s, raised[s - 1].lr);
    opt_state at12;
    opt_state_alloc(&at12, &lay);
    load_step(&longer, &lay, 12, &at12);
    expect_adamw_steps(&longer, &at12, 13, 20, "raised max_steps");
    opt_state_free(&at12);

    /* stopped at step 8 of 12 (mid-decay), resumed with max_steps 16 */
    cc_config mid = c;
    snprintf(mid.out_dir, sizeof(mid.out_dir), "%s/mid", dir);
    o.resume = NULL;
    o.stop_after = 8;
    cr_assert_eq(cc_train(&mid, &o, &res), 0);
    free(res.losses);
    mid.max_steps = 16;
    snprintf(ck, sizeof(ck), "%s/checkpoint.safetensors", mid.out_dir);
    o.resume = ck;
    o.stop_after = 0;
    cr_assert_eq(cc_train(&mid, &o, &res), 0);
    free(res.losses);
    lr_row midrows[MAX_ROWS];
    int nm;
    telemetry_lrs(&mid, midrows, &nm);
    cr_expect_eq(nm, 16, "mid: %d rows", nm);
    expect_lr_rows(midrows, nm, &c, NULL, 1, 8, "mid, before the resume");
    const cc_lr_segment seg = { 8, cc_lr_at(&c, NULL, 8) };
    expect_lr_rows(midrows, nm, &mid, &seg, 9, 16, "mid, re-planned");
    cr_expect(fabs(midrows[8].lr - cc_lr_at(&c, NULL, 8)) <= LR_PRINT_TOL * midrows[8].lr,
              "the first step after the resume applies the lr the run had reached");
    cr_expect(midrows[8].lr > midrows[15].lr && midrows[15].lr > c.lr_min, "mid: decays towards lr_min at 16");
    opt_state at8;
    opt_state_alloc(&at8, &lay);
    load_step(&mid, &lay, 8, &at8);
    expect_adamw_steps(&mid, &at8, 9, 16, "mid, re-planned");
    opt_state_free(&at8);
}
