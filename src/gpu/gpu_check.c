#include "gpu/gpu_check.h"

void cc_cuda_fail(cudaError_t e, const char *what, const char *file, int line)
{
    fprintf(stderr, "catchat: CUDA error at %s:%d: %s (%s)\n", file, line, cudaGetErrorString(e), what);
    exit(1);
}

void cc_cublas_fail(cublasStatus_t s, const char *what, const char *file, int line)
{
    fprintf(stderr, "catchat: cuBLAS error at %s:%d: status %d (%s)\n", file, line, (int)s, what);
    exit(1);
}

void *cc_device_alloc(size_t bytes, const char *what)
{
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 16);
    if (e != cudaSuccess) {
        size_t free_b = 0, total_b = 0;
        cudaGetLastError();
        cudaMemGetInfo(&free_b, &total_b);
        fprintf(stderr,
                "catchat: out of GPU memory allocating %s: asked %.1f MiB, %.1f MiB free of %.1f MiB "
                "(lower batch_size or seq_len)\n",
                what, bytes / 1048576.0, free_b / 1048576.0, total_b / 1048576.0);
        exit(1);
    }
    return p;
}
