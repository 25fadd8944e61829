/* The step as one CUDA graph (see gpu_passes below): capture,
 * replay and the rules for when a graph may stand in for the eager step. */
#include <stdio.h>
#include <string.h>
#include "catchat/dist.h"
#include "gpu/gpu_impl.h"

/* The step as one CUDA graph: captured from the streams (the program's waits
 * become the graph's edges, each kernel keeps its stream's priority), then
 * replayed while what the kernels were given stays the same: the loss scale
 * and the scored count (the clamp limits follow from them), the lanes, the
 * NaN plant (which the trainer sets for one step) and the NaN scans.
 * The first step runs eagerly, so the GEMM plans, the reduction scratch, the
 * NaN scans' slots and the timing events exist before a capture; the
 * diagnostics are the program's hooks and need no synchronisation inside
 * the step, so a replayed graph is what they check. Off under NCCL (its
 * collectives are issued by the host inside the step). A capture the
 * runtime refuses turns graphs off for the run, and that step is issued
 * eagerly instead.
 * On by default where the recurrences are latency-bound (their clusters all
 * resident: the graph saves the launch gaps), off where they take several
 * waves (the wide forward: measured slower; CHANGELOG.md has the A/B);
 * [gpu] cuda_graph = on or off forces it. */
static int graphs_allowed(const cc_executor *ex)
{
    const gpu_impl *g = IMPL(ex);
    const int wanted = strcmp(ex->cfg.cuda_graph, "auto") == 0 ? !g->plan.wide : strcmp(ex->cfg.cuda_graph, "on") == 0;
    return wanted && !g->graph_failed && !(ex->dist && ex->dist->active);
}

/* The step captured and instantiated; cudaSuccess, or why not. */
static cudaError_t graph_capture(cc_executor *ex, double loss_scale, long scored, int n)
{
    gpu_impl *g = IMPL(ex);
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    cudaError_t e = cudaStreamBeginCapture(g->stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return e;
    }
    gpu_issue_step(ex, loss_scale, scored, n);
    e = cudaStreamEndCapture(g->stream, &graph);
    if (e == cudaSuccess) e = cudaGraphInstantiateWithFlags(&exec, graph, cudaGraphInstantiateFlagUseNodePriority);
    if (graph) cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return e;
    }
    if (g->graph_exec) cudaCheck(cudaGraphExecDestroy(g->graph_exec));
    g->graph_exec = exec;
    g->graph_scale = loss_scale;
    g->graph_scored = scored;
    g->graph_lanes = n;
    g->graph_plant = ex->plant_grad_h;
    g->graph_checked = ex->check != NULL;
    g->graph_builds = g->program_builds;
    return cudaSuccess;
}

void gpu_passes(cc_executor *ex, double loss_scale, long scored, int n)
{
    gpu_impl *g = IMPL(ex);
    gpu_set_lanes(ex, n);
    gpu_step_prepare(ex, scored, n); /* outside a capture: it may build the program and allocate */
    if (graphs_allowed(ex) && g->graph_warm) {
        const int same = g->graph_exec && g->graph_scale == loss_scale && g->graph_scored == scored &&
                         g->graph_lanes == n && (ex->check != NULL) == g->graph_checked &&
                         g->graph_builds == g->program_builds &&
                         memcmp(&g->graph_plant, &ex->plant_grad_h, sizeof(g->graph_plant)) == 0;
        /* a key that keeps changing (the scored count of batches with
         * ignored targets) would capture every step: eager is cheaper then */
        const int churn = !same && g->graph_captures >= 3 && g->graph_replays < 8 * g->graph_captures;
        const cudaError_t e = churn || same ? cudaSuccess : graph_capture(ex, loss_scale, scored, n);
        if (!churn && e == cudaSuccess) {
            g->graph_replays += same;
            g->graph_captures += !same;
            if (same) gpu_step_replayed(ex, scored);
            cudaCheck(cudaGraphLaunch(g->graph_exec, g->stream));
            return;
        }
        g->graph_failed = 1;
        if (!churn)
            fprintf(stderr, "catchat: CUDA graph capture of the step failed (%s); running the step without graphs\n",
                    cudaGetErrorString(e));
    }
    gpu_issue_step(ex, loss_scale, scored, n);
    g->graph_warm = 1;
}

void gpu_graph_reset(gpu_impl *g)
{
    if (g->graph_exec) cudaCheck(cudaGraphExecDestroy(g->graph_exec));
    g->graph_exec = NULL;
    g->graph_warm = 0;
}

int cc_gpu_graph_replays(const cc_executor *ex) { return IMPL(ex)->graph_replays; }
