/* Generation: streaming, constant memory per token (cpu_decoder), sampling
 * with temperature and top-k; temperature 0 is greedy. Prompt and
 * continuation go out as text as they are produced. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/rng.h"
#include "catchat/train.h"
#include "catchat/util.h"
#include "catchat/vocab.h"

static void emit(FILE *out, int token, const cc_vocab *vocab)
{
    if (vocab && token < vocab->n) fwrite(vocab->bytes[token], 1, (size_t)vocab->len[token], out);
    else if (!vocab && token < 256) fputc(token, out);
    else fprintf(out, "<%d>", token); /* an id the vocabulary does not cover */
    fflush(out);
}

static int pick(const float *logits, int V, const cc_sample_opts *o, cc_rng *rng, float *work)
{
    int best = 0;
    for (int v = 1; v < V; v++) if (logits[v] > logits[best]) best = v;
    if (o->temperature <= 0) return best;
    /* k-th largest logit as the cut-off (ties at the cut-off are kept) */
    float cut = -INFINITY;
    if (o->top_k > 0 && o->top_k < V) {
        memcpy(work, logits, sizeof(float) * V);
        for (int i = 0; i < o->top_k; i++) { /* partial selection: top_k is small */
            int arg = i;
            for (int v = i + 1; v < V; v++) if (work[v] > work[arg]) arg = v;
            float tmp = work[i];
            work[i] = work[arg];
            work[arg] = tmp;
        }
        cut = work[o->top_k - 1];
    }
    double sum = 0;
    for (int v = 0; v < V; v++)
        sum += logits[v] >= cut ? exp((logits[v] - logits[best]) / o->temperature) : 0.0;
    double u = cc_rng_uniform(rng) * sum, acc = 0;
    for (int v = 0; v < V; v++) {
        if (logits[v] < cut) continue;
        acc += exp((logits[v] - logits[best]) / o->temperature);
        if (acc > u) return v;
    }
    return best;
}

int cc_sample(const cc_layout *lay, const float *params, const cc_sample_opts *o, FILE *out)
{
    const int V = lay->dims.V;
    int *ids = NULL, n_ids = 0;
    if (o->prompt_ids) {
        n_ids = o->n_prompt_ids;
        ids = cc_malloc(sizeof(int) * (n_ids ? n_ids : 1));
        memcpy(ids, o->prompt_ids, sizeof(int) * n_ids);
    } else if (o->vocab) {
        const int cap = (int)strlen(o->prompt) + 1;
        ids = cc_malloc(sizeof(int) * cap);
        n_ids = cc_vocab_encode(o->vocab, o->prompt, ids, cap);
        if (n_ids < 0) {
            free(ids);
            return cc_error("sample: the prompt has bytes no token of the vocabulary covers; use --prompt-ids");
        }
    } else {
        n_ids = (int)strlen(o->prompt);
        ids = cc_malloc(sizeof(int) * (n_ids ? n_ids : 1));
        for (int i = 0; i < n_ids; i++) ids[i] = (unsigned char)o->prompt[i];
    }
    if (n_ids == 0) {
        free(ids);
        return cc_error("sample: the prompt is empty");
    }
    cpu_decoder dec;
    cpu_decoder_init(&dec, &lay->dims);
    float *logits = cc_malloc(sizeof(float) * V), *work = cc_malloc(sizeof(float) * V);
    cc_rng rng;
    cc_rng_seed(&rng, o->seed);
    int rc = 0;
    for (int i = 0; i < n_ids; i++) {
        const int tok = ids[i];
        if (tok < 0 || tok >= V) { rc = cc_error("sample: prompt token %d is not below vocab_size %d", tok, V); break; }
        emit(out, tok, o->vocab);
        cpu_decoder_step(&dec, lay, params, tok, logits);
    }
    for (int i = 0; rc == 0 && i < o->tokens; i++) {
        for (int v = 0; v < V; v++)
            if (!isfinite(logits[v])) {
                rc = cc_error("sample: the model's logits are not finite after %d tokens: the weights are "
                              "broken", n_ids + i);
                break;
            }
        if (rc) break;
        const int tok = pick(logits, V, o, &rng, work);
        emit(out, tok, o->vocab);
        if (i + 1 < o->tokens) cpu_decoder_step(&dec, lay, params, tok, logits);
    }
    free(ids);
    free(logits);
    free(work);
    cpu_decoder_free(&dec);
    return rc;
}
