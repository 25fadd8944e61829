/* Executor choice from [run] device. */
#include <string.h>
#include "catchat/device.h"
#include "catchat/executor.h"
#include "catchat/gpu_plan.h"
#include "catchat/util.h"

cc_executor *cc_executor_create(const cc_config *cfg, int B, int T)
{
    return cc_executor_create_planned(cfg, B, T, NULL);
}

int cc_executor_plan(const cc_config *cfg, int B, int T, gpu_step_plan *plan)
{
    if (strcmp(cfg->device, "cpu") == 0) return 0;
    const int gpus = cc_gpu_count();
    if (gpus < 0) return -1; /* the driver fails (said): not on the CPU unseen */
    if (gpus == 0) return 0;  /* the executor says so where device = gpu */
    return gpu_step_plan_for(plan, cfg, B, T) == 0 ? 1 : -1;
}

cc_executor *cc_executor_create_planned(const cc_config *cfg, int B, int T, const gpu_step_plan *plan)
{
    if (plan) return cc_gpu_executor_create_planned(cfg, B, T, plan);
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
