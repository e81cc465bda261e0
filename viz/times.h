/*
 * times.h: where a picture's times come from.
 *
 * A schedule file either carries measured start/end times on every lane
 * (written by the runtime's --trace) or only the op order, in which case the
 * simulator (sim.h) predicts the times from the per-stage costs.  Every
 * renderer works from one viz_times, so measured and predicted timelines
 * look the same and can be compared on one time scale.  The figures in
 * titles (cost, bubble rate, peak memory) follow the zero-bubble paper's
 * definitions exactly as sim.h computes them; for measured times they are
 * computed the same way from the measured spans.
 *
 * Workload: linear in the number of ops; a p=64, m=1024 schedule (200k ops)
 * takes a few milliseconds.
 */
#ifndef ZB_VIZ_TIMES_H
#define ZB_VIZ_TIMES_H

#include "src/sched.h"
#include "src/sim.h"

typedef struct viz_times {
    sim_result r;      /* per-op start/end per device and the paper's figures */
    int measured;      /* 1: times read from the lanes; 0: simulated by sim_run */
    double t0;         /* earliest op start over all devices */
    double t1;         /* latest op end over all devices */
    int *stage_chunk;  /* [n_stages] rank of each stage among its device's stages (0 = first in model order) */
    int n_chunks;      /* most stages held by one device (1 plain, 2 for V, v interleaved) */
} viz_times;

/* Validates s (sched_validate) and fills *t with its times: the measured
 * ones when every lane that has ops carries start/end, otherwise simulated.
 * Measured times must be finite with end >= start.  Returns 0 (caller frees
 * with viz_times_free) or -1 with err set and *t zeroed. */
int viz_times_compute(const sched_t *s, viz_times *t, zb_err *err);

/* Frees what viz_times_compute allocated; safe on a zeroed viz_times. */
void viz_times_free(viz_times *t);

/* Returns 1 when every lane with ops carries measured start/end times. */
int viz_sched_is_measured(const sched_t *s);

/* Activation memory of device dev over time, as sim_mem_curve gives it
 * (caller frees *points).  Returns 0 or -1 with err set. */
int viz_mem_curve(const sched_t *s, const viz_times *t, int dev,
                  sim_mem_point **points, int *n_points, zb_err *err);

#endif
