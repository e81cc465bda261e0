/*
 * gen_vocab.c: vocabulary parallelism for any schedule (gen.h,
 * gen_vocab_insert; design in docs/vocab-parallel.md).
 *
 * Vocabulary parallelism (Yeung, Qi et al., "Balancing Pipeline
 * Parallelism with Vocabulary Parallelism", 2024) takes the output layer
 * off the last stage and splits it over all p devices by vocabulary.  Each
 * device then runs, per micro-batch j, an S pass (its logits shard, local
 * softmax statistics and, in Vocab-1, its share of the input gradient) and
 * a T pass (its shard's weight gradient; in Vocab-2 also its share of the
 * input gradient).  All-reduce barriers join the shards: C0(j) after every
 * S(j), and in Vocab-2 C1(j) after every T(j).  The last stage's backward
 * of j waits for the barrier that delivers the input gradient.
 *
 * Placement.  The paper derives, for 1F1B, where each device's S and T go
 * from the measured F and B times (its vocab_parallel_schedule.py walks a
 * small state machine over the ranks), so that the S passes of micro-batch
 * j are done on every device just as the last stage finishes F(j), and T
 * of j-1 runs right before S of j.  We need the same for every kind (GPipe,
 * 1F1B, interleaved, ZB-H1/H2, ZB-V, the solvers' outputs), so instead of
 * one state machine per kind we place the passes by list scheduling under
 * the schedule's own costs:
 *
 *   - the base ops keep their order on every device (the kind's character,
 *     and its validity, are untouched);
 *   - a pass is inserted at an op boundary of its device: the simulation
 *     walks all devices in global time order and each device, when it
 *     becomes free, takes whichever of (its next S, its next T, its next
 *     base op) can start first, ties broken S first (the barriers gate the
 *     last stage, so S is on the critical path), then base op, then T;
 *   - in Vocab-2, T is on the critical path too (C1 gates the last stage's
 *     backward), so T ties before base ops; in Vocab-1, T is placed where it
 *     fits or right before the next S (the paper's "T of j-1, then S of j"),
 *     so at most two micro-batches of logits wait on a device.
 *
 * Committing ops in order of their start time makes every decision on
 * complete information: an op that could still make a pass ready earlier
 * would have to end before the committed start, so it was already
 * committed.  A device never blocks on a pass (passes wait only on
 * F(S-1,j) and barriers, never on its own later ops), so the result is
 * deadlock-free whenever the base schedule is; gen_vocab_insert still
 * validates its output.
 *
 * Cost: each step takes the earliest of the devices' candidates and
 * recomputes only the candidates a commit can change (cand_dirty): the
 * committing device's, the devices of the stages next to the committed
 * base op (whose inputs it produces), and, when the last stage's F(j) or
 * a barrier of j completes, the devices whose next S or T is j and the
 * last stage's.  Choosing for every device at every step was 60% of a
 * 405B search's time (p = 64); scanning the p kept candidates for the
 * earliest was then a quarter of it (p = 128), so they sit in a
 * tournament tree ordered as the scan picked (src/dev_heap.h): log8(p)
 * nodes a change.
 * gen_vocab_insert places six times (three lookaheads, hold on and off).  gen_vocab_insert_checked re-chooses every device at
 * every step and fails if a kept candidate differs, for the tests.  The
 * search keeps a placement only when it beats the one it already has;
 * with a gen_vocab_stop the walk gives up as soon as its lanes' peaks or
 * a device's span so far plus its work left prove it cannot (stop_met):
 * an over-limit placement shows it at the end of its warm-up.
 * Measured before the cache (bench/bench_vocab.c, 2-core VM, CPU time):
 * one placement into 1F1B took 0.6 ms at p=8, m=64 (2,048 ops out) and
 * 0.49 s at p=64, m=1024 (262,144 ops); all six took 3.3 ms and 2.5 s.
 */
#include "schedules/gen.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/dev_heap.h"
#include "src/sim.h"
#include "src/validate.h"

/* State of the placement walk. */
typedef struct vwalk {
    const sched_t *base; /* the schedule without passes (read only) */
    sched_t *out;        /* the result being built: base's header, new lanes */
    int p, m, S;         /* devices, micro-batches, stages */
    double *f_end;       /* [S*m] end of F(s,j), NAN until committed */
    double *b_end;       /* [S*m] end of B/BW(s,j), NAN until committed */
    double *c_end[2];    /* [m] end of barrier C0(j) / C1(j), NAN until complete */
    double *last[2];     /* [m] latest end of S(j) / T(j) so far */
    int *count[2];       /* [m] devices that have run S(j) / T(j) */
    int *pos;            /* [p] first base op of each device not yet run */
    uint8_t **taken;     /* [p][n_ops] base op already run ahead of its turn */
    int *ahead;          /* [p] ops run ahead of pos, not yet passed by it */
    int *next_f;         /* [p] first lane index after pos holding a forward not
                          * yet run (n_ops when none): only moves forward, as pos
                          * and taken only grow, so commit keeps it up to date
                          * and choose need not rescan the lane */
    int lookahead;       /* how many F ops may run ahead of a blocked backward */
    int hold;            /* 1: a device waits for an S that becomes ready before its
                          * next base op would end, instead of starting that op */
    int *next_s;         /* [p] next micro-batch whose S the device runs */
    int *next_t;         /* [p] next micro-batch whose T the device runs */
    double *free_at;     /* [p] time the device finishes its last committed op */
    struct vcand *cand;  /* [p] each device's candidate as choose last gave it */
    uint8_t *cand_dirty; /* [p] 1: cand[d] may be stale (a commit changed what choose reads) */
    int *dirty;          /* [p] the devices whose cand_dirty is 1, in the order marked */
    int n_dirty;         /* entries of dirty in use */
    dev_heap next;       /* the devices with a candidate (kind >= 0) by its start */
    double *keys;        /* [p] scratch: every device's key when the tree is rebuilt */
    double *first;       /* [p] start of the device's first committed op, NAN before */
    const gen_vocab_stop *stop; /* when to give up (NULL: never); the three below only with it */
    double *mem;         /* [p] the device's lane memory after its committed ops */
    double *peak;        /* [p] the largest mem so far: final, as lanes only grow at the end */
    double *work_left;   /* [p] run time of the device's ops not committed yet */
    double span_bound;   /* largest lower bound of a device's span seen (for the assert) */
} vwalk;

/* A device's candidate for its next slot. */
typedef struct vcand vcand;
struct vcand {
    int kind;     /* op_kind, or -1 when the device can start nothing yet */
    int index;    /* lane index of a base op, -1 for a pass */
    int stage;    /* stage of a base op; shard (= device) of a pass */
    int mb;       /* micro-batch */
    double start; /* when it would start */
    int rank;     /* tie rank: lower wins at equal start */
};

static double arrive(const vwalk *w, double end, int from_dev, int to_dev)
{
    return from_dev == to_dev ? end : end + w->base->t_comm;
}

/* When the inputs of base op `op` on device d arrive.  Only meaningful
 * once they are all committed (sched_later takes no NAN): base_ready_strict
 * checks that first. */
static double base_ready(const vwalk *w, sched_op op, int d)
{
    const sched_t *s = w->base;
    long cell = (long)op.stage * w->m + op.mb;
    double t = 0;
    switch ((op_kind)op.kind) {
    case OP_F:
        if (op.stage > 0)
            t = arrive(w, w->f_end[cell - w->m], s->stage_device[op.stage - 1], d);
        break;
    case OP_B:
    case OP_BW:
        t = w->f_end[cell];
        if (op.stage < w->S - 1)
            t = sched_later(t, arrive(w, w->b_end[cell + w->m], s->stage_device[op.stage + 1], d));
        else /* the last stage's gradient comes through a barrier */
            t = sched_later(t, w->c_end[w->out->vocab.variant == SCHED_VOCAB_2 ? 1 : 0][op.mb]);
        break;
    case OP_W:
        t = w->b_end[cell];
        break;
    case OP_S:
    case OP_T:
        return NAN; /* not base ops */
    }
    return t;
}

/* base_ready, or NAN while any input of op is not committed yet. */
static double base_ready_strict(const vwalk *w, sched_op op, int d)
{
    long cell = (long)op.stage * w->m + op.mb;
    switch ((op_kind)op.kind) {
    case OP_F:
        if (op.stage > 0 && isnan(w->f_end[cell - w->m]))
            return NAN;
        break;
    case OP_B:
    case OP_BW:
        if (isnan(w->f_end[cell]))
            return NAN;
        if (op.stage < w->S - 1 && isnan(w->b_end[cell + w->m]))
            return NAN;
        if (op.stage == w->S - 1 &&
            isnan(w->c_end[w->out->vocab.variant == SCHED_VOCAB_2 ? 1 : 0][op.mb]))
            return NAN;
        break;
    case OP_W:
        if (isnan(w->b_end[cell]))
            return NAN;
        break;
    default:
        return NAN;
    }
    return base_ready(w, op, d);
}

/* Device d's best next op under the policy in the file comment. */
static inline __attribute__((always_inline)) vcand choose(const vwalk *w, int d)
{
    const sched_t *s = w->base;
    const sched_vocab *v = &w->out->vocab;
    double f = w->free_at[d];
    vcand best = { .kind = -1 };
    vcand c[4]; /* S, next base op, a forward ahead, T */
    int n = 0;
    int js = w->next_s[d], jt = w->next_t[d];
    int last_dev = s->stage_device[w->S - 1];
    /* At most two micro-batches of logits wait on a device: S of j+2
     * waits for T of j (the paper runs T of j-1 right before S of j). */
    if (js < w->m && js - jt < 2 && !isnan(w->f_end[(long)(w->S - 1) * w->m + js])) {
        double r = arrive(w, w->f_end[(long)(w->S - 1) * w->m + js], last_dev, d);
        c[n++] = (vcand){ OP_S, -1, d, js, sched_later(f, r), 0 };
    }
    int base_left = w->pos[d] < s->dev[d].n_ops;
    double base_start = NAN;
    if (base_left) {
        sched_op op = s->dev[d].ops[w->pos[d]];
        double r = base_ready_strict(w, op, d);
        if (!isnan(r)) {
            base_start = sched_later(f, r);
            c[n++] = (vcand){ op.kind, w->pos[d], op.stage, op.mb, base_start, 2 };
        }
        /* The paper's extra warm-up: while the next backward waits (for a
         * barrier, or for the stage after it), the lane's next forward may
         * go first, at most `lookahead` of them at a time. */
        if (op.kind != OP_F && w->ahead[d] < w->lookahead) {
            int i = w->next_f[d];
            if (i < s->dev[d].n_ops) {
                sched_op fo = s->dev[d].ops[i];
                double rf = base_ready_strict(w, fo, d);
                if (!isnan(rf) && (isnan(base_start) || sched_later(f, rf) < base_start))
                    c[n++] = (vcand){ OP_F, i, fo.stage, fo.mb, sched_later(f, rf), 2 };
            }
        }
    }
    if (jt < js && !isnan(w->c_end[0][jt])) {
        double st = sched_later(f, w->c_end[0][jt]);
        int rank = 3;
        if (v->variant == SCHED_VOCAB_2) {
            rank = 1; /* C1 gates the last stage: T is urgent */
        } else {
            /* Vocab-1: T of j before S of j+1 (bounded backlog), when the
             * lane has nothing else left, or in a gap that it fits. */
            int s_next_ready = n > 0 && c[0].kind == OP_S;
            if ((s_next_ready && c[0].start <= st) || !base_left ||
                (!isnan(base_start) && st + v->t_t <= base_start) || js - jt >= 2)
                rank = 1;
        }
        /* Otherwise T only fills a device that has nothing else known. */
        if (rank == 1 || n == 0)
            c[n++] = (vcand){ OP_T, -1, d, jt, st, rank };
    }
    for (int i = 0; i < n; i++) {
        /* A rank-1 T runs first even when S could start at the same time
         * (T of j-1 then S of j, as the paper fuses them). */
        if (best.kind < 0 || c[i].start < best.start ||
            (c[i].start == best.start && c[i].rank < best.rank))
            best = c[i];
    }
    /* A T that must run (rank 1) and is ready no later than the others
     * goes first even if another op could start a hair earlier on a free
     * device: it is due now. */
    for (int i = 0; i < n; i++)
        if (c[i].kind == OP_T && c[i].rank == 1 && best.kind != OP_T && c[i].start <= best.start)
            best = c[i];
    /* Hold: the barrier waits for this device's S, and the last stage for
     * the barrier; idling until S is ready costs this device less than
     * making every device wait a whole op for it. */
    if (w->hold && best.kind >= 0 && !OP_IS_VOCAB(best.kind) && n > 0 && c[0].kind == OP_S) {
        sched_op bo = { (uint8_t)best.kind, best.stage, best.mb };
        if (c[0].start < best.start + sched_op_time(w->out, bo))
            best = c[0];
    }
    return best;
}

/* Moves device d's next_f to the first forward after pos not yet run. */
static void next_f_advance(vwalk *w, int d)
{
    const sched_lane *lane = &w->base->dev[d];
    int i = w->next_f[d] > w->pos[d] ? w->next_f[d] : w->pos[d] + 1;
    while (i < lane->n_ops && (lane->ops[i].kind != OP_F || w->taken[d][i]))
        i++;
    w->next_f[d] = i < lane->n_ops ? i : lane->n_ops;
}

/* Whether committing op, ending at end on device d, meets w's stop rule:
 * 1 when its lane's peak goes over, 2 when its span so far plus its work
 * left (and the caller's span_add) reaches the span to beat (less a
 * rounding margin: the final span adds the same times in another order),
 * else 0. */
static int stop_met(vwalk *w, int d, sched_op op, double end)
{
    const gen_vocab_stop *st = w->stop;
    double dur = sched_op_time(w->out, op);
    w->mem[d] += sched_op_mem(w->out, op);
    if (w->mem[d] > w->peak[d])
        w->peak[d] = w->mem[d];
    w->work_left[d] -= dur;
    double lower = (end - w->first[d]) + fmax(0, w->work_left[d]);
    if (lower * (1 - 1e-9) > w->span_bound)
        w->span_bound = lower * (1 - 1e-9);
    double fixed = w->out->mem_static ? w->out->mem_static[d] : 0;
    double time = (lower + (st->span_add ? st->span_add[d] : 0)) * (1 - 1e-9);
    if (fixed + w->peak[d] > st->peak_over)
        return 1;
    return time * st->span_scale >= st->span_reach ? 2 : 0;
}

/* Commits candidate c on device d: 0, 1 or 2 when w's stop rule is met
 * (stop_met), -1 out of memory. */
static int commit(vwalk *w, int d, vcand c)
{
    const sched_t *s = w->base;
    const sched_vocab *v = &w->out->vocab;
    sched_op op = { (uint8_t)c.kind, c.stage, c.mb };
    double end = c.start + sched_op_time(w->out, op);
    if (sched_push(w->out, d, (op_kind)c.kind, c.stage, c.mb) != 0)
        return -1;
    if (isnan(w->first[d]))
        w->first[d] = c.start;
    w->free_at[d] = end;
    int met = w->stop ? stop_met(w, d, op, end) : 0;
    if (met)
        return met;
    if (OP_IS_VOCAB(c.kind)) {
        int k = c.kind == OP_S ? 0 : 1;
        if (k == 0)
            w->next_s[d]++;
        else
            w->next_t[d]++;
        w->last[k][c.mb] = sched_later(w->last[k][c.mb], end);
        if (++w->count[k][c.mb] == w->p)
            w->c_end[k][c.mb] = w->last[k][c.mb] + (k == 0 ? v->t_c0 : v->t_c1);
        return 0;
    }
    long cell = (long)c.stage * w->m + c.mb;
    if (c.kind == OP_F)
        w->f_end[cell] = end;
    else if (c.kind == OP_B || c.kind == OP_BW)
        w->b_end[cell] = end;
    if (c.index != w->pos[d]) { /* a forward run ahead of its turn */
        w->taken[d][c.index] = 1;
        w->ahead[d]++;
        next_f_advance(w, d);
        return 0;
    }
    w->pos[d]++; /* then past forwards already run ahead */
    while (w->pos[d] < s->dev[d].n_ops && w->taken[d][w->pos[d]]) {
        w->pos[d]++;
        w->ahead[d]--;
    }
    next_f_advance(w, d);
    return 0;
}

static void vwalk_free(vwalk *w)
{
    free(w->f_end);
    free(w->b_end);
    for (int k = 0; k < 2; k++) {
        free(w->c_end[k]);
        free(w->last[k]);
        free(w->count[k]);
    }
    if (w->taken)
        for (int d = 0; d < w->p; d++)
            free(w->taken[d]);
    free(w->taken);
    free(w->ahead);
    free(w->next_f);
    free(w->pos);
    free(w->next_s);
    free(w->next_t);
    free(w->free_at);
    free(w->cand);
    free(w->cand_dirty);
    free(w->dirty);
    free(w->keys);
    free(w->first);
    free(w->mem);
    free(w->peak);
    free(w->work_left);
    dev_heap_free(&w->next);
}

/* A copy of base's header (placement, costs, memory, meta) with empty
 * lanes and vocabulary parallelism v on. */
static sched_t *empty_like(const sched_t *base, const sched_vocab *v)
{
    sched_t *o = sched_new(base->n_devices, base->n_micro, base->n_stages);
    if (!o)
        return NULL;
    memcpy(o->stage_device, base->stage_device, sizeof *o->stage_device * (size_t)base->n_stages);
    memcpy(o->cost, base->cost, sizeof *o->cost * (size_t)base->n_stages);
    o->t_comm = base->t_comm;
    memcpy(o->time_unit, base->time_unit, sizeof o->time_unit);
    memcpy(o->mem_unit, base->mem_unit, sizeof o->mem_unit);
    size_t pb = sizeof(double) * (size_t)base->n_devices;
    if ((base->mem_limit && !(o->mem_limit = malloc(pb))) ||
        (base->mem_static && !(o->mem_static = malloc(pb))) ||
        (base->meta && !(o->meta = cJSON_Duplicate(base->meta, 1)))) {
        sched_free(o);
        return NULL;
    }
    if (base->mem_limit)
        memcpy(o->mem_limit, base->mem_limit, pb);
    if (base->mem_static)
        memcpy(o->mem_static, base->mem_static, pb);
    /* "1f1b" becomes "1f1b+vocab-1" when the name has room. */
    int n = snprintf(o->name, sizeof o->name, "%s+vocab-%d", base->name, v->variant);
    if (n < 0 || (size_t)n >= sizeof o->name)
        memcpy(o->name, base->name, sizeof o->name);
    sched_set_vocab(o, (sched_vocab_variant)v->variant, v->t_s, v->t_t, v->d_s, v->d_t, v->t_c0,
                    v->t_c1);
    return o;
}

int gen_vocab_check(const sched_vocab *v, zb_err *err)
{
    if (v->variant != SCHED_VOCAB_1 && v->variant != SCHED_VOCAB_2)
        return zb_fail(err, "vocabulary parallelism: variant must be 1 or 2, got %d", v->variant);
    const double t[4] = { v->t_s, v->t_t, v->t_c0, v->t_c1 };
    static const char *const name[4] = { "S time", "T time", "C0 time", "C1 time" };
    for (int i = 0; i < 4; i++)
        if (!isfinite(t[i]) || t[i] < 0)
            return zb_fail(err, "vocabulary parallelism: %s must be finite and not negative", name[i]);
    if (!isfinite(v->d_s) || !isfinite(v->d_t))
        return zb_fail(err, "vocabulary parallelism: memory deltas must be finite");
    return 0;
}

/* Marks the candidates that committing c on device d may have changed:
 * choose(w, e) reads e's own lane state, the ends of the base ops next to
 * e's ops (F of the stage before, B of the stage after, its own F and B),
 * the last stage's F end of e's next S, the end of barrier C0 of e's next
 * T, and (on the last stage's device) the barrier its next backward
 * waits for.  So d's own, the neighbours of c's stage, and, when c is a
 * last-stage F(j) or completes a barrier of j, only the devices whose
 * next S or T is j, and the last stage's device.  Marking every device
 * there instead (a barrier C1, which gates only the last stage, included)
 * made a tenth more choices on llama3-405b over 1,024 GPUs (9.1 M
 * against 8.4 M). */
static void set_dirty(vwalk *w, int d)
{
    if (!w->cand_dirty[d]) {
        w->cand_dirty[d] = 1;
        w->dirty[w->n_dirty++] = d;
    }
}

static void mark_dirty(vwalk *w, int d, vcand c)
{
    const sched_t *s = w->base;
    set_dirty(w, d);
    if (OP_IS_VOCAB(c.kind)) {
        int k = c.kind == OP_S ? 0 : 1;
        if (w->count[k][c.mb] < w->p)
            return; /* its barrier is not complete yet */
        for (int e = 0; k == 0 && e < w->p; e++)
            if (w->next_t[e] == c.mb)
                set_dirty(w, e); /* C0(j) releases T(j) */
        if (k == (w->out->vocab.variant == SCHED_VOCAB_2 ? 1 : 0))
            set_dirty(w, s->stage_device[w->S - 1]); /* the last stage's B(j) waits for it */
    } else if (c.kind == OP_F) {
        if (c.stage + 1 < w->S)
            set_dirty(w, s->stage_device[c.stage + 1]);
        for (int e = 0; c.stage == w->S - 1 && e < w->p; e++)
            if (w->next_s[e] == c.mb)
                set_dirty(w, e); /* S(j) waits for the last stage's F(j) */
    } else if (c.kind == OP_B || c.kind == OP_BW) {
        if (c.stage > 0)
            set_dirty(w, s->stage_device[c.stage - 1]);
    }
}

static int same_cand(vcand a, vcand b)
{
    return a.kind == b.kind && a.index == b.index && a.stage == b.stage && a.mb == b.mb &&
           (a.start == b.start || (isnan(a.start) && isnan(b.start))) && a.rank == b.rank;
}

/* One placement with the given lookahead; base is valid and plain.  With
 * check, every device's candidate is chosen afresh at every step and must
 * equal the kept one (the cache's invariant; for the tests).  When cost
 * is not NULL it gets the placement's largest per-device span: the walk
 * starts every op where the simulator would (as soon as its device is
 * free and its inputs have arrived), so this is sim_run's cost. */
static int insert_ahead(const sched_t *base, const sched_vocab *v, int lookahead, int hold,
                        int validate_out, int check, const gen_vocab_stop *stop, sched_t **out, double *cost,
                        zb_err *err)
{
    vwalk w = { .base = base, .p = base->n_devices, .m = base->n_micro, .S = base->n_stages,
                .lookahead = lookahead, .hold = hold, .stop = stop };
    size_t cells = (size_t)w.S * (size_t)w.m, m = (size_t)w.m, p = (size_t)w.p;
    w.out = empty_like(base, v);
    w.f_end = malloc(cells * sizeof(double));
    w.b_end = malloc(cells * sizeof(double));
    for (int k = 0; k < 2; k++) {
        w.c_end[k] = malloc(m * sizeof(double));
        w.last[k] = calloc(m, sizeof(double));
        w.count[k] = calloc(m, sizeof(int));
    }
    w.pos = calloc(p, sizeof(int));
    w.next_s = calloc(p, sizeof(int));
    w.next_t = calloc(p, sizeof(int));
    w.free_at = calloc(p, sizeof(double));
    w.ahead = calloc(p, sizeof(int));
    w.next_f = calloc(p, sizeof(int));
    w.taken = calloc(p, sizeof *w.taken);
    w.cand = calloc(p, sizeof *w.cand);
    w.cand_dirty = calloc(p, 1);
    w.dirty = malloc(p * sizeof(int));
    w.keys = malloc(p * sizeof(double));
    w.first = malloc(p * sizeof(double));
    if (stop) {
        w.mem = calloc(p, sizeof(double));
        w.peak = calloc(p, sizeof(double));
        w.work_left = malloc(p * sizeof(double));
    }
    int heap_failed = dev_heap_init(&w.next, w.p);
    int rc = -1;
    /* Each output lane holds its base lane's ops and one S and T per
     * micro-batch: room for them at once. */
    for (int d = 0; w.taken && d < w.p; d++)
        if (!(w.taken[d] = calloc((size_t)base->dev[d].n_ops + 1, 1)) ||
            (w.out && sched_lane_reserve(&w.out->dev[d], base->dev[d].n_ops + 2 * w.m) != 0)) {
            zb_fail(err, "out of memory inserting vocabulary passes");
            goto out;
        }
    if (!w.out || !w.f_end || !w.b_end || !w.c_end[0] || !w.c_end[1] || !w.last[0] ||
        !w.last[1] || !w.count[0] || !w.count[1] || !w.pos || !w.next_s || !w.next_t || !w.free_at ||
        !w.ahead || !w.next_f || !w.taken || !w.cand || !w.cand_dirty || !w.dirty || !w.keys || !w.first || heap_failed ||
        (stop && (!w.mem || !w.peak || !w.work_left))) {
        zb_fail(err, "out of memory inserting vocabulary passes");
        goto out;
    }
    for (int d = 0; d < w.p; d++)
        next_f_advance(&w, d);
    for (size_t i = 0; i < cells; i++)
        w.f_end[i] = w.b_end[i] = NAN;
    for (size_t j = 0; j < m; j++)
        w.c_end[0][j] = w.c_end[1][j] = NAN;
    for (int d = 0; d < w.p; d++) {
        w.first[d] = NAN;
        w.cand[d].kind = -1; /* none yet, as the tree is empty */
    }
    /* Every device runs its lane's ops and one S and T per micro-batch. */
    for (int d = 0; stop && d < w.p; d++) {
        const sched_lane *lane = &base->dev[d];
        double work = 0;
        for (int i = 0; i < lane->n_ops; i++)
            work += sched_op_time(w.out, lane->ops[i]);
        for (int j = 0; j < w.m; j++)
            work += sched_op_time(w.out, (sched_op){ OP_S, d, j }) + sched_op_time(w.out, (sched_op){ OP_T, d, j });
        w.work_left[d] = work;
    }
    for (int d = 0; d < w.p; d++)
        set_dirty(&w, d);
    long total = sched_op_count(base) + 2L * w.p * w.m;
    for (long done = 0; done < total; done++) {
        for (int d = 0; check && d < w.p; d++)
            if (!w.cand_dirty[d] && !same_cand(w.cand[d], choose(&w, d))) {
                zb_fail(err, "vocabulary parallelism: device %d's kept candidate is stale after %ld ops",
                        d, done);
                goto out;
            }
        /* Most devices changed (a last-stage F or a barrier every S or
         * T waited on): the tree is rebuilt, O(p), not updated p times. */
        int bulk = w.n_dirty > w.p / 4;
        while (w.n_dirty > 0) {
            int d = w.dirty[--w.n_dirty];
            vcand was = w.cand[d];
            w.cand[d] = choose(&w, d);
            w.cand_dirty[d] = 0;
            /* The tree holds exactly the devices with a candidate, by its
             * start: one starting when the last did keeps its place. */
            if (bulk || (was.kind >= 0 && w.cand[d].kind >= 0 && was.start == w.cand[d].start))
                continue;
            if (w.cand[d].kind >= 0)
                dev_heap_set(&w.next, d, w.cand[d].start);
            else
                dev_heap_remove(&w.next, d);
        }
        if (bulk) {
            for (int d = 0; d < w.p; d++)
                w.keys[d] = w.cand[d].kind >= 0 ? w.cand[d].start : NAN;
            dev_heap_assign(&w.next, w.keys);
        }
        int best_d = dev_heap_top(&w.next);
        vcand best = best_d >= 0 ? w.cand[best_d] : (vcand){ .kind = -1 };
        if (best_d < 0) {
            zb_fail(err, "vocabulary parallelism: placement stuck after %ld of %ld ops", done, total);
            goto out;
        }
        int done_rc = commit(&w, best_d, best);
        if (done_rc > 0) {
            rc = done_rc; /* stopped: no placement */
            goto out;
        }
        if (done_rc < 0) {
            zb_fail(err, "out of memory inserting vocabulary passes");
            goto out;
        }
        mark_dirty(&w, best_d, best);
    }
    if (validate_out && sched_validate(w.out, err) != 0) {
        zb_wrap(err, "vocabulary parallelism: placement gave an invalid schedule: ");
        goto out;
    }
    if (cost) {
        *cost = 0;
        for (int d = 0; d < w.p; d++)
            if (!isnan(w.first[d]) && w.free_at[d] - w.first[d] > *cost)
                *cost = w.free_at[d] - w.first[d];
        assert(!stop || *cost >= w.span_bound); /* what the stop rule read is a lower bound */
    }
    *out = w.out;
    w.out = NULL;
    rc = 0;
out:
    sched_free(w.out);
    vwalk_free(&w);
    return rc;
}

int gen_vocab_insert_ahead(const sched_t *base, const sched_vocab *v, int lookahead, sched_t **out,
                           zb_err *err)
{
    return gen_vocab_insert_with(base, v, lookahead, 0, out, err);
}

int gen_vocab_insert_check(const sched_t *base, const sched_vocab *v, zb_err *err)
{
    if (gen_vocab_check(v, err) != 0)
        return -1;
    if (sched_has_vocab(base))
        return zb_fail(err, "vocabulary parallelism: the schedule already has vocabulary passes");
    if (sched_validate(base, err) != 0)
        return zb_wrap(err, "vocabulary parallelism: the base schedule is invalid: ");
    return 0;
}

/* gen_vocab_insert_with and gen_vocab_insert_checked: the arguments
 * checked (v first, so that its error wins over the lookahead's), then
 * one placement, validated; check_cache as insert_ahead's check. */
static int insert_with_checks(const sched_t *base, const sched_vocab *v, int lookahead, int hold,
                              int check_cache, sched_t **out, zb_err *err)
{
    if (gen_vocab_check(v, err) != 0)
        return -1;
    if (lookahead < 0 || lookahead > GEN_VOCAB_MAX_LOOKAHEAD)
        return zb_fail(err, "vocabulary parallelism: lookahead must be 0..%d, got %d",
                       GEN_VOCAB_MAX_LOOKAHEAD, lookahead);
    if (gen_vocab_insert_check(base, v, err) != 0)
        return -1;
    return insert_ahead(base, v, lookahead, hold != 0, 1, check_cache, NULL, out, NULL, err);
}

int gen_vocab_insert_with(const sched_t *base, const sched_vocab *v, int lookahead, int hold,
                          sched_t **out, zb_err *err)
{
    return insert_with_checks(base, v, lookahead, hold, 0, out, err);
}

int gen_vocab_insert_trusted(const sched_t *base, const sched_vocab *v, int lookahead, int hold,
                             const gen_vocab_stop *stop, sched_t **out, double *cost, zb_err *err)
{
    assert(lookahead >= 0 && lookahead <= GEN_VOCAB_MAX_LOOKAHEAD && !sched_has_vocab(base));
    *out = NULL;
    return insert_ahead(base, v, lookahead, hold != 0, 0, 0, stop, out, cost, err);
}

int gen_vocab_insert(const sched_t *base, const sched_vocab *v, sched_t **out, zb_err *err)
{
    sched_t *best = NULL;
    double best_cost = INFINITY;
    /* The arguments are checked once, and only the placement kept is
     * validated (the validations were a sixth of the default search's
     * time): every placement is valid by construction, as the walk
     * commits each op once and only after what it waits for. */
    if (gen_vocab_insert_check(base, v, err) != 0)
        return -1;
    for (int q = 0; q < 2 * (GEN_VOCAB_MAX_LOOKAHEAD + 1); q++) {
        int k = q / 2, hold = q % 2;
        sched_t *s = NULL;
        if (insert_ahead(base, v, k, hold, 0, 0, NULL, &s, NULL, err) != 0) {
            sched_free(best);
            return -1;
        }
        sim_result r;
        if (sim_run(s, &r, err) != 0) {
            sched_free(s);
            sched_free(best);
            return -1;
        }
        /* Lower lookahead wins ties: it holds fewer micro-batches; then
         * no hold. */
        if (r.cost < best_cost * (1 - 1e-9)) {
            sched_free(best);
            best = s;
            best_cost = r.cost;
        } else {
            sched_free(s);
        }
        sim_result_free(&r);
    }
    if (sched_validate(best, err) != 0) {
        sched_free(best);
        return zb_wrap(err, "vocabulary parallelism: placement gave an invalid schedule: ");
    }
    *out = best;
    return 0;
}

int gen_vocab_insert_checked(const sched_t *base, const sched_vocab *v, int lookahead, int hold,
                             sched_t **out, zb_err *err)
{
    return insert_with_checks(base, v, lookahead, hold, 1, out, err);
}
