/* crossentropy (classifier + loss): the lm_head GEMM, softmax cross-entropy
 * forward and backward with ignored targets, and the lm_head weight
 * gradient, against the CPU reference. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/cpu_ref.h"
#include "catchat/kernels.h"
#include "catchat/util.h"
#include "ladder/ladder.h"

static void run_crossentropy(const ladder_ctx *cx, stage *st)
{
    cc_rng *r = cx->rng;
    gpu_matmul_ctx *gm = cx->gemm;
    const int M = 96, D = 64, V = 256;
    const float S = 128;
    snprintf(st->shape, sizeof(st->shape), "M=%d D=%d V=%d, every 7th target ignored, S=128", M, D, V);
    float *f = rand_vec(r, (size_t)M * D, 1, 1), *w = rand_vec(r, (size_t)V * D, 0.3, 1);
    int *y = cc_malloc(sizeof(int) * M);
    for (int i = 0; i < M; i++) y[i] = i % 7 == 6 ? -1 : (int)cc_rng_below(r, V);
    void *df16 = dev_f16(f, (size_t)M * D), *dw16 = dev_f16(w, (size_t)V * D);
    float *dlog = dev_f32(NULL, (size_t)M * V), *dloss = dev_f32(NULL, M);
    int *dy = cc_device_alloc(sizeof(int) * M, "targets"), *drank = cc_device_alloc(sizeof(int) * M, "ranks");
    cudaCheck(cudaMemcpy(dy, y, sizeof(int) * M, cudaMemcpyHostToDevice));
    void *ddl16 = dev_f16(NULL, (size_t)M * V);
    float *dW = dev_f32(NULL, (size_t)V * D);
    cudaCheck(cudaMemset(dW, 0, 4 * (size_t)V * D));
    gpu_matmul(gm, dlog, V, df16, D, 0, dw16, D, 1, M, V, D, 1.f, 0.f, NULL, 0);
    launch_crossentropy(dloss, drank, ddl16, dlog, dy, M, V, row_window_all(M), S, 0);
    gpu_matmul(gm, dW, D, ddl16, V, 1, df16, D, 0, V, D, M, 1.f, 1.f, NULL, 0);
    float *glog = get_f32(dlog, (size_t)M * V), *gloss = get_f32(dloss, M), *gdl = get_f16(ddl16, (size_t)M * V);
    float *gW = get_f32(dW, (size_t)V * D);
    float *rlog = cc_malloc(4 * (size_t)M * V), *rdl = cc_malloc(4 * (size_t)M * V), *rW = cc_calloc((size_t)V * D, 4);
    cpu_matmul_forward(rlog, f, w, NULL, M, V, D);
    cc_score sc = { 0 };
    cpu_crossentropy(rdl, NULL, rlog, y, M, V, S, &sc);
    cpu_matmul_backward(NULL, rW, NULL, rdl, f, w, M, V, D);
    float gsum = 0, rsum = (float)sc.loss_sum;
    for (int i = 0; i < M; i++) gsum += gloss[i];
    check(st, "logits", glog, rlog, (size_t)M * V, 1e-5, 0);
    check(st, "loss", &gsum, &rsum, 1, 1e-5, 0);
    check(st, "dlogits", gdl, rdl, (size_t)M * V, 1e-3, 0); /* FP16 storage of the GEMM operand */
    check(st, "dW_lm", gW, rW, (size_t)V * D, 1e-3, 0);
    int zero_ok = 1;
    for (int i = 0; i < M; i++)
        if (y[i] < 0)
            for (int v = 0; v < V; v++) zero_ok &= gdl[(size_t)i * V + v] == 0.f && gloss[i] == 0.f;
    check_flag(st, "ignored rows give no loss or gradient", zero_ok);
    FREE_ALL(f, w, y, glog, gloss, gdl, gW, rlog, rdl, rW);
    DFREE_ALL(df16, dw16, dlog, dloss, dy, drank, ddl16, dW);
}

const ladder_stage ladder_stage_crossentropy = { "crossentropy", "classifier + loss", run_crossentropy };
