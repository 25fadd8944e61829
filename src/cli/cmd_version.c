/* `catchat --version`: what this binary is and what it was built against,
 * the first thing to quote in a bug report. The git revision and compiled GPU
 * architectures come from the build (CMakeLists.txt); the library versions
 * are asked of the libraries themselves at run time. */
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#ifdef CATCHAT_HAVE_NCCL
#include <nccl.h>
#endif
#include "cli/cli.h"
#include "catchat/device.h"
#include "catchat/gpu_caps.h"
#include "catchat/version.h"
#include "catchat_git_revision.h" /* generated at build time (cmake/git_revision.cmake) */

static void print_cuda_version(const char *what, int v)
{
    if (v > 0) printf("%s %d.%d\n", what, v / 1000, v % 1000 / 10);
    else printf("%s none\n", what);
}

int cmd_version(void)
{
    printf("catchat %s (git %s)\n", cc_version(), CATCHAT_GIT_REVISION);
    char text[128];
    cc_build_id(text, sizeof(text));
    printf("build id %s\n", text);
    printf("GPU architectures compiled: %s\n", CATCHAT_CUDA_ARCHS);
    int v = 0;
    if (cudaRuntimeGetVersion(&v) != cudaSuccess) v = 0;
    print_cuda_version("CUDA runtime", v);
    v = 0;
    if (cudaDriverGetVersion(&v) != cudaSuccess) v = 0;
    print_cuda_version("CUDA driver (the newest CUDA it supports)", v);
    if (v > 0) cc_driver_version(text, sizeof(text));
    printf("NVIDIA driver %s\n", v > 0 ? text : "none");
    gpu_caps caps; /* the device as the planner reads it, the occupancy API's answers included */
    if (v > 0 && cc_gpu_count() > 0 && gpu_caps_query(&caps) == 0)
        printf("GPU %s (sm_%d%d, %d SMs, %d KB shared memory a block, clusters %s): cluster recurrence "
               "resident clusters of 8/16 sequences at D=128 %d/%d, D=256 %d/%d, D=512 %d/%d; persistent CTAs an "
               "SM %d\n", caps.name, caps.cc_major, caps.cc_minor, caps.sm_count, caps.smem_per_block_optin / 1024,
               caps.cluster_launch ? "yes" : "no", caps.cluster_resident[0][0], caps.cluster_resident[0][1],
               caps.cluster_resident[1][0], caps.cluster_resident[1][1], caps.cluster_resident[2][0],
               caps.cluster_resident[2][1], caps.persistent_ctas_per_sm);
    const size_t lt = cublasLtGetVersion(); /* major*10000 + minor*100 + patch */
    printf("cuBLASLt %zu.%zu.%zu\n", lt / 10000, lt / 100 % 100, lt % 100);
#ifdef CATCHAT_HAVE_NCCL
    int nv = 0;
    if (ncclGetVersion(&nv) == ncclSuccess) /* major*10000 + minor*100 + patch since 2.9 */
        printf("NCCL %d.%d.%d\n", nv / 10000, nv / 100 % 100, nv % 100);
    else printf("NCCL (version unknown)\n");
#else
    printf("NCCL not built in (multi-GPU training is off)\n");
#endif
    return 0;
}
