/* Checked CUDA, cuBLAS and NCCL calls: file, line and the library's own error
 * string, then exit. An out-of-memory error says what was asked and what was
 * free. */
#ifndef CATCHAT_GPU_CHECK_H
#define CATCHAT_GPU_CHECK_H

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

void cc_cuda_fail(cudaError_t e, const char *what, const char *file, int line);
void cc_cublas_fail(cublasStatus_t s, const char *what, const char *file, int line);

#define cudaCheck(call)                                                  \
    do {                                                                 \
        cudaError_t e_ = (call);                                         \
        if (e_ != cudaSuccess) cc_cuda_fail(e_, #call, __FILE__, __LINE__); \
    } while (0)

#define cublasCheck(call)                                                       \
    do {                                                                        \
        cublasStatus_t s_ = (call);                                             \
        if (s_ != CUBLAS_STATUS_SUCCESS) cc_cublas_fail(s_, #call, __FILE__, __LINE__); \
    } while (0)

/* cudaMalloc that reports the request and the free memory on failure. */
void *cc_device_alloc(size_t bytes, const char *what);

#endif
