/* The GPU executor: the model of docs/model.md with FP16 GEMM operands (cuBLASLt,
 * FP32 accumulation) and FP32 everything else; see the precision contract in
 * include/catchat/kernels.h. This file owns device memory, the streams and
 * GEMM contexts of the lanes, the batch upload, the loss read-back and the
 * optimizer's element-wise work; passes_gpu.c orders the launches of the
 * forward and backward passes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/executor.h"
#include "catchat/matmul.h"
#include "catchat/dist.h"
#include "catchat/gpu_crossentropy.h"
#include "catchat/gpu_gru.h"
#include "catchat/gpu_plan.h"
#include "catchat/kernels.h"
#include "catchat/safetensors.h"
#include "catchat/util.h"
#include "gpu/gpu_impl.h"

#define G32(ex, idx) (IMPL(ex)->g32 + (ex)->lay.t[(idx)].offset)

static void *dalloc(size_t bytes, const char *what) { return cc_device_alloc(bytes, what); }

/* Tokens and targets to the device, and each lane's embedding-backward CSR
 * (positions relative to the lane's first row). */
static void upload_batch(cc_executor *ex, const int *x, const int *y, int lanes)
{
    gpu_impl *g = IMPL(ex);
    const size_t n = (size_t)ex->B * ex->T, per_lane = n / lanes;
    cudaCheck(cudaMemcpyAsync(g->x, x, sizeof(int) * n, cudaMemcpyHostToDevice, g->stream));
    cudaCheck(cudaMemcpyAsync(g->y, y, sizeof(int) * n, cudaMemcpyHostToDevice, g->stream));
    const int V = ex->lay.dims.V;
    cudaCheck(cudaStreamSynchronize(g->stream)); /* the host CSR buffers are reused */
    for (int i = 0; i < lanes; i++)
        cc_embedding_csr(x + i * per_lane, (int)per_lane, V, g->tok_off_host + (size_t)i * (V + 1),
                         g->tok_pos_host + i * per_lane);
    cudaCheck(cudaMemcpyAsync(g->tok_off, g->tok_off_host, sizeof(int) * (V + 1) * lanes, cudaMemcpyHostToDevice,
                              g->stream));
    cudaCheck(cudaMemcpyAsync(g->tok_pos, g->tok_pos_host, sizeof(int) * n, cudaMemcpyHostToDevice, g->stream));
}

/* Loss per position and ranks to the host; returns the summed loss. */
static double collect_loss(cc_executor *ex, cc_score *score)
{
    gpu_impl *g = IMPL(ex);
    const int M = ex->B * ex->T;
    cudaCheck(cudaMemcpyAsync(g->loss_host, g->loss_row, sizeof(float) * M, cudaMemcpyDeviceToHost, g->stream));
    cudaCheck(cudaMemcpyAsync(g->rank_host, g->rank, sizeof(int) * M, cudaMemcpyDeviceToHost, g->stream));
    cudaCheck(cudaStreamSynchronize(g->stream));
    double sum = 0;
    for (int i = 0; i < M; i++) {
        if (g->rank_host[i] < 0) continue;
        sum += g->loss_host[i];
        if (score) {
            score->scored++;
            /* NaN logits compare false everywhere, so the kernel ranks the target
             * first: a non-finite loss is never a correct prediction */
            const int finite = isfinite(g->loss_host[i]);
            score->top1 += finite && g->rank_host[i] == 1;
            score->top5 += finite && g->rank_host[i] >= 1;
        }
    }
    if (score) score->loss_sum += sum;
    return sum;
}

static double gpu_forward_backward(cc_executor *ex, const int *x, const int *y, double loss_scale)
{
    gpu_impl *g = IMPL(ex);
    const int M = ex->B * ex->T;
    /* scored positions here, then over all ranks; the stop request rides
     * along (dist.h), and so does, at an accumulated step's first
     * micro-batch, the step's own count */
    const int accum = ex->accum.n > 0, first = !accum || ex->accum.index == 0;
    const int last = !accum || ex->accum.index == ex->accum.count - 1;
    double counts[3] = { 0, ex->dist ? ex->dist->stop_request : 0, accum && first ? (double)ex->accum.n : 0 };
    for (int i = 0; i < M; i++) counts[0] += y[i] >= 0;
    cc_dist_enter(ex->dist, "the scored-count all-reduce", NULL);
    cc_dist_allreduce_host(ex->dist, counts, 3, g->stream);
    cc_dist_leave(ex->dist);
    if (ex->dist) ex->dist->stop_agreed = counts[1];
    if (accum && first) g->accum_total = (long)counts[2];
    const long scored = (long)counts[0];
    /* the units of the gradients and clamps: the whole step's scored positions */
    const long units = accum ? g->accum_total : scored;
    g->nmarks = 0;
    cudaCheck(cudaMemsetAsync(g->g32, 0, sizeof(float) * ex->lay.total, g->stream));
    const int lanes = gpu_step_lanes(ex);
    upload_batch(ex, x, y, lanes);
    gpu_passes(ex, loss_scale, units, lanes);
    if (accum && units > 0) { /* the step's gradient so far: acc32 (a fixed order of sums) */
        const size_t bytes = sizeof(float) * ex->lay.total;
        if (!g->acc32) cudaCheck(cudaMalloc((void **)&g->acc32, bytes));
        if (first && !last) cudaCheck(cudaMemcpyAsync(g->acc32, g->g32, bytes, cudaMemcpyDeviceToDevice, g->stream));
        else if (!last) launch_add(g->acc32, g->acc32, g->g32, ex->lay.total, g->stream);
        else if (!first) launch_add(g->g32, g->acc32, g->g32, ex->lay.total, g->stream);
    }
    /* the gradient all-reduce returns at once; the host waits for it with the backward, in collect_loss */
    const int reducing = units > 0 && last && ex->dist && ex->dist->active;
    if (reducing) cc_dist_enter(ex->dist, "the gradient all-reduce", NULL);
    if (units > 0 && last) {
        if (ex->dist && ex->dist->active) {
            /* one lane reduced the tail (ctx.*, final_norm, lm_head) during the BPTT (not when
             * accumulating: once, here, after the last micro-batch); otherwise the whole buffer */
            const int overlapped = gpu_overlaps_allreduce(ex, lanes);
            const size_t tail = overlapped ? ex->lay.t[ex->lay.ctx_norm].offset : ex->lay.total;
            cc_dist_allreduce_f32(ex->dist, g->g32, tail, g->stream);
            if (overlapped) {
                cudaCheck(cudaEventRecord(g->ev_done, g->comm_stream));
                cudaCheck(cudaStreamWaitEvent(g->stream, g->ev_done, 0));
            }
        }
        for (int i = 0; ex->check && i < ex->lay.n; i++) {
            char name[CC_NAME_MAX + 8];
            snprintf(name, sizeof(name), "grad.%s", ex->lay.t[i].name);
            gpu_check_dev(ex, "parameter_gradients", name, -1, G32(ex, i), ex->lay.t[i].numel, 0, 0);
        }
        gpu_mark(g, PH_WGRAD);
        ex->grad_unit = loss_scale * (double)units;
    } else if (units > 0) {
        ex->grad_unit = loss_scale * (double)units; /* a micro-batch before the last: partial */
    } else {
        ex->grad_unit = loss_scale;
    }
    double sum = collect_loss(ex, NULL); /* also waits for the backward */
    if (reducing) cc_dist_leave(ex->dist);
    cc_dist_enter(ex->dist, "the loss all-reduce", NULL);
    cc_dist_allreduce_host(ex->dist, &sum, 1, g->stream);
    cc_dist_leave(ex->dist);
    gpu_collect_marks(g);
    return scored ? sum / (double)scored : 0.0;
}

static void gpu_score(cc_executor *ex, const int *x, const int *y, cc_score *score)
{
    gpu_impl *g = IMPL(ex);
    const int profile = g->profile; /* evaluation is not part of the timed step */
    g->profile = 0;
    upload_batch(ex, x, y, 1);
    gpu_score_all(ex);
    g->profile = profile;
    collect_loss(ex, score);
}

static double gpu_grad_scale_sumsq(cc_executor *ex, double mul, int *nonfinite)
{
    gpu_impl *g = IMPL(ex);
    const int nb = grad_reduce_blocks();
    cudaCheck(cudaMemsetAsync(g->nonfinite, 0, sizeof(int), g->stream));
    launch_grad_reduce_sumsq(g->g32, ex->lay.total, (float)mul, g->partials, g->nonfinite, g->stream);
    int bad = 0;
    cudaCheck(cudaMemcpyAsync(g->partials_host, g->partials, sizeof(float) * nb, cudaMemcpyDeviceToHost, g->stream));
    cudaCheck(cudaMemcpyAsync(&bad, g->nonfinite, sizeof(int), cudaMemcpyDeviceToHost, g->stream));
    cudaCheck(cudaStreamSynchronize(g->stream));
    double ss = 0;
    for (int i = 0; i < nb; i++) ss += g->partials_host[i];
    if (nonfinite) *nonfinite = bad;
    return bad ? NAN : ss;
}

static double gpu_grad_scale_sumsq_op(cc_executor *ex, double mul) { return gpu_grad_scale_sumsq(ex, mul, NULL); }

static void gpu_adamw(cc_executor *ex, double lr, long k)
{
    gpu_impl *g = IMPL(ex);
    const cc_config *c = &ex->cfg;
    const float bc1 = (float)(1.0 - pow(c->beta1, (double)k)), bc2 = (float)(1.0 - pow(c->beta2, (double)k));
    for (int i = 0; i < ex->lay.n; i++) {
        const cc_tensor_info *t = &ex->lay.t[i];
        const float decay = t->decay ? (float)(1.0 - lr * c->weight_decay) : 1.0f;
        launch_adamw(g->p32 + t->offset, g->p16 + t->offset, g->g32 + t->offset, g->m + t->offset, g->v + t->offset,
                     t->numel, (float)lr, decay, (float)c->beta1, (float)c->beta2, bc1, bc2, (float)c->adam_eps,
                     g->stream);
    }
}

static void copy_out(cc_executor *ex, float *host, const float *dev)
{
    cudaCheck(cudaMemcpyAsync(host, dev, sizeof(float) * ex->lay.total, cudaMemcpyDeviceToHost, IMPL(ex)->stream));
    cudaCheck(cudaStreamSynchronize(IMPL(ex)->stream));
}

static void copy_in(cc_executor *ex, float *dev, const float *host)
{
    cudaCheck(cudaMemcpyAsync(dev, host, sizeof(float) * ex->lay.total, cudaMemcpyHostToDevice, IMPL(ex)->stream));
    cudaCheck(cudaStreamSynchronize(IMPL(ex)->stream));
}

static void gpu_get_params(cc_executor *ex, float *p) { copy_out(ex, p, IMPL(ex)->p32); }
static void gpu_set_params(cc_executor *ex, const float *p)
{
    copy_in(ex, IMPL(ex)->p32, p);
    launch_f32_to_f16(IMPL(ex)->p16, IMPL(ex)->p32, ex->lay.total, IMPL(ex)->stream);
}
static void gpu_get_grads(cc_executor *ex, float *gr) { copy_out(ex, gr, IMPL(ex)->g32); }
static void gpu_set_grads(cc_executor *ex, const float *gr, double unit)
{
    copy_in(ex, IMPL(ex)->g32, gr);
    ex->grad_unit = unit;
}
static void gpu_get_moments(cc_executor *ex, float *m, float *v)
{
    copy_out(ex, m, IMPL(ex)->m);
    copy_out(ex, v, IMPL(ex)->v);
}
static void gpu_set_moments(cc_executor *ex, const float *m, const float *v)
{
    copy_in(ex, IMPL(ex)->m, m);
    copy_in(ex, IMPL(ex)->v, v);
}

static void gpu_get_token_losses(cc_executor *ex, float *loss)
{
    memcpy(loss, IMPL(ex)->loss_host, sizeof(float) * ex->B * ex->T); /* copied back by collect_loss */
}

static void gpu_get_input_grad(cc_executor *ex, float *du0)
{
    const size_t n = (size_t)ex->B * ex->T * ex->lay.dims.D;
    cudaCheck(cudaMemcpyAsync(du0, IMPL(ex)->du, sizeof(float) * n, cudaMemcpyDeviceToHost, IMPL(ex)->stream));
    cudaCheck(cudaStreamSynchronize(IMPL(ex)->stream));
}

int cc_gpu_lanes(const cc_executor *ex) { return IMPL(ex)->nlanes; }

const gpu_step_plan *cc_gpu_plan(const cc_executor *ex) { return &IMPL(ex)->plan; }

const char *cc_gpu_refusal(const cc_executor *ex) { return IMPL(ex)->gru.refused[0] ? IMPL(ex)->gru.refused : NULL; }

const char *cc_gpu_wavefront(const cc_executor *ex, int *chunk)
{
    *chunk = IMPL(ex)->wave_chunk;
    return IMPL(ex)->wave_why;
}

int cc_gpu_wavefront_ran(const cc_executor *ex, int *top_chunked)
{
    *top_chunked = IMPL(ex)->wave_top_ran;
    return IMPL(ex)->wave_ran;
}

/* Every device buffer of the executor: where its pointer lives, its size
 * for this shape (0: not needed here, or under recompute a part of `work`,
 * below), what it holds (named in an out-of-memory message), whether it is
 * zeroed and its group (gpu_plan.h) in bench's table. Creation allocates
 * from this table and destruction frees from it, so adding a buffer is one
 * row. */
typedef struct {
    void **slot;
    size_t bytes;
    const char *what;
    int zeroed;
    int group;
} gpu_buffer;
#define MAX_BUFFERS 64

const char *const gpu_mem_group_names[GPU_MEM_GROUPS] = { "weights_optimizer", "layers", "attention",
                                                          "classifier", "workspace", "lanes" };

/* Under recompute (gpu_impl.h), the tensors that live in `work`, at
 * 256-byte offsets: the layers' set (the window buffers both passes use:
 * the normalised input, gates and ghn of rc_window steps of every
 * sequence, one or two; then the forward's hprev16 for all T, where the
 * backward's FP16 h_{t-1}, gate gradients and input gradient of a window
 * lie), and over it from the start the context stream's and the
 * classifier's for top_seqs sequences (the classifier's logits only ever
 * exist a chunk at a time, in buffers of their own: gpu_crossentropy.h). Of
 * those, the context output (the merge over it) is spent before the
 * attention backward, whose dO and dqkv take its place; the guard's dc is
 * the context output's.
 * Returns work's size; with base, points the slots into it. */
typedef struct {
    void **slot;
    size_t bytes;
    const char *name;
} work_part;

/* The parts one after another from byte `start` of work: their pointers
 * (with base), their places (with info, *ni of them so far). Returns the
 * bytes they take. */
static size_t place_parts(const work_part *parts, int n, size_t start, char *base, gpu_work_part *info, int *ni)
{
    size_t at = start;
    for (int i = 0; i < n; i++) {
        if (base) *parts[i].slot = parts[i].bytes ? base + at : NULL;
        if (info && parts[i].bytes) info[(*ni)++] = (gpu_work_part){ parts[i].name, at, parts[i].bytes };
        at += (parts[i].bytes + 255) & ~(size_t)255;
    }
    return at - start;
}

#define NPARTS(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define WORK_PARTS 32

static size_t work_layout(gpu_impl *g, const cc_dims *d, int B, int T, char *base, gpu_work_part *info, int *ni,
                          size_t *layer_bytes, size_t *top_bytes)
{
    const size_t M = (size_t)B * T, D = d->D, MD = M * D;
    /* a window buffer's rows, and the top's */
    const size_t Mw = (size_t)B * g->rc_window, Mt = (size_t)g->top_seqs * T, WD = Mw * D, TD = Mt * D;
    const int tc = g->attn_tc, two = g->rc_window < T;
    const work_part both[] = {
        { (void **)&g->win_a16[0], 2 * WD, "a16[0]" },      { (void **)&g->win_gates[0], 4 * 3 * WD, "gates[0]" },
        { (void **)&g->win_ghn[0], 4 * WD, "ghn[0]" },      { (void **)&g->win_a16[1], two ? 2 * WD : 0, "a16[1]" },
        { (void **)&g->win_gates[1], two ? 4 * 3 * WD : 0, "gates[1]" },
        { (void **)&g->win_ghn[1], two ? 4 * WD : 0, "ghn[1]" },
    };
    const work_part forward[] = {
        { (void **)&g->hprev16, 2 * MD, "hprev16" },
    };
    const work_part backward[] = {
        { (void **)&g->win_hp16[0], 2 * WD, "hp16[0]" },     { (void **)&g->win_dgx16[0], 2 * 3 * WD, "dgx16[0]" },
        { (void **)&g->win_dgh16[0], 2 * 3 * WD, "dgh16[0]" }, { (void **)&g->win_dtmp[0], 4 * WD, "dtmp[0]" },
        { (void **)&g->win_hp16[1], two ? 2 * WD : 0, "hp16[1]" },
        { (void **)&g->win_dgx16[1], two ? 2 * 3 * WD : 0, "dgx16[1]" },
        { (void **)&g->win_dgh16[1], two ? 2 * 3 * WD : 0, "dgh16[1]" },
        { (void **)&g->win_dtmp[1], two ? 4 * WD : 0, "dtmp[1]" },
    };
    const work_part top[] = {
        { (void **)&g->s16, 2 * TD, "s16" },          { (void **)&g->qkv16, tc ? 2 * 3 * TD : 0, "qkv16" },
        { (void **)&g->o16, 2 * TD, "o16" },          { (void **)&g->dc16, 2 * TD, "dc16" },
        { (void **)&g->dtmp, 4 * TD, "dtmp" },
    };
    const work_part spent[] = {
        { (void **)&g->c, 4 * TD, "c" },
    };
    const work_part late[] = {
        { (void **)&g->do16, tc ? 2 * TD : 0, "do16" },
        { (void **)&g->d16, 2 * 3 * TD, "d16" },
    };
    const size_t w = place_parts(both, NPARTS(both), 0, base, info, ni);
    const size_t fw = place_parts(forward, NPARTS(forward), w, base, info, ni);
    const size_t bw = place_parts(backward, NPARTS(backward), w, base, info, ni);
    const size_t a = w + (fw > bw ? fw : bw);
    const size_t f = place_parts(top, NPARTS(top), 0, base, info, ni);
    const size_t s = place_parts(spent, NPARTS(spent), f, base, info, ni);
    const size_t l = place_parts(late, NPARTS(late), f, base, info, ni);
    const size_t b = f + (s > l ? s : l);
    if (layer_bytes) *layer_bytes = a;
    if (top_bytes) *top_bytes = b;
    return a > b ? a : b;
}

int gpu_work_parts(const cc_dims *d, int B, int T, int window, int top_seqs, int attn_tc, gpu_work_part *out, int max,
                   size_t *total)
{
    gpu_impl g;
    memset(&g, 0, sizeof(g));
    g.attn_tc = attn_tc;
    g.rc_window = window;
    g.top_seqs = top_seqs;
    gpu_work_part info[WORK_PARTS];
    int n = 0;
    *total = work_layout(&g, d, B, T, NULL, info, &n, NULL, NULL);
    for (int i = 0; i < n && i < max; i++) out[i] = info[i];
    return n < max ? n : max;
}

static int buffer_table(gpu_impl *g, const cc_dims *d, size_t n, int B, int T, gpu_buffer *t)
{
    const size_t M = (size_t)B * T, D = d->D, L = d->L, V = d->V, MD = M * D;
    /* every lane's classifier chunk (gpu_crossentropy.h) */
    const size_t ce = g->nlanes * gpu_ce_chunk_bytes(g->ce_rows, (int)D, (int)V);
    /* The tensor-core attention reads q, k, v and dO in FP16, writes dqkv in
     * FP16 only and keeps one lse (and delta) per query and head; the FP32
     * kernels read FP32 and store the probabilities (and ds) of the band. */
    const int tc = g->attn_tc;
    const size_t band = (size_t)B * d->H * T * (tc ? 1 : d->W);
    /* under recompute: u in one block (and du by turns), the rest of the layers' and the top's in work */
    const int rc = g->recompute;
    const size_t kept = rc ? 0 : 1;
    int k = 0;
#define BUF(field, size, name, zero, grp) t[k++] = (gpu_buffer){ (void **)&g->field, (size), (name), (zero), (grp) }
    /* lm_head's FP16 copy and its gradients carry the classifier's padding rows past the end (gpu_ce_pad_floats) */
    const size_t ng = n + gpu_ce_pad_floats((int)V, (int)D);
    BUF(p32, 4 * n, "parameters", 0, GPU_MEM_WEIGHTS);
    BUF(g32, 4 * ng, "gradients", 1, GPU_MEM_WEIGHTS);
    BUF(g32_lanes, g->nlanes > 1 ? 4 * ng * (g->nlanes - 1) : 0, "gradients of lanes 1..", 1, GPU_MEM_LANES);
    BUF(m, 4 * n, "AdamW m", 1, GPU_MEM_WEIGHTS);
    BUF(v, 4 * n, "AdamW v", 1, GPU_MEM_WEIGHTS);
    BUF(p16, 2 * ng, "FP16 weights", 1, GPU_MEM_WEIGHTS); /* zeroed: the padding rows stay 0 */
    BUF(x, 4 * M, "tokens", 0, GPU_MEM_WORKSPACE);
    BUF(y, 4 * M, "targets", 0, GPU_MEM_WORKSPACE);
    BUF(work, rc ? work_layout(g, d, B, T, NULL, NULL, NULL, NULL, NULL) : 0,
        "a layer's windows and a part's context stream (recompute)", 0, GPU_MEM_LAYERS);
    BUF(u, 4 * (rc ? 1 : L + 1) * MD, "residual stream", 0, GPU_MEM_LAYERS);
    BUF(a_ir, 4 * L * M, "norm stats", 0, GPU_MEM_LAYERS);
    BUF(gx, kept * 4 * L * 3 * MD, "input projections", 0, GPU_MEM_LAYERS);
    BUF(gates, kept * 4 * L * 3 * MD, "gates", 0, GPU_MEM_LAYERS);
    BUF(ghn, kept * 4 * L * MD, "ghn", 0, GPU_MEM_LAYERS);
    BUF(h, 4 * L * MD, "GRU states", 0, GPU_MEM_LAYERS);
    const size_t WL = g->wave_layers; /* layers with their own scratch and gradient buffers */
    BUF(gh, 4 * WL * B * 3 * D, "recurrent product", 0, GPU_MEM_LAYERS);
    BUF(a16, kept * 2 * L * MD, "normalised inputs", 0, GPU_MEM_LAYERS); /* under recompute a layer's: in work */
    BUF(hprev16, kept * 2 * L * MD, "h_{t-1} FP16", 0, GPU_MEM_LAYERS);
    BUF(s_ir, 4 * M, "ctx norm stats", 0, GPU_MEM_ATTENTION);
    BUF(qkv16, tc ? kept * 2 * 3 * MD : 0, "qkv FP16", 0, GPU_MEM_ATTENTION);
    BUF(do16, tc ? kept * 2 * MD : 0, "attention dO FP16", 0, GPU_MEM_ATTENTION);
    BUF(lse, tc ? 4 * band : 0, "attention log-sum-exp", 0, GPU_MEM_ATTENTION);
    BUF(delta, tc ? 4 * band : 0, "attention delta", 0, GPU_MEM_ATTENTION);
    BUF(qkv, tc ? 0 : 4 * 3 * MD, "qkv", 0, GPU_MEM_ATTENTION);
    BUF(dqkv, tc ? 0 : 4 * 3 * MD, "dqkv", 0, GPU_MEM_ATTENTION);
    BUF(p, tc ? 0 : 4 * band, "attention probabilities", 0, GPU_MEM_ATTENTION);
    BUF(dsbuf, tc ? 0 : 4 * band, "attention ds", 0, GPU_MEM_ATTENTION);
    BUF(c, kept * 4 * MD, "context output, then the merge", 0, GPU_MEM_ATTENTION);
    BUF(f_ir, 4 * M, "final norm stats", 0, GPU_MEM_CLASSIFIER);
    /* zeroed: a chunk's padding columns hold no stale NaN for [gpu] check's scans */
    BUF(ce_bufs, ce, "classifier chunks (logits, final norm out, its gradient)", 1, GPU_MEM_CLASSIFIER);
    BUF(loss_row, 4 * M, "losses", 0, GPU_MEM_CLASSIFIER);
    BUF(rank, 4 * M, "ranks", 0, GPU_MEM_CLASSIFIER);
    BUF(s16, kept * 2 * MD, "ctx norm out", 0, GPU_MEM_ATTENTION);
    BUF(o16, kept * 2 * MD, "attention out", 0, GPU_MEM_ATTENTION);
    BUF(du, 4 * MD, "du", 0, GPU_MEM_LAYERS);
    BUF(dtmp, kept * 4 * MD, "dtmp", 0, GPU_MEM_LAYERS);
    BUF(dhrec, 4 * WL * B * D, "dh recurrent", 0, GPU_MEM_LAYERS);
    BUF(dgx16, kept * 2 * WL * 3 * MD, "dgx (a layer's worth each)", 0, GPU_MEM_LAYERS);
    BUF(dgh16, kept * 2 * WL * 3 * MD, "dgh (a layer's worth each)", 0, GPU_MEM_LAYERS);
    BUF(bias_part, 4 * WL * gpu_gru_bias_part_floats(B, (int)D), "BPTT bias sums (a layer's worth each)", 0,
        GPU_MEM_LAYERS);
    BUF(d16, kept * 2 * 3 * MD, "FP16 dqkv", 0, GPU_MEM_ATTENTION);
    BUF(dc16, kept * 2 * MD, "FP16 context-stream gradient", 0, GPU_MEM_ATTENTION);
    BUF(partials, 4 * (size_t)grad_reduce_blocks(), "norm partials", 0, GPU_MEM_WORKSPACE);
    BUF(nonfinite, sizeof(int), "non-finite count", 0, GPU_MEM_WORKSPACE);
    BUF(first_bad, sizeof(unsigned long long), "non-finite index", 0, GPU_MEM_WORKSPACE);
    BUF(tok_off, 4 * (V + 1) * GPU_MAX_LANES, "token offsets", 0, GPU_MEM_WORKSPACE);
    BUF(tok_pos, 4 * M, "token positions", 0, GPU_MEM_WORKSPACE);
#undef BUF
    return k;
}

static void gpu_destroy(cc_executor *ex)
{
    gpu_impl *g = IMPL(ex);
    if (g->profile)
        for (int i = 0; i < 64; i++) cudaEventDestroy(g->marks[i]);
    gpu_buffer bufs[MAX_BUFFERS];
    const int nb = buffer_table(g, &ex->lay.dims, ex->lay.total, ex->B, ex->T, bufs);
    cudaDeviceSynchronize(); /* every lane's streams */
    if (g->graph_exec) cudaGraphExecDestroy(g->graph_exec);
    for (int i = 0; i < nb; i++)
        if (bufs[i].bytes) cudaFree(*bufs[i].slot); /* the others are NULL, or parts of work */
    cudaFree(g->acc32);
    cudaFree(g->plant_slot);
    for (int l = 0; l < g->nlanes; l++) {
        gpu_lane *ln = &g->lane[l];
        gpu_matmul_destroy(ln->gemm);
        gpu_matmul_destroy(ln->gemm_wgrad);
        cudaEvent_t evs[] = { ln->ev_wgrad[0], ln->ev_wgrad[1], ln->ev_finished, ln->ev_to_rec,
                              ln->ev_from_rec, ln->ev_side, ln->ev_top_wgrad, ln->ev_join,
                              ln->ev_wfeed[0], ln->ev_wfeed[1], ln->ev_wrec[0], ln->ev_wrec[1],
                              ln->ev_wfree[0], ln->ev_wfree[1], ln->ev_ce_fork, ln->ev_ce_free };
        for (size_t i = 0; i < sizeof(evs) / sizeof(evs[0]); i++) cudaEventDestroy(evs[i]);
        if (g->recompute) gpu_matmul_destroy(ln->rec_gemm[0]);
        for (int k = 0; g->wave_chunk && k < ex->lay.dims.L; k++) {
            cudaEventDestroy(ln->ev_feed[k]);
            cudaEventDestroy(ln->ev_rec[k]);
            gpu_scratch_destroy(ln->feed_sc[k]);
            cudaStreamDestroy(ln->feed[k]);
            gpu_matmul_destroy(ln->feed_gemm[k]);
            gpu_matmul_destroy(ln->rec_gemm[k]);
            if (k == 0) continue; /* the lane's own rec_stream */
            gpu_scratch_destroy(ln->rec_sc[k]);
            cudaStreamDestroy(ln->rec[k]);
        }
        gpu_scratch_destroy(ln->rec_sc[0]);
        cudaStreamDestroy(ln->rec_stream);
        gpu_scratch_destroy(ln->wgrad_sc);
        cudaStreamDestroy(ln->wgrad_stream);
        gpu_scratch_destroy(ln->sc);
        if (l > 0) cudaStreamDestroy(ln->stream);
    }
    cudaEventDestroy(g->ev_tail);
    cudaEventDestroy(g->ev_done);
    cudaEventDestroy(g->ev_batch);
    cudaStreamDestroy(g->comm_stream);
    cudaStreamDestroy(g->stream);
    free(g->tok_off_host);
    free(g->tok_pos_host);
    free(g->loss_host);
    free(g->rank_host);
    free(g->partials_host);
    free(g);
    free(ex);
}

static const cc_executor_ops GPU_OPS = {
    .forward_backward = gpu_forward_backward,
    .score = gpu_score,
    .grad_scale_sumsq = gpu_grad_scale_sumsq_op,
    .adamw = gpu_adamw,
    .get_params = gpu_get_params,
    .set_params = gpu_set_params,
    .get_grads = gpu_get_grads,
    .set_grads = gpu_set_grads,
    .get_moments = gpu_get_moments,
    .set_moments = gpu_set_moments,
    .get_token_losses = gpu_get_token_losses,
    .get_input_grad = gpu_get_input_grad,
    .destroy = gpu_destroy,
};

/* Lanes per training step (gpu_impl.h): the most, up to 4, whose share of
 * the batch still runs the cluster recurrence (B=64: 4 lanes of 16), else
 * one. [gpu] lanes (1..GPU_MAX_LANES, dividing B) overrides it, for
 * measuring; returns 0 on a bad value. */
static int lanes_for(const cc_config *cfg, const gpu_caps *caps, gpu_gru_path path, int B, int T, int D)
{
    if (cfg->gpu_lanes > 0) {
        if (cfg->gpu_lanes > GPU_MAX_LANES || B % cfg->gpu_lanes) {
            cc_error("[gpu] lanes: %d does not divide batch_size %d (1..%d lanes)", cfg->gpu_lanes, B, GPU_MAX_LANES);
            return 0;
        }
        return cfg->gpu_lanes;
    }
    if (gpu_gru_impl_for(caps, path, B, T, D) != GRU_IMPL_CLUSTER) return 1;
    for (int n = 4; n > 1; n /= 2)
        if (B % n == 0 && gpu_gru_impl_for(caps, path, B / n, T, D) == GRU_IMPL_CLUSTER) return n;
    return 1;
}

/* Layers with their own BPTT gradient buffers (gpu_impl.h). */
static int wave_layers_of(const gpu_step_plan *p, const cc_dims *d)
{
    return p->wave_chunk && d->L > 2 ? d->L : 2;
}

/* The wavefront's chunk (wavefront_gpu.c), 0 where the step runs layer after
 * layer, and why in either case. It needs recurrence kernels that run a
 * window of steps from the state the window before left (cluster and
 * persistent; the per-step loop's GEMMs take the whole GPU at every step,
 * which leaves nothing to run beside them), and it pays where one layer's
 * recurrence leaves SMs idle: at B=256 the lanes' clusters of one layer
 * already take every cluster slot, and the wavefront measured 6% slower
 * there. The chunk: a quarter of T, at most 128 steps, at least 32 (128
 * measured fastest on the cluster kernels at T=512 against 64, 32 and 16:
 * each chunk pays a launch and a reload of W_hh, while shorter chunks fill
 * the pipeline sooner; docs/performance.md). [gpu] wavefront_chunk sets it
 * and takes the wavefront wherever the kernels can. */
static int wave_chunk_for(const cc_config *cfg, const gpu_step_plan *p, int B, int T, int L, char *why, size_t len)
{
    const int forced = cfg->gpu_wavefront_chunk > 0;
    /* the persistent kernels' steps are slower, so a chunk fills their pipeline later: half as long there
     * at D <= 512 (64 measured 9.6-9.8 ms against 10.1 at 32 and 11.0 at 128 under the sm89 profile;
     * at D = 1024, 128 against 64: 21.7 against 22.6) */
    const int persistent_half = p->impl == GRU_IMPL_PERSISTENT && cfg->d_model <= 512;
    int chunk = forced ? cfg->gpu_wavefront_chunk : T / 4 > 128 ? 128 : T / 4;
    if (!forced && persistent_half) chunk /= 2;
    if (chunk > T) chunk = T;
    const int resident = p->impl == GRU_IMPL_CLUSTER ? gru_cluster_resident(&p->caps, cfg->d_model) : 0;
    char fill[96];
    snprintf(fill, sizeof(fill), "off: one layer's clusters fill the GPU already (%d of %d)", B / 8, resident);
    const char *off = strcmp(cfg->gpu_wavefront, "off") == 0 ? "off ([gpu] wavefront)"
                      : p->impl == GRU_IMPL_PER_STEP ? "off: the per-step recurrence's GEMMs take the whole GPU at every step"
                      : L > GPU_WAVE_MAX_LAYERS ? "off: more layers than the wavefront's streams"
                      : forced ? NULL
                      : L < 2 ? "off: one layer, nothing to run beside its recurrence"
                      : chunk < 32 ? "off: T too short for chunks of 32 steps"
                      : resident > 0 && B / 8 >= resident ? fill
                                                          : NULL;
    if (off) {
        snprintf(why, len, "%s", off);
        return 0;
    }
    snprintf(why, len, "chunks of %d steps%s", chunk, forced ? " ([gpu] wavefront_chunk)" : "");
    return chunk;
}

/* A lane's recurrence: its batch, the SMs it chooses its kernels by (the
 * lanes' recurrences run at once: a persistent one sizes its grid to its
 * lane's share, so every lane's stays resident) and the implementation. */
static void plan_recurrence(gpu_step_plan *p, int B, int T, int D)
{
    p->lane_B = B / p->lanes;
    p->rec_caps = p->caps;
    if (p->lanes > 1) p->rec_caps.sm_count = p->caps.sm_count / p->lanes;
    p->wave_caps = p->rec_caps;
    p->impl = gpu_gru_impl_for(&p->rec_caps, p->path, p->lane_B, T, D);
    p->eval_impl = gpu_gru_impl_for(&p->rec_caps, p->path, B, T, D);
}

/* Cluster lanes: 2 rather than the 4 chosen (where [gpu] lanes does not
 * set them and half the batch still runs clusters), for the wavefront and
 * recompute (their reasons at the callers). */
static void two_cluster_lanes(gpu_step_plan *p, const cc_config *cfg, int B, int T)
{
    if (p->impl == GRU_IMPL_CLUSTER && cfg->gpu_lanes == 0 && p->lanes > 2 && B % 2 == 0 &&
        gpu_gru_impl_for(&p->caps, p->path, B / 2, T, cfg->d_model) == GRU_IMPL_CLUSTER) {
        p->lanes = 2;
        plan_recurrence(p, B, T, cfg->d_model);
    }
}

/* Under the wavefront the layers' recurrences run at once. Cluster lanes:
 * 2 rather than 4 (each lane's layers take 3x the clusters; measured 6.7
 * against 6.9 ms at the default config). Persistent grids: each layer's
 * takes its share of the lane's SMs, as many layers at once as have a split
 * that fits (all L where one does; at D=1024 a third of the H200 holds no
 * split of W_hh, half does); no split for two: no wavefront. */
static void plan_wavefront(gpu_step_plan *p, const cc_config *cfg, int B, int T, int L)
{
    p->wave_chunk = wave_chunk_for(cfg, p, B, T, L, p->wave_why, sizeof(p->wave_why));
    if (!p->wave_chunk) return;
    two_cluster_lanes(p, cfg, B, T);
    if (p->impl != GRU_IMPL_PERSISTENT) return;
    for (int k = L; k >= (L > 1 ? 2 : 1); k--) {
        gpu_caps share = p->rec_caps;
        share.sm_count = p->rec_caps.sm_count / k;
        if (gpu_gru_impl_for(&share, p->path, p->lane_B, T, cfg->d_model) != GRU_IMPL_PERSISTENT) continue;
        p->wave_caps = share;
        const size_t n = strlen(p->wave_why);
        snprintf(p->wave_why + n, sizeof(p->wave_why) - n, ", %d layers at once on %d SMs each", k, share.sm_count);
        return;
    }
    p->wave_chunk = 0;
    snprintf(p->wave_why, sizeof(p->wave_why), "off: no persistent split fits half of %d SMs", p->rec_caps.sm_count);
}

/* The cuBLASLt workspace of each of a lane's two GEMM contexts: the usual
 * one, or under recompute, which is there to save memory, the small one of
 * the wavefront's time windows (28 MiB less a context; the step's large
 * GEMMs find algorithms within it). */
static size_t lane_workspace_bytes(int recompute)
{
    return recompute ? GPU_MATMUL_WINDOW_WORKSPACE : gpu_matmul_workspace_bytes();
}

static int rc_windows_forced;

void gpu_recompute_force_windows(int n) { rc_windows_forced = n > 0 ? n : 0; }

/* Recompute's window (recompute_gpu.c): the most of `most` windows (16,
 * 8, 4 or 2) that divides T into windows of at least 16 steps, else all T;
 * gpu_recompute_force_windows's count where it divides T. The persistent
 * and cluster kernels pay once a window (a launch, W_hh loaded on chip,
 * and under the persistent BPTT W_hh transposed), and a window's rebuild
 * and weight GEMMs must fit beside the next window's BPTT, so they take 8:
 * at the default config 16 windows of 32 steps ran 12.3 ms a step against
 * 10.6 with 8 (docs/results/recompute_windows_2026-12-03.txt). The per-step
 * loop pays the same launches at every step whatever the window, so it
 * takes 16, whose two buffers hold an eighth of a layer's window tensors. */
static int recompute_window_for(const gpu_step_plan *p, int T)
{
    if (rc_windows_forced && T % rc_windows_forced == 0) return T / rc_windows_forced;
    const int most = p->impl == GRU_IMPL_PER_STEP ? 16 : 8;
    for (int n = most; n > 1; n /= 2)
        if (T % n == 0 && T / n >= 16) return T / n;
    return T;
}

/* Under recompute, the context stream's part: the most sequences, dividing
 * a lane's, whose tensors take no more of `work` than the layers' set does
 * (at least one sequence). */
static int top_seqs_for(const gpu_step_plan *p, const cc_dims *d, int B, int T)
{
    const int lane_B = B / p->lanes;
    gpu_impl g;
    memset(&g, 0, sizeof(g));
    g.attn_tc = p->attn_tc;
    g.rc_window = p->rc_window;
    for (int q = lane_B; q > 1; q--) {
        if (lane_B % q) continue;
        g.top_seqs = q;
        size_t layer = 0, top = 0;
        work_layout(&g, d, B, T, NULL, NULL, NULL, &layer, &top);
        if (top <= layer) return q;
    }
    return 1;
}

/* Rows of a classifier chunk: [gpu] classifier_rows, or as many as fit
 * `budget` over the lanes (a multiple of 64 from 64 up: whole tiles of the
 * GEMMs), never more than a lane's rows. Evaluation runs the whole batch
 * through lane 0's chunk. */
static int ce_rows_for(const gpu_step_plan *p, const cc_config *cfg, const cc_dims *d, int B, int T, size_t budget)
{
    const size_t lane_rows = (size_t)(B / p->lanes) * T;
    size_t rows = cfg->gpu_classifier_rows > 0 ? (size_t)cfg->gpu_classifier_rows
                                               : budget / ((size_t)p->lanes * gpu_ce_row_bytes(d->D, d->V));
    if (cfg->gpu_classifier_rows == 0 && rows > 64) rows -= rows % 64;
    if (rows > lane_rows) rows = lane_rows;
    return rows < 1 ? 1 : (int)rows;
}

/* Device bytes of the executor at B, and by group in groups (may be NULL):
 * its buffer table, each lane's two cuBLASLt workspaces, the persistent
 * recurrence's W_hhᵀ and partial sums a lane, and the accumulated gradient
 * of grad_accum. */
static size_t plan_bytes(const gpu_step_plan *p, const cc_config *cfg, const cc_dims *d, size_t n, int B, int T,
                         size_t *groups)
{
    size_t by[GPU_MEM_GROUPS] = { 0 };
    gpu_impl g;
    memset(&g, 0, sizeof(g));
    g.nlanes = p->lanes;
    g.ce_rows = p->ce_rows;
    g.attn_tc = p->attn_tc;
    g.wave_layers = wave_layers_of(p, d);
    g.recompute = p->recompute;
    g.rc_window = p->rc_window;
    g.top_seqs = p->recompute ? top_seqs_for(p, d, B, T) : 0;
    gpu_buffer bufs[MAX_BUFFERS];
    const int nb = buffer_table(&g, d, n, B, T, bufs);
    for (int i = 0; i < nb; i++) by[bufs[i].group] += bufs[i].bytes;
    by[GPU_MEM_WORKSPACE] += (size_t)p->lanes * 2 * lane_workspace_bytes(p->recompute);
    if (p->recompute) by[GPU_MEM_WORKSPACE] += (size_t)p->lanes * GPU_MATMUL_WINDOW_WORKSPACE; /* the recurrence stream's */
    if (p->wave_chunk) by[GPU_MEM_WORKSPACE] += (size_t)p->lanes * 2 * d->L * GPU_MATMUL_WINDOW_WORKSPACE;
    /* W_hhᵀ and a split's partial sums: per stream that runs a persistent
     * recurrence (each layer's own under the wavefront) */
    if (p->impl == GRU_IMPL_PERSISTENT) {
        const gpu_caps *rc = p->wave_chunk ? &p->wave_caps : &p->rec_caps;
        const size_t scratch = gru_persistent_scratch_bytes(rc, B / p->lanes, T, (int)d->D);
        by[GPU_MEM_WORKSPACE] += (size_t)p->lanes * (p->wave_chunk ? d->L : 1) * (6 * (size_t)d->D * d->D + scratch);
    }
    if (cfg->grad_accum > 1) by[GPU_MEM_WEIGHTS] += 4 * n;
    size_t bytes = 0;
    for (int i = 0; i < GPU_MEM_GROUPS; i++) bytes += by[i];
    if (groups) memcpy(groups, by, sizeof(by));
    return bytes;
}

/* What the plan may hold: [gpu] memory_limit where set (no more than the
 * device has free), else the device's free memory; 0 when unknown. */
static size_t memory_budget(const cc_config *cfg)
{
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
        cudaGetLastError();
        free_b = 0;
    }
    if (cfg->gpu_memory_limit > 0 && (free_b == 0 || cfg->gpu_memory_limit < free_b))
        return (size_t)cfg->gpu_memory_limit;
    return free_b;
}

/* [gpu] recompute: on, off, or under auto on only where the plan that keeps
 * every layer's activations (the fastest) would not fit the budget with
 * GPU_MEMORY_MARGIN to spare. */
static void plan_recompute(gpu_step_plan *p, const cc_config *cfg, const cc_dims *d, size_t n, int B, int T)
{
    const char *mode = cfg->gpu_recompute;
    p->memory_budget = memory_budget(cfg);
    const char *limit = cfg->gpu_memory_limit > 0 && p->memory_budget == cfg->gpu_memory_limit ? "[gpu] memory_limit"
                                                                                              : "free on the device";
    if (strcmp(mode, "on") == 0 || strcmp(mode, "off") == 0) {
        p->recompute = strcmp(mode, "on") == 0;
        snprintf(p->recompute_why, sizeof(p->recompute_why), "%s ([gpu] recompute)", mode);
        return;
    }
    size_t keep = plan_bytes(p, cfg, d, n, B, T, NULL);
    if (p->memory_budget && keep + GPU_MEMORY_MARGIN > p->memory_budget) { /* a smaller classifier chunk first */
        p->ce_budget = GPU_CE_BUDGET_TIGHT;
        p->ce_rows = ce_rows_for(p, cfg, d, B, T, p->ce_budget);
        keep = plan_bytes(p, cfg, d, n, B, T, NULL);
    }
    const double gib = 1073741824.0;
    if (p->memory_budget == 0 || keep + GPU_MEMORY_MARGIN <= p->memory_budget) {
        p->recompute = 0;
        if (p->memory_budget)
            snprintf(p->recompute_why, sizeof(p->recompute_why),
                     "off: every layer's activations fit (%.2f of %.2f GiB %s)", keep / gib, p->memory_budget / gib,
                     limit);
        else
            snprintf(p->recompute_why, sizeof(p->recompute_why), "off: the device's free memory is unknown");
        return;
    }
    p->recompute = 1;
    snprintf(p->recompute_why, sizeof(p->recompute_why),
             "on: keeping every layer's activations needs %.2f GiB, over the %.2f GiB %s less %d MiB to spare",
             keep / gib, p->memory_budget / gib, limit, (int)(GPU_MEMORY_MARGIN >> 20));
}

int gpu_step_plan_for(gpu_step_plan *p, const cc_config *cfg, int B, int T)
{
    memset(p, 0, sizeof(*p));
    if (gpu_caps_for_config(&p->caps, cfg) != 0) return -1;
    const gpu_caps *caps = &p->caps;
    if (caps->cc_major < 8)
        return cc_error("GPU '%s' is sm_%d%d; catchat's kernels need sm_80 (Ampere) or newer: FP16 tensor-core "
                        "mma.sync m16n8k16 with FP32 accumulation and asynchronous copies; use device = cpu",
                        caps->name, caps->cc_major, caps->cc_minor);
    if (cfg->d_model % 8 != 0)
        return cc_error("[model] d_model: %d; the GPU path needs a multiple of 8 (16-byte FP16 rows)", cfg->d_model);
    const cc_dims d = cc_dims_from_config(cfg);
    p->path = gpu_gru_path_named(cfg->gpu_recurrence);
    if (!(p->lanes = lanes_for(cfg, caps, p->path, B, T, d.D))) return -1;
    plan_recurrence(p, B, T, d.D);
    plan_wavefront(p, cfg, B, T, d.L);
    p->wide = gpu_gru_wide_for(caps, p->path, B, T, d.D);
    p->attn_tc = strcmp(cfg->gpu_attention, "fp32") != 0 && attention_tc_supported(caps, d.D, d.H, d.W);
    cc_layout lay;
    cc_layout_build(&lay, &d);
    p->ce_budget = GPU_CE_BUDGET;
    p->ce_rows = ce_rows_for(p, cfg, &d, B, T, p->ce_budget);
    plan_recompute(p, cfg, &d, lay.total, B, T);
    if (p->recompute) { /* one layer after another; 2 lanes rather than 4 (11.20 against 11.26 ms at the
                         * default config, 1 lane 11.54, and two lanes' gradient buffers less:
                         * docs/results/recompute_lanes_5b23236.txt) */
        if (!(p->lanes = lanes_for(cfg, caps, p->path, B, T, d.D))) return -1;
        plan_recurrence(p, B, T, d.D);
        two_cluster_lanes(p, cfg, B, T);
        p->wave_chunk = 0;
        snprintf(p->wave_why, sizeof(p->wave_why), "off: recompute rebuilds one layer at a time");
        p->rc_window = recompute_window_for(p, T);
        p->top_seqs = top_seqs_for(p, &d, B, T);
    }
    p->ce_rows = ce_rows_for(p, cfg, &d, B, T, p->ce_budget);
    p->ce_ldv = gpu_ce_ldv(d.V);
    p->device_bytes = plan_bytes(p, cfg, &d, lay.total, B, T, p->group_bytes);
    /* the chunk keeps its rows at twice the batch: only what grows with it counts */
    p->bytes_per_seq = (plan_bytes(p, cfg, &d, lay.total, 2 * B, T, NULL) - p->device_bytes) / (size_t)B;
    p->accum_bytes = 4 * lay.total;
    return 0;
}

void gpu_step_plan_describe(const gpu_step_plan *p, const cc_config *cfg, int T, char *buf, size_t len)
{
    char why[320];
    gpu_gru_impl_why(&p->rec_caps, p->path, p->lane_B, T, cfg->d_model, why, sizeof(why));
    char rc[96] = "off";
    if (p->recompute)
        snprintf(rc, sizeof(rc), "on (windows of %d steps, the context stream %d sequences at a time)", p->rc_window,
                 p->top_seqs);
    snprintf(buf, len, "%s recurrence, %d lane%s of %d sequences%s, wavefront %s, recompute %s (%s)",
             gpu_gru_impl_name(p->impl), p->lanes, p->lanes > 1 ? "s" : "", p->lane_B, p->wide ? ", wide clusters" : "",
             p->wave_why, rc, why);
}

/* The kernel scratch of each of a lane's streams (kernels.h: gpu_scratch),
 * made before the first step for every call a step makes there, since a
 * launcher never grows it (a CUDA graph may be capturing). Lane 0 also runs
 * the whole batch in one lane (evaluation, and the training step while
 * checking or profiling: gpu_step_lanes), so its rows are the batch's and
 * its recurrence stream also takes the whole batch's recurrence (the plan's
 * eval_impl). The lane's stream runs norm backwards over at most its rows
 * (the context norm, the layers' norms without the wavefront, the final
 * norm over a classifier chunk, which never holds more than a lane's rows);
 * the side stream the bias sums (launch_colsum_f16_acc) over its rows; the
 * recurrence streams the persistent kernels at the lane's batch on the SMs
 * they choose by (rec_caps; under the wavefront wave_caps, rec_stream both);
 * a wavefront's feed stream the layer's norm backward over a chunk of the
 * lane's sequences. The recurrence streams run no reduction. */
static void lane_scratch_create(gpu_impl *g, gpu_lane *ln, int B, int T, int D, int L)
{
    const int lane_B = B / g->nlanes, rows = (ln->index == 0 ? B : lane_B) * T;
    size_t own[SCRATCH_KINDS] = { 0 }, side[SCRATCH_KINDS] = { 0 }, rec[SCRATCH_KINDS] = { 0 };
    size_t wave[SCRATCH_KINDS] = { 0 }, feed[SCRATCH_KINDS] = { 0 };
    gpu_scratch_need(own, SCRATCH_REDUCE, rmsnorm_backward_scratch_bytes(rows, D, &g->caps));
    gpu_scratch_need(side, SCRATCH_REDUCE, gpu_gru_weight_grads_scratch_bytes(rows, D));
    gpu_gru_scratch_need(rec, &g->rec_caps, &g->gru, g->gru_path, lane_B, T, D);
    if (ln->index == 0) gpu_gru_scratch_need(rec, &g->rec_caps, &g->gru, g->gru_path, B, T, D);
    ln->sc = gpu_scratch_create(own);
    ln->wgrad_sc = gpu_scratch_create(side);
    if (g->wave_chunk) {
        const int chunk = g->wave_chunk < T ? g->wave_chunk : T;
        gpu_gru_scratch_need(wave, &g->wave_caps, &g->gru, g->gru_path, lane_B, T, D);
        gpu_scratch_need(feed, SCRATCH_REDUCE, rmsnorm_backward_scratch_bytes(lane_B * chunk, D, &g->caps));
        for (int k = 0; k < SCRATCH_KINDS; k++) gpu_scratch_need(rec, k, wave[k]);
        for (int k = 0; k < L; k++) {
            ln->feed_sc[k] = gpu_scratch_create(feed);
            if (k > 0) ln->rec_sc[k] = gpu_scratch_create(wave);
        }
    }
    ln->rec_sc[0] = gpu_scratch_create(rec);
}

cc_executor *cc_gpu_executor_create(const cc_config *cfg, int B, int T)
{
    gpu_step_plan plan;
    if (gpu_step_plan_for(&plan, cfg, B, T) != 0) return NULL;
    cc_executor *ex = cc_calloc(1, sizeof(*ex));
    ex->ops = &GPU_OPS;
    ex->name = "gpu";
    ex->cfg = *cfg;
    ex->B = B;
    ex->T = T;
    cc_dims d = cc_dims_from_config(cfg);
    cc_layout_build(&ex->lay, &d);
    gpu_impl *g = cc_calloc(1, sizeof(*g));
    ex->impl = g;
    g->plan = plan;
    g->recompute = plan.recompute;
    g->rc_window = plan.rc_window;
    g->top_seqs = plan.top_seqs;
    g->caps = plan.caps;
    g->rec_caps = plan.rec_caps;
    g->wave_caps = plan.wave_caps;
    g->gru_path = plan.path;
    g->nlanes = plan.lanes;
    g->ce_rows = plan.ce_rows;
    g->attn_tc = plan.attn_tc;
    g->gru_wide = plan.wide;
    g->wave_chunk = plan.wave_chunk;
    snprintf(g->wave_why, sizeof(g->wave_why), "%s", plan.wave_why);
    g->wave_layers = wave_layers_of(&plan, &d);
    /* Priorities: the recurrences first, then the lanes' own streams, then
     * the side streams (weight gradients, which nothing waits for until the
     * step's end); lane 0's stream is the main one. Side streams below the
     * lanes' measured faster than at the same priority (CHANGELOG.md). */
    int lowest = 0, highest = 0;
    cudaCheck(cudaDeviceGetStreamPriorityRange(&lowest, &highest));
    const int lane_priority = highest < lowest ? highest + 1 : lowest;
    cudaCheck(cudaStreamCreateWithPriority(&g->stream, cudaStreamDefault, lane_priority));
    cudaCheck(cudaStreamCreate(&g->comm_stream));
    cudaCheck(cudaEventCreateWithFlags(&g->ev_tail, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&g->ev_done, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&g->ev_batch, cudaEventDisableTiming));
    const size_t n = ex->lay.total, M = (size_t)B * T;
    for (int l = 0; l < g->nlanes; l++) {
        gpu_lane *ln = &g->lane[l];
        ln->index = l;
        if (l == 0) ln->stream = g->stream;
        else cudaCheck(cudaStreamCreateWithPriority(&ln->stream, cudaStreamDefault, lane_priority));
        cudaCheck(cudaStreamCreateWithPriority(&ln->wgrad_stream, cudaStreamDefault, lowest));
        cudaCheck(cudaStreamCreateWithPriority(&ln->rec_stream, cudaStreamDefault, highest));
        ln->gemm = gpu_matmul_create_sized(lane_workspace_bytes(g->recompute));
        ln->gemm_wgrad = gpu_matmul_create_sized(lane_workspace_bytes(g->recompute));
        cudaEvent_t *evs[] = { &ln->ev_wgrad[0], &ln->ev_wgrad[1], &ln->ev_finished, &ln->ev_to_rec,
                               &ln->ev_from_rec, &ln->ev_side, &ln->ev_top_wgrad, &ln->ev_join,
                               &ln->ev_wfeed[0], &ln->ev_wfeed[1], &ln->ev_wrec[0], &ln->ev_wrec[1],
                               &ln->ev_wfree[0], &ln->ev_wfree[1], &ln->ev_ce_fork, &ln->ev_ce_free };
        for (size_t i = 0; i < sizeof(evs) / sizeof(evs[0]); i++)
            cudaCheck(cudaEventCreateWithFlags(evs[i], cudaEventDisableTiming));
        ln->rec[0] = ln->rec_stream;
        if (g->recompute) ln->rec_gemm[0] = gpu_matmul_create_sized(GPU_MATMUL_WINDOW_WORKSPACE);
        for (int k = 0; g->wave_chunk && k < d.L; k++) {
            cudaCheck(cudaStreamCreateWithPriority(&ln->feed[k], cudaStreamDefault, lane_priority));
            ln->feed_gemm[k] = gpu_matmul_create_sized(GPU_MATMUL_WINDOW_WORKSPACE);
            ln->rec_gemm[k] = gpu_matmul_create_sized(GPU_MATMUL_WINDOW_WORKSPACE); /* the per-step loop's */
            if (k > 0) cudaCheck(cudaStreamCreateWithPriority(&ln->rec[k], cudaStreamDefault, highest));
            cudaCheck(cudaEventCreateWithFlags(&ln->ev_feed[k], cudaEventDisableTiming));
            cudaCheck(cudaEventCreateWithFlags(&ln->ev_rec[k], cudaEventDisableTiming));
        }
        lane_scratch_create(g, ln, B, T, d.D, d.L);
    }
    gpu_buffer bufs[MAX_BUFFERS];
    const int nb = buffer_table(g, &d, n, B, T, bufs);
    for (int i = 0; i < nb; i++) {
        if (!bufs[i].bytes) continue;
        *bufs[i].slot = dalloc(bufs[i].bytes, bufs[i].what);
        if (bufs[i].zeroed) cudaCheck(cudaMemsetAsync(*bufs[i].slot, 0, bufs[i].bytes, g->stream));
    }
    if (g->recompute) work_layout(g, &d, B, T, g->work, NULL, NULL, NULL, NULL);
    g->dc = g->c; /* the guard's copy comes after the final norm's backward, the merge's last reader */
    const size_t ce_bytes = gpu_ce_chunk_bytes(g->ce_rows, d.D, d.V);
    for (int l = 0; l < g->nlanes; l++) {
        g->lane[l].g32 = l == 0 ? g->g32 : g->g32_lanes + (size_t)(l - 1) * (n + gpu_ce_pad_floats(d.V, d.D));
        gpu_ce_chunk_place(&g->lane[l].ce, (char *)g->ce_bufs + l * ce_bytes, g->ce_rows, d.D, d.V);
    }
    g->tok_off_host = cc_malloc(4 * (d.V + 1) * GPU_MAX_LANES);
    g->tok_pos_host = cc_malloc(4 * M);
    g->loss_host = cc_malloc(4 * M);
    g->rank_host = cc_malloc(4 * M);
    g->partials_host = cc_malloc(4 * (size_t)grad_reduce_blocks());
    float *init = cc_malloc(4 * n);
    cc_layout_init_params(&ex->lay, init, cfg->seed);
    gpu_set_params(ex, init);
    free(init);
    return ex;
}
