/* What the GPU executor will run for a config, decided before anything is
 * allocated: the kernels its step takes (recurrence implementation, lanes,
 * wide clusters, attention kernel) and the device memory it needs. The
 * executor is created from this plan, and the preflight (preflight.h)
 * checks exactly these kernels, so the two cannot disagree. Plain C. */
#ifndef CATCHAT_GPU_PLAN_H
#define CATCHAT_GPU_PLAN_H

#include <stddef.h>
#include "catchat/config.h"
#include "catchat/gpu_gru.h"
#include "catchat/layout.h"

/* The plan's device memory by what it holds: weights, gradients and AdamW
 * moments; the GRU layers' activations and their gradients (under
 * recompute, the one layer's set the context stream and classifier share);
 * the context stream's; the classifier's; cuBLASLt workspaces and kernel
 * scratch; the lanes' own gradient buffers. */
enum { GPU_MEM_WEIGHTS, GPU_MEM_LAYERS, GPU_MEM_ATTENTION, GPU_MEM_CLASSIFIER, GPU_MEM_WORKSPACE, GPU_MEM_LANES,
       GPU_MEM_GROUPS };
/* Their names in bench's table and JSON: "weights_optimizer", "layers", ... */
extern const char *const gpu_mem_group_names[GPU_MEM_GROUPS];

typedef struct gpu_step_plan {
    gpu_caps caps;     /* the device's, narrowed by [gpu] profile, smem_per_block, sm_count, clusters */
    gpu_caps rec_caps; /* the same with a lane's share of the SMs: what the recurrence kernels choose by */
    gpu_caps wave_caps; /* under the wavefront, a layer's share of rec_caps (the layers' grids run at once) */
    gpu_gru_path path; /* [gpu] recurrence */
    int lanes;         /* lanes of a training step */
    int lane_B;        /* sequences a lane's recurrence runs (batch_size / lanes) */
    gpu_gru_impl impl; /* the recurrence a training lane takes */
    gpu_gru_impl eval_impl; /* the recurrence of an evaluation's forward (the whole batch in one lane) */
    int wide;          /* the forward's cluster kernels 16 sequences a cluster */
    int wave_chunk;    /* timesteps a chunk of the layers' wavefront, 0: layer after layer ([gpu] wavefront) */
    char wave_why[128]; /* the chunk, or why there is no wavefront, in words */
    int attn_tc;       /* the context attention on tensor cores */
    int recompute;     /* the backward rebuilds each layer's activations from its stored h ([gpu] recompute) */
    int rc_window;     /* under recompute: steps a window of a layer's recurrence (divides T) */
    int top_seqs;      /* under recompute: sequences of the context stream's part (divides a lane's) */
    char recompute_why[192]; /* on or off, and why, in words */
    int ce_rows;       /* rows of a classifier chunk ([gpu] classifier_rows, or what GPU_CE_BUDGET(_TIGHT) holds) */
    int ce_ldv;        /* the logits' row pitch: V padded to GPU_LOGITS_ALIGN */
    size_t ce_budget;  /* what the chunks may take: GPU_CE_BUDGET, or _TIGHT where memory is short */
    size_t memory_budget;    /* what the plan may hold: [gpu] memory_limit, or the device's free memory (0: unknown) */
    size_t device_bytes;     /* estimate of the executor's device memory at this batch */
    size_t group_bytes[GPU_MEM_GROUPS]; /* device_bytes by buffer group (gpu_mem_group_names) */
    size_t bytes_per_seq;    /* the part of it that grows with each sequence of the batch */
    size_t accum_bytes;      /* what [train] grad_accum > 1 adds (the step's gradient so far) */
} gpu_step_plan;

/* Testing aid (tests/test_gpu_caps.c: the layout's lanes never share
 * bytes while they run at once): under [gpu] recompute, where each tensor
 * of the shared allocation lies (name, byte offset, bytes) for B sequences
 * of T under d, with windows of `window` steps, the context stream's part
 * of top_seqs sequences, with the tensor-core attention or not. Returns how
 * many (at most max); *total: the allocation's size. */
typedef struct {
    const char *name;
    size_t offset, bytes;
} gpu_work_part;
int gpu_work_parts(const cc_dims *d, int B, int T, int window, int top_seqs, int attn_tc, gpu_work_part *out, int max,
                   size_t *total);
/* Testing aid (the ladder): recompute's layers in n windows where n divides
 * T (0: the plan's choice). */
void gpu_recompute_force_windows(int n);

/* What the classifier's chunk buffers may take, over all lanes, where
 * [gpu] classifier_rows does not set their rows: 256 MiB, or 60 MiB (under
 * 2 KB a token of the default batch, 64 × 512) where the step would not fit
 * its memory budget otherwise under [gpu] recompute = auto (before recompute
 * is turned on). Each chunk's lm_head weight GEMM reads and writes the whole
 * [V, D] FP32 gradient, so fewer rows cost time at large V: at V = 50257 on
 * the H200 the default step ran 21.0 ms at 256 MiB (1280 rows a lane), 29.7
 * at 60 MiB (256) (docs/performance.md, "Real vocabularies"). */
#define GPU_CE_BUDGET ((size_t)256 << 20)
#define GPU_CE_BUDGET_TIGHT ((size_t)60 << 20)

/* What a plan leaves free of its budget before it counts as fitting (the
 * CUDA context, cuBLASLt's own allocations, other processes' growth). */
#define GPU_MEMORY_MARGIN ((size_t)256 << 20)

/* The plan for B sequences of T tokens under cfg on the current device.
 * -1 with a one-line error when the GPU or the config cannot run it (below
 * sm_80, d_model not a multiple of 8, [gpu] lanes not dividing B, an unknown
 * profile). */
int gpu_step_plan_for(gpu_step_plan *p, const cc_config *cfg, int B, int T);

/* The recurrence implementation and split a lane takes, in one line
 * ("persistent: forward 1 groups x 32 CTAs of 16 units ..."), for messages
 * and the preflight's cache key. */
void gpu_step_plan_describe(const gpu_step_plan *p, const cc_config *cfg, int T, char *buf, size_t len);

#endif
