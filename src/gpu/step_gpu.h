/* The GPU training step as one program (docs/architecture.md, "The step as
 * one program"). Private to src/gpu.
 *
 * Each piece of a layer's work is one operation over a lane (a group of
 * whole sequences, gpu_impl.h), a layer and a window of steps [t0, t1)
 * (or, for the context stream under recompute, a part of the lane's
 * sequences): ops_layer_gpu.c and ops_top_gpu.c write each once. Every
 * operation names each buffer it hands its kernels once, as a view that is
 * both its declaration and the launch's pointer; program_gpu.c lists the
 * operations of a step in issue order for the plan's schedule, each on a
 * unit named by role (layer after layer is the wavefront with one chunk;
 * recompute runs the forward's operations again before each backward
 * window), and
 * scheduler_gpu.c turns the declarations into streams and events: an
 * operation waits for each earlier one on another stream whose memory it
 * overlaps (read after write, write after read, write after write), and for
 * nothing else. The diagnostics (NaN scans, phase timing, the lane trace,
 * the NaN plant) are the scheduler's hooks around each operation, so they
 * see the schedule that trains. */
#ifndef CATCHAT_STEP_GPU_H
#define CATCHAT_STEP_GPU_H

#include "catchat/kernels.h"
#include "catchat/util.h"
#include "gpu/gpu_impl.h"

typedef enum {
    OP_EMBED,       /* u^j = embedding(x) + h^0 + ... + h^{j-1} (j = layer: 0 in the forward), the op's rows */
    OP_FEED,        /* u^l = u^{l-1} + h^{l-1} and its norm (l = L: the context stream's s), then layer l's input GEMM */
    OP_RECUR,       /* layer l's recurrence over the window */
    OP_TOP_CTX,     /* the context stream: q, k, v, the attention, its output c */
    OP_CLASSIFIER,  /* the merge, final norm, classifier and loss; with a gradient, dL/dm into du */
    OP_CLASSIFIER_DW, /* with a gradient: the classifier's last chunk's lm_head weight GEMM (beside what follows) */
    OP_TOP_DC,      /* the context guard and dc16, the gradient into the context stream */
    OP_WG_CTX_OUT,  /* ctx_out's weight gradient */
    OP_TOP_ATTN,    /* dO and the attention backward: dqkv */
    OP_WG_CTX_QKV,  /* ctx_qkv's weight gradient */
    OP_TOP_DX,      /* dqkv through ctx_qkv and the context norm's backward, added into du */
    OP_ALLREDUCE_TAIL, /* NCCL: the context stream's and classifier's gradients, reduced during the BPTT */
    OP_REGATE,      /* recompute: a window's FP16 h_{t-1}, gates and ghn again from the kept h (after its embed and feed) */
    OP_BPTT,        /* layer l's BPTT over the window (the NaN plant around it) */
    OP_DX,          /* layer l's input gradient and norm backward on the window: du becomes dL/du^l */
    OP_WGRAD,       /* layer l's weight gradients (a window's under recompute) */
    OP_EMBED_BWD,   /* the embedding's gradient from du^0 */
    OP_KINDS
} op_kind;


/* Where an operation runs, by role: the lane's own stream, its side stream
 * (weight gradients), a recurrence or feed stream (the wavefront's, by
 * pair), or the executor's NCCL stream. gpu_unit_binding (units_gpu.c)
 * gives the role's stream and cuBLASLt context among the lane's
 * (gpu_lane_resources), the same table the executor makes them from; a
 * stream's kernel scratch is its own. The program holds no stream: the
 * scheduler resolves a unit on the executor when it issues, so the
 * liveness pass reads the very program that runs. */
enum { UNIT_LANE, UNIT_SIDE, UNIT_REC, UNIT_FEED, UNIT_COMM };
typedef struct {
    short stream, gemm; /* indices among the lane's; -1: the executor's NCCL stream, no context */
} unit_binding;
unit_binding gpu_unit_binding(const gpu_step_plan *p, int wave_program, int role, int pair);

typedef struct {
    signed char lane;   /* -1: the executor's (the NCCL stream) */
    unsigned char role; /* UNIT_* */
    unit_binding at;
    int slot; /* the stream it runs on, among the program's distinct ones (serial: every unit on slot 0, the main stream) */
} exec_unit;

/* One operation of the program. */
typedef struct {
    unsigned char kind, lane;
    unsigned char phase; /* the layers' forward (0), the context stream and classifier (1), the layers' backward (2) */
    signed char layer;
    short unit;        /* exec_unit index */
    short k;           /* its window (recompute) or chunk (wavefront); 0 for whole-T operations */
    int t0, t1;        /* steps */
    int s0, ns;        /* sequences [s0, s0 + ns) of the lane (a part of it for the context stream under recompute) */
    int acc0, nacc;    /* its memory accesses in the program's table */
    int wait0, nwait;  /* the operations it waits for */
    int scan0, nscan;  /* its NaN scans' slots ([gpu] check) */
    int recorded;      /* a later operation on another stream waits for it */
} step_op;

/* What an access does to its bytes: reads them; writes them (and may read
 * them, or leave some as they were); or defines them: writes every byte
 * before reading any, so the value they held before is dead from this
 * operation on (what lets the liveness pass, work_layout_gpu.c, give the
 * bytes to another tensor in between). The scheduler orders a define as a
 * write. */
enum { ACC_READ = 0, ACC_WRITE = 1, ACC_DEFINE = 2 };

/* A memory access: n runs, run i the bytes [lo, hi) from base + i·stride
 * (a lane's rows [t0, t1) of its sequences in a [B, T, width] tensor: one
 * run a sequence); write: ACC_*. */
typedef struct {
    const char *base;
    size_t stride, lo, hi;
    int n;
    int write;
} step_access;

/* The bytes [*lo, *hi) access x spans, from its first run's start to its last's end. */
static inline void step_access_span(const step_access *x, const char **lo, const char **hi)
{
    *lo = x->base + x->lo;
    *hi = x->base + (size_t)(x->n - 1) * x->stride + x->hi;
}

/* A NaN scan after an operation: nseq runs of len elements from ptr, run i
 * at ptr + i·stride; the finding is reported as (stage, tensor, layer) at
 * the element's step and unit. */
typedef struct {
    const char *stage, *tensor;
    int layer, half, width;
    const void *ptr;
    int nseq;
    size_t stride, len;
    int b_first, t_first; /* the batch sequence and step of ptr's first element (-1: report the flat index) */
} step_scan;

/* a lane's own and side streams' units and, under the wavefront, its pairs' (a feed and a recurrence
 * unit each, whatever the layers), and the NCCL stream's */
#define STEP_MAX_UNITS (GPU_MAX_LANES * (2 * GPU_WAVE_STREAMS + 2) + 1)

/* The program of one kind of step: its operations, accesses, waits, events. */
typedef struct step_program {
    int lanes, with_grad, eval; /* what it was built for */
    int serial;                 /* every operation on the main stream ([gpu] schedule = serial) */
    int refused;                /* built after a refused persistent launch (the per-step loop, no wavefront) */
    int wave, top_chunked, nchunks;
    exec_unit unit[STEP_MAX_UNITS];
    int nunits, nslots;
    int slot_unit[STEP_MAX_UNITS];         /* a unit on each slot: its stream */
    cudaEvent_t slot_join[STEP_MAX_UNITS]; /* each stream's end, joined into the main stream */
    step_op *ops;
    int n, cap;
    step_access *acc;
    int nacc, cap_acc;
    int *waits;
    int nwaits, cap_waits;
    cudaEvent_t *ev;       /* one per operation (created where recorded) */
    cudaEvent_t *ev_start, *ev_end; /* the timing hooks' (profile, lane trace), one pair per operation */
    cudaEvent_t ev_t0;     /* the step's start, for the lane trace */
    int timing;            /* ev_start/ev_end exist */
    /* [gpu] check: the scans' slots (first non-finite index, its value) on
     * the device and what each scanned, filled in issue order */
    step_scan *scans;
    int cap_scans;
    unsigned long long *scan_first;
    float *scan_value;
} step_program;

/* What an operation's function gets: the step, the program, its lane's
 * view, and whether it declares (appends its accesses and scans, launches
 * nothing) or issues. */
typedef struct step_run step_run;

/* A lane's view of the batch: rows [r0, r0 + M) of every [B·T, ·] tensor. */
typedef struct {
    cc_executor *ex;
    gpu_impl *g;
    gpu_lane *ln;
    int B, T, M, D, L, H, W, V;
    size_t r0, M_all; /* the lane's first row; rows of the whole batch (per-layer tensors are [L, M_all, ·]) */
    int b0;           /* the lane's first sequence */
    /* the lane's first row in the context stream's and classifier's own
     * tensors: r0, or 0 for a part of a lane under recompute, whose buffers
     * hold one part */
    size_t top_r0;
    cc_norm_consts nc;
} lane_ctx;

struct step_run {
    cc_executor *ex;
    gpu_impl *g;
    step_program *p;
    const step_op *op;
    lane_ctx c;          /* the op's lane (and part) */
    int declaring;
    cudaStream_t s;      /* the op's stream, GEMM context and kernel scratch */
    gpu_matmul_ctx *gm;
    gpu_scratch *sc;
    float loss_scale, clamp_limit, ctx_limit;
};

/* The lane's first row of a [M_all, width] tensor, and of layer l's block of an [L, M_all, width] one. */
#define ROWS(c, base, width) ((base) + (c)->r0 * (size_t)(width))
#define LROWS(c, base, l, width) ((base) + ((size_t)(l) * (c)->M_all + (c)->r0) * (size_t)(width))
#define G32L(c, idx) ((c)->ln->g32 + (c)->ex->lay.t[(idx)].offset)
/* A lane's rows of a per-query, per-head [B, H, T] tensor (sequence-major). */
#define HROWS(c, base) ((base) + (size_t)(c)->b0 * (c)->H * (c)->T)
/* The lane's first row of a context stream or classifier tensor (top_r0). */
#define TOPROWS(c, base, width) ((base) + (c)->top_r0 * (size_t)(width))
/* The lane's first row of a recompute window's buffer ([B_all, rc_window, width]). */
#define WINROWS(c, base, width) ((base) + (size_t)(c)->b0 * (c)->g->plan.rc_window * (size_t)(width))
/* The rows of layer-indexed tensor `base` (width w) at the lane's first sequence's step t0. */
#define WROWS(c, base, l, w, t0) (LROWS(c, base, l, w) + (size_t)(t0) * (w))

/* Grows a table to hold need entries (cc_realloc). */
#define GROW(ptr, cap, need)                                                          \
    do {                                                                              \
        if ((need) > (cap)) {                                                         \
            (cap) = (need) > 2 * (cap) ? (need) : 2 * (cap);                          \
            (ptr) = cc_realloc((ptr), sizeof(*(ptr)) * (size_t)(cap));                \
        }                                                                             \
    } while (0)

/* ---- views and scans (step_access_gpu.c) ----
 * An operation names each buffer it hands its kernels once, as a view: the
 * call appends the access to the program's table while the program is
 * declared, and returns the pointer the launch takes, so what is declared
 * and what is launched are one expression. The pointers are computed the
 * same way in both modes (an operation returns before it launches while
 * declaring); under the access check (cc_gpu_check_accesses, the ladder's)
 * every view made while issuing must lie within the accesses its operation
 * declared, so a pointer named only at launch is an error, and every byte
 * an operation's launches change must lie within its declared writes.
 * acc: ACC_READ, ACC_WRITE or ACC_DEFINE. */
/* The op's rows [t0, t1) (of its sequences) of an [·, T, width] tensor whose
 * lane block starts at `lane_rows` (ROWS/LROWS/TOPROWS), es bytes an
 * element; returns row t0 of the first sequence, where a launch over those
 * rows starts. */
void *view_rows(step_run *r, int acc, const void *lane_rows, size_t width, size_t es, int t0, int t1);
/* The same access, returning the lane block itself: for kernels that take
 * the block and find the steps by the window they are given (the
 * recurrence's gru_layer and gru_grads, the attention over a chunk). */
void *view_lane(step_run *r, int acc, const void *lane_rows, size_t width, size_t es, int t0, int t1);
/* A window buffer's rows of the op's sequences ([·, rc_window, width]); returns lane_rows. */
void *view_window(step_run *r, int acc, const void *lane_rows, size_t width, size_t es);
/* n bytes from ptr as one run; returns ptr. */
void *view_flat(step_run *r, int acc, const void *ptr, size_t bytes);
/* A parameter's gradient in the lane's buffer (accumulated: a write); returns it. */
float *view_grad(step_run *r, int idx);
/* A parameter, FP32 master or FP16 working copy (read: no operation writes them). */
const float *view_param32(step_run *r, int idx);
const uint16_t *view_param16(step_run *r, int idx);
/* A NaN scan of the op's output rows [t0, t1) (or a window buffer's rows:
 * window = 1), launched on the op's stream once its kernels are
 * (schedule_issue: scan_launch); and one of n elements from ptr, launched
 * at once (from inside an op, after the kernel that wrote them). */
void scan_rows(step_run *r, const char *stage, const char *tensor, int layer, const void *lane_rows, int width,
               int half, int t0, int t1, int window);
void scan_flat(step_run *r, const char *stage, const char *tensor, const void *ptr, size_t n, int half, int width);
void scan_launch(step_run *r, int slot);
/* Each operation's scan slots, in program order, made on the device where
 * they are not yet (on an eager step: a graph is captured after one). */
void scans_reserve(step_program *p, cc_executor *ex);
/* Before the program is issued: no operation has scanned yet. */
void scans_clear(step_program *p);

/* ---- the operations (ops_layer_gpu.c, ops_top_gpu.c) ---- */
lane_ctx lane_view(cc_executor *ex, gpu_lane *ln);
/* Sequences [s0, s0 + ns) of lane c as a lane of their own (a part under recompute: top rows from 0). */
lane_ctx lane_part(const lane_ctx *c, int s0, int ns, int part_buffers);
void op_embed(step_run *r);
void op_feed(step_run *r);
void op_recur(step_run *r);
void op_regate(step_run *r);
void op_bptt(step_run *r);
void op_dx(step_run *r);
void op_wgrad(step_run *r);
void op_embed_bwd(step_run *r);
void op_top_ctx(step_run *r);
void op_classifier(step_run *r);
void op_classifier_dw(step_run *r);
void op_top_dc(step_run *r);
void op_wg_ctx_out(step_run *r);
void op_top_attn(step_run *r);
void op_wg_ctx_qkv(step_run *r);
void op_top_dx(step_run *r);
void op_allreduce_tail(step_run *r);

/* ---- the program (program_gpu.c) ---- */
/* The operations of a training step over n lanes (with a gradient where
 * with_grad), or of an evaluation (the whole batch in one lane, no
 * gradient), in issue order, on the units of the plan's schedule. */
void program_build(step_program *p, cc_executor *ex, int lanes, int with_grad, int eval);
/* The same operations on their units, neither declared nor scheduled (no device call). */
void program_emit(step_program *p, cc_executor *ex, int lanes, int with_grad, int eval);
void program_free(step_program *p);
/* The host half of program_free: what a program declared without an executor's streams (work_layout_gpu.c) holds. */
void program_free_host(step_program *p);
/* Append an operation (program_gpu.c's builder) in phase `phase`. */
void program_add(step_program *p, int kind, int phase, int lane, int layer, int unit, int k, int t0, int t1, int s0,
                 int ns);

/* ---- the scheduler (scheduler_gpu.c) ---- */
/* Declares every operation: its accesses in the program's table (no device
 * call: the liveness pass declares the programs over the plan's buffers at
 * addresses of their own, work_layout_gpu.c). */
void schedule_declare(step_program *p, cc_executor *ex);
/* The waits of a declared program (each operation after the earlier ones
 * on other streams whose memory it overlaps, none that another implies),
 * and the vector clocks they come from, returned (cc_malloc, n × nslots):
 * [i·nslots + s] is the last operation on stream slot s that operation i
 * follows, -1 for none. No device call. */
int *schedule_waits(step_program *p);
/* Declares every operation, derives the waits, creates the events. */
void schedule_program(step_program *p, cc_executor *ex);
/* What an issue of the program needs made first (the NaN scans' slots, the
 * timing events): before a CUDA graph capture, which may not allocate. */
void schedule_prepare(step_program *p, cc_executor *ex);
/* Issues the program's operations on their streams, joined into the main
 * stream at the end. */
void schedule_issue(step_program *p, cc_executor *ex, double loss_scale, long scored);
/* ---- the access check (access_check_gpu.c) ---- */
/* Around each operation of an eager step under cc_gpu_check_accesses: the
 * followed buffers copied before the first, and after each every changed
 * byte checked against its declared writes (a one-line stop if one is not). */
void access_check_before(cc_executor *ex);
void access_check_after(cc_executor *ex, const step_program *p, int i);
void access_check_free(gpu_impl *g);

/* [gpu] check: the step's scans read back; the first finding, in program order, reported. */
void schedule_collect_scans(step_program *p, cc_executor *ex);
/* Profiling and the lane trace: each operation's device time by phase, and the trace's lines. */
void schedule_collect_timing(step_program *p, cc_executor *ex);

#endif
