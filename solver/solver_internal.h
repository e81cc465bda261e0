/*
 * solver_internal.h: helpers shared by the files of solver/ and not part of
 * its public interface (solver.h).
 */
#ifndef ZB_SOLVER_INTERNAL_H
#define ZB_SOLVER_INTERNAL_H

#include "solver/solver.h"

/* Turns gen_params (uniform costs, one stage per device) into a
 * solver_problem.  Stores a malloc'd [p] cost array in *costs (caller frees;
 * pr->cost points into it).  Returns 0, or -1 with err set on bad shapes. */
int solver_problem_from_params(const gen_params *gp, solver_problem *pr, stage_cost **costs, zb_err *err);

#endif
