/* The preflight (docs/gpus.md): before the first GPU step of train, eval,
 * bench and dump-state, every kernel path the run will take (the recurrence
 * implementation and split chosen for its config, the attention kernel, the
 * norms, the classifier, the gradient reduction and the optimizer) runs once
 * on small inputs of the run's shape class and is compared with its CPU twin
 * at the ladder's tolerances, by the ladder's own stage code. A failure
 * refuses the run. A pass is remembered per GPU, driver, build and path, so
 * the next run on the same machine starts at once. */
#ifndef CATCHAT_PREFLIGHT_H
#define CATCHAT_PREFLIGHT_H

#include <stddef.h>
#include "catchat/config.h"

/* What can change a kernel's answer: a pass holds only for the same values. */
typedef struct cc_preflight_id {
    const char *gpu;     /* name and compute capability, "NVIDIA H200 (sm_90)" */
    const char *driver;  /* cc_driver_version */
    const char *version; /* catchat's */
    const char *build;   /* cc_build_id, with the architectures compiled in */
    const char *path;    /* the kernels chosen for this config: recurrence and split, lanes, attention */
} cc_preflight_id;

/* ---- the memory of passes (src/preflight_cache.c; no GPU needed) ---- */
#define CC_PREFLIGHT_CACHE_FILE "preflight.txt"
#define CC_PREFLIGHT_CACHE_HEADER "# catchat preflight passes: <unix time> then the GPU, driver, build and kernel path\n"
/* The key of id: its fields, tab-separated, on one line. */
void cc_preflight_key(char *buf, size_t len, const cc_preflight_id *id);
/* 1 when <dir>/preflight.txt records a pass of `key` (0 also for a missing
 * or unreadable file, or dir NULL). */
int cc_preflight_cache_has(const char *dir, const char *key);
/* Records a pass of `key` (creating dir); 0, or -1 with a one-line error. */
int cc_preflight_cache_add(const char *dir, const char *key);

/* ---- the check itself (src/ladder/preflight.c, part of the catchat program) ---- */
struct gpu_step_plan;
typedef struct cc_preflight_opts {
    const char *mode;      /* "auto" (skip what passed before), "always", "never" (run unchecked, loudly) */
    const char *cache_dir; /* where passes are remembered (the CLI's XDG cache); NULL: nowhere */
    const char *command;   /* "train", "eval", ...: named in the messages */
    int quiet;             /* no line when it passes or is skipped */
    const char *plant;     /* testing aid: the check (by name, e.g. "recurrence") whose GPU results are taken
                            * as wrong, to see the refusal */
    const struct gpu_step_plan *plan; /* the plan the run's executor is made from (gpu_plan.h); NULL: the
                                       * preflight makes it, as the executor would */
} cc_preflight_opts;

/* The names of the checks, '|'-separated, for --plant-wrong-result. */
const char *cc_preflight_check_names(void);

struct cc_dist;
/* Before a run of cfg at B sequences of T tokens: nothing where it runs on
 * the CPU; else the device-memory and config checks, then (unless skipped)
 * the kernel checks. With a communicator every rank checks its own GPU and
 * the run starts only if all pass. 0: go on; -1: refused (one line said why
 * and what to do). */
int cc_preflight(const cc_config *cfg, int B, int T, struct cc_dist *dist, const cc_preflight_opts *o);

#endif
