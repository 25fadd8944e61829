/* What GPU, if any, this process can use. */
#ifndef CATCHAT_DEVICE_H
#define CATCHAT_DEVICE_H

#include <stddef.h>

/* Number of usable CUDA devices (0 when there is no driver or no GPU). */
int cc_gpu_count(void);
/* The NVIDIA driver's version and the newest CUDA it supports,
 * "580.65.06 (CUDA 13.0)" ("unknown" where NVML cannot be loaded). */
void cc_driver_version(char *buf, size_t len);
/* Exit code meaning "skipped: no GPU" for CTest (SKIP_RETURN_CODE) and automake. */
#define CC_EXIT_SKIP 77

#endif
