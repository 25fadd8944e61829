/* Stability tooling on the CPU: NaN provenance names the stage of a planted
 * NaN; audit's verdict names a planted missing unscale and a planted per-token
 * scale; an overflowing gradient is skipped while training goes on; bisect
 * reports every length. (The same checks run on the GPU through the device,
 * see docs/stability.md.) */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/stability.h"
#include "catchat/train.h"
#include "helpers.h"

static void setup(cc_config *c, char *dir, size_t cap)
{
    th_tiny_config(c);
    th_tmpdir(dir, cap);
    snprintf(c->train, sizeof(c->train), "%s/train.txt", dir);
    snprintf(c->val, sizeof(c->val), "%s/val.txt", dir);
    snprintf(c->out_dir, sizeof(c->out_dir), "%s/run", dir);
    th_write_text(c->train, 20000, 1);
    th_write_text(c->val, 3000, 2);
    c->max_steps = 6;
    c->eval_interval = 3;
}

static void expect_provenance(const char *tensor, const char *stage, int layer)
{
    cc_config c;
    char dir[256];
    setup(&c, dir, sizeof(dir));
    cc_train_opts o = { .quiet = 1, .check_finite = 1, .plant_nan = tensor };
    cc_train_result r;
    cr_assert_neq(cc_train(&c, &o, &r), 0, "%s: the run did not stop", tensor);
    cr_expect_eq(r.nonfinite_step, 1);
    cr_expect(r.provenance.found);
    cr_expect_str_eq(r.provenance.stage, stage, "NaN in %s: provenance says %s", tensor, r.provenance.stage);
    cr_expect_eq(r.provenance.layer, layer, "NaN in %s: layer %d", tensor, r.provenance.layer);
    char kept[1100];
    snprintf(kept, sizeof(kept), "%s/nonfinite_batch.safetensors", c.out_dir);
    FILE *f = fopen(kept, "rb");
    cr_expect(f != NULL, "the batch was not kept for replay");
    if (f) fclose(f);
    free(r.losses);
}

Test(provenance, names_the_stage_of_a_planted_nan, .init = cr_redirect_stderr)
{
    expect_provenance("gru.1.weight_hh", "gru_forward", 1);
    expect_provenance("gru.0.weight_ih", "input_projection", 0);
    expect_provenance("ctx.out.weight", "ctx_out_projection", -1);
    expect_provenance("lm_head.weight", "classifier", -1);
}

Test(provenance, finite_run_reports_nothing)
{
    cc_config c;
    char dir[256];
    setup(&c, dir, sizeof(dir));
    cc_train_opts o = { .quiet = 1, .check_finite = 1 };
    cc_train_result r;
    cr_assert_eq(cc_train(&c, &o, &r), 0);
    cr_expect_eq(r.nonfinite_step, 0);
    cr_expect_eq(r.n_losses, 6);
    free(r.losses);
}

Test(optimizer, overflowing_gradient_is_skipped_and_training_goes_on)
{
    cc_config c;
    char dir[256];
    setup(&c, dir, sizeof(dir));
    c.max_steps = 12;
    c.loss_scale_dynamic = 1;
    c.init_scale = 1024;
    cc_train_opts o = { .quiet = 1, .plant_overflow_step = 4 };
    cc_train_result r;
    cr_assert_eq(cc_train(&c, &o, &r), 0);
    cr_expect_eq(r.skipped, 1, "skipped %ld steps", r.skipped);
    cr_expect_eq(r.n_losses, 12);
    for (int i = 0; i < 12; i++) cr_expect(isfinite(r.losses[i]));
    cr_expect(r.losses[11] < r.losses[0], "training did not go on: %.4f -> %.4f", r.losses[0], r.losses[11]);
    /* the dynamic scale halved at the overflow: row 4 of the telemetry shows it */
    char tel[1100], line[512];
    snprintf(tel, sizeof(tel), "%s/telemetry.csv", c.out_dir);
    FILE *f = fopen(tel, "r");
    cr_assert(f);
    double scale5 = 0;
    int skipped4 = -1;
    for (int i = 0; fgets(line, sizeof(line), f); i++) {
        long step;
        double loss, run, lr, scale, n0, n1;
        int sk;
        if (i == 0) continue;
        if (sscanf(line, "%ld,%*d,%lf,%lf,%lf,%lf,%lf,%lf,%d", &step, &loss, &run, &lr, &scale, &n0, &n1, &sk) != 8)
            continue;
        if (step == 4) skipped4 = sk;
        if (step == 5) scale5 = scale;
    }
    fclose(f);
    cr_expect_eq(skipped4, 1);
    cr_expect_eq(scale5, 512.0, "scale after the overflow %g", scale5);
    free(r.losses);
}

static cc_audit_verdict audit_with(const char *plant)
{
    cc_config c;
    char dir[256];
    setup(&c, dir, sizeof(dir));
    cc_audit_opts o = { NULL, 40, "cpu", "cpu", 128.0, plant };
    cc_audit_verdict v = AUDIT_MISMATCH;
    FILE *out = fopen("/dev/null", "w");
    cr_assert_eq(cc_audit(&c, &o, &v, out), 0);
    fclose(out);
    return v;
}

Test(audit, verdict_tells_the_three_causes_apart)
{
    cr_expect_eq(audit_with(NULL), AUDIT_AGREE);
    cr_expect_eq(audit_with("unscale"), AUDIT_UNIFORM_SCALE);
    cr_expect_eq(audit_with("token-scale"), AUDIT_PER_TOKEN);
}

Test(bisect, reports_each_length)
{
    cc_config c;
    char dir[256];
    setup(&c, dir, sizeof(dir));
    const int lengths[3] = { 8, 16, 32 };
    cc_bisect_result res[3];
    FILE *out = fopen("/dev/null", "w");
    cr_assert_eq(cc_bisect(&c, lengths, 3, 4, res, out), 0);
    fclose(out);
    for (int i = 0; i < 3; i++) {
        cr_expect_eq(res[i].length, lengths[i]);
        cr_expect_eq(res[i].nonfinite_step, 0);
        cr_expect_eq(res[i].steps_done, 4);
        cr_expect(res[i].last_loss < res[i].first_loss + 0.5);
    }
}
