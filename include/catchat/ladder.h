/* The 11-stage GPU-vs-CPU parity ladder (ladder.md). */
#ifndef CATCHAT_LADDER_H
#define CATCHAT_LADDER_H

#include <stdint.h>
#include <stdio.h>

typedef struct cc_ladder_opts {
    uint64_t seed;
    int only_stage; /* 0 = all */
    int markdown;   /* print the table as Markdown */
    struct cc_dist *dist; /* with a communicator, stage 10 also checks the NCCL all-reduce */
} cc_ladder_opts;

/* Runs the stages on the current CUDA device; prints one row per stage.
 * Returns the number of FAILed stages. */
int cc_ladder_run(const cc_ladder_opts *o, FILE *out);

#endif
