/*
 * gen_common.c: what the handcrafted generators share (gen_common.h): the
 * checks of the user's parameters and the allocation of the schedule.
 *
 * Parameters come straight from the command line, so every check here is
 * a zb_err, never an assert.
 */
#include "schedules/gen_common.h"

#include <math.h>
#include <stdio.h>

/* A cost must be a finite, non-negative time: NaN would poison every
 * simulated start time after it, and a negative time has no meaning. */
static int check_cost(const char *kind, const char *what, double v, zb_err *err)
{
    if (!isfinite(v) || v < 0)
        return zb_fail(err, "%s: %s must be a finite time >= 0, got %g", kind, what, v);
    return 0;
}

static int check_mem(const char *kind, const char *what, double v, zb_err *err)
{
    if (!isfinite(v))
        return zb_fail(err, "%s: memory delta %s must be finite, got %g", kind, what, v);
    return 0;
}

int gen_begin(const gen_params *p, const char *kind, gen_layout layout, int chunks,
              int ops_per_mb, sched_t **out, zb_err *err)
{
    if (p->stages < 1)
        return zb_fail(err, "%s: the number of pipeline stages (devices) must be >= 1, got %d",
                       kind, p->stages);
    if (p->microbatches < 1)
        return zb_fail(err, "%s: the number of micro-batches must be >= 1, got %d",
                       kind, p->microbatches);
    if (check_cost(kind, "T_F", p->t_f, err) || check_cost(kind, "T_B", p->t_b, err) ||
        check_cost(kind, "T_W", p->t_w, err) || check_cost(kind, "T_comm", p->t_comm, err))
        return -1;
    if (check_mem(kind, "dF", p->m_f, err) || check_mem(kind, "dB", p->m_b, err) ||
        check_mem(kind, "dW", p->m_w, err))
        return -1;
    /* Computed in double: p * chunks * m overflows int long before it
     * reaches the limit. */
    double n_ops = (double)p->stages * chunks * p->microbatches * ops_per_mb;
    if (n_ops > (double)GEN_MAX_OPS)
        return zb_fail(err, "%s: p=%d, m=%d, %d chunk(s) gives %.0f ops, more than the %ld "
                       "this generator builds", kind, p->stages, p->microbatches, chunks,
                       n_ops, GEN_MAX_OPS);

    sched_t *s = sched_new(p->stages, p->microbatches, p->stages * chunks);
    if (!s)
        return zb_fail(err, "%s: out of memory allocating a schedule of %d stages", kind,
                       p->stages * chunks);
    snprintf(s->name, sizeof s->name, "%s", kind);
    if (layout == GEN_LAYOUT_V)
        sched_place_v(s);
    else
        sched_place_interleaved(s);
    sched_set_costs(s, p->t_f, p->t_b, p->t_w, p->t_comm);
    sched_set_mem(s, p->m_f, p->m_b, p->m_w);
    *out = s;
    return 0;
}

int gen_fail_oom(sched_t *s, const char *kind, zb_err *err)
{
    sched_free(s);
    return zb_fail(err, "%s: out of memory while building the schedule", kind);
}
