/* ilp.c: placeholder until the solver lands. */
#include "solver/solver.h"

int solver_ilp(const gen_params *p, sched_t **out, zb_err *err)
{
    (void)p;
    (void)out;
    return zb_fail(err, "solver_ilp is not written yet");
}
