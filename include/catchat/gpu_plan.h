/* What the GPU executor will run for a config, decided before anything is
 * allocated: the kernels its step takes (recurrence implementation, lanes,
 * wide clusters, attention kernel) and the device memory it needs. The
 * executor is created from this plan, and the preflight (preflight.h)
 * checks exactly these kernels, so the two cannot disagree. Plain C. */
#ifndef CATCHAT_GPU_PLAN_H
#define CATCHAT_GPU_PLAN_H

#include <stddef.h>
#include "catchat/config.h"
#include "catchat/gpu_gru.h"

typedef struct gpu_step_plan {
    gpu_caps caps;     /* the device's, narrowed by [gpu] profile, smem_per_block, sm_count, clusters */
    gpu_caps rec_caps; /* the same with a lane's share of the SMs: what the recurrence kernels choose by */
    gpu_caps wave_caps; /* under the wavefront, a layer's share of rec_caps (the layers' grids run at once) */
    gpu_gru_path path; /* [gpu] recurrence */
    int lanes;         /* lanes of a training step */
    int lane_B;        /* sequences a lane's recurrence runs (batch_size / lanes) */
    gpu_gru_impl impl; /* the recurrence a training lane takes */
    gpu_gru_impl eval_impl; /* the recurrence of an evaluation's forward (the whole batch in one lane) */
    int wide;          /* the forward's cluster kernels 16 sequences a cluster */
    int wave_chunk;    /* timesteps a chunk of the layers' wavefront, 0: layer after layer ([gpu] wavefront) */
    char wave_why[128]; /* the chunk, or why there is no wavefront, in words */
    int attn_tc;       /* the context attention on tensor cores */
    size_t device_bytes;     /* estimate of the executor's device memory at this batch */
    size_t bytes_per_seq;    /* the part of it that grows with each sequence of the batch */
    size_t accum_bytes;      /* what [train] grad_accum > 1 adds (the step's gradient so far) */
} gpu_step_plan;

/* The plan for B sequences of T tokens under cfg on the current device.
 * -1 with a one-line error when the GPU or the config cannot run it (below
 * sm_80, d_model not a multiple of 8, [gpu] lanes not dividing B, an unknown
 * profile). */
int gpu_step_plan_for(gpu_step_plan *p, const cc_config *cfg, int B, int T);

/* The recurrence implementation and split a lane takes, in one line
 * ("persistent: forward 1 groups x 32 CTAs of 16 units ..."), for messages
 * and the preflight's cache key. */
void gpu_step_plan_describe(const gpu_step_plan *p, const cc_config *cfg, int T, char *buf, size_t len);

#endif
