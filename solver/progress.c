/*
 * progress.c: the process-wide progress callback of the solvers
 * (progress.h).
 */
#include "solver/progress.h"

#include <math.h>
#include <stddef.h>

static solver_progress_fn progress_fn; /* the caller's callback, or NULL */
static void *progress_ctx;             /* passed back to it */

void solver_set_progress(solver_progress_fn fn, void *ctx)
{
    progress_fn = fn;
    progress_ctx = ctx;
}

void solver_progress_report(const solver_progress *p)
{
    if (progress_fn)
        progress_fn(progress_ctx, p);
}

int solver_progress_wanted(void)
{
    return progress_fn != NULL;
}

double solver_progress_gap(const solver_progress *p)
{
    if (!(p->incumbent > 0) || !isfinite(p->incumbent))
        return 0;
    double g = (p->incumbent - p->bound) / p->incumbent;
    return g < 0 ? 0 : g > 1 ? 1 : g;
}
