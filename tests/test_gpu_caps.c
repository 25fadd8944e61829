/* What the GPU path chooses by, without a GPU: the [gpu] profile narrowing
 * a device's limits (gpu_caps_limit), the sm_90-features test that must see
 * through a PTX-only build, and the persistent recurrence's plan
 * (gru_persistent_supported / _describe are host code) on the limits of
 * GPUs nobody here has. Also what a CUDA runtime's "no GPU" answers mean
 * (cc_gpu_classify) and the ladder's exit status from its counts. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <dlfcn.h>
#include <string.h>
#include "catchat/device.h"
#include "catchat/gpu_caps.h"
#include "catchat/gpu_gru.h"
#include "catchat/gpu_plan.h"
#include "catchat/kernels.h"
#include "catchat/ladder.h"

/* An H200 as gpu_caps_query reads it, with a build holding sm_90 code. */
static gpu_caps h200(void)
{
    gpu_caps c;
    memset(&c, 0, sizeof(c));
    strcpy(c.name, "NVIDIA H200");
    c.cc_major = 9;
    c.sm_count = 132;
    c.smem_per_block = 48 * 1024;
    c.smem_per_block_optin = 227 * 1024;
    c.smem_per_sm = 228 * 1024;
    c.l2_bytes = 60 << 20;
    c.cluster_launch = 1;
    c.cooperative_launch = 1;
    c.persistent_ctas_per_sm = 1; /* the occupancy API's answer on every card: one CTA an SM at the opt-in shared memory */
    c.binary_version = 90;
    c.ptx_version = 90;
    return c;
}

Test(gpu_caps, profiles_narrow_to_the_family)
{
    gpu_caps c = h200();
    cr_assert_eq(gpu_caps_limit(&c, "sm86", 0, 0, 0), 0);
    cr_expect_eq(c.sm_count, 82);
    cr_expect_eq(c.smem_per_block_optin, 99 * 1024);
    cr_expect_eq(c.cluster_launch, 0);
    cr_expect_not(gpu_caps_has_sm90_features(&c));
    c = h200();
    cr_assert_eq(gpu_caps_limit(&c, "sm120", 0, 0, 0), 0);
    cr_expect_eq(c.sm_count, 132, "170 SMs capped at the device's 132");
    cr_expect_eq(c.smem_per_block_optin, 99 * 1024);
    cr_expect_eq(c.cluster_launch, 1);
    c = h200();
    cr_assert_eq(gpu_caps_limit(&c, "native", 0, 0, 0), 0);
    cr_expect_eq(c.sm_count, 132);
    cr_expect_eq(c.smem_per_block_optin, 227 * 1024);
}

Test(gpu_caps, explicit_keys_override_and_never_widen)
{
    gpu_caps c = h200();
    cr_assert_eq(gpu_caps_limit(&c, "sm89", 64, 40, 1), 0);
    cr_expect_eq(c.smem_per_block_optin, 64 * 1024);
    cr_expect_eq(c.smem_per_block, 48 * 1024);
    cr_expect_eq(c.sm_count, 40);
    c = h200();
    c.sm_count = 48; /* a laptop-sized part asked to run as a B200 keeps what it has */
    c.smem_per_block_optin = 99 * 1024;
    c.cluster_launch = 0;
    cr_assert_eq(gpu_caps_limit(&c, "sm100", 0, 200, 0), 0);
    cr_expect_eq(c.sm_count, 48);
    cr_expect_eq(c.smem_per_block_optin, 99 * 1024);
    cr_expect_eq(c.cluster_launch, 0);
}

Test(gpu_caps, unknown_profile_is_an_error, .init = cr_redirect_stderr)
{
    gpu_caps c = h200();
    cr_expect_neq(gpu_caps_limit(&c, "sm70", 0, 0, 0), 0);
}

/* A compute_80 PTX build JIT-compiled on a Hopper holds no cluster kernels'
 * bodies: the features test must say no although the device has them. */
Test(gpu_caps, ptx_only_build_has_no_sm90_features)
{
    gpu_caps c = h200();
    cr_expect(gpu_caps_has_sm90_features(&c));
    c.ptx_version = 80;
    cr_expect_not(gpu_caps_has_sm90_features(&c));
    c = h200();
    c.binary_version = 80;
    cr_expect_not(gpu_caps_has_sm90_features(&c));
}

Test(gpu_caps, persistent_plan_fits_every_family_at_d512_and_d1024)
{
    static const char *families[] = { "native", "sm80", "sm86", "sm89", "sm100", "sm120" };
    for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++) {
        gpu_caps c = h200();
        cr_assert_eq(gpu_caps_limit(&c, families[i], 0, 0, 0), 0);
        cr_expect(gru_persistent_supported(&c, NULL, 64, 512, 512), "%s D=512", families[i]);
        cr_expect(gru_persistent_supported(&c, NULL, 20, 37, 512), "%s D=512 B=20 (a partial group)", families[i]);
        char line[256] = "";
        cr_expect(gru_persistent_describe(&c, NULL, 64, 512, 512, line, sizeof(line)));
        cr_expect(strstr(line, "groups") != NULL, "%s", line);
    }
    gpu_caps c = h200();
    cr_expect(gru_persistent_supported(&c, NULL, 64, 512, 1024));
    gpu_caps_limit(&c, "sm89", 0, 0, 0);
    cr_expect(gru_persistent_supported(&c, NULL, 64, 512, 1024), "RTX 4090 limits, D=1024");
}

/* Where each CTA would read too much a step (the broadcast of a wide BPTT),
 * or the GPU cannot take the kernels, the per-step loop is used instead. */
/* Under the wavefront each layer's persistent grid takes a share of the
 * lane's SMs, as many layers at once as have a split (plan_gpu.c,
 * plan_wavefront): the shares docs/gpus.md names. */
Test(gpu_caps, wavefront_shares_of_the_persistent_grids)
{
    gpu_caps c = h200();
    cr_assert_eq(gpu_caps_limit(&c, "sm89", 0, 0, 0), 0);
    c.sm_count = 128 / 3;
    cr_expect(gru_persistent_supported(&c, NULL, 64, 512, 512), "RTX 4090 limits, D=512: 3 layers at once on 42 SMs");
    c = h200();
    cr_assert_eq(gpu_caps_limit(&c, "sm86", 0, 0, 0), 0);
    c.sm_count = 82 / 3;
    cr_expect_not(gru_persistent_supported(&c, NULL, 64, 512, 512), "RTX 3090 limits, D=512: no split on 27 SMs");
    c.sm_count = 82 / 2;
    cr_expect(gru_persistent_supported(&c, NULL, 64, 512, 512), "RTX 3090 limits, D=512: 2 layers at once on 41 SMs");
    c = h200();
    c.sm_count = 132 / 3;
    cr_expect_not(gru_persistent_supported(&c, NULL, 64, 512, 1024), "H200, D=1024: no split on 44 SMs");
    c.sm_count = 132 / 2;
    cr_expect(gru_persistent_supported(&c, NULL, 64, 512, 1024), "H200, D=1024: 2 layers at once on 66 SMs");
}

Test(gpu_caps, persistent_plan_refuses_what_it_cannot_do_well)
{
    gpu_caps c = h200();
    /* D=2048 B=64: the whole-K BPTT would read 768 KB a CTA a step; the plan splits K (4 CTAs a slice
     * forward, 8 in the BPTT), which only a forced persistent recurrence takes */
    cr_expect(gru_persistent_supported(&c, NULL, 64, 512, 2048));
    cr_expect(gru_persistent_splits_k(&c, NULL, 64, 512, 2048));
    char split[256];
    cr_assert(gru_persistent_describe(&c, NULL, 64, 512, 2048, split, sizeof(split)));
    cr_expect(strstr(split, "64 sequences a group, K split over 4") && strstr(split, "(64, K split over 8)") &&
                  strstr(split, "on chip: all forward, all BPTT"), "%s", split);
    cr_expect_eq(gpu_gru_impl_for(&c, GPU_GRU_AUTO, 64, 512, 2048), GRU_IMPL_PER_STEP);
    cr_expect_eq(gpu_gru_impl_for(&c, GPU_GRU_PERSISTENT, 64, 512, 2048), GRU_IMPL_PERSISTENT);
    cr_expect(gru_persistent_supported(&c, NULL, 12, 9, 2048), "D=2048 B=12 stays on chip");
    cr_expect_not(gru_persistent_splits_k(&c, NULL, 12, 9, 2048), "and needs no split");
    cr_expect_not(gru_persistent_splits_k(&c, NULL, 64, 512, 1024), "H200, D=1024: whole K");
    cr_expect_not(gru_persistent_splits_k(&c, NULL, 64, 512, 512), "H200, D=512: whole K");
    cr_expect_not(gru_persistent_supported(&c, NULL, 64, 512, 48), "D not a multiple of 32");
    c.cooperative_launch = 0;
    cr_expect_not(gru_persistent_supported(&c, NULL, 64, 512, 512), "no cooperative launch: residency not guaranteed");
    c = h200();
    c.cc_major = 7;
    cr_expect_not(gru_persistent_supported(&c, NULL, 64, 512, 512), "before sm_80");
    c = h200();
    gpu_caps_limit(&c, "sm86", 0, 0, 0);
    cr_expect_eq(gpu_gru_impl_for(&c, GPU_GRU_AUTO, 64, 512, 1024), GRU_IMPL_PER_STEP,
                 "RTX 3090 limits, D=1024: the whole-K split streams W_hh from L2, a split of K is not the default");
    cr_expect_not(gru_persistent_supported(&c, NULL, 64, 512, 2048), "RTX 3090 limits, D=2048: nothing fits");
}

/* The split of K under the ladder's testing aid (a state's forced_split):
 * forced where it fits, and nothing planned where it does not. */
Test(gpu_caps, persistent_forced_split)
{
    gpu_caps c = h200();
    char split[256];
    gpu_gru_state st = { .forced_split = 4 };
    cr_expect(gru_persistent_describe(&c, &st, 20, 37, 512, split, sizeof(split)));
    cr_expect(strstr(split, "K split over 4") != NULL, "%s", split);
    size_t need[SCRATCH_KINDS] = { 0 };
    gru_persistent_scratch_need(need, &c, &st, 20, 37, 512);
    cr_expect(need[SCRATCH_GRU_PART] > 0, "a split's partial sums");
    st.forced_split = 8;
    cr_expect(gru_persistent_describe(&c, &st, 24, 21, 1024, split, sizeof(split)));
    cr_expect(strstr(split, "K split over 8") != NULL, "%s", split);
    cr_expect_not(gru_persistent_supported(&c, &st, 32, 48, 64), "D=64: 4 CTAs a group cannot split over 8");
    cr_expect(gru_persistent_supported(&c, NULL, 32, 48, 64), "another state plans as usual");
    st.forced_split = 0;
    memset(need, 0, sizeof(need));
    gru_persistent_scratch_need(need, &c, &st, 20, 37, 512);
    cr_expect_eq(need[SCRATCH_GRU_PART], 0, "whole K: no partials");
    cr_expect_eq(gru_persistent_scratch_bytes(&c, 20, 37, 512), 0, "whole K: no partials");
}

/* What the persistent launchers take from their scratch: the step counters,
 * W_hh^T (3D x D FP16) and, where K is split, the partial sums; nothing for
 * a shape no plan fits. */
Test(gpu_caps, persistent_scratch_need)
{
    gpu_caps c = h200();
    size_t need[SCRATCH_KINDS] = { 0 };
    gru_persistent_scratch_need(need, &c, NULL, 64, 512, 512);
    cr_expect(need[SCRATCH_GRU_FLAGS] > 0);
    cr_expect_eq(need[SCRATCH_GRU_WT], (size_t)3 * 512 * 512 * 2);
    cr_expect_eq(need[SCRATCH_GRU_PART], 0);
    cr_expect_eq(need[SCRATCH_REDUCE], 0);
    memset(need, 0, sizeof(need));
    gru_persistent_scratch_need(need, &c, NULL, 64, 512, 2048);
    cr_expect_eq(need[SCRATCH_GRU_WT], (size_t)3 * 2048 * 2048 * 2);
    cr_expect_eq(need[SCRATCH_GRU_PART], gru_persistent_scratch_bytes(&c, 64, 512, 2048));
    cr_expect(need[SCRATCH_GRU_PART] > 0, "D=2048 B=64 splits K");
    memset(need, 0, sizeof(need));
    gru_persistent_scratch_need(need, &c, NULL, 64, 512, 48);
    for (int k = 0; k < SCRATCH_KINDS; k++) cr_expect_eq(need[k], 0, "D=48: no plan, no scratch");
    /* the recurrence's need through gpu_gru.h: none where the cluster kernels or the per-step loop run it */
    memset(need, 0, sizeof(need));
    gpu_gru_scratch_need(need, &c, NULL, GPU_GRU_PER_STEP, 64, 512, 512);
    for (int k = 0; k < SCRATCH_KINDS; k++) cr_expect_eq(need[k], 0, "per-step: no scratch");
    gpu_gru_scratch_need(need, &c, NULL, GPU_GRU_PERSISTENT, 64, 512, 512);
    cr_expect_eq(need[SCRATCH_GRU_WT], (size_t)3 * 512 * 512 * 2);
}

/* The column reductions' partial rows: one row of the output a chunk of
 * rows (launch_colsum_f16_acc: 256 rows; the norm backward: a block's rows,
 * fewer warps a block where a row of dg per warp would not fit in shared
 * memory), growing with M. */
Test(gpu_caps, reduction_scratch_bytes)
{
    gpu_caps c = h200();
    cr_expect_eq(colsum_f16_scratch_bytes(256, 96), (size_t)96 * 4);
    cr_expect_eq(colsum_f16_scratch_bytes(257, 96), (size_t)2 * 96 * 4);
    cr_expect_eq(colsum_f16_scratch_bytes(0, 96), 0);
    cr_expect_eq(gpu_gru_weight_grads_scratch_bytes(64 * 512, 512), colsum_f16_scratch_bytes(64 * 512, 3 * 512));
    const size_t small = rmsnorm_backward_scratch_bytes(64, 512, &c);
    const size_t big = rmsnorm_backward_scratch_bytes(64 * 512, 512, &c);
    cr_expect(small > 0 && big > small, "%zu then %zu", small, big);
    cr_expect_eq(big % (512 * 4), 0, "whole rows of dg");
    cr_expect(rmsnorm_backward_scratch_bytes(64 * 512 + 1, 512, &c) >= big);
}

/* Two executors in one process each keep a gpu_gru_state: a refused
 * persistent launch recorded in one (as gp_launch records it) sends that
 * one's recurrences per step and leaves the other's plans as they were. No
 * launch here (no GPU): the GPU half of this is the ladder's refused case
 * (src/ladder/gru_cases.c). */
Test(gpu_caps, refusal_belongs_to_one_state)
{
    gpu_caps c = h200();
    gpu_gru_state a = { .refused = "" }, b = { .refused = "" };
    cr_assert_eq(gpu_gru_impl_with(&c, &a, GPU_GRU_PERSISTENT, 64, 512, 1024), GRU_IMPL_PERSISTENT);
    snprintf(a.refused, sizeof(a.refused), "the runtime refused a forward grid (planted)");
    cr_expect_not(gru_persistent_supported(&c, &a, 64, 512, 1024));
    cr_expect_eq(gpu_gru_impl_with(&c, &a, GPU_GRU_PERSISTENT, 64, 512, 1024), GRU_IMPL_PER_STEP);
    cr_expect_eq(gpu_gru_impl_with(&c, &a, GPU_GRU_AUTO, 64, 512, 1024), GRU_IMPL_PER_STEP);
    cr_expect(gru_persistent_supported(&c, &b, 64, 512, 1024), "the other state: as it was");
    cr_expect_eq(gpu_gru_impl_with(&c, &b, GPU_GRU_PERSISTENT, 64, 512, 1024), GRU_IMPL_PERSISTENT);
    cr_expect_eq(gpu_gru_impl_for(&c, GPU_GRU_PERSISTENT, 64, 512, 1024), GRU_IMPL_PERSISTENT, "and a new plan's");
    size_t need[SCRATCH_KINDS] = { 0 };
    gpu_gru_scratch_need(need, &c, &a, GPU_GRU_PERSISTENT, 64, 512, 1024);
    cr_expect_eq(need[SCRATCH_GRU_WT], 0, "after a refusal the per-step loop takes no persistent scratch");
}

/* Only "no device" and "no driver installed" mean there is no GPU to use;
 * a driver that is there but fails must be an error, or every GPU test on a
 * machine with a broken driver would read as skipped. */
Test(gpu_probe, only_no_device_and_no_driver_mean_absent)
{
    cr_expect_eq(cc_gpu_classify(cudaSuccess, 1), CC_GPU_FOUND);
    cr_expect_eq(cc_gpu_classify(cudaErrorNoDevice, 1), CC_GPU_ABSENT);
    cr_expect_eq(cc_gpu_classify(cudaErrorNoDevice, 0), CC_GPU_ABSENT);
    cr_expect_eq(cc_gpu_classify(cudaErrorInsufficientDriver, 0), CC_GPU_ABSENT, "no libcuda.so.1: no driver");
    cr_expect_eq(cc_gpu_classify(cudaErrorInsufficientDriver, 1), CC_GPU_BROKEN, "a driver older than the runtime");
    cr_expect_eq(cc_gpu_classify(cudaErrorStubLibrary, 1), CC_GPU_ABSENT, "the toolkit's stub is no driver");
    const cudaError_t broken[] = { cudaErrorInitializationError, cudaErrorUnknown, cudaErrorSystemDriverMismatch,
                                   cudaErrorCompatNotSupportedOnDevice, cudaErrorDevicesUnavailable,
                                   cudaErrorOperatingSystem };
    for (size_t i = 0; i < sizeof(broken) / sizeof(broken[0]); i++)
        for (int installed = 0; installed <= 1; installed++)
            cr_expect_eq(cc_gpu_classify(broken[i], installed), CC_GPU_BROKEN, "%s", cudaGetErrorName(broken[i]));
}

/* Where the driver is not installed (CI), the real runtime's answer must be
 * classified as "no GPU": 0 devices and no error line. */
Test(gpu_probe, no_driver_installed_is_no_gpu, .init = cr_redirect_stderr)
{
    void *lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (lib) {
        dlclose(lib);
        cr_skip_test("a driver is installed here");
    }
    cr_expect_eq(cc_gpu_count(), 0);
    cr_expect_stderr_eq_str("");
}

static cc_ladder_counts counts(int passed, int warned, int skipped, int failed)
{
    const cc_ladder_counts n = { passed, warned, skipped, failed };
    return n;
}

/* A ladder that checked nothing is skipped, never passed; a failure wins
 * over everything; skips beside stages that ran do not fail it. */
Test(ladder_exit, skipped_unless_a_stage_ran_failed_wins)
{
    cr_expect_eq(cc_ladder_exit_status(counts(11, 0, 0, 0)), 0);
    cr_expect_eq(cc_ladder_exit_status(counts(10, 0, 1, 0)), 0, "some ran, none failed");
    cr_expect_eq(cc_ladder_exit_status(counts(0, 1, 2, 0)), 0, "a WARNed stage ran");
    cr_expect_eq(cc_ladder_exit_status(counts(0, 0, 1, 0)), CC_EXIT_SKIP, "--stage model, executor refused");
    cr_expect_eq(cc_ladder_exit_status(counts(0, 0, 11, 0)), CC_EXIT_SKIP);
    cr_expect_eq(cc_ladder_exit_status(counts(0, 0, 0, 0)), CC_EXIT_SKIP, "nothing at all ran");
    cr_expect_eq(cc_ladder_exit_status(counts(10, 0, 0, 1)), 1);
    cr_expect_eq(cc_ladder_exit_status(counts(0, 0, 10, 1)), 1, "a failure among skips");
}

