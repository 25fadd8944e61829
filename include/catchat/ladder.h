/* The GPU-vs-CPU parity ladder (docs/ladder.md): a table of stages, each one op
 * (matmul, embedding, rmsnorm, ...) on the GPU against its CPU twin. Lives in
 * src/ladder/ and links into the catchat program, not into catchat_core. */
#ifndef CATCHAT_LADDER_H
#define CATCHAT_LADDER_H

#include <stdint.h>
#include <stdio.h>
#include "catchat/device.h"

typedef struct cc_ladder_opts {
    uint64_t seed;
    int only_stage; /* 0 = all, else a stage's number (cc_ladder_find_stage) */
    int markdown;   /* print the table as Markdown */
    struct cc_dist *dist; /* with a communicator, grad_reduce also checks the NCCL all-reduce */
    const char *gpu_profile; /* NULL or "native", else run as that GPU family ([gpu] profile) */
} cc_ladder_opts;

/* Stages by verdict. A WARNed stage passed its hard gates with a diagnostic
 * over its bound; a SKIPped one could not take its path on this GPU. Only
 * `failed` makes the ladder fail. */
typedef struct cc_ladder_counts {
    int passed, warned, skipped, failed;
} cc_ladder_counts;

/* The ladder's exit status: 1 when a stage failed; CC_EXIT_SKIP (77, which
 * CTest shows as skipped) when no stage ran, every one skipped, so that a
 * ladder that checked nothing never reads as passed; else 0, the summary
 * line counting any skips beside the stages that ran. In the header so a
 * test without the ladder's GPU code can check it. */
static inline int cc_ladder_exit_status(cc_ladder_counts n)
{
    if (n.failed) return 1;
    if (n.passed + n.warned == 0) return CC_EXIT_SKIP;
    return 0;
}

/* The table, in the order the training step runs: stages 1..cc_ladder_stages(). */
int cc_ladder_stages(void);
const char *cc_ladder_stage_name(int k);  /* op name, e.g. "gru_cell" */
const char *cc_ladder_stage_title(int k); /* docs/ladder.md's name, e.g. "GRU gates" */
/* The number of the stage `key` names: its op name, its title (either in any
 * case) or its number; 0 if none. Needs no GPU. */
int cc_ladder_find_stage(const char *key);

/* Runs the stages (or only o->only_stage) on the current CUDA device; prints
 * one row per stage, then the summary line ("ladder: 10 passed, 1 skipped
 * (gru_forward: ...), 0 failed"). */
cc_ladder_counts cc_ladder_run(const cc_ladder_opts *o, FILE *out);

#endif
