/*
 * sim.c: the discrete-event simulator (sim.h).
 *
 * Devices run their lists in order; an op starts at the later of its
 * device's previous end and the arrival of its inputs (producer end, plus
 * T_comm when the producer sits on another device).  Because lists are
 * fixed, the simulation needs no event queue keyed by time: it is the same
 * dependency-ordered walk as the validator's executability check, carrying
 * end times instead of flags.  A blocked device is resumed only when an op
 * it may consume completes, so the walk is linear in the number of ops.
 *
 * Vocabulary parallelism (sched.h): S(d,j) starts once F(S-1,j)'s output
 * has arrived (T_comm when broadcast to another device); barrier C0(j) is
 * an all-reduce over all devices that ends t_c0 after the last S(j) ends,
 * C1(j) t_c1 after the last T(j).  T(d,j) waits for C0(j); the last
 * stage's B/BW of j waits for C0(j) (Vocab-1) or C1(j) (Vocab-2).  The
 * barriers run on a side stream, so they occupy no lane time; their end
 * times are reported in sim_result for the renderers.
 *
 * Memory is a per-device running sum of op deltas in execution order; the
 * peak is the largest prefix sum (counting from 0), which the time curve of
 * sim_mem_curve reproduces (a positive delta from the op's start, a negative
 * one from its end).
 *
 * sim_measured builds the same figures from the measured start/end times a
 * runtime trace leaves in the lanes, so predicted and measured runs can be
 * printed side by side.
 *
 * Expected workload: a few hundred thousand ops, simulated after every
 * generation and inside search loops; a few milliseconds.
 */
#include "src/sim.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Bits of a (stage, micro-batch) cell's done mask. */
enum { DONE_F = 1, DONE_B = 2 };

/* State of the simulation walk. */
typedef struct sim_walk {
    const sched_t *s;
    sim_result *r;
    uint8_t *done;   /* [S*m] DONE_F / DONE_B bits */
    double *f_end;   /* [S*m] end of F(s,j) once done */
    double *b_end;   /* [S*m] end of B(s,j) or BW(s,j) once done */
    int *s_count;    /* [m] devices that have run S(j) (vocabulary parallelism) */
    int *t_count;    /* [m] devices that have run T(j) */
    double *s_last;  /* [m] latest end of S(j) so far */
    double *t_last;  /* [m] latest end of T(j) so far */
    int *pos;        /* [p] next op of each device */
    uint8_t *queued; /* [p] device is on the ready stack */
    int *stack;      /* [p] devices that may be able to advance */
    int n_stack;     /* entries in stack */
} sim_walk;

/* Arrival time of an input produced on stage `from` for an op on stage `to`. */
static double arrival(const sched_t *s, double end, int from, int to)
{
    return s->stage_device[from] == s->stage_device[to] ? end : end + s->t_comm;
}

/* Whether barrier C0 (pass OP_S) or C1 (OP_T) of micro-batch mb is done;
 * stores its end in *end when it is. */
static int barrier_end(const sim_walk *w, op_kind pass, int mb, double *end)
{
    if ((pass == OP_S ? w->s_count : w->t_count)[mb] < w->s->n_devices)
        return 0;
    *end = w->r->barrier[pass == OP_S ? 0 : 1][mb];
    return 1;
}

/* When op's inputs are done, stores their arrival time in *ready and
 * returns 1; returns 0 while an input is missing. */
static int inputs_ready(const sim_walk *w, sched_op op, double *ready)
{
    const sched_t *s = w->s;
    long cell = (long)op.stage * s->n_micro + op.mb;
    long next = cell + s->n_micro, prev = cell - s->n_micro;
    double t = 0;
    if (op.kind == OP_S) {
        long last = (long)(s->n_stages - 1) * s->n_micro + op.mb;
        if (!(w->done[last] & DONE_F))
            return 0;
        /* The head's input is broadcast from the last stage's device. */
        int from = s->stage_device[s->n_stages - 1];
        *ready = w->f_end[last] + (from == op.stage ? 0 : s->t_comm);
        return 1;
    }
    if (op.kind == OP_T)
        return barrier_end(w, OP_S, op.mb, ready);
    if ((op.kind == OP_B || op.kind == OP_BW) && op.stage == s->n_stages - 1 && sched_has_vocab(s)) {
        /* The reduced input gradient is on every device once the barrier ends. */
        if (!barrier_end(w, s->vocab.variant == SCHED_VOCAB_2 ? OP_T : OP_S, op.mb, &t))
            return 0;
    }
    switch ((op_kind)op.kind) {
    case OP_F:
        if (op.stage > 0) {
            if (!(w->done[prev] & DONE_F))
                return 0;
            t = arrival(s, w->f_end[prev], op.stage - 1, op.stage);
        }
        break;
    case OP_B:
    case OP_BW:
        if (!(w->done[cell] & DONE_F))
            return 0;
        t = sched_later(t, w->f_end[cell]);
        if (op.stage < s->n_stages - 1) {
            if (!(w->done[next] & DONE_B))
                return 0;
            t = sched_later(t, arrival(s, w->b_end[next], op.stage + 1, op.stage));
        }
        break;
    case OP_W:
        if (!(w->done[cell] & DONE_B))
            return 0;
        t = w->b_end[cell];
        break;
    case OP_S:
    case OP_T:
        break; /* handled above */
    }
    *ready = t;
    return 1;
}

static void wake(sim_walk *w, int dev)
{
    if (!w->queued[dev]) {
        w->queued[dev] = 1;
        w->stack[w->n_stack++] = dev;
    }
}

/* Runs device d as far as its inputs allow. */
static long advance(sim_walk *w, int d)
{
    const sched_t *s = w->s;
    const sched_lane *l = &s->dev[d];
    sim_device *rd = &w->r->dev[d];
    long ran = 0;
    while (w->pos[d] < l->n_ops) {
        int i = w->pos[d];
        sched_op op = l->ops[i];
        double ready;
        if (!inputs_ready(w, op, &ready))
            break;
        double free_at = i > 0 ? rd->end[i - 1] : 0;
        double t0 = sched_later(free_at, ready), t1 = t0 + sched_op_time(s, op);
        rd->start[i] = t0;
        rd->end[i] = t1;
        long cell = (long)op.stage * s->n_micro + op.mb;
        if (OP_IS_VOCAB(op.kind)) {
            int *count = op.kind == OP_S ? w->s_count : w->t_count;
            double *last = op.kind == OP_S ? w->s_last : w->t_last;
            last[op.mb] = sched_later(last[op.mb], t1);
            if (++count[op.mb] == s->n_devices) {
                /* The barrier is complete: all-reduce after the last pass. */
                int c = op.kind == OP_S ? 0 : 1;
                w->r->barrier[c][op.mb] = last[op.mb] + (c == 0 ? s->vocab.t_c0 : s->vocab.t_c1);
                for (int e = 0; e < s->n_devices; e++)
                    wake(w, e);
            }
        } else if (op.kind == OP_F) {
            w->done[cell] |= DONE_F;
            w->f_end[cell] = t1;
            if (op.stage + 1 < s->n_stages)
                wake(w, s->stage_device[op.stage + 1]);
            if (op.stage == s->n_stages - 1 && sched_has_vocab(s))
                for (int e = 0; e < s->n_devices; e++)
                    wake(w, e); /* S(j) on every device */
        } else if (op.kind == OP_B || op.kind == OP_BW) {
            w->done[cell] |= DONE_B;
            w->b_end[cell] = t1;
            if (op.stage > 0)
                wake(w, s->stage_device[op.stage - 1]);
        }
        w->pos[d]++;
        ran++;
    }
    return ran;
}

/* Fills busy, span, memory figures of each device from its start/end
 * arrays, then the overall figures. */
static void summarize(const sched_t *s, sim_result *r)
{
    double first = INFINITY, last = -INFINITY;
    r->cost = 0;
    r->busy = 0;
    r->peak_mem = 0;
    r->peak_device = 0;
    int cost_dev = -1;
    for (int d = 0; d < s->n_devices; d++) {
        const sched_lane *l = &s->dev[d];
        sim_device *rd = &r->dev[d];
        double busy = 0, mem = 0, peak = 0;
        for (int i = 0; i < l->n_ops; i++) {
            busy += rd->end[i] - rd->start[i];
            mem += sched_op_mem(s, l->ops[i]);
            if (mem > peak)
                peak = mem;
        }
        rd->busy = busy;
        rd->peak_mem = peak;
        rd->end_mem = mem;
        if (l->n_ops > 0) {
            rd->first_start = rd->start[0];
            rd->last_end = rd->end[l->n_ops - 1];
            first = fmin(first, rd->first_start);
            last = fmax(last, rd->last_end);
        } else {
            rd->first_start = rd->last_end = 0;
        }
        rd->span = rd->last_end - rd->first_start;
        if (cost_dev < 0 || rd->span > r->cost) {
            r->cost = rd->span;
            r->busy = rd->busy;
            cost_dev = d;
        }
        if (peak > r->peak_mem) {
            r->peak_mem = peak;
            r->peak_device = d;
        }
    }
    r->makespan = last > first ? last - first : 0;
    r->bubble_rate = r->cost > 0 ? (r->cost - r->busy) / r->cost : 0;
}

/* Allocates r->dev and every device's start/end arrays. */
static int result_alloc(const sched_t *s, sim_result *r, zb_err *err)
{
    memset(r, 0, sizeof *r);
    r->dev = calloc((size_t)s->n_devices, sizeof *r->dev);
    if (!r->dev)
        return zb_fail(err, "out of memory simulating %ld ops", sched_op_count(s));
    r->n_devices = s->n_devices;
    if (sched_has_vocab(s)) {
        r->n_micro = s->n_micro;
        for (int c = 0; c < 2; c++)
            if (!(r->barrier[c] = calloc((size_t)s->n_micro, sizeof(double)))) {
                sim_result_free(r);
                return zb_fail(err, "out of memory simulating %ld ops", sched_op_count(s));
            }
    }
    for (int d = 0; d < s->n_devices; d++) {
        size_t n = (size_t)(s->dev[d].n_ops ? s->dev[d].n_ops : 1);
        r->dev[d].start = malloc(n * sizeof(double));
        r->dev[d].end = malloc(n * sizeof(double));
        if (!r->dev[d].start || !r->dev[d].end) {
            sim_result_free(r);
            return zb_fail(err, "out of memory simulating %ld ops", sched_op_count(s));
        }
    }
    return 0;
}

/* Cheap guard so that a schedule that skipped validation fails cleanly
 * instead of indexing out of bounds. */
static int check_shape(const sched_t *s, zb_err *err)
{
    for (int st = 0; st < s->n_stages; st++)
        if (s->stage_device[st] < 0 || s->stage_device[st] >= s->n_devices)
            return zb_fail(err, "simulate: stage %d is not placed on a device", st);
    for (int d = 0; d < s->n_devices; d++)
        for (int i = 0; i < s->dev[d].n_ops; i++) {
            sched_op op = s->dev[d].ops[i];
            int stage_ok = OP_IS_VOCAB(op.kind) ? sched_has_vocab(s) && op.stage == d
                                                : op.stage >= 0 && op.stage < s->n_stages;
            if (op.kind >= OP_KIND_COUNT || !stage_ok || op.mb < 0 || op.mb >= s->n_micro)
                return zb_fail(err, "simulate: device %d, op %d is out of range", d, i);
        }
    return 0;
}

int sim_run(const sched_t *s, sim_result *r, zb_err *err)
{
    if (check_shape(s, err) != 0)
        return -1;
    if (result_alloc(s, r, err) != 0)
        return -1;
    size_t n_cells = (size_t)s->n_stages * (size_t)s->n_micro;
    size_t p = (size_t)s->n_devices;
    sim_walk w = { .s = s, .r = r };
    w.done = calloc(n_cells, 1);
    w.f_end = malloc(n_cells * sizeof(double));
    w.b_end = malloc(n_cells * sizeof(double));
    w.pos = calloc(p, sizeof *w.pos);
    w.queued = calloc(p, 1);
    w.stack = malloc(p * sizeof *w.stack);
    size_t m = (size_t)s->n_micro;
    w.s_count = calloc(m, sizeof *w.s_count);
    w.t_count = calloc(m, sizeof *w.t_count);
    w.s_last = calloc(m, sizeof *w.s_last);
    w.t_last = calloc(m, sizeof *w.t_last);
    int rc = 0;
    if (!w.done || !w.f_end || !w.b_end || !w.pos || !w.queued || !w.stack ||
        !w.s_count || !w.t_count || !w.s_last || !w.t_last) {
        rc = zb_fail(err, "out of memory simulating %ld ops", sched_op_count(s));
        goto out;
    }
    for (int d = s->n_devices - 1; d >= 0; d--)
        wake(&w, d);
    long ran = 0;
    while (w.n_stack > 0) {
        int d = w.stack[--w.n_stack];
        ran += advance(&w, d); /* queued[d] stays set meanwhile: no self-wake */
        w.queued[d] = 0;
    }
    if (ran != sched_op_count(s)) {
        for (int d = 0; d < s->n_devices; d++)
            if (w.pos[d] < s->dev[d].n_ops) {
                rc = zb_fail(err, "simulate: deadlock at device %d, op %d (run the validator for details)",
                             d, w.pos[d]);
                break;
            }
        goto out;
    }
    summarize(s, r);
out:
    free(w.done);
    free(w.f_end);
    free(w.b_end);
    free(w.s_count);
    free(w.t_count);
    free(w.s_last);
    free(w.t_last);
    free(w.pos);
    free(w.queued);
    free(w.stack);
    if (rc != 0)
        sim_result_free(r);
    return rc;
}

int sim_measured(const sched_t *s, sim_result *r, zb_err *err)
{
    for (int d = 0; d < s->n_devices; d++)
        if (s->dev[d].n_ops > 0 && !s->dev[d].start)
            return zb_fail(err, "device %d has no measured times", d);
    if (result_alloc(s, r, err) != 0)
        return -1;
    for (int d = 0; d < s->n_devices; d++) {
        const sched_lane *l = &s->dev[d];
        if (l->n_ops == 0)
            continue;
        memcpy(r->dev[d].start, l->start, (size_t)l->n_ops * sizeof(double));
        memcpy(r->dev[d].end, l->end, (size_t)l->n_ops * sizeof(double));
    }
    summarize(s, r);
    return 0;
}

void sim_result_free(sim_result *r)
{
    if (!r)
        return;
    if (r->dev) {
        for (int d = 0; d < r->n_devices; d++) {
            free(r->dev[d].start);
            free(r->dev[d].end);
        }
        free(r->dev);
    }
    free(r->barrier[0]);
    free(r->barrier[1]);
    memset(r, 0, sizeof *r);
}

int sim_mem_curve(const sched_t *s, const sim_result *r, int dev,
                  sim_mem_point **points, int *n_points, zb_err *err)
{
    if (dev < 0 || dev >= s->n_devices || !r->dev || r->n_devices != s->n_devices)
        return zb_fail(err, "memory curve: no device %d", dev);
    const sched_lane *l = &s->dev[dev];
    const sim_device *rd = &r->dev[dev];
    sim_mem_point *pt = malloc((size_t)(2 * l->n_ops + 1) * sizeof *pt);
    if (!pt)
        return zb_fail(err, "out of memory for the memory curve of device %d", dev);
    int n = 0;
    double mem = 0;
    pt[n++] = (sim_mem_point){ rd->first_start, 0 };
    for (int i = 0; i < l->n_ops; i++) {
        double delta = sched_op_mem(s, l->ops[i]);
        if (delta == 0)
            continue;
        mem += delta;
        /* Memory is taken when an op starts and given back when it ends. */
        pt[n++] = (sim_mem_point){ delta > 0 ? rd->start[i] : rd->end[i], mem };
    }
    *points = pt;
    *n_points = n;
    return 0;
}
