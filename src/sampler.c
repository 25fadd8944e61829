/* Generation: streaming, constant memory per token (cpu_decoder), sampling
 * with temperature, top-k, top-p (nucleus) and a repetition penalty;
 * temperature 0 is greedy. Prompt and continuation go out as text as they
 * are produced, or as one JSON object at the end (text, token ids, each
 * generated token's log-probability under the model). */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/rng.h"
#include "catchat/train.h"
#include "catchat/tokenizer.h"
#include "catchat/util.h"
#include "catchat/vocab.h"

/* The output so far as bytes: for --stop and --json. */
typedef struct {
    char *buf;
    size_t n, cap;
} text_buf;

static void text_add(text_buf *t, const char *bytes, size_t n)
{
    if (t->n + n + 1 > t->cap) {
        t->cap = (t->n + n + 1) * 2;
        t->buf = cc_realloc(t->buf, t->cap);
    }
    memcpy(t->buf + t->n, bytes, n);
    t->n += n;
    t->buf[t->n] = 0;
}

/* Token `token` as text: its vocabulary bytes, the byte itself, or <id>
 * (tmp holds the last two). */
static const char *token_text(int token, const cc_vocab *vocab, char *tmp, size_t cap, size_t *n)
{
    if (vocab && token < vocab->n) {
        *n = (size_t)vocab->len[token];
        return (const char *)vocab->bytes[token];
    }
    if (!vocab && token < 256) {
        tmp[0] = (char)token;
        *n = 1;
        return tmp;
    }
    *n = (size_t)snprintf(tmp, cap, "<%d>", token); /* an id the vocabulary does not cover */
    return tmp;
}

/* Token `token` written out and kept in text, its first `skip` bytes left
 * out of text (and of out too, with skip_out). */
static void emit_from(FILE *out, text_buf *text, int token, const cc_vocab *vocab, size_t skip, int skip_out)
{
    char tmp[32];
    size_t n;
    const char *b = token_text(token, vocab, tmp, sizeof(tmp), &n);
    if (skip > n) skip = n;
    text_add(text, b + skip, n - skip);
    if (out) {
        if (skip_out) fwrite(b + skip, 1, n - skip, out);
        else fwrite(b, 1, n, out);
        fflush(out);
    }
}

static void emit(FILE *out, text_buf *text, int token, const cc_vocab *vocab) { emit_from(out, text, token, vocab, 0, 0); }

/* Healing's rule for the first generated token: only tokens that begin with
 * the taken-back token's bytes stay possible. */
static void keep_heal_matches(float *logits, int V, const cc_vocab *vocab, const uint8_t *heal, size_t heal_len)
{
    for (int v = 0; v < V; v++)
        if (v >= vocab->n || (size_t)vocab->len[v] < heal_len || memcmp(vocab->bytes[v], heal, heal_len) != 0)
            logits[v] = -INFINITY;
}

/* Repetition penalty (CTRL): every token already in the context is made
 * less likely, once however often it occurred. */
static void penalize(float *logits, int V, const unsigned char *seen, double penalty)
{
    if (!(penalty > 1)) return;
    for (int v = 0; v < V; v++)
        if (seen[v]) logits[v] = logits[v] > 0 ? (float)(logits[v] / penalty) : (float)(logits[v] * penalty);
}

static int desc_by_prob(const void *a, const void *b)
{
    const double pa = ((const double *)a)[0], pb = ((const double *)b)[0];
    return pa < pb ? 1 : pa > pb ? -1 : 0;
}

/* The k-th largest of x[0..V) (ties counted), in one pass: heap holds the k
 * largest so far as a min-heap, O(V log k). A selection of k passes over V
 * (k × 50257 at a BPE's size) cost more than the rest of a token's sampling. */
static float kth_largest(const float *x, int V, int k, float *heap)
{
    int n = 0;
    for (int v = 0; v < V; v++) {
        const float val = x[v];
        int i;
        if (n < k) { /* not full yet: sift val up from the end */
            for (i = n++; i > 0 && heap[(i - 1) / 2] > val; i = (i - 1) / 2) heap[i] = heap[(i - 1) / 2];
        } else if (val > heap[0]) { /* val displaces the smallest: sift it down from the root */
            for (i = 0;;) {
                int c = 2 * i + 1;
                if (c >= k) break;
                if (c + 1 < k && heap[c + 1] < heap[c]) c++;
                if (heap[c] >= val) break;
                heap[i] = heap[c];
                i = c;
            }
        } else continue;
        heap[i] = val;
    }
    return heap[0];
}

static int pick(const float *logits, int V, const cc_sample_opts *o, cc_rng *rng, float *work, double *pairs)
{
    int best = 0;
    for (int v = 1; v < V; v++) if (logits[v] > logits[best]) best = v;
    if (o->temperature <= 0) return best;
    /* k-th largest logit as the cut-off (ties at the cut-off are kept) */
    const float cut = o->top_k > 0 && o->top_k < V ? kth_largest(logits, V, o->top_k, work) : -INFINITY;
    double sum = 0;
    for (int v = 0; v < V; v++)
        sum += logits[v] >= cut ? exp((logits[v] - logits[best]) / o->temperature) : 0.0;
    if (o->top_p > 0 && o->top_p < 1) {
        /* nucleus: the most likely tokens until their probability reaches top_p */
        int m = 0;
        for (int v = 0; v < V; v++)
            if (logits[v] >= cut) {
                pairs[2 * m] = exp((logits[v] - logits[best]) / o->temperature) / sum;
                pairs[2 * m + 1] = v;
                m++;
            }
        qsort(pairs, (size_t)m, 2 * sizeof(double), desc_by_prob);
        int keep = 0;
        double mass = 0;
        while (keep < m && (keep == 0 || mass < o->top_p)) mass += pairs[2 * keep++];
        double u = cc_rng_uniform(rng) * mass, acc = 0;
        for (int i = 0; i < keep; i++) {
            acc += pairs[2 * i];
            if (acc > u) return (int)pairs[2 * i + 1];
        }
        return (int)pairs[2 * (keep - 1) + 1];
    }
    double u = cc_rng_uniform(rng) * sum, acc = 0;
    for (int v = 0; v < V; v++) {
        if (logits[v] < cut) continue;
        acc += exp((logits[v] - logits[best]) / o->temperature);
        if (acc > u) return v;
    }
    return best;
}

/* log softmax(logits)[token], in double. */
static double log_prob(const float *logits, int V, int token)
{
    double mx = logits[0], sum = 0;
    for (int v = 1; v < V; v++) mx = logits[v] > mx ? logits[v] : mx;
    for (int v = 0; v < V; v++) sum += exp(logits[v] - mx);
    return logits[token] - mx - log(sum);
}

static int ends_with_text(const text_buf *t, size_t from, const char *stop)
{
    const size_t n = strlen(stop);
    return n > 0 && t->n >= from + n && memcmp(t->buf + t->n - n, stop, n) == 0;
}

int cc_sample(const cc_layout *lay, const float *params, const cc_sample_opts *o, FILE *out)
{
    const int V = lay->dims.V;
    const cc_tokenizer *tz = o->tokenizer;
    const cc_vocab *vocab = tz && !cc_tokenizer_is_bytes(tz) ? &tz->vocab : NULL;
    int *ids = NULL, n_ids = 0;
    if (o->prompt_ids) {
        n_ids = o->n_prompt_ids;
        ids = cc_malloc(sizeof(int) * (n_ids ? n_ids : 1));
        memcpy(ids, o->prompt_ids, sizeof(int) * n_ids);
    } else if (tz) {
        if (cc_tokenizer_encode(tz, o->prompt, &ids, &n_ids) != 0) return -1;
    } else {
        n_ids = (int)strlen(o->prompt);
        ids = cc_malloc(sizeof(int) * (n_ids ? n_ids : 1));
        for (int i = 0; i < n_ids; i++) ids[i] = (unsigned char)o->prompt[i];
    }
    if (n_ids == 0) {
        free(ids);
        return cc_error("sample: the prompt is empty");
    }
    /* healing (train.h): the last token of an encoded prompt is taken back
     * when another token is left to start from */
    const uint8_t *heal = NULL;
    size_t heal_len = 0;
    const int last = ids[n_ids - 1];
    if (!o->prompt_ids && vocab && o->tokens > 0 && n_ids >= 2 && last >= 0 && last < vocab->n && last < V && vocab->len[last] > 0) {
        heal = vocab->bytes[last];
        heal_len = (size_t)vocab->len[last];
        n_ids--;
    }
    cpu_decoder dec;
    cpu_decoder_init(&dec, &lay->dims);
    float *logits = cc_malloc(sizeof(float) * V), *work = cc_malloc(sizeof(float) * V),
          *scored = cc_malloc(sizeof(float) * V);
    double *pairs = cc_malloc(sizeof(double) * 2 * V);
    unsigned char *seen = cc_calloc((size_t)V, 1);
    if (heal) seen[last] = 1; /* the taken-back token is in the prompt, for the repetition penalty */
    FILE *stream = o->json ? NULL : out;
    text_buf prompt_text = { 0 }, text = { 0 };
    json_t *gen_ids = json_array(), *logprobs = json_array();
    cc_rng rng;
    cc_rng_seed(&rng, o->seed);
    int rc = 0;
    const char *reason = "length";
    for (int i = 0; i < n_ids; i++) {
        const int tok = ids[i];
        if (tok < 0 || tok >= V) { rc = cc_error("sample: prompt token %d is not below vocab_size %d", tok, V); break; }
        emit(o->no_echo ? NULL : stream, &prompt_text, tok, vocab);
        seen[tok] = 1;
        cpu_decoder_step(&dec, lay, params, tok, logits);
    }
    if (heal) text_add(&prompt_text, (const char *)heal, heal_len); /* the prompt as given, for --json */
    for (int i = 0; rc == 0 && i < o->tokens; i++) {
        for (int v = 0; v < V; v++)
            if (!isfinite(logits[v])) {
                rc = cc_error("sample: the model's logits are not finite after %d tokens: the weights are "
                              "broken", n_ids + i);
                break;
            }
        if (rc) break;
        memcpy(scored, logits, sizeof(float) * V);
        penalize(scored, V, seen, o->repetition_penalty);
        if (heal && i == 0) keep_heal_matches(scored, V, vocab, heal, heal_len);
        const int tok = pick(scored, V, o, &rng, work, pairs);
        json_array_append_new(gen_ids, json_integer(tok));
        /* a softmax over V: only --json reports it */
        if (o->json) json_array_append_new(logprobs, json_real(log_prob(logits, V, tok)));
        seen[tok] = 1;
        /* the first token re-makes the healed bytes: echoed, they complete the prompt; the text after the
         * prompt (--no-echo, --json, --stop) starts past them */
        emit_from(stream, &text, tok, vocab, i == 0 ? heal_len : 0, o->no_echo);
        if (o->stop && ends_with_text(&text, 0, o->stop)) {
            reason = "stop";
            break;
        }
        if (i + 1 < o->tokens) cpu_decoder_step(&dec, lay, params, tok, logits);
    }
    if (rc == 0 && o->json) {
        json_t *pids = json_array();
        for (int i = 0; i < n_ids; i++) json_array_append_new(pids, json_integer(ids[i]));
        char *pt = cc_valid_utf8(prompt_text.buf, prompt_text.n), *tt = cc_valid_utf8(text.buf, text.n);
        json_t *j = json_pack("{s:s,s:s,s:o,s:o,s:o,s:s}", "prompt", pt, "text", tt, "prompt_tokens", pids,
                              "tokens", gen_ids, "logprobs", logprobs, "stop_reason", reason);
        free(pt);
        free(tt);
        gen_ids = logprobs = NULL; /* owned by j */
        char *dump = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9)) : NULL;
        if (dump) fprintf(out, "%s", dump);
        else rc = cc_error("sample: --json: the output could not be encoded");
        free(dump);
        json_decref(j);
    }
    json_decref(gen_ids);
    json_decref(logprobs);
    free(prompt_text.buf);
    free(text.buf);
    free(ids);
    free(logits);
    free(work);
    free(scored);
    free(pairs);
    free(seen);
    cpu_decoder_free(&dec);
    return rc;
}
