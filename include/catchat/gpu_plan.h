/* What the GPU executor will run for a config, decided before anything is
 * allocated: the kernels its step takes (recurrence implementation, lanes,
 * wide clusters, attention kernel) and the device memory it needs, buffer by
 * buffer. The executor is created from this plan, and the preflight
 * (preflight.h) checks exactly these kernels, so the two cannot disagree.
 * The plan is a function of what the GPU can do, the config and the free
 * bytes (gpu_plan_make, src/gpu/plan_gpu.c), so it is tested on the CPU
 * (tests/test_plan_gpu.c); gpu_step_plan_for reads those from the device.
 * Plain C. */
#ifndef CATCHAT_GPU_PLAN_H
#define CATCHAT_GPU_PLAN_H

#include <stddef.h>
#include "catchat/config.h"
#include "catchat/gpu_gru.h"
#include "catchat/layout.h"

/* A step's batch splits into at most this many lanes (gpu_impl.h: independent
 * groups of sequences on their own streams). */
#define GPU_MAX_LANES 8
/* The wavefront gives each lane at most this many pairs of streams (a feed
 * and a recurrence stream, each with its GEMM context and kernel scratch:
 * gpu_impl.h, program_gpu.c). Up to this many layers each take a pair of
 * their own; more share them, consecutive layers a pair
 * (gpu_step_plan.wave_group), while every buffer that carries a layer's
 * state from one chunk to the next stays the layer's own. */
#define GPU_WAVE_STREAMS 8

/* The plan's device memory by what it holds: weights, gradients and AdamW
 * moments; the GRU layers' activations and their gradients (under
 * recompute, the one layer's set the context stream and classifier share);
 * the context stream's; the classifier's; cuBLASLt workspaces and kernel
 * scratch; the lanes' own gradient buffers. */
enum { GPU_MEM_WEIGHTS, GPU_MEM_LAYERS, GPU_MEM_ATTENTION, GPU_MEM_CLASSIFIER, GPU_MEM_WORKSPACE, GPU_MEM_LANES,
       GPU_MEM_GROUPS };
/* Their names in bench's table and JSON: "weights_optimizer", "layers", ... */
extern const char *const gpu_mem_group_names[GPU_MEM_GROUPS];

/* The tensors that lie in `work` under recompute (gpu_impl.h). */
typedef enum {
    GPU_WORK_WIN_A16_0, GPU_WORK_WIN_GATES_0, GPU_WORK_WIN_GHN_0, GPU_WORK_WIN_A16_1, GPU_WORK_WIN_GATES_1,
    GPU_WORK_WIN_GHN_1, GPU_WORK_HPREV16, GPU_WORK_WIN_HP16_0, GPU_WORK_WIN_DGX16_0, GPU_WORK_WIN_DGH16_0,
    GPU_WORK_WIN_DTMP_0, GPU_WORK_WIN_HP16_1, GPU_WORK_WIN_DGX16_1, GPU_WORK_WIN_DGH16_1,
    GPU_WORK_S16, GPU_WORK_QKV16, GPU_WORK_O16, GPU_WORK_DC16, GPU_WORK_DTMP, GPU_WORK_C, GPU_WORK_DO16,
    GPU_WORK_D16,
    GPU_WORK_COUNT
} gpu_work_id;

typedef struct gpu_step_plan {
    gpu_caps caps;     /* the device's, narrowed by [gpu] profile, smem_per_block, sm_count, clusters */
    gpu_caps rec_caps; /* the same with a lane's share of the SMs: what the recurrence kernels choose by */
    gpu_caps wave_caps; /* under the wavefront, a stream pair's share of rec_caps (the pairs' grids run at once) */
    gpu_gru_path path; /* [gpu] recurrence */
    int lanes;         /* lanes of a training step */
    int lane_B;        /* sequences a lane's recurrence runs (batch_size / lanes) */
    gpu_gru_impl impl; /* the recurrence a training lane takes */
    gpu_gru_impl eval_impl; /* the recurrence of an evaluation's forward (the whole batch in one lane) */
    int wide;          /* the forward's cluster kernels 16 sequences a cluster */
    int wave_chunk;    /* timesteps a chunk of the layers' wavefront, 0: layer after layer ([gpu] wavefront) */
    char wave_why[128]; /* the chunk, or why there is no wavefront, in words */
    /* under the wavefront: consecutive layers that share a lane's pair of
     * streams (1 up to GPU_WAVE_STREAMS layers; gpu_plan_wave_stream), and
     * the pairs a lane has, ceil(L / wave_group); 1 and 0 without it */
    int wave_group, wave_streams;
    int wave_layers;   /* layers with their own BPTT gradient buffers: L under the wavefront (L > 2), else 2 */
    int attn_tc;       /* the context attention kernel: ATTN_FP32, ATTN_TC_BANDED or ATTN_TC_TILED (kernels.h) */
    int recompute;     /* the backward rebuilds each layer's activations from its stored h ([gpu] recompute) */
    int rc_window;     /* under recompute: steps a window of a layer's recurrence (divides T) */
    int top_seqs;      /* under recompute: sequences of the context stream's part (divides a lane's) */
    /* under recompute: sets of window buffers (L under the wavefront, whose
     * layers run at once, each in its own; else 1), and where each tensor
     * of `work` lies, by id and set (gpu_plan_work), and its bytes, at the
     * plan's batch: laid out by their liveness (src/gpu/work_layout_gpu.c) */
    int rc_sets;
    size_t work_at[GPU_WORK_COUNT][CC_MAX_LAYERS];
    size_t work_bytes;
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

/* The executor's device buffers, in the order it allocates them. Each is
 * one row of gpu_plan_buffers; the executor keeps where each one's pointer
 * lives. Under recompute some are 0 bytes here and lie in `work` instead
 * (gpu_plan_work). */
typedef enum {
    GPU_BUF_P32, GPU_BUF_G32, GPU_BUF_G32_LANES, GPU_BUF_M, GPU_BUF_V, GPU_BUF_P16, GPU_BUF_X, GPU_BUF_Y,
    GPU_BUF_WORK, GPU_BUF_U, GPU_BUF_A_IR, GPU_BUF_GX, GPU_BUF_GATES, GPU_BUF_GHN, GPU_BUF_H, GPU_BUF_GH,
    GPU_BUF_A16, GPU_BUF_HPREV16, GPU_BUF_S_IR, GPU_BUF_QKV16, GPU_BUF_DO16, GPU_BUF_LSE, GPU_BUF_DELTA,
    GPU_BUF_QKV, GPU_BUF_DQKV, GPU_BUF_P, GPU_BUF_DSBUF, GPU_BUF_C, GPU_BUF_F_IR, GPU_BUF_CE_BUFS,
    GPU_BUF_LOSS_ROW, GPU_BUF_RANK, GPU_BUF_S16, GPU_BUF_O16, GPU_BUF_DU, GPU_BUF_DTMP, GPU_BUF_DHREC,
    GPU_BUF_DGX16, GPU_BUF_DGH16, GPU_BUF_BIAS_PART, GPU_BUF_D16, GPU_BUF_DC16, GPU_BUF_PARTIALS,
    GPU_BUF_NONFINITE, GPU_BUF_FIRST_BAD, GPU_BUF_TOK_OFF, GPU_BUF_TOK_POS,
    GPU_BUF_COUNT
} gpu_buf_id;

/* One device buffer: its size for this plan and shape (0: not needed here,
 * or a part of `work`), what it holds (named in an out-of-memory message),
 * whether it is zeroed after allocation, and its group (GPU_MEM_*). */
typedef struct {
    gpu_buf_id id;
    size_t bytes;
    const char *what;
    int zeroed;
    int group;
} gpu_plan_buffer;

/* Every device buffer of the executor for B sequences of T under d with n
 * parameters, row i being buffer i (out holds GPU_BUF_COUNT). Under
 * recompute `work` is the plan's layout at the plan's own B, and in
 * proportion at another (what bytes_per_seq estimates from). Returns
 * GPU_BUF_COUNT. */
int gpu_plan_buffers(const gpu_step_plan *p, const cc_dims *d, size_t n, int B, int T, gpu_plan_buffer *out);
/* Layers with their own BPTT gradient buffers: L under the wavefront
 * (L > 2), else 2 (gpu_step_plan.wave_layers). */
int gpu_plan_wave_layers(const gpu_step_plan *p, const cc_dims *d);
/* Under the wavefront, the lane's pair of streams (0 .. wave_streams − 1)
 * that layer l runs on: l / wave_group. */
int gpu_plan_wave_stream(const gpu_step_plan *p, int l);

/* What each lane of the plan's executor holds to run its step's operations
 * on (src/gpu/units_gpu.c): streams (each with its kernel scratch) and
 * cuBLASLt contexts, by index. The executor makes exactly these, the plan
 * counts their workspaces, and the step's program binds each operation to
 * them by its unit's role (step_gpu.h): one description read three ways.
 * Streams: 0 the lane's own (lane 0's is the main stream), 1 the side
 * stream (weight gradients), 2 the recurrence stream (the wavefront's first
 * pair's), then under the wavefront each pair's feed stream and the other
 * pairs' recurrence streams. Contexts: the lane's, the side stream's, the
 * recurrence stream's where recompute or the wavefront gives it one of its
 * own, then the wavefront's feed and recurrence contexts by pair. */
#define GPU_LANE_STREAMS (2 + 2 * GPU_WAVE_STREAMS)
#define GPU_LANE_GEMMS (2 + 2 * GPU_WAVE_STREAMS)
enum { GPU_PRIO_LANE, GPU_PRIO_SIDE, GPU_PRIO_REC };
typedef struct {
    int streams, gemms;
    unsigned char priority[GPU_LANE_STREAMS]; /* GPU_PRIO_* */
    size_t workspace[GPU_LANE_GEMMS];         /* each context's cuBLASLt workspace */
} gpu_lane_resources;
void gpu_lane_resources_of(const gpu_step_plan *p, gpu_lane_resources *out);



/* A tensor of `work` under recompute (gpu_impl.h): its name, place and
 * bytes, and the set of window buffers it belongs to (a layer's under the
 * wavefront; 0 for the others). */
typedef struct {
    const char *name;
    size_t offset, bytes;
    gpu_work_id id;
    int set;
} gpu_work_part;
/* At most this many: the window buffers of every set, hprev16 and the context stream's. */
#define GPU_WORK_MAX (GPU_WORK_COUNT * CC_MAX_LAYERS)
/* The tensors of the plan's `work` (none unless it recomputes) at the
 * plan's batch, in out (room for GPU_WORK_MAX); *total: the allocation's
 * bytes (GPU_BUF_WORK). Returns how many. */
int gpu_plan_work(const gpu_step_plan *p, const cc_dims *d, int T, gpu_work_part *out, size_t *total);
/* Testing aid (tests/test_plan_gpu.c): walks the step's programs under
 * plan p (made from cfg) in program order, following which tensor's value
 * each byte of `work` holds, and returns 1 when no operation reads bytes of
 * a tensor that another tensor wrote since (0, said in why). */
int gpu_plan_work_check(const gpu_step_plan *p, const cc_config *cfg, char *why, size_t len);

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

/* What a plan takes beyond the device and the config. */
typedef struct gpu_plan_opts {
    /* Testing aid (the ladder's recompute cases): recompute's layers in this
     * many windows where it divides T (0: the plan's choice). No config key
     * sets it: gpu_step_plan_for takes it from cc_config.rc_windows_forced. */
    int force_rc_windows;
} gpu_plan_opts;

/* The plan for B sequences of T tokens under cfg on a GPU that can do what
 * caps says (already narrowed by the config's [gpu] profile keys) with
 * free_bytes of device memory free (0: unknown; [gpu] memory_limit lowers
 * it). opts may be NULL. A pure function: no device is asked. -1 with a
 * one-line error when the GPU or the config cannot run it (below sm_80,
 * d_model not a multiple of 8, [gpu] lanes not dividing B). */
int gpu_plan_make(gpu_step_plan *p, const gpu_caps *caps, const cc_config *cfg, int B, int T, size_t free_bytes,
                  const gpu_plan_opts *opts);

/* The plan for B sequences of T tokens under cfg on the current device:
 * gpu_caps_for_config and the device's free memory, then gpu_plan_make.
 * -1 with a one-line error when the GPU or the config cannot run it (as
 * gpu_plan_make, or an unknown profile). */
int gpu_step_plan_for(gpu_step_plan *p, const cc_config *cfg, int B, int T);

/* Whether the step's context stream (attention and classifier) runs in
 * the wavefront's chunks of T: under the wavefront, without recompute (its
 * context stream runs in parts of sequences), on the tensor-core attention
 * (whose blocks of ATTENTION_TC_BLOCK queries the chunks must keep whole),
 * with more than one chunk. program_gpu.c builds its programs by it. */
int gpu_plan_top_chunked(const gpu_step_plan *p, int T);

/* What the preflight must run as the run runs it: the schedule's kind. A
 * miniature (gpu_plan_miniature) plans the same kind as its run, or its
 * check would pass another program than the run's. */
typedef struct gpu_schedule_kind {
    gpu_gru_impl impl; /* a training lane's recurrence */
    int lanes;         /* 1, or 2 for any number of lanes above one */
    int wave;          /* 1 under the wavefront */
    int wave_shared;   /* under the wavefront, layers share pairs of streams (wave_group > 1) */
    int recompute;
    int top_chunked;   /* gpu_plan_top_chunked */
    int attn_tc;
} gpu_schedule_kind;
gpu_schedule_kind gpu_plan_kind(const gpu_step_plan *p, int T);
/* The kind in words ("cluster recurrence, lanes, wavefront, recompute, ..."). */
void gpu_schedule_kind_describe(const gpu_schedule_kind *k, char *buf, size_t len);
/* 1 when a and b are the same kind. */
int gpu_schedule_kind_same(const gpu_schedule_kind *a, const gpu_schedule_kind *b);

/* The preflight's miniature of the run planned as p (for cfg, at seq_len
 * T): the run's model and [gpu] keys cut to a step the CPU twin does in
 * well under a second (two or three layers, at most 12 positions, 4 or 8
 * sequences a lane), with the run's schedule kind forced where a small
 * batch would choose another (its recurrence, lanes, recompute and the
 * wavefront's chunk, which under recompute divides the miniature's T, as
 * recompute's windows must; where the run's layers share pairs of streams,
 * three layers on two pairs: cc_config.wave_streams_forced). Writes the
 * miniature's config to *mini; its
 * plan on the same GPU (gpu_plan_make with mini->batch_size and
 * mini->seq_len) is gpu_schedule_kind_same as p's: tests/test_plan_gpu.c holds
 * the planner to that for every recorded GPU and config. */
void gpu_plan_miniature(cc_config *mini, const gpu_step_plan *p, const cc_config *cfg, int T);

/* The recurrence implementation and split a lane takes, in one line
 * ("persistent: forward 1 groups x 32 CTAs of 16 units ..."), for messages
 * and the preflight's cache key. */
void gpu_step_plan_describe(const gpu_step_plan *p, const cc_config *cfg, int T, char *buf, size_t len);

#endif
