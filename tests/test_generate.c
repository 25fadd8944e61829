#define _POSIX_C_SOURCE 200809L
/* Streaming generation computes the training forward pass: the logits of the
 * step-by-step decoder equal those of cpu_model_forward over the same tokens,
 * past the ring buffer's wrap (T > W). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/cpu_ref.h"
#include "catchat/train.h"
#include "helpers.h"

Test(generate, decoder_logits_equal_forward)
{
    cc_config c;
    th_tiny_config(&c);
    c.ctx_window = 5;
    cc_dims d = cc_dims_from_config(&c);
    cc_layout lay;
    cc_layout_build(&lay, &d);
    float *p = malloc(sizeof(float) * lay.total);
    cc_layout_init_params(&lay, p, 4);
    enum { T = 23 };
    int x[T], y[T];
    th_random_tokens(x, y, T, d.V, 8, 0);
    cpu_acts a;
    cpu_acts_alloc(&a, &d, 1, T);
    cpu_model_forward(&lay, p, &a, x, NULL, NULL);
    cpu_decoder dec;
    cpu_decoder_init(&dec, &d);
    float *lg = malloc(sizeof(float) * d.V);
    double worst = 0;
    for (int t = 0; t < T; t++) {
        cpu_decoder_step(&dec, &lay, p, x[t], lg);
        const double e = th_rel_err_f(lg, a.logits + (size_t)t * d.V, (size_t)d.V);
        if (e > worst) worst = e;
    }
    cr_expect(worst < 1e-5, "decoder vs forward logits: worst rel err %.3e", worst);
    cpu_decoder_free(&dec);
    cpu_acts_free(&a);
    free(lg);
    free(p);
}

Test(generate, greedy_is_deterministic_and_streams_prompt)
{
    cc_config c;
    th_tiny_config(&c);
    cc_dims d = cc_dims_from_config(&c);
    cc_layout lay;
    cc_layout_build(&lay, &d);
    float *p = malloc(sizeof(float) * lay.total);
    cc_layout_init_params(&lay, p, 4);
    char *b1 = NULL, *b2 = NULL;
    size_t n1 = 0, n2 = 0;
    FILE *f1 = open_memstream(&b1, &n1), *f2 = open_memstream(&b2, &n2);
    cc_sample_opts so = { .prompt = "Hello", .tokens = 20, .temperature = 0.0, .top_k = 0, .seed = 1 };
    cr_assert_eq(cc_sample(&lay, p, &so, f1), 0);
    so.seed = 999; /* greedy ignores the seed */
    cr_assert_eq(cc_sample(&lay, p, &so, f2), 0);
    fclose(f1);
    fclose(f2);
    cr_expect_eq(n1, 25);
    cr_expect_eq(strncmp(b1, "Hello", 5), 0);
    cr_expect_eq(memcmp(b1, b2, n1), 0);
    free(b1);
    free(b2);
    free(p);
}
