/* GPU twins of the CPU reference's composite ops, built from the kernel
 * launchers and the GEMM wrapper. Named like their CPU twins (cpu_gru_forward
 * ↔ gpu_gru_forward) so the ladder checks each against its twin. FP16 buffers
 * are void *. */
#ifndef CATCHAT_GPU_OPS_H
#define CATCHAT_GPU_OPS_H

#include <cuda_runtime_api.h>
#include "catchat/matmul.h"
#include "catchat/gpu_caps.h"

/* Which recurrence implementation the two functions below use. AUTO (the
 * default) takes the fastest one that supports the shape: the cluster kernels
 * (W_hh in one thread-block cluster, D ≤ 512), then the persistent
 * cooperative kernels, then the per-step loop (one GEMM + one element-wise
 * kernel per step). The others force a path, for the ladder and the bench. */
typedef enum { GPU_GRU_AUTO, GPU_GRU_PERSISTENT, GPU_GRU_STEPWISE } gpu_gru_path;
typedef enum { GRU_IMPL_CLUSTER, GRU_IMPL_PERSISTENT, GRU_IMPL_STEPWISE } gpu_gru_impl;
/* [gpu] recurrence's value (auto, persistent, stepwise) as a path. */
gpu_gru_path gpu_gru_path_named(const char *name);
/* The implementation gpu_gru_forward/backward take on `path` for this shape. */
gpu_gru_impl gpu_gru_impl_for(const gpu_caps *caps, gpu_gru_path path, int B, int T, int D);
const char *gpu_gru_impl_name(gpu_gru_impl impl);
/* Why that implementation, in one line (for bench): the reason the faster
 * ones do not apply, and the persistent kernels' split. */
void gpu_gru_impl_why(const gpu_caps *caps, gpu_gru_path path, int B, int T, int D, char *buf, size_t len);

/* Whether a step over B_total sequences (all lanes together) should run the
 * forward's cluster kernels wide (16 sequences a cluster): when its clusters
 * of 8 would take two waves or more on this GPU. */
int gpu_gru_wide_for(const gpu_caps *caps, gpu_gru_path path, int B_total, int T, int D);

/* A GRU layer forward over T steps (h_{-1} = 0). gx[B,T,3D] includes b_ih;
 * writes h, gates, ghn (FP32) and hprev16[B,T,D] = FP16 h_{t-1} (zeros at
 * t = 0), the operand of the recurrent GEMM and of dW_hh. gh: B·3D scratch.
 * wide: the cluster kernels' 16 sequences a cluster (gpu_gru_wide_for). */
void gpu_gru_forward(gpu_matmul_ctx *gm, const gpu_caps *caps, gpu_gru_path path, float *h, float *gates, float *ghn, void *hprev16, const float *gx,
                     const void *whh16, const float *bhh, float *gh, int B, int T, int D, int wide,
                     cudaStream_t s);

/* BPTT over the layer: dh_in[B,T,D] from the residual stream; each step's
 * total gradient is clamped to ±clamp_limit (0 = off) before entering the cell.
 * Writes dgx16[B,T,3D] (FP16, the operand of the W_ih GEMMs); dgh16 is
 * scratch of the same size; dhrec B·D scratch; bias_part scratch of
 * gpu_gru_bias_part_floats(B, D) floats. Accumulates dwhh and dbhh. */
void gpu_gru_backward(gpu_matmul_ctx *gm, const gpu_caps *caps, gpu_gru_path path, void *dgx16, void *dgh16, float *dhrec, float *bias_part, float *dwhh,
                      float *dbhh, const float *dh_in, const float *h, const float *gates, const float *ghn,
                      const void *hprev16, const void *whh16, int B, int T, int D, float clamp_limit,
                      cudaStream_t s);

/* The two halves of gpu_gru_backward, for callers that overlap them with other
 * work: the recurrence (writes dgx16, dgh16; the cluster kernels also sum
 * the bias gradients per cluster into bias_part if not NULL, and it returns
 * how many such rows it wrote, else 0), then dW_hh, db_hh and (if dbih is
 * not NULL) db_ih, from those sums or from dgx16 and dgh16 (may run on
 * another stream once the recurrence is done; gm must then be a GEMM
 * context of that stream's own). */
size_t gpu_gru_bias_part_floats(int B, int D);
int gpu_gru_bptt(gpu_matmul_ctx *gm, const gpu_caps *caps, gpu_gru_path path, void *dgx16, void *dgh16, float *dhrec, float *bias_part, const float *dh_in,
                 const float *h, const float *gates, const float *ghn, const void *whh16, int B, int T, int D,
                 float clamp_limit, cudaStream_t s);
void gpu_gru_weight_grads(gpu_matmul_ctx *gm, float *dwhh, float *dbhh, float *dbih, const void *dgx16,
                          const void *dgh16, const void *hprev16, const float *bias_part, int nparts, int B, int T,
                          int D, cudaStream_t s);

/* Host side of the embedding backward: positions of each token id (counting
 * sort, positions increasing within an id). offsets[V+1], positions[M]. */
void cc_embedding_csr(const int *x, int M, int V, int *offsets, int *positions);

#endif
