/* The step's program (step_gpu.h): its operations in issue order, for the
 * plan's schedule, each on the stream that schedule gives its kind.
 *
 * Layer after layer: each layer over all T, its input and input gradient on
 * the lane's stream, its recurrence and BPTT on the lane's recurrence stream
 * (of the highest priority), the weight GEMMs on the side stream, so they
 * run beside the next layer's BPTT.
 *
 * The wavefront: the same operations over time chunks, each layer with a
 * feed stream and a recurrence stream of its own. Layer l's input on chunk
 * k needs only layer l-1's h there, and its recurrence on the chunk needs
 * that input and its own state at t0-1, which its chunk k-1 left: so layer
 * l runs chunk k while layer l-1 runs chunk k+1. The BPTT is the same top
 * down and in reverse time. Beyond GPU_WAVE_STREAMS layers, consecutive
 * layers share a pair of streams (gpu_plan_wave_stream): on it their
 * chunks run one after another in program order, a group of layers as one
 * stage of the wavefront; every wait between streams still comes from the
 * declarations, and each layer keeps its own buffers. Where the chunks are
 * whole blocks of the tensor-core attention, the context stream,
 * classifier and loss run chunk by chunk too, on the lane's stream, beside
 * the recurrences. A chunk is
 * handed on between launches by an event, not by a counter that a running
 * kernel spins on: a kernel waiting inside for another kernel's progress
 * needs both resident at once, which nothing guarantees across streams
 * (another lane's clusters, a GEMM, MPS or a partition can hold the SMs the
 * producer needs: a deadlock). The price is a launch and a reload of W_hh
 * a chunk (docs/design-notes.md).
 *
 * Recompute: layer after layer in windows of rc_window steps whose tensors
 * live in two window buffers by turns, so one window's input (forward) or
 * rebuild (backward) runs beside the other's recurrence; the backward first
 * rebuilds u^l, then each window's operands before its BPTT. The context
 * stream runs in parts of top_seqs sequences, whose tensors share `work`
 * with the layers' (work_layout_gpu.c).
 *
 * Issued phase by phase across the lanes, so every lane's work reaches the
 * GPU early: issued lane after lane, the last lane's first kernel would
 * wait for the host to enqueue the other lanes' whole steps. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/kernels.h"
#include "catchat/util.h"
#include "gpu/gpu_impl.h"
#include "gpu/step_gpu.h"

void gpu_set_lanes(cc_executor *ex, int n)
{
    gpu_impl *g = IMPL(ex);
    for (int i = 0; i < n; i++) {
        g->lane[i].B = ex->B / n;
        g->lane[i].b0 = i * (ex->B / n);
    }
}

void program_add(step_program *p, int kind, int phase, int lane, int layer, int unit, int k, int t0, int t1, int s0,
                 int ns)
{
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 256;
        p->ops = cc_realloc(p->ops, sizeof(step_op) * (size_t)p->cap);
    }
    step_op *o = &p->ops[p->n++];
    memset(o, 0, sizeof(*o));
    o->kind = (unsigned char)kind;
    o->phase = (unsigned char)phase;
    o->lane = (unsigned char)lane;
    o->layer = (signed char)layer;
    o->unit = (short)unit;
    o->k = (short)k;
    o->t0 = t0;
    o->t1 = t1;
    o->s0 = s0;
    o->ns = ns;
}

/* The unit of lane `lane`'s role (pair: the wavefront's pair of streams),
 * bound to the lane's stream and context the plan gives that role (serial:
 * every unit on the main stream's slot, each keeping its context and
 * scratch, so the kernels and GEMM algorithms are the same). */
static int unit_of(step_program *p, const gpu_step_plan *plan, int lane, int role, int pair)
{
    const unit_binding at = gpu_unit_binding(plan, p->wave, role, pair);
    if (role == UNIT_COMM) lane = -1;
    for (int u = 0; u < p->nunits; u++)
        if (p->unit[u].lane == lane && p->unit[u].at.stream == at.stream && p->unit[u].at.gemm == at.gemm) return u;
    if (p->nunits == STEP_MAX_UNITS) { /* the program's own error: more streams than a lane has */
        fprintf(stderr, "catchat: the step's program needs more than %d streams\n", STEP_MAX_UNITS);
        exit(1);
    }
    int slot = 0;
    if (!p->serial) { /* a slot a stream: the units of one lane's stream share it */
        while (slot < p->nslots && !(p->unit[p->slot_unit[slot]].lane == lane &&
                                     p->unit[p->slot_unit[slot]].at.stream == at.stream))
            slot++;
    }
    if (slot == p->nslots) p->slot_unit[p->nslots++] = p->nunits;
    p->unit[p->nunits] = (exec_unit){ (signed char)lane, (unsigned char)role, at, slot };
    return p->nunits++;
}

/* What the builder needs of the plan and the schedule. */
typedef struct {
    step_program *p;
    gpu_impl *g;
    int L, T, B; /* B: a lane's sequences */
    int chunk;   /* the wavefront's, or T */
    int rc, nw;  /* recompute and its windows */
} builder;

static int u_lane(builder *b, int i) { return unit_of(b->p, &b->g->plan, i, UNIT_LANE, 0); }
static int u_side(builder *b, int i) { return unit_of(b->p, &b->g->plan, i, UNIT_SIDE, 0); }
/* Layer after layer the recurrence stream (its per-step GEMMs on the lane's context, or under recompute,
 * whose input GEMMs run beside them, one of its own); under the wavefront, layer l's pair's. */
static int u_rec(builder *b, int i, int l) { return unit_of(b->p, &b->g->plan, i, UNIT_REC, gpu_plan_wave_stream(&b->g->plan, l)); }
/* A window's weight GEMMs under recompute: the lane's side stream, or in
 * the wavefront the layer's recurrence stream right after the window's
 * BPTT, so the window's buffers are free again (for the rebuild two
 * windows on) without a stream of their own (a GEMM context each) or
 * every layer's queued on one side stream. At the default config the
 * three placements measured within noise of each other (9.36-9.58 ms,
 * docs/design-notes.md): the step is bound by the rebuilds' and BPTTs'
 * work, which fill the GPU together. */
static int u_wgrad(builder *b, int i, int l) { return b->p->wave ? u_rec(b, i, l) : u_side(b, i); }
static int u_feed(builder *b, int i, int l) { return unit_of(b->p, &b->g->plan, i, UNIT_FEED, gpu_plan_wave_stream(&b->g->plan, l)); }

/* Where an operation of this kind stands in the step: the layers' forward
 * (0), the context stream and classifier (1: u^L's norm with them), the
 * layers' backward (2); recompute's rebuilds, the forward's operations run
 * again, are the backward's (emit_rebuild). */
static int kind_phase(int kind, int layer, int L)
{
    switch (kind) {
    case OP_EMBED: case OP_RECUR: return 0;
    case OP_FEED: return layer < L ? 0 : 1;
    case OP_REGATE: case OP_BPTT: case OP_DX: case OP_WGRAD: case OP_EMBED_BWD: return 2;
    default: return 1;
    }
}

#define ADD(kind, lane, layer, unit, k, t0, t1)                                                                        \
    program_add(b->p, (kind), kind_phase((kind), (layer), b->L), (lane), (layer), (unit), (k), (t0), (t1), 0, b->B)

/* The context stream, classifier and loss of lane i over all T (under
 * recompute part by part, each starting from u^L's norm), and with a
 * gradient their backward down to dL/du^L; the classifier's last lm_head
 * weight GEMM and the context stream's weight GEMMs on the lane's side
 * stream. */
static void emit_top(builder *b, int i)
{
    step_program *p = b->p;
    const int part = b->rc ? b->g->plan.top_seqs : b->B, T = b->T;
    for (int s0 = 0; s0 < b->B; s0 += part) {
        if (b->rc) program_add(p, OP_FEED, 1, i, b->L, u_lane(b, i), 0, 0, T, s0, part);
        const int kinds[] = { OP_TOP_CTX,    OP_CLASSIFIER, OP_CLASSIFIER_DW, OP_TOP_DC,
                              OP_WG_CTX_OUT, OP_TOP_ATTN,   OP_WG_CTX_QKV,    OP_TOP_DX };
        for (int k = 0; k < (p->with_grad ? 8 : 2); k++) {
            const int side = kinds[k] == OP_CLASSIFIER_DW || kinds[k] == OP_WG_CTX_OUT || kinds[k] == OP_WG_CTX_QKV;
            program_add(p, kinds[k], 1, i, -1, side ? u_side(b, i) : u_lane(b, i), 0, 0, T, s0, part);
        }
    }
}

static void emit_allreduce_tail(builder *b, cc_executor *ex)
{
    if (b->p->with_grad && !b->p->eval && gpu_overlaps_allreduce(ex, b->p->lanes))
        ADD(OP_ALLREDUCE_TAIL, 0, -1, unit_of(b->p, &b->g->plan, 0, UNIT_COMM, 0), 0, 0, b->T);
}

/* Recompute's rebuild of lane i's layer l on window k: the forward's own
 * operations run again on the window into its buffers (u^{l-1} from the
 * embedding and the layers below, then layer l's input as op_feed makes
 * it), then the recurrence's gates from the h the forward kept. */
static void emit_rebuild(builder *b, int i, int l, int unit, int k, int t0, int t1)
{
    program_add(b->p, OP_EMBED, 2, i, l > 0 ? l - 1 : 0, unit, k, t0, t1, 0, b->B);
    program_add(b->p, OP_FEED, 2, i, l, unit, k, t0, t1, 0, b->B);
    program_add(b->p, OP_REGATE, 2, i, l, unit, k, t0, t1, 0, b->B);
}

/* Recompute's backward of lane i's layer l on window k: its rebuild (unless
 * the window before issued it: prefetch), the BPTT, and the rebuild of
 * window k-1 beside it where the program may (prefetch: u's one block
 * holds u^l on the window's rows from the rebuild on, so only where no
 * layer above still reads its own u there: layer after layer, or the top
 * layer of the wavefront; on the lane's stream, which the wavefront's
 * backward leaves free, so the input gradient the layer below waits for
 * does not queue behind it), then the input gradient and the window's
 * weight GEMMs. */
static void emit_rc_window(builder *b, int i, int l, int k, int prefetch)
{
    const int C = b->chunk, t0 = k * C, t1 = t0 + C;
    const int chain = u_feed(b, i, l), ahead = prefetch ? u_lane(b, i) : chain;
    if (!prefetch || k == b->nw - 1) emit_rebuild(b, i, l, ahead, k, t0, t1);
    ADD(OP_BPTT, i, l, u_rec(b, i, l), k, t0, t1);
    if (prefetch && k > 0) emit_rebuild(b, i, l, ahead, k - 1, t0 - C, t0);
    ADD(OP_DX, i, l, chain, k, t0, t1);
    ADD(OP_WGRAD, i, l, u_wgrad(b, i, l), k, t0, t1);
}

/* The wavefront: chunk by chunk, layer by layer, lane by lane. */
static void emit_wavefront(builder *b, cc_executor *ex)
{
    step_program *p = b->p;
    const int L = b->L, T = b->T, n = p->lanes, C = b->chunk;
    for (int k = 0; k < p->nchunks; k++) {
        const int t0 = k * C, t1 = t0 + C < T ? t0 + C : T;
        for (int l = 0; l < L; l++)
            for (int i = 0; i < n; i++) {
                if (l == 0 && k == 0) ADD(OP_EMBED, i, 0, u_feed(b, i, 0), 0, 0, T);
                if (l == 0 && k == 0 && !b->rc) /* layer 0's input for every step at once: nothing comes before it */
                    ADD(OP_FEED, i, 0, u_feed(b, i, 0), 0, 0, T);
                else if (l > 0 || b->rc) /* (recompute: into the layer's window buffer) */
                    ADD(OP_FEED, i, l, u_feed(b, i, l), k, t0, t1);
                ADD(OP_RECUR, i, l, u_rec(b, i, l), k, t0, t1);
                if (l == L - 1 && !b->rc) /* u^L and the context stream's norm (recompute: part by part) */
                    ADD(OP_FEED, i, L, u_lane(b, i), k, t0, t1);
            }
        for (int i = 0; p->top_chunked && i < n; i++) {
            ADD(OP_TOP_CTX, i, -1, u_lane(b, i), k, t0, t1);
            ADD(OP_CLASSIFIER, i, -1, u_lane(b, i), k, t0, t1);
            if (p->with_grad) ADD(OP_CLASSIFIER_DW, i, -1, u_side(b, i), k, t0, t1);
        }
    }
    if (!p->top_chunked) {
        for (int i = 0; i < n; i++) emit_top(b, i);
        emit_allreduce_tail(b, ex);
    }
    if (!p->with_grad) return;
    for (int k = p->nchunks - 1; k >= 0; k--) {
        const int t0 = k * C, t1 = t0 + C < T ? t0 + C : T;
        for (int i = 0; p->top_chunked && i < n; i++) {
            ADD(OP_TOP_DC, i, -1, u_lane(b, i), k, t0, t1);
            ADD(OP_TOP_ATTN, i, -1, u_lane(b, i), k, t0, t1);
            ADD(OP_TOP_DX, i, -1, u_lane(b, i), k, t0, t1);
            if (k > 0) continue;
            /* the context stream's weight gradients, one GEMM each over all T */
            ADD(OP_WG_CTX_OUT, i, -1, u_side(b, i), 0, 0, T);
            ADD(OP_WG_CTX_QKV, i, -1, u_side(b, i), 0, 0, T);
            emit_allreduce_tail(b, ex);
        }
        for (int l = L - 1; l >= 0; l--)
            for (int i = 0; i < n; i++) {
                if (b->rc) {
                    emit_rc_window(b, i, l, k, l == L - 1);
                } else {
                    ADD(OP_BPTT, i, l, u_rec(b, i, l), k, t0, t1);
                    if (k == 0) ADD(OP_WGRAD, i, l, u_side(b, i), 0, 0, T); /* one GEMM over all T each */
                    ADD(OP_DX, i, l, u_feed(b, i, l), k, t0, t1);
                }
                if (l == 0 && k == 0) ADD(OP_EMBED_BWD, i, -1, u_lane(b, i), 0, 0, T);
            }
    }
}

/* Layer after layer (under recompute, each in windows). */
static void emit_layers(builder *b, cc_executor *ex)
{
    step_program *p = b->p;
    const int L = b->L, T = b->T, n = p->lanes, C = b->chunk;
    for (int l = 0; l < L; l++)
        for (int i = 0; i < n; i++) {
            if (l == 0) ADD(OP_EMBED, i, 0, u_lane(b, i), 0, 0, T);
            if (b->rc) {
                for (int k = 0; k < b->nw; k++) {
                    ADD(OP_FEED, i, l, u_lane(b, i), k, k * C, (k + 1) * C);
                    ADD(OP_RECUR, i, l, u_rec(b, i, l), k, k * C, (k + 1) * C);
                }
                continue;
            }
            if (l == 0) ADD(OP_FEED, i, 0, u_lane(b, i), 0, 0, T);
            ADD(OP_RECUR, i, l, u_rec(b, i, l), 0, 0, T);
            /* the residual and the norm after it in one pass: layer l+1's input, or the context stream's */
            if (l + 1 < L) ADD(OP_FEED, i, l + 1, u_lane(b, i), 0, 0, T);
            else ADD(OP_FEED, i, L, u_lane(b, i), 0, 0, T);
        }
    for (int i = 0; i < n; i++) emit_top(b, i);
    emit_allreduce_tail(b, ex);
    if (!p->with_grad) return;
    for (int l = L - 1; l >= 0; l--)
        for (int i = 0; i < n; i++) {
            if (b->rc) {
                for (int k = b->nw - 1; k >= 0; k--) emit_rc_window(b, i, l, k, 1);
                if (l == 0) ADD(OP_EMBED_BWD, i, -1, u_lane(b, i), 0, 0, T);
                continue;
            }
            ADD(OP_BPTT, i, l, u_rec(b, i, l), 0, 0, T);
            /* below layer 0 the weight GEMMs are issued after the input gradient, so they run beside the
             * next layer's BPTT instead of taking SMs from the input gradient it waits for; layer 0's
             * run beside the embedding backward */
            if (l == 0) ADD(OP_WGRAD, i, 0, u_side(b, i), 0, 0, T);
            ADD(OP_DX, i, l, u_lane(b, i), 0, 0, T);
            if (l > 0) ADD(OP_WGRAD, i, l, u_side(b, i), 0, 0, T);
            else ADD(OP_EMBED_BWD, i, -1, u_lane(b, i), 0, 0, T);
        }
}

void program_emit(step_program *p, cc_executor *ex, int lanes, int with_grad, int eval)
{
    gpu_impl *g = IMPL(ex);
    memset(p, 0, sizeof(*p));
    p->lanes = lanes;
    p->with_grad = with_grad;
    p->eval = eval;
    /* profiling times each operation alone: the same operations, one after another */
    p->serial = strcmp(ex->cfg.gpu_schedule, "serial") == 0 || g->profile;
    /* after a refused persistent launch every recurrence takes the per-step loop, whose carry between
     * windows differs from the persistent kernels' (gru_shape): layer after layer from then on */
    p->refused = g->gru.refused[0] != 0;
    p->wave = !eval && g->plan.wave_chunk > 0 && !p->refused;
    const int T = ex->T;
    builder b = { p, g, ex->lay.dims.L, T, ex->B / lanes, p->wave ? g->plan.wave_chunk : T,
                  g->plan.recompute, g->plan.recompute ? T / g->plan.rc_window : 1 };
    if (b.rc) b.chunk = g->plan.rc_window; /* the wavefront's chunks are the windows (plan_gpu.c) */
    p->nchunks = p->wave ? (T + b.chunk - 1) / b.chunk : 1;
    /* the tensor-core attention works in blocks of ATTENTION_TC_BLOCK queries: chunks must be whole blocks;
     * under recompute the context stream runs in parts of sequences over all T */
    p->top_chunked = p->wave && gpu_plan_top_chunked(&g->plan, T);
    u_lane(&b, 0); /* unit 0, slot 0: the main stream */
    if (p->wave) emit_wavefront(&b, ex);
    else emit_layers(&b, ex);
}

void program_build(step_program *p, cc_executor *ex, int lanes, int with_grad, int eval)
{
    program_emit(p, ex, lanes, with_grad, eval);
    schedule_program(p, ex);
}

void program_free(step_program *p)
{
    for (int i = 0; i < p->n; i++) {
        if (p->ev && p->ops[i].recorded) cudaEventDestroy(p->ev[i]);
        if (p->timing) {
            cudaEventDestroy(p->ev_start[i]);
            cudaEventDestroy(p->ev_end[i]);
        }
    }
    if (p->timing) cudaEventDestroy(p->ev_t0);
    for (int s = 0; s < p->nslots; s++)
        if (p->slot_join[s]) cudaEventDestroy(p->slot_join[s]);
    cudaFree(p->scan_first);
    cudaFree(p->scan_value);
    free(p->ev);
    free(p->ev_start);
    free(p->ev_end);
    program_free_host(p);
}

void program_free_host(step_program *p)
{
    free(p->ops);
    free(p->acc);
    free(p->waits);
    free(p->scans);
}

void gpu_programs_free(gpu_impl *g)
{
    g->ran = NULL;
    for (int i = 0; i < GPU_PROGRAMS; i++) {
        if (!g->programs[i]) continue;
        program_free(g->programs[i]);
        free(g->programs[i]);
        g->programs[i] = NULL;
    }
}

/* The program of this kind of step, built on first use (again where the
 * lanes changed, or after a refused persistent launch: no wavefront, and
 * the per-step loop's scratch declared). A CUDA graph of an earlier
 * program is not replayed (gpu_program_builds). */
static step_program *program_for(cc_executor *ex, int lanes, int with_grad, int eval)
{
    gpu_impl *g = IMPL(ex);
    const int which = eval ? 2 : with_grad ? 0 : 1;
    step_program *p = g->programs[which];
    if (p && (p->lanes != lanes || p->refused != (g->gru.refused[0] != 0))) {
        cudaCheck(cudaStreamSynchronize(g->stream)); /* its events may still be in use */
        program_free(p);
        free(p);
        p = g->programs[which] = NULL;
    }
    if (!p) {
        p = g->programs[which] = cc_calloc(1, sizeof(*p));
        program_build(p, ex, lanes, with_grad, eval);
        g->program_builds++;
    }
    return p;
}

void gpu_step_prepare(cc_executor *ex, long scored, int n)
{
    schedule_prepare(program_for(ex, n, scored > 0, 0), ex);
}

void gpu_issue_step(cc_executor *ex, double loss_scale, long scored, int n)
{
    gpu_impl *g = IMPL(ex);
    step_program *p = program_for(ex, n, scored > 0, 0);
    for (int i = 1; i < n; i++) /* the batch and the zeroed gradients are on the main stream */
        cudaCheck(cudaMemsetAsync(g->lane[i].g32, 0, sizeof(float) * ex->lay.total, g->stream));
    g->wave_ran = p->wave ? g->plan.wave_chunk : 0;
    g->wave_top_ran = p->top_chunked;
    g->ran = p;
    schedule_issue(p, ex, loss_scale, scored);
}

void gpu_step_replayed(cc_executor *ex, long scored)
{
    gpu_impl *g = IMPL(ex);
    g->ran = g->programs[scored > 0 ? 0 : 1];
}

void gpu_issue_eval(cc_executor *ex)
{
    gpu_impl *g = IMPL(ex);
    gpu_set_lanes(ex, 1);
    g->ran = program_for(ex, 1, 0, 1);
    schedule_issue(g->ran, ex, 1.0, 0);
}

void gpu_step_collect_scans(cc_executor *ex)
{
    if (IMPL(ex)->ran) schedule_collect_scans(IMPL(ex)->ran, ex);
}

void gpu_step_collect_timing(cc_executor *ex)
{
    if (IMPL(ex)->ran) schedule_collect_timing(IMPL(ex)->ran, ex);
}
