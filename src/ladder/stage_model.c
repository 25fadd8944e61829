/* model (full step): the whole model's loss and every parameter gradient, on
 * the CPU and GPU executors from the same weights and batch. The loss and
 * every tensor are hard gates; the aggregate gradient norm is a diagnostic
 * (WARN at most). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/executor.h"
#include "catchat/gpu_plan.h"
#include "catchat/safetensors.h"
#include "catchat/util.h"
#include "ladder/ladder.h"

/* A case that sets [gpu] wavefront_chunk: the step it just ran must have
 * taken the wavefront at that chunk, with the context stream chunked where
 * the chunks are whole tensor-core attention blocks; where the plan declines
 * the wavefront (the per-step loop, say) the case is listed as not run here. */
static void wavefront_taken(const ladder_ctx *cx, stage *st, const cc_executor *gpu, const cc_config *c,
                            const char *tag)
{
    int planned = 0, top = 0;
    const char *why = cc_gpu_wavefront(gpu, &planned);
    char what[200];
    if (planned == 0) {
        snprintf(what, sizeof(what), "wavefront%s (%s)", tag, why);
        stage_skip_part(st, what);
        return;
    }
    const int T = c->seq_len, chunk = c->gpu_wavefront_chunk < T ? c->gpu_wavefront_chunk : T;
    const int ran = cc_gpu_wavefront_ran(gpu, &top);
    /* more layers than a lane's pairs of streams (GPU_WAVE_STREAMS, or the testing aid's fewer): consecutive
     * layers share a pair */
    const int most = c->wave_streams_forced > 0 && c->wave_streams_forced < GPU_WAVE_STREAMS ? c->wave_streams_forced
                                                                                           : GPU_WAVE_STREAMS;
    if (c->n_layers > most) {
        const gpu_step_plan *p = cc_gpu_plan(gpu);
        snprintf(what, sizeof(what), "%d layers on %d pairs of streams, %d a pair%s", c->n_layers, p->wave_streams,
                 p->wave_group, tag);
        check_plan(st, what,
                   p->wave_group > 1 && p->wave_streams <= most && p->wave_streams * p->wave_group >= c->n_layers);
    }
    const int tc = strcmp(c->gpu_attention, "fp32") != 0 &&
                   attention_tc_supported(cx->caps, c->d_model, c->n_heads, c->ctx_window);
    /* under recompute the context stream runs in parts of sequences, not in chunks */
    const int top_expected = tc && chunk % ATTENTION_TC_BLOCK == 0 && chunk < T && !cc_gpu_plan(gpu)->recompute;
    snprintf(what, sizeof(what), "the step ran the wavefront in chunks of %d%s%s", chunk,
             top_expected ? ", the context stream chunked too" : "", tag);
    check_plan(st, what, ran == chunk && top == top_expected);
}

/* One full step of config c (its batch_size and seq_len) on both executors.
 * tag names the case in the rows; lanes > 0: the GPU step must run that many
 * lanes. With c->ctx_grad_clamp > 0 and guard_binds set, the guard must also
 * change the context gradients (or the case tests nothing). */
void full_step_check(const ladder_ctx *cx, stage *st, const cc_config *cfg, const char *tag, int lanes, int guard_binds)
{
    cc_rng *r = cx->rng;
    const cc_config c = *cfg;
    const double ctx_clamp = c.ctx_grad_clamp;
    const int B = c.batch_size, T = c.seq_len, M = B * T, V = c.vocab_size;
    cc_executor *cpu, *gpu;
    if (!executor_pair(st, &c, B, T, &cpu, &gpu)) return;
    char what[160];
    if (lanes) {
        snprintf(what, sizeof(what), "the step runs %d lanes%s", lanes, tag);
        check_plan(st, what, cc_gpu_lanes(gpu) == lanes);
    }
    if (strcmp(c.gpu_recompute, "auto") != 0) { /* a recompute case runs what it names */
        snprintf(what, sizeof(what), "the step ran with recompute %s%s", c.gpu_recompute, tag);
        check_plan(st, what, cc_gpu_plan(gpu)->recompute == (strcmp(c.gpu_recompute, "on") == 0));
    }

    const size_t n = cpu->lay.total;
    float *p = cc_malloc(4 * n);
    cc_layout_init_params(&cpu->lay, p, cc_rng_next(r));
    for (size_t i = 0; i < n; i++) p[i] = cc_half_to_float(cc_float_to_half(p[i])); /* same weights on both */
    cpu->ops->set_params(cpu, p);
    gpu->ops->set_params(gpu, p);
    int *x = cc_malloc(sizeof(int) * M), *y = cc_malloc(sizeof(int) * M);
    for (int i = 0; i < M; i++) {
        x[i] = (int)cc_rng_below(r, (uint64_t)V);
        y[i] = i % T >= T - 3 ? -1 : (int)cc_rng_below(r, (uint64_t)V); /* a padded tail */
    }
    float lc = (float)cpu->ops->forward_backward(cpu, x, y, c.loss_scale);
    float lg = (float)gpu->ops->forward_backward(gpu, x, y, c.loss_scale);
    if (c.gpu_wavefront_chunk > 0 && strcmp(c.gpu_wavefront, "off") != 0) wavefront_taken(cx, st, gpu, &c, tag);
    /* the loss is a hard gate: FP16 operands, aim 1e-3 */
    snprintf(what, sizeof(what), "loss%s", tag);
    check(st, what, &lg, &lc, 1, 1e-3, 0);
    float *gc = cc_malloc(4 * n), *gg = cc_malloc(4 * n);
    cpu->ops->get_grads(cpu, gc);
    gpu->ops->get_grads(gpu, gg);
    double nc = 0, ng = 0;
    for (size_t i = 0; i < n; i++) {
        gc[i] = (float)(gc[i] / cpu->grad_unit);
        gg[i] = (float)(gg[i] / gpu->grad_unit);
        nc += (double)gc[i] * gc[i];
        ng += (double)gg[i] * gg[i];
    }
    for (int i = 0; i < cpu->lay.n; i++) {
        const cc_tensor_info *t = &cpu->lay.t[i];
        snprintf(what, sizeof(what), "%s%s", t->name, tag);
        /* per tensor: FP16 operands through the whole backward: 2e-2 */
        check(st, what, gg + t->offset, gc + t->offset, t->numel, 2e-2, 0);
    }
    if (ctx_clamp == 0) { /* no atomics in the step: a second run gives the same bits */
        float *again = cc_malloc(4 * n);
        gpu->ops->forward_backward(gpu, x, y, c.loss_scale);
        gpu->ops->get_grads(gpu, again);
        for (size_t i = 0; i < n; i++) again[i] = (float)(again[i] / gpu->grad_unit);
        snprintf(what, sizeof(what), "GPU step reproducible bit for bit%s", tag);
        check_flag(st, what, memcmp(again, gg, 4 * n) == 0);
        free(again);
    }
    /* the aggregate norm is a diagnostic only: it may WARN, never FAIL */
    float fn_g = (float)sqrt(ng), fn_c = (float)sqrt(nc);
    check(st, "grad norm (diagnostic)", &fn_g, &fn_c, 1, 1e-2, 1);
    if (ctx_clamp > 0 && guard_binds) { /* the guard must bind here, or this case tests nothing */
        cc_config c0 = c;
        c0.ctx_grad_clamp = 0;
        cc_executor *free_run = cc_cpu_executor_create(&c0, B, T);
        free_run->ops->set_params(free_run, p);
        free_run->ops->forward_backward(free_run, x, y, c.loss_scale);
        float *g0 = cc_malloc(4 * n);
        free_run->ops->get_grads(free_run, g0);
        const size_t qo = cpu->lay.t[cpu->lay.ctx_qkv].offset, qn = cpu->lay.t[cpu->lay.ctx_qkv].numel;
        double diff = 0, den = 0;
        for (size_t i = 0; i < qn; i++) {
            const double a = g0[qo + i] / free_run->grad_unit, b = gc[qo + i];
            diff += (a - b) * (a - b);
            den += a * a;
        }
        check_flag(st, "ctx guard binds", sqrt(diff / den) > 1e-2);
        free(g0);
        free_run->ops->destroy(free_run);
    }
    FREE_ALL(p, x, y, gc, gg);
    cpu->ops->destroy(cpu);
    gpu->ops->destroy(gpu);
}

/* Gradient accumulation ([train] grad_accum): two micro-batches of 2
 * sequences on the GPU against one batch of 4 on the CPU, every gradient. */
static void accum_step_case(const ladder_ctx *cx, stage *st, cc_rng *r, int chunk)
{
    cc_config c;
    small_config(cx, &c);
    c.gpu_wavefront_chunk = chunk; /* > 0: each micro-batch's step in the wavefront */
    char tag[48];
    snprintf(tag, sizeof(tag), chunk ? " (grad_accum 2, wavefront chunk %d)" : " (grad_accum 2)", chunk);
    const int A = 2, Bm = 2, B = Bm * A, T = c.seq_len, M = B * T, Mm = Bm * T;
    cc_executor *cpu = cc_cpu_executor_create(&c, B, T), *gpu = cc_gpu_executor_create(&c, Bm, T);
    if (!gpu) {
        cpu->ops->destroy(cpu);
        stage_skip(st, "the GPU executor does not run on this GPU");
        return;
    }
    cc_gpu_check_accesses(gpu, 1);
    const size_t n = cpu->lay.total;
    float *p = cc_malloc(4 * n), *gc = cc_malloc(4 * n), *gg = cc_malloc(4 * n);
    cc_layout_init_params(&cpu->lay, p, cc_rng_next(r));
    for (size_t i = 0; i < n; i++) p[i] = cc_half_to_float(cc_float_to_half(p[i]));
    cpu->ops->set_params(cpu, p);
    gpu->ops->set_params(gpu, p);
    int *x = cc_malloc(sizeof(int) * M), *y = cc_malloc(sizeof(int) * M);
    long scored = 0;
    for (int i = 0; i < M; i++) {
        x[i] = (int)cc_rng_below(r, 256);
        y[i] = i % 5 == 4 ? -1 : (int)cc_rng_below(r, 256); /* ignored targets, unevenly over the micro-batches */
        scored += y[i] >= 0;
    }
    float lc = (float)cpu->ops->forward_backward(cpu, x, y, c.loss_scale), lg = 0;
    for (int k = 0; k < A; k++) {
        gpu->accum.n = scored;
        gpu->accum.index = k;
        gpu->accum.count = A;
        long nk = 0;
        for (int i = 0; i < Mm; i++) nk += y[k * Mm + i] >= 0;
        lg += (float)(gpu->ops->forward_backward(gpu, x + k * Mm, y + k * Mm, c.loss_scale) * (double)nk /
                      (double)scored);
    }
    gpu->accum.n = 0;
    char what[96];
    snprintf(what, sizeof(what), "loss%s", tag);
    check(st, what, &lg, &lc, 1, 1e-3, 0);
    if (chunk) wavefront_taken(cx, st, gpu, &c, tag);
    cpu->ops->get_grads(cpu, gc);
    gpu->ops->get_grads(gpu, gg);
    for (size_t i = 0; i < n; i++) {
        gc[i] = (float)(gc[i] / cpu->grad_unit);
        gg[i] = (float)(gg[i] / gpu->grad_unit);
    }
    for (int i = 0; i < cpu->lay.n; i++) {
        const cc_tensor_info *t = &cpu->lay.t[i];
        snprintf(what, sizeof(what), "%s%s", t->name, tag);
        check(st, what, gg + t->offset, gc + t->offset, t->numel, 2e-2, 0);
    }
    FREE_ALL(p, gc, gg, x, y);
    cpu->ops->destroy(cpu);
    gpu->ops->destroy(gpu);
}

/* The wavefront (program_gpu.c): chunks that divide T and chunks that do
 * not, L = 1 to 4, and the default config's kernels in 2 lanes (cluster
 * recurrence where the GPU has clusters), each a full step against the CPU
 * and run twice for the same bits (full_step_check). */
static void wavefront_cases(const ladder_ctx *cx, stage *st)
{
    /* chunks of 64 on D=128, H=2 (head size 64 on tensor cores) also chunk the
     * context stream: W=64 reaches into the chunk before, W=128 over two */
    static const struct {
        int L, chunk, D, lanes, T, W;
        double guard; /* ctx_grad_clamp: the chunked context stream's guard path */
        int per_step; /* the per-step loop's layers overlapped */
    } cases[] = {
        { 2, 8, 64, 0, 0, 0, 0, 0 },      { 2, 5, 64, 0, 0, 0, 0, 0 },       { 1, 7, 64, 0, 0, 0, 0, 0 },
        { 3, 11, 64, 0, 0, 0, 0, 0 },     { 4, 6, 64, 0, 0, 0, 0, 0 },       { 3, 16, 128, 2, 40, 16, 0, 0 },
        { 2, 64, 128, 2, 160, 64, 0, 0 }, { 3, 64, 128, 2, 200, 128, 0, 0 }, { 2, 64, 128, 2, 160, 64, 2e-4, 0 },
        { 3, 5, 64, 0, 0, 0, 0, 1 },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cc_config c;
        small_config(cx, &c);
        c.n_layers = cases[i].L;
        c.gpu_wavefront_chunk = cases[i].chunk;
        if (cases[i].lanes) { /* the 2-lane case's shape */
            c.d_model = cases[i].D;
            c.n_heads = 2;
            c.seq_len = cases[i].T;
            c.ctx_window = cases[i].W;
            c.batch_size = 16;
            c.gpu_lanes = cases[i].lanes;
        }
        c.ctx_grad_clamp = cases[i].guard;
        if (cases[i].per_step) snprintf(c.gpu_recurrence, sizeof(c.gpu_recurrence), "per-step");
        char tag[80];
        snprintf(tag, sizeof(tag), " (wavefront L=%d T=%d W=%d chunk %d%s%s%s)", c.n_layers, c.seq_len, c.ctx_window,
                 c.gpu_wavefront_chunk, cases[i].lanes ? ", 2 lanes" : "", c.ctx_grad_clamp > 0 ? ", ctx guard" : "",
                 cases[i].per_step ? ", per-step" : "");
        full_step_check(cx, st, &c, tag, cases[i].lanes, 0);
    }
}

/* More layers than a lane's pairs of streams under the wavefront
 * (GPU_WAVE_STREAMS): consecutive layers share a pair, each with its own
 * gradient buffers, carries and (under recompute) window buffers; each a
 * full step against the CPU, run twice for the same bits. L = 12 (6 pairs
 * of 2) and 9 (5 pairs, the last one layer's) on the tiny model with chunks
 * that do and do not divide T, 12 on the default's kernels in 2 lanes with
 * the context stream chunked, 12 under recompute (its windows the chunks,
 * a set of window buffers a layer), and three layers on two pairs, the
 * preflight's miniature of such a run (cc_config.wave_streams_forced). */
static void shared_streams_cases(const ladder_ctx *cx, stage *st)
{
    static const struct {
        int L, chunk, streams; /* streams > 0: at most this many pairs (the testing aid) */
        int wide;              /* D=128, H=2, T=160, W=64, B=16 in 2 lanes */
        const char *recompute;
    } cases[] = {
        { 12, 8, 0, 0, "off" }, { 9, 5, 0, 0, "off" }, { 3, 5, 2, 0, "off" },
        { 12, 64, 0, 1, "off" }, { 12, 8, 0, 0, "on" }, { 3, 8, 2, 0, "on" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cc_config c;
        small_config(cx, &c);
        c.n_layers = cases[i].L;
        c.gpu_wavefront_chunk = cases[i].chunk;
        c.wave_streams_forced = cases[i].streams;
        snprintf(c.gpu_recompute, sizeof(c.gpu_recompute), "%s", cases[i].recompute);
        if (cases[i].wide) {
            c.d_model = 128;
            c.n_heads = 2;
            c.seq_len = 160;
            c.ctx_window = 64;
            c.batch_size = 16;
            c.gpu_lanes = 2;
        }
        char tag[120], pairs[32] = "";
        if (cases[i].streams) snprintf(pairs, sizeof(pairs), ", at most %d pairs of streams", cases[i].streams);
        snprintf(tag, sizeof(tag), " (wavefront L=%d T=%d chunk %d%s%s%s)", c.n_layers, c.seq_len,
                 c.gpu_wavefront_chunk, cases[i].wide ? ", D=128 B=16, 2 lanes" : "",
                 strcmp(c.gpu_recompute, "on") == 0 ? ", recompute" : "", pairs);
        full_step_check(cx, st, &c, tag, cases[i].wide ? 2 : 0, 0);
    }
}

/* [gpu] recompute = on (the backward rebuilds each layer's activations from
 * its h, window by window, the lanes sharing the windows' buffers with the
 * context stream, which runs in parts) against the CPU, and off once: the
 * tiny config, its guard, 3 and 4 layers (u rebuilt from two and three
 * sums), every recurrence path, the FP32 attention, the default's kernels in
 * two lanes, and the layers in one window and in two (the plan's: windows
 * of at least 16 steps, 8 or 16 of them where T allows; 2 at T = 32). */
static void recompute_cases(const ladder_ctx *cx, stage *st)
{
    const struct {
        const char *mode, *recurrence, *attention;
        int L, D, lanes, windows;
        double guard;
        int chunk; /* > 0: under the wavefront, in windows of this many steps */
    } cases[] = {
        { "off", "auto", "auto", 2, 0, 0, 0, 0, 0 },      { "on", "auto", "auto", 2, 0, 0, 0, 0, 0 },
        { "on", "auto", "auto", 2, 0, 0, 0, 2e-4, 0 },    { "on", "auto", "auto", 3, 0, 0, 0, 0, 0 },
        { "on", "auto", "auto", 4, 0, 0, 0, 0, 0 },       { "on", "persistent", "auto", 3, 0, 0, 0, 0, 0 },
        { "on", "per-step", "auto", 3, 0, 0, 0, 0, 0 },   { "on", "auto", "fp32", 2, 0, 0, 0, 0, 0 },
        { "on", "auto", "auto", 3, 128, 2, 0, 0, 0 },     { "on", "auto", "auto", 2, 128, 2, 0, 2e-4, 0 },
        { "on", "auto", "auto", 1, 0, 0, 0, 0, 0 },       { "on", "auto", "auto", 2, 0, 0, 1, 0, 0 },
        { "on", "persistent", "auto", 3, 0, 0, 2, 0, 0 }, { "on", "per-step", "auto", 2, 0, 0, 1, 0, 0 },
        { "on", "auto", "auto", 3, 128, 2, 2, 0, 0 },
        /* recompute under the wavefront: each layer its own window buffers, the top layer's rebuilds ahead */
        { "on", "auto", "auto", 3, 0, 0, 0, 0, 8 },    { "on", "persistent", "auto", 4, 0, 0, 0, 0, 8 },
        { "on", "auto", "auto", 3, 128, 2, 0, 0, 10 }, { "on", "auto", "auto", 2, 128, 2, 0, 2e-4, 20 },
        /* and in the plan's own lanes there (one) */
        { "on", "auto", "auto", 3, 128, -1, 0, 0, 10 },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cc_config c;
        small_config(cx, &c);
        snprintf(c.gpu_recompute, sizeof(c.gpu_recompute), "%s", cases[i].mode);
        snprintf(c.gpu_recurrence, sizeof(c.gpu_recurrence), "%s", cases[i].recurrence);
        snprintf(c.gpu_attention, sizeof(c.gpu_attention), "%s", cases[i].attention);
        c.n_layers = cases[i].L;
        c.ctx_grad_clamp = cases[i].guard;
        c.gpu_wavefront_chunk = cases[i].chunk;
        if (cases[i].lanes) { /* the default's kernels: head size 64, clusters, two lanes (-1: the plan's) */
            c.d_model = cases[i].D;
            c.n_heads = 2;
            c.seq_len = 40;
            c.batch_size = 16;
            c.gpu_lanes = cases[i].lanes > 0 ? cases[i].lanes : 0;
        }
        char tag[160], win[40] = "";
        if (cases[i].windows) snprintf(win, sizeof(win), ", %d window%s", cases[i].windows, cases[i].windows > 1 ? "s" : "");
        if (cases[i].chunk) snprintf(win, sizeof(win), ", wavefront in windows of %d", cases[i].chunk);
        snprintf(tag, sizeof(tag), " (recompute %s, L=%d%s%s%s%s%s%s)", c.gpu_recompute, c.n_layers,
                 strcmp(c.gpu_recurrence, "auto") ? ", " : "", strcmp(c.gpu_recurrence, "auto") ? c.gpu_recurrence : "",
                 strcmp(c.gpu_attention, "auto") ? ", FP32 attention" : "", c.ctx_grad_clamp > 0 ? ", ctx guard" : "",
                 cases[i].lanes > 0 ? ", D=128 B=16, 2 lanes" : cases[i].lanes ? ", D=128 B=16" : "", win);
        c.rc_windows_forced = cases[i].windows;
        /* the plan's lanes under the wavefront: one */
        full_step_check(cx, st, &c, tag, cases[i].lanes > 0 ? cases[i].lanes : cases[i].lanes ? 1 : 0,
                        cases[i].guard > 0 && !cases[i].lanes);
    }
}

/* Real vocabularies: V = 1003 (not a multiple of 8) and 50257 (GPT-2's,
 * padded on the GPU), the classifier in chunks that cut the lanes' rows
 * unevenly, layer after layer, under the wavefront (whose chunks run the
 * classifier on time windows) and under recompute. */
static void vocab_cases(const ladder_ctx *cx, stage *st)
{
    static const struct {
        int V, rows, lanes, chunk, T, W;
        const char *recompute;
    } cases[] = {
        { 1003, 50, 0, 0, 0, 0, "off" },         { 50257, 0, 0, 0, 0, 0, "off" },
        { 50257, 100, 2, 0, 40, 16, "off" },     { 50257, 130, 2, 64, 160, 64, "off" },
        { 50257, 40, 2, 64, 160, 64, "off" },    { 50257, 70, 2, 0, 40, 16, "on" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cc_config c;
        small_config(cx, &c);
        c.vocab_size = cases[i].V;
        c.gpu_classifier_rows = cases[i].rows;
        snprintf(c.gpu_recompute, sizeof(c.gpu_recompute), "%s", cases[i].recompute);
        snprintf(c.gpu_wavefront, sizeof(c.gpu_wavefront), "%s", cases[i].chunk ? "auto" : "off");
        c.gpu_wavefront_chunk = cases[i].chunk;
        if (cases[i].lanes) { /* the default's kernels: head size 64, clusters, two lanes */
            c.d_model = 128;
            c.n_heads = 2;
            c.seq_len = cases[i].T;
            c.ctx_window = cases[i].W;
            c.batch_size = 16;
            c.gpu_lanes = cases[i].lanes;
        }
        char tag[120];
        snprintf(tag, sizeof(tag), " (V=%d, classifier rows %d%s%s%s)", c.vocab_size, c.gpu_classifier_rows,
                 cases[i].lanes ? ", D=128 B=16, 2 lanes" : "", cases[i].chunk ? ", wavefront" : "",
                 strcmp(c.gpu_recompute, "on") ? "" : ", recompute");
        full_step_check(cx, st, &c, tag, cases[i].lanes, 0);
    }
}

/* The tiny config with the guard off and on (the guard binds on most tokens
 * at 2e-4: a per-token L2 cap on dL/dc of the mean loss), then the shape the
 * default config's kernels run (head size 64 on tensor cores, cluster
 * recurrence, the batch in two lanes) on a batch of 16, then accumulation. */
static void run_model(const ladder_ctx *cx, stage *st)
{
    cc_config c;
    small_config(cx, &c);
    snprintf(st->shape, sizeof(st->shape),
             "D=%d L=%d H=%d W=%d T=%d B=%d, S=128, guard off/on; D=128 B=16 2 lanes; accum.; wavefront; recompute; V=50257; 3 steps",
             c.d_model, c.n_layers, c.n_heads, c.ctx_window, c.seq_len, c.batch_size);
    full_step_check(cx, st, &c, "", 0, 0);
    c.ctx_grad_clamp = 2e-4;
    full_step_check(cx, st, &c, " (ctx guard)", 0, 1);
    small_config(cx, &c);
    c.d_model = 128;
    c.n_heads = 2;
    c.seq_len = 40;
    c.batch_size = 16;
    c.gpu_lanes = 2; /* as chosen where the recurrence runs on clusters; set so every profile splits */
    full_step_check(cx, st, &c, " (2 lanes)", 2, 0);
    accum_step_case(cx, st, cx->rng, 0);
    wavefront_cases(cx, st);
    shared_streams_cases(cx, st);
    accum_step_case(cx, st, cx->rng, 8);
    recompute_cases(cx, st);
    vocab_cases(cx, st);
    model_steps_cases(cx, st);
}

const ladder_stage ladder_stage_model = { "model", "full step", run_model };
