/* The scheduler of the step's program (step_gpu.h): what each operation
 * declares it reads and writes becomes the waits between streams, once per
 * program; then every step issues the operations in program order, each on
 * its stream after the events of the operations it must follow. Two
 * operations are ordered when their memory overlaps and one of them writes
 * (this also orders tensors that share memory, recompute's `work`, and a
 * GEMM context's workspace used from two streams); an operation waits only
 * for what no earlier wait already implies (vector clocks over streams).
 * The diagnostics are hooks around each operation: NaN scans into slots
 * read back after the step, and events for the phase times and the lane
 * trace. None of them synchronises inside the step, so they run under
 * every schedule and inside a CUDA graph. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/finite.h"
#include "catchat/kernels.h"
#include "catchat/util.h"
#include "gpu/gpu_impl.h"
#include "gpu/step_gpu.h"

/* Each kind's function and bench phase (executor.h). */
typedef void (*op_fn)(step_run *);
static const struct {
    op_fn fn;
    int phase;
} KIND[OP_KINDS] = {
    [OP_EMBED] = { op_embed, PH_INPUT },
    [OP_FEED] = { op_feed, PH_INPUT },
    [OP_RECUR] = { op_recur, PH_REC_FWD },
    [OP_TOP_CTX] = { op_top_ctx, PH_CONTEXT_FWD },
    [OP_CLASSIFIER] = { op_classifier, PH_CLASSIFIER },
    [OP_CLASSIFIER_DW] = { op_classifier_dw, PH_CLASSIFIER },
    [OP_TOP_DC] = { op_top_dc, PH_CONTEXT_BWD },
    [OP_WG_CTX_OUT] = { op_wg_ctx_out, PH_CONTEXT_BWD },
    [OP_TOP_ATTN] = { op_top_attn, PH_CONTEXT_BWD },
    [OP_WG_CTX_QKV] = { op_wg_ctx_qkv, PH_CONTEXT_BWD },
    [OP_TOP_DX] = { op_top_dx, PH_CONTEXT_BWD },
    [OP_ALLREDUCE_TAIL] = { op_allreduce_tail, PH_CONTEXT_BWD },
    [OP_REGATE] = { op_regate, PH_BPTT },
    [OP_BPTT] = { op_bptt, PH_BPTT },
    [OP_DX] = { op_dx, PH_WGRAD },
    [OP_WGRAD] = { op_wgrad, PH_WGRAD },
    [OP_EMBED_BWD] = { op_embed_bwd, PH_WGRAD },
};

/* Whether two accesses touch a common byte and one of them writes. Exact
 * for single runs, and for runs of one stride that each lie within their
 * stride (a's runs end by it: hi ≤ stride); otherwise whether their spans
 * overlap, which may order two operations that need not be (never the
 * reverse). */
static int conflict(const step_access *a, const step_access *b)
{
    if (!a->write && !b->write) return 0;
    const char *a0, *a1, *b0, *b1;
    step_access_span(a, &a0, &a1);
    step_access_span(b, &b0, &b1);
    if (a1 <= b0 || b1 <= a0) return 0;
    if (a->n == 1 && b->n == 1) return 1;
    if (a->n == 1) { /* the runs' family first */
        const step_access *t = a;
        a = b;
        b = t;
    }
    const long long S = (long long)a->stride;
    /* exact where a's runs lie within their stride (every view's rows do) */
    if ((b->n > 1 && (long long)b->stride != S) || (long long)a->hi > S || (long long)(b->hi - b->lo) > S)
        return 1;
    /* b's run j starts d + j·S + b.lo bytes past a's base: in a's run j + q at offset rem + b.lo */
    const long long d = (long long)(b->base - a->base);
    long long q = d / S, rem = d % S;
    if (rem < 0) {
        rem += S;
        q -= 1;
    }
    const long long lo = rem + (long long)b->lo, hi = rem + (long long)b->hi;
    for (long long k = lo / S; k * S < hi; k++) { /* the runs of a that b's run reaches into */
        const long long blo = lo - k * S, bhi = hi - k * S;
        if (bhi <= (long long)a->lo || (long long)a->hi <= blo) continue;
        const long long first = q + k, last = q + k + b->n; /* a's runs [first, last) meet b's */
        if (first < a->n && last > 0) return 1;
    }
    return 0;
}

static int overlaps(const step_program *p, const step_op *x, const step_op *y)
{
    for (int i = 0; i < x->nacc; i++)
        for (int j = 0; j < y->nacc; j++)
            if (conflict(&p->acc[x->acc0 + i], &p->acc[y->acc0 + j])) return 1;
    return 0;
}

/* The op's lane view: its lane, or under recompute for the context stream
 * (from u^L's norm on) the part of it whose tensors hold one part. */
static lane_ctx op_view(cc_executor *ex, const step_program *p, const step_op *o)
{
    gpu_impl *g = IMPL(ex);
    lane_ctx c = lane_view(ex, &g->lane[o->lane]);
    const int top = (o->kind >= OP_TOP_CTX && o->kind <= OP_TOP_DX) || (o->kind == OP_FEED && o->layer == c.L);
    if (top && g->plan.recompute) return lane_part(&c, o->s0, o->ns, 1);
    return c;
}

/* A run of program p's operations: declaring them, or issuing. */
static step_run run_of(cc_executor *ex, step_program *p, int declaring)
{
    step_run r;
    memset(&r, 0, sizeof(r));
    r.ex = ex;
    r.g = IMPL(ex);
    r.p = p;
    r.declaring = declaring;
    return r;
}

/* The stream unit u runs on, on the executor (serial: the main one). */
static cudaStream_t unit_stream(const gpu_impl *g, const step_program *p, const exec_unit *u)
{
    if (p->serial) return g->stream;
    return u->lane < 0 ? g->comm_stream : g->lane[u->lane].stream[u->at.stream];
}

static void run_setup(step_run *r, cc_executor *ex, step_program *p, int i)
{
    const step_op *o = &p->ops[i];
    const exec_unit *u = &p->unit[o->unit];
    const gpu_impl *g = IMPL(ex);
    r->op = o;
    r->c = op_view(ex, p, o);
    if (r->declaring) return; /* a program declares over no stream: the liveness pass has none */
    r->s = unit_stream(g, p, u);
    r->gm = u->at.gemm >= 0 ? g->lane[u->lane].gemm[u->at.gemm] : NULL;
    r->sc = u->lane >= 0 ? g->lane[u->lane].sc[u->at.stream] : NULL;
}

/* Stand-ins for a unit's GEMM context and kernel scratch in the declarations:
 * addresses below any allocation, one a (lane, context) and one a (lane, stream). */
static const void *gemm_token(const exec_unit *u)
{
    return (const void *)(uintptr_t)(16 * (1 + (size_t)u->lane * GPU_LANE_GEMMS + (size_t)u->at.gemm));
}
static const void *scratch_token(const exec_unit *u)
{
    return (const void *)(uintptr_t)(16 * (1 + GPU_MAX_LANES * GPU_LANE_GEMMS + (size_t)u->lane * GPU_LANE_STREAMS +
                                           (size_t)u->at.stream));
}

/* ---- the schedule ---- */

void schedule_declare(step_program *p, cc_executor *ex)
{
    step_run r = run_of(ex, p, 1);
    for (int i = 0; i < p->n; i++) {
        run_setup(&r, ex, p, i);
        p->ops[i].acc0 = p->nacc;
        KIND[p->ops[i].kind].fn(&r);
        /* a unit's GEMM context (its workspace) and kernel scratch serve one stream at a time: operations
         * of two streams that share one are ordered as if they wrote the same memory (the host addresses
         * stand for them: they meet no device allocation) */
        const exec_unit *u = &p->unit[p->ops[i].unit];
        if (u->at.gemm >= 0) view_flat(&r, ACC_WRITE, gemm_token(u), 1);
        if (u->lane >= 0) view_flat(&r, ACC_WRITE, scratch_token(u), 1);
        p->ops[i].nacc = p->nacc - p->ops[i].acc0;
    }
}

int *schedule_waits(step_program *p)
{
    /* vc[i][s]: the last operation on stream slot s that operation i is known to follow */
    const int S = p->nslots;
    int *vc = cc_malloc(sizeof(int) * (size_t)p->n * S), *last = cc_malloc(sizeof(int) * S);
    for (int s = 0; s < S; s++) last[s] = -1;
    for (int i = 0; i < p->n; i++) {
        step_op *o = &p->ops[i];
        const int si = p->unit[o->unit].slot;
        int *v = vc + (size_t)i * S;
        if (last[si] >= 0) memcpy(v, vc + (size_t)last[si] * S, sizeof(int) * S);
        else
            for (int s = 0; s < S; s++) v[s] = -1;
        v[si] = last[si];
        o->wait0 = p->nwaits;
        for (int j = i - 1; j >= 0; j--) {
            const int sj = p->unit[p->ops[j].unit].slot;
            if (v[sj] >= j || !overlaps(p, o, &p->ops[j])) continue;
            GROW(p->waits, p->cap_waits, p->nwaits + 1);
            p->waits[p->nwaits++] = j;
            p->ops[j].recorded = 1;
            const int *vj = vc + (size_t)j * S;
            for (int s = 0; s < S; s++)
                if (vj[s] > v[s]) v[s] = vj[s];
            v[sj] = j;
        }
        o->nwait = p->nwaits - o->wait0;
        last[si] = i;
    }
    free(last);
    return vc;
}

void schedule_program(step_program *p, cc_executor *ex)
{
    schedule_declare(p, ex);
    free(schedule_waits(p));
    const int S = p->nslots;
    p->ev = cc_calloc((size_t)p->n, sizeof(cudaEvent_t));
    for (int i = 0; i < p->n; i++)
        if (p->ops[i].recorded) cudaCheck(cudaEventCreateWithFlags(&p->ev[i], cudaEventDisableTiming));
    for (int s = 0; s < S; s++) cudaCheck(cudaEventCreateWithFlags(&p->slot_join[s], cudaEventDisableTiming));
}

/* ---- hooks: NaN scans ---- */

void schedule_collect_scans(step_program *p, cc_executor *ex)
{
    if (!ex->check || ex->check->found || !p->scan_first) return;
    int used = 0;
    for (int i = 0; i < p->n; i++)
        if (p->ops[i].scan0 + p->ops[i].nscan > used) used = p->ops[i].scan0 + p->ops[i].nscan;
    if (!used) return;
    unsigned long long *first = cc_malloc(sizeof(*first) * (size_t)used);
    float *value = cc_malloc(sizeof(float) * (size_t)used);
    cudaCheck(cudaMemcpy(first, p->scan_first, sizeof(*first) * (size_t)used, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(value, p->scan_value, sizeof(float) * (size_t)used, cudaMemcpyDeviceToHost));
    for (int i = 0; i < p->n && !ex->check->found; i++) /* program order: a NaN's first appearance */
        for (int k = p->ops[i].scan0; k < p->ops[i].scan0 + p->ops[i].nscan; k++) {
            if (first[k] == ~0ULL) continue;
            const step_scan *sc = &p->scans[k];
            long index = (long)first[k];
            if (sc->b_first >= 0) { /* (sequence, step, unit) in the [B, T, width] tensor */
                const size_t run = first[k] / sc->stride, off = first[k] % sc->stride;
                const size_t t = (size_t)sc->t_first + off / sc->width, unit = off % sc->width;
                index = (long)((((size_t)sc->b_first + run) * ex->T + t) * sc->width + unit);
            }
            cc_finite_set(ex->check, sc->stage, sc->tensor, sc->layer, index, value[k], sc->width, ex->T);
            break;
        }
    free(first);
    free(value);
}

/* ---- hooks: timing (profile, lane trace) ---- */

static void timing_reserve(step_program *p);

void schedule_prepare(step_program *p, cc_executor *ex)
{
    if (ex->check) scans_reserve(p, ex);
    if (IMPL(ex)->profile || ex->cfg.lane_trace) timing_reserve(p);
}

static void timing_reserve(step_program *p)
{
    if (p->timing) return;
    p->ev_start = cc_calloc((size_t)p->n, sizeof(cudaEvent_t));
    p->ev_end = cc_calloc((size_t)p->n, sizeof(cudaEvent_t));
    for (int i = 0; i < p->n; i++) {
        cudaCheck(cudaEventCreate(&p->ev_start[i]));
        cudaCheck(cudaEventCreate(&p->ev_end[i]));
    }
    cudaCheck(cudaEventCreate(&p->ev_t0));
    p->timing = 1;
}

/* The bench phase an operation's time counts in: its kind's, but a rebuild's
 * (the forward's operations run again in the backward) counts in the BPTT's. */
static int bench_phase(const step_op *o) { return o->phase == 2 && o->kind <= OP_FEED ? PH_BPTT : KIND[o->kind].phase; }

static int timing_on(const cc_executor *ex) { return IMPL(ex)->profile || ex->cfg.lane_trace; }

/* The lane trace: when each lane's layers ran their recurrences (forward
 * windows, then the BPTT's) and its weight GEMMs, in ms from the step's
 * start. */
static void trace_print(const step_program *p, int L)
{
    for (int lane = 0; lane < p->lanes; lane++) {
        for (int l = -1; l < L; l++) {
            int any = 0;
            for (int i = 0; i < p->n; i++) {
                const step_op *o = &p->ops[i];
                const int mine = o->lane == lane &&
                                 (l < 0 ? o->kind == OP_WGRAD : (o->kind == OP_RECUR || o->kind == OP_BPTT) && o->layer == l);
                if (!mine) continue;
                float a = 0, b = 0;
                cudaCheck(cudaEventElapsedTime(&a, p->ev_t0, p->ev_start[i]));
                cudaCheck(cudaEventElapsedTime(&b, p->ev_t0, p->ev_end[i]));
                if (!any) {
                    if (l < 0) fprintf(stderr, "lane %d weight GEMMs:", lane);
                    else fprintf(stderr, "lane %d layer %d recurrence:", lane, l);
                }
                fprintf(stderr, " %.3f-%.3f", a, b);
                any = 1;
            }
            if (any) fputc('\n', stderr);
        }
    }
}

void schedule_collect_timing(step_program *p, cc_executor *ex)
{
    gpu_impl *g = IMPL(ex);
    if (!p->timing || !timing_on(ex)) return;
    cudaCheck(cudaEventSynchronize(p->ev_end[p->n - 1]));
    cudaCheck(cudaStreamSynchronize(g->stream));
    if (g->profile)
        for (int i = 0; i < p->n; i++) {
            float ms = 0;
            cudaCheck(cudaEventElapsedTime(&ms, p->ev_start[i], p->ev_end[i]));
            g->phase_ms[bench_phase(&p->ops[i])] += ms;
        }
    if (ex->cfg.lane_trace) trace_print(p, ex->lay.dims.L);
}

/* ---- issue ---- */

void schedule_issue(step_program *p, cc_executor *ex, double loss_scale, long scored)
{
    gpu_impl *g = IMPL(ex);
    step_run r = run_of(ex, p, 0);
    r.loss_scale = (float)loss_scale;
    /* the kernels see gradients of the loss × S summed over the scored positions */
    r.clamp_limit = (float)cc_clamp_dispatch_limit(ex->cfg.grad_h_clamp, loss_scale, (double)scored);
    r.ctx_limit = (float)cc_clamp_dispatch_limit(ex->cfg.ctx_grad_clamp, loss_scale, (double)scored);
    const int timing = timing_on(ex);
    if (timing) timing_reserve(p);
    if (ex->check) {
        scans_reserve(p, ex);
        scans_clear(p);
        cudaCheck(cudaMemsetAsync(p->scan_first, 0xff, sizeof(unsigned long long) * (size_t)p->cap_scans, g->stream));
    }
    /* every stream starts once the main one has the batch and the zeroed gradients */
    cudaCheck(cudaEventRecord(g->ev_batch, g->stream));
    /* under capture the timing events become nodes of the graph that record them at each replay */
    enum cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    cudaCheck(cudaStreamIsCapturing(g->stream, &capturing));
    const unsigned record_flags = capturing == cudaStreamCaptureStatusActive ? cudaEventRecordExternal : 0;
    if (timing) cudaCheck(cudaEventRecordWithFlags(p->ev_t0, g->stream, record_flags));
    for (int s = 0; s < p->nslots; s++) {
        cudaStream_t st = unit_stream(g, p, &p->unit[p->slot_unit[s]]);
        if (st != g->stream) cudaCheck(cudaStreamWaitEvent(st, g->ev_batch, 0));
    }
    /* the access check waits for the device around each operation: eager steps only */
    const int checking = g->check_accesses && capturing != cudaStreamCaptureStatusActive;
    if (checking) access_check_before(ex);
    for (int i = 0; i < p->n; i++) {
        const step_op *o = &p->ops[i];
        run_setup(&r, ex, p, i);
        for (int w = 0; w < o->nwait; w++) cudaCheck(cudaStreamWaitEvent(r.s, p->ev[p->waits[o->wait0 + w]], 0));
        if (timing) cudaCheck(cudaEventRecordWithFlags(p->ev_start[i], r.s, record_flags));
        KIND[o->kind].fn(&r);
        for (int k = o->scan0; ex->check && k < o->scan0 + o->nscan; k++) /* its outputs, now that they exist */
            if (p->scans[k].b_first >= 0) scan_launch(&r, k);
        if (timing) cudaCheck(cudaEventRecordWithFlags(p->ev_end[i], r.s, record_flags));
        if (o->recorded) cudaCheck(cudaEventRecord(p->ev[i], r.s));
        if (checking) access_check_after(ex, p, i);
    }
    for (int s = 0; s < p->nslots; s++) { /* every stream's end joins the main one */
        cudaStream_t st = unit_stream(g, p, &p->unit[p->slot_unit[s]]);
        if (st == g->stream) continue;
        cudaCheck(cudaEventRecord(p->slot_join[s], st));
        cudaCheck(cudaStreamWaitEvent(g->stream, p->slot_join[s], 0));
    }
    if (scored > 0 && p->with_grad) /* the lanes' gradients, added in lane order */
        for (int i = 1; i < p->lanes; i++) launch_add(g->g32, g->g32, g->lane[i].g32, ex->lay.total, g->stream);
}
