/* Instrumentation of the GPU executor, kept out of the passes: phase marks
 * (bench's breakdown), NaN-provenance scans (--check-finite) and the lane
 * trace. All of it is off unless asked for, and then costs synchronisation. */
#include <stdio.h>
#include "catchat/kernels.h"
#include "catchat/safetensors.h"
#include "gpu/gpu_impl.h"

const char *const CC_PHASE_NAMES[PH_COUNT] = { "embedding, norms, input GEMMs", "recurrence forward",
                                               "context stream forward", "classifier + loss (fwd+bwd)",
                                               "context stream backward", "BPTT",
                                               "input-side weight GEMMs, norms bwd" };

/* Close the phase that ends here: time since the previous mark goes to `ph`. */
void gpu_mark(gpu_impl *g, int ph)
{
    if (!g->profile || g->nmarks >= 64) return;
    cudaCheck(cudaEventRecord(g->marks[g->nmarks], g->stream));
    g->mark_phase[g->nmarks++] = ph;
}

void gpu_collect_marks(gpu_impl *g)
{
    if (!g->profile || g->nmarks < 2) {
        g->nmarks = 0;
        return;
    }
    cudaCheck(cudaEventSynchronize(g->marks[g->nmarks - 1]));
    for (int i = 1; i < g->nmarks; i++) {
        float ms = 0;
        cudaCheck(cudaEventElapsedTime(&ms, g->marks[i - 1], g->marks[i]));
        g->phase_ms[g->mark_phase[i]] += ms;
    }
    g->nmarks = 0;
}

/* NaN provenance (see finite.h): scan a stage's output on the device when
 * checking is on. One scan and one synchronisation per stage: costly, off by
 * default. width/T locate the element in a [B,T,width] tensor. */
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
    if (on && !g->profile)
        for (int i = 0; i < 64; i++) cudaCheck(cudaEventCreate(&g->marks[i]));
    g->profile = on;
    g->nmarks = 0;
}

void cc_gpu_profile_take(cc_executor *ex, double ms[PH_COUNT])
{
    gpu_impl *g = IMPL(ex);
    for (int i = 0; i < PH_COUNT; i++) {
        ms[i] = g->phase_ms[i];
        g->phase_ms[i] = 0;
    }
}

/* Lane trace (--lane-trace, CATCHAT_LANE_TRACE=1): print, after each step,
 * when every lane's recurrences ran (ms from the step's start), to see how
 * lanes overlap, and when its layers' weight GEMMs ran on the side stream
 * (series GPU_MAX_LANES + lane), to see what shares the GPU with a
 * recurrence. Process-wide: one executor traces at a time. */
#define TRACE_MAX 64
/* series: each lane's recurrences, each lane's weight GEMMs, and under the
 * wavefront each lane's layers' recurrence chunks (lane·GPU_WAVE_MAX_LAYERS + layer) */
#define TRACE_WAVE (2 * GPU_MAX_LANES)
#define TRACE_SERIES (TRACE_WAVE + GPU_MAX_LANES * GPU_WAVE_MAX_LAYERS)
static struct {
    int on, n[TRACE_SERIES];
    cudaEvent_t ev[TRACE_SERIES][TRACE_MAX], t0;
} trace;

void gpu_trace_init(int on)
{
    static int done;
    if (done) return;
    done = 1;
    trace.on = on;
    if (!trace.on) return;
    cudaCheck(cudaEventCreate(&trace.t0));
    for (int l = 0; l < TRACE_SERIES; l++)
        for (int i = 0; i < TRACE_MAX; i++) cudaCheck(cudaEventCreate(&trace.ev[l][i]));
}

void gpu_trace_point(int lane, cudaStream_t s)
{
    if (trace.on && trace.n[lane] < TRACE_MAX) cudaCheck(cudaEventRecord(trace.ev[lane][trace.n[lane]++], s));
}

/* The lane's end, printed as an interval of zero length after its recurrences. */
void gpu_trace_end(int lane, cudaStream_t s)
{
    gpu_trace_point(lane, s);
    gpu_trace_point(lane, s);
}

void gpu_trace_wave_point(int lane, int layer, cudaStream_t s)
{
    gpu_trace_point(TRACE_WAVE + lane * GPU_WAVE_MAX_LAYERS + layer, s);
}

/* Series l's points as intervals (ms from the step's start, `decimals`
 * places) after its label, and the series emptied for the next step. */
static void print_series(int l, int decimals)
{
    for (int i = 0; i < trace.n[l]; i++) {
        float ms = 0;
        cudaCheck(cudaEventElapsedTime(&ms, trace.t0, trace.ev[l][i]));
        fprintf(stderr, "%s%.*f", i % 2 ? "-" : " ", decimals, ms);
    }
    fputc('\n', stderr);
    trace.n[l] = 0;
}

void gpu_trace_print(int nlanes)
{
    if (!trace.on) return;
    cudaCheck(cudaDeviceSynchronize());
    for (int k = 0; k < nlanes * GPU_WAVE_MAX_LAYERS; k++) { /* the wavefront's chunks, forward then BPTT */
        if (!trace.n[TRACE_WAVE + k]) continue;
        fprintf(stderr, "lane %d layer %d chunks:", k / GPU_WAVE_MAX_LAYERS, k % GPU_WAVE_MAX_LAYERS);
        print_series(TRACE_WAVE + k, 3);
    }
    for (int k = 0; k < 2 * nlanes; k++) {
        const int l = k < nlanes ? k : GPU_MAX_LANES + k - nlanes;
        if (k < nlanes) fprintf(stderr, "lane %d:", l);
        else fprintf(stderr, "lane %d weight GEMMs:", l - GPU_MAX_LANES);
        print_series(l, 2);
    }
}

int gpu_trace_on(void) { return trace.on; }

void gpu_trace_start(cudaStream_t s)
{
    if (trace.on) cudaCheck(cudaEventRecord(trace.t0, s));
}

