/* `catchat --version`: what this binary is and what it was built against,
 * the first thing to quote in a bug report. The version, git revision and
 * compiled GPU architectures come from the build (CMakeLists.txt); the
 * library versions are asked of the libraries themselves at run time. */
#include "catchat/version.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#ifdef CATCHAT_HAVE_NCCL
#include <nccl.h>
#endif

const char *cc_version(void) { return CATCHAT_VERSION; }

static void print_cuda_version(FILE *f, const char *what, int v)
{
    if (v > 0) fprintf(f, "%s %d.%d\n", what, v / 1000, v % 1000 / 10);
    else fprintf(f, "%s none\n", what);
}

void cc_version_print(FILE *f)
{
    fprintf(f, "catchat %s (git %s)\n", CATCHAT_VERSION, CATCHAT_GIT_REVISION);
    fprintf(f, "GPU architectures compiled: %s\n", CATCHAT_CUDA_ARCHS);
    int v = 0;
    if (cudaRuntimeGetVersion(&v) != cudaSuccess) v = 0;
    print_cuda_version(f, "CUDA runtime", v);
    v = 0;
    if (cudaDriverGetVersion(&v) != cudaSuccess) v = 0;
    print_cuda_version(f, "CUDA driver (the newest CUDA it supports)", v);
    const size_t lt = cublasLtGetVersion(); /* major*10000 + minor*100 + patch */
    fprintf(f, "cuBLASLt %zu.%zu.%zu\n", lt / 10000, lt / 100 % 100, lt % 100);
#ifdef CATCHAT_HAVE_NCCL
    int nv = 0;
    if (ncclGetVersion(&nv) == ncclSuccess) /* major*10000 + minor*100 + patch since 2.9 */
        fprintf(f, "NCCL %d.%d.%d\n", nv / 10000, nv / 100 % 100, nv % 100);
    else fprintf(f, "NCCL (version unknown)\n");
#else
    fprintf(f, "NCCL not built in (multi-GPU training is off)\n");
#endif
}
