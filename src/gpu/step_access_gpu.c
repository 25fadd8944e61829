/* What an operation tells the scheduler (step_gpu.h): the memory it reads
 * and writes, appended to the program's table while the program is
 * declared, and its NaN scans, launched into the program's slots while it
 * is issued ([gpu] check). The operations and the scheduler both call
 * these; they call neither. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/kernels.h"
#include "catchat/util.h"
#include "gpu/gpu_impl.h"
#include "gpu/step_gpu.h"

/* ---- declarations ---- */

static void add_access(step_run *r, int write, const void *base, size_t stride, int n, size_t lo, size_t hi)
{
    if (!r->declaring || !base || n <= 0 || hi <= lo) return;
    step_program *p = r->p;
    GROW(p->acc, p->cap_acc, p->nacc + 1);
    p->acc[p->nacc++] = (step_access){ base, stride, lo, hi, n, write };
}

void use_rows(step_run *r, int write, const void *lane_rows, size_t width, size_t es, int t0, int t1)
{
    const size_t row = width * es;
    add_access(r, write, lane_rows, (size_t)r->c.T * row, r->c.B, (size_t)t0 * row, (size_t)t1 * row);
}

void use_window(step_run *r, int write, const void *lane_rows, size_t width, size_t es)
{
    const size_t bytes = (size_t)r->g->plan.rc_window * width * es;
    add_access(r, write, lane_rows, bytes, r->c.B, 0, bytes);
}

void use_flat(step_run *r, int write, const void *ptr, size_t bytes) { add_access(r, write, ptr, bytes, 1, 0, bytes); }

void use_grad(step_run *r, int idx)
{
    use_flat(r, 1, G32L(&r->c, idx), sizeof(float) * r->ex->lay.t[idx].numel);
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

