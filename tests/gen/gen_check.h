/*
 * gen_check.h: helpers shared by the generator tests (header-only, static
 * functions; each test executable includes it once).
 *
 * Every schedule a test looks at goes through the same three steps: build
 * it with a generator, prove it complete and deadlock-free with
 * sched_validate, and simulate it with sim_run.  gen_check_build does all
 * three and fails the current Check test with the generator's, validator's
 * or simulator's own message, so that a failure names what broke.
 */
#ifndef ZB_TEST_GEN_CHECK_H
#define ZB_TEST_GEN_CHECK_H

#include <check.h>
#include <stdio.h>
#include <string.h>

#include "schedules/gen.h"
#include "src/sim.h"
#include "src/validate.h"

/* Builds, validates and simulates; returns the schedule (caller frees with
 * sched_free) and fills *r (caller frees with sim_result_free). */
static inline sched_t *gen_check_build(gen_fn fn, const gen_params *g, sim_result *r)
{
    sched_t *s = NULL;
    zb_err err = { { 0 } };
    ck_assert_msg(fn(g, &s, &err) == 0, "generator failed (p=%d m=%d v=%d): %s", g->stages,
                  g->microbatches, g->chunks, err.msg);
    ck_assert_ptr_nonnull(s);
    ck_assert_msg(sched_validate(s, &err) == 0, "%s p=%d m=%d v=%d invalid: %s", s->name,
                  g->stages, g->microbatches, g->chunks, err.msg);
    memset(r, 0, sizeof *r);
    ck_assert_msg(sim_run(s, r, &err) == 0, "%s p=%d m=%d: simulation failed: %s", s->name,
                  g->stages, g->microbatches, err.msg);
    return s;
}

/* A gen_params with the given shape and costs and the default memory
 * deltas (dF=+2, dB=-1, dW=-1). */
static inline gen_params gen_check_params(int p, int m, int v, double t_f, double t_b, double t_w,
                                   double t_comm)
{
    gen_params g;
    gen_params_default(&g);
    g.stages = p;
    g.microbatches = m;
    g.chunks = v;
    g.t_f = t_f;
    g.t_b = t_b;
    g.t_w = t_w;
    g.t_comm = t_comm;
    return g;
}

/* Writes device dev's ops as "F0@1 B0@1 W0@1 ..." (kind, micro-batch,
 * '@', stage) into buf, truncating at cap. */
static inline void gen_check_lane_str(const sched_t *s, int dev, char *buf, size_t cap)
{
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < s->dev[dev].n_ops && used < cap; i++) {
        sched_op op = s->dev[dev].ops[i];
        int n = snprintf(buf + used, cap - used, "%s%s%d@%d", i ? " " : "",
                         op_kind_name((op_kind)op.kind), op.mb, op.stage);
        if (n < 0)
            break;
        used += (size_t)n;
    }
}

#endif
