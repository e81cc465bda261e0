/*
 * times.c: measured or simulated op times for the renderers (see times.h).
 *
 * Simulated times come from sim_run, measured ones from sim_measured, so
 * both land in one sim_result with the same figures and everything
 * downstream (sim_mem_curve included) reads one structure.  What is added
 * here is the choice between them and each stage's chunk index.
 */
#include "viz/times.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "src/validate.h"

int viz_sched_is_measured(const sched_t *s)
{
    int any = 0;
    for (int d = 0; d < s->n_devices; d++) {
        const sched_lane *l = &s->dev[d];
        if (l->n_ops == 0)
            continue;
        if (!l->start || !l->end)
            return 0;
        any = 1;
    }
    return any;
}

/* Rejects measured times that would break the drawing (sim_measured
 * copies them as they are; files cannot hold NaN, in-memory callers can). */
static int times_check_lanes(const sched_t *s, zb_err *err)
{
    for (int d = 0; d < s->n_devices; d++) {
        const sched_lane *l = &s->dev[d];
        for (int i = 0; i < l->n_ops; i++)
            if (!isfinite(l->start[i]) || !isfinite(l->end[i]) || l->end[i] < l->start[i])
                return zb_fail(err, "device %d, op %d: measured time [%g, %g] is not a finite interval",
                               d, i, l->start[i], l->end[i]);
    }
    return 0;
}

/* Chunk index of every stage: its rank among the stages of its device in
 * model order, so V's stage d is chunk 0 and stage 2p-1-d chunk 1. */
static int times_chunks(const sched_t *s, viz_times *t, zb_err *err)
{
    t->stage_chunk = calloc((size_t)s->n_stages, sizeof *t->stage_chunk);
    int *seen = calloc((size_t)s->n_devices, sizeof *seen);
    if (!t->stage_chunk || !seen) {
        free(seen);
        return zb_fail(err, "out of memory");
    }
    t->n_chunks = 1;
    for (int st = 0; st < s->n_stages; st++) {
        int d = s->stage_device[st];
        if (d < 0 || d >= s->n_devices)
            continue; /* the validator has rejected such schedules already */
        t->stage_chunk[st] = seen[d]++;
        if (seen[d] > t->n_chunks)
            t->n_chunks = seen[d];
    }
    free(seen);
    return 0;
}

int viz_times_compute(const sched_t *s, viz_times *t, zb_err *err)
{
    memset(t, 0, sizeof *t);
    if (sched_validate(s, err) != 0)
        return -1;
    t->measured = viz_sched_is_measured(s);
    int rc = t->measured ? times_check_lanes(s, err) : 0;
    if (rc == 0)
        rc = t->measured ? sim_measured(s, &t->r, err) : sim_run(s, &t->r, err);
    if (rc == 0)
        rc = times_chunks(s, t, err);
    if (rc != 0) {
        viz_times_free(t);
        return -1;
    }
    int first = 1;
    for (int d = 0; d < s->n_devices; d++) {
        const sched_lane *l = &s->dev[d];
        for (int i = 0; i < l->n_ops; i++) {
            double a = t->r.dev[d].start[i], b = t->r.dev[d].end[i];
            if (first || a < t->t0)
                t->t0 = a;
            if (first || b > t->t1)
                t->t1 = b;
            first = 0;
        }
    }
    return 0;
}

void viz_times_free(viz_times *t)
{
    sim_result_free(&t->r);
    free(t->stage_chunk);
    memset(t, 0, sizeof *t);
}

int viz_mem_curve(const sched_t *s, const viz_times *t, int dev,
                  sim_mem_point **points, int *n_points, zb_err *err)
{
    return sim_mem_curve(s, &t->r, dev, points, n_points, err);
}
