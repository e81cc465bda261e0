/*
 * rng.h: the runtime's own small, seeded pseudo-random generator.
 *
 * xoshiro256** (Blackman and Vigna) seeded through splitmix64, so that any
 * 64-bit seed, including 0, gives a well-mixed state.  The state is four
 * words that a checkpoint saves and restores verbatim, which is what makes a
 * resumed run draw the same data windows as an uninterrupted one.  rand()
 * is never used: its sequence differs between C libraries and it shares
 * hidden global state with everything else in the process.
 *
 * Expected workload: a few draws per training window and one per parameter
 * at initialisation (millions), so every call is a handful of instructions.
 */
#ifndef ZB_RUNTIME_RNG_H
#define ZB_RUNTIME_RNG_H

#include <stdint.h>

typedef struct zb_rng {
    uint64_t s[4]; /* xoshiro256** state; never all zero */
} zb_rng;

/* Seeds r from seed and a stream number (two generators with the same seed
 * and different streams give unrelated sequences). */
void rng_seed(zb_rng *r, uint64_t seed, uint64_t stream);

/* The next 64 random bits. */
uint64_t rng_next(zb_rng *r);

/* A uniform integer in [0, n); n must be positive.  Unbiased (rejection). */
uint64_t rng_below(zb_rng *r, uint64_t n);

/* A uniform double in [0, 1) with 53 random bits. */
double rng_uniform(zb_rng *r);

/* A standard normal draw (Box-Muller; one of the pair is discarded so that
 * the state stays four words). */
double rng_normal(zb_rng *r);

#endif
