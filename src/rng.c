/* xoshiro256** seeded through splitmix64: fast, small state, serialisable. */
#include <math.h>
#include "catchat/rng.h"

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void cc_rng_seed(cc_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t cc_rng_next(cc_rng *r)
{
    uint64_t *s = r->s;
    const uint64_t out = rotl(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

double cc_rng_uniform(cc_rng *r) { return (cc_rng_next(r) >> 11) * 0x1.0p-53; }

double cc_rng_normal(cc_rng *r)
{
    double u1 = cc_rng_uniform(r), u2 = cc_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

uint64_t cc_rng_below(cc_rng *r, uint64_t n)
{
    /* rejection sampling keeps the draw unbiased */
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t v;
    do v = cc_rng_next(r); while (v >= limit);
    return v % n;
}
