/* A small, seedable, serialisable RNG (splitmix64 seeding + xoshiro256**).
 * All randomness of a run flows from cc_config.seed through it, so runs and
 * resumes are reproducible. */
#ifndef CATCHAT_RNG_H
#define CATCHAT_RNG_H
#include <stdint.h>

typedef struct cc_rng { uint64_t s[4]; } cc_rng;

void cc_rng_seed(cc_rng *r, uint64_t seed);
uint64_t cc_rng_next(cc_rng *r);
double cc_rng_uniform(cc_rng *r);            /* [0, 1) */
double cc_rng_normal(cc_rng *r);             /* N(0, 1) */
uint64_t cc_rng_below(cc_rng *r, uint64_t n); /* [0, n), unbiased */
#endif
