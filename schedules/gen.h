/*
 * gen.h: schedule generators for the classic and zero-bubble families.
 *
 * Each generator builds a complete schedule (sched.h) from gen_params: the
 * pipeline shape (p devices, m micro-batches, v chunks per device), uniform
 * per-op costs and memory deltas.  They follow the published orders exactly
 * (docs/generators.md cites each source) so that their bubble and peak
 * memory match the zero-bubble paper's formulas and tables.
 *
 * Generators return -1 with err set for shapes they cannot build (e.g.
 * interleaved with m not a multiple of p); they never exit.
 */
#ifndef ZB_GEN_H
#define ZB_GEN_H

#include "src/sched.h"

typedef struct gen_params {
    int stages;        /* p: pipeline devices */
    int microbatches;  /* m */
    int chunks;        /* v: virtual stages per device (interleaved >= 2, zb-v = 2); 1 otherwise */
    double t_f, t_b, t_w, t_comm; /* per-op costs, same on every virtual stage */
    double m_f, m_b, m_w;         /* memory deltas of F, B, W */
    double *mem_limit;            /* [stages] activation limit per device (zb-auto, ilp, V family), or NULL */
    double time_limit;            /* seconds for the ILP; <= 0 means its default */
} gen_params;

/* Fills p with the CLI defaults: p=4, m=8, v=1, unit costs, T_comm 0,
 * dF=+2, dB=-1, dW=-1, no memory limit. */
void gen_params_default(gen_params *p);

typedef int (*gen_fn)(const gen_params *p, sched_t **out, zb_err *err);

/* The handcrafted generators.  Each stores a new schedule in *out (caller
 * frees) and returns 0, or returns -1 with err set (err may be NULL) and
 * *out untouched.  They refuse p < 1, m < 1, negative or non-finite costs,
 * non-finite memory deltas and more than 10 million ops.  Chunks: v = 1 for
 * gpipe, 1f1b, zb-h1, zb-h2; v >= 2 and m a multiple of p for interleaved;
 * v = 2 for zb-v (the default 1 is read as 2).  mem_limit and time_limit
 * are ignored: the orders are fixed.  docs/generators.md gives each order,
 * its source and its bubble and memory formulas. */
int gen_gpipe(const gen_params *p, sched_t **out, zb_err *err);
int gen_1f1b(const gen_params *p, sched_t **out, zb_err *err);
int gen_interleaved(const gen_params *p, sched_t **out, zb_err *err);
int gen_zb_h1(const gen_params *p, sched_t **out, zb_err *err);
int gen_zb_h2(const gen_params *p, sched_t **out, zb_err *err);
int gen_zb_v(const gen_params *p, sched_t **out, zb_err *err);

/* Interleaved zero bubble (PyTorch's ScheduleInterleavedZeroBubble, ZB-1p
 * over v >= 2 chunks; m a multiple of max(1, m/p)).  Unlike the others it
 * reads mem_limit: when set, it returns the fastest order of its family
 * (smaller warm-ups, shorter W hold-backs) whose simulated peak fits every
 * device's limit, or -1 when none does. */
int gen_interleaved_zb(const gen_params *p, sched_t **out, zb_err *err);

/* Vocabulary parallelism (docs/vocab-parallel.md).  gen_vocab_check
 * checks v: variant 1 or 2, finite non-negative times, finite memory
 * deltas.  gen_vocab_insert returns in *out (caller frees) a copy of base
 * (any valid schedule without vocabulary passes: every handcrafted kind,
 * zb-auto, the V family, the ILP's answer) with v set and one S and one T
 * pass per device and micro-batch inserted between its ops.  Passes go where the schedule's own
 * costs say they start first (list scheduling; see gen_vocab.c); a
 * device may run up to GEN_VOCAB_MAX_LOOKAHEAD forwards ahead of a waiting
 * backward, so base ops need not keep their order exactly.  The
 * name gets "+vocab-N".  Returns 0, or -1 with err set (base invalid or
 * already vocabulary-parallel, v out of range, out of memory). */
int gen_vocab_check(const sched_vocab *v, zb_err *err);
int gen_vocab_insert(const sched_t *base, const sched_vocab *v, sched_t **out, zb_err *err);

/* Largest lookahead gen_vocab_insert tries. */
#define GEN_VOCAB_MAX_LOOKAHEAD 2

/* gen_vocab_insert with a fixed lookahead k (0..GEN_VOCAB_MAX_LOOKAHEAD):
 * while a device's next backward waits, up to k of its later forwards may
 * run ahead of their turn (the paper's extra warm-up micro-batches; k
 * more activations in flight).  gen_vocab_insert tries every k and keeps
 * the one the simulator finds fastest (the smaller k on ties). */
int gen_vocab_insert_ahead(const sched_t *base, const sched_vocab *v, int lookahead, sched_t **out,
                           zb_err *err);

/* gen_vocab_insert_ahead with the hold rule on (hold = 1) or off: with it,
 * a device whose S becomes ready before its next base op would end waits
 * for that S instead (its barrier gates the last stage).  gen_vocab_insert
 * tries both for every lookahead. */
int gen_vocab_insert_with(const sched_t *base, const sched_vocab *v, int lookahead, int hold,
                          sched_t **out, zb_err *err);

/* When to give a placement up (gen_vocab_insert_trusted): a caller that
 * keeps a placement only when it beats one it already has need not see
 * the rest of one that provably cannot.  The walk commits every device's
 * ops in lane order, so each lane's memory peak so far is final, and a
 * device's span is at least what it has spanned so far plus the work it
 * has left; the walk stops as soon as either says so. */
typedef struct gen_vocab_stop {
    double peak_over;  /* stop once some device's static memory (mem_static, 0 when
                        * none) plus its lane's peak so far exceeds this (INFINITY: never) */
    double span_scale; /* stop once a lower bound of some device's span, plus its */
    double span_reach; /* span_add, times span_scale reaches span_reach (INFINITY: never) */
    const double *span_add; /* [p] added to each device's span before that test (what the
                             * caller's time adds per device, such as the data-parallel
                             * all-reduce the search prices); NULL: nothing */
} gen_vocab_stop;

/* gen_vocab_insert_with's checks of base and v alone (v in range, base
 * valid and without passes): 0, or -1 with err.  A caller that passes
 * them may place with gen_vocab_insert_trusted. */
int gen_vocab_insert_check(const sched_t *base, const sched_vocab *v, zb_err *err);

/* gen_vocab_insert_with without its checks, for a caller that places
 * several variants of one base (the search tries every lookahead and
 * hold): base and v must have passed gen_vocab_insert_check (or one
 * gen_vocab_insert_with call on them succeeded).  The result is valid
 * by construction (the walk commits each op once, after what it waits
 * for) and is not validated again: that validation was a sixth of the
 * default search's time.  When cost is not NULL it gets the placement's
 * largest per-device span, what sim_run would report as its cost (the
 * walk times every op as the simulator does), so that a caller can tell
 * a placement that cannot win without simulating it.  With stop (NULL:
 * none) it returns, with *out NULL, as soon as the placement meets stop's
 * rule: 1 for the peak, 2 for the span; else 0, or -1 with err. */
int gen_vocab_insert_trusted(const sched_t *base, const sched_vocab *v, int lookahead, int hold,
                             const gen_vocab_stop *stop, sched_t **out, double *cost, zb_err *err);

/* gen_vocab_insert_with, but every device's next candidate is chosen
 * afresh at every step and compared with the one the walk kept; fails
 * (-1, err) if one differs.  O(p) times slower: for the tests of the
 * walk's candidate cache. */
int gen_vocab_insert_checked(const sched_t *base, const sched_vocab *v, int lookahead, int hold,
                             sched_t **out, zb_err *err);

/* Looks a handcrafted kind up by name ("gpipe", "1f1b", "interleaved",
 * "zb-h1", "zb-h2", "zb-v", "interleaved-zb"); NULL when unknown. */
gen_fn gen_lookup(const char *kind);

#endif
