/* embedding: the gather forward (a copy: exact), the scatter-add backward
 * with many repeated ids, and recompute's rebuild of u^l (the gather plus
 * the layers' h in the forward's order) on a time window, against the CPU
 * reference. */
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
    snprintf(st->shape, sizeof(st->shape), "V=%d D=%d M=%d (repeated ids), u rebuilt on a time window", V, D, M);
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
    /* recompute's u^l again, on a time window of the [B, T] rows: the embedding plus h^0 .. h^{nadds-1} added in
     * the forward's order, exact; rows outside the window stay as they were (NaN); 10 adds take two launches */
    const int B = 4, T = M / B, t0 = 20, len = 30, nadds = 10;
    const row_window rw = { len, T, 0 };
    float *h = rand_vec(r, (size_t)nadds * M * D, 1, 0), *ru = cc_malloc(4 * (size_t)M * D);
    float *dh = dev_f32(h, (size_t)nadds * M * D), *du = dev_f32(NULL, (size_t)M * D);
    const float *adds[10];
    for (int k = 0; k < nadds; k++) adds[k] = dh + (size_t)k * M * D + (size_t)t0 * D;
    launch_embedding_sum_rows(du + (size_t)t0 * D, dx + t0, dtab, adds, nadds, B * len, D, rw, 0);
    float *gu = get_f32(du, (size_t)M * D);
    for (int m = 0; m < M; m++)
        for (int i = 0; i < D; i++) {
            const int t = m % T;
            float v = table[(size_t)x[m] * D + i];
            for (int k = 0; k < nadds; k++) v += h[((size_t)k * M + m) * D + i];
            ru[(size_t)m * D + i] = t >= t0 && t < t0 + len ? v : NAN;
        }
    int outside_ok = 1;
    for (int m = 0; m < M; m++) {
        const int t = m % T;
        if (t >= t0 && t < t0 + len) continue;
        outside_ok &= isnan(gu[(size_t)m * D]) && isnan(gu[(size_t)m * D + D - 1]);
        for (int i = 0; i < D; i++) ru[(size_t)m * D + i] = gu[(size_t)m * D + i] = 0; /* only the window counts */
    }
    check(st, "sum rows (time window, 10 adds)", gu, ru, (size_t)M * D, 0, 0);
    check_flag(st, "sum rows leave the rows outside the window", outside_ok);
    FREE_ALL(x, table, dout, dt0, gy, gdt, ry, off, pos, h, ru, gu);
    DFREE_ALL(dx, dtab, dout_d, dy, ddt, doff, dpos, dh, du);
}

const ladder_stage ladder_stage_embedding = { "embedding", "embedding", run_embedding };
