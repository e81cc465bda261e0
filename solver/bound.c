/*
 * bound.c: a lower bound on any schedule's largest stage span, from the
 * stage's busy time, its round trip and its memory limit.  The ILP uses it
 * as R's lower bound (it often proves zb-auto optimal outright), zb-auto
 * to skip its extra candidates when the paper's heuristic already meets it.
 * O(m) per stage.
 */
#include "solver/solver.h"
#include "solver/solver_internal.h"

#include <math.h>

/* A lower bound on stage s's span from its memory limit.  The stage waits
 * L = (the round trip from the end of its F(s,j) to the start of its
 * B(s,j)) for every micro-batch:
 *   head: before B(s,0) only F's can run, at most n = limit/dF - 1 of
 *         them beyond F(s,0), so the stage idles L - n T_F or more;
 *   tail: after F(s,m-1) the stage can only finish the micro-batches in
 *         flight (at most X of work, the most that fits in memory beside
 *         F(s,m-1)) before B(s,m-1) may start L later.
 * When n < m-1 some B precedes F(s,m-1), so the two gaps are disjoint and
 *   span >= head idle + (busy - X - T_B - T_W) + max(L, X) + T_B + T_W. */
double solver_stage_lower_bound(const solver_problem *pr, int s)
{
    const stage_cost *c = &pr->cost[s];
    int m = pr->m;
    double L = 0;
    for (int k = s + 1; k < pr->p; k++)
        L += pr->cost[k].t_f + pr->cost[k].t_b + 2 * pr->t_comm;
    double busy = m * (c->t_f + c->t_b + c->t_w);
    double limit = pr->limit ? pr->limit[s] : INFINITY;
    double n_f = isinf(limit) ? m - 1 : floor(limit / c->d_f + 1e-9) - 1;
    if (n_f > m - 1)
        n_f = m - 1;
    if (n_f < 0)
        n_f = 0;
    double head = fmax(0, L - n_f * c->t_f);
    double bound = busy + head;
    if (n_f < m - 1 && !isinf(limit)) {
        /* a in-flight micro-batches before their B (dF each), b after it
         * (dF + dB each), beside F(s,m-1)'s own dF */
        double room = limit - c->d_f + 1e-9 * fmax(1, fabs(limit)), x_max = 0;
        for (int a = 0; a <= m - 1 && a * c->d_f <= room; a++) {
            double left = room - a * c->d_f, per_b = c->d_f + c->d_b;
            int b = per_b > 0 ? (int)floor(left / per_b) : m - 1 - a;
            if (b > m - 1 - a)
                b = m - 1 - a;
            x_max = fmax(x_max, a * (c->t_b + c->t_w) + b * c->t_w);
        }
        double tail = (busy - x_max - c->t_b - c->t_w) + head + fmax(L, x_max) + c->t_b + c->t_w;
        bound = fmax(bound, tail);
    }
    return bound;
}
