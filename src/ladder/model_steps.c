/* model (full step), three steps in a row: the same batch sequence trained
 * for three optimizer steps on the CPU and on the GPU under each schedule the
 * GPU step has (layer after layer, the wavefront, recompute, recompute under
 * the wavefront, each wavefront also with layers sharing pairs of streams),
 * each issued eagerly and replayed from a CUDA graph. Every
 * step's loss and the weights after every step are held to the CPU's, so a
 * schedule or a replayed graph that reads a stale tensor, or a buffer shared
 * by two schedules' tensors, shows in the numbers and not only in speed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/executor.h"
#include "catchat/gpu_plan.h"
#include "catchat/optim.h"
#include "catchat/safetensors.h"
#include "catchat/util.h"
#include "ladder/ladder.h"

#define STEPS 3

typedef struct {
    const char *name;
    const char *recompute; /* [gpu] recompute */
    int chunk;             /* [gpu] wavefront_chunk, 0: wavefront off */
    int streams;           /* > 0: the wavefront's pairs of streams at most (cc_config.wave_streams_forced) */
} schedule;

static const schedule SCHEDULES[] = {
    { "layer after layer", "off", 0, 0 },
    { "wavefront", "off", 64, 0 },
    { "recompute", "on", 0, 0 },
    { "recompute under the wavefront", "on", 32, 0 }, /* chunks are the recompute windows: 32 divides T */
    /* the three layers on two pairs of streams, as more than GPU_WAVE_STREAMS layers share them */
    { "wavefront, layers sharing streams", "off", 64, 2 },
    { "recompute under the wavefront, layers sharing streams", "on", 32, 2 },
};

/* The shape the default config's kernels run (head size 64 on tensor cores,
 * the cluster recurrence where the GPU has clusters, two lanes), three layers
 * so the wavefront has layers beside each other, and chunks of 64 over T = 160
 * (whole attention blocks, and a last chunk cut short). AdamW with eps = 1 so
 * an update follows the gradient linearly (a sign-like update would turn
 * FP16 noise on near-zero gradients into whole-lr differences). */
static void steps_config(const ladder_ctx *cx, cc_config *c, const schedule *s, int graph)
{
    small_config(cx, c);
    c->n_layers = 3;
    c->d_model = 128;
    c->n_heads = 2;
    c->seq_len = 160;
    c->ctx_window = 64;
    c->batch_size = 16;
    c->gpu_lanes = 2;
    c->lr = 0.5;
    c->warmup_steps = 0;
    c->adam_eps = 1;
    c->weight_decay = 0.01;
    snprintf(c->gpu_recompute, sizeof(c->gpu_recompute), "%s", s->recompute);
    snprintf(c->gpu_wavefront, sizeof(c->gpu_wavefront), "%s", s->chunk ? "auto" : "off");
    c->gpu_wavefront_chunk = s->chunk;
    c->wave_streams_forced = s->streams;
    snprintf(c->cuda_graph, sizeof(c->cuda_graph), "%s", graph ? "on" : "off");
}

/* Why the GPU step does not run schedule s here (NULL: it does). */
static const char *declined(const cc_executor *gpu, const schedule *s)
{
    const gpu_step_plan *p = cc_gpu_plan(gpu);
    if (p->recompute != (strcmp(s->recompute, "on") == 0)) return p->recompute_why;
    if (s->chunk && !p->wave_chunk) return p->wave_why;
    return NULL;
}

/* The weights' change since the start, p - p0, into d. */
static void moved(float *d, const float *p, const float *p0, size_t n)
{
    for (size_t i = 0; i < n; i++) d[i] = p[i] - p0[i];
}

static void steps_case(const ladder_ctx *cx, stage *st, const schedule *s, int graph)
{
    cc_config c;
    steps_config(cx, &c, s, graph);
    const int B = c.batch_size, T = c.seq_len, M = B * T, V = c.vocab_size;
    char tag[120], what[200];
    snprintf(tag, sizeof(tag), " (%s, %s, 3 steps)", s->name, graph ? "CUDA graph" : "eager");
    cc_executor *cpu, *gpu;
    if (!executor_pair(st, &c, B, T, &cpu, &gpu)) return;
    const char *why = declined(gpu, s);
    if (why) {
        snprintf(what, sizeof(what), "%s: %s", s->name, why); /* once for eager and graph */
        stage_skip_part(st, what);
        cpu->ops->destroy(cpu);
        gpu->ops->destroy(gpu);
        return;
    }
    const size_t n = cpu->lay.total;
    float *p0 = cc_malloc(4 * n), *pc = cc_malloc(4 * n), *pg = cc_malloc(4 * n);
    float *dc = cc_malloc(4 * n), *dg = cc_malloc(4 * n);
    cc_layout_init_params(&cpu->lay, p0, cc_rng_next(cx->rng));
    for (size_t i = 0; i < n; i++) p0[i] = cc_half_to_float(cc_float_to_half(p0[i])); /* same weights on both */
    cpu->ops->set_params(cpu, p0);
    gpu->ops->set_params(gpu, p0);
    cc_scaler scc, scg;
    cc_scaler_init(&scc, &c);
    cc_scaler_init(&scg, &c);
    cc_opt_counts occ = { 0, 0 }, ocg = { 0, 0 };
    cc_step_report rc, rg;
    int *x = cc_malloc(sizeof(int) * M), *y = cc_malloc(sizeof(int) * M);
    for (int k = 0; k < STEPS; k++) {
        /* a new batch each step, with the same ignored tail, so the scored count (a graph's key) stays */
        for (int i = 0; i < M; i++) {
            x[i] = (int)cc_rng_below(cx->rng, (uint64_t)V);
            y[i] = i % T >= T - 3 ? -1 : (int)cc_rng_below(cx->rng, (uint64_t)V);
        }
        float lc = (float)cpu->ops->forward_backward(cpu, x, y, scc.scale);
        float lg = (float)gpu->ops->forward_backward(gpu, x, y, scg.scale);
        snprintf(what, sizeof(what), "loss of step %d%s", k + 1, tag);
        check(st, what, &lg, &lc, 1, 1e-3, 0);
        cc_optimizer_step(cpu, &c, &scc, &occ, NULL, k, &rc);
        cc_optimizer_step(gpu, &c, &scg, &ocg, NULL, k, &rg);
        snprintf(what, sizeof(what), "step %d applied on both%s", k + 1, tag);
        check_flag(st, what, !rc.skipped && !rg.skipped);
        cpu->ops->get_params(cpu, pc);
        gpu->ops->get_params(gpu, pg);
        moved(dc, pc, p0, n);
        moved(dg, pg, p0, n);
        for (int i = 0; i < cpu->lay.n; i++) { /* each tensor's change since the start: the gradients' tolerance */
            const cc_tensor_info *t = &cpu->lay.t[i];
            snprintf(what, sizeof(what), "%s after step %d%s", t->name, k + 1, tag);
            check(st, what, dg + t->offset, dc + t->offset, t->numel, 2e-2, 0);
        }
    }
    int top = 0, planned = 0;
    const int ran = cc_gpu_wavefront_ran(gpu, &top);
    cc_gpu_wavefront(gpu, &planned);
    snprintf(what, sizeof(what), "the steps ran %s%s", s->chunk ? "the wavefront" : "layer after layer", tag);
    check_plan(st, what, s->chunk ? ran == s->chunk && planned == s->chunk : ran == 0);
    if (s->streams) {
        const gpu_step_plan *p = cc_gpu_plan(gpu);
        snprintf(what, sizeof(what), "the layers shared at most %d pairs of streams%s", s->streams, tag);
        check_plan(st, what, p->wave_group > 1 && p->wave_streams <= s->streams);
    }
    if (graph) { /* step 1 eager (the GEMM plans), step 2 captured, step 3 the same graph again */
        snprintf(what, sizeof(what), "step 3 replayed the captured graph%s", tag);
        check_plan(st, what, cc_gpu_graph_replays(gpu) >= 1);
    }
    FREE_ALL(p0, pc, pg, dc, dg, x, y);
    cpu->ops->destroy(cpu);
    gpu->ops->destroy(gpu);
}

void model_steps_cases(const ladder_ctx *cx, stage *st)
{
    for (size_t i = 0; i < sizeof(SCHEDULES) / sizeof(SCHEDULES[0]); i++)
        for (int graph = 0; graph < 2; graph++) steps_case(cx, st, &SCHEDULES[i], graph);
}
