/* What train's trainer does for itself, for the commands that check and
 * then run one step shape (eval, bench, dump-state): the GPU step planned
 * once and that plan checked by the preflight, so the executor made from
 * it runs what was checked. Apart from cli_common.c, which the fuzz
 * harnesses build without the executor. */
#include "cli/cli.h"

#include "catchat/executor.h"
#include "catchat/gpu_plan.h"
#include "catchat/preflight.h"

int cli_plan_and_preflight(const cc_config *cfg, cc_preflight_opts *po, gpu_step_plan *plan)
{
    const int on_gpu = cc_executor_plan(cfg, cfg->batch_size, cfg->seq_len, plan);
    if (on_gpu < 0) return -1;
    po->plan = on_gpu ? plan : NULL;
    return cc_preflight(cfg, cfg->batch_size, cfg->seq_len, NULL, po);
}
