/* GPU discovery through the CUDA runtime's C API. Without a driver (CI, a
 * laptop) cudaGetDeviceCount fails; that means "no GPU", not an error. */
#include <cuda_runtime_api.h>
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
