/* gpu_caps_query: one read of the device's attributes (gpu_caps.h). */
#include "catchat/gpu_caps.h"
#include "catchat/config.h"

#include <stdio.h>
#include <string.h>
#include <cuda_runtime_api.h>
#include "catchat/kernels.h"
#include "catchat/util.h"

static int attr(int *out, enum cudaDeviceAttr a, int dev, const char *what)
{
    const cudaError_t e = cudaDeviceGetAttribute(out, a, dev);
    if (e != cudaSuccess) return cc_error("cannot read the GPU's %s: %s", what, cudaGetErrorString(e));
    return 0;
}

int gpu_caps_query(gpu_caps *c)
{
    memset(c, 0, sizeof(*c));
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return cc_error("no CUDA device: %s", cudaGetErrorString(e));
    struct cudaDeviceProp prop;
    e = cudaGetDeviceProperties(&prop, dev);
    if (e != cudaSuccess) return cc_error("cannot read the GPU's properties: %s", cudaGetErrorString(e));
    snprintf(c->name, sizeof(c->name), "%s", prop.name);
    if (attr(&c->cc_major, cudaDevAttrComputeCapabilityMajor, dev, "compute capability") ||
        attr(&c->cc_minor, cudaDevAttrComputeCapabilityMinor, dev, "compute capability") ||
        attr(&c->sm_count, cudaDevAttrMultiProcessorCount, dev, "SM count") ||
        attr(&c->smem_per_block, cudaDevAttrMaxSharedMemoryPerBlock, dev, "shared memory per block") ||
        attr(&c->smem_per_block_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev, "opt-in shared memory") ||
        attr(&c->smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev, "shared memory per SM") ||
        attr(&c->l2_bytes, cudaDevAttrL2CacheSize, dev, "L2 size") ||
        attr(&c->cooperative_launch, cudaDevAttrCooperativeLaunch, dev, "cooperative launch support"))
        return -1;
    c->device_sm_count = c->sm_count;
    if (c->cc_major >= 9 && attr(&c->cluster_launch, cudaDevAttrClusterLaunch, dev, "cluster launch support"))
        return -1;
    if (kernels_compiled_for(&c->binary_version, &c->ptx_version) != 0)
        return cc_error("this build holds no kernel image for GPU '%s' (sm_%d%d): rebuild with "
                        "CMAKE_CUDA_ARCHITECTURES including %d%d", c->name, c->cc_major, c->cc_minor, c->cc_major,
                        c->cc_minor);
    /* the occupancy API's answers for the recurrence kernels: asked here, per query, never cached in the process */
    gru_cluster_query_residency(c);
    gru_persistent_query_occupancy(c);
    return 0;
}

/* What a family's best-known card gives a block (opt-in shared memory),
 * whether it has clusters, and its SM count. */
static const struct {
    const char *name;
    int smem_kb, clusters, sms;
} PROFILES[] = {
    { "sm80", 163, 0, 108 },  /* A100 */
    { "sm86", 99, 0, 82 },    /* RTX 3090 (A6000: 84) */
    { "sm89", 99, 0, 128 },   /* RTX 4090 (6000 Ada: 142) */
    { "sm90", 227, 1, 132 },  /* H100 SXM, H200 */
    { "sm100", 227, 1, 148 }, /* B200 */
    { "sm120", 99, 1, 170 },  /* RTX 5090 */
};

const char *gpu_caps_profile_names(void) { return "native|sm80|sm86|sm89|sm90|sm100|sm120"; }

int gpu_caps_limit(gpu_caps *c, const char *profile, int smem_kb, int sm_count, int no_clusters)
{
    if (profile && *profile && strcmp(profile, "native") != 0) {
        size_t i = 0;
        while (i < sizeof(PROFILES) / sizeof(PROFILES[0]) && strcmp(PROFILES[i].name, profile) != 0) i++;
        if (i == sizeof(PROFILES) / sizeof(PROFILES[0]))
            return cc_error("[gpu] profile: '%s' is not one of %s", profile, gpu_caps_profile_names());
        if (PROFILES[i].smem_kb * 1024 < c->smem_per_block_optin) c->smem_per_block_optin = PROFILES[i].smem_kb * 1024;
        if (!PROFILES[i].clusters) c->cluster_launch = 0;
        if (PROFILES[i].sms < c->sm_count) c->sm_count = PROFILES[i].sms;
    }
    if (smem_kb > 0 && smem_kb * 1024 < c->smem_per_block_optin) c->smem_per_block_optin = smem_kb * 1024;
    if (c->smem_per_block > c->smem_per_block_optin) c->smem_per_block = c->smem_per_block_optin;
    if (sm_count > 0 && sm_count < c->sm_count) c->sm_count = sm_count;
    if (no_clusters) c->cluster_launch = 0;
    return 0;
}

int gpu_caps_for_config(gpu_caps *c, const cc_config *cfg)
{
    if (gpu_caps_query(c) != 0) return -1;
    return gpu_caps_limit(c, cfg->gpu_profile, cfg->gpu_smem_per_block, cfg->gpu_sm_count,
                          strcmp(cfg->gpu_clusters, "off") == 0);
}
