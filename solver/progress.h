/*
 * progress.h: live progress of long solves (the ILP), for a caller's
 * status line.
 *
 * The ILP runs for seconds to minutes; a user watching a terminal wants to
 * see that it works and how close it is: the elapsed time against the
 * limit, the best schedule's cost so far (the incumbent), the proven lower
 * bound and the gap between them.  Nothing below the CLI prints, so the
 * solver only hands these figures to a callback the caller installs; the
 * CLI decides whether and how often to show them (src/cli/progress.h).
 *
 * The callback is process wide, like solver_set_log: set it before
 * solving, not while a solve runs in another thread.  It is called from
 * the solving thread, often (every branch-and-bound node, thousands of
 * times a second on small models), so it must be cheap; it must not call
 * back into the solver.
 */
#ifndef ZB_SOLVER_PROGRESS_H
#define ZB_SOLVER_PROGRESS_H

typedef struct solver_progress {
    double elapsed_s;    /* seconds since the solve started */
    double time_limit_s; /* the solve's time limit */
    double incumbent;    /* cost of the best schedule known (the warm start's at first) */
    double bound;        /* proven lower bound on the optimal cost */
    int done;            /* 1 in the last call of a solve, with its final figures */
} solver_progress;

typedef void (*solver_progress_fn)(void *ctx, const solver_progress *p);

/* Installs fn (NULL: none, the default) with ctx for the solves that
 * follow. */
void solver_set_progress(solver_progress_fn fn, void *ctx);

/* For the solvers: hands p to the installed callback, if any. */
void solver_progress_report(const solver_progress *p);

/* 1 when a callback is installed (lets a solver skip gathering figures). */
int solver_progress_wanted(void);

/* The relative gap (incumbent - bound) / incumbent, clamped to [0, 1];
 * 0 when the incumbent is not positive and finite. */
double solver_progress_gap(const solver_progress *p);

#endif
