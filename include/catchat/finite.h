/* NaN provenance: with checking on, every stage's output is scanned as the
 * step runs and the first non-finite value is recorded with its stage, layer,
 * timestep and tensor. NaN and Inf propagate, so the first stage recorded in
 * execution order is where the bad value was born. */
#ifndef CATCHAT_FINITE_H
#define CATCHAT_FINITE_H

#include <stddef.h>

typedef struct cc_finite_report {
    int found;
    char stage[40];  /* e.g. "gru_forward", "attention_backward" */
    char tensor[56]; /* e.g. "h", "dqkv", "grad.gru.1.weight_hh" */
    int layer;       /* -1 when the stage is not per layer */
    long index;      /* first non-finite element */
    int b, t;        /* sequence and timestep of that element (-1 if not a [B,T,·] tensor) */
    float value;
} cc_finite_report;

/* A testing aid (train --plant-nan-grad-h): a NaN in the hidden-state
 * gradient that enters layer `layer`'s BPTT at (sequence b, timestep t,
 * unit), as an overflow inside W_hhᵀ·dgh would put it there. Only the
 * recurrence reads it: the residual path keeps the value it had, so the
 * NaN reaches the gradient norm only if the recurrence passes it on (the
 * grad_h clamp must not turn it into a finite value). Off unless `on`. */
typedef struct cc_plant_grad_h {
    int on, layer, b, t, unit;
} cc_plant_grad_h;

/* Record the first non-finite of host[n] (FP32) if nothing is recorded yet.
 * width: elements per position for a [B,T,width] tensor (0: not one); T: positions. */
void cc_finite_scan(cc_finite_report *r, const char *stage, const char *tensor, int layer, const float *host,
                    size_t n, int width, int T);
/* Fill the report from a known first index (the GPU's scan). */
void cc_finite_set(cc_finite_report *r, const char *stage, const char *tensor, int layer, long index, float value,
                   int width, int T);
/* One line: "gru_forward (layer 1, timestep 17, sequence 0): h[...] = nan" */
void cc_finite_describe(const cc_finite_report *r, char *buf, size_t cap);

#endif
