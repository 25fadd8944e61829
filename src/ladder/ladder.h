/* The parity ladder's private harness (docs/ladder.md). A stage runs one op (or a
 * composition) on the GPU and its CPU twin on the same random inputs (fixed
 * seed, printed), with GPU outputs poisoned (NaN bytes) beforehand so an
 * unwritten element fails. Operands of FP16 GEMMs are drawn FP16-representable
 * so both sides see the same numbers and the error measures only what the GPU
 * path changes. Each stage reports its worst tensor: max |gpu − ref|,
 * ‖gpu − ref‖/‖ref‖, the tolerance (with its reason, next to it in the stage's
 * file) and PASS / WARN / SKIP / FAIL.
 *
 * Adding a stage is one file, src/ladder/stage_<op>.c, that defines
 *     const ladder_stage ladder_stage_<op> = { "<op>", "<title>", run_<op> };
 * plus its extern below, its line in the table (ladder.c) and in CMakeLists.txt. The op name is
 * the one the op has everywhere else (src/cpu/, kernels/, tests/); the title
 * is the contract's name in docs/ladder.md. */
#ifndef CATCHAT_LADDER_PRIVATE_H
#define CATCHAT_LADDER_PRIVATE_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include "catchat/config.h"
#include "catchat/dist.h"
#include "catchat/executor.h"
#include "catchat/matmul.h"
#include "catchat/gpu_gru.h"
#include "catchat/rng.h"
#include "gpu/gpu_check.h"

/* ---- one stage's verdict, accumulated over its tensors ---- */
typedef struct stage {
    int num;           /* 1-based place in the table */
    const char *name;  /* op name, e.g. "gru_cell" */
    const char *title; /* docs/ladder.md's name, e.g. "GRU gates" */
    char shape[160];
    double max_abs, worst_ratio, worst_rel, worst_tol;
    char worst[64];
    int fail, warn, skip;
    char note[96]; /* the first failed flag */
    int plan_off;  /* a check_plan failed: the GPU ran another path than the case meant (catchat's error) */
    char why[96];  /* why the stage skipped (stage_skip) */
    char part_skipped[192]; /* the cases it could not take here (stage_skip_part) */
    int plant; /* testing aid (preflight --plant-wrong-result): every GPU result this stage checks is
                * taken as 1.25 times what the GPU returned, so its checks must fail */
} stage;

/* What every stage may use. The one RNG is seeded once per ladder run and
 * passed through the stages in table order, so a stage's inputs depend on the
 * stages run before it (with --stage, on none). */
typedef struct ladder_ctx {
    cc_rng *rng;
    gpu_matmul_ctx *gemm; /* cuBLASLt on the default stream */
    cc_dist *dist;     /* NULL, or a communicator: grad_reduce also checks the all-reduce */
    const gpu_caps *caps; /* the device's, read once and narrowed to the profile: what the launchers choose by */
    const char *gpu_profile; /* [gpu] profile the executor stages run as ("native": none) */
    /* the recurrence's state the stages' own launches run under (kernels.h):
     * a refusal their launches met, the testing aids the cases set
     * (gru_path_begin, gru_stress_cases); each executor keeps its own */
    gpu_gru_state *gru;
} ladder_ctx;

typedef void (*ladder_run_fn)(const ladder_ctx *cx, stage *st);

typedef struct ladder_stage {
    const char *name;  /* op name: --stage NAME, the row */
    const char *title; /* docs/ladder.md's stage name: --stage TITLE, the row */
    ladder_run_fn run;
} ladder_stage;

/* ---- checks (common.c) ---- */
/* Compares n values by relative L2 error against tol: above it FAILs (WARNs
 * when warn_only), any non-finite value FAILs; the worst tensor (by rel/tol)
 * is what the row shows. */
void check(stage *st, const char *what, const float *gpu, const float *ref, size_t n, double tol, int warn_only);
/* A yes/no property: FAILs the stage when !ok, naming `what`. */
void check_flag(stage *st, const char *what, int ok);
/* The same for a flag about what ran (the plan's lanes, recompute, chunks,
 * recurrence), not about numbers: a failure also sets plan_off. */
void check_plan(stage *st, const char *what, int ok);
/* This GPU cannot take the path the stage tests: the stage reports SKIP with
 * the reason, unless something FAILed. The first reason is kept. */
void stage_skip(stage *st, const char *why);
/* This GPU (or profile) cannot take one of the stage's cases: the others
 * still decide the verdict, and the row names what was left out. */
void stage_skip_part(stage *st, const char *why);
/* The CPU and GPU executors of one config; 0 (and the stage SKIPs) where the
 * GPU executor does not run on this GPU. */
int executor_pair(stage *st, const cc_config *c, int B, int T, cc_executor **cpu, cc_executor **gpu);

/* ---- device buffers (common.c) ---- */
/* Device copies of host[n]; with host NULL, poisoned (NaN bytes). */
float *dev_f32(const float *host, size_t n);
void *dev_f16(const float *host, size_t n);
/* Host copies (after a device synchronisation); the caller frees them. */
float *get_f32(const float *dev, size_t n);
float *get_f16(const void *dev, size_t n);
/* FP16 copy of host[n] with `guard` NaN elements on each side: a kernel that
 * reads outside [0, n) brings a NaN into its result. Returns the start of the
 * data; free with cudaFree(ptr - guard). */
uint16_t *dev_f16_guarded(const float *host, size_t n, size_t guard);
/* Random N(0, sd²); FP16-representable when `f16` is set. */
float *rand_vec(cc_rng *r, size_t n, double sd, int f16);
/* Kernel scratch (kernels.h) for launches on the default stream, sized for
 * them before the first: a norm backward over M rows of D (common.c); a GRU
 * layer of this shape on `path` under cx's state and caps, its recurrence,
 * windows of it and its weight gradients (gru_cases.c). Free with
 * gpu_scratch_destroy once the device is done with them. */
gpu_scratch *norm_scratch(const gpu_caps *caps, int M, int D);
gpu_scratch *gru_scratch(const ladder_ctx *cx, gpu_gru_path path, int B, int T, int D);

#define FREE_ALL(...)                                            \
    do {                                                         \
        void *ptrs_[] = { __VA_ARGS__ };                         \
        for (size_t i_ = 0; i_ < sizeof(ptrs_) / sizeof(void *); i_++) free(ptrs_[i_]); \
    } while (0)
#define DFREE_ALL(...)                                           \
    do {                                                         \
        void *ptrs_[] = { __VA_ARGS__ };                         \
        for (size_t i_ = 0; i_ < sizeof(ptrs_) / sizeof(void *); i_++) cudaFree(ptrs_[i_]); \
    } while (0)

/* ---- the executor stages: model, grad_reduce, adamw (common.c) ---- */
/* The tiny config with loss_scale 128 and grad_h_clamp 1000, run as the
 * ladder's GPU profile. */
void small_config(const ladder_ctx *cx, cc_config *c);
/* Random gradients in each executor's units; returns them unscaled. */
float *plant_grads(cc_rng *r, cc_executor *a, cc_executor *b, double unit_a, double unit_b);

/* ---- single cases, shared by the stages and the preflight (preflight.c) ---- */
/* A layer's forward over T steps on `path` (stage_gru_forward.c), its BPTT
 * with the clamp binding at S = 128 (stage_gru_backward.c), the context
 * attention's forward and backward (stage_attention.c) and a full step of
 * config c at its batch_size and seq_len (stage_model.c; lanes > 0: the step
 * must run that many; guard_binds: a ctx_grad_clamp must change the context
 * gradients). Each compares with the CPU twin at the stage's tolerances. */
/* The recurrence checks with chunk > 0 also run the layer in windows of
 * chunk steps (the wavefront's launches) and require the whole launch's
 * results bit for bit (the cluster BPTT's bias sums: within tolerance). */
void gru_forward_check(const ladder_ctx *cx, stage *st, gpu_gru_path path, int B, int T, int D, int wide, int chunk,
                       const char *name);
void gru_backward_check(const ladder_ctx *cx, stage *st, gpu_gru_path path, int B, int T, int D, int chunk,
                        const char *name);
void attention_check(const ladder_ctx *cx, stage *st, int B, int D, int H, int T, int W, int kernel);
void full_step_check(const ladder_ctx *cx, stage *st, const cc_config *c, const char *tag, int lanes, int guard_binds);
/* Three optimizer steps of one batch sequence under every schedule of the
 * GPU step, eager and replayed from a CUDA graph (model_steps.c). */
void model_steps_cases(const ladder_ctx *cx, stage *st);
extern const ladder_stage ladder_stage_matmul, ladder_stage_embedding, ladder_stage_rmsnorm, ladder_stage_gru_cell,
    ladder_stage_gru_forward, ladder_stage_gru_backward, ladder_stage_attention, ladder_stage_crossentropy,
    ladder_stage_model, ladder_stage_grad_reduce, ladder_stage_adamw;

/* ---- the recurrence stages: gru_forward, gru_backward (gru_cases.c) ---- */
/* A layer's CPU forward from random inputs. */
typedef struct {
    int B, T, D;
    float *whh, *bhh, *gx, *h, *gates, *ghn, *scratch;
} gru_case;
void gru_case_init(gru_case *c, cc_rng *r, int B, int T, int D);
void gru_case_free(gru_case *c);

/* Each implementation on shapes it supports (the table is in gru_cases.c). */
typedef struct {
    gpu_gru_path path;
    gpu_gru_impl impl;
    int B, T, D, wide;
    int split; /* persistent: K split over this many CTAs (gpu_gru_state.forced_split), 0: as planned */
} gru_path_case;
#define N_GRU_PATHS 10
extern const gru_path_case k_gru_paths[N_GRU_PATHS];
/* Whether the case's path takes the implementation it means to test here:
 * writes its name with the shape into name[n], for the checks. Where this
 * GPU (or profile) takes another implementation for the shape, the case does
 * not apply: 0, and the row names it as not run here. */
int gru_path_begin(const ladder_ctx *cx, stage *st, const gru_path_case *pc, char *name, size_t n);
/* After a case that gru_path_begin let run: the persistent plans as usual again. */
void gru_path_end(const ladder_ctx *cx);
/* The window a case of k_gru_paths also runs in. */
int gru_case_chunk(const gru_path_case *pc);
/* The recurrence's stress cases, each through `one` (a stage's check of a
 * case): the cluster cases again with random per-CTA delays at the exchange
 * points (gpu_gru_state.cluster_jitter), and a persistent case whose launch
 * the runtime refuses (gpu_gru_state.plant_oversize, in a state of its own),
 * which must fall back to the per-step loop with the same results and say
 * so, while another state still plans the persistent kernels. */
typedef void (*gru_case_fn)(const ladder_ctx *cx, stage *st, const gru_path_case *pc, const char *name);
void gru_stress_cases(const ladder_ctx *cx, stage *st, gru_case_fn one);

#endif
