/* The classifier's four launches a chunk (src/gpu/crossentropy.c), each
 * timed alone: the logits GEMM, the softmax cross-entropy, dx = dlogits·W
 * and dW += dlogitsᵀ·f (and the softmax at 8 and 32 warps a row), at chunk rows R and vocabulary V, with V or its
 * padded pitch as the GEMMs' dimension. What a chunk costs at each R is what
 * the plan's choice of rows trades against memory (docs/performance.md,
 * "Real vocabularies"). One JSON line per (V, R, form); medians of --reps after 3
 * warm-ups, CUDA events. Without a GPU: exit 77.
 *   classifier_probe [--d 512] [--reps 20] [--unpadded] */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/gpu_crossentropy.h"
#include "catchat/matmul.h"
#include "catchat/safetensors.h"
#include "catchat/util.h"
#include "gpu/gpu_check.h"

static float *rand_dev(size_t n, float sd, int half)
{
    float *h = cc_malloc(4 * n);
    uint32_t s = 12345u + (uint32_t)n;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        h[i] = sd * ((float)(s >> 8) / 16777216.f - 0.5f);
    }
    void *d = NULL;
    if (half) {
        uint16_t *q = cc_malloc(2 * n);
        for (size_t i = 0; i < n; i++) q[i] = cc_float_to_half(h[i]);
        d = cc_device_alloc(2 * n, "probe");
        cudaCheck(cudaMemcpy(d, q, 2 * n, cudaMemcpyHostToDevice));
        free(q);
    } else {
        d = cc_device_alloc(4 * n, "probe");
        cudaCheck(cudaMemcpy(d, h, 4 * n, cudaMemcpyHostToDevice));
    }
    free(h);
    return d;
}

typedef struct {
    gpu_matmul_ctx *gm;
    int R, V, Vn, D, ldv;
    void *f16, *w16, *logits16;
    float *dx, *dw, *loss;
    int *y, *rank;
} probe;

static void op(const probe *p, int k)
{
    switch (k) {
    case 0: gpu_matmul_f16out(p->gm, p->logits16, p->ldv, p->f16, p->D, 0, p->w16, p->D, 1, p->R, p->Vn, p->D, 1.f, 0.f, 0); break;
    case 1:
    case 4:
    case 5:
        launch_crossentropy_warps(p->loss, p->rank, p->logits16, p->ldv, p->y, p->R, p->V, row_window_all(p->R), 1.f, 1,
                                  k == 1 ? 0 : k == 4 ? 8 : 32, 0);
        break;
    case 2: gpu_matmul(p->gm, p->dx, p->D, p->logits16, p->ldv, 0, p->w16, p->D, 0, p->R, p->D, p->Vn, 1.f, 0.f, NULL, 0); break;
    case 3: gpu_matmul(p->gm, p->dw, p->D, p->logits16, p->ldv, 1, p->f16, p->D, 0, p->Vn, p->D, p->R, 1.f, 1.f, NULL, 0); break;
    }
}

static double time_op(const probe *p, int k, int reps)
{
    cudaEvent_t a, b;
    cudaCheck(cudaEventCreate(&a));
    cudaCheck(cudaEventCreate(&b));
    double *t = cc_malloc(sizeof(double) * reps);
    for (int i = 0; i < 3 + reps; i++) {
        if (k == 1 || k >= 4) op(p, 0); /* the softmax overwrites its input: fresh logits each time, outside the timing */
        cudaCheck(cudaEventRecord(a, 0));
        op(p, k);
        cudaCheck(cudaEventRecord(b, 0));
        cudaCheck(cudaEventSynchronize(b));
        float ms = 0;
        cudaCheck(cudaEventElapsedTime(&ms, a, b));
        if (i >= 3) t[i - 3] = ms * 1e3;
    }
    const double med = cc_median(t, reps);
    free(t);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return med;
}

int main(int argc, char **argv)
{
    int D = 512, reps = 20, unpadded = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--d") && i + 1 < argc) D = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--unpadded")) unpadded = 1;
        else {
            printf("usage: classifier_probe [--d 512] [--reps 20] [--unpadded]\n"
                   "Times the classifier's four launches a chunk alone (one JSON line per V and rows); with\n"
                   "--unpadded also the GEMMs over V itself rather than its padded pitch, where they differ.\n");
            return strcmp(argv[i], "--help") ? 2 : 0;
        }
    }
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        fprintf(stderr, "classifier_probe: no CUDA device: skipped\n");
        return 77;
    }
    static const int Vs[] = { 50257, 32000, 8192 }, Rs[] = { 256, 512, 1024, 2048, 4096 };
    const int Rmax = 4096, Vmax = gpu_ce_ldv(50257);
    probe p = { .gm = gpu_matmul_create(), .D = D };
    p.f16 = rand_dev((size_t)Rmax * D, 2.f, 1);
    p.w16 = rand_dev((size_t)Vmax * D, 0.1f, 1);
    p.logits16 = cc_device_alloc((size_t)Rmax * Vmax * 2, "logits");
    p.dx = rand_dev((size_t)Rmax * D, 1.f, 0);
    p.dw = rand_dev((size_t)Vmax * D, 1.f, 0);
    p.loss = rand_dev(Rmax, 1.f, 0);
    p.y = cc_device_alloc(sizeof(int) * Rmax, "targets");
    p.rank = cc_device_alloc(sizeof(int) * Rmax, "ranks");
    int *y = cc_malloc(sizeof(int) * Rmax);
    for (int i = 0; i < Rmax; i++) y[i] = (i * 7919) % 8000;
    cudaCheck(cudaMemcpy(p.y, y, sizeof(int) * Rmax, cudaMemcpyHostToDevice));
    static const char *names[] = { "logits_us", "softmax_us", "dx_us", "dw_us", "softmax_8warps_us", "softmax_32warps_us" };
    for (size_t v = 0; v < sizeof(Vs) / sizeof(Vs[0]); v++)
        for (int padded = 0; padded < 2; padded++)
            for (size_t r = 0; r < sizeof(Rs) / sizeof(Rs[0]); r++) {
                p.V = Vs[v];
                p.ldv = gpu_ce_ldv(p.V);
                p.Vn = padded ? p.ldv : p.V;
                p.R = Rs[r];
                if ((padded && p.Vn == p.V) || (!padded && p.Vn != p.ldv && !unpadded)) continue;
                json_t *j = json_pack("{s:i,s:i,s:i,s:i,s:b}", "D", D, "V", p.V, "rows", p.R, "ldv", p.ldv, "gemm_dim_padded",
                                      padded);
                double sum = 0;
                for (int k = 0; k < 6; k++) {
                    const double us = time_op(&p, k, reps);
                    if (k < 4) sum += us;
                    json_object_set_new(j, names[k], json_real(us));
                }
                json_object_set_new(j, "chunk_us", json_real(sum));
                json_object_set_new(j, "us_per_row", json_real(sum / p.R));
                char *s = json_dumps(j, JSON_PRESERVE_ORDER | JSON_COMPACT | JSON_REAL_PRECISION(5));
                printf("%s\n", s);
                fflush(stdout);
                free(s);
                json_decref(j);
            }
    free(y);
    gpu_matmul_destroy(p.gm);
    return 0;
}
