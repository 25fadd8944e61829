/* What the GPU path chooses by, without a GPU: the [gpu] profile narrowing
 * a device's limits (gpu_caps_limit), the sm_90-features test that must see
 * through a PTX-only build, and the persistent recurrence's plan
 * (gru_persistent_supported / _describe are host code) on the limits of
 * GPUs nobody here has. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <string.h>
#include "catchat/gpu_caps.h"
#include "catchat/kernels.h"

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
        cr_expect(gru_persistent_supported(&c, 64, 512, 512), "%s D=512", families[i]);
        cr_expect(gru_persistent_supported(&c, 20, 37, 512), "%s D=512 B=20 (a partial group)", families[i]);
        char line[256] = "";
        cr_expect(gru_persistent_describe(&c, 64, 512, 512, line, sizeof(line)));
        cr_expect(strstr(line, "groups") != NULL, "%s", line);
    }
    gpu_caps c = h200();
    cr_expect(gru_persistent_supported(&c, 64, 512, 1024));
    gpu_caps_limit(&c, "sm89", 0, 0, 0);
    cr_expect(gru_persistent_supported(&c, 64, 512, 1024), "RTX 4090 limits, D=1024");
}

/* Where each CTA would read too much a step (the broadcast of a wide BPTT),
 * or the GPU cannot take the kernels, the per-step loop is used instead. */
Test(gpu_caps, persistent_plan_refuses_what_it_cannot_do_well)
{
    gpu_caps c = h200();
    cr_expect_not(gru_persistent_supported(&c, 64, 512, 2048), "D=2048 B=64: 768 KB a CTA a step");
    cr_expect(gru_persistent_supported(&c, 12, 9, 2048), "D=2048 B=12 stays on chip");
    cr_expect_not(gru_persistent_supported(&c, 64, 512, 48), "D not a multiple of 32");
    c.cooperative_launch = 0;
    cr_expect_not(gru_persistent_supported(&c, 64, 512, 512), "no cooperative launch: residency not guaranteed");
    c = h200();
    c.cc_major = 7;
    cr_expect_not(gru_persistent_supported(&c, 64, 512, 512), "before sm_80");
    c = h200();
    gpu_caps_limit(&c, "sm86", 0, 0, 0);
    cr_expect_not(gru_persistent_supported(&c, 64, 512, 1024), "RTX 3090 limits, D=1024: W_hh streams from L2");
}
