/* Executor choice from [run] device. */
#include <string.h>
#include "catchat/device.h"
#include "catchat/executor.h"
#include "catchat/util.h"

cc_executor *cc_executor_create(const cc_config *cfg, int B, int T)
{
    const int want_gpu = strcmp(cfg->device, "gpu") == 0;
    if (want_gpu || strcmp(cfg->device, "auto") == 0) {
        const int gpus = cc_gpu_count();
        if (gpus > 0) return cc_gpu_executor_create(cfg, B, T);
        /* a driver that fails stops auto too (cc_gpu_count said why): a GPU
         * machine with a broken driver should not train on the CPU unseen */
        if (gpus < 0) return NULL;
        if (want_gpu) {
            cc_error("[run] device = gpu, but no CUDA device is visible (no driver or no GPU); "
                     "use device = cpu or auto");
            return NULL;
        }
    }
    return cc_cpu_executor_create(cfg, B, T);
}
