/* Executor choice from [run] device. */
#include <string.h>
#include "catchat/device.h"
#include "catchat/executor.h"
#include "catchat/util.h"

cc_executor *cc_executor_create(const cc_config *cfg, int B, int T)
{
    if (strcmp(cfg->device, "gpu") == 0) {
        cc_error("[run] device = gpu: the GPU executor is not built yet in this version; "
                 "use device = cpu");
        return NULL;
    }
    if (strcmp(cfg->device, "auto") == 0 && cc_gpu_count() > 0)
        fprintf(stderr, "catchat: a GPU is present but the GPU executor is not built yet; "
                        "running on the CPU\n");
    return cc_cpu_executor_create(cfg, B, T);
}
