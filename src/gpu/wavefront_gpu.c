/* The wavefront: a lane's layers' recurrences over time chunks.
 *
 * Forward, chunk k = [t0, t1): layer l's input on the chunk needs only layer
 * l-1's h there (and its own u), and layer l's recurrence on the chunk needs
 * that input and its own state at t0-1, which its chunk k-1 left. So layer l
 * runs chunk k while layer l-1 runs chunk k+1. Each layer has a feed stream
 * (the residual add and norm that make its input, and its input GEMM, on
 * the chunk's rows) and a recurrence stream; an event per layer hands each
 * chunk on. The host issues chunk by chunk, layer by layer, so every wait is
 * enqueued right after the record it waits for, and one event per layer
 * serves every chunk. Layer 0's input is made for all T at once (nothing
 * comes before it). The BPTT is the same top down and in reverse time: layer
 * l's chunk needs dL/dh^l on the chunk, which layer l+1's input gradient and
 * norm backward on that chunk finish, and the carry its own chunk k+1 left.
 * Every kernel of a chunk reads and writes only the chunk's rows, and no two
 * layers work on the same rows at once; each layer's weight gradients, one
 * GEMM over all T, follow its last chunk on the side stream. Where the
 * chunks are whole blocks of the tensor-core attention, the context stream,
 * classifier and loss run chunk by chunk too, on the lane's stream, beside
 * the recurrences (wave_top_forward, wave_top_backward).
 *
 * A chunk is handed on between launches by an event, not by a counter that
 * a running kernel spins on: a kernel waiting inside for another kernel's
 * progress needs both resident at once, which nothing guarantees across
 * streams (another lane's clusters, a GEMM, MPS or a partition can hold the
 * SMs the producer needs: a deadlock). The price is a launch and a reload
 * of W_hh a chunk: in the default step a chunk of 128 forward steps takes
 * 0.25-0.26 ms against 0.23 ms at the whole launch's 1.81 us a step
 * (docs/performance.md). */
#include <stdio.h>
#include "catchat/dist.h"
#include "catchat/gpu_gru.h"
#include "catchat/kernels.h"
#include "gpu/gpu_impl.h"
#include "gpu/lane_gpu.h"


static void wave_window(const lane_ctx *c, int k, int *t0, int *t1)
{
    const int C = c->g->wave_chunk;
    *t0 = k * C;
    *t1 = *t0 + C < c->T ? *t0 + C : c->T;
}

int wave_chunks(const lane_ctx *c) { return (c->T + c->g->wave_chunk - 1) / c->g->wave_chunk; }

/* Layer l's forward on chunk k. */
void wave_forward_chunk(lane_ctx *c, int l, int k)
{
    cc_executor *ex = c->ex;
    gpu_impl *g = c->g;
    gpu_lane *ln = c->ln;
    const cc_layout *lay = &ex->lay;
    const int D = c->D, T = c->T, B = c->B;
    int t0, t1;
    wave_window(c, k, &t0, &t1);
    const int len = t1 - t0, M = c->M;
    const row_window rw = { len, T, 0 };
    cudaStream_t feed = ln->feed[l], rec = ln->rec[l];
    if (l == 0 && k == 0) { /* layer 0's input for every step, once the lane's batch is there */
        event_record(ln->ev_feed[0], ln->stream);
        stream_wait(feed, ln->ev_feed[0]);
        launch_embedding_forward(ROWS(c, g->u, D), ROWS(c, g->x, 1), P32(ex, lay->embed), M, D, feed);
        launch_rmsnorm_forward(NULL, LROWS(c, g->a16, 0, D), LROWS(c, g->a_ir, 0, 1), LROWS(c, g->u, 0, D),
                               P32(ex, lay->gru_norm[0]), M, D, &c->nc, feed);
        gpu_matmul_fwd(ln->feed_gemm[0], LROWS(c, g->gx, 0, 3 * D), LROWS(c, g->a16, 0, D), P16(ex, lay->gru_wih[0]),
                       P32(ex, lay->gru_bih[0]), M, 3 * D, D, feed);
        event_record(ln->ev_feed[0], feed);
    } else if (l > 0) { /* u^l = u^{l-1} + h^{l-1} and its norm on the chunk, then gx^l */
        stream_wait(feed, ln->ev_rec[l - 1]);
        launch_add_rmsnorm_forward(WROWS(c, g->u, l, D, t0), NULL, WROWS(c, g->a16, l, D, t0),
                                   WROWS(c, g->a_ir, l, 1, t0), WROWS(c, g->u, l - 1, D, t0),
                                   WROWS(c, g->h, l - 1, D, t0), P32(ex, lay->gru_norm[l]), B * len, D, rw, &c->nc,
                                   feed);
        gpu_matmul_fwd_window(ln->feed_gemm[l], WROWS(c, g->gx, l, 3 * D, t0), WROWS(c, g->a16, l, D, t0),
                              P16(ex, lay->gru_wih[l]), P32(ex, lay->gru_bih[l]), B, len, T, 3 * D, D, feed);
        event_record(ln->ev_feed[l], feed);
    }
    if (l > 0 || k == 0) stream_wait(rec, ln->ev_feed[l]);
    const gru_layer gl = gru_layer_of(c, l);
    gru_shape sh = gru_shape_of(c);
    sh.t0 = t0;
    sh.t1 = t1;
    gpu_trace_wave_point(ln->index, l, rec);
    gpu_gru_forward(ln->rec_gemm[l], &g->wave_caps, &g->gru, g->gru_path, &gl, sh, g->gru_wide, ln->rec_sc[l], rec);
    gpu_trace_wave_point(ln->index, l, rec);
    event_record(ln->ev_rec[l], rec);
    if (l == c->L - 1) { /* u^L and the context stream's norm of it, on the lane's stream */
        cudaStream_t s = ln->stream;
        stream_wait(s, ln->ev_rec[l]);
        launch_add_rmsnorm_forward(WROWS(c, g->u, c->L, D, t0), NULL, ROWS(c, g->s16, D) + (size_t)t0 * D,
                                   ROWS(c, g->s_ir, 1) + t0, WROWS(c, g->u, l, D, t0), WROWS(c, g->h, l, D, t0),
                                   P32(ex, lay->ctx_norm), B * len, D, rw, &c->nc, s);
    }
}

/* Layer l's BPTT on chunk k (chunks run from the last), then its input
 * gradient and norm backward there: dL/du^l on the chunk, in du. */
void wave_backward_chunk(lane_ctx *c, int l, int k, float clamp_limit)
{
    cc_executor *ex = c->ex;
    gpu_impl *g = c->g;
    gpu_lane *ln = c->ln;
    const cc_layout *lay = &ex->lay;
    const int D = c->D, T = c->T, B = c->B;
    int t0, t1;
    wave_window(c, k, &t0, &t1);
    const int len = t1 - t0;
    const row_window rw = { len, T, 0 };
    cudaStream_t feed = ln->feed[l], rec = ln->rec[l];
    if (l == c->L - 1) { /* dL/du^L: the context stream's, of the chunk or of every step */
        if (c->g->wave_top_ran || k == wave_chunks(c) - 1) {
            event_record(ln->ev_feed[c->L - 1], ln->stream);
            stream_wait(rec, ln->ev_feed[c->L - 1]);
        }
    } else {
        stream_wait(rec, ln->ev_feed[l + 1]);
    }
    const gru_layer gl = gru_layer_of(c, l);
    const gru_grads gg = gru_grads_of(c, l);
    gru_shape sh = gru_shape_of(c);
    sh.t0 = t0;
    sh.t1 = t1;
    gpu_trace_wave_point(ln->index, l, rec);
    const int nparts = gpu_gru_bptt(ln->rec_gemm[l], &g->wave_caps, &g->gru, g->gru_path, &gl, &gg, sh, clamp_limit,
                                    ln->rec_sc[l], rec);
    gpu_trace_wave_point(ln->index, l, rec);
    event_record(ln->ev_rec[l], rec);
    if (k == 0) { /* the layer's weight gradients, one GEMM over all T each */
        stream_wait(ln->wgrad_stream, ln->ev_rec[l]);
        gpu_trace_point(GPU_MAX_LANES + ln->index, ln->wgrad_stream);
        gpu_gru_weight_grads(ln->gemm_wgrad, &gl, &gg, nparts, gru_shape_of(c), ln->wgrad_sc, ln->wgrad_stream);
        gpu_matmul_dw(ln->gemm_wgrad, G32L(c, lay->gru_wih[l]), gg.dgx16, LROWS(c, g->a16, l, D), c->M, 3 * D, D,
                      ln->wgrad_stream);
        gpu_trace_point(GPU_MAX_LANES + ln->index, ln->wgrad_stream);
        if (l == 0) event_record(ln->ev_wgrad[0], ln->wgrad_stream);
    }
    stream_wait(feed, ln->ev_rec[l]);
    float *du = ROWS(c, g->du, D) + (size_t)t0 * D, *dtmp = ROWS(c, g->dtmp, D) + (size_t)t0 * D;
    gpu_matmul_dx_window(ln->feed_gemm[l], dtmp, (const uint16_t *)gg.dgx16 + (size_t)t0 * 3 * D,
                         P16(ex, lay->gru_wih[l]), B, len, T, 3 * D, D, feed);
    launch_rmsnorm_backward(du, G32L(c, lay->gru_norm[l]), dtmp, WROWS(c, g->u, l, D, t0), P32(ex, lay->gru_norm[l]),
                            WROWS(c, g->a_ir, l, 1, t0), B * len, D, rw, &c->nc, &g->caps, ln->feed_sc[l], feed);
    event_record(ln->ev_feed[l], feed);
    if (l == 0 && k == 0) { /* every chunk of du^0 is done: the embedding's gradient, then the weight GEMMs' end */
        cudaStream_t s = ln->stream;
        stream_wait(s, ln->ev_feed[0]);
        launch_embedding_backward(G32L(c, lay->embed), ROWS(c, g->du, D), g->tok_off + (size_t)ln->index * (c->V + 1),
                                  ROWS(c, g->tok_pos, 1), c->V, D, s);
        stream_wait(s, ln->ev_wgrad[0]);
    }
}


/* The context stream, the classifier and the loss on chunk k, after the
 * last layer's chunk k (wave_forward_chunk left s there): the attention's
 * queries in the chunk read keys from up to W - 1 steps before it, which
 * earlier chunks made. All on the lane's stream. */
void wave_top_forward(lane_ctx *c, int k, float loss_scale, int with_grad)
{
    cc_executor *ex = c->ex;
    gpu_impl *g = c->g;
    const cc_layout *lay = &ex->lay;
    const int D = c->D, T = c->T, B = c->B;
    int t0, t1;
    wave_window(c, k, &t0, &t1);
    const int len = t1 - t0;
    cudaStream_t s = c->ln->stream;
    gpu_matmul_ctx *gm = c->ln->gemm;
    const size_t at = (size_t)t0;
    uint16_t *s16 = ROWS(c, g->s16, D) + at * D, *o16 = ROWS(c, g->o16, D) + at * D;
    float *cc = ROWS(c, g->c, D) + at * D;
    gpu_matmul_fwd_f16_window(gm, ROWS(c, g->qkv16, 3 * D) + at * 3 * D, s16, P16(ex, lay->ctx_qkv), B, len, T, 3 * D,
                              D, s);
    launch_attention_forward_tc_window(NULL, ROWS(c, g->o16, D), NULL, HROWS(c, g->lse), ROWS(c, g->qkv16, 3 * D), B, T,
                                       D, c->H, c->W, t0, t1, s);
    gpu_matmul_fwd_window(gm, cc, o16, P16(ex, lay->ctx_out), NULL, B, len, T, D, D, s);
    /* here rather than before the chunk's backward: issued there, beside the BPTT of the chunk after
     * it, the default step at V = 50257 ran no faster (19.8 against 20.0 ms) and at V = 256 slower */
    wave_top_classifier(c, k, loss_scale, with_grad);
}

/* The merge, final norm, classifier and loss on chunk k, with a gradient
 * down to dL/dm in du's rows of the chunk (classifier_rows). */
void wave_top_classifier(lane_ctx *c, int k, float loss_scale, int with_grad)
{
    int t0, t1;
    wave_window(c, k, &t0, &t1);
    const int len = t1 - t0;
    const row_window rw = { len, c->T, 0 };
    classifier_rows(c, t0, c->B * len, rw, ROWS(c, c->g->c, c->D) + (size_t)t0 * c->D, loss_scale, with_grad);
}

/* The context stream's backward on chunk k from dL/dm (chunks
 * from the last), down to dL/du^L there: the attention's keys in the chunk
 * take the gradients of the queries up to W - 1 steps after it, whose
 * chunks ran before. After chunk 0, the last to run, the top's weight
 * gradients, one GEMM each over all T, go to the side stream. */
void wave_top_backward(lane_ctx *c, int k, float ctx_limit)
{
    cc_executor *ex = c->ex;
    gpu_impl *g = c->g;
    gpu_lane *ln = c->ln;
    const cc_layout *lay = &ex->lay;
    const int D = c->D, T = c->T, B = c->B, M = c->M;
    int t0, t1;
    wave_window(c, k, &t0, &t1);
    const int len = t1 - t0, Mw = B * len;
    const row_window rw = { len, T, 0 };
    const size_t at = (size_t)t0, pitch = sizeof(float) * (size_t)T * D, width = sizeof(float) * (size_t)len * D;
    cudaStream_t s = ln->stream;
    gpu_matmul_ctx *gm = ln->gemm;
    float *du = ROWS(c, g->du, D) + at * D, *dtmp = ROWS(c, g->dtmp, D) + at * D, *dc = ROWS(c, g->dc, D) + at * D;
    uint16_t *d16 = ROWS(c, g->d16, 3 * D), *dc16 = ROWS(c, g->dc16, D) + at * D;
    if (ctx_limit > 0) { /* the guard rescales a copy: du itself flows on down the residual */
        cudaCheck(cudaMemcpy2DAsync(dc, pitch, du, pitch, width, B, cudaMemcpyDeviceToDevice, s));
        launch_rownorm_clamp(dc, Mw, D, rw, ctx_limit, s);
    }
    launch_f32_to_f16_rows(dc16, ctx_limit > 0 ? dc : du, Mw, D, rw, s);
    gpu_matmul_dx_f16_window(gm, ROWS(c, g->do16, D) + at * D, dc16, P16(ex, lay->ctx_out), B, len, T, D, D, s);
    launch_attention_backward_tc_window(NULL, d16, HROWS(c, g->delta), ROWS(c, g->do16, D), HROWS(c, g->lse),
                                        ROWS(c, g->qkv16, 3 * D), B, T, D, c->H, c->W, t0, t1, s);
    gpu_matmul_dx_window(gm, dtmp, d16 + at * 3 * D, P16(ex, lay->ctx_qkv), B, len, T, 3 * D, D, s);
    launch_rmsnorm_backward(du, G32L(c, lay->ctx_norm), dtmp, WROWS(c, g->u, c->L, D, t0), P32(ex, lay->ctx_norm),
                            ROWS(c, g->s_ir, 1) + at, Mw, D, rw, &c->nc, &g->caps, ln->sc, s);
    if (k > 0) return;
    side_stream_after(ln);
    cudaStream_t side = ln->wgrad_stream;
    gpu_matmul_dw(ln->gemm_wgrad, G32L(c, lay->ctx_out), ROWS(c, g->dc16, D), ROWS(c, g->o16, D), M, D, D, side);
    gpu_matmul_dw(ln->gemm_wgrad, G32L(c, lay->ctx_qkv), d16, ROWS(c, g->s16, D), M, 3 * D, D, side);
    cudaCheck(cudaEventRecord(ln->ev_top_wgrad, side));
    if (gpu_overlaps_allreduce(ex, c->nlanes)) allreduce_tail_early(c);
}

/* Whether the wavefront chunks the context stream too: its tensor-core
 * attention works in blocks of ATTENTION_TC_BLOCK queries, so the chunks
 * must be whole blocks (the FP32 kernels take the whole sequence). */
int wave_top_chunked(const cc_executor *ex)
{
    const gpu_impl *g = IMPL(ex);
    return g->attn_tc && g->wave_chunk % ATTENTION_TC_BLOCK == 0 && g->wave_chunk < ex->T;
}

/* Whether this step takes the wavefront: the plan's, except while profiling
 * phases (which time one kernel after another), checking every tensor
 * against the CPU (the check reads whole layers), planting a NaN (the plant
 * stands in for one element around a whole layer's BPTT) or after a refused
 * persistent launch. */
int wave_on(const cc_executor *ex)
{
    const gpu_impl *g = IMPL(ex);
    /* after a refused persistent launch this executor's recurrences take the per-step loop, whose carry
     * between windows differs from the persistent kernels' (gru_shape): one layer after another from then on */
    return g->wave_chunk > 0 && !g->profile && !ex->check && !ex->plant_grad_h.on && !g->gru.refused[0];
}
