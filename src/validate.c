/*
 * validate.c: is a schedule complete and executable?  (validate.h)
 *
 * A magnitude pass first (finite costs, totals below SCHED_MAX_TOTAL, so
 * that no derived figure overflows), then four passes, each linear in the number of ops, stopping at the first
 * failure so that the message names one concrete problem:
 *
 *   1. placement: every virtual stage sits on a device in range;
 *   2. ops: kinds, stages and micro-batches in range, and each op's stage
 *      placed on the device whose list holds it;
 *   3. completeness: a per (stage, micro-batch) tally of F, B, W and BW;
 *      duplicates are reported at the second occurrence, missing ops by the
 *      device that should hold them;
 *   4. executability: every device walks its list in order; an op whose
 *      inputs are not done blocks its device.  Receives block and sends are
 *      buffered, as with asynchronous NCCL sends (isend) or in-process
 *      channels.  With rendezvous sends (a send that waits for the matching
 *      receive) plain 1F1B itself would deadlock in steady state: device d
 *      sends F(j) forward while device d+1 sends B(j-1) backward, each
 *      waiting for the other's receive, which is why Megatron batches such
 *      pairs and why the runtime here buffers sends.  Buffered sends make an
 *      op wait only for its data dependencies, so the schedule is executable
 *      exactly when this walk finishes.
 *
 * Vocabulary parallelism (sched.h, docs/vocab-parallel.md) adds per device
 * and micro-batch one S and one T pass, and barriers that wait for every
 * device: C0(j) is done when S(j) has run on all devices, C1(j) (Vocab-2)
 * when T(j) has.  S(d,j) needs F(S-1,j); T(d,j) needs C0(j); the last
 * stage's B or BW of micro-batch j needs C0(j) (Vocab-1) or C1(j)
 * (Vocab-2).  A stuck op that waits on a barrier is reported with the
 * first device whose pass the barrier still lacks.
 *
 * The walk is event driven: a blocked device is woken only when an op it may
 * depend on completes (the consumers of an op are known: F(s,j) feeds
 * F(s+1,j) and B(s,j); B(s,j) feeds B(s-1,j) and W(s,j)), so the cost is
 * linear in ops rather than devices times rounds.
 *
 * Expected workload: up to a few hundred thousand ops, validated after every
 * generation, load and import; a few milliseconds.
 */
#include "src/validate.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Tally of one (stage, micro-batch) cell, filled by the completeness pass. */
typedef struct op_tally {
    uint8_t n[OP_KIND_COUNT]; /* occurrences of each kind, saturating at 255 */
} op_tally;

/* "F3@2": kind, micro-batch, stage, as the file spells an op; vocabulary
 * passes as "S3" (their shard is the device, named by the caller). */
static void op_label(sched_op op, char *buf, size_t len)
{
    const char *k = op.kind < OP_KIND_COUNT ? op_kind_name((op_kind)op.kind) : "?";
    if (OP_IS_VOCAB(op.kind))
        snprintf(buf, len, "%s%d", k, (int)op.mb);
    else
        snprintf(buf, len, "%s%d@%d", k, (int)op.mb, (int)op.stage);
}

static int fail_at(zb_err *err, int dev, int pos, sched_op op, const char *what)
{
    char lab[48];
    op_label(op, lab, sizeof lab);
    return zb_fail(err, "device %d, op %d (%s): %s", dev, pos, lab, what);
}

static int check_placement(const sched_t *s, zb_err *err)
{
    for (int st = 0; st < s->n_stages; st++) {
        int d = s->stage_device[st];
        if (d < 0 || d >= s->n_devices)
            return zb_fail(err, "placement: stage %d is on device %d, not in 0..%d",
                           st, d, s->n_devices - 1);
    }
    return 0;
}

static int check_ops_in_range(const sched_t *s, zb_err *err)
{
    char what[128];
    for (int d = 0; d < s->n_devices; d++) {
        const sched_lane *l = &s->dev[d];
        for (int i = 0; i < l->n_ops; i++) {
            sched_op op = l->ops[i];
            if (op.kind >= OP_KIND_COUNT)
                return fail_at(err, d, i, op, "unknown op kind");
            if (OP_IS_VOCAB(op.kind)) {
                if (!sched_has_vocab(s))
                    return fail_at(err, d, i, op, "vocabulary pass in a schedule without "
                                   "vocabulary parallelism");
                if (op.stage != d) {
                    snprintf(what, sizeof what, "vocabulary shard %d is not this device's (%d)",
                             (int)op.stage, d);
                    return fail_at(err, d, i, op, what);
                }
                if (op.mb < 0 || op.mb >= s->n_micro) {
                    snprintf(what, sizeof what, "micro-batch %d out of range 0..%d",
                             (int)op.mb, s->n_micro - 1);
                    return fail_at(err, d, i, op, what);
                }
                continue;
            }
            if (op.stage < 0 || op.stage >= s->n_stages) {
                snprintf(what, sizeof what, "stage %d out of range 0..%d",
                         (int)op.stage, s->n_stages - 1);
                return fail_at(err, d, i, op, what);
            }
            if (op.mb < 0 || op.mb >= s->n_micro) {
                snprintf(what, sizeof what, "micro-batch %d out of range 0..%d",
                         (int)op.mb, s->n_micro - 1);
                return fail_at(err, d, i, op, what);
            }
            if (s->stage_device[op.stage] != d) {
                snprintf(what, sizeof what, "stage %d is placed on device %d, not here",
                         (int)op.stage, s->stage_device[op.stage]);
                return fail_at(err, d, i, op, what);
            }
        }
    }
    return 0;
}

/* Reports the first missing op of a (stage, micro-batch) cell. */
static int fail_missing(const sched_t *s, int st, int mb, const char *what, zb_err *err)
{
    return zb_fail(err, "device %d: %s for stage %d, micro-batch %d",
                   s->stage_device[st], what, st, mb);
}

static int check_complete(const sched_t *s, zb_err *err)
{
    long n_cells = (long)s->n_stages * s->n_micro;
    long n_ops = sched_op_count(s);
    /* A complete schedule has 2 or 3 ops per cell.  When there are many
     * more cells than ops, ops are surely missing; saying so from the count
     * keeps a hostile header (huge stages x micro-batches, few ops) from
     * making us allocate a huge tally.  Otherwise the tally names the
     * missing op. */
    if (n_cells > n_ops && n_cells > (1L << 20))
        return zb_fail(err, "incomplete: %ld ops, but %d stages x %d micro-batches "
                       "need at least %ld", n_ops, s->n_stages, s->n_micro, 2 * n_cells);
    op_tally *t = calloc((size_t)n_cells, sizeof *t);
    if (!t)
        return zb_fail(err, "out of memory validating %ld ops", n_ops);
    int rc = 0;
    for (int d = 0; d < s->n_devices && rc == 0; d++) {
        const sched_lane *l = &s->dev[d];
        for (int i = 0; i < l->n_ops; i++) {
            sched_op op = l->ops[i];
            if (OP_IS_VOCAB(op.kind))
                continue; /* check_vocab_complete */
            op_tally *c = &t[(long)op.stage * s->n_micro + op.mb];
            if (c->n[op.kind]) {
                rc = fail_at(err, d, i, op, "duplicate op");
                break;
            }
            c->n[op.kind] = 1;
            int fused = c->n[OP_BW], split = c->n[OP_B] || c->n[OP_W];
            if (fused && split) {
                rc = fail_at(err, d, i, op, "both BW and a split B/W for the same stage and micro-batch");
                break;
            }
        }
    }
    for (int st = 0; st < s->n_stages && rc == 0; st++) {
        for (int mb = 0; mb < s->n_micro; mb++) {
            const op_tally *c = &t[(long)st * s->n_micro + mb];
            if (!c->n[OP_F]) {
                rc = fail_missing(s, st, mb, "missing F", err);
                break;
            }
            if (!c->n[OP_BW] && !c->n[OP_B]) {
                rc = fail_missing(s, st, mb, c->n[OP_W] ? "W without its B" : "missing backward (B or BW)", err);
                break;
            }
            if (c->n[OP_B] && !c->n[OP_W]) {
                rc = fail_missing(s, st, mb, "B without its W", err);
                break;
            }
        }
    }
    free(t);
    return rc;
}

/* With vocabulary parallelism: every device runs exactly one S and one T
 * per micro-batch, S before T (T waits for the barrier after all S). */
static int check_vocab_complete(const sched_t *s, zb_err *err)
{
    if (!sched_has_vocab(s))
        return 0;
    size_t cells = (size_t)s->n_devices * (size_t)s->n_micro;
    uint8_t *seen = calloc(cells, 1); /* bit 1: S seen, bit 2: T seen */
    if (!seen)
        return zb_fail(err, "out of memory validating %ld ops", sched_op_count(s));
    int rc = 0;
    for (int d = 0; d < s->n_devices && rc == 0; d++) {
        const sched_lane *l = &s->dev[d];
        for (int i = 0; i < l->n_ops; i++) {
            sched_op op = l->ops[i];
            if (!OP_IS_VOCAB(op.kind))
                continue;
            uint8_t bit = op.kind == OP_S ? 1 : 2;
            uint8_t *c = &seen[(size_t)d * (size_t)s->n_micro + (size_t)op.mb];
            if (*c & bit) {
                rc = fail_at(err, d, i, op, "duplicate op");
                break;
            }
            *c |= bit;
        }
    }
    for (int d = 0; d < s->n_devices && rc == 0; d++)
        for (int j = 0; j < s->n_micro; j++) {
            uint8_t c = seen[(size_t)d * (size_t)s->n_micro + (size_t)j];
            if (c != 3) {
                rc = zb_fail(err, "device %d: missing vocabulary pass %s for micro-batch %d "
                             "(every device runs one S and one T per micro-batch)",
                             d, c & 1 ? "T" : "S", j);
                break;
            }
        }
    free(seen);
    return rc;
}

/* State of the executability walk. */
typedef struct walk {
    const sched_t *s;
    uint8_t *f_done;   /* [S*m] F(s,j) has run */
    uint8_t *b_done;   /* [S*m] B(s,j) or BW(s,j) has run */
    uint8_t *s_done;   /* [p*m] S(d,j) has run (vocabulary parallelism only) */
    uint8_t *t_done;   /* [p*m] T(d,j) has run */
    int *s_count;      /* [m] devices that have run S(j): C0(j) done at p */
    int *t_count;      /* [m] devices that have run T(j): C1(j) done at p */
    int *pos;          /* [p] next op of each device */
    uint8_t *queued;   /* [p] device is on the ready stack */
    int *stack;        /* [p] devices that may be able to advance */
    int n_stack;       /* entries in stack */
} walk;

/* Whether barrier C0 (kind OP_S) or C1 (OP_T) of micro-batch mb is done;
 * when not, *need is the first device's pass it still lacks. */
static int barrier_done(const walk *w, op_kind pass, int mb, sched_op *need)
{
    const sched_t *s = w->s;
    const int *count = pass == OP_S ? w->s_count : w->t_count;
    if (count[mb] == s->n_devices)
        return 1;
    const uint8_t *done = pass == OP_S ? w->s_done : w->t_done;
    int d = 0;
    while (d < s->n_devices && done[(long)d * s->n_micro + mb])
        d++;
    assert(d < s->n_devices);
    *need = (sched_op){ (uint8_t)pass, d, mb };
    return 0;
}

/* Whether op's inputs are done; when not, *need is the missing input. */
static int op_ready(const walk *w, sched_op op, sched_op *need)
{
    const sched_t *s = w->s;
    long cell = (long)op.stage * s->n_micro + op.mb;
    if (op.kind == OP_S) {
        long last = (long)(s->n_stages - 1) * s->n_micro + op.mb;
        if (!w->f_done[last]) {
            *need = (sched_op){ OP_F, s->n_stages - 1, op.mb };
            return 0;
        }
        return 1;
    }
    if (op.kind == OP_T)
        return barrier_done(w, OP_S, op.mb, need);
    if ((op.kind == OP_B || op.kind == OP_BW) && op.stage == s->n_stages - 1 && sched_has_vocab(s) &&
        !barrier_done(w, s->vocab.variant == SCHED_VOCAB_2 ? OP_T : OP_S, op.mb, need))
        return 0;
    switch ((op_kind)op.kind) {
    case OP_F:
        if (op.stage > 0 && !w->f_done[cell - s->n_micro]) {
            *need = (sched_op){ OP_F, op.stage - 1, op.mb };
            return 0;
        }
        return 1;
    case OP_B:
    case OP_BW:
        if (!w->f_done[cell]) {
            *need = (sched_op){ OP_F, op.stage, op.mb };
            return 0;
        }
        if (op.stage < s->n_stages - 1 && !w->b_done[cell + s->n_micro]) {
            *need = (sched_op){ OP_B, op.stage + 1, op.mb };
            return 0;
        }
        return 1;
    case OP_W:
        if (!w->b_done[cell]) {
            *need = (sched_op){ OP_B, op.stage, op.mb };
            return 0;
        }
        return 1;
    case OP_S:
    case OP_T:
        break; /* handled above */
    }
    assert(0 && "bad op kind");
    return 0;
}

static void wake(walk *w, int dev)
{
    if (!w->queued[dev]) {
        w->queued[dev] = 1;
        w->stack[w->n_stack++] = dev;
    }
}

static void wake_all(walk *w)
{
    for (int d = 0; d < w->s->n_devices; d++)
        wake(w, d);
}

/* Wakes the devices that may consume op. */
static void wake_consumers(walk *w, sched_op op)
{
    const sched_t *s = w->s;
    if (OP_IS_VOCAB(op.kind)) {
        /* A completed barrier may free T on every device and the last
         * stage's backward: O(p) once per barrier. */
        const int *count = op.kind == OP_S ? w->s_count : w->t_count;
        if (count[op.mb] == s->n_devices)
            wake_all(w);
        return;
    }
    if (sched_has_vocab(s) && op.kind == OP_F && op.stage == s->n_stages - 1)
        wake_all(w); /* S(j) runs on every device */
    wake(w, s->stage_device[op.stage]);
    if (op.kind == OP_F && op.stage + 1 < s->n_stages)
        wake(w, s->stage_device[op.stage + 1]);
    if ((op.kind == OP_B || op.kind == OP_BW) && op.stage > 0)
        wake(w, s->stage_device[op.stage - 1]);
}

/* Position of the op that provides `need` (an F, the B/BW of a cell, or a
 * vocabulary pass of a device). */
static int find_provider(const sched_t *s, sched_op need, int *pos)
{
    int d = OP_IS_VOCAB(need.kind) ? need.stage : s->stage_device[need.stage];
    const sched_lane *l = &s->dev[d];
    for (int i = 0; i < l->n_ops; i++) {
        sched_op o = l->ops[i];
        int kind_ok = need.kind == OP_F ? o.kind == OP_F :
                      OP_IS_VOCAB(need.kind) ? o.kind == need.kind :
                      (o.kind == OP_B || o.kind == OP_BW);
        if (kind_ok && o.stage == need.stage && o.mb == need.mb) {
            *pos = i;
            return d;
        }
    }
    *pos = -1;
    return d;
}

/* Appends one stuck device's line to msg when it matches the pass: pass 0
 * takes devices whose blocking input comes later in their own list (a
 * definite ordering bug, shown first), pass 1 the ones waiting on others. */
static int describe_stuck(const walk *w, int d, int pass, char *msg, size_t cap, size_t *used)
{
    const sched_t *s = w->s;
    sched_op op = s->dev[d].ops[w->pos[d]], need;
    int ready = op_ready(w, op, &need);
    assert(!ready);
    (void)ready;
    int ppos, pdev = find_provider(s, need, &ppos);
    int own = pdev == d && ppos > w->pos[d];
    if (own != (pass == 0))
        return 0;
    char lab[48], nlab[48], part[200];
    op_label(op, lab, sizeof lab);
    if (ppos >= 0)
        need = s->dev[pdev].ops[ppos]; /* name the provider as listed: B or BW */
    op_label(need, nlab, sizeof nlab);
    if (own)
        snprintf(part, sizeof part, "device %d, op %d (%s) comes before %s (op %d) on the same device",
                 d, w->pos[d], lab, nlab, ppos);
    else
        snprintf(part, sizeof part, "device %d, op %d (%s) waits for %s (device %d, op %d)%s",
                 d, w->pos[d], lab, nlab, pdev, ppos,
                 need.kind == OP_S ? " through barrier C0" :
                 need.kind == OP_T ? " through barrier C1" : "");
    int n = snprintf(msg + *used, cap - *used, "%s%s", *used ? "; " : "", part);
    if (n > 0 && (size_t)n < cap - *used)
        *used += (size_t)n;
    return 1;
}

static int report_deadlock(const walk *w, zb_err *err)
{
    const sched_t *s = w->s;
    char msg[sizeof err->msg];
    size_t used = 0;
    int shown = 0, stuck = 0;
    msg[0] = '\0';
    for (int d = 0; d < s->n_devices; d++)
        stuck += w->pos[d] < s->dev[d].n_ops;
    for (int pass = 0; pass < 2; pass++)
        for (int d = 0; d < s->n_devices && shown < 3; d++)
            if (w->pos[d] < s->dev[d].n_ops)
                shown += describe_stuck(w, d, pass, msg, sizeof msg, &used);
    if (stuck > shown)
        return zb_fail(err, "deadlock: %s; and %d more stuck device%s", msg, stuck - shown,
                       stuck - shown == 1 ? "" : "s");
    return zb_fail(err, "deadlock: %s", msg);
}

static int check_executable(const sched_t *s, zb_err *err)
{
    size_t n_cells = (size_t)s->n_stages * (size_t)s->n_micro;
    size_t p = (size_t)s->n_devices;
    walk w = { .s = s };
    w.f_done = calloc(n_cells, 1);
    w.b_done = calloc(n_cells, 1);
    w.pos = calloc(p, sizeof *w.pos);
    w.queued = calloc(p, 1);
    w.stack = malloc(p * sizeof *w.stack);
    size_t m = (size_t)s->n_micro, vocab = sched_has_vocab(s) ? 1 : 0;
    w.s_done = calloc(vocab * p * m + 1, 1);
    w.t_done = calloc(vocab * p * m + 1, 1);
    w.s_count = calloc(vocab * m + 1, sizeof *w.s_count);
    w.t_count = calloc(vocab * m + 1, sizeof *w.t_count);
    int rc = 0;
    if (!w.f_done || !w.b_done || !w.pos || !w.queued || !w.stack ||
        !w.s_done || !w.t_done || !w.s_count || !w.t_count) {
        rc = zb_fail(err, "out of memory validating %ld ops", sched_op_count(s));
        goto out;
    }
    for (int d = s->n_devices - 1; d >= 0; d--)
        wake(&w, d);
    long done = 0, total = sched_op_count(s);
    while (w.n_stack > 0) {
        int d = w.stack[--w.n_stack];
        /* queued stays set while d runs, so that its own ops don't push it. */
        const sched_lane *l = &s->dev[d];
        while (w.pos[d] < l->n_ops) {
            sched_op op = l->ops[w.pos[d]], need;
            if (!op_ready(&w, op, &need))
                break;
            long cell = (long)op.stage * s->n_micro + op.mb;
            if (op.kind == OP_F) {
                w.f_done[cell] = 1;
            } else if (op.kind == OP_B || op.kind == OP_BW) {
                w.b_done[cell] = 1;
            } else if (op.kind == OP_S) {
                w.s_done[cell] = 1; /* cell = shard (device) * m + mb */
                w.s_count[op.mb]++;
            } else if (op.kind == OP_T) {
                w.t_done[cell] = 1;
                w.t_count[op.mb]++;
            }
            w.pos[d]++;
            done++;
            wake_consumers(&w, op);
        }
        w.queued[d] = 0;
    }
    if (done != total)
        rc = report_deadlock(&w, err);
out:
    free(w.f_done);
    free(w.b_done);
    free(w.s_done);
    free(w.t_done);
    free(w.s_count);
    free(w.t_count);
    free(w.pos);
    free(w.queued);
    free(w.stack);
    return rc;
}

int sched_check_cost_totals(double per_cell_time, double per_cell_mem, double cells, zb_err *err)
{
    double t = per_cell_time * cells, m = per_cell_mem * cells;
    if (!isfinite(per_cell_time) || !(t <= SCHED_MAX_TOTAL))
        return zb_fail(err, "the op times of %.0f (stage, micro-batch) cells add up to more than %g: "
                       "use smaller --tf/--tb/--tw/--tcomm", cells, SCHED_MAX_TOTAL);
    if (!isfinite(per_cell_mem) || !(m <= SCHED_MAX_TOTAL))
        return zb_fail(err, "the memory deltas of %.0f (stage, micro-batch) cells add up to more than %g: "
                       "use smaller --mf/--mb/--mw", cells, SCHED_MAX_TOTAL);
    return 0;
}

/* One stage's cost field: finite, non-negative when it is a time. */
static int check_value(double v, int nonneg, const char *what, int stage, zb_err *err)
{
    if (!isfinite(v))
        return zb_fail(err, "%s of stage %d is not a finite number", what, stage);
    if (nonneg && v < 0)
        return zb_fail(err, "%s of stage %d is negative (%g)", what, stage, v);
    if (fabs(v) > SCHED_MAX_TOTAL)
        return zb_fail(err, "%s of stage %d is %g, above the limit of %g", what, stage, v, SCHED_MAX_TOTAL);
    if (v != 0 && fabs(v) < SCHED_MIN_NONZERO)
        return zb_fail(err, "%s of stage %d is %g: a nonzero value must be at least %g in magnitude",
                       what, stage, v, SCHED_MIN_NONZERO);
    return 0;
}

/* One vocabulary-parallelism field (format version 2): the rule of
 * check_value, named by its key in the file ("vocab.S"). */
static int check_vocab_value(double v, int nonneg, const char *what, zb_err *err)
{
    if (!isfinite(v))
        return zb_fail(err, "%s is not a finite number", what);
    if (nonneg && v < 0)
        return zb_fail(err, "%s is negative (%g)", what, v);
    if (fabs(v) > SCHED_MAX_TOTAL)
        return zb_fail(err, "%s is %g, above the limit of %g", what, v, SCHED_MAX_TOTAL);
    if (v != 0 && fabs(v) < SCHED_MIN_NONZERO)
        return zb_fail(err, "%s is %g: a nonzero value must be at least %g in magnitude", what, v,
                       SCHED_MIN_NONZERO);
    return 0;
}

int sched_check_magnitudes(const sched_t *s, zb_err *err)
{
    if (!isfinite(s->t_comm) || s->t_comm < 0 || s->t_comm > SCHED_MAX_TOTAL)
        return zb_fail(err, "costs.comm is %g, not a finite time in 0..%g", s->t_comm, SCHED_MAX_TOTAL);
    if (s->t_comm != 0 && s->t_comm < SCHED_MIN_NONZERO)
        return zb_fail(err, "costs.comm is %g: a nonzero value must be at least %g", s->t_comm,
                       SCHED_MIN_NONZERO);
    for (int st = 0; st < s->n_stages; st++) {
        const stage_cost *c = &s->cost[st];
        if (check_value(c->t_f, 1, "costs.F", st, err) || check_value(c->t_b, 1, "costs.B", st, err) ||
            check_value(c->t_w, 1, "costs.W", st, err) || check_value(c->d_f, 0, "memory.F", st, err) ||
            check_value(c->d_b, 0, "memory.B", st, err) || check_value(c->d_w, 0, "memory.W", st, err))
            return -1;
    }
    /* Vocabulary parallelism: the S/T pass times and memory deltas are
     * costs like F/B/W (the loops below add them per S/T op), and each
     * micro-batch's barriers C0 and C1 add their time to the span. */
    const sched_vocab *v = &s->vocab;
    int vocab = sched_has_vocab(s);
    if (vocab && (check_vocab_value(v->t_s, 1, "vocab.S", err) || check_vocab_value(v->t_t, 1, "vocab.T", err) ||
                  check_vocab_value(v->t_c0, 1, "vocab.C0", err) ||
                  check_vocab_value(v->t_c1, 1, "vocab.C1", err) ||
                  check_vocab_value(v->d_s, 0, "vocab.memory.S", err) ||
                  check_vocab_value(v->d_t, 0, "vocab.memory.T", err)))
        return -1;
    /* Each value is at most 1e30, so these sums of at most ~1e9 terms
     * cannot overflow a double before the comparison. */
    double time = vocab ? (double)s->n_micro * (v->t_c0 + v->t_c1) : 0, mem = 0;
    for (int d = 0; d < s->n_devices; d++) {
        const sched_lane *l = &s->dev[d];
        for (int i = 0; i < l->n_ops; i++) {
            sched_op op = l->ops[i];
            if (op.stage < 0 || op.stage >= s->n_stages || op.kind >= OP_KIND_COUNT)
                continue; /* check_ops_in_range reports it */
            time += sched_op_time(s, op) + s->t_comm;
            mem += fabs(sched_op_mem(s, op));
            /* Measured times (a runtime trace) are finite by the loader;
             * bound them like the costs, since the renderers scale them. */
            if (l->start && !(fabs(l->start[i]) <= SCHED_MAX_TOTAL && fabs(l->end[i]) <= SCHED_MAX_TOTAL))
                return zb_fail(err, "device %d, op %d: measured time is beyond %g", d, i, SCHED_MAX_TOTAL);
            if (l->start && ((l->start[i] != 0 && fabs(l->start[i]) < SCHED_MIN_NONZERO) ||
                             (l->end[i] != 0 && fabs(l->end[i]) < SCHED_MIN_NONZERO)))
                return zb_fail(err, "device %d, op %d: a nonzero measured time must be at least %g",
                               d, i, SCHED_MIN_NONZERO);
        }
    }
    double extra = 0;
    for (int d = 0; d < s->n_devices; d++) {
        double lim = s->mem_limit ? s->mem_limit[d] : 0, st = s->mem_static ? s->mem_static[d] : 0;
        if (!isfinite(lim) || !isfinite(st) || lim < 0 || st < 0 || lim > SCHED_MAX_TOTAL || st > SCHED_MAX_TOTAL)
            return zb_fail(err, "memory limit or static memory of device %d is not a finite size in 0..%g",
                           d, SCHED_MAX_TOTAL);
        extra = fmax(extra, fmax(lim, st));
    }
    if (!(time <= SCHED_MAX_TOTAL))
        return zb_fail(err, "the op times add up to %.3g (with transfers), above the limit of %g",
                       time, SCHED_MAX_TOTAL);
    if (!(mem + extra <= SCHED_MAX_TOTAL))
        return zb_fail(err, "the memory deltas add up to %.3g, above the limit of %g", mem + extra,
                       SCHED_MAX_TOTAL);
    return 0;
}

int sched_validate_static(const sched_t *s, zb_err *err)
{
    if (!s || s->n_devices <= 0 || s->n_micro <= 0 || s->n_stages <= 0)
        return zb_fail(err, "schedule has no devices, micro-batches or stages");
    if (sched_check_magnitudes(s, err) || check_placement(s, err) || check_ops_in_range(s, err) ||
        check_complete(s, err) || check_vocab_complete(s, err))
        return -1;
    return 0;
}

int sched_validate(const sched_t *s, zb_err *err)
{
    return sched_validate_static(s, err) || check_executable(s, err) ? -1 : 0;
}
