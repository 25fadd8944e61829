/* Kernel workbench: the per-step recurrence GEMM alone, every algorithm
 * cuBLASLt offers for it.
 *   build/bench/step_gemm_probe [B D ...]   (pairs; default 64 1024 64 1536 64 2048 256 1024)
 * For each shape, the forward's gh[B,3D] = h_{t-1}·W_hhᵀ (K = D) and the
 * BPTT's dh[B,D] += dgh_t·W_hh (K = 3D), as the per-step loop calls them
 * (rows T·width apart): a chain of 256 products captured in one CUDA graph,
 * µs a product (median of 5 replays), for each of cuBLASLt's heuristic
 * answers and for the first four with K split 2..8 ways. The first row of a
 * shape is what catchat runs today (the heuristic's first answer).
 * Needs a GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_) { fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)
#define BK(x) do { cublasStatus_t s_ = (x); if (s_) { fprintf(stderr, "%s: status %d\n", #x, (int)s_); exit(1); } } while (0)

#define T_STEPS 256
#define WS_BYTES (32u << 20)
#define MAX_ALGOS 32

typedef struct {
    cublasLtMatmulAlgo_t algo;
    char what[96];
    float us;
} candidate;

static int cfg(const cublasLtMatmulAlgo_t *a, cublasLtMatmulAlgoConfigAttributes_t attr)
{
    int v = 0;
    size_t got = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(a, attr, &v, sizeof(v), &got) != CUBLAS_STATUS_SUCCESS) return -1;
    return v;
}

static void describe(const cublasLtMatmulAlgo_t *a, const char *origin, char *buf, size_t len)
{
    snprintf(buf, len, "%s id %d tile %d splitK %d reduction %d stages %d swizzle %d", origin,
             cfg(a, CUBLASLT_ALGO_CONFIG_ID), cfg(a, CUBLASLT_ALGO_CONFIG_TILE_ID),
             cfg(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM), cfg(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
             cfg(a, CUBLASLT_ALGO_CONFIG_STAGES_ID), cfg(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING));
}

static int cmp_us(const void *x, const void *y)
{
    const float a = ((const candidate *)x)->us, b = ((const candidate *)y)->us;
    return a < b ? -1 : a > b;
}

/* µs a product for one algorithm: 256 products on the stream's rows, one graph, median of 5 replays. */
static float time_algo(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t la,
                       cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t lc, const cublasLtMatmulAlgo_t *algo,
                       const void *w, const char *rows, size_t row_step, float *c, float beta, void *ws,
                       cudaStream_t s)
{
    const float alpha = 1.f;
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int t = 0; t < T_STEPS; t++)
        if (cublasLtMatmul(h, desc, &alpha, w, la, rows + t * row_step, lb, &beta, c, lc, c, lc, algo, ws, WS_BYTES,
                           s) != CUBLAS_STATUS_SUCCESS) {
            cudaStreamEndCapture(s, &g);
            if (g) cudaGraphDestroy(g);
            return -1.f;
        }
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaGraphLaunch(ge, s)); /* warm-up */
    float v[5];
    for (int r = 0; r < 5; r++) {
        CK(cudaEventRecord(e0, s));
        CK(cudaGraphLaunch(ge, s));
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&v[r], e0, e1));
    }
    for (int i = 0; i < 5; i++)
        for (int j = i + 1; j < 5; j++)
            if (v[j] < v[i]) { float x = v[i]; v[i] = v[j]; v[j] = x; }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    return v[2] * 1000.f / T_STEPS;
}

/* One product shape. fwd: C[B,3D] = A[B,D]·Wᵀ, W [3D,D]; else C[B,D] += A[B,3D]·W. */
static void probe(cublasLtHandle_t h, int B, int D, int fwd, void *ws, cudaStream_t s)
{
    const int K = fwd ? D : 3 * D, N = fwd ? 3 * D : D;
    const size_t row_bytes = (size_t)K * 2, lda = (size_t)T_STEPS * K; /* rows of B sequences, T steps apart */
    void *w, *a;
    float *c;
    CK(cudaMalloc(&w, (size_t)3 * D * D * 2));
    CK(cudaMalloc(&a, (size_t)B * lda * 2));
    CK(cudaMalloc((void **)&c, (size_t)B * N * 4));
    CK(cudaMemset(w, 0x11, (size_t)3 * D * D * 2));
    CK(cudaMemset(a, 0x22, (size_t)B * lda * 2));
    CK(cudaMemset(c, 0, (size_t)B * N * 4));
    /* column-major: C' [N x B] = op(W') [N x K] · A' [K x B] */
    cublasLtMatmulDesc_t desc;
    BK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t opa = fwd ? CUBLAS_OP_T : CUBLAS_OP_N, opb = CUBLAS_OP_N;
    BK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)));
    BK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)));
    cublasLtMatrixLayout_t la, lb, lc;
    BK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16F, fwd ? K : N, fwd ? N : K, fwd ? K : N));
    BK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16F, K, B, lda));
    BK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, N, B, N));
    cublasLtMatmulPreference_t pref;
    BK(cublasLtMatmulPreferenceCreate(&pref));
    size_t wsb = WS_BYTES;
    BK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof(wsb)));
    cublasLtMatmulHeuristicResult_t res[MAX_ALGOS];
    int found = 0;
    BK(cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, lc, lc, pref, MAX_ALGOS, res, &found));
    candidate cand[MAX_ALGOS * 6];
    int n = 0;
    const float beta = fwd ? 0.f : 1.f;
    for (int i = 0; i < found; i++) {
        cand[n].algo = res[i].algo;
        char origin[24];
        snprintf(origin, sizeof(origin), "heuristic %d", i);
        describe(&res[i].algo, origin, cand[n].what, sizeof(cand[n].what));
        cand[n].us = time_algo(h, desc, la, lb, lc, &res[i].algo, w, a, row_bytes, c, beta, ws, s);
        n++;
        if (i >= 4) continue;
        const int splits[] = { 2, 3, 4, 6, 8 };
        for (int k = 0; k < 5; k++) {
            cublasLtMatmulAlgo_t alg = res[i].algo;
            const int sk = splits[k];
            const uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
            if (cublasLtMatmulAlgoConfigSetAttribute(&alg, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &sk, sizeof(sk)) ||
                cublasLtMatmulAlgoConfigSetAttribute(&alg, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme,
                                                     sizeof(scheme)))
                continue;
            cublasLtMatmulHeuristicResult_t chk;
            if (cublasLtMatmulAlgoCheck(h, desc, la, lb, lc, lc, &alg, &chk) != CUBLAS_STATUS_SUCCESS ||
                chk.workspaceSize > WS_BYTES)
                continue;
            cand[n].algo = alg;
            snprintf(origin, sizeof(origin), "heuristic %d split", i);
            describe(&alg, origin, cand[n].what, sizeof(cand[n].what));
            cand[n].us = time_algo(h, desc, la, lb, lc, &alg, w, a, row_bytes, c, beta, ws, s);
            if (cand[n].us > 0) n++;
        }
    }
    const float first = n ? cand[0].us : -1.f;
    qsort(cand, n, sizeof(cand[0]), cmp_us);
    printf("%s B=%d D=%d (M=%d N=%d K=%d): heuristic's first %.2f us; %d candidates, fastest:\n",
           fwd ? "forward" : "BPTT", B, D, B, N, K, first, n);
    int shown = 0;
    for (int i = 0; i < n && shown < 6; i++)
        if (cand[i].us > 0) { printf("  %7.2f us  %s\n", cand[i].us, cand[i].what); shown++; }
    for (int i = 6; i < n; i++) /* the heuristic's first answer with K split: a rule needs no timing */
        if (cand[i].us > 0 && strncmp(cand[i].what, "heuristic 0 split", 17) == 0)
            printf("  %7.2f us  %s\n", cand[i].us, cand[i].what);
    fflush(stdout);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(desc);
    cudaFree(w);
    cudaFree(a);
    cudaFree(c);
}

int main(int argc, char **argv)
{
    int shapes[16] = { 64, 1024, 64, 1536, 64, 2048, 256, 1024 }, ns = 4;
    if (argc > 1) {
        ns = 0;
        for (int i = 1; i + 1 < argc && ns < 8; i += 2, ns++) {
            shapes[2 * ns] = atoi(argv[i]);
            shapes[2 * ns + 1] = atoi(argv[i + 1]);
            if (shapes[2 * ns] < 1 || shapes[2 * ns + 1] < 8 || shapes[2 * ns + 1] % 8) {
                fprintf(stderr, "step_gemm_probe: B %s D %s: B >= 1 and D a multiple of 8\n", argv[i], argv[i + 1]);
                return 2;
            }
        }
    }
    int dev = 0;
    if (cudaGetDeviceCount(&dev) != cudaSuccess || dev == 0) {
        fprintf(stderr, "step_gemm_probe: no GPU\n");
        return 77;
    }
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("%s, %d SMs, cuBLASLt %zu\n", prop.name, prop.multiProcessorCount, cublasLtGetVersion());
    cublasLtHandle_t h;
    BK(cublasLtCreate(&h));
    void *ws;
    CK(cudaMalloc(&ws, WS_BYTES));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (int i = 0; i < ns; i++)
        for (int fwd = 1; fwd >= 0; fwd--) probe(h, shapes[2 * i], shapes[2 * i + 1], fwd, ws, s);
    cudaFree(ws);
    cublasLtDestroy(h);
    return 0;
}
