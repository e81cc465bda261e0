/* v_shape.c: placeholder until the solver lands. */
#include "solver/solver.h"

int solver_v_min(const gen_params *p, sched_t **out, zb_err *err)
{
    (void)p;
    (void)out;
    return zb_fail(err, "solver_v_min is not written yet");
}

int solver_v_half(const gen_params *p, sched_t **out, zb_err *err)
{
    (void)p;
    (void)out;
    return zb_fail(err, "solver_v_half is not written yet");
}

int solver_v_zb(const gen_params *p, sched_t **out, zb_err *err)
{
    (void)p;
    (void)out;
    return zb_fail(err, "solver_v_zb is not written yet");
}
