/* What GPU, if any, this process can use. */
#ifndef CATCHAT_DEVICE_H
#define CATCHAT_DEVICE_H

#include <stddef.h>

/* What cudaGetDeviceCount's answer means. */
typedef enum {
    CC_GPU_FOUND,  /* it answered: its count holds */
    CC_GPU_ABSENT, /* no device, or no NVIDIA driver installed: nothing to use, not an error */
    CC_GPU_BROKEN, /* a driver is installed but CUDA cannot use it (too old, failing): an error */
} cc_gpu_probe;

/* The decision alone, with no CUDA call: `err` is cudaGetDeviceCount's
 * cudaError_t, `driver_installed` whether libcuda.so.1 can be loaded. */
cc_gpu_probe cc_gpu_classify(int err, int driver_installed);

/* Number of usable CUDA devices: 0 where there is none to use (no GPU, no
 * driver installed, CUDA_VISIBLE_DEVICES empty); -1, with one error line
 * naming the driver's message, where a driver is installed but fails. */
int cc_gpu_count(void);
/* The NVIDIA driver's version and the newest CUDA it supports,
 * "580.65.06 (CUDA 13.0)" ("unknown" where NVML cannot be loaded). */
void cc_driver_version(char *buf, size_t len);
/* Exit code meaning "skipped: no GPU" for CTest (SKIP_RETURN_CODE) and automake. */
#define CC_EXIT_SKIP 77

#endif
