/*
 * rng.c: splitmix64 seeding and xoshiro256** generation (see rng.h).
 */
#include "runtime/rng.h"

#include <assert.h>
#include <math.h>

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

void rng_seed(zb_rng *r, uint64_t seed, uint64_t stream)
{
    /* Mix the stream in through one splitmix step of its own so that
     * (seed, stream) pairs that differ in either give unrelated states. */
    uint64_t x = seed;
    uint64_t y = stream ^ 0x6a09e667f3bcc909ULL;
    x ^= splitmix64(&y);
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
    if (!(r->s[0] | r->s[1] | r->s[2] | r->s[3]))
        r->s[0] = 1; /* the one forbidden state; splitmix64 makes it unreachable in practice */
}

uint64_t rng_next(zb_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

uint64_t rng_below(zb_rng *r, uint64_t n)
{
    assert(n > 0);
    /* Reject the top partial copy of [0, n) so every value is equally likely. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do
        x = rng_next(r);
    while (x >= limit);
    return x % n;
}

double rng_uniform(zb_rng *r)
{
    return (double)(rng_next(r) >> 11) * 0x1.0p-53;
}

double rng_normal(zb_rng *r)
{
    double u1 = rng_uniform(r);
    double u2 = rng_uniform(r);
    if (u1 < 1e-300)
        u1 = 1e-300; /* log(0) guard; probability 2^-53 */
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}
