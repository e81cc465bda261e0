/*
 * mem_figures.h: the one peak-memory figure per device, as every command
 * prints it.
 *
 * A schedule's memory deltas are activations; a plan made by `search` also
 * carries each device's static memory (parameters, gradients, optimizer
 * state and the runtime reserve, `memory.static`) and the limit it was
 * planned under (`plan.mem_limit_bytes`, per device, static included).
 * Static memory does not change during an iteration, so a device's peak is
 * static + its activation peak, and that total is the figure `search`
 * ranks plans by.  `simulate` and `render` print the same total, labelled,
 * with its two parts beside it; a schedule without static memory (a
 * generator's, in abstract units) has only activations, and says so.
 * Workload: one pass over the devices.
 */
#ifndef ZB_MEM_FIGURES_H
#define ZB_MEM_FIGURES_H

#include "src/sched.h"
#include "src/sim.h"

typedef struct mem_figures {
    int n_devices;       /* p */
    int bytes;           /* 1 when the file's memory unit is "bytes" (GB may be printed) */
    int has_static;      /* 1 when the file gives static memory (memory.static) */
    int has_limit;       /* 1 when a limit is known (see limit) */
    int limit_is_total;  /* 1: limit[] includes static memory (the plan's --mem or
                          * static + the activation limit); 0: activations only */
    int peak_device;     /* device with the largest total (activations alone without static) */
    double peak;         /* that device's total */
    double *static_mem;  /* [p] static memory, 0 without */
    double *activations; /* [p] activation peak (sim_result's peak_mem) */
    double *total;       /* [p] static + activation peak */
    double *limit;       /* [p] limit in the same sense as total when limit_is_total,
                          * else the activation limit; NULL when has_limit is 0 */
} mem_figures;

/* Fills *f for schedule s simulated (or measured) as r.  Returns 0, or -1
 * with err set when memory runs out; free with mem_figures_free. */
int mem_figures_compute(const sched_t *s, const sim_result *r, mem_figures *f, zb_err *err);

/* Frees the arrays of f and zeroes it; safe on a zeroed value. */
void mem_figures_free(mem_figures *f);

/* One memory amount in the file's unit for people: "39.86 GB" for bytes
 * (zb_size_format), else the number in fixed notation and the unit
 * ("12 units").  buf is NUL-terminated and truncated to len. */
void mem_figures_format(const sched_t *s, double v, char *buf, size_t len);

#endif
