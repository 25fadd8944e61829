/* The GRU layer on the GPU (src/gpu/gru.c), the twin of the CPU's
 * src/cpu/gru.c: cpu_gru_forward ↔ gpu_gru_forward, cpu_gru_backward ↔
 * gpu_gru_backward, so the ladder checks each against its twin. It runs the
 * recurrence on whichever kernels fit the shape and takes the layer as the
 * launchers do (kernels.h): a gru_shape, its gru_layer tensors and, backward,
 * their gru_grads. FP16 buffers are void *. The caller owns the recurrence's
 * state (gpu_gru_state: a refused persistent launch, the testing aids) and
 * the stream's kernel scratch (gpu_scratch, sized by gpu_gru_scratch_need
 * and, for the bias sums, gpu_gru_weight_grads_scratch_bytes); both are
 * passed in, neither is kept per process. */
#ifndef CATCHAT_GPU_GRU_H
#define CATCHAT_GPU_GRU_H

#include <cuda_runtime_api.h>
#include "catchat/matmul.h"
#include "catchat/gpu_caps.h"
#include "catchat/kernels.h"

/* Which recurrence implementation the functions below use. AUTO (the
 * default) takes the fastest one that supports the shape: the cluster kernels
 * (W_hh in one thread-block cluster, D ≤ 512), then the persistent
 * cooperative kernels, then the per-step loop (one GEMM + one element-wise
 * kernel per step). The others force a path, for the ladder and the bench. */
typedef enum { GPU_GRU_AUTO, GPU_GRU_PERSISTENT, GPU_GRU_PER_STEP } gpu_gru_path;
typedef enum { GRU_IMPL_CLUSTER, GRU_IMPL_PERSISTENT, GRU_IMPL_PER_STEP } gpu_gru_impl;
/* [gpu] recurrence's value (auto, persistent, per-step) as a path. */
gpu_gru_path gpu_gru_path_named(const char *name);
/* The implementation gpu_gru_forward/backward take on `path` for this shape
 * under st (its refusal, its testing aids; NULL: a fresh state). */
gpu_gru_impl gpu_gru_impl_with(const gpu_caps *caps, const gpu_gru_state *st, gpu_gru_path path, int B, int T, int D);
/* The same for a fresh state: what a plan (gpu_plan.h) takes. */
gpu_gru_impl gpu_gru_impl_for(const gpu_caps *caps, gpu_gru_path path, int B, int T, int D);
/* Its name: "cluster", "persistent" or "per-step" (the [gpu] recurrence value that forces it). */
const char *gpu_gru_impl_name(gpu_gru_impl impl);
/* Why that implementation (gpu_gru_impl_for's), in one line (for bench): the
 * reason the faster ones do not apply, and the persistent kernels' split. */
void gpu_gru_impl_why(const gpu_caps *caps, gpu_gru_path path, int B, int T, int D, char *buf, size_t len);

/* Whether a step over B_total sequences (all lanes together) should run the
 * forward's cluster kernels wide (16 sequences a cluster): when its clusters
 * of 8 would take two waves or more on this GPU. */
int gpu_gru_wide_for(const gpu_caps *caps, gpu_gru_path path, int B_total, int T, int D);

/* A GRU layer forward over T steps (h_{-1} = 0): reads L's gx (with b_ih),
 * whh16, bhh; writes h, gates, ghn (FP32) and hprev16 = FP16 h_{t-1} (zeros
 * at t = 0), the operand of the recurrent GEMM and of dW_hh; L->gh is the
 * per-step loop's scratch. wide: the cluster kernels' 16 sequences a cluster
 * (gpu_gru_wide_for). */
void gpu_gru_forward(gpu_matmul_ctx *gm, const gpu_caps *caps, gpu_gru_state *st, gpu_gru_path path,
                     const gru_layer *L, gru_shape sh, int wide, gpu_scratch *sc, cudaStream_t s);

/* BPTT over the layer from G->dh_in and L's h, gates, ghn, whh16, hprev16;
 * each step's total gradient is clamped to ±clamp_limit (0 = off) before
 * entering the cell. Writes G->dgx16 (FP16, the operand of the W_ih GEMMs);
 * dgh16 is scratch of the same size; dhrec and bias_part (bias_part_floats)
 * scratch. Accumulates G->dwhh, dbhh and, where not NULL, dbih. */
void gpu_gru_backward(gpu_matmul_ctx *gm, const gpu_caps *caps, gpu_gru_state *st, gpu_gru_path path,
                      const gru_layer *L, const gru_grads *G, gru_shape sh, float clamp_limit, gpu_scratch *sc,
                      cudaStream_t s);

/* The two halves of gpu_gru_backward, for callers that overlap them with other
 * work: the recurrence (writes dgx16, dgh16; the cluster kernels also sum
 * the bias gradients per cluster into G->bias_part if not NULL, and it
 * returns how many such rows it wrote, else 0), then dW_hh, db_hh and (if
 * G->dbih is not NULL) db_ih, from those nparts sums or from dgx16 and dgh16
 * (may run on another stream once the recurrence is done; gm must then be a
 * GEMM context of that stream's own). bias_part holds
 * gpu_gru_bias_part_floats(B, D) floats. */
size_t gpu_gru_bias_part_floats(int B, int D);
int gpu_gru_bptt(gpu_matmul_ctx *gm, const gpu_caps *caps, gpu_gru_state *st, gpu_gru_path path, const gru_layer *L,
                 const gru_grads *G, gru_shape sh, float clamp_limit, gpu_scratch *sc, cudaStream_t s);
/* The bias-sum rows gpu_gru_bptt writes on caps for B sequences of T at
 * width D, handed sums (a bias_part) or not: known before the launch, so the
 * weight gradients' caller needs nothing back from the BPTT's. */
int gpu_gru_bptt_parts(const gpu_caps *caps, gpu_gru_path path, int B, int T, int D, int sums);
/* With window buffers (gru_shape.wT) the weight gradients are one call a
 * window, over its B·wT rows, L->hprev16 then being the window's own copy;
 * nparts < 0 leaves the biases out (the cluster BPTT sums them over every
 * window: one call, with nparts, adds them). */
void gpu_gru_weight_grads(gpu_matmul_ctx *gm, const gru_layer *L, const gru_grads *G, int nparts, gru_shape sh,
                          gpu_scratch *sc, cudaStream_t s);

/* Kernel scratch: what the recurrence of this shape (gpu_gru_forward and
 * gpu_gru_bptt, any window of it) takes under st on caps, added into need
 * (the persistent kernels' where they run it; the others take none), and
 * what gpu_gru_weight_grads takes over M = B·(window steps) rows (the bias
 * sums where no cluster sums stand in: SCRATCH_REDUCE). */
void gpu_gru_scratch_need(size_t need[SCRATCH_KINDS], const gpu_caps *caps, const gpu_gru_state *st,
                          gpu_gru_path path, int B, int T, int D);
size_t gpu_gru_weight_grads_scratch_bytes(int M, int D);

#endif
