/* The GPU executor: the model of model.md with FP16 GEMM operands (cuBLASLt,
 * FP32 accumulation) and FP32 everything else; see the precision contract in
 * include/catchat/kernels.h. This file is the dispatcher: it owns device
 * memory, the stream and the GEMM context, orders the launches, and computes
 * the loss-scale-dependent limits (grad_h clamp, ctx clamp) once per step. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/executor.h"
#include "catchat/gemm.h"
#include "catchat/dist.h"
#include "catchat/gpu_ops.h"
#include "catchat/kernels.h"
#include "catchat/safetensors.h"
#include "catchat/util.h"
#include "gpu/gpu_check.h"

typedef struct {
    cudaStream_t stream, comm_stream; /* the gradient all-reduce runs beside the BPTT */
    cudaEvent_t ev_tail, ev_done;
    cc_gemm_ctx *gemm;
    /* A layer's weight gradients (dW_hh, dW_ih, biases) run on wgrad_stream
     * beside the next layer's BPTT, which leaves most SMs idle; dgx16/dgh16
     * alternate between two buffers by layer parity so the BPTT never
     * overwrites what the side stream still reads. */
    cudaStream_t wgrad_stream;
    cc_gemm_ctx *gemm_wgrad;
    cudaEvent_t ev_bptt[2], ev_wgrad[2];
    /* parameters (FP32 master + FP16 working copy), gradients, moments */
    float *p32, *g32, *m, *v;
    uint16_t *p16;
    /* activations */
    int *x, *y;
    float *u, *a_ir, *gx, *gates, *ghn, *h, *gh;
    uint16_t *a16, *hprev16;
    float *s_ir, *qkv, *p, *c, *mm, *f_ir, *logits, *loss_row;
    uint16_t *s16, *o16, *f16, *dlogits16;
    int *rank;
    /* backward */
    float *du, *dtmp, *dhrec, *dqkv, *dsbuf, *dc;
    uint16_t *dgx16, *dgh16, *d16;
    int *tok_off, *tok_pos; /* embedding-backward CSR of the batch (device) */
    int *tok_off_host, *tok_pos_host;
    /* host staging */
    float *loss_host;
    int *rank_host;
    float *partials, *partials_host;
    int *nonfinite;
    unsigned long long *first_bad; /* NaN provenance scratch */
    /* profiling: an event at each phase boundary of a step */
    int profile, nmarks;
    cudaEvent_t marks[64];
    int mark_phase[64];
    double phase_ms[PH_COUNT];
} gpu_impl;

const char *const CC_PHASE_NAMES[PH_COUNT] = { "embedding, norms, input GEMMs", "recurrence forward",
                                               "context stream forward", "classifier + loss (fwd+bwd)",
                                               "context stream backward", "BPTT",
                                               "input-side weight GEMMs, norms bwd" };

/* Close the phase that ends here: time since the previous mark goes to `ph`. */
static void mark(gpu_impl *g, int ph)
{
    if (!g->profile || g->nmarks >= 64) return;
    cudaCheck(cudaEventRecord(g->marks[g->nmarks], g->stream));
    g->mark_phase[g->nmarks++] = ph;
}

static void collect_marks(gpu_impl *g)
{
    if (!g->profile || g->nmarks < 2) {
        g->nmarks = 0;
        return;
    }
    cudaCheck(cudaEventSynchronize(g->marks[g->nmarks - 1]));
    for (int i = 1; i < g->nmarks; i++) {
        float ms = 0;
        cudaCheck(cudaEventElapsedTime(&ms, g->marks[i - 1], g->marks[i]));
        g->phase_ms[g->mark_phase[i]] += ms;
    }
    g->nmarks = 0;
}

#define IMPL(ex) ((gpu_impl *)(ex)->impl)

/* NaN provenance (see finite.h): scan a stage's output on the device when
 * checking is on. One scan and one synchronisation per stage: costly, off by
 * default. width/T locate the element in a [B,T,width] tensor. */
static void check_dev(cc_executor *ex, const char *stage, const char *tensor, int layer, const void *ptr, size_t n,
                      int is_half, int width)
{
    if (!ex->check || ex->check->found) return;
    gpu_impl *g = ex->impl;
    unsigned long long first = 0;
    cudaCheck(cudaMemsetAsync(g->first_bad, 0xff, sizeof(unsigned long long), g->stream));
    launch_find_nonfinite(ptr, n, is_half, g->first_bad, g->stream);
    cudaCheck(cudaMemcpyAsync(&first, g->first_bad, sizeof(first), cudaMemcpyDeviceToHost, g->stream));
    cudaCheck(cudaStreamSynchronize(g->stream));
    if (first == ~0ULL) return;
    float v = 0;
    if (is_half) {
        uint16_t hv = 0;
        cudaCheck(cudaMemcpy(&hv, (const uint16_t *)ptr + first, 2, cudaMemcpyDeviceToHost));
        v = cc_half_to_float(hv);
    } else {
        cudaCheck(cudaMemcpy(&v, (const float *)ptr + first, 4, cudaMemcpyDeviceToHost));
    }
    cc_finite_set(ex->check, stage, tensor, layer, (long)first, v, width, ex->T);
}
#define P32(ex, idx) (IMPL(ex)->p32 + (ex)->lay.t[(idx)].offset)
#define P16(ex, idx) (IMPL(ex)->p16 + (ex)->lay.t[(idx)].offset)
#define G32(ex, idx) (IMPL(ex)->g32 + (ex)->lay.t[(idx)].offset)

static void *dalloc(size_t bytes, const char *what) { return cc_device_alloc(bytes, what); }

/* Forward over the batch already on the device; leaves logits. */
static void forward(cc_executor *ex)
{
    gpu_impl *g = IMPL(ex);
    const cc_dims *d = &ex->lay.dims;
    const int B = ex->B, T = ex->T, M = B * T, D = d->D, L = d->L;
    const size_t MD = (size_t)M * D;
    const float eps = (float)d->rms_eps, fl = (float)d->rms_floor, cap = (float)d->inv_rms_max;
    cudaStream_t s = g->stream;
    const cc_layout *lay = &ex->lay;

    mark(g, PH_INPUT);
    launch_embedding_forward(g->u, g->x, P32(ex, lay->embed), M, D, s);
    check_dev(ex, "embedding", "u0", -1, g->u, MD, 0, D);
    for (int l = 0; l < L; l++) {
        float *ul = g->u + l * MD, *hl = g->h + l * MD, *gxl = g->gx + l * 3 * MD;
        float *gatesl = g->gates + l * 3 * MD, *ghnl = g->ghn + l * MD;
        uint16_t *al = g->a16 + l * MD, *hp = g->hprev16 + l * MD;
        launch_rmsnorm_forward(NULL, al, g->a_ir + (size_t)l * M, ul, P32(ex, lay->gru_norm[l]), M, D, eps, fl, cap, s);
        check_dev(ex, "rmsnorm", "a", l, al, MD, 1, D);
        cc_gemm(g->gemm, gxl, 3 * D, al, D, 0, P16(ex, lay->gru_wih[l]), D, 1, M, 3 * D, D, 1.f, 0.f,
                P32(ex, lay->gru_bih[l]), s);
        check_dev(ex, "input_projection", "gx", l, gxl, 3 * MD, 0, 3 * D);
        mark(g, PH_INPUT);
        gpu_gru_forward(g->gemm, hl, gatesl, ghnl, hp, gxl, P16(ex, lay->gru_whh[l]), P32(ex, lay->gru_bhh[l]),
                        g->gh, B, T, D, s);
        mark(g, PH_REC_FWD);
        check_dev(ex, "gru_forward", "h", l, hl, MD, 0, D);
        launch_add(ul + MD, ul, hl, MD, s);
    }
    const float *uL = g->u + (size_t)L * MD;
    launch_rmsnorm_forward(NULL, g->s16, g->s_ir, uL, P32(ex, lay->ctx_norm), M, D, eps, fl, cap, s);
    check_dev(ex, "ctx_rmsnorm", "s", -1, g->s16, MD, 1, D);
    cc_gemm(g->gemm, g->qkv, 3 * D, g->s16, D, 0, P16(ex, lay->ctx_qkv), D, 1, M, 3 * D, D, 1.f, 0.f, NULL, s);
    check_dev(ex, "qkv_projection", "qkv", -1, g->qkv, 3 * MD, 0, 3 * D);
    launch_attention_forward(NULL, g->o16, g->p, g->qkv, B, T, D, d->H, d->W, s);
    check_dev(ex, "attention_forward", "o", -1, g->o16, MD, 1, D);
    cc_gemm(g->gemm, g->c, D, g->o16, D, 0, P16(ex, lay->ctx_out), D, 1, M, D, D, 1.f, 0.f, NULL, s);
    check_dev(ex, "ctx_out_projection", "c", -1, g->c, MD, 0, D);
    launch_add(g->mm, uL, g->c, MD, s);
    launch_rmsnorm_forward(NULL, g->f16, g->f_ir, g->mm, P32(ex, lay->final_norm), M, D, eps, fl, cap, s);
    check_dev(ex, "final_rmsnorm", "f", -1, g->f16, MD, 1, D);
    mark(g, PH_CONTEXT_FWD);
    cc_gemm(g->gemm, g->logits, d->V, g->f16, D, 0, P16(ex, lay->lm_head), D, 1, M, d->V, D, 1.f, 0.f, NULL, s);
    check_dev(ex, "classifier", "logits", -1, g->logits, (size_t)M * d->V, 0, d->V);
}

static void upload_batch(cc_executor *ex, const int *x, const int *y)
{
    gpu_impl *g = IMPL(ex);
    const size_t n = (size_t)ex->B * ex->T;
    cudaCheck(cudaMemcpyAsync(g->x, x, sizeof(int) * n, cudaMemcpyHostToDevice, g->stream));
    cudaCheck(cudaMemcpyAsync(g->y, y, sizeof(int) * n, cudaMemcpyHostToDevice, g->stream));
    const int V = ex->lay.dims.V;
    cudaCheck(cudaStreamSynchronize(g->stream)); /* the host CSR buffers are reused */
    cc_embedding_csr(x, (int)n, V, g->tok_off_host, g->tok_pos_host);
    cudaCheck(cudaMemcpyAsync(g->tok_off, g->tok_off_host, sizeof(int) * (V + 1), cudaMemcpyHostToDevice, g->stream));
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
            score->top1 += g->rank_host[i] == 1;
            score->top5 += g->rank_host[i] >= 1;
        }
    }
    if (score) score->loss_sum += sum;
    return sum;
}

static void backward(cc_executor *ex, double loss_scale, long scored)
{
    gpu_impl *g = IMPL(ex);
    const cc_dims *d = &ex->lay.dims;
    const cc_layout *lay = &ex->lay;
    const int B = ex->B, T = ex->T, M = B * T, D = d->D, L = d->L;
    const size_t MD = (size_t)M * D;
    const float eps = (float)d->rms_eps, fl = (float)d->rms_floor, cap = (float)d->inv_rms_max;
    cudaStream_t s = g->stream;
    /* The dispatcher's one multiplication: user clamps are unscaled values on
     * the mean loss; the kernels see gradients of the summed loss × S. */
    const double unit = loss_scale * (double)scored;
    const float clamp_limit = (float)(ex->cfg.grad_h_clamp * unit);
    const float ctx_limit = (float)(ex->cfg.ctx_grad_clamp * unit);

    /* classifier */
    check_dev(ex, "classifier_backward", "dlogits", -1, g->dlogits16, (size_t)M * d->V, 1, d->V);
    cc_gemm(g->gemm, G32(ex, lay->lm_head), D, g->dlogits16, d->V, 1, g->f16, D, 0, d->V, D, M, 1.f, 1.f, NULL, s);
    cc_gemm(g->gemm, g->dtmp, D, g->dlogits16, d->V, 0, P16(ex, lay->lm_head), D, 0, M, D, d->V, 1.f, 0.f, NULL, s);
    cudaCheck(cudaMemsetAsync(g->du, 0, sizeof(float) * MD, s));
    launch_rmsnorm_backward(g->du, G32(ex, lay->final_norm), g->dtmp, g->mm, P32(ex, lay->final_norm), g->f_ir, M, D,
                            eps, fl, cap, s);
    mark(g, PH_CLASSIFIER);
    check_dev(ex, "final_rmsnorm_backward", "dm", -1, g->du, MD, 0, D);
    /* context stream */
    cudaCheck(cudaMemcpyAsync(g->dc, g->du, sizeof(float) * MD, cudaMemcpyDeviceToDevice, s));
    launch_rownorm_clamp(g->dc, M, D, ctx_limit, s);
    launch_f32_to_f16(g->d16, g->dc, MD, s);
    cc_gemm(g->gemm, G32(ex, lay->ctx_out), D, g->d16, D, 1, g->o16, D, 0, D, D, M, 1.f, 1.f, NULL, s);
    cc_gemm(g->gemm, g->dtmp, D, g->d16, D, 0, P16(ex, lay->ctx_out), D, 0, M, D, D, 1.f, 0.f, NULL, s);
    launch_attention_backward(g->dqkv, g->dsbuf, g->dtmp, g->p, g->qkv, B, T, D, d->H, d->W, s);
    check_dev(ex, "attention_backward", "dqkv", -1, g->dqkv, 3 * MD, 0, 3 * D);
    launch_f32_to_f16(g->d16, g->dqkv, 3 * MD, s);
    cc_gemm(g->gemm, G32(ex, lay->ctx_qkv), D, g->d16, 3 * D, 1, g->s16, D, 0, 3 * D, D, M, 1.f, 1.f, NULL, s);
    cc_gemm(g->gemm, g->dtmp, D, g->d16, 3 * D, 0, P16(ex, lay->ctx_qkv), D, 0, M, D, 3 * D, 1.f, 0.f, NULL, s);
    const float *uL = g->u + (size_t)L * MD;
    launch_rmsnorm_backward(g->du, G32(ex, lay->ctx_norm), g->dtmp, uL, P32(ex, lay->ctx_norm), g->s_ir, M, D, eps, fl,
                            cap, s);
    check_dev(ex, "ctx_rmsnorm_backward", "du", -1, g->du, MD, 0, D);
    /* token stream: du is dL/du^{l+1}, which is also dL/dh^l through the residual */
    for (int l = L - 1; l >= 0; l--) {
        const float *hl = g->h + l * MD, *gatesl = g->gates + l * 3 * MD, *ghnl = g->ghn + l * MD;
        mark(g, l == L - 1 ? PH_CONTEXT_BWD : PH_WGRAD);
        if (l == L - 1 && ex->dist && ex->dist->active) {
            /* ctx.*, final_norm and lm_head lie at the end of the buffer and are final
             * now: reduce them on the side stream while the recurrence runs */
            const size_t tail = lay->t[lay->ctx_norm].offset;
            cudaCheck(cudaEventRecord(g->ev_tail, s));
            cudaCheck(cudaStreamWaitEvent(g->comm_stream, g->ev_tail, 0));
            cc_dist_allreduce_f32(ex->dist, g->g32 + tail, lay->total - tail, g->comm_stream);
        }
        const int par = l & 1;
        uint16_t *dgx = g->dgx16 + par * 3 * MD, *dgh = g->dgh16 + par * 3 * MD;
        if (l + 2 < L) /* layer l+2's weight gradients read this buffer pair */
            cudaCheck(cudaStreamWaitEvent(s, g->ev_wgrad[par], 0));
        gpu_gru_bptt(g->gemm, dgx, dgh, g->dhrec, g->du, hl, gatesl, ghnl, P16(ex, lay->gru_whh[l]), B, T, D,
                     clamp_limit, s);
        mark(g, PH_BPTT);
        check_dev(ex, "gru_backward", "dgx", l, dgx, 3 * MD, 1, 3 * D);
        /* weight gradients, each one GEMM over all B·T positions, beside the next layer's BPTT */
        cudaCheck(cudaEventRecord(g->ev_bptt[par], s));
        cudaCheck(cudaStreamWaitEvent(g->wgrad_stream, g->ev_bptt[par], 0));
        gpu_gru_weight_grads(g->gemm_wgrad, G32(ex, lay->gru_whh[l]), G32(ex, lay->gru_bhh[l]), dgh,
                             g->hprev16 + l * MD, B, T, D, g->wgrad_stream);
        cc_gemm(g->gemm_wgrad, G32(ex, lay->gru_wih[l]), D, dgx, 3 * D, 1, g->a16 + l * MD, D, 0, 3 * D, D, M, 1.f,
                1.f, NULL, g->wgrad_stream);
        launch_colsum_f16_acc(G32(ex, lay->gru_bih[l]), dgx, M, 3 * D, g->wgrad_stream);
        cudaCheck(cudaEventRecord(g->ev_wgrad[par], g->wgrad_stream));
        /* the input gradient stays on the critical path */
        cc_gemm(g->gemm, g->dtmp, D, dgx, 3 * D, 0, P16(ex, lay->gru_wih[l]), D, 0, M, D, 3 * D, 1.f, 0.f, NULL, s);
        launch_rmsnorm_backward(g->du, G32(ex, lay->gru_norm[l]), g->dtmp, g->u + l * MD, P32(ex, lay->gru_norm[l]),
                                g->a_ir + (size_t)l * M, M, D, eps, fl, cap, s);
        check_dev(ex, "rmsnorm_backward", "du", l, g->du, MD, 0, D);
    }
    launch_embedding_backward(G32(ex, lay->embed), g->du, g->tok_off, g->tok_pos, d->V, D, s);
    cudaCheck(cudaStreamWaitEvent(s, g->ev_wgrad[0], 0)); /* layer 0's weight gradients, and so all of them */
    if (ex->dist && ex->dist->active) { /* the head of the buffer, then wait for both halves */
        const size_t tail = lay->t[lay->ctx_norm].offset;
        cc_dist_allreduce_f32(ex->dist, g->g32, tail, s);
        cudaCheck(cudaEventRecord(g->ev_done, g->comm_stream));
        cudaCheck(cudaStreamWaitEvent(s, g->ev_done, 0));
    }
    for (int i = 0; ex->check && i < lay->n; i++) {
        char name[CC_NAME_MAX + 8];
        snprintf(name, sizeof(name), "grad.%s", lay->t[i].name);
        check_dev(ex, "parameter_gradients", name, -1, G32(ex, i), lay->t[i].numel, 0, 0);
    }
    mark(g, PH_WGRAD);
    ex->grad_unit = unit;
}

static double gpu_forward_backward(cc_executor *ex, const int *x, const int *y, double loss_scale)
{
    gpu_impl *g = IMPL(ex);
    const int M = ex->B * ex->T;
    double counts[2] = { 0, 0 }; /* scored positions here, then over all ranks */
    for (int i = 0; i < M; i++) counts[0] += y[i] >= 0;
    cc_dist_allreduce_host(ex->dist, counts, 1, g->stream);
    const long scored = (long)counts[0];
    g->nmarks = 0;
    cudaCheck(cudaMemsetAsync(g->g32, 0, sizeof(float) * ex->lay.total, g->stream));
    upload_batch(ex, x, y);
    forward(ex);
    launch_crossentropy(g->loss_row, g->rank, g->dlogits16, g->logits, g->y, M, ex->lay.dims.V, (float)loss_scale,
                        g->stream);
    if (scored > 0) backward(ex, loss_scale, scored);
    else ex->grad_unit = loss_scale;
    double sum = collect_loss(ex, NULL); /* also waits for the backward */
    cc_dist_allreduce_host(ex->dist, &sum, 1, g->stream);
    collect_marks(g);
    return scored ? sum / (double)scored : 0.0;
}

static void gpu_score(cc_executor *ex, const int *x, const int *y, cc_score *score)
{
    gpu_impl *g = IMPL(ex);
    const int profile = g->profile; /* evaluation is not part of the timed step */
    g->profile = 0;
    upload_batch(ex, x, y);
    forward(ex);
    g->profile = profile;
    launch_crossentropy(g->loss_row, g->rank, NULL, g->logits, g->y, ex->B * ex->T, ex->lay.dims.V, 1.f, g->stream);
    collect_loss(ex, score);
}

static double gpu_grad_scale_sumsq(cc_executor *ex, double mul, int *nonfinite)
{
    gpu_impl *g = IMPL(ex);
    const int nb = optimizer_sumsq_blocks();
    cudaCheck(cudaMemsetAsync(g->nonfinite, 0, sizeof(int), g->stream));
    launch_scale_sumsq(g->g32, ex->lay.total, (float)mul, g->partials, g->nonfinite, g->stream);
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

void cc_gpu_profile_enable(cc_executor *ex, int on)
{
    gpu_impl *g = IMPL(ex);
    if (on && !g->profile)
        for (int i = 0; i < 64; i++) cudaCheck(cudaEventCreate(&g->marks[i]));
    g->profile = on;
    g->nmarks = 0;
}

void cc_gpu_profile_take(cc_executor *ex, double ms[PH_COUNT])
{
    gpu_impl *g = IMPL(ex);
    for (int i = 0; i < PH_COUNT; i++) {
        ms[i] = g->phase_ms[i];
        g->phase_ms[i] = 0;
    }
}

static void gpu_destroy(cc_executor *ex)
{
    gpu_impl *g = IMPL(ex);
    if (g->profile)
        for (int i = 0; i < 64; i++) cudaEventDestroy(g->marks[i]);
    void *bufs[] = { g->p32, g->g32, g->m, g->v, g->p16, g->x, g->y, g->u, g->a_ir, g->gx, g->gates, g->ghn,
                     g->h, g->gh, g->a16, g->hprev16, g->s_ir, g->qkv, g->p, g->c, g->mm, g->f_ir, g->logits,
                     g->loss_row, g->s16, g->o16, g->f16, g->dlogits16, g->rank, g->du, g->dtmp, g->dhrec,
                     g->dqkv, g->dsbuf, g->dc, g->dgx16, g->dgh16, g->d16, g->partials, g->nonfinite, g->first_bad, g->tok_off, g->tok_pos };
    cudaStreamSynchronize(g->stream);
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) cudaFree(bufs[i]);
    cudaStreamSynchronize(g->wgrad_stream);
    cc_gemm_destroy(g->gemm);
    cc_gemm_destroy(g->gemm_wgrad);
    for (int i = 0; i < 2; i++) {
        cudaEventDestroy(g->ev_bptt[i]);
        cudaEventDestroy(g->ev_wgrad[i]);
    }
    cudaStreamDestroy(g->wgrad_stream);
    cudaEventDestroy(g->ev_tail);
    cudaEventDestroy(g->ev_done);
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

cc_executor *cc_gpu_executor_create(const cc_config *cfg, int B, int T)
{
    int dev = 0;
    struct cudaDeviceProp prop;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaGetDeviceProperties(&prop, dev));
    if (prop.major < 9) {
        cc_error("GPU '%s' is sm_%d%d; this build targets sm_%s and its kernels need sm_90 or newer "
                 "(tensor-core and shared-memory sizes); use device = cpu", prop.name, prop.major, prop.minor,
                 CATCHAT_CUDA_ARCHS);
        return NULL;
    }
    if (cfg->d_model % 8 != 0) {
        cc_error("[model] d_model: %d; the GPU path needs a multiple of 8 (16-byte FP16 rows)", cfg->d_model);
        return NULL;
    }
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
    cudaCheck(cudaStreamCreate(&g->stream));
    cudaCheck(cudaStreamCreate(&g->comm_stream));
    cudaCheck(cudaEventCreateWithFlags(&g->ev_tail, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&g->ev_done, cudaEventDisableTiming));
    g->gemm = cc_gemm_create();
    cudaCheck(cudaStreamCreate(&g->wgrad_stream));
    g->gemm_wgrad = cc_gemm_create();
    for (int i = 0; i < 2; i++) {
        cudaCheck(cudaEventCreateWithFlags(&g->ev_bptt[i], cudaEventDisableTiming));
        cudaCheck(cudaEventCreateWithFlags(&g->ev_wgrad[i], cudaEventDisableTiming));
    }
    const size_t n = ex->lay.total, M = (size_t)B * T, D = d.D, L = d.L, V = d.V;
    const size_t MD = M * D;
    g->p32 = dalloc(4 * n, "parameters");
    g->g32 = dalloc(4 * n, "gradients");
    g->m = dalloc(4 * n, "AdamW m");
    g->v = dalloc(4 * n, "AdamW v");
    g->p16 = dalloc(2 * n, "FP16 weights");
    g->x = dalloc(4 * M, "tokens");
    g->y = dalloc(4 * M, "targets");
    g->u = dalloc(4 * (L + 1) * MD, "residual stream");
    g->a_ir = dalloc(4 * L * M, "norm stats");
    g->gx = dalloc(4 * L * 3 * MD, "input projections");
    g->gates = dalloc(4 * L * 3 * MD, "gates");
    g->ghn = dalloc(4 * L * MD, "ghn");
    g->h = dalloc(4 * L * MD, "GRU states");
    g->gh = dalloc(4 * (size_t)B * 3 * D, "recurrent product");
    g->a16 = dalloc(2 * L * MD, "normalised inputs");
    g->hprev16 = dalloc(2 * L * MD, "h_{t-1} FP16");
    g->s_ir = dalloc(4 * M, "ctx norm stats");
    g->qkv = dalloc(4 * 3 * MD, "qkv");
    g->p = dalloc(4 * (size_t)B * d.H * T * d.W, "attention probabilities");
    g->c = dalloc(4 * MD, "context output");
    g->mm = dalloc(4 * MD, "merge");
    g->f_ir = dalloc(4 * M, "final norm stats");
    g->logits = dalloc(4 * M * V, "logits");
    g->loss_row = dalloc(4 * M, "losses");
    g->rank = dalloc(4 * M, "ranks");
    g->s16 = dalloc(2 * MD, "ctx norm out");
    g->o16 = dalloc(2 * MD, "attention out");
    g->f16 = dalloc(2 * MD, "final norm out");
    g->dlogits16 = dalloc(2 * M * V, "dlogits");
    g->du = dalloc(4 * MD, "du");
    g->dtmp = dalloc(4 * MD, "dtmp");
    g->dhrec = dalloc(4 * (size_t)B * D, "dh recurrent");
    g->dqkv = dalloc(4 * 3 * MD, "dqkv");
    g->dsbuf = dalloc(4 * (size_t)B * d.H * T * d.W, "attention ds");
    g->dc = dalloc(4 * MD, "dc");
    g->dgx16 = dalloc(2 * 2 * 3 * MD, "dgx (two layers' worth)");
    g->dgh16 = dalloc(2 * 2 * 3 * MD, "dgh (two layers' worth)");
    g->d16 = dalloc(2 * 3 * MD, "FP16 gradient operand");
    g->partials = dalloc(4 * (size_t)optimizer_sumsq_blocks(), "norm partials");
    g->nonfinite = dalloc(sizeof(int), "non-finite count");
    g->first_bad = dalloc(sizeof(unsigned long long), "non-finite index");
    g->tok_off = dalloc(4 * (V + 1), "token offsets");
    g->tok_pos = dalloc(4 * M, "token positions");
    g->tok_off_host = cc_malloc(4 * (V + 1));
    g->tok_pos_host = cc_malloc(4 * M);
    g->loss_host = cc_malloc(4 * M);
    g->rank_host = cc_malloc(4 * M);
    g->partials_host = cc_malloc(4 * (size_t)optimizer_sumsq_blocks());
    cudaCheck(cudaMemsetAsync(g->m, 0, 4 * n, g->stream));
    cudaCheck(cudaMemsetAsync(g->v, 0, 4 * n, g->stream));
    cudaCheck(cudaMemsetAsync(g->g32, 0, 4 * n, g->stream));
    float *init = cc_malloc(4 * n);
    cc_layout_init_params(&ex->lay, init, cfg->seed);
    gpu_set_params(ex, init);
    free(init);
    return ex;
}
