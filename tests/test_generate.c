#define _POSIX_C_SOURCE 200809L
/* Streaming generation computes the training forward pass: the logits of the
 * step-by-step decoder equal those of cpu_model_forward over the same tokens,
 * past the ring buffer's wrap (T > W). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
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

/* cc_sample into a string. */
static char *sample_to_string(const cc_layout *lay, const float *p, const cc_sample_opts *so, size_t *len)
{
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    cr_assert_eq(cc_sample(lay, p, so, f), 0);
    fclose(f);
    if (len) *len = n;
    return buf;
}

static float *tiny_params(cc_layout *lay)
{
    cc_config c;
    th_tiny_config(&c);
    cc_dims d = cc_dims_from_config(&c);
    cc_layout_build(lay, &d);
    float *p = malloc(sizeof(float) * lay->total);
    cc_layout_init_params(lay, p, 4);
    return p;
}

/* top-p small enough keeps only the most likely token: the same text as
 * greedy at any temperature; top-p 1 and a penalty of 1 change nothing. */
Test(generate, top_p_and_penalty_limits)
{
    cc_layout lay;
    float *p = tiny_params(&lay);
    cc_sample_opts greedy = { .prompt = "Hello", .tokens = 30, .temperature = 0.0, .seed = 1 };
    cc_sample_opts nucleus = { .prompt = "Hello", .tokens = 30, .temperature = 1.5, .seed = 7, .top_p = 1e-9 };
    char *g = sample_to_string(&lay, p, &greedy, NULL), *n = sample_to_string(&lay, p, &nucleus, NULL);
    cr_expect_str_eq(n, g);
    cc_sample_opts plain = { .prompt = "Hello", .tokens = 30, .temperature = 0.9, .top_k = 40, .seed = 3 };
    cc_sample_opts same = plain;
    same.top_p = 1;
    same.repetition_penalty = 1;
    char *a = sample_to_string(&lay, p, &plain, NULL), *b = sample_to_string(&lay, p, &same, NULL);
    cr_expect_str_eq(a, b);
    free(g);
    free(n);
    free(a);
    free(b);
    free(p);
}

/* A repetition penalty makes a greedy continuation repeat itself less. */
Test(generate, repetition_penalty_reduces_repeats)
{
    cc_layout lay;
    float *p = tiny_params(&lay);
    cc_sample_opts so = { .prompt = "ab", .tokens = 60, .temperature = 0.0, .seed = 1, .no_echo = 1 };
    size_t n0, n1;
    char *plain = sample_to_string(&lay, p, &so, &n0);
    so.repetition_penalty = 50;
    char *pen = sample_to_string(&lay, p, &so, &n1);
    int d0[256] = { 0 }, d1[256] = { 0 }, u0 = 0, u1 = 0;
    for (size_t i = 0; i < n0; i++) u0 += !d0[(unsigned char)plain[i]]++;
    for (size_t i = 0; i < n1; i++) u1 += !d1[(unsigned char)pen[i]]++;
    cr_expect_gt(u1, u0, "distinct bytes with the penalty %d, without %d", u1, u0);
    free(plain);
    free(pen);
    free(p);
}

/* --stop ends the output at the stop text's first end; --no-echo leaves the
 * prompt out; --json holds the same text, one id and one log-probability
 * (≤ 0) per generated token. */
Test(generate, stop_no_echo_and_json)
{
    cc_layout lay;
    float *p = tiny_params(&lay);
    cc_sample_opts so = { .prompt = "Hello", .tokens = 40, .temperature = 0.0, .seed = 1, .no_echo = 1 };
    char *full = sample_to_string(&lay, p, &so, NULL);
    cr_assert_gt(strlen(full), 5);
    char stop[3] = { full[3], full[4], 0 }; /* a text the greedy continuation reaches */
    so.stop = stop;
    char *cut = sample_to_string(&lay, p, &so, NULL);
    const char *first = strstr(full, stop);
    cr_assert(first);
    cr_expect_eq(strlen(cut), (size_t)(first - full) + 2, "stopped at %zu of '%s' for '%s'", strlen(cut), full, stop);
    cr_expect_eq(strncmp(cut, full, strlen(cut)), 0);
    so.stop = NULL;
    so.no_echo = 0;
    so.json = 1;
    so.tokens = 12;
    char *js = sample_to_string(&lay, p, &so, NULL);
    json_error_t err;
    json_t *j = json_loads(js, 0, &err);
    cr_assert(j, "not JSON: %s", js);
    cr_expect_str_eq(json_string_value(json_object_get(j, "prompt")), "Hello");
    json_t *ids = json_object_get(j, "tokens"); /* the bytes of the streamed text ("text" may hold U+FFFD) */
    cr_expect_eq(json_array_size(ids), 12);
    for (size_t i = 0; i < json_array_size(ids); i++)
        cr_expect_eq(json_integer_value(json_array_get(ids, i)), (unsigned char)full[i], "token %zu", i);
    cr_expect(json_is_string(json_object_get(j, "text")));
    json_t *lp = json_object_get(j, "logprobs");
    cr_expect_eq(json_array_size(lp), 12);
    for (size_t i = 0; i < json_array_size(lp); i++) cr_expect_leq(json_real_value(json_array_get(lp, i)), 0.0);
    cr_expect_str_eq(json_string_value(json_object_get(j, "stop_reason")), "length");
    json_decref(j);
    free(full);
    free(cut);
    free(js);
    free(p);
}
