/* GPU discovery through the CUDA runtime's C API. A machine without a GPU
 * or without the NVIDIA driver (CI, a laptop) has nothing to use, which is
 * not an error; a driver that is installed but fails (older than the
 * runtime, a module that does not load) is one: treating it as "no GPU"
 * would turn every GPU test into a skip and every device = auto run into a
 * CPU run nobody asked for. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>
#include "catchat/device.h"
#include "catchat/util.h"

cc_gpu_probe cc_gpu_classify(int err, int driver_installed)
{
    switch ((cudaError_t)err) {
    case cudaSuccess: return CC_GPU_FOUND;
    case cudaErrorNoDevice: return CC_GPU_ABSENT; /* also CUDA_VISIBLE_DEVICES="" */
    /* without libcuda.so.1 the runtime says "insufficient driver"; with it,
     * the same code means the driver is older than the runtime */
    case cudaErrorInsufficientDriver: return driver_installed ? CC_GPU_BROKEN : CC_GPU_ABSENT;
    /* the toolkit's stub libcuda (build images link against it) is a
     * stand-in for a driver, not a driver */
    case cudaErrorStubLibrary: return CC_GPU_ABSENT;
    default: return CC_GPU_BROKEN;
    }
}

/* Whether the driver's library is installed, whatever state it is in. */
static int driver_installed(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (lib) dlclose(lib);
    return lib != NULL;
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

/* "driver 550.54 for CUDA 12.4, runtime CUDA 13.0": what an update must match. */
static void versions(char *buf, size_t len)
{
    char nvml[96] = "";
    int drv = 0, rt = 0;
    if (nvml_driver_version(nvml, sizeof(nvml)) != 0) snprintf(nvml, sizeof(nvml), "version unknown");
    if (cudaDriverGetVersion(&drv) != cudaSuccess) drv = 0;
    if (cudaRuntimeGetVersion(&rt) != cudaSuccess) rt = 0;
    char drv_cuda[32] = "";
    if (drv) snprintf(drv_cuda, sizeof(drv_cuda), " for CUDA %d.%d", drv / 1000, drv % 1000 / 10);
    snprintf(buf, len, "driver %s%s, runtime CUDA %d.%d", nvml, drv_cuda, rt / 1000, rt % 1000 / 10);
}

static int driver_error(cudaError_t e)
{
    char v[192];
    versions(v, sizeof(v));
    return cc_error("the NVIDIA driver is installed but CUDA cannot use it: %s (%s; %s): repair or update the "
                    "driver, or run on the CPU (device = cpu)", cudaGetErrorString(e), cudaGetErrorName(e), v);
}

int cc_gpu_count(void)
{
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaSuccess) return n;
    cudaGetLastError(); /* clear the error for later calls */
    /* only that code's meaning depends on the library being there */
    const int installed = e == cudaErrorInsufficientDriver ? driver_installed() : 1;
    return cc_gpu_classify(e, installed) == CC_GPU_ABSENT ? 0 : driver_error(e);
}
