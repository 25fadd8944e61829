/* The training loop on the CPU: N steps + resume + N steps gives bit-identical
 * losses to 2N steps straight; telemetry rows are complete; a fresh tiny run
 * learns. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
