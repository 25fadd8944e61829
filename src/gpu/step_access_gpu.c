/* What an operation tells the scheduler (step_gpu.h): the memory it reads
 * and writes, as views whose accesses are appended to the program's table
 * while the program is declared (and, under the access check, checked
 * against it while it is issued), and its NaN scans, launched into the
 * program's slots while it is issued ([gpu] check). The operations and
 * the scheduler both call these; they call neither. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/kernels.h"
#include "catchat/util.h"
#include "gpu/gpu_impl.h"
#include "gpu/step_gpu.h"

/* ---- views ---- */

/* Whether run family x lies within the runs of a: each of x's runs inside one of a's. */
static int access_within(const step_access *x, const step_access *a)
{
    for (int i = 0; i < x->n; i++) {
        const char *lo = x->base + (size_t)i * x->stride + x->lo, *hi = x->base + (size_t)i * x->stride + x->hi;
        if (lo < a->base) return 0;
        const size_t j = a->n > 1 ? (size_t)(lo - a->base) / a->stride : 0;
        if (j >= (size_t)a->n) return 0;
        const char *run = a->base + j * a->stride;
        if (lo < run + a->lo || hi > run + a->hi) return 0;
    }
    return 1;
}

/* The access check: an issued view within one of its operation's declared
 * accesses that allows it (a write within a write or define). */
static void check_issued(const step_run *r, const step_access *x)
{
    const step_program *p = r->p;
    for (int a = r->op->acc0; a < r->op->acc0 + r->op->nacc; a++) {
        const step_access *d = &p->acc[a];
        if ((x->write == ACC_READ || d->write != ACC_READ) && access_within(x, d)) return;
    }
    fprintf(stderr, "catchat: the step's operation %d (kind %d, layer %d, steps %d..%d) launched on %s bytes it did not declare\n",
            (int)(r->op - p->ops), r->op->kind, r->op->layer, r->op->t0, r->op->t1,
            x->write == ACC_READ ? "reading" : "writing");
    exit(1);
}

static void add_access(step_run *r, int write, const void *base, size_t stride, int n, size_t lo, size_t hi)
{
    if (!base || n <= 0 || hi <= lo) return;
    const step_access x = { base, stride, lo, hi, n, write };
    if (!r->declaring) {
        if (r->g->check_accesses) check_issued(r, &x);
        return;
    }
    step_program *p = r->p;
    GROW(p->acc, p->cap_acc, p->nacc + 1);
    p->acc[p->nacc++] = x;
}

void *view_lane(step_run *r, int acc, const void *lane_rows, size_t width, size_t es, int t0, int t1)
{
    const size_t row = width * es;
    add_access(r, acc, lane_rows, (size_t)r->c.T * row, r->c.B, (size_t)t0 * row, (size_t)t1 * row);
    return (void *)lane_rows;
}

void *view_rows(step_run *r, int acc, const void *lane_rows, size_t width, size_t es, int t0, int t1)
{
    return (char *)view_lane(r, acc, lane_rows, width, es, t0, t1) + (size_t)t0 * width * es;
}

void *view_window(step_run *r, int acc, const void *lane_rows, size_t width, size_t es)
{
    const size_t bytes = (size_t)r->g->plan.rc_window * width * es;
    add_access(r, acc, lane_rows, bytes, r->c.B, 0, bytes);
    return (void *)lane_rows;
}

void *view_flat(step_run *r, int acc, const void *ptr, size_t bytes)
{
    add_access(r, acc, ptr, bytes, 1, 0, bytes);
    return (void *)ptr;
}

float *view_grad(step_run *r, int idx)
{
    return view_flat(r, ACC_WRITE, G32L(&r->c, idx), sizeof(float) * r->ex->lay.t[idx].numel);
}

const float *view_param32(step_run *r, int idx)
{
    return view_flat(r, ACC_READ, P32(r->ex, idx), sizeof(float) * r->ex->lay.t[idx].numel);
}

const uint16_t *view_param16(step_run *r, int idx)
{
    return view_flat(r, ACC_READ, P16(r->ex, idx), sizeof(uint16_t) * r->ex->lay.t[idx].numel);
}

/* ---- hooks: NaN scans ---- */

/* Each operation's scan slots, in program order: its own scans (at most
 * three; four slots) and, in the classifier, the chunks' (three a chunk). Made on an
 * eager step (a graph is captured only after one), never during a capture.
 * Reserving keeps what each operation scans (nscan, scans[]): a replayed
 * graph runs the scans its capture issued, and the findings are read by
 * them; only issuing the program again (scans_clear) starts them over. */
static int op_scan_slots(const step_program *p, const cc_executor *ex, const step_op *o)
{
    const int chunk_rows = IMPL(ex)->plan.ce_rows, rows = ex->B * ex->T / p->lanes;
    return o->kind == OP_CLASSIFIER ? 4 + 3 * (rows / chunk_rows + 2) : 4;
}

void scans_reserve(step_program *p, cc_executor *ex)
{
    int need = 0;
    for (int i = 0; i < p->n; i++) {
        p->ops[i].scan0 = need;
        need += op_scan_slots(p, ex, &p->ops[i]);
    }
    if (need <= p->cap_scans) return;
    cudaFree(p->scan_first);
    cudaFree(p->scan_value);
    p->scans = cc_realloc(p->scans, sizeof(step_scan) * (size_t)need);
    cudaCheck(cudaMalloc((void **)&p->scan_first, sizeof(unsigned long long) * (size_t)need));
    cudaCheck(cudaMalloc((void **)&p->scan_value, sizeof(float) * (size_t)need));
    p->cap_scans = need;
}

void scans_clear(step_program *p)
{
    for (int i = 0; i < p->n; i++) p->ops[i].nscan = 0;
}

static int scans_on(const step_run *r) { return r->ex->check != NULL; }

/* Takes the op's next slot for the scan and, now or (later) at the op's
 * end, launches it on the op's stream. */
static void scan_add(step_run *r, const step_scan *sc, int now)
{
    step_program *p = r->p;
    if (r->declaring) return;
    if (!scans_on(r) || r->c.ex->check->found) return;
    const int k = r->op->scan0 + r->op->nscan;
    if (r->op->nscan >= op_scan_slots(p, r->ex, r->op)) return; /* more than reserved: cannot happen */
    ((step_op *)r->op)->nscan++;
    p->scans[k] = *sc;
    if (now) scan_launch(r, k);
}

void scan_launch(step_run *r, int k)
{
    step_program *p = r->p;
    const step_scan *sc = &p->scans[k];
    if (sc->nseq == 1 && sc->stride == sc->len)
        launch_find_nonfinite(sc->ptr, sc->len, sc->half, p->scan_first + k, r->s);
    else
        launch_find_nonfinite_rows(sc->ptr, sc->nseq, sc->stride, sc->len, sc->half, p->scan_first + k, r->s);
    launch_fetch_at(sc->ptr, sc->half, p->scan_first + k, p->scan_value + k, r->s);
}

void scan_rows(step_run *r, const char *stage, const char *tensor, int layer, const void *lane_rows, int width,
               int half, int t0, int t1, int window)
{
    if (!r->declaring && !scans_on(r)) return;
    const int steps = window ? r->g->plan.rc_window : r->c.T;
    const size_t es = half ? 2 : 4;
    const step_scan sc = { stage, tensor, layer, half, width,
                           window ? lane_rows : (const char *)lane_rows + (size_t)t0 * width * es,
                           r->c.B, (size_t)steps * width, (size_t)(t1 - t0) * width, r->c.b0, t0 };
    scan_add(r, &sc, 0); /* of the op's output: launched after its kernels (schedule_issue) */
}

void scan_flat(step_run *r, const char *stage, const char *tensor, const void *ptr, size_t n, int half, int width)
{
    if (!r->declaring && !scans_on(r)) return;
    const step_scan sc = { stage, tensor, -1, half, width, ptr, 1, n, n, -1, 0 };
    scan_add(r, &sc, 1); /* called from inside an op, where the tensor is (a classifier chunk's) */
}

