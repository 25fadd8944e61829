/* embedding: the gather forward (a copy: exact) and the scatter-add backward
 * with many repeated ids, against the CPU reference. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/cpu_ref.h"
#include "catchat/kernels.h"
#include "catchat/util.h"
#include "ladder/ladder.h"

static void run_embedding(const ladder_ctx *cx, stage *st)
{
    cc_rng *r = cx->rng;
    const int V = 50, D = 64, M = 300; /* 300 ids from 50: many repeats */
    snprintf(st->shape, sizeof(st->shape), "V=%d D=%d M=%d (repeated ids)", V, D, M);
    int *x = cc_malloc(sizeof(int) * M);
    for (int i = 0; i < M; i++) x[i] = (int)cc_rng_below(r, V);
    float *table = rand_vec(r, (size_t)V * D, 1, 0), *dout = rand_vec(r, (size_t)M * D, 1, 0);
    float *dt0 = rand_vec(r, (size_t)V * D, 1, 0);
    int *dx = cc_device_alloc(sizeof(int) * M, "ids");
    cudaCheck(cudaMemcpy(dx, x, sizeof(int) * M, cudaMemcpyHostToDevice));
    int *off = cc_malloc(sizeof(int) * (V + 1)), *pos = cc_malloc(sizeof(int) * M);
    cc_embedding_csr(x, M, V, off, pos);
    int *doff = cc_device_alloc(sizeof(int) * (V + 1), "offsets"), *dpos = cc_device_alloc(sizeof(int) * M, "positions");
    cudaCheck(cudaMemcpy(doff, off, sizeof(int) * (V + 1), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(dpos, pos, sizeof(int) * M, cudaMemcpyHostToDevice));
    float *dtab = dev_f32(table, (size_t)V * D), *dout_d = dev_f32(dout, (size_t)M * D);
    float *dy = dev_f32(NULL, (size_t)M * D), *ddt = dev_f32(dt0, (size_t)V * D);
    launch_embedding_forward(dy, dx, dtab, M, D, 0);
    launch_embedding_backward(ddt, dout_d, doff, dpos, V, D, 0);
    float *gy = get_f32(dy, (size_t)M * D), *gdt = get_f32(ddt, (size_t)V * D);
    float *ry = cc_malloc(4 * (size_t)M * D);
    cpu_embedding_forward(ry, x, table, M, D);
    cpu_embedding_backward(dt0, dout, x, M, D);
    check(st, "forward", gy, ry, (size_t)M * D, 0, 0);        /* a copy: exact */
    /* repeated ids add in position order as on the CPU, but summed apart from the
     * table's old value: rounding only */
    check(st, "dtable", gdt, dt0, (size_t)V * D, 1e-6, 0);
    FREE_ALL(x, table, dout, dt0, gy, gdt, ry, off, pos);
    DFREE_ALL(dx, dtab, dout_d, dy, ddt, doff, dpos);
}

const ladder_stage ladder_stage_embedding = { "embedding", "embedding", run_embedding };
