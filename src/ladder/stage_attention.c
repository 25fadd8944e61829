/* attention (context attention): sliding-window forward and backward, on the
 * FP32 kernels and both tensor-core ones (the band kernel at head sizes 64,
 * 128 and 256 with W ≤ 129; the tiled one at every head size up to 256, the
 * odd ones padded inside, and every window), with windows shorter and
 * longer than T, against the CPU reference. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/cpu_ref.h"
#include "catchat/kernels.h"
#include "catchat/util.h"
#include "ladder/ladder.h"

/* Query q's scaled score against key k in head j, in double. */
static double ref_score(const float *qkv, int b, int q, int k, int j, int T, int D, int hd)
{
    const float *qr = qkv + ((size_t)b * T + q) * 3 * D + j * hd, *kr = qkv + ((size_t)b * T + k) * 3 * D + D + j * hd;
    double dot = 0;
    for (int c = 0; c < hd; c++) dot += (double)qr[c] * kr[c];
    return dot / sqrt((double)hd);
}

/* Each query's log-sum-exp of its scaled scores over the window, in double:
 * what the tensor-core backward recomputes the probabilities from. */
static void ref_attention_lse(float *lse, const float *qkv, int B, int T, int D, int H, int W)
{
    const int hd = D / H;
    for (int b = 0; b < B; b++)
        for (int j = 0; j < H; j++)
            for (int q = 0; q < T; q++) {
                const int k0 = q - W + 1 > 0 ? q - W + 1 : 0;
                double mx = -INFINITY, sum = 0;
                for (int k = k0; k <= q; k++) mx = fmax(mx, ref_score(qkv, b, q, k, j, T, D, hd));
                for (int k = k0; k <= q; k++) sum += exp(ref_score(qkv, b, q, k, j, T, D, hd) - mx);
                lse[((size_t)b * H + j) * T + q] = (float)(mx + log(sum));
            }
}


/* src's [B,T,width] FP16 rows into dst, with rows [from, T) of each sequence
 * NaN: what a wavefront chunk's launch finds past the rows it may read
 * (another step's values, or any bits at all). */
static void *poisoned_rows(void *dst, const void *src, int B, int T, int width, int from)
{
    const size_t row = (size_t)width * 2;
    cudaCheck(cudaMemcpy(dst, src, row * B * T, cudaMemcpyDeviceToDevice));
    if (from < T) cudaCheck(cudaMemset2D((char *)dst + row * from, row * T, 0xff, row * (T - from), B));
    return dst;
}

/* The tensor-core kernels again in time windows of ATTENTION_TC_BLOCK
 * queries, as the wavefront runs them (the forward in time order, the
 * backward from the last window), into fresh buffers: o (FP32, and FP16 as
 * the step keeps it, against a whole launch that writes it), lse and the
 * FP16 dqkv must be the whole launch's bit for bit. Each window's launch
 * sees NaN in every row past those its op declares (ops_top_gpu.c): the
 * forward's q, k, v from its last query on, the backward's q, k, v and dO
 * from the last query that sees its keys (t1 + W − 1) on. */
static void window_check(stage *st, int kernel, const void *dq16, const void *ddo16, const float *whole_o,
                         const float *whole_lse, const float *whole_d16, int B, int T, int D, int H, int W)
{
    const int C = ATTENTION_TC_BLOCK;
    const size_t MD = (size_t)B * T * D, PH = (size_t)B * H * T;
    float *o = dev_f32(NULL, MD), *lse = dev_f32(NULL, PH), *delta = dev_f32(NULL, PH), *lse1 = dev_f32(NULL, PH);
    void *d16 = dev_f16(NULL, 3 * MD), *o16 = dev_f16(NULL, MD), *o16_whole = dev_f16(NULL, MD);
    void *pq16 = dev_f16(NULL, 3 * MD), *pdo16 = dev_f16(NULL, MD);
    launch_attention_forward_tc(kernel, NULL, o16_whole, NULL, lse1, dq16, B, T, D, H, W, 0);
    for (int t0 = 0; t0 < T; t0 += C) {
        const int t1 = t0 + C < T ? t0 + C : T;
        launch_attention_forward_tc_window(kernel, o, o16, NULL, lse, poisoned_rows(pq16, dq16, B, T, 3 * D, t1), B,
                                           T, D, H, W, t0, t1, 0);
    }
    for (int t0 = (T - 1) / C * C; t0 >= 0; t0 -= C) {
        const int t1 = t0 + C < T ? t0 + C : T, last = t1 + W - 1 < T ? t1 + W - 1 : T;
        launch_attention_backward_tc_window(kernel, NULL, d16, delta, poisoned_rows(pdo16, ddo16, B, T, D, last), o16,
                                            lse, poisoned_rows(pq16, dq16, B, T, 3 * D, last), B, T, D, H, W, t0, t1,
                                            0);
    }
    float *go = get_f32(o, MD), *gl = get_f32(lse, PH), *gd = get_f16(d16, 3 * MD);
    float *go16 = get_f16(o16, MD), *gw16 = get_f16(o16_whole, MD);
    char what[112];
    snprintf(what, sizeof(what), "windows of %d, NaN past their rows: o, lse, dqkv FP16 bit for bit (%s, hd %d, T %d, W %d)",
             C, kernel == ATTN_TC_TILED ? "tiled" : "band", D / H, T, W);
    check_flag(st, what, memcmp(go, whole_o, 4 * MD) == 0 && memcmp(go16, gw16, 4 * MD) == 0 &&
                             memcmp(gl, whole_lse, 4 * PH) == 0 && memcmp(gd, whole_d16, 12 * MD) == 0);
    FREE_ALL(go, gl, gd, go16, gw16);
    DFREE_ALL(o, lse, delta, d16, o16, o16_whole, lse1, pq16, pdo16);
}

/* One case: B sequences of T tokens, H heads of D / H, window W, on the
 * tensor-core kernel `kernel` (ATTN_TC_BANDED or ATTN_TC_TILED) or the FP32
 * ones (ATTN_FP32), forward and backward against the CPU reference. */
void attention_check(const ladder_ctx *cx, stage *st, int B, int D, int H, int T, int W, int kernel)
{
    const int tc = kernel != ATTN_FP32;
    cc_rng *r = cx->rng;
    /* FP32 on both sides (__expf vs expf): 1e-5; FP16 P and dS operands: 5e-3 */
    const double tol = tc ? 5e-3 : 1e-5;
    const size_t MD = (size_t)B * T * D, PW = (size_t)B * H * T * W, PH = (size_t)B * H * T;
    /* the tensor-core kernels read FP16 q, k, v and dO: drawn FP16-exact, both sides see the same inputs */
    float *qkv = rand_vec(r, 3 * MD, 1, tc), *dout = rand_vec(r, MD, 1, tc);
    float *dq = dev_f32(qkv, 3 * MD), *ddo = dev_f32(dout, MD), *o = dev_f32(NULL, MD), *p = dev_f32(NULL, PW);
    float *dqkv = dev_f32(NULL, 3 * MD), *ds = dev_f32(NULL, PW), *lse = dev_f32(NULL, PH), *delta = dev_f32(NULL, PH);
    void *dqkv16 = dev_f16(NULL, 3 * MD), *dq16 = dev_f16(qkv, 3 * MD), *ddo16 = dev_f16(dout, MD);
    void *o16 = dev_f16(NULL, MD);
    if (tc) { /* o16: the output the step keeps, which the tiled backward's δ reads */
        launch_attention_forward_tc(kernel, o, o16, p, lse, dq16, B, T, D, H, W, 0);
        launch_attention_backward_tc(kernel, dqkv, dqkv16, delta, ddo16, o16, lse, dq16, B, T, D, H, W, 0);
    } else {
        launch_attention_forward(o, NULL, p, dq, B, T, D, H, W, cx->caps, 0);
        launch_attention_backward(dqkv, dqkv16, ds, ddo, p, dq, B, T, D, H, W, cx->caps, 0);
    }
    float *go = get_f32(o, MD), *gp = get_f32(p, PW), *gd = get_f32(dqkv, 3 * MD), *glse = get_f32(lse, PH);
    float *gd16 = get_f16(dqkv16, 3 * MD);
    float *ro = cc_malloc(4 * MD), *rp = cc_malloc(4 * PW), *rd = cc_malloc(12 * MD), *rlse = cc_malloc(4 * PH);
    cpu_attention_forward(ro, rp, qkv, B, T, D, H, W);
    cpu_attention_backward(rd, dout, rp, qkv, B, T, D, H, W);
    ref_attention_lse(rlse, qkv, B, T, D, H, W);
    char what[64];
    const char *k = kernel == ATTN_TC_TILED ? "tiled, " : kernel == ATTN_TC_BANDED ? "band, " : "FP32, ";
    snprintf(what, sizeof(what), "o (%shd %d, T %d, W %d)", k, D / H, T, W);
    check(st, what, go, ro, MD, tol, 0);
    snprintf(what, sizeof(what), "p (%shd %d, T %d, W %d)", k, D / H, T, W);
    check(st, what, gp, rp, PW, tol, 0);
    if (tc) { /* FP16 q and k under FP32 statistics */
        snprintf(what, sizeof(what), "lse (%shd %d, T %d, W %d)", k, D / H, T, W);
        check(st, what, glse, rlse, PH, tol, 0);
    }
    snprintf(what, sizeof(what), "dqkv (%shd %d, T %d, W %d)", k, D / H, T, W);
    check(st, what, gd, rd, 3 * MD, tol, 0);
    snprintf(what, sizeof(what), "dqkv FP16 (%shd %d, T %d, W %d)", k, D / H, T, W);
    check(st, what, gd16, rd, 3 * MD, tol > 1e-3 ? tol : 1e-3, 0); /* FP16 storage */
    if (tc && T > ATTENTION_TC_BLOCK) window_check(st, kernel, dq16, ddo16, go, glse, gd16, B, T, D, H, W);
    FREE_ALL(qkv, dout, go, gp, gd, gd16, glse, ro, rp, rd, rlse);
    DFREE_ALL(dq, ddo, o, o16, p, dqkv, ds, dqkv16, lse, delta, dq16, ddo16);
}

/* Each case on the kernel the planner picks for it, then (where it is not
 * already the one) on the tiled kernel too, so the band kernel's shapes
 * check both tensor-core kernels; hd 16 also on the FP32 kernels. The tiled
 * cases cover every class of head size (32, 96, 160, 192, 224; 40 padded to
 * 48; 36 padded to 48 and staged element by element, not in 16-byte
 * vectors; 35, odd, stored element by element), windows of 1, of T and past
 * it, and blocks of queries whose band spans several key tiles. */
static void run_attention(const ladder_ctx *cx, stage *st)
{
    const int B = 2;
    static const struct { int D, H, T, W; } cases[] = {
        { 64, 4, 40, 16 },   { 64, 4, 40, 64 },    { 128, 2, 40, 16 },  { 128, 2, 40, 64 },  { 128, 2, 300, 128 },
        { 256, 2, 40, 16 },  { 256, 2, 150, 128 }, { 512, 2, 70, 64 }, /* hd 128 and 256: 64-column chunks */
        { 64, 2, 200, 200 }, { 96, 2, 150, 40 },   { 192, 2, 140, 300 }, { 128, 4, 130, 1 }, { 320, 2, 100, 90 },
        { 384, 2, 90, 70 },  { 448, 2, 80, 33 },   { 80, 2, 100, 77 },   { 72, 2, 70, 50 },   { 256, 4, 260, 256 },
        { 70, 2, 90, 41 }, /* head size 35: odd, its stores element by element */
    };
    snprintf(st->shape, sizeof(st->shape),
             "B=%d, hd 16..256 (FP32, band, tiled), W=1..300, T up to 300, time windows", B);
    for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
        const int D = cases[ci].D, H = cases[ci].H, T = cases[ci].T, W = cases[ci].W;
        const int planned = attention_tc_kernel(cx->caps, D, H, W, 0);
        attention_check(cx, st, B, D, H, T, W, planned);
        if (planned != ATTN_TC_TILED && attention_flash_supported(cx->caps, D, H))
            attention_check(cx, st, B, D, H, T, W, ATTN_TC_TILED);
        if (D / H == 16 && planned != ATTN_FP32) attention_check(cx, st, B, D, H, T, W, ATTN_FP32);
        /* on the card's own 99 KB or more a block (a narrower [gpu] smem_per_block may leave the band
         * kernel out) */
        if (cx->caps->smem_per_block_optin >= 99 * 1024) {
            char what[80];
            const int hd = D / H, band = (hd == 64 || hd == 128 || hd == 256) && W <= 129;
            snprintf(what, sizeof(what), "%s kernel planned for hd %d, W %d", band ? "band" : "tiled", hd, W);
            check_flag(st, what, planned == (band ? ATTN_TC_BANDED : ATTN_TC_TILED));
        }
    }
}

const ladder_stage ladder_stage_attention = { "attention", "context attention", run_attention };
