/*
 * runs_on.h: which of zbsched's own execution paths can train a plan.
 *
 * `zbsched run` trains a plan on one of three paths: the CPU backend in
 * one process (cpu), the CUDA backend (cuda), or pipeline ranks over MPI
 * (mpi).  They do not all run everything a search can pick: a path may
 * lack the vocabulary passes, a recompute level or the memory layers.  A
 * plan that wins the search but cannot run where the user means to run
 * it is a surprise at `run` time, after the search promised a speed-up;
 * so the plan file says which paths can run it ("runs_on" in meta.plan),
 * and `search` names the best plan that can when the winner cannot.
 *
 * The rule is one table (runs_on.c): a row per path, a column per
 * feature a plan can use, 1 where the path runs it.  Everything else
 * (the plan file's list, the search's note, the reason a refusal gives)
 * is computed from that table, so teaching a path a feature is a one-cell
 * change.  Features are bits of a "uses" mask, computed from what the
 * plan uses: its vocabulary variant, its per-stage recompute levels and
 * the model's memory layers.
 *
 * Workload: a few calls per command; nothing here allocates.
 */
#ifndef ZB_RUNS_ON_H
#define ZB_RUNS_ON_H

#include <stddef.h>

#include "src/model.h"
#include "src/plan.h"
#include "src/sched.h"

/* zbsched's execution paths, in the order the plan file lists them. */
typedef enum zb_path {
    ZB_PATH_CPU = 0,  /* the CPU backend, one process */
    ZB_PATH_CUDA = 1, /* the CUDA backend (run --cuda) */
    ZB_PATH_MPI = 2,  /* pipeline ranks under mpirun, CPU backend per rank */
    ZB_PATH_COUNT
} zb_path;

/* The features a plan can use, as bit numbers of a "uses" mask. */
typedef enum zb_feature {
    ZB_FEAT_VOCAB_1 = 0,   /* Vocab-1 vocabulary passes (S, T) */
    ZB_FEAT_VOCAB_2 = 1,   /* Vocab-2 vocabulary passes */
    ZB_FEAT_RC_FULL = 2,   /* a stage recomputes its whole forward */
    ZB_FEAT_RC_MLP = 3,    /* a stage recomputes its MLP blocks */
    ZB_FEAT_MEMORY = 4,    /* the model has memory layers */
    ZB_FEAT_COUNT
} zb_feature;

/* The path's name as the plan file and the CLI spell it ("cpu", "cuda",
 * "mpi"), or "?" out of range. */
const char *runs_on_path_name(zb_path p);

/* The feature's name in a sentence ("Vocab-1 vocabulary passes"), or "?". */
const char *runs_on_feature_name(zb_feature f);

/* The uses mask of a plan with vocabulary variant `vocab` (0 plain,
 * SCHED_VOCAB_1 or SCHED_VOCAB_2), per-stage recompute levels rc[S]
 * (COST_RC_*; NULL: none), and model m (NULL: no memory layers). */
unsigned runs_on_uses(int vocab, const int *rc, int S, const zb_model *m);

/* The uses mask of a schedule file: its vocabulary variant, and, when it
 * carries a plan (p, from plan_read; NULL when it has none), the plan's
 * recompute levels and model. */
unsigned runs_on_uses_of_file(const sched_t *s, const zb_plan *p);

/* Bit p set for every path that runs everything in `uses`. */
unsigned runs_on_mask(unsigned uses);

/* 1 when path p runs everything in `uses`; otherwise 0, and buf[len]
 * (when buf is not NULL) says what it lacks: "cuda does not run Vocab-1
 * vocabulary passes, memory layers". */
int runs_on_can(unsigned uses, zb_path p, char *buf, size_t len);

#endif
