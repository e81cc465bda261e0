/*
 * solver_check.h: helpers shared by the solver's Check tests
 * (test_zb_auto.c, test_vshape.c, test_ilp.c): run the real validator and
 * simulator on a solver's schedule and read its "solver" meta object.
 */
#ifndef ZB_SOLVER_CHECK_H
#define ZB_SOLVER_CHECK_H

#include <check.h>
#include <math.h>
#include <stdlib.h>

#include "solver/solver.h"
#include "src/sim.h"
#include "src/validate.h"

/* Validates s and simulates it into *r (caller frees with sim_result_free);
 * fails the test on any error. */
static inline void check_valid_sim(const sched_t *s, sim_result *r)
{
    zb_err err = { { 0 } };
    ck_assert_msg(sched_validate(s, &err) == 0, "invalid schedule: %s", err.msg);
    ck_assert_msg(sim_run(s, r, &err) == 0, "simulation failed: %s", err.msg);
}

/* Fails unless every device's simulated peak is within its limit. */
static inline void check_peaks(const sim_result *r, const double *limit, int p)
{
    for (int d = 0; d < p; d++)
        ck_assert_msg(r->dev[d].peak_mem <= limit[d] * (1 + 1e-12),
                      "device %d peak %g over limit %g", d, r->dev[d].peak_mem, limit[d]);
}

/* A number or bool from meta.solver; NAN (or -1 for bools) when missing. */
static inline double meta_num(const sched_t *s, const char *key)
{
    cJSON *o = s->meta ? cJSON_GetObjectItem(s->meta, "solver") : NULL;
    cJSON *v = o ? cJSON_GetObjectItem(o, key) : NULL;
    if (cJSON_IsBool(v))
        return cJSON_IsTrue(v) ? 1 : 0;
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

#endif
