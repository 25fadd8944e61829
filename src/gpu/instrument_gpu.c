/* Instrumentation of the GPU executor outside the step's program: the phase
 * names and profiling switch (bench's breakdown: the program's timing hooks
 * fill it, scheduler_gpu.c), the access check's switch (access_check_gpu.c)
 * and the synchronising NaN scan of a tensor after the step
 * (--check-finite's parameter gradients). */
#include <stdio.h>
#include "catchat/kernels.h"
#include "catchat/safetensors.h"
#include "gpu/gpu_impl.h"
#include "gpu/step_gpu.h"

const char *const CC_PHASE_NAMES[PH_COUNT] = { "embedding, norms, input GEMMs", "recurrence forward",
                                               "context stream forward", "classifier + loss (fwd+bwd)",
                                               "context stream backward", "BPTT",
                                               "input-side weight GEMMs, norms bwd" };

/* NaN provenance (see finite.h): scan a tensor on the device when checking
 * is on, and synchronise. width/T locate the element in a [B,T,width]
 * tensor. */
void gpu_check_dev(cc_executor *ex, const char *stage, const char *tensor, int layer, const void *ptr, size_t n,
                      int is_half, int width)
{
    if (!ex->check || ex->check->found) return;
    gpu_impl *g = ex->impl;
    unsigned long long first = 0;
    cudaCheck(cudaMemsetAsync(g->first_bad, 0xff, sizeof(unsigned long long), g->stream));
    launch_find_nonfinite(ptr, n, is_half, g->first_bad, g->stream);
    cudaCheck(cudaMemcpyAsync(&first, g->first_bad, sizeof(first), cudaMemcpyDeviceToHost, g->stream));
    cudaCheck(cudaStreamSynchronize(g->stream));
    if (first == ~0ULL) return;
    float v = 0;
    if (is_half) {
        uint16_t hv = 0;
        cudaCheck(cudaMemcpy(&hv, (const uint16_t *)ptr + first, 2, cudaMemcpyDeviceToHost));
        v = cc_half_to_float(hv);
    } else {
        cudaCheck(cudaMemcpy(&v, (const float *)ptr + first, 4, cudaMemcpyDeviceToHost));
    }
    cc_finite_set(ex->check, stage, tensor, layer, (long)first, v, width, ex->T);
}
void cc_gpu_profile_enable(cc_executor *ex, int on)
{
    gpu_impl *g = IMPL(ex);
    if (on != g->profile) { /* profiled steps run their operations one after another (program_gpu.c) */
        cudaCheck(cudaDeviceSynchronize());
        gpu_graph_reset(g);
        gpu_programs_free(g);
    }
    g->profile = on;
}

void cc_gpu_check_accesses(cc_executor *ex, int on)
{
    gpu_impl *g = IMPL(ex);
    g->check_accesses = on;
    if (!on) access_check_free(g);
}

void cc_gpu_profile_take(cc_executor *ex, double ms[PH_COUNT])
{
    gpu_impl *g = IMPL(ex);
    for (int i = 0; i < PH_COUNT; i++) {
        ms[i] = g->phase_ms[i];
        g->phase_ms[i] = 0;
    }
}
