/* A lane's streams, cuBLASLt contexts and kernel scratch under a plan, and
 * which of them an operation of each role runs on (gpu_plan.h,
 * gpu_lane_resources; step_gpu.h, unit_binding). The executor makes what
 * gpu_lane_resources_of lists, plan_gpu.c counts its workspaces from the
 * same list, and the step's program (program_gpu.c) names units by role:
 * a stream or context added here is made, counted and scheduled at once,
 * and the liveness pass (work_layout_gpu.c), which needs no stream at all,
 * reads the same program. No device call. */
#include "catchat/gpu_plan.h"
#include "catchat/matmul.h"
#include "gpu/step_gpu.h"

/* Stream and context indices (gpu_plan.h's order). */
enum { S_OWN, S_SIDE, S_REC0, S_PAIRS };
enum { G_OWN, G_SIDE, G_REC0, G_PAIRS };

static int feed_stream(int pair) { return S_PAIRS + pair; }
static int rec_stream(const gpu_step_plan *p, int pair) { return pair == 0 ? S_REC0 : S_PAIRS + p->wave_streams + pair - 1; }
static int feed_gemm(int pair) { return G_PAIRS + pair; }
static int rec_gemm(const gpu_step_plan *p, int pair) { return pair == 0 ? G_REC0 : G_PAIRS + p->wave_streams + pair - 1; }

/* The cuBLASLt workspace of a lane's own and side contexts: the usual one,
 * or under recompute, which is there to save memory, the small one of the
 * wavefront's time windows (28 MiB less a context; the step's large GEMMs
 * find algorithms within it). The others serve windows and chunks. */
static size_t lane_workspace_bytes(int recompute)
{
    return recompute ? GPU_MATMUL_WINDOW_WORKSPACE : gpu_matmul_workspace_bytes();
}

void gpu_lane_resources_of(const gpu_step_plan *p, gpu_lane_resources *r)
{
    const int wave = p->wave_chunk > 0, pairs = wave ? p->wave_streams : 1;
    r->streams = wave ? S_PAIRS + 2 * pairs - 1 : S_PAIRS;
    r->priority[S_OWN] = GPU_PRIO_LANE;
    r->priority[S_SIDE] = GPU_PRIO_SIDE;
    for (int k = 0; k < pairs; k++) {
        r->priority[rec_stream(p, k)] = GPU_PRIO_REC; /* the recurrences' clusters before other blocks */
        if (wave) r->priority[feed_stream(k)] = GPU_PRIO_LANE;
    }
    r->workspace[G_OWN] = r->workspace[G_SIDE] = lane_workspace_bytes(p->recompute);
    /* the recurrence stream's own context: recompute's input GEMMs run beside its per-step loop; under the
     * wavefront each pair's feed and recurrence stream has one */
    r->gemms = wave ? G_PAIRS + 2 * pairs - 1 : p->recompute ? G_PAIRS : G_REC0;
    for (int k = G_REC0; k < r->gemms; k++) r->workspace[k] = GPU_MATMUL_WINDOW_WORKSPACE;
}

unit_binding gpu_unit_binding(const gpu_step_plan *p, int wave_program, int role, int pair)
{
    switch (role) {
    case UNIT_SIDE: return (unit_binding){ S_SIDE, G_SIDE };
    case UNIT_REC:
        if (wave_program) return (unit_binding){ (short)rec_stream(p, pair), (short)rec_gemm(p, pair) };
        /* layer after layer the recurrence's per-step GEMMs take the lane's context, or under recompute,
         * whose input GEMMs run beside them, its own */
        return (unit_binding){ S_REC0, (short)(p->recompute ? G_REC0 : G_OWN) };
    case UNIT_FEED:
        if (wave_program) return (unit_binding){ (short)feed_stream(pair), (short)feed_gemm(pair) };
        return (unit_binding){ S_OWN, G_OWN };
    case UNIT_COMM: return (unit_binding){ -1, -1 };
    default: return (unit_binding){ S_OWN, G_OWN };
    }
}
