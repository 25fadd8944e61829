/* The access check (cc_gpu_check_accesses; the ladder's model stage runs
 * every step under it): whether each operation's launches keep to what it
 * declared. The views (step_access_gpu.c) check that every buffer an issued
 * operation hands its kernels lies within its declarations; this file
 * checks what the kernels did: around each operation of an eager step it
 * waits for the device, copies every buffer of the plan's table to the host
 * (the parameters and moments aside: no operation writes them, and the
 * step's views only read them), and after the operation finds every byte
 * that changed, each of which must lie within one of the operation's
 * declared writes. A write outside them is a dependency the scheduler
 * never saw: it stops the run with the operation and the buffer named.
 * Serial and synchronising, so slow: a testing aid, never on in training. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/util.h"
#include "gpu/gpu_impl.h"
#include "gpu/step_gpu.h"

/* The buffers the check follows, and their bytes before the operation. */
typedef struct access_snapshot {
    int n;
    const char *dev[GPU_BUF_COUNT];
    size_t bytes[GPU_BUF_COUNT];
    const char *what[GPU_BUF_COUNT];
    unsigned char *before[GPU_BUF_COUNT], *after[GPU_BUF_COUNT];
} access_snapshot;

static int followed(gpu_buf_id id) { return id != GPU_BUF_P32 && id != GPU_BUF_P16 && id != GPU_BUF_M && id != GPU_BUF_V; }

static access_snapshot *snapshot_of(cc_executor *ex)
{
    gpu_impl *g = IMPL(ex);
    if (g->access_snap) return g->access_snap;
    access_snapshot *sn = cc_calloc(1, sizeof(*sn));
    gpu_plan_buffer bufs[GPU_BUF_COUNT];
    const int nb = gpu_plan_buffers(&g->plan, &ex->lay.dims, ex->lay.total, ex->B, ex->T, bufs);
    for (int i = 0; i < nb; i++) {
        if (!bufs[i].bytes || !followed(bufs[i].id)) continue;
        sn->dev[sn->n] = *gpu_buffer_slot(g, bufs[i].id);
        sn->bytes[sn->n] = bufs[i].bytes;
        sn->what[sn->n] = bufs[i].what;
        /* pinned, so every buffer's copy is one asynchronous call and one wait for them all */
        cudaCheck(cudaMallocHost((void **)&sn->before[sn->n], bufs[i].bytes));
        cudaCheck(cudaMallocHost((void **)&sn->after[sn->n], bufs[i].bytes));
        sn->n++;
    }
    g->access_snap = sn;
    return sn;
}

void access_check_free(gpu_impl *g)
{
    access_snapshot *sn = g->access_snap;
    if (!sn) return;
    for (int i = 0; i < sn->n; i++) {
        cudaFreeHost(sn->before[i]);
        cudaFreeHost(sn->after[i]);
    }
    free(sn);
    g->access_snap = NULL;
}

/* Every followed buffer to the host, once the device is idle (on the main stream, after every stream's work). */
static void copy_all(cc_executor *ex, access_snapshot *sn, unsigned char **to)
{
    cudaStream_t s = IMPL(ex)->stream;
    cudaCheck(cudaDeviceSynchronize());
    for (int i = 0; i < sn->n; i++) cudaCheck(cudaMemcpyAsync(to[i], sn->dev[i], sn->bytes[i], cudaMemcpyDeviceToHost, s));
    cudaCheck(cudaStreamSynchronize(s));
}

void access_check_before(cc_executor *ex)
{
    access_snapshot *sn = snapshot_of(ex);
    copy_all(ex, sn, sn->before);
}

/* Whether address a lies in one of op o's declared writes. */
static int declared_write(const step_program *p, const step_op *o, const char *a)
{
    for (int k = o->acc0; k < o->acc0 + o->nacc; k++) {
        const step_access *x = &p->acc[k];
        if (x->write == ACC_READ || a < x->base + x->lo) continue;
        const size_t off = (size_t)(a - x->base), run = x->n > 1 ? off / x->stride : 0;
        if (run >= (size_t)x->n) continue;
        const size_t in = off - run * x->stride;
        if (in >= x->lo && in < x->hi) return 1;
    }
    return 0;
}

void access_check_after(cc_executor *ex, const step_program *p, int i)
{
    access_snapshot *sn = snapshot_of(ex);
    copy_all(ex, sn, sn->after);
    const step_op *o = &p->ops[i];
    for (int b = 0; b < sn->n; b++) {
        if (!memcmp(sn->before[b], sn->after[b], sn->bytes[b])) continue;
        for (size_t at = 0; at < sn->bytes[b]; at++) {
            if (sn->before[b][at] == sn->after[b][at] || declared_write(p, o, sn->dev[b] + at)) continue;
            fprintf(stderr,
                    "catchat: the step's operation %d (kind %d, lane %d, layer %d, steps %d..%d) wrote byte %zu of %s, "
                    "which it did not declare\n",
                    i, o->kind, o->lane, o->layer, o->t0, o->t1, at, sn->what[b]);
            exit(1);
        }
    }
    /* what this operation left is what the next one starts from */
    unsigned char *t[GPU_BUF_COUNT];
    memcpy(t, sn->before, sizeof(t));
    memcpy(sn->before, sn->after, sizeof(t));
    memcpy(sn->after, t, sizeof(t));
}
