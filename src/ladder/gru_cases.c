/* What the recurrence stages share: gru_forward and gru_backward run the same
 * recurrence implementations on the same shapes, from a layer's CPU forward
 * on random inputs. */
#include <math.h>
#include <stdio.h>
#include "catchat/cpu_ref.h"
#include "catchat/gpu_ops.h"
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

/* Each implementation on shapes it supports: the cluster kernels at D=512
 * (two clusters: part of W_hh in shared memory) and D=128 (four clusters, an
 * odd T), the persistent ones at D=64 (two batch groups of 16), and the
 * per-step loop. gru_backward takes the same cases; its cluster kernels have
 * one width, so `wide` (the forward's 16 sequences a cluster) only matters
 * in gru_forward, which adds its wide case (stage_gru_forward.c). */
const gru_path_case k_gru_paths[N_GRU_PATHS] = {
    /* the cluster cases last: compute-sanitizer's memcheck stops at their bulk copies (docs/ladder.md) */
    { GPU_GRU_PERSISTENT, GRU_IMPL_PERSISTENT, 32, 48, 64, 0 },
    { GPU_GRU_STEPWISE, GRU_IMPL_STEPWISE, 32, 48, 64, 0 },
    { GPU_GRU_AUTO, GRU_IMPL_CLUSTER, 16, 48, 512, 0 },
    { GPU_GRU_AUTO, GRU_IMPL_CLUSTER, 32, 37, 128, 0 }, /* odd T: the step handshake's buffer parity */
};

const char *gru_path_begin(const ladder_ctx *cx, stage *st, int i, char *name, size_t n)
{
    const gru_path_case *pc = &k_gru_paths[i];
    snprintf(name, n, "%s D=%d", gpu_gru_impl_name(pc->impl), pc->D);
    char what[64];
    snprintf(what, sizeof(what), "%s path taken", name);
    check_flag(st, what, gpu_gru_impl_for(cx->caps, pc->path, pc->B, pc->T, pc->D) == pc->impl);
    return name;
}
