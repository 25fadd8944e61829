/* The GPU executor's state: executor_gpu.c (memory, streams, the executor
 * interface) makes it; the step's operations (ops_*_gpu.c), its program
 * (program_gpu.c) and scheduler (scheduler_gpu.c) read it. Private to
 * src/gpu. */
#ifndef CATCHAT_GPU_IMPL_H
#define CATCHAT_GPU_IMPL_H

#include <stdint.h>
#include <string.h>
#include "catchat/dist.h"
#include "catchat/executor.h"
#include "catchat/matmul.h"
#include "catchat/gpu_crossentropy.h"
#include "catchat/gpu_gru.h"
#include "catchat/gpu_plan.h"
#include "gpu/gpu_check.h"

/* A step's batch splits into lanes: independent groups of sequences whose
 * passes run on their own streams. A recurrence kernel's time does not
 * depend on the batch (up to the clusters that fit), so lanes cost nothing
 * there, and one lane's GEMMs, norms and attention can fill the SMs that
 * another lane's recurrence leaves idle, or run in its wait for a cluster.
 * Only the parameter gradients are shared: each lane after the first
 * accumulates into its own buffer, added into the first in lane order
 * (deterministic). At most GPU_MAX_LANES (gpu_plan.h, where the plan
 * chooses them). */
/* The wavefront (program_gpu.c) gives each layer of a lane a pair of
 * streams: a feed stream (the layer's norm and input GEMM forward, its
 * input gradient and norm backward, chunk by chunk) and a recurrence stream
 * (pair 0's is the lane's recurrence stream); the lane's own stream runs the
 * context stream and the classifier beside them. A lane has at most
 * GPU_WAVE_STREAMS pairs (gpu_plan.h): beyond that many layers,
 * consecutive layers share a pair (plan.wave_group, gpu_plan_wave_stream),
 * its GEMM contexts and kernel scratch, which serve one launch at a time
 * on the pair's streams; the buffers that carry a layer's state from one
 * chunk to the next (its gradient slots, window buffers and hprev16
 * block) stay the layer's own. */

typedef struct {
    /* the lane's streams, cuBLASLt contexts (one a stream that runs GEMMs
     * at once with another: a context's workspace serves one stream at a
     * time) and each stream's kernel scratch (kernels.h: gpu_scratch, made
     * at creation for every call the stream makes: lane_scratch_create in
     * executor_gpu.c), as gpu_lane_resources_of lists them for the plan
     * (gpu_plan.h: stream 0 is the lane's own, lane 0's the main stream).
     * The recurrences run on streams of the highest priority: when SMs free
     * up, the block scheduler places their clusters before the waiting
     * blocks of other lanes' GEMMs and attention, which would otherwise hold
     * the critical path back by a whole kernel. */
    cudaStream_t stream[GPU_LANE_STREAMS];
    gpu_matmul_ctx *gemm[GPU_LANE_GEMMS];
    gpu_scratch *sc[GPU_LANE_STREAMS];
    gpu_ce_chunk ce; /* the classifier's chunk buffers (gpu_crossentropy.h) */
    float *g32; /* this lane's gradient accumulator (lane 0: the executor's) */
    int index;  /* 0 .. plan.lanes − 1 */
    int b0, B;  /* sequences [b0, b0 + B) of the batch */
} gpu_lane;

#define GPU_PROGRAMS 3

typedef struct {
    cudaStream_t stream, comm_stream; /* the gradient all-reduce runs beside the BPTT */
    cudaEvent_t ev_batch; /* the main stream's point where every stream of a step starts */
    /* this executor's recurrence state: a refused persistent launch sends its
     * later recurrences per step and turns its wavefront off (program_gpu.c), and
     * no other executor's */
    gpu_gru_state gru;
    /* what the executor was created from, and what its step reads: the
     * lanes, the kernels, the GPU's caps (and a lane's and a layer's share),
     * the wavefront's chunk, recompute's windows (gpu_plan.h) */
    gpu_step_plan plan;
    int wave_ran, wave_top_ran; /* this (or the last) step takes the wavefront's chunks, and chunks the context stream */
    /* Recompute ([gpu] recompute, gpu_step_plan; ops_layer_gpu.c): only h
     * (all layers) and the norms' statistics stay from the forward, and u
     * keeps one block (u^l, then in place u^{l+1}; in the backward u^l of a
     * window is rebuilt there before the layer's window runs). A layer runs
     * its recurrence in windows of rc_window steps whose normalised input,
     * gx (the gates over it in place) and ghn, and in the backward its FP16
     * h_{t-1}, gate gradients and input gradient, live in two window
     * buffers by turns (win_*[set][k & 1]), so one window's norm and input
     * GEMM (forward) or rebuild (backward) runs beside the other's
     * recurrence; under the wavefront each layer has its own set. The
     * forward's hprev16 (the recurrence's own FP16 operand) keeps one block
     * (a block a layer under the wavefront). All of them, and the context
     * stream's and classifier's tensors, which hold top_seqs sequences (the
     * parts run one after another), lie in one allocation, `work`, where
     * tensors whose values are never live together share bytes (the plan's
     * layout: work_layout_gpu.c); the scheduler orders the accesses of those
     * that share as of any that overlap. */
    void *work;
    /* by set (a layer's under the wavefront, whatever pair of streams it
     * runs on: the turns and the next window's dgh carry the layer's state
     * between its windows; else the one: plan.rc_sets) and turn; the input
     * gradient lives within one operation: one a set */
    float *win_gates[CC_MAX_LAYERS][2], *win_ghn[CC_MAX_LAYERS][2], *win_dtmp[CC_MAX_LAYERS];
    uint16_t *win_a16[CC_MAX_LAYERS][2], *win_hp16[CC_MAX_LAYERS][2];
    uint16_t *win_dgx16[CC_MAX_LAYERS][2], *win_dgh16[CC_MAX_LAYERS][2];
    /* the step's programs (program_gpu.c), by what they were built for:
     * a training step of plan.lanes lanes with and without a gradient, and an
     * evaluation */
    struct step_program *programs[GPU_PROGRAMS];
    struct step_program *ran; /* the last step's (issued or replayed) */
    long program_builds;      /* programs built so far: a graph replays only the one it captured */
    /* the step as a CUDA graph (graph_gpu.c) and what it was captured with */
    cudaGraphExec_t graph_exec;
    double graph_scale;
    long graph_scored;
    cc_plant_grad_h graph_plant; /* the NaN plant it was captured with (a step's own: finite.h) */
    int graph_checked;           /* captured with [gpu] check's scans */
    long graph_builds;           /* program_builds when it was captured */
    int graph_lanes, graph_warm, graph_failed, graph_captures, graph_replays;
    gpu_lane lane[GPU_MAX_LANES];
    /* parameters (FP32 master + FP16 working copy), gradients, moments */
    float *p32, *g32, *m, *v;
    float *g32_lanes; /* lanes 1.. : (plan.lanes − 1) gradient buffers */
    float *acc32;     /* gradient accumulation: the step's gradient before its last micro-batch (on first use) */
    long accum_total; /* gradient accumulation: the step's scored positions over all ranks */
    uint16_t *p16;
    /* activations */
    int *x, *y;
    float *u, *a_ir, *gx, *gates, *ghn, *h, *gh;
    uint16_t *a16, *hprev16;
    /* c: the context output, then the merge m = u^L + c over it (gpu_crossentropy.h) */
    float *s_ir, *c, *f_ir, *loss_row;
    void *ce_bufs; /* every lane's classifier chunk buffers (gpu_lane.ce) */
    /* attention: FP16 qkv16 and dO (do16) and per-query lse and delta for the
     * tensor-core kernels; FP32 qkv, probabilities p, ds and dqkv for the
     * FP32 ones. Only one set is allocated (attn_tc). */
    float *qkv, *p, *lse, *delta, *dsbuf, *dqkv;
    uint16_t *qkv16, *do16;
    uint16_t *s16, *o16;
    int *rank;
    /* backward; dgx16/dgh16 (and the bias sums, the carry dhrec and the
     * per-step loop's gh) alternate between two buffers by layer parity so a
     * BPTT never overwrites what the weight-gradient stream still reads;
     * under the wavefront, whose layers' recurrences overlap, one per layer,
     * also where layers share a pair of streams (wave_layers; ops_layer_gpu.c,
     * layer_slot) */
    float *du, *dtmp, *dhrec, *dc; /* dc: the context-stream guard's copy, over c (spent by then) */
    float *bias_part; /* the cluster BPTT's bias sums, by layer slot like dgx16 (gpu_gru_bptt) */
    uint16_t *dgx16, *dgh16, *d16, *dc16;
    int *tok_off, *tok_pos; /* embedding-backward CSR of each lane's tokens (device) */
    int *tok_off_host, *tok_pos_host;
    /* host staging */
    float *loss_host;
    int *rank_host;
    float *partials, *partials_host;
    int *nonfinite;
    unsigned long long *first_bad; /* NaN provenance scratch */
    float *plant_slot; /* --plant-nan-grad-h: [0] NaN, [1] the value it stood in for */
    /* the access check (cc_gpu_check_accesses): each issued view within its
     * operation's declarations, each byte an operation changed within its
     * declared writes */
    int check_accesses;
    struct access_snapshot *access_snap; /* its copies of the buffers (access_check_gpu.c) */
    /* profiling: each operation's device time, summed by phase */
    int profile;
    double phase_ms[PH_COUNT];
} gpu_impl;

#define IMPL(ex) ((gpu_impl *)(ex)->impl)
#define P32(ex, idx) (IMPL(ex)->p32 + (ex)->lay.t[(idx)].offset)
#define P16(ex, idx) (IMPL(ex)->p16 + (ex)->lay.t[(idx)].offset)

/* Whether this step all-reduces the tail of the gradients (ctx.*, final_norm,
 * lm_head) during the BPTT: under NCCL, one lane, no accumulation and
 * [gpu] allreduce_overlap = on. Asked by the program (its operation) and by
 * executor_gpu.c (the rest of the all-reduce). */
static inline int gpu_overlaps_allreduce(const cc_executor *ex, int lanes)
{
    return ex->dist && ex->dist->active && lanes == 1 && ex->accum.n == 0 &&
           strcmp(ex->cfg.allreduce_overlap, "on") == 0;
}

/* buffers_gpu.c: where buffer id's pointer lives in g, and where the
 * tensor id of `work` does (a window buffer's: in set `set`). */
void **gpu_buffer_slot(gpu_impl *g, gpu_buf_id id);
void **gpu_work_slot(gpu_impl *g, gpu_work_id id, int set);
/* The executor's state for cfg at B sequences of T under plan: the
 * executor interface's shape, the parameter layout, the plan (no buffer,
 * no stream). */
void gpu_state_init(cc_executor *ex, gpu_impl *g, const cc_config *cfg, int B, int T, const gpu_step_plan *plan);
/* Every buffer pointer of g (its plan set) for B sequences of T: each row
 * of the plan's table with bytes (and `work`) where place puts it, the
 * tensors of `work` at their offsets in parts, and what lies in another
 * buffer (dc over c, each lane's gradient buffer and classifier chunk).
 * The executor places by allocating; the liveness pass at addresses of
 * its own. */
typedef void *(*gpu_buffer_place)(void *ctx, const gpu_plan_buffer *b);
void gpu_bind_buffers(gpu_impl *g, const cc_dims *d, size_t nparams, int B, int T, const gpu_work_part *parts,
                      int nparts, gpu_buffer_place place, void *ctx);

/* program_gpu.c: lane i covers sequences [i·B/n, (i+1)·B/n). */
void gpu_set_lanes(cc_executor *ex, int n);
/* The step of n lanes (forward, loss and, with scored > 0, backward), or an
 * evaluation's forward (the whole batch in one lane, loss scale 1), issued
 * from its program (built on first use); the lanes' gradients end summed
 * into g32 on the main stream. The batch's CSR must be per lane
 * (upload_batch with the same lane count). */
void gpu_issue_step(cc_executor *ex, double loss_scale, long scored, int n);
/* The program of such a step built, its scans' slots and timing events made
 * (what a capture may not do), before issuing or capturing it. */
void gpu_step_prepare(cc_executor *ex, long scored, int n);
void gpu_issue_eval(cc_executor *ex);
/* A replayed graph ran the program of this kind of step. */
void gpu_step_replayed(cc_executor *ex, long scored);
/* After the last step (synchronising, where they are on): its NaN scans'
 * first finding reported ([gpu] check), its phase times added up and its
 * lane trace printed. */
void gpu_step_collect_scans(cc_executor *ex);
void gpu_step_collect_timing(cc_executor *ex);
/* The programs freed (their events and scan slots), e.g. when profiling is turned on. */
void gpu_programs_free(gpu_impl *g);
/* graph_gpu.c: gpu_issue_step, as a replayed CUDA graph where it may; and
 * the captured graph dropped (the next step runs eagerly, then captures). */
void gpu_passes(cc_executor *ex, double loss_scale, long scored, int lanes);
void gpu_graph_reset(gpu_impl *g);

/* instrument_gpu.c: NaN provenance scan of a tensor after the step (main stream, synchronising). */
void gpu_check_dev(cc_executor *ex, const char *stage, const char *tensor, int layer, const void *ptr, size_t n,
                   int is_half, int width);

#endif
