/* The classifier and its loss on the GPU (src/gpu/crossentropy.c), the twin
 * of the CPU's final norm, lm_head product and cpu_crossentropy: the final
 * norm of the merge, the logits, the loss, its gradient and the lm_head and
 * final-norm gradients, over chunks of rows so that no [B·T, V] tensor
 * exists. A chunk's logits live in one FP16 [rows, ldv] buffer that the
 * softmax overwrites with dlogits; the norm's FP16 output and the FP32
 * gradient of that output have [rows, D] buffers of their own. FP16 buffers
 * are void *. */
#ifndef CATCHAT_GPU_CROSSENTROPY_H
#define CATCHAT_GPU_CROSSENTROPY_H

#include <stddef.h>
#include <cuda_runtime_api.h>
#include "catchat/gpu_caps.h"
#include "catchat/kernels.h"
#include "catchat/matmul.h"

/* The logits' row pitch: V rounded up to a multiple of this. cuBLASLt's
 * fast kernels want 16-byte aligned rows, and an unaligned V (50257) sends
 * every product that reads or writes the logits to a slow path; 64 FP16 is
 * a 128-byte row, the width of a cache line. */
#define GPU_LOGITS_ALIGN 64

/* A chunk's buffers, for `rows` rows (gpu_ce_chunk_place). */
typedef struct {
    int rows, ldv;
    void *logits16; /* [rows, ldv] FP16: the logits, then dlogits in place */
    void *f16;      /* [rows, D] FP16: the final norm's output, the lm_head GEMMs' operand */
    float *dx;      /* [rows, D] FP32: dlogits·W, the final norm backward's dy */
} gpu_ce_chunk;

int gpu_ce_ldv(int V);
/* Elements of the padding rows that lm_head.weight's FP16 copy and its
 * gradient carry past V rows: (ldv − V)·D. */
size_t gpu_ce_pad_floats(int V, int D);
/* Bytes of a chunk's buffers (each 256-byte aligned), and pointing a chunk's
 * buffers into `base` (NULL: only the sizes). */
size_t gpu_ce_chunk_bytes(int rows, int D, int V);
void gpu_ce_chunk_place(gpu_ce_chunk *ck, void *base, int rows, int D, int V);
/* Bytes of one row's share of a chunk (for choosing the rows). */
size_t gpu_ce_row_bytes(int D, int V);

/* [gpu] check's scan of a chunk's tensor (NULL: none). */
typedef void (*gpu_ce_check_fn)(void *ctx, const char *stage, const char *tensor, const void *ptr, size_t n, int half,
                                int width);

/* One call's rows and tensors. The x-side tensors are the rows of rw from
 * their first row (row_window_all(M), or a time window { len, T, 0 } of
 * M / len sequences); a chunk's buffers are the window side. */
typedef struct {
    int M, D, V;
    row_window rw;
    const float *u;   /* u^L */
    float *c;         /* the context output c; the merge m = u^L + c is written over it */
    float *f_ir;      /* the final norm's inverse RMS, per row (written) */
    const float *g_final;
    /* lm_head.weight FP16 and its gradient, each with ldv rows: rows V..ldv−1
     * of w16 zero (the products run over ldv classes), of dw scratch that
     * nothing reads (gpu_ce_pad_floats) */
    const void *w16;
    const int *y;
    float *loss;      /* per row: the loss (0 where y < 0) */
    int *rank;        /* per row: 1 top-1, 2 top-5 only, 0 neither, −1 not scored */
    /* with a gradient (du non-NULL): du = dL/dm is overwritten; dg_final and
     * dw (final_norm.weight's and lm_head.weight's) accumulate */
    float *du, *dg_final, *dw;
    float grad_scale; /* dlogits = grad_scale·(softmax − onehot) */
    const cc_norm_consts *nc;
    const gpu_caps *caps;
    /* Where set, the last chunk's lm_head weight GEMM is left out, for
     * gpu_crossentropy_last_dw to run (the step's program puts it beside
     * what follows, as an operation of its own); the chunk buffers then keep
     * that chunk's dlogits and f until it has. */
    int defer_last_dw;
    gpu_ce_check_fn check;
    void *check_ctx;
} gpu_ce_args;

/* The classifier over a->M rows in chunks of at most ck->rows, on stream s.
 * A chunk of a time window holds whole segments (ck->rows ≥ a segment) or
 * lies inside one. sc: stream s's kernel scratch (kernels.h), for the final
 * norm's backward over a chunk: rmsnorm_backward_scratch_bytes(ck->rows, D). */
void gpu_crossentropy(gpu_matmul_ctx *gm, const gpu_ce_chunk *ck, const gpu_ce_args *a, gpu_scratch *sc,
                      cudaStream_t s);
/* The last chunk's lm_head weight GEMM that a call with a->defer_last_dw
 * left (dw += dlogitsᵀ·f over its rows, from the chunk buffers), on stream
 * s with s's GEMM context gm: what that call would have added. */
void gpu_crossentropy_last_dw(gpu_matmul_ctx *gm, const gpu_ce_chunk *ck, const gpu_ce_args *a, cudaStream_t s);

#endif
