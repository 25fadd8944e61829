/* The GPU executor: the model of docs/model.md with FP16 GEMM operands (cuBLASLt,
 * FP32 accumulation) and FP32 everything else; see the precision contract in
 * include/catchat/kernels.h. This file owns device memory, the streams and
 * GEMM contexts of the lanes, the batch upload, the loss read-back and the
 * optimizer's element-wise work; the step's program (program_gpu.c) orders
 * the launches of the forward and backward passes. What it runs and every buffer's size come
 * from its plan (plan_gpu.c), made from what gpu_step_plan_for reads off
 * the device. */
#include <math.h>
#include <stddef.h>
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
#include "gpu/step_gpu.h"

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
    cudaCheck(cudaMemsetAsync(g->g32, 0, sizeof(float) * ex->lay.total, g->stream));
    const int lanes = g->plan.lanes;
    upload_batch(ex, x, y, lanes);
    gpu_passes(ex, loss_scale, units, lanes);
    if (ex->check) gpu_step_collect_scans(ex); /* before the gradients' own scans: the first finding wins */
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
            /* (the step's end joined the tail's stream into the main one: scheduler_gpu.c) */
            cc_dist_allreduce_f32(ex->dist, g->g32, tail, g->stream);
        }
        for (int i = 0; ex->check && i < ex->lay.n; i++) {
            char name[CC_NAME_MAX + 8];
            snprintf(name, sizeof(name), "grad.%s", ex->lay.t[i].name);
            gpu_check_dev(ex, "parameter_gradients", name, -1, G32(ex, i), ex->lay.t[i].numel, 0, 0);
        }
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
    gpu_step_collect_timing(ex);
    return scored ? sum / (double)scored : 0.0;
}

static void gpu_score(cc_executor *ex, const int *x, const int *y, cc_score *score)
{
    gpu_impl *g = IMPL(ex);
    const int profile = g->profile; /* evaluation is not part of the timed step */
    g->profile = 0;
    upload_batch(ex, x, y, 1);
    gpu_issue_eval(ex);
    g->profile = profile;
    collect_loss(ex, score);
    if (ex->check) gpu_step_collect_scans(ex);
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

int cc_gpu_lanes(const cc_executor *ex) { return IMPL(ex)->plan.lanes; }

const gpu_step_plan *cc_gpu_plan(const cc_executor *ex) { return &IMPL(ex)->plan; }

const char *cc_gpu_refusal(const cc_executor *ex) { return IMPL(ex)->gru.refused[0] ? IMPL(ex)->gru.refused : NULL; }

const char *cc_gpu_wavefront(const cc_executor *ex, int *chunk)
{
    *chunk = IMPL(ex)->plan.wave_chunk;
    return IMPL(ex)->plan.wave_why;
}

int cc_gpu_wavefront_ran(const cc_executor *ex, int *top_chunked)
{
    *top_chunked = IMPL(ex)->wave_top_ran;
    return IMPL(ex)->wave_ran;
}

/* A buffer of the plan's table allocated (and zeroed where it says): the
 * executor's placement for gpu_bind_buffers. */
static void *allocate_buffer(void *ctx, const gpu_plan_buffer *b)
{
    if (!b->bytes) return NULL;
    void *at = dalloc(b->bytes, b->what);
    if (b->zeroed) cudaCheck(cudaMemsetAsync(at, 0, b->bytes, ((gpu_impl *)ctx)->stream));
    return at;
}

/* Frees what allocate_buffer allocated (the others are NULL, or inside another). */
static void free_buffers(cc_executor *ex)
{
    gpu_impl *g = IMPL(ex);
    gpu_plan_buffer bufs[GPU_BUF_COUNT];
    const int nb = gpu_plan_buffers(&g->plan, &ex->lay.dims, ex->lay.total, ex->B, ex->T, bufs);
    for (int i = 0; i < nb; i++)
        if (bufs[i].bytes) cudaFree(*gpu_buffer_slot(g, bufs[i].id));
}

static void gpu_destroy(cc_executor *ex)
{
    gpu_impl *g = IMPL(ex);
    cudaDeviceSynchronize(); /* every lane's streams */
    if (g->graph_exec) cudaGraphExecDestroy(g->graph_exec);
    gpu_programs_free(g);
    access_check_free(g);
    free_buffers(ex);
    cudaFree(g->acc32);
    cudaFree(g->plant_slot);
    gpu_lane_resources res;
    gpu_lane_resources_of(&g->plan, &res);
    for (int l = 0; l < g->plan.lanes; l++) {
        gpu_lane *ln = &g->lane[l];
        for (int k = 0; k < res.gemms; k++) gpu_matmul_destroy(ln->gemm[k]);
        for (int k = 0; k < res.streams; k++) {
            gpu_scratch_destroy(ln->sc[k]);
            if (l > 0 || k > 0) cudaStreamDestroy(ln->stream[k]); /* lane 0's own is the main stream, below */
        }
    }
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

/* The device's free memory, 0 where it cannot be read. */
static size_t device_free_bytes(void)
{
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
        cudaGetLastError(); /* a failed query leaves an error the next call would report */
        return 0;
    }
    return free_b;
}

int gpu_step_plan_for(gpu_step_plan *p, const cc_config *cfg, int B, int T)
{
    memset(p, 0, sizeof(*p));
    gpu_caps caps;
    if (gpu_caps_for_config(&caps, cfg) != 0) return -1;
    const gpu_plan_opts opts = { .force_rc_windows = cfg->rc_windows_forced > 0 ? cfg->rc_windows_forced : 0 };
    return gpu_plan_make(p, &caps, cfg, B, T, device_free_bytes(), &opts);
}

/* The kernel scratch of each of a lane's streams (kernels.h: gpu_scratch),
 * made before the first step for every call a step makes there, since a
 * launcher never grows it (a CUDA graph may be capturing). Lane 0 also runs
 * the whole batch in one lane (evaluation), so its rows are the batch's and
 * its recurrence stream also takes the whole batch's recurrence (the plan's
 * eval_impl). The lane's stream runs norm backwards over at most its rows
 * (the context norm, the layers' norms without the wavefront, the final
 * norm over a classifier chunk, which never holds more than a lane's rows);
 * the side stream the bias sums (launch_colsum_f16_acc) over its rows; the
 * recurrence streams the persistent kernels at the lane's batch on the SMs
 * they choose by (rec_caps; under the wavefront wave_caps, the first pair's both);
 * a wavefront's feed stream its layers' norm backward over a chunk of the
 * lane's sequences (layers that share a pair of streams share its scratch,
 * which every launch takes afresh). The recurrence streams run no
 * reduction. */
static void lane_scratch_create(gpu_impl *g, gpu_lane *ln, const gpu_lane_resources *res, int B, int T, int D)
{
    const int lane_B = B / g->plan.lanes, rows = (ln->index == 0 ? B : lane_B) * T;
    const unit_binding own = gpu_unit_binding(&g->plan, 0, UNIT_LANE, 0), side = gpu_unit_binding(&g->plan, 0, UNIT_SIDE, 0);
    const unit_binding rec0 = gpu_unit_binding(&g->plan, 0, UNIT_REC, 0);
    size_t need[GPU_LANE_STREAMS][SCRATCH_KINDS] = { { 0 } };
    gpu_scratch_need(need[own.stream], SCRATCH_REDUCE, rmsnorm_backward_scratch_bytes(rows, D, &g->plan.caps));
    gpu_scratch_need(need[side.stream], SCRATCH_REDUCE, gpu_gru_weight_grads_scratch_bytes(rows, D));
    gpu_gru_scratch_need(need[rec0.stream], &g->plan.rec_caps, &g->gru, g->plan.path, lane_B, T, D);
    if (ln->index == 0) gpu_gru_scratch_need(need[rec0.stream], &g->plan.rec_caps, &g->gru, g->plan.path, B, T, D);
    for (int k = 0; g->plan.wave_chunk && k < g->plan.wave_streams; k++) { /* a pair's scratch serves its layers in turn */
        const int chunk = g->plan.wave_chunk < T ? g->plan.wave_chunk : T;
        const int feed = gpu_unit_binding(&g->plan, 1, UNIT_FEED, k).stream, rec = gpu_unit_binding(&g->plan, 1, UNIT_REC, k).stream;
        gpu_scratch_need(need[feed], SCRATCH_REDUCE, rmsnorm_backward_scratch_bytes(lane_B * chunk, D, &g->plan.caps));
        gpu_gru_scratch_need(need[rec], &g->plan.wave_caps, &g->gru, g->plan.path, lane_B, T, D);
        /* under recompute each window's weight GEMMs follow its BPTT on the recurrence stream (program_gpu.c) */
        if (g->plan.recompute)
            gpu_scratch_need(need[rec], SCRATCH_REDUCE, gpu_gru_weight_grads_scratch_bytes(lane_B * chunk, D));
    }
    for (int k = 0; k < res->streams; k++) ln->sc[k] = gpu_scratch_create(need[k]);
}

/* Lane l's streams and cuBLASLt contexts as the plan lists them (lane 0's
 * own stream: the main one). Priorities: the recurrences first, then the
 * lanes' own and feed streams, then the side streams (weight gradients,
 * which nothing waits for until the step's end); side streams below the
 * lanes' measured faster than at the same priority (CHANGELOG.md). */
static void lane_create(gpu_impl *g, int l, const gpu_lane_resources *res, int lowest, int highest)
{
    gpu_lane *ln = &g->lane[l];
    const int lane_priority = highest < lowest ? highest + 1 : lowest;
    for (int k = 0; k < res->streams; k++) {
        const int prio = res->priority[k] == GPU_PRIO_REC ? highest : res->priority[k] == GPU_PRIO_SIDE ? lowest : lane_priority;
        if (l == 0 && k == 0) ln->stream[k] = g->stream;
        else cudaCheck(cudaStreamCreateWithPriority(&ln->stream[k], cudaStreamDefault, prio));
    }
    for (int k = 0; k < res->gemms; k++) ln->gemm[k] = gpu_matmul_create_sized(res->workspace[k]);
}

cc_executor *cc_gpu_executor_create(const cc_config *cfg, int B, int T)
{
    return cc_gpu_executor_create_planned(cfg, B, T, NULL);
}

cc_executor *cc_gpu_executor_create_planned(const cc_config *cfg, int B, int T, const gpu_step_plan *given)
{
    gpu_step_plan plan;
    if (given) plan = *given;
    else if (gpu_step_plan_for(&plan, cfg, B, T) != 0) return NULL;
    cc_executor *ex = cc_calloc(1, sizeof(*ex));
    gpu_impl *g = cc_calloc(1, sizeof(*g));
    gpu_state_init(ex, g, cfg, B, T, &plan);
    ex->ops = &GPU_OPS;
    const cc_dims d = ex->lay.dims;
    int lowest = 0, highest = 0;
    cudaCheck(cudaDeviceGetStreamPriorityRange(&lowest, &highest));
    cudaCheck(cudaStreamCreateWithPriority(&g->stream, cudaStreamDefault, highest < lowest ? highest + 1 : lowest));
    cudaCheck(cudaStreamCreate(&g->comm_stream));
    cudaCheck(cudaEventCreateWithFlags(&g->ev_batch, cudaEventDisableTiming));
    const size_t n = ex->lay.total, M = (size_t)B * T;
    gpu_lane_resources res;
    gpu_lane_resources_of(&g->plan, &res);
    for (int l = 0; l < g->plan.lanes; l++) {
        g->lane[l].index = l;
        lane_create(g, l, &res, lowest, highest);
        lane_scratch_create(g, &g->lane[l], &res, B, T, d.D);
    }
    gpu_work_part parts[GPU_WORK_MAX];
    size_t work_total = 0;
    const int np = gpu_plan_work(&g->plan, &d, T, parts, &work_total);
    gpu_bind_buffers(g, &d, n, B, T, parts, np, allocate_buffer, g);
    /* --plant-nan-grad-h's slot ([0] NaN, [1] the value it stands in for), made here: a plant may come
     * in a step that a CUDA graph captures */
    const float nan = NAN;
    g->plant_slot = dalloc(2 * sizeof(float), "the NaN plant's slot");
    cudaCheck(cudaMemcpy(g->plant_slot, &nan, sizeof(float), cudaMemcpyHostToDevice));
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
