/* gpu_caps_query: one read of the device's attributes (gpu_caps.h). */
#include "catchat/gpu_caps.h"

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
    if (c->cc_major >= 9 && attr(&c->cluster_launch, cudaDevAttrClusterLaunch, dev, "cluster launch support"))
        return -1;
    if (kernels_compiled_for(&c->binary_version, &c->ptx_version) != 0)
        return cc_error("this build holds no kernel image for GPU '%s' (sm_%d%d): rebuild with "
                        "CMAKE_CUDA_ARCHITECTURES including %d%d", c->name, c->cc_major, c->cc_minor, c->cc_major,
                        c->cc_minor);
    return 0;
}

void gpu_caps_limit(gpu_caps *c, int smem_kb, int no_clusters)
{
    if (smem_kb > 0 && smem_kb * 1024 < c->smem_per_block_optin) c->smem_per_block_optin = smem_kb * 1024;
    if (c->smem_per_block > c->smem_per_block_optin) c->smem_per_block = c->smem_per_block_optin;
    if (no_clusters) c->cluster_launch = 0;
}
