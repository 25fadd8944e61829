/* GPU discovery through the CUDA runtime's C API. Without a driver (CI, a
 * laptop) cudaGetDeviceCount fails; that means "no GPU", not an error. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>
#include "catchat/device.h"

int cc_gpu_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky error for later calls */
        return 0;
    }
    return n;
}

/* The driver's own version comes from NVML, which every NVIDIA driver
 * installs (libnvidia-ml.so.1); it is loaded at run time so that the build
 * needs no NVML and a machine without it still runs. The CUDA runtime only
 * knows the newest CUDA version the driver supports, which stays the same
 * across driver updates of one branch. */
typedef int (*nvml_fn)(void);
typedef int (*nvml_version_fn)(char *, unsigned);

static int nvml_driver_version(char *buf, size_t len)
{
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return -1;
    nvml_fn init = (nvml_fn)dlsym(lib, "nvmlInit_v2"), shutdown = (nvml_fn)dlsym(lib, "nvmlShutdown");
    nvml_version_fn get = (nvml_version_fn)dlsym(lib, "nvmlSystemGetDriverVersion");
    int rc = -1;
    if (init && shutdown && get && init() == 0) { /* NVML_SUCCESS */
        rc = get(buf, (unsigned)len) == 0 ? 0 : -1;
        shutdown();
    }
    dlclose(lib);
    return rc;
}

void cc_driver_version(char *buf, size_t len)
{
    int cuda = 0;
    if (cudaDriverGetVersion(&cuda) != cudaSuccess) cuda = 0;
    char nvml[96];
    if (nvml_driver_version(nvml, sizeof(nvml)) != 0) snprintf(nvml, sizeof(nvml), "unknown");
    snprintf(buf, len, "%s (CUDA %d.%d)", nvml, cuda / 1000, cuda % 1000 / 10);
}
