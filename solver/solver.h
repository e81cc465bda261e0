/*
 * solver.h: schedules found under a memory limit rather than handcrafted.
 *
 *   zb-auto   the zero-bubble paper's automatic heuristic (its section 3.1)
 *   v-min, v-half, v-zb
 *             V-shape schedules under a limit (Controllable Memory paper)
 *   ilp       the paper's ILP (Appendix G) in GLPK, warm-started with zb-auto
 *
 * All take gen_params (schedules/gen.h) with mem_limit set per device.
 */
#ifndef ZB_SOLVER_H
#define ZB_SOLVER_H

#include "schedules/gen.h"

/* Each stores a new schedule in *out (caller frees) and returns 0, or
 * returns -1 with err set (e.g. no schedule fits the memory limit). */
int solver_zb_auto(const gen_params *p, sched_t **out, zb_err *err);
int solver_v_min(const gen_params *p, sched_t **out, zb_err *err);
int solver_v_half(const gen_params *p, sched_t **out, zb_err *err);
int solver_v_zb(const gen_params *p, sched_t **out, zb_err *err);
int solver_ilp(const gen_params *p, sched_t **out, zb_err *err);

#endif
