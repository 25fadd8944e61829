/* Evaluation: a non-finite prediction is never counted correct, and each
 * validation window is scored at most once. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/cpu_ref.h"
#include "catchat/train.h"
#include "helpers.h"

/* NaN compares false, so with NaN logits no class ranks above the target and
 * the position would count as top-1 and top-5: a position whose loss is not
 * finite (all-NaN row, or NaN target logit) is never correct. */
Test(eval, nan_logits_are_never_correct)
{
    enum { V = 8 };
    float logits[3 * V];
    for (int v = 0; v < V; v++) {
        logits[v] = NAN;                 /* row 0: every logit NaN */
        logits[V + v] = (float)v * 0.1f; /* row 1: only the target's logit NaN */
        logits[2 * V + v] = (float)v;    /* row 2: finite, target 7 is the best */
    }
    logits[V + 2] = NAN;
    const int y[3] = { 3, 2, 7 };
    cc_score s = { 0 };
    cpu_crossentropy(NULL, NULL, logits, y, 3, V, 1.0, &s);
    cr_expect_eq(s.scored, 3);
    cr_expect_eq(s.top1, 1, "top-1 counted %ld of 3 (only row 2 is right)", s.top1);
    cr_expect_eq(s.top5, 1, "top-5 counted %ld of 3 (only row 2 is right)", s.top5);
}

/* Asking for more eval batches than the file has scores each of its nwin
 * windows once (scored = nwin * T): the last batch's wrapped-around windows
 * would count some text twice. */
Test(eval, each_window_scored_once)
{
    cc_config c;
    cc_config_tiny(&c);
    strcpy(c.device, "cpu");
    const int B = c.batch_size, T = c.seq_len;
    const size_t nwin = (size_t)B + 1; /* the second batch holds one real window */
    const size_t len = nwin * (size_t)T + 1;
    uint8_t *text = malloc(len);
    for (size_t i = 0; i < len; i++) text[i] = (uint8_t)("the cat sat on a mat. "[i % 22]);
    cc_tokens tok;
    cr_assert_eq(cc_tokens_from_bytes(&tok, text, len, "val", c.vocab_size), 0);
    cc_loader ld;
    cr_assert_eq(cc_loader_init(&ld, &tok, B, T, 0, c.seed), 0);
    cr_assert_eq(ld.nwin, nwin);
    cc_executor *ex = cc_executor_create(&c, B, T);
    cr_assert_not_null(ex);
    cc_eval_result r;
    cr_assert_eq(cc_evaluate(ex, &ld, 1000, &r), 0);
    cr_expect_eq(r.scored, (long)(nwin * (size_t)T), "scored %ld positions, the file has %zu", r.scored,
                 nwin * (size_t)T);
    cr_expect(isfinite(r.loss) && r.loss > 0, "loss %g", r.loss);
    cr_expect(r.top1 >= 0 && r.top1 <= r.top5 && r.top5 <= 1, "top1 %g top5 %g", r.top1, r.top5);
    ex->ops->destroy(ex);
    cc_loader_free(&ld);
    cc_tokens_free(&tok);
    free(text);
}
