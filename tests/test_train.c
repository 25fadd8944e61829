/* The training loop on the CPU: N steps + resume + N steps gives bit-identical
 * losses to 2N steps straight; telemetry rows are complete; a fresh tiny run
 * learns. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
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
