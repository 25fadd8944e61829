/* An executor runs the model's forward and backward passes and the
 * element-wise parts of the optimizer step on one device. The training loop,
 * evaluation and dump-state talk to this interface only, so the CPU reference
 * and the GPU path plug into the same loop; optim.c holds the decisions
 * (norm, clip, skip, loss scale) shared by both. */
#ifndef CATCHAT_EXECUTOR_H
#define CATCHAT_EXECUTOR_H

#include "catchat/config.h"
#include "catchat/cpu_ref.h"
#include "catchat/dist.h"
#include "catchat/finite.h"
#include "catchat/layout.h"

typedef struct cc_executor cc_executor;

typedef struct cc_executor_ops {
    /* Zero gradients, run forward and backward on x, y [B,T] with loss scale
     * S. The gradient buffer then holds ex->grad_unit × the gradient of the
     * mean loss (S on the CPU; S·N on the GPU, see kernels.h). Returns the
     * mean loss. With ex->accum set (gradient accumulation), the gradient is
     * instead added to the step's so far: after the last micro-batch the
     * buffer holds the gradient of the mean loss over every scored position
     * of all of them, and the clamps act as in one batch of them all. */
    double (*forward_backward)(cc_executor *ex, const int *x, const int *y, double loss_scale);
    /* Forward only; adds loss sum, scored, top-1, top-5 into *score. */
    void (*score)(cc_executor *ex, const int *x, const int *y, cc_score *score);
    /* g ← g·mul over the whole gradient buffer; returns Σ g² afterwards (double). */
    double (*grad_scale_sumsq)(cc_executor *ex, double mul);
    /* AdamW on the FP32 master weights; `k` is the applied-step count (bias correction). */
    void (*adamw)(cc_executor *ex, double lr, long k);
    /* Host copies of parameters, gradients (FP32, as they stand) and moments. */
    void (*get_params)(cc_executor *ex, float *params);
    void (*set_params)(cc_executor *ex, const float *params);
    void (*get_grads)(cc_executor *ex, float *grads);
    void (*set_grads)(cc_executor *ex, const float *grads, double grad_unit);
    void (*get_moments)(cc_executor *ex, float *m, float *v);
    void (*set_moments)(cc_executor *ex, const float *m, const float *v);
    /* After forward_backward: each position's loss [B·T] and the gradient
     * reaching the embedding output, du⁰ [B·T·D] (in grad_unit units). */
    void (*get_token_losses)(cc_executor *ex, float *loss);
    void (*get_input_grad)(cc_executor *ex, float *du0);
    void (*destroy)(cc_executor *ex);
} cc_executor_ops;

struct cc_executor {
    const cc_executor_ops *ops;
    const char *name; /* "cpu" or "gpu" */
    cc_layout lay;
    cc_config cfg;
    int B, T;
    double grad_unit; /* held gradients ÷ gradients of the mean loss */
    /* NaN provenance (--check-finite): when non-NULL, every stage's output is
     * scanned during forward_backward and score; the first hit lands here. */
    cc_finite_report *check;
    /* Testing aid (train --plant-nan-grad-h): both executors plant this NaN
     * in the BPTT's input during forward_backward (finite.h). */
    cc_plant_grad_h plant_grad_h;
    /* Data parallelism (GPU): when non-NULL with a communicator, gradients,
     * the scored-position count and the loss are summed over ranks. */
    cc_dist *dist;
    /* Gradient accumulation, set by the caller around each micro-batch of an
     * optimizer step: n = scored positions of all the step's micro-batches on
     * this rank (0: off), index and count = this micro-batch's place. Under
     * NCCL the gradients are all-reduced once, after the last one. */
    struct {
        long n;
        int index, count;
    } accum;
    void *impl;
};

/* The CPU reference executor (FP32, OpenMP). */
cc_executor *cc_cpu_executor_create(const cc_config *cfg, int B, int T);
/* Seconds a training step of cfg takes on the CPU reference, estimated from
 * the step's multiply-adds and a matmul timed here (about 50 ms). */
double cc_cpu_step_estimate_s(const cc_config *cfg);
/* Multiply-adds of a training step of cfg (forward and backward), roughly. */
double cc_step_macs(const cc_config *cfg);

/* Per-phase device time of the GPU executor's steps (CUDA events), for
 * `catchat bench`. Phases in the order of a step. */
enum { PH_INPUT, PH_REC_FWD, PH_CONTEXT_FWD, PH_CLASSIFIER, PH_CONTEXT_BWD, PH_BPTT, PH_WGRAD, PH_COUNT };
extern const char *const CC_PHASE_NAMES[PH_COUNT];
/* Turn per-phase timing on (accumulates until read; profiled steps run their
 * operations one after another on one stream) and read/clear it (ms). */
void cc_gpu_profile_enable(cc_executor *ex, int on);
void cc_gpu_profile_take(cc_executor *ex, double ms[PH_COUNT]);
/* The access check, a testing aid (the ladder's): every step's operations
 * run one at a time, each checked to keep to the memory it declares (the
 * buffers it hands its kernels, and every byte they change: src/gpu,
 * access_check_gpu.c); a breach stops with one line. Slow. */
void cc_gpu_check_accesses(cc_executor *ex, int on);
/* How many lanes (groups of sequences on their own streams) a training step
 * of this GPU executor runs (profiled and checked steps too). */
int cc_gpu_lanes(const cc_executor *ex);
/* The GPU executor's wavefront: its chunk in *chunk (0: the step runs layer
 * after layer), and the plan's words for it. */
const char *cc_gpu_wavefront(const cc_executor *ex, int *chunk);
/* Whether the last training step ran the wavefront (its chunk, else 0), and
 * whether it chunked the context stream too. */
int cc_gpu_wavefront_ran(const cc_executor *ex, int *top_chunked);
/* How many training steps replayed a CUDA graph captured by an earlier step. */
int cc_gpu_graph_replays(const cc_executor *ex);
/* Why the runtime refused one of this GPU executor's persistent recurrence
 * launches (its recurrences run per step since), or NULL: the executor's
 * own, never another's. */
const char *cc_gpu_refusal(const cc_executor *ex);
/* The plan the GPU executor was created from (gpu_plan.h: its recompute
 * choice, its device bytes by buffer group). */
struct gpu_step_plan;
const struct gpu_step_plan *cc_gpu_plan(const cc_executor *ex);

/* The GPU executor (FP16 GEMM operands, FP32 accumulation). NULL with a
 * one-line error when the device cannot run it. */
cc_executor *cc_gpu_executor_create(const cc_config *cfg, int B, int T);
/* The same from a plan made for cfg, B and T (gpu_plan.h), so that what a
 * command planned once (and its preflight checked) is what runs; NULL
 * plan: as cc_gpu_executor_create. */
cc_executor *cc_gpu_executor_create_planned(const cc_config *cfg, int B, int T, const struct gpu_step_plan *plan);

/* Pick by [run] device: "cpu", "gpu", or "auto" (the GPU when present). */
cc_executor *cc_executor_create(const cc_config *cfg, int B, int T);
/* Where cfg's step of B sequences of T runs, planned once for a command
 * that checks and then runs it (train, eval, bench): 1 on the GPU, with
 * *plan made there (free memory read once); 0 on the CPU (nothing made);
 * -1 with a one-line error (the driver fails, the GPU cannot take cfg). */
int cc_executor_plan(const cc_config *cfg, int B, int T, struct gpu_step_plan *plan);
/* cc_executor_create, on the GPU from plan where it is not NULL (made by
 * cc_executor_plan for the same cfg, B and T). */
cc_executor *cc_executor_create_planned(const cc_config *cfg, int B, int T, const struct gpu_step_plan *plan);

/* The one conversion of a user clamp into the limit a backward pass
 * compares with. [train] grad_h_clamp and ctx_grad_clamp are unscaled values
 * on the gradient of the mean loss; a pass works on gradients of the loss ×
 * loss_scale summed over `summed_positions` positions: the GPU executor sums
 * over the scored positions (pass their count), the CPU reference
 * differentiates the mean (pass 1). 0 stays 0 (off). */
static inline double cc_clamp_dispatch_limit(double clamp, double loss_scale, double summed_positions)
{
    return clamp * loss_scale * summed_positions;
}

#endif
