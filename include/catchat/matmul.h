/* The one GEMM wrapper: cuBLASLt, FP16 A and B, FP32 compute
 * (CUBLAS_COMPUTE_32F), FP32 output (gpu_matmul_f16out: FP16), row-major semantics:
 *   C[M,N] = alpha · op(A)[M,K] · op(B)[K,N] + beta · C  (+ bias[N] if non-NULL)
 * op(A) = A (stored [M,K], row stride lda) or Aᵀ (stored [K,M]); same for B.
 * Leading dimensions let a GEMM read every T-th row (one timestep of a
 * [B,T,·] tensor). Descriptors and the heuristic's algorithm are cached per
 * shape, strides, transposes and pointer alignment. */
#ifndef CATCHAT_MATMUL_H
#define CATCHAT_MATMUL_H

#include <stddef.h>
#include <cuda_runtime_api.h>

typedef struct gpu_matmul_ctx gpu_matmul_ctx;

gpu_matmul_ctx *gpu_matmul_create(void);
/* One with a smaller workspace (fewer algorithms to choose from: for the
 * small products of a time window). */
gpu_matmul_ctx *gpu_matmul_create_sized(size_t workspace_bytes);
#define GPU_MATMUL_WINDOW_WORKSPACE (4u << 20)
/* The device memory a context holds (its cuBLASLt workspace). */
size_t gpu_matmul_workspace_bytes(void);
/* The cuBLASLt library loaded (major*10000 + minor*100 + patch). */
size_t gpu_matmul_library_version(void);
void gpu_matmul_destroy(gpu_matmul_ctx *g);

void gpu_matmul(gpu_matmul_ctx *g, float *C, int ldc, const void *A, int lda, int transA, const void *B,
             int ldb, int transB, int M, int N, int K, float alpha, float beta, const float *bias,
             cudaStream_t stream);
/* The same with an FP16 C (the FP32 result rounded to nearest) and no
 * bias: for a product whose only reader takes FP16 operands. */
void gpu_matmul_f16out(gpu_matmul_ctx *g, void *C16, int ldc, const void *A, int lda, int transA, const void *B,
                    int ldb, int transB, int M, int N, int K, float alpha, float beta, cudaStream_t stream);

/* The three GEMMs of a linear layer y = x·Wᵀ (+ b), W stored [N,K] as
 * PyTorch's nn.Linear, over M rows; x, dy and W are FP16, results FP32:
 *   fwd: y[M,N] = x[M,K]·Wᵀ (+ bias[N])           (fwd_f16: y in FP16, no bias)
 *   dx:  dx[M,K] = dy[M,N]·W  (+ dx when accumulate) (dx_f16: dx in FP16)
 *   dw:  dW[N,K] += dy[M,N]ᵀ·x[M,K]                 (parameter gradients accumulate) */
void gpu_matmul_fwd(gpu_matmul_ctx *g, float *y, const void *x16, const void *w16, const float *bias, int M, int N,
                    int K, cudaStream_t s);
void gpu_matmul_fwd_f16(gpu_matmul_ctx *g, void *y16, const void *x16, const void *w16, int M, int N, int K,
                        cudaStream_t s);
void gpu_matmul_dx(gpu_matmul_ctx *g, float *dx, const void *dy16, const void *w16, int M, int N, int K,
                   int accumulate, cudaStream_t s);
void gpu_matmul_dx_f16(gpu_matmul_ctx *g, void *dx16, const void *dy16, const void *w16, int M, int N, int K,
                       cudaStream_t s);
void gpu_matmul_dw(gpu_matmul_ctx *g, float *dw, const void *dy16, const void *x16, int M, int N, int K,
                   cudaStream_t s);
/* fwd and dx (not accumulating) over a time window of a [B,T,·] tensor:
 * rows t0 .. t0+len-1 of nseq sequences, the pointers at the first
 * sequence's row t0 (sequence i's rows start T rows after sequence i-1's). */
void gpu_matmul_fwd_window(gpu_matmul_ctx *g, float *y, const void *x16, const void *w16, const float *bias, int nseq,
                           int len, int T, int N, int K, cudaStream_t s);
void gpu_matmul_dx_window(gpu_matmul_ctx *g, float *dx, const void *dy16, const void *w16, int nseq, int len, int T,
                          int N, int K, cudaStream_t s);
void gpu_matmul_fwd_f16_window(gpu_matmul_ctx *g, void *y16, const void *x16, const void *w16, int nseq, int len, int T,
                               int N, int K, cudaStream_t s);
void gpu_matmul_dx_f16_window(gpu_matmul_ctx *g, void *dx16, const void *dy16, const void *w16, int nseq, int len,
                              int T, int N, int K, cudaStream_t s);
/* A time window between tensors of different row strides (recompute's
 * window buffers, src/gpu/ops_layer_gpu.c): for each of nseq sequences, its
 * len rows C[i] (C's sequences c_steps rows apart, ldc apart within) =
 * alpha·A[i]·op(W) + beta·C[i] (+ bias), A's sequences a_steps rows apart
 * (lda); op(W) = Wᵀ (transW, W [N,K] as the forward's weights) or W ([K,N]).
 * One batched call, or one plain product where both are whole windows. */
void gpu_matmul_rows(gpu_matmul_ctx *g, float *C, int ldc, int c_steps, const void *A, int lda, int a_steps,
                     const void *W, int ldw, int transW, int nseq, int len, int N, int K, float beta,
                     const float *bias, cudaStream_t s);

#endif
