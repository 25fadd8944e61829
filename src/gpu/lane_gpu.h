/* A lane's view of the step (gpu_impl.h: lanes) and the helpers that both
 * schedules of its passes use: passes_gpu.c (layer after layer) and
 * wavefront_gpu.c (the layers over time chunks). Private to src/gpu. */
#ifndef CATCHAT_LANE_GPU_H
#define CATCHAT_LANE_GPU_H

#include "catchat/kernels.h"
#include "gpu/gpu_impl.h"

/* Hand-offs between a lane's streams: s waits for what ev last recorded; ev records s's point. */
static inline void stream_wait(cudaStream_t s, cudaEvent_t ev) { cudaCheck(cudaStreamWaitEvent(s, ev, 0)); }
static inline void event_record(cudaEvent_t ev, cudaStream_t s) { cudaCheck(cudaEventRecord(ev, s)); }

/* A lane's view of the batch: rows [r0, r0 + M) of every [B·T, ·] tensor. */
typedef struct {
    cc_executor *ex;
    gpu_impl *g;
    gpu_lane *ln;
    int nlanes; /* lanes of this step */
    int B, T, M, D, L, H, W, V;
    size_t r0, M_all; /* the lane's first row; rows of the whole batch (per-layer tensors are [L, M_all, ·]) */
    int b0;           /* the lane's first sequence */
    /* the lane's first row in the context stream's and classifier's own
     * tensors: r0, or 0 for a part of a lane under recompute, whose buffers
     * hold one part (passes_gpu.c, top_in_parts) */
    size_t top_r0;
    cc_norm_consts nc; /* RMSNorm's constants */
} lane_ctx;

/* The lane's first row of a [M_all, width] tensor, and of layer l's block of an [L, M_all, width] one. */
#define ROWS(c, base, width) ((base) + (c)->r0 * (size_t)(width))
#define LROWS(c, base, l, width) ((base) + ((size_t)(l) * (c)->M_all + (c)->r0) * (size_t)(width))
#define G32L(c, idx) ((c)->ln->g32 + (c)->ex->lay.t[(idx)].offset)
/* A lane's rows of a per-query, per-head [B, H, T] tensor (sequence-major). */
#define HROWS(c, base) ((base) + (size_t)(c)->b0 * (c)->H * (c)->T)
/* The lane's first row of a context stream or classifier tensor (top_r0). */
#define TOPROWS(c, base, width) ((base) + (c)->top_r0 * (size_t)(width))
/* The lane's first row of a recompute window's buffer ([B_all, rc_window, width]). */
#define WINROWS(c, base, width) ((base) + (size_t)(c)->b0 * (c)->g->rc_window * (size_t)(width))

/* The rows of layer-indexed tensor `base` (width w) at the lane's first sequence's step t0. */
#define WROWS(c, base, l, w, t0) (LROWS(c, base, l, w) + (size_t)(t0) * (w))

/* Which of the per-layer buffer slots (gpu_impl.h) layer l uses: by parity
 * (the weight GEMMs of layer l+2 wait for it), or under the wavefront, where
 * the layers' recurrences overlap, its own. */
static inline int layer_slot(const gpu_impl *g, int l) { return g->wave_layers > 2 ? l : l & 1; }

/* Which block of a per-layer tensor layer l uses (gpu_impl.h, recompute):
 * under recompute the forward's hprev16 keeps one block for all layers,
 * else layer l's own. h and the norms' statistics keep one block a layer;
 * u and a16: passes_gpu.c, forward_u and layer_a16. */
static inline int block_one(const gpu_impl *g, int l) { return g->recompute ? 0 : l; }

lane_ctx lane_view(cc_executor *ex, gpu_lane *ln, int nlanes);
/* Layer l's normalised input (FP16) and FP16 h_{t-1} in the lane's rows. */
uint16_t *layer_a16(const lane_ctx *c, int l);
uint16_t *layer_hprev16(const lane_ctx *c, int l);
/* [gpu] check's scan of a stage's output, and a phase mark (lane 0 only). */
void lane_check(lane_ctx *c, const char *stage, const char *tensor, int layer, const void *ptr, size_t n, int half,
                int width);
void lane_mark(lane_ctx *c, int ph);
/* --plant-nan-grad-h's NaN in du where it falls in this lane and layer
 * (passes_gpu.c): the pointer to restore from plant_slot[1], or NULL. */
float *plant_begin(lane_ctx *c, int l, float *du, cudaStream_t s);
/* The embedding's gradient from du^0 (on the lane's stream), which then
 * waits for every layer's weight gradients. */
void lane_embedding_backward(lane_ctx *c);
/* The lane's B sequences of a GRU layer (all T steps), layer l's tensors in
 * the lane's rows, and their gradients (dh_in is du). */
gru_shape gru_shape_of(const lane_ctx *c);
gru_layer gru_layer_of(const lane_ctx *c, int l);
gru_grads gru_grads_of(const lane_ctx *c, int l);
/* The side stream starts what follows once the lane's stream has reached this point. */
void side_stream_after(gpu_lane *ln);
/* With one lane, the context stream's and classifier's gradients reduced
 * over ranks on the side stream once they are final (after ev_top_wgrad). */
void allreduce_tail_early(lane_ctx *c);

/* The merge, final norm, classifier and loss (gpu_crossentropy.h) of M rows
 * of the lane from its first sequence's step t0, in windows rw, the context
 * output at cc; with a gradient, dL/dm into du (passes_gpu.c). */
void classifier_rows(lane_ctx *c, int t0, int M, row_window rw, float *cc, float loss_scale, int with_grad);

/* wavefront_gpu.c. Whether this step takes the wavefront, and whether it
 * chunks the context stream and classifier too; chunks of the lane's T. */
int wave_on(const cc_executor *ex);
int wave_top_chunked(const cc_executor *ex);
int wave_chunks(const lane_ctx *c);
/* Layer l's forward on chunk k, and its BPTT there (chunks from the last,
 * layers from the top); the context stream, classifier and loss forward on
 * chunk k, and their backward down to dL/du^L there. */
void wave_forward_chunk(lane_ctx *c, int l, int k);
void wave_backward_chunk(lane_ctx *c, int l, int k, float clamp_limit);
void wave_top_forward(lane_ctx *c, int k, float loss_scale, int with_grad);
void wave_top_backward(lane_ctx *c, int k, float ctx_limit);
void wave_top_classifier(lane_ctx *c, int k, float loss_scale, int with_grad);

/* recompute_gpu.c. Layer l's input GEMM and recurrence, window by window
 * (after its input's norm); its backward from the rebuilt activations,
 * window by window: du holds dL/du^{l+1} and leaves as dL/du^l. */
void rc_forward_windows(lane_ctx *c, int l);
void rc_backward_layer(lane_ctx *c, int l, float clamp_limit);

#endif
