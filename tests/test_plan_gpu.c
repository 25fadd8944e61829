/* The GPU step's plan (gpu_plan_make, src/gpu/plan_gpu.c) on the CPU: the
 * workstation GPUs catchat supports, described as gpu_caps_query would read
 * them, planned against free bytes nobody here has. The checks follow from
 * the planner's rules (lanes divide the batch, recompute exactly where the
 * keep-everything plan does not fit, the buffer table adds up, no tensor
 * of `work` reads bytes another wrote while its value lived), not from
 * snapshots of its output.
 *
 * Each card carries what gpu_caps_query reads from the occupancy API
 * (gpu_caps.h: cluster_resident, persistent_ctas_per_sm), as recorded on
 * it, so the plans of the H100 and H200 (the cluster kernels) are checked
 * here without a GPU. */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <criterion/redirect.h>
#include <string.h>
#include "catchat/config.h"
#include "catchat/gpu_caps.h"
#include "catchat/gpu_gru.h"
#include "catchat/gpu_plan.h"
#include "catchat/kernels.h"
#include "catchat/layout.h"

/* the H100's answers (see GPUS) */
#define H100_R128_8 30
#define H100_R128_16 30
#define H100_R256_8 15
#define H100_R256_16 15
#define H100_R512_8 15
#define H100_R512_16 15
#define R5090_128_8 38
#define R5090_128_16 38
#define R5090_256_8 19
#define R5090_256_16 19
#define KB 1024
#define MIB ((size_t)1 << 20)
#define GIB ((size_t)1 << 30)

typedef struct {
    const char *name;
    int major, minor, sms, optin_kb, smem_sm_kb, l2_mb, clusters;
    /* the occupancy API's answers (gpu_caps.h): forward clusters of 8 and of 16 sequences resident at
     * D = 128, 256, 512 (sm_90 features only), and persistent CTAs an SM at the opt-in shared memory */
    int resident[3][2], ctas_per_sm;
} gpu_profile;

/* The GPUs of docs/gpus.md: SMs, opt-in shared memory a block, clusters (sm_90 on), and what the
 * occupancy API answered. H100: read by gpu_caps_query on an H100 80GB HBM3 (docs/results/
 * preflight_h100_2026-12-06.txt); the H200 is the same GH100 configuration of 132 SMs (its D=512
 * answer, 15 clusters of 8, was measured before: docs/design-notes.md). Cards without sm_90
 * features are never asked (no cluster kernels: 0); every card places one persistent CTA an SM at
 * its opt-in shared memory. RTX 5090: no card here; its cluster answers are estimates, the H100's
 * clusters a SM times its own 170 SMs, for D = 128 and 256 (at D = 512 the kernels need more than
 * its 99 KB a block, so no answer counts there). */
static const gpu_profile GPUS[] = {
    { "A100", 8, 0, 108, 163, 164, 40, 0, { { 0 } }, 1 },
    { "RTX 3080", 8, 6, 68, 99, 100, 5, 0, { { 0 } }, 1 },
    { "RTX 3090", 8, 6, 82, 99, 100, 6, 0, { { 0 } }, 1 },
    { "RTX A6000", 8, 6, 84, 99, 100, 6, 0, { { 0 } }, 1 },
    { "RTX 4090", 8, 9, 128, 99, 100, 72, 0, { { 0 } }, 1 },
    { "RTX 6000 Ada", 8, 9, 142, 99, 100, 96, 0, { { 0 } }, 1 },
    { "H100", 9, 0, 132, 227, 228, 50, 1, { { H100_R128_8, H100_R128_16 }, { H100_R256_8, H100_R256_16 }, { H100_R512_8, H100_R512_16 } }, 1 },
    { "H200", 9, 0, 132, 227, 228, 60, 1, { { H100_R128_8, H100_R128_16 }, { H100_R256_8, H100_R256_16 }, { H100_R512_8, H100_R512_16 } }, 1 },
    { "RTX 5090", 12, 0, 170, 99, 100, 96, 1, { { R5090_128_8, R5090_128_16 }, { R5090_256_8, R5090_256_16 }, { 0, 0 } }, 1 },
};
#define NGPUS ((int)(sizeof(GPUS) / sizeof(GPUS[0])))
/* caps as gpu_caps_query reads them with a build holding the device's SASS;
 * device_sm_count 0: a described GPU, which no launcher's plan asks the driver about */
static gpu_caps caps_of(const gpu_profile *g)
{
    gpu_caps c;
    memset(&c, 0, sizeof(c));
    snprintf(c.name, sizeof(c.name), "NVIDIA %s", g->name);
    c.cc_major = g->major;
    c.cc_minor = g->minor;
    c.sm_count = g->sms;
    c.smem_per_block = 48 * KB;
    c.smem_per_block_optin = g->optin_kb * KB;
    c.smem_per_sm = g->smem_sm_kb * KB;
    c.l2_bytes = g->l2_mb << 20;
    c.cluster_launch = g->clusters;
    c.cooperative_launch = 1;
    c.binary_version = c.ptx_version = 10 * g->major + g->minor;
    memcpy(c.cluster_resident, g->resident, sizeof(c.cluster_resident));
    c.persistent_ctas_per_sm = g->ctas_per_sm;
    return c;
}

static const gpu_profile *gpu_named(const char *name)
{
    for (int i = 0; i < NGPUS; i++)
        if (strcmp(GPUS[i].name, name) == 0) return &GPUS[i];
    cr_assert_fail("no GPU %s", name);
    return NULL;
}

/* configs/default.ini, with --set style changes (NULL-terminated) */
static cc_config config_with(const char *const *sets)
{
    cc_config cfg;
    cc_config_defaults(&cfg);
    cr_assert_eq(cc_config_load_unchecked(&cfg, "configs/default.ini"), 0, "configs/default.ini");
    for (int i = 0; sets && sets[i]; i++) cr_assert_eq(cc_config_set_arg(&cfg, sets[i]), 0, "%s", sets[i]);
    return cfg;
}

static gpu_step_plan plan_of(const gpu_caps *c, const cc_config *cfg, int B, int T, size_t free_bytes)
{
    gpu_step_plan p;
    cr_assert_eq(gpu_plan_make(&p, c, cfg, B, T, free_bytes, NULL), 0, "%s B=%d T=%d D=%d", c->name, B, T,
                 cfg->d_model);
    return p;
}

Test(plan_gpu, lanes_divide_the_batch_and_each_lane_takes_its_share)
{
    static const int Bs[] = { 8, 16, 24, 32, 64, 128, 256 }, Ds[] = { 256, 512, 1024 };
    for (int g = 0; g < NGPUS; g++)
        for (size_t b = 0; b < sizeof(Bs) / sizeof(Bs[0]); b++)
            for (size_t k = 0; k < sizeof(Ds) / sizeof(Ds[0]); k++) {
                char d[32];
                snprintf(d, sizeof(d), "d_model=%d", Ds[k]);
                const char *sets[] = { d, NULL };
                const cc_config cfg = config_with(sets);
                const gpu_caps c = caps_of(&GPUS[g]);
                const gpu_step_plan p = plan_of(&c, &cfg, Bs[b], 512, 0);
                cr_expect(p.lanes >= 1 && p.lanes <= GPU_MAX_LANES && Bs[b] % p.lanes == 0, "%s B=%d D=%d: %d lanes",
                          c.name, Bs[b], Ds[k], p.lanes);
                cr_expect_eq(p.lane_B * p.lanes, Bs[b]);
                cr_expect_eq(p.rec_caps.sm_count, p.lanes > 1 ? c.sm_count / p.lanes : c.sm_count, "%s", c.name);
                cr_expect_eq(p.impl, gpu_gru_impl_for(&p.rec_caps, p.path, p.lane_B, 512, Ds[k]),
                             "the lane's recurrence is the one its share of the GPU runs");
                cr_expect_eq(p.eval_impl, gpu_gru_impl_for(&p.rec_caps, p.path, Bs[b], 512, Ds[k]));
                /* more than one lane only where each lane's share still runs the cluster kernels */
                if (p.lanes > 1) cr_expect_eq(p.impl, GRU_IMPL_CLUSTER, "%s B=%d D=%d", c.name, Bs[b], Ds[k]);
            }
    /* [gpu] lanes: each lane's recurrence chooses by its share of the SMs (they run at once) */
    for (int g = 0; g < NGPUS; g++)
        for (int n = 2; n <= 8; n *= 2) {
            char lanes[32];
            snprintf(lanes, sizeof(lanes), "lanes=%d", n);
            const char *sets[] = { lanes, NULL };
            const cc_config cfg = config_with(sets);
            const gpu_caps c = caps_of(&GPUS[g]);
            const gpu_step_plan p = plan_of(&c, &cfg, 64, 512, 0);
            cr_expect_eq(p.lanes, n);
            cr_expect_eq(p.lane_B, 64 / n);
            cr_expect_eq(p.rec_caps.sm_count, c.sm_count / n, "%s, %d lanes", c.name, n);
            cr_expect_eq(p.impl, gpu_gru_impl_for(&p.rec_caps, p.path, p.lane_B, 512, cfg.d_model));
        }
}

/* No cluster kernels without sm_90 features: every sm_80/86/89 card runs the
 * default model's recurrence on the persistent kernels, in one lane, and the
 * layers' wavefront splits the SMs between as many layers as have a split. */
Test(plan_gpu, default_config_without_clusters_takes_persistent_and_the_wavefront)
{
    const cc_config cfg = config_with(NULL);
    for (int g = 0; g < NGPUS; g++) {
        if (GPUS[g].clusters) continue;
        const gpu_caps c = caps_of(&GPUS[g]);
        const gpu_step_plan p = plan_of(&c, &cfg, cfg.batch_size, cfg.seq_len, 0);
        cr_expect_eq(p.impl, GRU_IMPL_PERSISTENT, "%s: %s", c.name, gpu_gru_impl_name(p.impl));
        cr_expect_eq(p.lanes, 1, "%s", c.name);
        cr_expect_not(p.wide, "%s: no clusters, no wide clusters", c.name);
        /* persistent at D <= 512: chunks of a quarter of T up to 128, halved */
        cr_expect_eq(p.wave_chunk, 64, "%s: %s", c.name, p.wave_why);
        const int k = p.rec_caps.sm_count / p.wave_caps.sm_count;
        cr_expect(k >= 2 && k <= cfg.n_layers, "%s: %d layers at once (%s)", c.name, k, p.wave_why);
        cr_expect_eq(gpu_gru_impl_for(&p.wave_caps, p.path, p.lane_B, cfg.seq_len, cfg.d_model), GRU_IMPL_PERSISTENT,
                     "%s: a layer's share still runs the persistent kernels", c.name);
        cr_expect_eq(p.wave_layers, cfg.n_layers > 2 ? cfg.n_layers : 2);
    }
    /* the RTX 3090 holds no split on a third of its SMs, two layers at once (docs/gpus.md) */
    const gpu_caps c = caps_of(gpu_named("RTX 3090"));
    const gpu_step_plan p = plan_of(&c, &cfg, cfg.batch_size, cfg.seq_len, 0);
    cr_expect_eq(p.wave_caps.sm_count, 41, "%s", p.wave_why);
}

/* The H200 at the default config: the cluster recurrence (its kernels are
 * resident), in the most lanes up to 4 that still run it, 2 under the
 * wavefront; one lane under recompute's wavefront. */
Test(plan_gpu, default_config_with_clusters_takes_the_fastest_recurrence_and_the_wavefront)
{
    const cc_config cfg = config_with(NULL);
    const gpu_caps c = caps_of(gpu_named("H200"));
    const gpu_step_plan p = plan_of(&c, &cfg, cfg.batch_size, cfg.seq_len, 0);
    cr_expect(p.wave_chunk > 0, "the wavefront: %s", p.wave_why);
    cr_assert_gt(gru_cluster_resident(&c, cfg.d_model), 0, "the H200's recorded answer");
    cr_expect_eq(p.impl, GRU_IMPL_CLUSTER);
    cr_expect_eq(p.lanes, 2, "4 lanes of 16 run clusters; the wavefront takes 2");
    cr_expect_eq(p.wave_chunk, 128);
    const char *on[] = { "recompute=on", NULL };
    const cc_config rc = config_with(on);
    const gpu_step_plan r = plan_of(&c, &rc, rc.batch_size, rc.seq_len, 0);
    cr_expect(r.recompute && r.wave_chunk == r.rc_window, "recompute under the wavefront: %s", r.wave_why);
    cr_expect_eq(r.lanes, 1, "recompute under the wavefront runs one lane");
    /* a failed query reads 0: the cluster kernels are not planned on */
    gpu_caps unknown = c;
    memset(unknown.cluster_resident, 0, sizeof(unknown.cluster_resident));
    cr_expect_neq(plan_of(&unknown, &cfg, cfg.batch_size, cfg.seq_len, 0).impl, GRU_IMPL_CLUSTER);
    unknown = c;
    unknown.persistent_ctas_per_sm = 0;
    unknown.cluster_launch = 0;
    cr_expect_eq(plan_of(&unknown, &cfg, cfg.batch_size, cfg.seq_len, 0).impl, GRU_IMPL_PER_STEP,
                 "no persistent kernel placed: the per-step loop");
    gpu_caps off = c;
    off.cluster_launch = 0; /* [gpu] clusters = off */
    const gpu_step_plan q = plan_of(&off, &cfg, cfg.batch_size, cfg.seq_len, 0);
    cr_expect_neq(q.impl, GRU_IMPL_CLUSTER);
    cr_expect_neq(q.eval_impl, GRU_IMPL_CLUSTER);
}

Test(plan_gpu, wavefront_off_by_key_and_where_the_per_step_loop_fills_the_gpu)
{
    const gpu_caps c = caps_of(gpu_named("RTX 4090"));
    const char *off[] = { "wavefront=off", NULL };
    const cc_config a = config_with(off);
    gpu_step_plan p = plan_of(&c, &a, 64, 512, 0);
    cr_expect_eq(p.wave_chunk, 0);
    cr_expect(strstr(p.wave_why, "[gpu] wavefront") != NULL, "%s", p.wave_why);
    cr_expect_eq(p.wave_layers, 2);
    /* the per-step loop: its GEMM at B=64, D=512 (12 tiles) leaves the 4090's 128 SMs to the other layers; at
     * B=256, D=2048 (192 tiles) it fills them */
    const char *step[] = { "recurrence=per-step", NULL };
    const cc_config b = config_with(step);
    p = plan_of(&c, &b, 64, 512, 0);
    cr_expect_eq(p.impl, GRU_IMPL_PER_STEP);
    cr_expect(p.wave_chunk > 0, "%s", p.wave_why);
    const char *wide[] = { "recurrence=per-step", "d_model=2048", NULL };
    const cc_config w = config_with(wide);
    p = plan_of(&c, &w, 256, 512, 0);
    cr_expect_eq(p.impl, GRU_IMPL_PER_STEP);
    cr_expect_eq(p.wave_chunk, 0, "%s", p.wave_why);
    cr_expect(strstr(p.wave_why, "take the whole GPU") != NULL, "%s", p.wave_why);
    const char *four[] = { "n_layers=4", NULL };
    const cc_config d = config_with(four);
    p = plan_of(&c, &d, 64, 512, 0);
    cr_expect(p.wave_chunk > 0, "%s", p.wave_why);
    cr_expect_eq(p.wave_layers, 4, "under the wavefront each of L > 2 layers has its own gradient buffers");
}

/* Any number of layers takes the wavefront (the config allows up to
 * CC_MAX_LAYERS): a lane has at most GPU_WAVE_STREAMS pairs of streams, and
 * beyond that many layers consecutive layers share a pair, as few a pair as
 * that allows; every layer keeps its own gradient buffers and, under
 * recompute, its own set of window buffers, laid out so that no tensor of
 * `work` reads bytes another wrote while its value lived. The cuBLASLt
 * workspaces and the persistent kernels' scratch are the pairs', not the
 * layers'. Planned on the H100's recorded answers (the cluster kernels) and
 * on an sm_89 card (persistent grids, each pair's a share of the SMs). */
Test(plan_gpu, wavefront_takes_any_number_of_layers_on_bounded_streams)
{
    static const int Ls[] = { 8, 9, 12, 16, 17, 32 };
    static const char *const cards[] = { "H100", "RTX 4090" };
    for (size_t g = 0; g < sizeof(cards) / sizeof(cards[0]); g++)
        for (size_t i = 0; i < sizeof(Ls) / sizeof(Ls[0]); i++) {
            const int L = Ls[i];
            char layers[32];
            snprintf(layers, sizeof(layers), "n_layers=%d", L);
            const char *sets[] = { layers, NULL };
            const cc_config cfg = config_with(sets);
            const gpu_caps c = caps_of(gpu_named(cards[g]));
            const gpu_step_plan p = plan_of(&c, &cfg, cfg.batch_size, cfg.seq_len, 0);
            cr_assert_gt(p.wave_chunk, 0, "%s L=%d: %s", c.name, L, p.wave_why);
            cr_expect_null(strstr(p.wave_why, "more layers"), "%s", p.wave_why);
            const int group = (L + GPU_WAVE_STREAMS - 1) / GPU_WAVE_STREAMS;
            cr_expect_eq(p.wave_group, group, "%s L=%d: %d layers a pair", c.name, L, p.wave_group);
            cr_expect_eq(p.wave_streams, (L + group - 1) / group, "%s L=%d", c.name, L);
            cr_expect_leq(p.wave_streams, GPU_WAVE_STREAMS);
            cr_expect_eq(gpu_plan_wave_stream(&p, 0), 0);
            cr_expect_eq(gpu_plan_wave_stream(&p, L - 1), p.wave_streams - 1, "%s L=%d: every pair used", c.name, L);
            for (int l = 1; l < L; l++) { /* consecutive layers, a group a pair */
                const int a = gpu_plan_wave_stream(&p, l - 1), b = gpu_plan_wave_stream(&p, l);
                cr_expect(b == a || b == a + 1, "%s L=%d: layer %d on pair %d after %d", c.name, L, l, b, a);
            }
            cr_expect_eq(p.wave_layers, L, "%s L=%d: each layer its own gradient buffers", c.name, L);
            const gpu_schedule_kind k = gpu_plan_kind(&p, cfg.seq_len);
            cr_expect_eq(k.wave_shared, L > GPU_WAVE_STREAMS, "%s L=%d", c.name, L);
            if (p.impl == GRU_IMPL_PERSISTENT) { /* at most a pair's grid at a time a pair */
                const int at_once = p.rec_caps.sm_count / p.wave_caps.sm_count;
                cr_expect(at_once >= 2 && at_once <= p.wave_streams, "%s L=%d: %d at once (%s)", c.name, L, at_once,
                          p.wave_why);
            }
            if (L > GPU_WAVE_STREAMS)
                cr_expect_not_null(strstr(p.wave_why, "pairs of streams"), "%s L=%d: %s", c.name, L, p.wave_why);
        }
    /* the workspaces are the pairs': 16 layers on 8 pairs hold what 8 layers on 8 do, 9 layers on 5 pairs less */
    const gpu_caps c = caps_of(gpu_named("RTX 4090"));
    const char *l8[] = { "n_layers=8", NULL }, *l9[] = { "n_layers=9", NULL }, *l16[] = { "n_layers=16", NULL };
    const cc_config c8 = config_with(l8), c9 = config_with(l9), c16 = config_with(l16);
    const gpu_step_plan p8 = plan_of(&c, &c8, 64, 512, 0), p9 = plan_of(&c, &c9, 64, 512, 0),
                        p16 = plan_of(&c, &c16, 64, 512, 0);
    cr_assert(p8.wave_chunk && p9.wave_chunk && p16.wave_chunk);
    cr_expect_eq(p8.lanes, p16.lanes);
    cr_expect_eq(p16.group_bytes[GPU_MEM_WORKSPACE], p8.group_bytes[GPU_MEM_WORKSPACE]);
    cr_expect_lt(p9.group_bytes[GPU_MEM_WORKSPACE], p8.group_bytes[GPU_MEM_WORKSPACE]);
    cr_expect_gt(p16.group_bytes[GPU_MEM_LAYERS], p8.group_bytes[GPU_MEM_LAYERS], "the layers' own buffers grow");
}

/* Recompute under the wavefront at more layers than pairs of streams:
 * a set of window buffers a layer (the sets carry a layer's state between
 * its windows), every tensor inside `work`, none read after another wrote
 * its bytes in any program of the step. */
Test(plan_gpu, recompute_wavefront_beyond_the_streams_keeps_a_set_a_layer)
{
    static const int Ls[] = { 9, 12, 32 };
    static const char *const cards[] = { "H100", "RTX 4090" };
    for (size_t i = 0; i < 2 * sizeof(Ls) / sizeof(Ls[0]); i++) {
        const int L = Ls[i / 2];
        char layers[32];
        snprintf(layers, sizeof(layers), "n_layers=%d", L);
        const char *sets[] = { layers, "recompute=on", NULL };
        const cc_config cfg = config_with(sets);
        const gpu_caps c = caps_of(gpu_named(cards[i % 2]));
        const gpu_step_plan p = plan_of(&c, &cfg, cfg.batch_size, cfg.seq_len, 0);
        cr_assert(p.recompute && p.wave_chunk, "%s L=%d: %s", c.name, L, p.wave_why);
        cr_expect_gt(p.wave_group, 1);
        cr_expect_eq(p.rc_sets, L, "a set a layer, not a pair");
        const cc_dims d = cc_dims_from_config(&cfg);
        gpu_work_part parts[GPU_WORK_MAX];
        size_t total = 0;
        const int n = gpu_plan_work(&p, &d, cfg.seq_len, parts, &total);
        int top_set = 0;
        for (int k = 0; k < n; k++) {
            cr_expect_leq(parts[k].offset + parts[k].bytes, total, "%s (set %d)", parts[k].name, parts[k].set);
            if (parts[k].set > top_set) top_set = parts[k].set;
        }
        cr_expect_eq(top_set, L - 1, "the last layer's set");
        char why[256] = "";
        cr_expect(gpu_plan_work_check(&p, &cfg, why, sizeof(why)), "%s L=%d: %s", c.name, L, why);
    }
}

/* [gpu] recompute = auto: on exactly where the plan that keeps every
 * layer's activations, with GPU_MEMORY_MARGIN to spare, does not fit the
 * free bytes; a smaller classifier chunk is tried first. */
Test(plan_gpu, recompute_auto_turns_on_exactly_past_the_free_bytes)
{
    const cc_config cfg = config_with(NULL);
    static const char *const cards[] = { "H200", "RTX 3090", "RTX 4090", "A100" };
    for (size_t i = 0; i < sizeof(cards) / sizeof(cards[0]); i++) {
        const gpu_caps c = caps_of(gpu_named(cards[i]));
        const int B = cfg.batch_size, T = cfg.seq_len;
        const gpu_step_plan roomy = plan_of(&c, &cfg, B, T, (size_t)1 << 50);
        cr_assert_not(roomy.recompute);
        cr_expect_eq(roomy.ce_budget, GPU_CE_BUDGET);
        const size_t keep = roomy.device_bytes;
        gpu_step_plan p = plan_of(&c, &cfg, B, T, keep + GPU_MEMORY_MARGIN);
        cr_expect_not(p.recompute, "%s: the keep plan fits with the margin: %s", cards[i], p.recompute_why);
        cr_expect_eq(p.ce_budget, GPU_CE_BUDGET);
        cr_expect_eq(p.device_bytes, keep);
        /* a byte short: the smaller classifier chunk first, which fits */
        p = plan_of(&c, &cfg, B, T, keep + GPU_MEMORY_MARGIN - 1);
        cr_expect_eq(p.ce_budget, GPU_CE_BUDGET_TIGHT, "%s", cards[i]);
        cr_expect_not(p.recompute, "%s: %s", cards[i], p.recompute_why);
        const size_t tight = p.device_bytes;
        cr_expect_lt(tight, keep);
        p = plan_of(&c, &cfg, B, T, tight + GPU_MEMORY_MARGIN);
        cr_expect_not(p.recompute, "%s: %s", cards[i], p.recompute_why);
        p = plan_of(&c, &cfg, B, T, tight + GPU_MEMORY_MARGIN - 1);
        cr_expect(p.recompute, "%s: a byte short of the tight plan: %s", cards[i], p.recompute_why);
        cr_expect(strstr(p.recompute_why, "free on the device") != NULL, "%s", p.recompute_why);
        cr_expect_lt(p.device_bytes, tight, "%s: recompute holds less", cards[i]);
        cr_expect_eq(p.memory_budget, tight + GPU_MEMORY_MARGIN - 1);
        /* [gpu] memory_limit lowers what the device has free, and is named */
        cc_config lim = cfg;
        lim.gpu_memory_limit = tight + GPU_MEMORY_MARGIN - 1;
        p = plan_of(&c, &lim, B, T, 80 * GIB);
        cr_expect(p.recompute, "%s", p.recompute_why);
        cr_expect(strstr(p.recompute_why, "[gpu] memory_limit") != NULL, "%s", p.recompute_why);
        lim.gpu_memory_limit = 200 * GIB; /* no more than the device has */
        p = plan_of(&c, &lim, B, T, tight + GPU_MEMORY_MARGIN - 1);
        cr_expect(p.recompute);
        cr_expect_eq(p.memory_budget, tight + GPU_MEMORY_MARGIN - 1);
        /* unknown free memory: keep everything */
        p = plan_of(&c, &cfg, B, T, 0);
        cr_expect_not(p.recompute, "%s", p.recompute_why);
        cr_expect(strstr(p.recompute_why, "unknown") != NULL, "%s", p.recompute_why);
        /* on and off by key, whatever the memory */
        const char *on[] = { "recompute=on", NULL }, *off[] = { "recompute=off", NULL };
        const cc_config con = config_with(on), coff = config_with(off);
        cr_expect(plan_of(&c, &con, B, T, 0).recompute);
        cr_expect_not(plan_of(&c, &coff, B, T, 1 * GIB).recompute);
    }
}

/* The plan's bytes are its table's: device_bytes by group, what grows with
 * the batch, and each buffer row where its id says. */
Test(plan_gpu, device_bytes_add_up_from_the_buffer_table)
{
    static const char *const variants[][3] = { { NULL }, { "recompute=on", NULL }, { "grad_accum=2", NULL },
                                               { "attention=fp32", "recompute=on", NULL },
                                               { "vocab_size=50257", NULL }, { "lanes=4", NULL } };
    for (int g = 0; g < NGPUS; g++)
        for (size_t v = 0; v < sizeof(variants) / sizeof(variants[0]); v++) {
            const cc_config cfg = config_with(variants[v]);
            const gpu_caps c = caps_of(&GPUS[g]);
            const int B = cfg.batch_size, T = cfg.seq_len;
            const gpu_step_plan p = plan_of(&c, &cfg, B, T, 0);
            size_t sum = 0;
            for (int k = 0; k < GPU_MEM_GROUPS; k++) sum += p.group_bytes[k];
            cr_expect_eq(sum, p.device_bytes, "%s %s", c.name, variants[v][0] ? variants[v][0] : "default");
            cr_expect_gt(p.bytes_per_seq, 0);
            cr_expect_lt(p.bytes_per_seq * B, p.device_bytes);
            const cc_dims d = cc_dims_from_config(&cfg);
            cc_layout lay;
            cc_layout_build(&lay, &d);
            cr_expect_eq(p.accum_bytes, 4 * lay.total);
            gpu_plan_buffer t[GPU_BUF_COUNT];
            cr_assert_eq(gpu_plan_buffers(&p, &d, lay.total, B, T, t), GPU_BUF_COUNT);
            size_t by[GPU_MEM_GROUPS] = { 0 };
            for (int i = 0; i < GPU_BUF_COUNT; i++) {
                cr_expect_eq(t[i].id, (gpu_buf_id)i, "row %d", i);
                cr_expect(t[i].what && t[i].what[0] && t[i].group >= 0 && t[i].group < GPU_MEM_GROUPS, "row %d", i);
                by[t[i].group] += t[i].bytes;
            }
            /* cuBLASLt workspaces and recurrence scratch come on top of the table's workspace,
             * the accumulated gradient on top of its weights; the other groups are the table's */
            cr_expect_eq(by[GPU_MEM_LAYERS], p.group_bytes[GPU_MEM_LAYERS]);
            cr_expect_eq(by[GPU_MEM_ATTENTION], p.group_bytes[GPU_MEM_ATTENTION]);
            cr_expect_eq(by[GPU_MEM_CLASSIFIER], p.group_bytes[GPU_MEM_CLASSIFIER]);
            cr_expect_eq(by[GPU_MEM_LANES], p.group_bytes[GPU_MEM_LANES]);
            cr_expect_eq(p.group_bytes[GPU_MEM_WEIGHTS], by[GPU_MEM_WEIGHTS] + (cfg.grad_accum > 1 ? 4 * lay.total : 0));
            cr_expect_gt(p.group_bytes[GPU_MEM_WORKSPACE], by[GPU_MEM_WORKSPACE]);
            cr_expect_eq(p.group_bytes[GPU_MEM_LANES] > 0, p.lanes > 1, "%d lanes", p.lanes);
            /* recompute: the layers' tensors in work, none of their own */
            cr_expect_eq(t[GPU_BUF_WORK].bytes > 0, p.recompute);
            cr_expect_eq(t[GPU_BUF_GATES].bytes == 0, p.recompute);
            cr_expect_eq(t[GPU_BUF_QKV16].bytes > 0, p.attn_tc && !p.recompute);
            cr_expect_eq(t[GPU_BUF_QKV].bytes > 0, !p.attn_tc);
            cr_expect_eq(p.attn_tc != ATTN_FP32,
                         strcmp(cfg.gpu_attention, "fp32") != 0 && attention_tc_supported(&c, d.D, d.H, d.W),
                         "%s: tensor cores unless [gpu] attention = fp32, where the kernels fit", c.name);
        }
}

/* The plan's cuBLASLt workspaces are the contexts the executor makes for
 * each lane (gpu_lane_resources_of, the table both read): its own and side
 * stream's, the recurrence stream's under recompute, and under the
 * wavefront a feed and a recurrence stream's for each pair (the first
 * pair's recurrence stream is the lane's: one context, not two). On the
 * cluster plans, whose recurrence keeps no scratch in the workspace group,
 * the group is those contexts and the table's workspace rows exactly. */
Test(plan_gpu, workspace_bytes_are_the_contexts_the_executor_makes)
{
    static const char *const variants[][3] = { { NULL }, { "recompute=on", NULL },
                                               { "recompute=on", "wavefront=off", NULL }, { "wavefront=off", NULL } };
    int checked = 0;
    for (int g = 0; g < NGPUS; g++)
        for (size_t v = 0; v < sizeof(variants) / sizeof(variants[0]); v++) {
            const cc_config cfg = config_with(variants[v]);
            const gpu_caps c = caps_of(&GPUS[g]);
            const gpu_step_plan p = plan_of(&c, &cfg, cfg.batch_size, cfg.seq_len, (size_t)1 << 40);
            if (p.impl != GRU_IMPL_CLUSTER) continue;
            gpu_lane_resources res;
            gpu_lane_resources_of(&p, &res);
            const int want = p.wave_chunk ? 2 + 2 * p.wave_streams : p.recompute ? 3 : 2;
            cr_expect_eq(res.gemms, want, "%s %s: %d contexts a lane", c.name, variants[v][0] ? variants[v][0] : "default",
                         res.gemms);
            size_t ws = 0;
            for (int k = 0; k < res.gemms; k++) ws += res.workspace[k];
            const cc_dims d = cc_dims_from_config(&cfg);
            cc_layout lay;
            cc_layout_build(&lay, &d);
            gpu_plan_buffer t[GPU_BUF_COUNT];
            gpu_plan_buffers(&p, &d, lay.total, cfg.batch_size, cfg.seq_len, t);
            size_t table = 0;
            for (int i = 0; i < GPU_BUF_COUNT; i++)
                if (t[i].group == GPU_MEM_WORKSPACE) table += t[i].bytes;
            cr_expect_eq(p.group_bytes[GPU_MEM_WORKSPACE], table + (size_t)p.lanes * ws, "%s %s", c.name,
                         variants[v][0] ? variants[v][0] : "default");
            checked += p.recompute && p.wave_chunk;
        }
    cr_expect_gt(checked, 0, "no cluster plan took recompute under the wavefront: the test checked nothing");
}

/* The attention kernel by shape on every recorded card: the band kernel at
 * head sizes 64, 128, 256 with W <= 129, the tiled one at every other head
 * size up to 256 and every window (its shared memory fits 99 KB parts),
 * FP32 above 256 or when the key asks; `tiled` forces the tiled kernel. */
Test(plan_gpu, attention_kernel_by_head_size_and_window)
{
    static const struct { const char *sets[4]; int kernel; } cases[] = {
        { { NULL }, ATTN_TC_BANDED },                                   /* D=512 H=8 W=128 */
        { { "d_model=768", NULL }, ATTN_TC_TILED },                     /* head size 96 */
        { { "d_model=1536", NULL }, ATTN_TC_TILED },                    /* 192 */
        { { "d_model=1792", NULL }, ATTN_TC_TILED },                    /* 224 */
        { { "d_model=2048", NULL }, ATTN_TC_BANDED },                   /* 256 */
        { { "ctx_window=512", NULL }, ATTN_TC_TILED },
        { { "ctx_window=129", NULL }, ATTN_TC_BANDED },
        { { "ctx_window=130", NULL }, ATTN_TC_TILED },
        { { "n_heads=16", NULL }, ATTN_TC_TILED },                      /* 32 */
        { { "d_model=4096", NULL }, ATTN_FP32 },                        /* 512: over 256 */
        { { "attention=tiled", NULL }, ATTN_TC_TILED },
        { { "attention=fp32", NULL }, ATTN_FP32 },
        { { "d_model=520", "n_heads=13", NULL }, ATTN_TC_TILED },       /* 40: padded inside */
    };
    for (int k = 0; k < NGPUS; k++) {
        const gpu_caps c = caps_of(&GPUS[k]);
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
            const cc_config cfg = config_with(cases[i].sets);
            const gpu_step_plan p = plan_of(&c, &cfg, 8, 256, 0);
            cr_expect_eq(p.attn_tc, cases[i].kernel, "%s, case %zu: %s", c.name, i, attention_kernel_name(p.attn_tc));
        }
    }
}

static int meet(const gpu_work_part *a, const gpu_work_part *b)
{
    return a->offset < b->offset + b->bytes && b->offset < a->offset + a->bytes;
}

/* Under recompute the tensors of `work` share bytes only where their
 * values are never live at once: walking each program of the step (with
 * and without a gradient, evaluation) in program order, no operation reads
 * bytes of a tensor that another tensor wrote since (gpu_plan_work_check,
 * which follows who holds each byte rather than the liveness pass's spans).
 * Every tensor lies inside the allocation, which is the buffer table's, and
 * the sharing is real: the context stream's part lies over the layers'
 * tensors (their values are dead between the forward and the backward) and the
 * allocation is smaller than the tensors side by side. The context stream's
 * part divides a lane. */
Test(plan_gpu, recompute_work_tensors_share_bytes_only_where_never_live_together)
{
    static const char *const variants[][4] = { { "recompute=on", NULL },
                                               { "recompute=on", "attention=fp32", NULL },
                                               { "recompute=on", "d_model=1024", NULL },
                                               { "recompute=on", "recurrence=per-step", "seq_len=40", NULL },
                                               { "recompute=on", "lanes=4", NULL },
                                               { "recompute=on", "lanes=2", "ctx_grad_clamp=1", NULL },
                                               { "recompute=on", "wavefront=off", NULL } };
    for (int g = 0; g < NGPUS; g++)
        for (size_t v = 0; v < sizeof(variants) / sizeof(variants[0]); v++) {
            const cc_config cfg = config_with(variants[v]);
            const gpu_caps c = caps_of(&GPUS[g]);
            const int B = cfg.batch_size, T = cfg.seq_len;
            const gpu_step_plan p = plan_of(&c, &cfg, B, T, 0);
            const char *what = variants[v][1] ? variants[v][1] : "";
            cr_assert(p.recompute);
            cr_expect_eq(T % p.rc_window, 0, "window %d of T %d", p.rc_window, T);
            cr_expect(p.rc_sets == (p.wave_chunk ? cfg.n_layers : 1), "%d sets", p.rc_sets);
            cr_expect(!p.wave_chunk || p.wave_chunk == p.rc_window, "chunk %d, window %d", p.wave_chunk, p.rc_window);
            cr_expect(p.top_seqs >= 1 && p.lane_B % p.top_seqs == 0, "%d of a lane's %d", p.top_seqs, p.lane_B);
            const cc_dims d = cc_dims_from_config(&cfg);
            gpu_work_part parts[GPU_WORK_MAX];
            size_t total = 0, apart = 0;
            const int n = gpu_plan_work(&p, &d, T, parts, &total);
            cr_assert_gt(n, 10);
            cc_layout lay;
            cc_layout_build(&lay, &d);
            gpu_plan_buffer t[GPU_BUF_COUNT];
            gpu_plan_buffers(&p, &d, lay.total, B, T, t);
            cr_expect_eq(total, t[GPU_BUF_WORK].bytes, "the tensors' allocation is the table's");
            int top_over_layers = 0;
            for (int i = 0; i < n; i++) {
                cr_expect_leq(parts[i].offset + parts[i].bytes, total, "%s ends inside the allocation", parts[i].name);
                cr_expect_eq(parts[i].offset % 256, 0, "%s at a 256-byte offset", parts[i].name);
                apart += parts[i].bytes;
                for (int j = 0; j < n; j++)
                    top_over_layers |= parts[i].id >= GPU_WORK_S16 && parts[j].id < GPU_WORK_S16 && meet(&parts[i], &parts[j]);
            }
            cr_expect_lt(total, apart, "%s %s: tensors share bytes", c.name, what);
            cr_expect(top_over_layers, "%s %s: the context stream's part lies over the layers' tensors", c.name, what);
            char why[256] = "";
            cr_expect(gpu_plan_work_check(&p, &cfg, why, sizeof(why)), "%s %s: %s", c.name, what, why);
        }
}

/* The check can fail: with every tensor at offset 0, a value is read after
 * another tensor wrote its bytes. */
Test(plan_gpu, work_check_finds_tensors_that_share_bytes_while_live)
{
    const char *on[] = { "recompute=on", NULL };
    const cc_config cfg = config_with(on);
    const gpu_caps c = caps_of(gpu_named("RTX 4090"));
    gpu_step_plan p = plan_of(&c, &cfg, cfg.batch_size, cfg.seq_len, 0);
    char why[256] = "";
    cr_assert(gpu_plan_work_check(&p, &cfg, why, sizeof(why)), "%s", why);
    memset(p.work_at, 0, sizeof(p.work_at));
    cr_expect_not(gpu_plan_work_check(&p, &cfg, why, sizeof(why)));
    cr_log_info("with every tensor at 0: %s", why);
    cr_expect(strstr(why, "reads bytes") != NULL, "%s", why);
}

/* The ladder's testing aid: recompute's layers in a forced count of windows
 * where it divides T, else the plan's own window. */
Test(plan_gpu, forced_recompute_windows)
{
    const char *on[] = { "recompute=on", NULL };
    const cc_config cfg = config_with(on);
    const gpu_caps c = caps_of(gpu_named("RTX 4090"));
    gpu_step_plan own, p;
    cr_assert_eq(gpu_plan_make(&own, &c, &cfg, 64, 512, 0, NULL), 0);
    const gpu_plan_opts four = { .force_rc_windows = 4 }, three = { .force_rc_windows = 3 };
    cr_assert_eq(gpu_plan_make(&p, &c, &cfg, 64, 512, 0, &four), 0);
    cr_expect_eq(p.rc_window, 128);
    cr_expect_neq(own.rc_window, 128, "the plan's own window is another");
    cr_assert_eq(gpu_plan_make(&p, &c, &cfg, 64, 512, 0, &three), 0);
    cr_expect_eq(p.rc_window, own.rc_window, "3 does not divide 512");
}

Test(plan_gpu, lanes_not_dividing_the_batch_fail, .init = cr_redirect_stderr)
{
    const gpu_caps c = caps_of(gpu_named("H200"));
    const char *three[] = { "lanes=3", NULL }, *four[] = { "lanes=4", NULL };
    const cc_config a = config_with(three), b = config_with(four);
    gpu_step_plan p;
    cr_expect_neq(gpu_plan_make(&p, &c, &a, 64, 512, 0, NULL), 0, "3 lanes of 64 sequences");
    cr_expect_eq(gpu_plan_make(&p, &c, &a, 48, 512, 0, NULL), 0, "3 lanes of 48");
    cr_expect_eq(p.lanes, 3);
    cr_expect_eq(gpu_plan_make(&p, &c, &b, 64, 512, 0, NULL), 0);
    cr_expect_eq(p.lanes, 4);
    fflush(stderr);
    cr_expect_stderr_eq_str("catchat: [gpu] lanes: 3 does not divide batch_size 64 (1..8 lanes)\n");
}

Test(plan_gpu, what_the_gpu_path_cannot_run_fails, .init = cr_redirect_stderr)
{
    gpu_caps old = caps_of(gpu_named("RTX 3090"));
    old.cc_major = 7;
    old.cc_minor = 5;
    const cc_config cfg = config_with(NULL);
    gpu_step_plan p;
    cr_expect_neq(gpu_plan_make(&p, &old, &cfg, 64, 512, 0, NULL), 0, "sm_75");
    const char *odd[] = { "d_model=100", "n_heads=4", NULL };
    const cc_config o = config_with(odd);
    const gpu_caps c = caps_of(gpu_named("RTX 3090"));
    cr_expect_neq(gpu_plan_make(&p, &c, &o, 64, 512, 0, NULL), 0, "d_model 100");
    cr_expect_eq(gpu_plan_make(&p, &c, &cfg, 64, 512, 0, NULL), 0);
}

/* A 10 GiB and a 24 GiB card, their free bytes what is left after the CUDA
 * context: the plan holds them with the margin to spare, taking recompute
 * where keeping everything would not fit. */
Test(plan_gpu, plans_fit_10_and_24_gib_cards)
{
    static const struct {
        const char *gpu;
        size_t bytes;
    } cards[] = { { "RTX 3080", 10 * GIB }, { "RTX 3090", 24 * GIB }, { "RTX 4090", 24 * GIB } };
    static const char *const variants[][3] = { { NULL }, { "batch_size=256", NULL }, { "d_model=1024", NULL },
                                               { "d_model=1024", "batch_size=128", NULL },
                                               { "vocab_size=50257", "batch_size=128", NULL } };
    int took_recompute = 0;
    for (size_t k = 0; k < sizeof(cards) / sizeof(cards[0]); k++)
        for (size_t v = 0; v < sizeof(variants) / sizeof(variants[0]); v++) {
            const cc_config cfg = config_with(variants[v]);
            const gpu_caps c = caps_of(gpu_named(cards[k].gpu));
            const size_t free_b = cards[k].bytes - 512 * MIB;
            const gpu_step_plan p = plan_of(&c, &cfg, cfg.batch_size, cfg.seq_len, free_b);
            cr_expect_leq(p.device_bytes + GPU_MEMORY_MARGIN, free_b, "%s %s %s: %.2f GiB (%s)", cards[k].gpu,
                          variants[v][0] ? variants[v][0] : "default", variants[v][1] ? variants[v][1] : "",
                          p.device_bytes / (double)GIB, p.recompute_why);
            took_recompute += p.recompute;
        }
    cr_expect_gt(took_recompute, 0, "some of these need recompute on a 10 GiB card");
}

/* Recompute under the wavefront gives each layer its own window buffers;
 * where those would not fit the free bytes and one layer at a time would,
 * the plan runs one layer at a time (and says why). */
Test(plan_gpu, recompute_takes_the_wavefront_only_where_it_fits)
{
    static const char *const on[] = { "recompute=on", NULL }, *const layer[] = { "recompute=on", "wavefront=off", NULL };
    int took = 0;
    for (int g = 0; g < NGPUS; g++) {
        const gpu_caps c = caps_of(&GPUS[g]);
        const cc_config cfg = config_with(on), cfg_layer = config_with(layer);
        const int B = cfg.batch_size, T = cfg.seq_len;
        const gpu_step_plan roomy = plan_of(&c, &cfg, B, T, (size_t)1 << 40);
        if (!roomy.wave_chunk) continue; /* this GPU's kernels take no wavefront at all */
        took++;
        const gpu_step_plan one = plan_of(&c, &cfg_layer, B, T, (size_t)1 << 40);
        cr_expect_lt(one.device_bytes, roomy.device_bytes, "%s: a set a layer holds more", c.name);
        const size_t free_bytes = one.device_bytes + GPU_MEMORY_MARGIN + ((size_t)1 << 20);
        cr_assert_lt(free_bytes, roomy.device_bytes + GPU_MEMORY_MARGIN, "%s: the test's budget", c.name);
        const gpu_step_plan tight = plan_of(&c, &cfg, B, T, free_bytes);
        cr_expect_eq(tight.wave_chunk, 0, "%s: %s", c.name, tight.wave_why);
        cr_expect(strstr(tight.wave_why, "would not fit") != NULL, "%s: %s", c.name, tight.wave_why);
        cr_expect_leq(tight.device_bytes + GPU_MEMORY_MARGIN, free_bytes, "%s", c.name);
        cr_expect_eq(tight.rc_sets, 1);
    }
    cr_expect_gt(took, 0, "no profile took recompute under the wavefront: the test checked nothing");
}

/* The preflight's miniature (gpu_plan_miniature) of every plan the planner
 * makes here: on each recorded card, under each profile a user may set, at
 * the widths, depths, vocabularies, batches and [gpu] keys of the GPU
 * tests' matrix (tests/preflight_matrix_gpu.sh), the miniature plans the
 * run's schedule kind, or the preflight would check another program than
 * the run's. Memory budgets that force recompute under auto included; more
 * layers than the wavefront's pairs of streams too (the miniature's three
 * layers then share two pairs). */
Test(plan_gpu, every_plans_miniature_plans_the_same_kind)
{
    static const char *const profiles[] = { "native", "sm80", "sm86", "sm89", "sm90", "sm120" };
    static const char *const variants[][4] = {
        { NULL },
        { "recompute=on", NULL },
        { "recompute=off", NULL },
        { "lanes=1", NULL },
        { "lanes=2", NULL },
        { "lanes=4", NULL },
        { "recompute=on", "lanes=2", NULL },
        { "wavefront=off", NULL },
        { "wavefront=off", "recompute=on", NULL },
        { "cuda_graph=off", NULL },
        { "schedule=serial", NULL },
        { "recurrence=persistent", NULL },
        { "recurrence=per-step", NULL },
        { "recurrence=persistent", "recompute=on", NULL },
        { "attention=fp32", NULL },
        { "attention=fp32", "recompute=on", NULL },
        { "d_model=1024", NULL },
        { "d_model=1024", "recompute=on", NULL },
        { "d_model=2048", NULL },
        { "d_model=2048", "recompute=on", NULL },
        { "d_model=128", "n_heads=2", NULL },
        { "vocab_size=50257", NULL },
        { "vocab_size=50257", "recompute=on", NULL },
        { "batch_size=256", NULL },
        { "batch_size=256", "recompute=on", NULL },
        { "grad_accum=2", NULL },
        { "ctx_window=512", NULL },
        { "wavefront_chunk=64", NULL },
        { "wavefront_chunk=32", "recompute=on", NULL },
        { "n_layers=1", NULL },
        { "n_layers=6", "recompute=on", NULL },
        { "n_layers=12", NULL },
        { "n_layers=12", "recompute=on", NULL },
        { "n_layers=17", NULL },
        { "seq_len=128", NULL },
        { "seq_len=128", "recompute=on", NULL },
    };
    static const size_t budgets[] = { 0, 2 * GIB };
    int plans = 0, kinds_seen[3][2][2] = { { { 0 } } }, shared_seen = 0;
    for (int g = 0; g < NGPUS; g++)
        for (size_t f = 0; f < sizeof(profiles) / sizeof(profiles[0]); f++)
            for (size_t v = 0; v < sizeof(variants) / sizeof(variants[0]); v++) {
                /* each card as it is; the profiles as a user sets them on the H100 */
                if (f > 0 && strcmp(GPUS[g].name, "H100") != 0) continue;
                for (size_t m = 0; m < sizeof(budgets) / sizeof(budgets[0]); m++) {
                    cc_config cfg = config_with(variants[v]);
                    gpu_caps c = caps_of(&GPUS[g]);
                    cr_assert_eq(gpu_caps_limit(&c, profiles[f], 0, 0, 0), 0);
                    gpu_step_plan p;
                    const int B = cfg.batch_size, T = cfg.seq_len;
                    cr_assert_eq(gpu_plan_make(&p, &c, &cfg, B, T, budgets[m], NULL), 0, "%s %s", c.name,
                                 variants[v][0] ? variants[v][0] : "default");
                    cc_config mini;
                    gpu_plan_miniature(&mini, &p, &cfg, T);
                    cr_expect_leq(mini.seq_len * mini.batch_size, 16 * 72, "a miniature: %d x %d", mini.batch_size, mini.seq_len);
                    cr_expect_leq(mini.n_layers, 3);
                    gpu_step_plan q;
                    cr_assert_eq(gpu_plan_make(&q, &p.caps, &mini, mini.batch_size, mini.seq_len, p.memory_budget,
                                               NULL), 0);
                    const gpu_schedule_kind a = gpu_plan_kind(&p, T), b = gpu_plan_kind(&q, mini.seq_len);
                    char da[240], db[240];
                    gpu_schedule_kind_describe(&a, da, sizeof(da));
                    gpu_schedule_kind_describe(&b, db, sizeof(db));
                    cr_expect(gpu_schedule_kind_same(&a, &b), "%s as %s, %s%s%s, %.0f GiB: the run plans %s; its "
                              "miniature %s", c.name, profiles[f], variants[v][0] ? variants[v][0] : "default",
                              variants[v][0] && variants[v][1] ? " " : "", variants[v][0] && variants[v][1]
                              ? variants[v][1] : "", budgets[m] / (double)GIB, da, db);
                    /* what the full-step check asserts of the miniature's step */
                    if (q.wave_chunk) cr_expect_eq(q.wave_chunk, mini.gpu_wavefront_chunk, "%s: %s", c.name, q.wave_why);
                    cr_expect_eq(q.lanes, mini.gpu_lanes);
                    kinds_seen[a.impl][a.wave][a.recompute]++;
                    shared_seen += a.wave_shared;
                    plans++;
                }
            }
    /* the matrix reaches every recurrence with and without the wavefront and recompute */
    for (int i = 0; i < 3; i++)
        for (int r = 0; r < 2; r++) cr_expect_gt(kinds_seen[i][0][r], 0, "%s, layer after layer, recompute %d",
                                                 gpu_gru_impl_name((gpu_gru_impl)i), r);
    for (int i = 0; i < 2; i++)
        for (int r = 0; r < 2; r++) cr_expect_gt(kinds_seen[i][1][r], 0, "%s under the wavefront, recompute %d",
                                                 gpu_gru_impl_name((gpu_gru_impl)i), r);
    cr_expect_gt(shared_seen, 0, "no plan's layers shared the wavefront's streams");
    cr_log_info("%d plans and their miniatures", plans);
}
