/* Recompute's `work` laid out by the liveness of its tensors
 * (work_layout_gpu.c). Private to src/gpu: the planner (plan_gpu.c) calls
 * it; it declares the step's own programs (program_gpu.c, scheduler_gpu.c)
 * over the plan's buffers, each at an address of its own, and calls
 * nothing that asks the device. */
#ifndef CATCHAT_WORK_LAYOUT_GPU_H
#define CATCHAT_WORK_LAYOUT_GPU_H

#include "catchat/config.h"
#include "catchat/gpu_plan.h"

/* The tensors of `work` under plan p (recompute) for B sequences of T
 * under d, offsets 0: every set's window buffers, the forward's hprev16
 * (one block a set), the context stream's part. Returns how many (at most
 * GPU_WORK_MAX). */
int work_tensors(const gpu_step_plan *p, const cc_dims *d, int B, int T, gpu_work_part *out);

/* Lays out the tensors of work_tensors(p, ...) for the plan's training
 * step (with and without a gradient, and after a refused persistent
 * launch where one may be refused) and evaluation under cfg: each
 * program is declared, each tensor's values live from the operation that
 * defines them (ACC_DEFINE, step_gpu.h) to their last use in program
 * order, and two tensors share bytes only where no value of one is live
 * while a value of the other is, in any program (first fit, largest
 * first, at 256-byte offsets). The offsets land in parts (n of them);
 * returns the bytes of `work`. */
size_t work_layout_make(const gpu_step_plan *p, const cc_config *cfg, int B, int T, gpu_work_part *parts, int *n);

#endif
