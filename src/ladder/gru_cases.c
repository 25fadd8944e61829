/* What the recurrence stages share: gru_forward and gru_backward run the same
 * recurrence implementations on the same shapes, from a layer's CPU forward
 * on random inputs. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "catchat/cpu_ref.h"
#include "catchat/gpu_gru.h"
#include "catchat/kernels.h"
#include "catchat/util.h"
#include "ladder/ladder.h"

void gru_case_init(gru_case *c, cc_rng *r, int B, int T, int D)
{
    c->B = B;
    c->T = T;
    c->D = D;
    c->whh = rand_vec(r, (size_t)3 * D * D, 1.0 / sqrt(D), 1);
    c->bhh = rand_vec(r, 3 * D, 0.1, 0);
    c->gx = rand_vec(r, (size_t)B * T * 3 * D, 1, 0);
    c->h = cc_malloc(4 * (size_t)B * T * D);
    c->gates = cc_malloc(12 * (size_t)B * T * D);
    c->ghn = cc_malloc(4 * (size_t)B * T * D);
    c->scratch = cc_malloc(sizeof(float) * cpu_gru_scratch_elems(B, D));
    cpu_gru_forward(c->h, c->gates, c->ghn, c->gx, c->whh, c->bhh, B, T, D, c->scratch);
}

void gru_case_free(gru_case *c) { FREE_ALL(c->whh, c->bhh, c->gx, c->h, c->gates, c->ghn, c->scratch); }

gpu_scratch *gru_scratch(const ladder_ctx *cx, gpu_gru_path path, int B, int T, int D)
{
    size_t need[SCRATCH_KINDS] = { 0 };
    gpu_gru_scratch_need(need, cx->caps, cx->gru, path, B, T, D);
    gpu_scratch_need(need, SCRATCH_REDUCE, gpu_gru_weight_grads_scratch_bytes(B * T, D));
    return gpu_scratch_create(need);
}

/* Each implementation on shapes it supports. The persistent kernels (every
 * GPU from sm_80 on) at D=64 (four CTAs a group), D=512 with B=20 over an odd
 * T (groups of 7, 7 and 6 sequences on 132 SMs: the last CTA's tile is not
 * full), D=1024 and D=2048 (where a 99 KB profile holds part of W_hh in L2 or
 * takes 32 units a CTA); their split of K: D=2048 at B=64, where the H200
 * plans it (4 CTAs a slice forward, 8 in the BPTT), and forced at D=512 over
 * 4 CTAs (two warps a block add their k-pairs in shared memory; partly full
 * groups) and D=1024 over 8; the per-step loop; the cluster kernels at D=512 (two
 * clusters: part of W_hh in shared memory) and D=128 (four clusters, an odd
 * T). gru_backward takes the same cases; its cluster kernels have one width,
 * so `wide` (the forward's 16 sequences a cluster) only matters in
 * gru_forward, which adds its wide case (stage_gru_forward.c). */
const gru_path_case k_gru_paths[N_GRU_PATHS] = {
    /* the cluster cases last: compute-sanitizer's memcheck stops at their bulk copies (docs/ladder.md) */
    { GPU_GRU_PERSISTENT, GRU_IMPL_PERSISTENT, 32, 48, 64, 0, 0 },
    { GPU_GRU_PERSISTENT, GRU_IMPL_PERSISTENT, 20, 37, 512, 0, 0 },
    { GPU_GRU_PERSISTENT, GRU_IMPL_PERSISTENT, 24, 21, 1024, 0, 0 },
    { GPU_GRU_PERSISTENT, GRU_IMPL_PERSISTENT, 12, 9, 2048, 0, 0 },
    { GPU_GRU_PERSISTENT, GRU_IMPL_PERSISTENT, 64, 5, 2048, 0, 0 },
    { GPU_GRU_PERSISTENT, GRU_IMPL_PERSISTENT, 20, 37, 512, 0, 4 },
    { GPU_GRU_PERSISTENT, GRU_IMPL_PERSISTENT, 24, 21, 1024, 0, 8 },
    { GPU_GRU_PER_STEP, GRU_IMPL_PER_STEP, 32, 48, 64, 0, 0 },
    { GPU_GRU_AUTO, GRU_IMPL_CLUSTER, 16, 48, 512, 0, 0 },
    { GPU_GRU_AUTO, GRU_IMPL_CLUSTER, 32, 37, 128, 0, 0 }, /* odd T: the step handshake's buffer parity */
};

/* The window a case also runs in: about a third of T, so the last window is
 * shorter than the others (T = 48: 17, 17, 14). */
int gru_case_chunk(const gru_path_case *pc) { return pc->T / 3 + 1; }

int gru_path_begin(const ladder_ctx *cx, stage *st, const gru_path_case *pc, char *name, size_t n)
{
    snprintf(name, n, "%s D=%d B=%d T=%d", gpu_gru_impl_name(pc->impl), pc->D, pc->B, pc->T);
    cx->gru->forced_split = pc->split;
    if (gpu_gru_impl_with(cx->caps, cx->gru, pc->path, pc->B, pc->T, pc->D) == pc->impl) {
        /* the case's name says where K is split; a forced split must be the plan */
        const int split =
            pc->impl == GRU_IMPL_PERSISTENT && gru_persistent_splits_k(cx->caps, cx->gru, pc->B, pc->T, pc->D);
        if (split) strncat(name, " split K", n - strlen(name) - 1);
        if (pc->split) {
            char what[160];
            snprintf(what, sizeof(what), "the plan splits K over %d CTAs (%s)", pc->split, name);
            check_flag(st, what, split);
        }
        return 1;
    }
    gru_path_end(cx);
    /* This GPU (or profile) takes another implementation for the shape: the
     * case does not apply here, and the row says so. */
    char why[96];
    if (pc->impl == GRU_IMPL_CLUSTER)
        snprintf(why, sizeof(why), "cluster cases (%s)",
                 gpu_caps_has_sm90_features(cx->caps) ? "they need more shared memory a block" : "no clusters");
    else
        snprintf(why, sizeof(why), "%s (the per-step loop here)", name);
    stage_skip_part(st, why);
    return 0;
}

void gru_path_end(const ladder_ctx *cx) { cx->gru->forced_split = 0; }

void gru_stress_cases(const ladder_ctx *cx, stage *st, gru_case_fn one)
{
    char name[64], what[160];
    for (int i = 0; i < N_GRU_PATHS; i++) {
        const gru_path_case *pc = &k_gru_paths[i];
        if (pc->impl != GRU_IMPL_CLUSTER || !gru_path_begin(cx, st, pc, name, sizeof(name))) continue;
        strncat(name, " delayed", sizeof(name) - strlen(name) - 1);
        cx->gru->cluster_jitter = 0x5eed + (unsigned)i;
        one(cx, st, pc, name);
        cx->gru->cluster_jitter = 0;
        gru_path_end(cx);
    }
    /* the persistent D=512 case, its launch refused as too large: in a state
     * of its own (as one executor's), which must leave every other as it was */
    const gru_path_case *pc = &k_gru_paths[1];
    if (pc->impl != GRU_IMPL_PERSISTENT || pc->D != 512) abort(); /* the table's order changed */
    if (!gru_path_begin(cx, st, pc, name, sizeof(name))) return;
    gru_path_end(cx);
    strncat(name, " refused", sizeof(name) - strlen(name) - 1);
    gpu_gru_state planted = { .plant_oversize = 1, .forced_split = pc->split };
    ladder_ctx cx_planted = *cx;
    cx_planted.gru = &planted;
    one(&cx_planted, st, pc, name);
    const int refused = planted.refused[0] != 0;
    const gpu_gru_impl after = gpu_gru_impl_with(cx->caps, &planted, pc->path, pc->B, pc->T, pc->D);
    snprintf(what, sizeof(what), "a refused persistent launch is recorded and the per-step loop taken (%s)", name);
    check_flag(st, what, refused && after == GRU_IMPL_PER_STEP);
    /* a second, fresh state (another executor's) and the ladder's own still plan the persistent kernels */
    const gpu_gru_state fresh = { .forced_split = pc->split };
    const gpu_gru_impl other = gpu_gru_impl_with(cx->caps, &fresh, pc->path, pc->B, pc->T, pc->D);
    const gpu_gru_impl own = gpu_gru_impl_with(cx->caps, cx->gru, pc->path, pc->B, pc->T, pc->D);
    snprintf(what, sizeof(what), "another state still plans the persistent kernels after that refusal (%s)", name);
    check_flag(st, what, other == GRU_IMPL_PERSISTENT && own == GRU_IMPL_PERSISTENT && !cx->gru->refused[0]);
}
