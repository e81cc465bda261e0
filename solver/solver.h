/*
 * solver.h: schedules found under a memory limit rather than handcrafted.
 *
 *   zb-auto   the zero-bubble paper's automatic heuristic (its section 3.1)
 *   v-min, v-half, v-zb
 *             V-shape schedules under a limit (Controllable Memory paper)
 *   ilp       the paper's ILP (Appendix G) in GLPK, warm-started with zb-auto
 *
 * All take gen_params (schedules/gen.h) with mem_limit set per device, in
 * the same units as the memory deltas m_f, m_b, m_w.  The *_costs variants
 * take per-stage costs instead (the first and last stages of real models
 * differ), for callers such as the search that build them from a cost model.
 *
 * Docs: docs/solver.md (algorithms, knobs, ILP formulation, measurements).
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

/* The V family on per-stage costs: tmpl is a V placement (2p stages,
 * device d holds d and 2p-1-d) with every stage's times and memory
 * deltas and no ops; variant is "v-min", "v-half" or "v-zb".  Each
 * device's limit is the variant's micro-batch count times one micro-batch
 * of its own two stages, capped by mem_limit[d] (bytes, may be NULL).
 * Candidates: the greedy list scheduler on the real costs, and the
 * handcrafted, adaptive (v-zb) and pattern (v-min, v-half) orders built
 * on uniform costs and re-costed; the fastest that fits every device wins.
 * Returns 0 with *out (caller frees), or -1 with err set. */
int solver_v_costs(const char *variant, const sched_t *tmpl, const double *mem_limit, sched_t **out, zb_err *err);

/* A one-stage-per-device pipeline with per-stage costs: the input of the
 * zb-auto heuristic and of the ILP. */
typedef struct solver_problem {
    int p;                   /* devices = stages */
    int m;                   /* micro-batches */
    const stage_cost *cost;  /* [p] per-stage op times and memory deltas */
    double t_comm;           /* time to move an activation or gradient */
    const double *limit;     /* [p] activation limit per device, or NULL: no limit */
} solver_problem;

/* zb-auto on per-stage costs: runs the heuristic with all 8 knob settings
 * and keeps the one with the smallest largest stage span (plus two extra
 * candidates under tight limits, see docs/solver.md).  Stores the
 * schedule in *out (caller frees), its cost (largest span) in *cost when
 * cost is not NULL.  Returns 0, or -1 with err set when no setting fits the
 * limits or an argument is out of range. */
int solver_zb_auto_costs(const solver_problem *pr, sched_t **out, double *cost, zb_err *err);

/* The ILP on per-stage costs, with time_limit seconds (<= 0: 60). */
int solver_ilp_costs(const solver_problem *pr, double time_limit, sched_t **out, zb_err *err);

/* Where GLPK's terminal output goes: fn gets one chunk of text at a time
 * (often a whole line) with ctx.  NULL (the default) discards it.  Process
 * wide; set it before solving, not while a solve runs in another thread. */
typedef void (*solver_log_fn)(void *ctx, const char *text);
void solver_set_log(solver_log_fn fn, void *ctx);

/* The ASAP timing of a schedule as the runtime executes it (an op starts
 * when its device is free and its inputs have arrived; T_comm between
 * devices), used by the solvers to compare candidates.  Same figures as the
 * simulator (src/sim.h) without its per-op arrays. */
typedef struct solver_eval_result {
    double cost;        /* largest per-device span (last end - first start) */
    double busy;        /* compute time of the device that sets the cost */
    double bubble_rate; /* (cost - busy) / cost */
    double peak_mem;    /* largest per-device activation peak */
    int peak_device;    /* device with that peak */
} solver_eval_result;

/* Fills *r for a complete schedule; per-device peaks go to dev_peak[n_devices]
 * when not NULL.  Returns 0, or -1 with err set when the lists deadlock, an
 * op is missing or memory runs out. */
int solver_eval(const sched_t *s, solver_eval_result *r, double *dev_peak, zb_err *err);

#endif
