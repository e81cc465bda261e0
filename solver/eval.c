/*
 * eval.c: ASAP timing of a schedule, the solvers' yardstick.
 *
 * The solvers compare candidate schedules (eight knob settings of zb-auto,
 * the V variants' priority rules, the ILP's answer against its warm start)
 * by the same figures the simulator reports: the largest per-device span
 * and the peak activation memory.  This file computes just those, without
 * the simulator's per-op arrays, so that the solver layer does not depend
 * on how src/sim.c stores its results.
 *
 * Algorithm: every device keeps a cursor into its op list; sweeps over the
 * devices advance each cursor while the op under it has its inputs done
 * (F(s,j) needs F(s-1,j); B/BW(s,j) needs B/BW(s+1,j) and F(s,j); W(s,j)
 * needs B(s,j)).  An input from another device arrives T_comm after its
 * producer ends.  A sweep that advances nothing is a deadlock.  Each sweep
 * costs O(p) plus the ops it advances, and pipelines advance many ops per
 * sweep, so a p=32, m=256 schedule (24,576 ops) takes well under a
 * millisecond.
 */
#include "solver/solver.h"
#include "solver/solver_internal.h"

#include <math.h>
#include <stdlib.h>

/* Index of (stage, mb) in the per-kind end-time tables. */
static long slot(const sched_t *s, int stage, int mb)
{
    return (long)stage * s->n_micro + mb;
}

int solver_eval(const sched_t *s, solver_eval_result *r, double *dev_peak, zb_err *err)
{
    if (sched_has_vocab(s)) /* barriers: only the simulator times them */
        return zb_fail(err, "solver_eval: vocabulary-parallel schedules are timed by sim_run");
    long n = (long)s->n_stages * s->n_micro;
    /* end_f / end_b: end of F and of B-or-BW per (stage, mb); NAN while not run */
    double *end_f = malloc(sizeof(double) * (size_t)n);
    double *end_b = malloc(sizeof(double) * (size_t)n);
    int *pos = calloc((size_t)s->n_devices, sizeof(int));        /* cursor per device */
    double *free_at = calloc((size_t)s->n_devices, sizeof(double)); /* device free time */
    double *first = malloc(sizeof(double) * (size_t)s->n_devices);  /* first op start */
    double *mem = calloc((size_t)s->n_devices, sizeof(double));     /* running memory */
    double *peak = calloc((size_t)s->n_devices, sizeof(double));    /* peak memory */
    double *busy = calloc((size_t)s->n_devices, sizeof(double));    /* compute time */
    int rc = -1;
    if (!end_f || !end_b || !pos || !free_at || !first || !mem || !peak || !busy) {
        zb_fail(err, "out of memory evaluating a schedule");
        goto out;
    }
    for (long i = 0; i < n; i++)
        end_f[i] = end_b[i] = NAN;
    for (int d = 0; d < s->n_devices; d++)
        first[d] = NAN;

    long total = sched_op_count(s), done = 0;
    while (done < total) {
        long advanced = 0;
        for (int d = 0; d < s->n_devices; d++) {
            const sched_lane *l = &s->dev[d];
            while (pos[d] < l->n_ops) {
                sched_op op = l->ops[pos[d]];
                double ready = solver_asap_start(s, op, d, free_at[d], end_f, end_b);
                if (isnan(ready))
                    break; /* an input has not run yet */
                double t = sched_op_time(s, op);
                double end = ready + t;
                if (isnan(first[d]))
                    first[d] = ready;
                free_at[d] = end;
                busy[d] += t;
                mem[d] += sched_op_mem(s, op);
                if (mem[d] > peak[d])
                    peak[d] = mem[d];
                if (op.kind == OP_F)
                    end_f[slot(s, op.stage, op.mb)] = end;
                else if (op.kind == OP_B || op.kind == OP_BW)
                    end_b[slot(s, op.stage, op.mb)] = end;
                pos[d]++;
                advanced++;
            }
        }
        if (advanced == 0) {
            for (int d = 0; d < s->n_devices; d++) {
                if (pos[d] < s->dev[d].n_ops) {
                    sched_op op = s->dev[d].ops[pos[d]];
                    zb_fail(err, "schedule deadlocks: device %d waits at op %d (%s%d@%d)", d, pos[d],
                            op_kind_name((op_kind)op.kind), op.mb, op.stage);
                    break;
                }
            }
            goto out;
        }
        done += advanced;
    }

    *r = (solver_eval_result){ .peak_device = 0 };
    for (int d = 0; d < s->n_devices; d++) {
        double span = isnan(first[d]) ? 0 : free_at[d] - first[d];
        if (span > r->cost) {
            r->cost = span;
            r->busy = busy[d];
        }
        if (peak[d] > r->peak_mem) {
            r->peak_mem = peak[d];
            r->peak_device = d;
        }
        if (dev_peak)
            dev_peak[d] = peak[d];
    }
    r->bubble_rate = r->cost > 0 ? (r->cost - r->busy) / r->cost : 0;
    rc = 0;
out:
    free(end_f);
    free(end_b);
    free(pos);
    free(free_at);
    free(first);
    free(mem);
    free(peak);
    free(busy);
    return rc;
}
