/* The classifier and its loss, chunk by chunk of rows (gpu_crossentropy.h).
 *
 * For each chunk, on one stream: the final norm of m = u^L + c (m written
 * over c, which nothing reads after the merge; the norm's FP16 output to the
 * chunk), the logits (FP16, row pitch ldv), the loss with dlogits in place,
 * dx = dlogits·W, dW_lm += dlogitsᵀ·f and the final norm's backward into du.
 * The loss's gradient needs only its own row's logits and the step's scale,
 * both known here, so the whole classifier runs in the forward and only
 * du = dL/dm, [rows, D], outlives the chunk: the [B·T, V] logits and
 * dlogits are never held. The GEMMs run over ldv classes, not V: at an
 * unaligned V (50257) cuBLASLt's kernels for the odd dimension took 1.6-7x
 * as long as for the padded one (bench/classifier_probe --unpadded); the
 * padding rows of W are zeros, their logits 0 (never counted), their
 * gradient 0, and dW's padding rows are scratch no one reads. A weight GEMM
 * a chunk costs a read and write of dW_lm ([V, D] FP32), which is why the
 * plan gives a chunk as many rows as its memory budget allows (gpu_plan.h,
 * ce_rows).
 *
 * Chunks follow the rows of a->rw: with a time window { len, T } a chunk is
 * whole segments (len rows of each of several sequences, the chunk buffers
 * their rows one after another: the kernels' window side) or, where a chunk
 * holds fewer rows than a segment, a run of rows inside one. */
#include "catchat/gpu_crossentropy.h"
#include "gpu/gpu_check.h"

#define ALIGN256(x) (((x) + 255) & ~(size_t)255)

int gpu_ce_ldv(int V) { return (V + GPU_LOGITS_ALIGN - 1) / GPU_LOGITS_ALIGN * GPU_LOGITS_ALIGN; }

size_t gpu_ce_pad_floats(int V, int D) { return (size_t)(gpu_ce_ldv(V) - V) * D; }

size_t gpu_ce_row_bytes(int D, int V) { return 2 * (size_t)gpu_ce_ldv(V) + 2 * (size_t)D + 4 * (size_t)D; }

void gpu_ce_chunk_place(gpu_ce_chunk *ck, void *base, int rows, int D, int V)
{
    const size_t R = (size_t)rows, ldv = (size_t)gpu_ce_ldv(V);
    const size_t b_logits = ALIGN256(2 * R * ldv), b_f16 = ALIGN256(2 * R * D);
    char *p = base;
    ck->rows = rows;
    ck->ldv = (int)ldv;
    ck->logits16 = p ? p : NULL;
    ck->f16 = p ? p + b_logits : NULL;
    ck->dx = p ? (float *)(p + b_logits + b_f16) : NULL;
}

size_t gpu_ce_chunk_bytes(int rows, int D, int V)
{
    const size_t R = (size_t)rows;
    return ALIGN256(2 * R * gpu_ce_ldv(V)) + ALIGN256(2 * R * D) + ALIGN256(4 * R * D);
}

/* dW[V, D] += dlogitsᵀ·f over a chunk's n rows. */
static void chunk_dw(gpu_matmul_ctx *gm, const gpu_ce_chunk *ck, const gpu_ce_args *a, int n, cudaStream_t s)
{
    gpu_matmul(gm, a->dw, a->D, ck->logits16, ck->ldv, 1, ck->f16, a->D, 0, ck->ldv, a->D, n, 1.f, 1.f, NULL, s);
}

/* One chunk: n rows from x-side row `first` (a pointer offset in rows), their
 * window rw (the chunk buffers are its window side). */
static void run_chunk(gpu_matmul_ctx *gm, const gpu_ce_chunk *ck, const gpu_ce_args *a, size_t first, int n,
                      row_window rw, int last, gpu_scratch *sc, cudaStream_t s)
{
    const int D = a->D, ldv = ck->ldv, grad = a->du != NULL;
    const size_t xd = first * D;
    float *cm = a->c + xd;
    launch_add_rmsnorm_forward(cm, NULL, ck->f16, a->f_ir + first, a->u + xd, cm, a->g_final, n, D, rw, a->nc, s);
    if (a->check) a->check(a->check_ctx, "final_rmsnorm", "f", ck->f16, (size_t)n * D, 1, D);
    /* every product runs over ldv classes: the padding rows of W are 0, so are their logits and gradients */
    gpu_matmul_f16out(gm, ck->logits16, ldv, ck->f16, D, 0, a->w16, D, 1, n, ldv, D, 1.f, 0.f, s);
    if (a->check) a->check(a->check_ctx, "classifier", "logits", ck->logits16, (size_t)n * ldv, 1, ldv);
    launch_crossentropy(a->loss + first, a->rank + first, ck->logits16, ldv, a->y + first, n, a->V, rw, a->grad_scale,
                        grad, s);
    if (!grad) return;
    if (a->check) a->check(a->check_ctx, "classifier_backward", "dlogits", ck->logits16, (size_t)n * ldv, 1, ldv);
    /* dx[n, D] = dlogits[n, ldv]·W[ldv, D] */
    gpu_matmul(gm, ck->dx, D, ck->logits16, ldv, 0, a->w16, D, 0, n, D, ldv, 1.f, 0.f, NULL, s);
    /* dW[V, D] += dlogitsᵀ·f (the last chunk's left to gpu_crossentropy_last_dw where asked) */
    if (!(last && a->defer_last_dw)) chunk_dw(gm, ck, a, n, s);
    launch_rmsnorm_backward(a->du + xd, a->dg_final, ck->dx, cm, a->g_final, a->f_ir + first, n, D, rw, a->nc,
                            a->caps, sc, s);
}

void gpu_crossentropy(gpu_matmul_ctx *gm, const gpu_ce_chunk *ck, const gpu_ce_args *a, gpu_scratch *sc,
                      cudaStream_t s)
{
    const int M = a->M, D = a->D, R = ck->rows;
    const row_window rw = a->rw;
    const int windowed = rw.seg < M && rw.seg != rw.stride;
    if (a->du) { /* the final norm's backward accumulates into du */
        if (windowed)
            cudaCheck(cudaMemset2DAsync(a->du, sizeof(float) * (size_t)rw.stride * D, 0,
                                        sizeof(float) * (size_t)rw.seg * D, M / rw.seg, s));
        else
            cudaCheck(cudaMemsetAsync(a->du, 0, sizeof(float) * (size_t)M * D, s));
    }
    if (!windowed) {
        for (int i = 0; i < M; i += R) {
            const int n = M - i < R ? M - i : R;
            run_chunk(gm, ck, a, (size_t)i, n, row_window_all(n), i + n >= M, sc, s);
        }
        return;
    }
    const int seg = rw.seg, nseg = M / seg;
    if (R >= seg) { /* whole segments a chunk */
        const int per = R / seg;
        for (int j = 0; j < nseg; j += per) {
            const int q = nseg - j < per ? nseg - j : per;
            const row_window w = { seg, rw.stride, seg };
            run_chunk(gm, ck, a, (size_t)j * rw.stride, q * seg, w, j + q >= nseg, sc, s);
        }
        return;
    }
    for (int j = 0; j < nseg; j++) /* runs of rows inside each segment */
        for (int i = 0; i < seg; i += R) {
            const int n = seg - i < R ? seg - i : R;
            run_chunk(gm, ck, a, (size_t)j * rw.stride + i, n, row_window_all(n), j == nseg - 1 && i + n >= seg, sc,
                      s);
        }
}

/* Rows of the last chunk gpu_crossentropy runs over a (its loops' last). */
static int last_chunk_rows(const gpu_ce_chunk *ck, const gpu_ce_args *a)
{
    const int M = a->M, R = ck->rows, seg = a->rw.seg;
    if (!(seg < M && seg != a->rw.stride)) return M - (M - 1) / R * R;
    if (R >= seg) {
        const int per = R / seg, nseg = M / seg;
        return (nseg - (nseg - 1) / per * per) * seg;
    }
    return seg - (seg - 1) / R * R;
}

void gpu_crossentropy_last_dw(gpu_matmul_ctx *gm, const gpu_ce_chunk *ck, const gpu_ce_args *a, cudaStream_t s)
{
    chunk_dw(gm, ck, a, last_chunk_rows(ck, a), s);
}
