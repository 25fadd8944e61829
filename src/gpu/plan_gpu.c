/* The GPU step's plan (include/catchat/gpu_plan.h) as a pure function of
 * what the GPU can do, the config and the device's free bytes: the kernels
 * a step takes (lanes, recurrence, wavefront, attention, recompute and its
 * windows, the classifier's chunk) and every device buffer it needs, with
 * recompute's shared `work` laid out by the liveness of its tensors
 * (work_layout_gpu.c, which declares the step's programs over the plan's
 * buffers, no device), and the buffer table (plan_reads_gpu.c) both read. Calls go one
 * way: this file calls those two, never the reverse. Nothing here asks the device, so tests/test_plan_gpu.c runs it on the
 * CPU against the limits of GPUs nobody here has; gpu_step_plan_for
 * (executor_gpu.c) reads the device and calls gpu_plan_make, and the
 * executor allocates from gpu_plan_buffers. The measurements in the
 * comments are the rules' reasons (docs/design-notes.md, docs/performance.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/gpu_crossentropy.h"
#include "catchat/gpu_gru.h"
#include "catchat/gpu_plan.h"
#include "catchat/kernels.h"
#include "catchat/matmul.h"
#include "catchat/util.h"
#include "gpu/work_layout_gpu.h"

const char *const gpu_mem_group_names[GPU_MEM_GROUPS] = { "weights_optimizer", "layers", "attention",
                                                          "classifier", "workspace", "lanes" };

/* ---- lanes, recurrence, wavefront ---- */

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

/* The wavefront's chunk (program_gpu.c), 0 where the step runs layer after
 * layer, and why in either case. It needs recurrence kernels that run a
 * window of steps from the state the window before left (every
 * implementation does; the per-step loop only where its GEMMs leave SMs
 * idle: per_step_fills), and it pays where one layer's
 * recurrence leaves SMs idle: at B=256 the lanes' clusters of one layer
 * already take every cluster slot, and the wavefront measured 6% slower
 * there. The chunk: a quarter of T, at most 128 steps, at least 32 (128
 * measured fastest on the cluster kernels at T=512 against 64, 32 and 16:
 * each chunk pays a launch and a reload of W_hh, while shorter chunks fill
 * the pipeline sooner; docs/design-notes.md). [gpu] wavefront_chunk sets it
 * and takes the wavefront wherever the kernels can. */
/* Whether one per-step GEMM of the recurrence (h·W_hhᵀ: an output of the
 * lane's B rows × 3D, in tiles of about 64 × 128) covers half the SMs its
 * lane's recurrence plans for (the lanes' GEMMs run at once) or more;
 * below that the layers' recurrences overlapped in the wavefront use the SMs
 * one layer's step leaves idle (B=64: 36 tiles at D=1536, 48 at D=2048 for
 * 132 SMs; the BPTT's B × D output fills still less). */
static int per_step_fills(const gpu_step_plan *p, int D)
{
    const int tiles = ((p->lane_B + 63) / 64) * ((3 * D + 127) / 128);
    return 2 * tiles >= p->rec_caps.sm_count;
}

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
                      : forced ? NULL
                      : p->impl == GRU_IMPL_PER_STEP && per_step_fills(p, cfg->d_model)
                          ? "off: the per-step recurrence's GEMMs take the whole GPU at every step"
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

/* The wavefront's pairs of streams a lane: one a layer up to
 * GPU_WAVE_STREAMS layers (or the config's testing aid, fewer), beyond
 * that consecutive layers share a pair, as few layers a pair as that
 * allows (L = 12: 6 pairs of 2). Sharing a pair serialises only the
 * layers of a group, whose chunks then run one after another on it while
 * the next group runs the chunk before: layers l and l + 8 on one pair
 * (l % 8) would make layer l's chunk k + 1 wait for layer l + 8's chunk k,
 * eight layers down the wavefront. */
static void plan_wave_streams(gpu_step_plan *p, const cc_config *cfg, int L)
{
    const int forced = cfg->wave_streams_forced;
    int most = forced > 0 && forced < GPU_WAVE_STREAMS ? forced : GPU_WAVE_STREAMS;
    if (most > L) most = L;
    p->wave_group = 1;
    p->wave_streams = 0;
    if (!p->wave_chunk || most < 1) return;
    p->wave_group = (L + most - 1) / most;
    p->wave_streams = (L + p->wave_group - 1) / p->wave_group;
    if (p->wave_group == 1) return;
    const size_t n = strlen(p->wave_why);
    snprintf(p->wave_why + n, sizeof(p->wave_why) - n, ", %d layers on %d pairs of streams", L, p->wave_streams);
}

/* No wavefront after all, for the reason why. */
static void wave_off(gpu_step_plan *p, const char *why)
{
    p->wave_chunk = 0;
    p->wave_group = 1;
    p->wave_streams = 0;
    snprintf(p->wave_why, sizeof(p->wave_why), "%s", why);
}

/* Under the wavefront the layers' recurrences run at once, a pair of
 * streams' at a time. Cluster lanes: 2 rather than 4 (each lane's layers
 * take 3x the clusters; measured 6.7 against 6.9 ms at the default
 * config). Persistent grids: each pair's takes its share of the lane's
 * SMs, as many pairs at once as have a split that fits (all where one
 * does; at D=1024 a third of the H200 holds no split of W_hh, half does);
 * no split for two: no wavefront. */
static void plan_wavefront(gpu_step_plan *p, const cc_config *cfg, int B, int T, int L)
{
    p->wave_chunk = wave_chunk_for(cfg, p, B, T, L, p->wave_why, sizeof(p->wave_why));
    plan_wave_streams(p, cfg, L);
    if (!p->wave_chunk) return;
    two_cluster_lanes(p, cfg, B, T);
    if (p->impl != GRU_IMPL_PERSISTENT) return;
    const int S = p->wave_streams;
    for (int k = S; k >= (S > 1 ? 2 : 1); k--) {
        gpu_caps share = p->rec_caps;
        share.sm_count = p->rec_caps.sm_count / k;
        if (gpu_gru_impl_for(&share, p->path, p->lane_B, T, cfg->d_model) != GRU_IMPL_PERSISTENT) continue;
        p->wave_caps = share;
        const size_t n = strlen(p->wave_why);
        snprintf(p->wave_why + n, sizeof(p->wave_why) - n, ", %d layers at once on %d SMs each", k, share.sm_count);
        return;
    }
    char why[96];
    snprintf(why, sizeof(why), "off: no persistent split fits half of %d SMs", p->rec_caps.sm_count);
    wave_off(p, why);
}

/* ---- the plan's bytes ---- */

/* Device bytes of the executor at B, and by group in groups (may be NULL):
 * its buffer table, each lane's cuBLASLt workspaces (gpu_lane_resources_of), the persistent
 * recurrence's W_hhᵀ and partial sums a lane, and the accumulated gradient
 * of grad_accum. */
static size_t plan_bytes(const gpu_step_plan *p, const cc_config *cfg, const cc_dims *d, size_t n, int B, int T,
                         size_t *groups)
{
    size_t by[GPU_MEM_GROUPS] = { 0 };
    gpu_plan_buffer bufs[GPU_BUF_COUNT];
    const int nb = gpu_plan_buffers(p, d, n, B, T, bufs);
    for (int i = 0; i < nb; i++) by[bufs[i].group] += bufs[i].bytes;
    gpu_lane_resources res; /* the contexts the executor makes for each lane */
    gpu_lane_resources_of(p, &res);
    for (int k = 0; k < res.gemms; k++) by[GPU_MEM_WORKSPACE] += (size_t)p->lanes * res.workspace[k];
    /* W_hhᵀ and a split's partial sums: per stream that runs a persistent
     * recurrence (each pair's own under the wavefront) */
    if (p->impl == GRU_IMPL_PERSISTENT) {
        const gpu_caps *rc = p->wave_chunk ? &p->wave_caps : &p->rec_caps;
        const size_t scratch = gru_persistent_scratch_bytes(rc, B / p->lanes, T, (int)d->D);
        by[GPU_MEM_WORKSPACE] +=
            (size_t)p->lanes * (p->wave_chunk ? p->wave_streams : 1) * (6 * (size_t)d->D * d->D + scratch);
    }
    if (cfg->grad_accum > 1) by[GPU_MEM_WEIGHTS] += 4 * n;
    size_t bytes = 0;
    for (int i = 0; i < GPU_MEM_GROUPS; i++) bytes += by[i];
    if (groups) memcpy(groups, by, sizeof(by));
    return bytes;
}

/* ---- the classifier's chunk, recompute ---- */

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

/* What the plan may hold: [gpu] memory_limit where set (no more than the
 * device has free), else the device's free memory; 0 when unknown. */
static size_t memory_budget(const cc_config *cfg, size_t free_bytes)
{
    if (cfg->gpu_memory_limit > 0 && (free_bytes == 0 || cfg->gpu_memory_limit < free_bytes))
        return (size_t)cfg->gpu_memory_limit;
    return free_bytes;
}

/* [gpu] recompute: on, off, or under auto on only where the plan that keeps
 * every layer's activations (the fastest) would not fit the budget with
 * GPU_MEMORY_MARGIN to spare. */
static void plan_recompute(gpu_step_plan *p, const cc_config *cfg, const cc_dims *d, size_t n, int B, int T,
                           size_t free_bytes)
{
    const char *mode = cfg->gpu_recompute;
    p->memory_budget = memory_budget(cfg, free_bytes);
    const char *limit = cfg->gpu_memory_limit > 0 && p->memory_budget == cfg->gpu_memory_limit ? "[gpu] memory_limit"
                                                                                              : "free on the device";
    if (strcmp(mode, "on") == 0 || strcmp(mode, "off") == 0) {
        p->recompute = strcmp(mode, "on") == 0;
        snprintf(p->recompute_why, sizeof(p->recompute_why), "%s ([gpu] recompute)", mode);
        if (p->recompute) { /* the least memory: the smaller classifier chunk, as under auto */
            p->ce_budget = GPU_CE_BUDGET_TIGHT;
            p->ce_rows = ce_rows_for(p, cfg, d, B, T, p->ce_budget);
        }
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

/* Recompute's window (program_gpu.c, emit_rc_window): the most of `most` windows (16,
 * 8, 4 or 2) that divides T into windows of at least 16 steps, else all T;
 * the forced count (gpu_plan_opts, the ladder's testing aid) where it
 * divides T. The persistent and cluster kernels pay once a window (a
 * launch, W_hh loaded on chip, and under the persistent BPTT W_hh
 * transposed), and a window's rebuild and weight GEMMs must fit beside the
 * next window's BPTT, so they take 8: at the default config 16 windows of
 * 32 steps ran 12.3 ms a step against 10.6 with 8
 * (docs/results/recompute_windows_2026-12-03.txt). The per-step loop pays
 * the same launches at every step whatever the window, so it takes 16,
 * whose two buffers hold an eighth of a layer's window tensors. */
static int recompute_window_for(const gpu_step_plan *p, int T, int forced)
{
    if (forced > 0 && T % forced == 0) return T / forced;
    const int most = p->impl == GRU_IMPL_PER_STEP ? 16 : 8;
    for (int n = most; n > 1; n /= 2)
        if (T % n == 0 && T / n >= 16) return T / n;
    return T;
}

/* Recompute's sets of window buffers, the layers' gradient slots, the
 * context stream's part and `work`'s layout, for the plan's wavefront (or
 * none). The part: the most sequences, dividing a lane's, whose tensors
 * add no bytes to what the layers' take (at least one sequence; the bytes
 * grow with the part, so a binary search over the divisors); every tensor
 * of `work` placed by its liveness (work_layout_gpu.c). */
static void rc_layout(gpu_step_plan *p, const cc_config *cfg, const cc_dims *d, int B, int T)
{
    p->rc_sets = p->wave_chunk ? d->L : 1;
    p->wave_layers = gpu_plan_wave_layers(p, d);
    gpu_work_part parts[GPU_WORK_MAX], best[GPU_WORK_MAX];
    int n = 0, nbest = 0, nd = 0;
    int *div = cc_malloc(sizeof(int) * (size_t)p->lane_B);
    for (int q = 1; q <= p->lane_B; q++)
        if (p->lane_B % q == 0) div[nd++] = q;
    /* the smallest part (what the layers take), then the whole lane, then halving the gap */
    p->top_seqs = 1;
    size_t total = work_layout_make(p, cfg, B, T, best, &nbest);
    const size_t layers = total;
    int lo = 0, hi = nd - 1, mid = hi;
    while (lo < hi) {
        p->top_seqs = div[mid];
        const size_t bytes = work_layout_make(p, cfg, B, T, parts, &n);
        if (bytes <= layers) {
            lo = mid;
            total = bytes;
            nbest = n;
            memcpy(best, parts, sizeof(gpu_work_part) * (size_t)n);
        } else {
            hi = mid - 1;
        }
        mid = (lo + hi + 1) / 2;
    }
    p->top_seqs = div[lo];
    free(div);
    memset(p->work_at, 0, sizeof(p->work_at));
    for (int i = 0; i < nbest; i++) p->work_at[best[i].id][best[i].set] = best[i].offset;
    p->work_bytes = total;
}

/* Under recompute 2 lanes rather than 4 layer after layer (11.20 against
 * 11.26 ms at the default config, 1 lane 11.54, and two lanes' gradient
 * buffers less: docs/results/recompute_lanes_5b23236.txt), and the
 * wavefront where the kernels take it (in one lane), in chunks of the recompute window:
 * each layer then has its own set of window buffers (the layers run at
 * once) and its own block of the forward's hprev16. [gpu] wavefront_chunk
 * sets the window where it divides T. */
static int plan_recompute_shape(gpu_step_plan *p, const cc_config *cfg, const cc_dims *d, size_t n, int B, int T,
                                int forced_windows)
{
    if (!(p->lanes = lanes_for(cfg, &p->caps, p->path, B, T, d->D))) return -1;
    plan_recurrence(p, B, T, d->D);
    two_cluster_lanes(p, cfg, B, T);
    const int chunk = cfg->gpu_wavefront_chunk;
    p->rc_window = forced_windows == 0 && chunk > 0 && chunk < T && T % chunk == 0
                       ? chunk
                       : recompute_window_for(p, T, forced_windows);
    plan_wavefront(p, cfg, B, T, d->L);
    if (p->wave_chunk && p->rc_window < T) {
        char kernels[96] = "";
        const char *comma = strchr(p->wave_why, ',');
        if (comma) snprintf(kernels, sizeof(kernels), "%s", comma); /* the persistent grids' share */
        p->wave_chunk = p->rc_window;
        snprintf(p->wave_why, sizeof(p->wave_why), "chunks of %d steps (the recompute windows)%s", p->rc_window,
                 kernels);
    } else if (p->wave_chunk) {
        wave_off(p, "off: recompute runs the layers in one window");
    }
    /* Under the wavefront one lane, where [gpu] lanes does not set them: the backward is bound by the
     * SMs that the rebuilds, the BPTTs and the windows' weight GEMMs share, and one lane does the same
     * work in half as many launches of twice the rows: 9.16-9.23 ms against 9.38-9.63 in two lanes at
     * the default config, in 2.5 KB a token less (a lane's gradients and GEMM contexts;
     * docs/results/recompute_one_lane_2026-12-04.txt). */
    if (p->wave_chunk && cfg->gpu_lanes == 0 && p->lanes > 1) {
        p->lanes = 1;
        plan_recurrence(p, B, T, d->D);
    }
    rc_layout(p, cfg, d, B, T);
    /* a layer's window buffers each hold more than one layer's: where that would not fit the budget and one
     * layer at a time would, one layer at a time (recompute is there to fit) */
    const size_t bytes = plan_bytes(p, cfg, d, n, B, T, NULL);
    if (p->wave_chunk && cfg->gpu_wavefront_chunk == 0 && p->memory_budget &&
        bytes + GPU_MEMORY_MARGIN > p->memory_budget) {
        char why[128];
        snprintf(why, sizeof(why),
                 "off: recompute's window buffers a layer each would not fit (%.2f GiB), one layer at a time",
                 bytes / 1073741824.0);
        wave_off(p, why);
        rc_layout(p, cfg, d, B, T);
    }
    return 0;
}

/* ---- the plan ---- */

int gpu_plan_make(gpu_step_plan *p, const gpu_caps *caps, const cc_config *cfg, int B, int T, size_t free_bytes,
                  const gpu_plan_opts *opts)
{
    memset(p, 0, sizeof(*p));
    p->caps = *caps;
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
    p->attn_tc = strcmp(cfg->gpu_attention, "fp32") == 0
                     ? ATTN_FP32
                     : attention_tc_kernel(caps, d.D, d.H, d.W, strcmp(cfg->gpu_attention, "tiled") == 0);
    cc_layout lay;
    cc_layout_build(&lay, &d);
    p->ce_budget = GPU_CE_BUDGET;
    p->ce_rows = ce_rows_for(p, cfg, &d, B, T, p->ce_budget);
    plan_recompute(p, cfg, &d, lay.total, B, T, free_bytes);
    if (p->recompute && plan_recompute_shape(p, cfg, &d, lay.total, B, T, opts ? opts->force_rc_windows : 0) != 0) return -1;
    p->wave_layers = gpu_plan_wave_layers(p, &d);
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

/* ---- the schedule's kind and the preflight's miniature ---- */

gpu_schedule_kind gpu_plan_kind(const gpu_step_plan *p, int T)
{
    return (gpu_schedule_kind){ p->impl, p->lanes > 1 ? 2 : 1, p->wave_chunk > 0, p->wave_chunk > 0 && p->wave_group > 1,
                                p->recompute, gpu_plan_top_chunked(p, T), p->attn_tc };
}

void gpu_schedule_kind_describe(const gpu_schedule_kind *k, char *buf, size_t len)
{
    snprintf(buf, len, "%s recurrence, %s, %s, recompute %s, context stream %s, attention on %s",
             gpu_gru_impl_name(k->impl), k->lanes > 1 ? "several lanes" : "one lane",
             k->wave_shared ? "wavefront, layers sharing streams" : k->wave ? "wavefront" : "layer after layer",
             k->recompute ? "on" : "off",
             k->top_chunked ? "in the wavefront's chunks" : "over the whole sequence",
             attention_kernel_name(k->attn_tc));
}

int gpu_schedule_kind_same(const gpu_schedule_kind *a, const gpu_schedule_kind *b)
{
    return a->impl == b->impl && a->lanes == b->lanes && a->wave == b->wave && a->wave_shared == b->wave_shared &&
           a->recompute == b->recompute && a->top_chunked == b->top_chunked && a->attn_tc == b->attn_tc;
}

/* The rules below are the planner's own, scaled down: each forced key is
 * one that a small step would otherwise plan differently (lanes_for picks
 * by the batch, plan_recompute by the memory, wave_chunk_for's chunk by T). */
void gpu_plan_miniature(cc_config *mini, const gpu_step_plan *p, const cc_config *cfg, int T)
{
    cc_config *c = mini;
    *c = *cfg;
    const int lanes = p->lanes > 1 ? 2 : 1;
    c->rc_windows_forced = 0;
    /* the run's recompute, forced (a small step always fits); with three layers, so one layer's u is
     * rebuilt from a sum */
    snprintf(c->gpu_recompute, sizeof(c->gpu_recompute), "%s", p->recompute ? "on" : "off");
    c->n_layers = cfg->n_layers < (p->recompute ? 3 : 2) ? cfg->n_layers : p->recompute ? 3 : 2;
    /* where the run's layers share the wavefront's pairs of streams (more than GPU_WAVE_STREAMS): three
     * layers on two pairs, the first two sharing one (the run's two on one) */
    c->wave_streams_forced = 0;
    if (p->wave_chunk && p->wave_group > 1) {
        c->n_layers = cfg->n_layers < 3 ? cfg->n_layers : 3;
        c->wave_streams_forced = c->n_layers - 1;
    }
    c->seq_len = T < 12 ? T : 12;
    c->batch_size = lanes * (p->impl == GRU_IMPL_CLUSTER ? 8 : 4);
    c->grad_accum = 1;
    c->gpu_lanes = lanes;
    snprintf(c->gpu_recurrence, sizeof(c->gpu_recurrence), "%s",
             p->impl == GRU_IMPL_PERSISTENT ? "persistent" : p->impl == GRU_IMPL_PER_STEP ? "per-step" : "auto");
    c->loss_scale = 128;
    c->loss_scale_dynamic = 0;
    snprintf(c->gpu_wavefront, sizeof(c->gpu_wavefront), "%s", p->wave_chunk ? "auto" : "off");
    c->gpu_wavefront_chunk = 0;
    if (p->wave_chunk && p->recompute) {
        /* recompute's windows are the wavefront's chunks and divide T (recompute_window_for): windows of 4
         * over 12 positions, three of them; over a shorter T (a run of fewer positions) windows of one step */
        c->gpu_wavefront_chunk = c->seq_len % 4 == 0 && c->seq_len > 4 ? 4 : 1;
        if (c->seq_len < 2) snprintf(c->gpu_wavefront, sizeof(c->gpu_wavefront), "off");
    } else if (p->wave_chunk && gpu_plan_top_chunked(p, T)) {
        /* the chunks also cut the context stream (whole blocks of the tensor-core attention): chunks of
         * one block over 72 positions (64, 8: the keys of the first take the second's queries) */
        c->seq_len = T < ATTENTION_TC_BLOCK + 8 ? T : ATTENTION_TC_BLOCK + 8;
        c->gpu_wavefront_chunk = ATTENTION_TC_BLOCK;
    } else if (p->wave_chunk) {
        c->gpu_wavefront_chunk = c->seq_len > 5 ? 5 : 1; /* chunks of 5 over 12 positions (5, 5, 2) */
    }
    /* the classifier in three uneven chunks of a lane's rows (whole segments of the wavefront's windows) */
    c->gpu_classifier_rows = c->batch_size / lanes * c->seq_len / 3 + 1;
}
