/* Where each device buffer's pointer lives in gpu_impl (gpu_plan_buffers
 * gives its size, what it holds, whether it is zeroed and its group), where
 * each tensor of recompute's `work` (gpu_plan_work) is pointed, and what
 * lies inside another buffer: gpu_bind_buffers points all of them, for the
 * executor over its allocations and for the liveness pass over addresses
 * each buffer has alone (work_layout_gpu.c), so both declare the step over
 * one wiring. Adding a buffer is one row of the plan's table and one here. */
#include <stddef.h>
#include "catchat/gpu_crossentropy.h"
#include "gpu/gpu_impl.h"

#define SLOT(field) offsetof(gpu_impl, field)
static const size_t buffer_slot[GPU_BUF_COUNT] = {
    [GPU_BUF_P32] = SLOT(p32),           [GPU_BUF_G32] = SLOT(g32),         [GPU_BUF_G32_LANES] = SLOT(g32_lanes),
    [GPU_BUF_M] = SLOT(m),               [GPU_BUF_V] = SLOT(v),             [GPU_BUF_P16] = SLOT(p16),
    [GPU_BUF_X] = SLOT(x),               [GPU_BUF_Y] = SLOT(y),             [GPU_BUF_WORK] = SLOT(work),
    [GPU_BUF_U] = SLOT(u),               [GPU_BUF_A_IR] = SLOT(a_ir),       [GPU_BUF_GX] = SLOT(gx),
    [GPU_BUF_GATES] = SLOT(gates),       [GPU_BUF_GHN] = SLOT(ghn),         [GPU_BUF_H] = SLOT(h),
    [GPU_BUF_GH] = SLOT(gh),             [GPU_BUF_A16] = SLOT(a16),         [GPU_BUF_HPREV16] = SLOT(hprev16),
    [GPU_BUF_S_IR] = SLOT(s_ir),         [GPU_BUF_QKV16] = SLOT(qkv16),     [GPU_BUF_DO16] = SLOT(do16),
    [GPU_BUF_LSE] = SLOT(lse),           [GPU_BUF_DELTA] = SLOT(delta),     [GPU_BUF_QKV] = SLOT(qkv),
    [GPU_BUF_DQKV] = SLOT(dqkv),         [GPU_BUF_P] = SLOT(p),             [GPU_BUF_DSBUF] = SLOT(dsbuf),
    [GPU_BUF_C] = SLOT(c),               [GPU_BUF_F_IR] = SLOT(f_ir),       [GPU_BUF_CE_BUFS] = SLOT(ce_bufs),
    [GPU_BUF_LOSS_ROW] = SLOT(loss_row), [GPU_BUF_RANK] = SLOT(rank),       [GPU_BUF_S16] = SLOT(s16),
    [GPU_BUF_O16] = SLOT(o16),           [GPU_BUF_DU] = SLOT(du),           [GPU_BUF_DTMP] = SLOT(dtmp),
    [GPU_BUF_DHREC] = SLOT(dhrec),       [GPU_BUF_DGX16] = SLOT(dgx16),     [GPU_BUF_DGH16] = SLOT(dgh16),
    [GPU_BUF_BIAS_PART] = SLOT(bias_part), [GPU_BUF_D16] = SLOT(d16),       [GPU_BUF_DC16] = SLOT(dc16),
    [GPU_BUF_PARTIALS] = SLOT(partials), [GPU_BUF_NONFINITE] = SLOT(nonfinite), [GPU_BUF_FIRST_BAD] = SLOT(first_bad),
    [GPU_BUF_TOK_OFF] = SLOT(tok_off),   [GPU_BUF_TOK_POS] = SLOT(tok_pos),
};
/* the window buffers by turn (a set's: gpu_impl's first index), the rest whole */
static const size_t work_slot[GPU_WORK_COUNT] = {
    [GPU_WORK_WIN_A16_0] = SLOT(win_a16[0][0]),     [GPU_WORK_WIN_GATES_0] = SLOT(win_gates[0][0]),
    [GPU_WORK_WIN_GHN_0] = SLOT(win_ghn[0][0]),     [GPU_WORK_WIN_A16_1] = SLOT(win_a16[0][1]),
    [GPU_WORK_WIN_GATES_1] = SLOT(win_gates[0][1]), [GPU_WORK_WIN_GHN_1] = SLOT(win_ghn[0][1]),
    [GPU_WORK_HPREV16] = SLOT(hprev16),             [GPU_WORK_WIN_HP16_0] = SLOT(win_hp16[0][0]),
    [GPU_WORK_WIN_DGX16_0] = SLOT(win_dgx16[0][0]), [GPU_WORK_WIN_DGH16_0] = SLOT(win_dgh16[0][0]),
    [GPU_WORK_WIN_DTMP_0] = SLOT(win_dtmp[0]),      [GPU_WORK_WIN_HP16_1] = SLOT(win_hp16[0][1]),
    [GPU_WORK_WIN_DGX16_1] = SLOT(win_dgx16[0][1]), [GPU_WORK_WIN_DGH16_1] = SLOT(win_dgh16[0][1]),
    [GPU_WORK_S16] = SLOT(s16),
    [GPU_WORK_QKV16] = SLOT(qkv16),                 [GPU_WORK_O16] = SLOT(o16),
    [GPU_WORK_DC16] = SLOT(dc16),                   [GPU_WORK_DTMP] = SLOT(dtmp),
    [GPU_WORK_C] = SLOT(c),                         [GPU_WORK_DO16] = SLOT(do16),
    [GPU_WORK_D16] = SLOT(d16),
};
/* from one set of window buffers to the next in gpu_impl (win_*[set][turn], win_dtmp[set]) */
static const size_t set_stride = SLOT(win_a16[1][0]) - SLOT(win_a16[0][0]), dtmp_stride = SLOT(win_dtmp[1]) - SLOT(win_dtmp[0]);
#undef SLOT

void **gpu_buffer_slot(gpu_impl *g, gpu_buf_id id) { return (void **)((char *)g + buffer_slot[id]); }

void **gpu_work_slot(gpu_impl *g, gpu_work_id id, int set)
{
    const int window = id != GPU_WORK_HPREV16 && id <= GPU_WORK_WIN_DGH16_1;
    const size_t stride = id == GPU_WORK_WIN_DTMP_0 ? dtmp_stride : set_stride;
    return (void **)((char *)g + work_slot[id] + (window ? (size_t)set * stride : 0));
}

void gpu_state_init(cc_executor *ex, gpu_impl *g, const cc_config *cfg, int B, int T, const gpu_step_plan *plan)
{
    ex->impl = g;
    ex->name = "gpu";
    ex->cfg = *cfg;
    ex->B = B;
    ex->T = T;
    const cc_dims d = cc_dims_from_config(cfg);
    cc_layout_build(&ex->lay, &d);
    g->plan = *plan; /* what runs and every buffer's size: read from it, not copied */
}

void gpu_bind_buffers(gpu_impl *g, const cc_dims *d, size_t nparams, int B, int T, const gpu_work_part *parts,
                      int nparts, gpu_buffer_place place, void *ctx)
{
    gpu_plan_buffer bufs[GPU_BUF_COUNT];
    const int nb = gpu_plan_buffers(&g->plan, d, nparams, B, T, bufs);
    for (int i = 0; i < nb; i++)
        if (bufs[i].bytes || bufs[i].id == GPU_BUF_WORK) *gpu_buffer_slot(g, bufs[i].id) = place(ctx, &bufs[i]);
    for (int i = 0; i < nparts; i++) *gpu_work_slot(g, parts[i].id, parts[i].set) = (char *)g->work + parts[i].offset;
    g->dc = g->c; /* the guard's copy comes after the final norm's backward, the merge's last reader */
    const size_t ce_bytes = gpu_ce_chunk_bytes(g->plan.ce_rows, d->D, d->V);
    for (int l = 0; l < g->plan.lanes; l++) {
        gpu_lane *ln = &g->lane[l];
        ln->index = l;
        ln->g32 = l == 0 ? g->g32 : g->g32_lanes + (size_t)(l - 1) * (nparams + gpu_ce_pad_floats(d->V, d->D));
        gpu_ce_chunk_place(&ln->ce, (char *)g->ce_bufs + l * ce_bytes, g->plan.ce_rows, d->D, d->V);
    }
}
