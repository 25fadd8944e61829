/* cuBLASLt wrapper (see matmul.h). Row-major C = op(A)·op(B) is computed as the
 * column-major product Cᵀ = op(B)ᵀ·op(A)ᵀ: cuBLASLt's "A" is our B and its "B"
 * is our A, with the same transpose flags. Shapes that do not divide the
 * tensor-core tile are cuBLASLt's to handle; we only tell it the real pointer
 * alignment so the heuristic never picks a kernel that assumes more. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/matmul.h"
#include "catchat/util.h"
#include "gpu/gpu_check.h"

#define WORKSPACE_BYTES (32u << 20)
#define CACHE_SIZE 128

typedef struct {
    int transA, transB, M, N, K, lda, ldb, ldc, has_bias, c16;
    int batch;                   /* products of one call: A and C step by stride_a and stride_c, B is shared */
    long long stride_a, stride_c; /* elements */
    unsigned align_a, align_b, align_c;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
} plan;

struct gpu_matmul_ctx {
    cublasLtHandle_t handle;
    void *workspace;
    size_t ws_bytes;
    int n;
    plan cache[CACHE_SIZE];
};

size_t gpu_matmul_workspace_bytes(void) { return WORKSPACE_BYTES; }

size_t gpu_matmul_library_version(void) { return cublasLtGetVersion(); }

gpu_matmul_ctx *gpu_matmul_create_sized(size_t workspace_bytes)
{
    gpu_matmul_ctx *g = cc_calloc(1, sizeof(*g));
    cublasCheck(cublasLtCreate(&g->handle));
    g->ws_bytes = workspace_bytes;
    g->workspace = cc_device_alloc(workspace_bytes, "cuBLASLt workspace");
    return g;
}

gpu_matmul_ctx *gpu_matmul_create(void) { return gpu_matmul_create_sized(WORKSPACE_BYTES); }

void gpu_matmul_destroy(gpu_matmul_ctx *g)
{
    if (!g) return;
    for (int i = 0; i < g->n; i++) {
        cublasLtMatmulDescDestroy(g->cache[i].desc);
        cublasLtMatrixLayoutDestroy(g->cache[i].la);
        cublasLtMatrixLayoutDestroy(g->cache[i].lb);
        cublasLtMatrixLayoutDestroy(g->cache[i].lc);
    }
    cudaFree(g->workspace);
    cublasLtDestroy(g->handle);
    free(g);
}

static unsigned alignment_of(const void *p)
{
    const uintptr_t a = (uintptr_t)p;
    unsigned al = 256;
    while (al > 1 && a % al) al >>= 1;
    return al;
}

static plan *find_or_build(gpu_matmul_ctx *g, const plan *key, int need_bias)
{
    for (int i = 0; i < g->n; i++) {
        plan *p = &g->cache[i];
        if (p->transA == key->transA && p->transB == key->transB && p->M == key->M && p->N == key->N &&
            p->K == key->K && p->lda == key->lda && p->ldb == key->ldb && p->ldc == key->ldc &&
            p->has_bias == key->has_bias && p->c16 == key->c16 && p->align_a == key->align_a && p->align_b == key->align_b &&
            p->align_c == key->align_c && p->batch == key->batch && p->stride_a == key->stride_a &&
            p->stride_c == key->stride_c)
            return p;
    }
    if (g->n == CACHE_SIZE) { /* full: recycle the oldest slot */
        plan *old = &g->cache[0];
        cublasLtMatmulDescDestroy(old->desc);
        cublasLtMatrixLayoutDestroy(old->la);
        cublasLtMatrixLayoutDestroy(old->lb);
        cublasLtMatrixLayoutDestroy(old->lc);
        memmove(&g->cache[0], &g->cache[1], sizeof(plan) * (CACHE_SIZE - 1));
        g->n--;
    }
    plan *p = &g->cache[g->n];
    *p = *key;
    /* column-major view: m = N, n = M; cuBLASLt-A = our B, cuBLASLt-B = our A */
    cublasOperation_t opa = key->transB ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t opb = key->transA ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasCheck(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)));
    cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)));
    if (need_bias) {
        cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
        cudaDataType_t bt = CUDA_R_32F;
        cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof(ep)));
        cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)));
    }
    const int m = key->N, n = key->M, k = key->K;
    cublasCheck(cublasLtMatrixLayoutCreate(&p->la, CUDA_R_16F, opa == CUBLAS_OP_N ? m : k, opa == CUBLAS_OP_N ? k : m, key->ldb));
    cublasCheck(cublasLtMatrixLayoutCreate(&p->lb, CUDA_R_16F, opb == CUBLAS_OP_N ? k : n, opb == CUBLAS_OP_N ? n : k, key->lda));
    cublasCheck(cublasLtMatrixLayoutCreate(&p->lc, key->c16 ? CUDA_R_16F : CUDA_R_32F, m, n, key->ldc));
    if (key->batch > 1) { /* our A is cuBLASLt's B; the weight (cuBLASLt's A) is the same in every product */
        const int32_t count = key->batch;
        const int64_t none = 0, sa = key->stride_a, sc = key->stride_c;
        const cublasLtMatrixLayout_t ls[3] = { p->la, p->lb, p->lc };
        const int64_t strides[3] = { none, sa, sc };
        for (int i = 0; i < 3; i++) {
            cublasCheck(cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
            cublasCheck(cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strides[i],
                                                         sizeof(strides[i])));
        }
    }

    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = g->ws_bytes;
    uint32_t aa = key->align_b, ab = key->align_a, ac = key->align_c; /* swapped with the operands */
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof(aa)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab, sizeof(ab)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ac, sizeof(ac)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ac, sizeof(ac)));
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    cublasCheck(cublasLtMatmulAlgoGetHeuristic(g->handle, p->desc, p->la, p->lb, p->lc, p->lc, pref, 1, &res, &found));
    cublasLtMatmulPreferenceDestroy(pref);
    if (found == 0) {
        fprintf(stderr, "catchat: cuBLASLt has no algorithm for GEMM M=%d N=%d K=%d transA=%d transB=%d\n",
                key->M, key->N, key->K, key->transA, key->transB);
        exit(1);
    }
    p->algo = res.algo;
    g->n++;
    return p;
}

static void gemm_batched(gpu_matmul_ctx *g, void *C, int c16, int ldc, const void *A, int lda, int transA,
                         const void *B, int ldb, int transB, int M, int N, int K, float alpha, float beta,
                         const float *bias, int batch, long long stride_a, long long stride_c, cudaStream_t stream)
{
    plan key;
    memset(&key, 0, sizeof(key));
    key.batch = batch > 1 ? batch : 1;
    key.stride_a = key.batch > 1 ? stride_a : 0;
    key.stride_c = key.batch > 1 ? stride_c : 0;
    key.transA = transA;
    key.transB = transB;
    key.M = M;
    key.N = N;
    key.K = K;
    key.lda = lda;
    key.ldb = ldb;
    key.ldc = ldc;
    key.has_bias = bias != NULL;
    key.c16 = c16;
    key.align_a = alignment_of(A);
    key.align_b = alignment_of(B);
    key.align_c = alignment_of(C);
    plan *p = find_or_build(g, &key, bias != NULL);
    if (bias)
        cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    cublasCheck(cublasLtMatmul(g->handle, p->desc, &alpha, B, p->la, A, p->lb, &beta, C, p->lc, C, p->lc,
                               &p->algo, g->workspace, g->ws_bytes, stream));
}

static void gemm_any(gpu_matmul_ctx *g, void *C, int c16, int ldc, const void *A, int lda, int transA, const void *B,
                     int ldb, int transB, int M, int N, int K, float alpha, float beta, const float *bias,
                     cudaStream_t stream)
{
    gemm_batched(g, C, c16, ldc, A, lda, transA, B, ldb, transB, M, N, K, alpha, beta, bias, 1, 0, 0, stream);
}

void gpu_matmul(gpu_matmul_ctx *g, float *C, int ldc, const void *A, int lda, int transA, const void *B,
             int ldb, int transB, int M, int N, int K, float alpha, float beta, const float *bias,
             cudaStream_t stream)
{
    gemm_any(g, C, 0, ldc, A, lda, transA, B, ldb, transB, M, N, K, alpha, beta, bias, stream);
}

void gpu_matmul_f16out(gpu_matmul_ctx *g, void *C16, int ldc, const void *A, int lda, int transA, const void *B,
                    int ldb, int transB, int M, int N, int K, float alpha, float beta, cudaStream_t stream)
{
    gemm_any(g, C16, 1, ldc, A, lda, transA, B, ldb, transB, M, N, K, alpha, beta, NULL, stream);
}

void gpu_matmul_fwd(gpu_matmul_ctx *g, float *y, const void *x16, const void *w16, const float *bias, int M, int N,
                    int K, cudaStream_t s)
{
    gpu_matmul(g, y, N, x16, K, 0, w16, K, 1, M, N, K, 1.f, 0.f, bias, s);
}

void gpu_matmul_fwd_f16(gpu_matmul_ctx *g, void *y16, const void *x16, const void *w16, int M, int N, int K,
                        cudaStream_t s)
{
    gpu_matmul_f16out(g, y16, N, x16, K, 0, w16, K, 1, M, N, K, 1.f, 0.f, s);
}

void gpu_matmul_dx(gpu_matmul_ctx *g, float *dx, const void *dy16, const void *w16, int M, int N, int K,
                   int accumulate, cudaStream_t s)
{
    gpu_matmul(g, dx, K, dy16, N, 0, w16, K, 0, M, K, N, 1.f, accumulate ? 1.f : 0.f, NULL, s);
}

void gpu_matmul_dx_f16(gpu_matmul_ctx *g, void *dx16, const void *dy16, const void *w16, int M, int N, int K,
                       cudaStream_t s)
{
    gpu_matmul_f16out(g, dx16, K, dy16, N, 0, w16, K, 0, M, K, N, 1.f, 0.f, s);
}

void gpu_matmul_dw(gpu_matmul_ctx *g, float *dw, const void *dy16, const void *x16, int M, int N, int K,
                   cudaStream_t s)
{
    gpu_matmul(g, dw, K, dy16, N, 1, x16, K, 0, N, K, M, 1.f, 1.f, NULL, s);
}

/* A window's rows are contiguous only within a sequence: one product per
 * sequence, all in one batched call, or one plain product over nseq·len
 * rows where the window is whole sequences. fwd: y = x·Wᵀ (+ bias); dx:
 * dx = dy·W; c16: the result in FP16. */
static void window_fwd(gpu_matmul_ctx *g, void *y, int c16, const void *x16, const void *w16, const float *bias,
                       int nseq, int len, int T, int N, int K, cudaStream_t s)
{
    const int batch = nseq == 1 || len == T ? 1 : nseq, rows = batch == 1 ? nseq * len : len;
    gemm_batched(g, y, c16, N, x16, K, 0, w16, K, 1, rows, N, K, 1.f, 0.f, bias, batch, (long long)T * K,
                 (long long)T * N, s);
}

static void window_dx(gpu_matmul_ctx *g, void *dx, int c16, const void *dy16, const void *w16, int nseq, int len, int T,
                      int N, int K, cudaStream_t s)
{
    const int batch = nseq == 1 || len == T ? 1 : nseq, rows = batch == 1 ? nseq * len : len;
    gemm_batched(g, dx, c16, K, dy16, N, 0, w16, K, 0, rows, K, N, 1.f, 0.f, NULL, batch, (long long)T * N,
                 (long long)T * K, s);
}

void gpu_matmul_fwd_window(gpu_matmul_ctx *g, float *y, const void *x16, const void *w16, const float *bias, int nseq,
                           int len, int T, int N, int K, cudaStream_t s)
{
    window_fwd(g, y, 0, x16, w16, bias, nseq, len, T, N, K, s);
}

void gpu_matmul_dx_window(gpu_matmul_ctx *g, float *dx, const void *dy16, const void *w16, int nseq, int len, int T,
                          int N, int K, cudaStream_t s)
{
    window_dx(g, dx, 0, dy16, w16, nseq, len, T, N, K, s);
}

void gpu_matmul_fwd_f16_window(gpu_matmul_ctx *g, void *y16, const void *x16, const void *w16, int nseq, int len, int T,
                               int N, int K, cudaStream_t s)
{
    window_fwd(g, y16, 1, x16, w16, NULL, nseq, len, T, N, K, s);
}

void gpu_matmul_dx_f16_window(gpu_matmul_ctx *g, void *dx16, const void *dy16, const void *w16, int nseq, int len,
                              int T, int N, int K, cudaStream_t s)
{
    window_dx(g, dx16, 1, dy16, w16, nseq, len, T, N, K, s);
}

void gpu_matmul_rows(gpu_matmul_ctx *g, float *C, int ldc, int c_steps, const void *A, int lda, int a_steps,
                     const void *W, int ldw, int transW, int nseq, int len, int N, int K, float beta,
                     const float *bias, cudaStream_t s)
{
    const int batch = nseq == 1 || (a_steps == len && c_steps == len) ? 1 : nseq, rows = batch == 1 ? nseq * len : len;
    gemm_batched(g, C, 0, ldc, A, lda, 0, W, ldw, transW, rows, N, K, 1.f, beta, bias, batch,
                 (long long)a_steps * lda, (long long)c_steps * ldc, s);
}
