/*
 * sim.h: the discrete-event simulator.
 *
 * An op starts when its device has finished the previous op in its list and
 * its inputs have arrived; an input produced on another device arrives
 * T_comm after the producer ends.  Memory per device is the running sum of
 * the op deltas in execution order (positive deltas count from an op's
 * start, negative ones from its end; the peak equals the largest prefix sum).
 *
 * Figures follow the zero-bubble paper: a device's span is its last op end
 * minus its first op start; cost is the largest span; the bubble rate is
 * (cost - busy)/cost with busy the compute time of the device whose span is
 * the cost.  The makespan (last end - first start over all devices) is
 * reported too.  Runs in time linear in the number of ops.
 */
#ifndef ZB_SIM_H
#define ZB_SIM_H

#include "src/sched.h"

typedef struct sim_device {
    double *start;      /* [n_ops] simulated start of each op in the lane */
    double *end;        /* [n_ops] simulated end of each op */
    double busy;        /* sum of op times */
    double first_start; /* start of the first op (0 for an empty lane) */
    double last_end;    /* end of the last op */
    double span;        /* last_end - first_start */
    double peak_mem;    /* largest running sum of memory deltas (>= 0) */
    double end_mem;     /* running sum after the last op (0 when complete) */
} sim_device;

typedef struct sim_result {
    int n_devices;       /* p */
    sim_device *dev;     /* [n_devices] */
    double cost;         /* largest per-device span (the paper's cost) */
    double makespan;     /* last end - first start over all devices */
    double busy;         /* busy time of the device that sets the cost */
    double bubble_rate;  /* (cost - busy) / cost */
    double peak_mem;     /* largest per-device peak */
    int peak_device;     /* device with the largest peak */
    int n_micro;         /* m when barrier is set, else 0 */
    double *barrier[2];  /* vocabulary parallelism: [m] end of barrier C0(j) and
                          * C1(j) (C1 all 0 for Vocab-1), or NULL when off
                          * and for measured runs */
} sim_result;

/* Simulates a schedule that passed sched_validate.  Fills *r (caller frees
 * with sim_result_free).  Returns 0, or -1 with err set on deadlock or when
 * memory runs out. */
int sim_run(const sched_t *s, sim_result *r, zb_err *err);

/* Fills *r from the measured start/end times in the lanes (a runtime trace)
 * instead of simulating: same figures (busy, span, cost, bubble, memory by
 * execution order).  Returns 0, or -1 with err set when a non-empty lane has
 * no times or memory runs out.  The caller frees r with sim_result_free. */
int sim_measured(const sched_t *s, sim_result *r, zb_err *err);

/* Frees what sim_run allocated inside r; safe on a zeroed result. */
void sim_result_free(sim_result *r);

/* One step of a device's activation memory curve: from time t on, memory
 * is `mem`.  sim_mem_curve fills a malloc'd array (caller frees) of
 * 2*n_ops+1 points at most, in time order, starting at (first_start, 0). */
typedef struct sim_mem_point {
    double t;   /* time of the change */
    double mem; /* memory from t on */
} sim_mem_point;

int sim_mem_curve(const sched_t *s, const sim_result *r, int dev,
                  sim_mem_point **points, int *n_points, zb_err *err);

#endif
