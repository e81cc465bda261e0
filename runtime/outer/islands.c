/*
 * islands.c: K pipeline-trainer replicas under an outer optimizer (see
 * islands.h).
 *
 * The replicas' trainers live in an array indexed by outer replica id (ids
 * are never reused, so the array only grows on joins).  Per inner step:
 * apply the elastic events of this step, step every replica that trains,
 * note the step, and let the outer optimizer sync when it is due.  The
 * sync mode has its own loop (run_sync): backward on every replica, one
 * gradient all-reduce, apply on every replica, check they still agree.
 * Both loops check every replica's step against the divergence rule
 * (island_check_step) before anything else uses it, so a diverged run
 * stops at the step where it diverged instead of training to the end.
 */
#include "runtime/outer/islands.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void islands_seg_layout_free(islands_seg_layout *l)
{
    free(l->stage);
    free(l->off);
    free(l->len);
    memset(l, 0, sizeof *l);
}

int islands_seg_layout_build(trainer *t, islands_seg_layout *l, zb_err *err)
{
    memset(l, 0, sizeof *l);
    int cap = 0;
    for (int s = 0; s < trainer_stage_count(t); s++)
        cap += trainer_stage_layout(t, s)->n_tensors;
    l->stage = malloc((size_t)cap * sizeof *l->stage);
    l->off = malloc((size_t)cap * sizeof *l->off);
    l->len = malloc((size_t)cap * sizeof *l->len);
    if (!l->stage || !l->off || !l->len) {
        islands_seg_layout_free(l);
        return zb_fail(err, "islands: out of memory");
    }
    for (int s = 0; s < trainer_stage_count(t); s++) {
        const llama_stage *st = trainer_stage_layout(t, s);
        for (int i = 0; i < st->n_tensors; i++) {
            const llama_tensor *tn = &st->tensors[i];
            int extend = i > 0 && l->n > 0 && l->stage[l->n - 1] == s &&
                         st->tensors[i - 1].layer == tn->layer &&
                         l->off[l->n - 1] + l->len[l->n - 1] == tn->offset;
            if (extend) {
                l->len[l->n - 1] += tn->count;
            } else {
                l->stage[l->n] = s;
                l->off[l->n] = tn->offset;
                l->len[l->n] = tn->count;
                l->n++;
            }
        }
    }
    /* Every parameter belongs to exactly one segment, or some would never
     * be synchronized. */
    size_t total = 0;
    for (int i = 0; i < l->n; i++)
        total += l->len[i];
    assert(total == trainer_param_count(t));
    (void)total;
    return 0;
}

void islands_seg_pointers(trainer *t, const islands_seg_layout *l, float **ptr)
{
    for (int i = 0; i < l->n; i++) {
        size_t n;
        ptr[i] = trainer_stage_params(t, l->stage[i], &n) + l->off[i];
    }
}

void islands_seg_grad_pointers(trainer *t, const islands_seg_layout *l, float **ptr)
{
    for (int i = 0; i < l->n; i++) {
        size_t n;
        ptr[i] = trainer_stage_grads(t, l->stage[i], &n) + l->off[i];
    }
}

void islands_opts_default(islands_opts *o)
{
    memset(o, 0, sizeof *o);
    o->replicas = 4;
    o->steps = 200;
    outer_config_default(&o->outer, OUTER_DILOCO);
}

void islands_result_free(islands_result *r)
{
    free(r->loss);
    free(r->val_loss);
    r->loss = r->val_loss = NULL;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int check_opts(const islands_opts *io, zb_err *err)
{
    if (io->replicas < 1 || io->replicas > 1024)
        return zb_fail(err, "islands: %d replicas (need 1..1024)", io->replicas);
    if (io->steps < 1)
        return zb_fail(err, "islands: %ld steps (need at least 1)", io->steps);
    if (io->eval_every < 0)
        return zb_fail(err, "islands: eval interval %d is negative", io->eval_every);
    if (io->n_events > 0 && io->outer.kind == OUTER_SYNC)
        return zb_fail(err, "islands: elastic replicas need an outer optimizer, not sync");
    for (int i = 1; i < io->n_events; i++)
        if (io->events[i].step < io->events[i - 1].step)
            return zb_fail(err, "islands: elastic events are not sorted by step");
    return 0;
}

typedef struct island_set {
    trainer **t;   /* [cap] trainer of each outer replica id, NULL once gone */
    long *streak;  /* [cap] consecutive skipped steps of each replica */
    int cap;       /* allocated ids */
    float **ptr;   /* [n_seg] scratch: segment pointers of one replica */
    islands_seg_layout l;  /* the segment layout (same for every replica) */
} island_set;

/* Grows is->t and is->streak to hold at least `need` ids (new slots
 * empty).  Returns 0 or -1 with err set. */
static int island_slots(island_set *is, int need, zb_err *err)
{
    if (need <= is->cap)
        return 0;
    int cap = need + 8;
    trainer **nt = realloc(is->t, (size_t)cap * sizeof *nt);
    if (!nt)
        return zb_fail(err, "islands: out of memory");
    is->t = nt;
    long *ns = realloc(is->streak, (size_t)cap * sizeof *ns);
    if (!ns)
        return zb_fail(err, "islands: out of memory");
    is->streak = ns;
    memset(nt + is->cap, 0, (size_t)(cap - is->cap) * sizeof *nt);
    memset(ns + is->cap, 0, (size_t)(cap - is->cap) * sizeof *ns);
    is->cap = cap;
    return 0;
}

/* The divergence rule (islands.h) for replica id after a step of its
 * that returned `loss` and moved its skipped-step counter from
 * skipped_before; step is 0-based.  Returns 0 to go on, or -1 with err
 * naming the step, the replica and why. */
static int island_check_step(island_set *is, int id, long step, double loss,
                             long skipped_before, const islands_opts *io, zb_err *err)
{
    if (!isfinite(loss))
        return zb_fail(err, "step %ld: replica %d: the training loss is %s (diverged; try a lower "
                       "--lr or --outer-lr)", step + 1, id, isnan(loss) ? "NaN" : "infinite");
    long skipped = trainer_get_stats(is->t[id])->skipped_steps;
    is->streak[id] = skipped > skipped_before ? is->streak[id] + 1 : 0;
    if (io->max_skipped > 0 && is->streak[id] >= io->max_skipped)
        return zb_fail(err, "step %ld: replica %d: diverged: %ld steps in a row were skipped because "
                       "the gradient was not finite (loss %.4g; try a lower --lr, or raise "
                       "--max-skipped)", step + 1, id, is->streak[id], loss);
    return 0;
}

/* An evaluation during the run (after 0-based step `step`) under the same
 * rule: a validation loss that is not finite stops the run there, as in
 * the single-trainer `run`.  Returns 0, or -1 with err set. */
static int island_check_eval(trainer *t, long step, double *val_loss, zb_err *err)
{
    if (trainer_eval(t, val_loss, err) != 0)
        return -1;
    if (!isfinite(*val_loss))
        return zb_fail(err, "step %ld: the validation loss is not finite (diverged; try a lower "
                       "--lr or --outer-lr)", step + 1);
    return 0;
}

/* The outer optimizer reads and writes the replicas' buffers through
 * pointers taken when they joined: on a backend with host mirrors (a GPU)
 * those are refreshed before every outer operation and uploaded by the
 * next step (trainer_host_sync); a no-op on the CPU.  0 or -1. */
static int islands_host_sync(island_set *is, unsigned bufs, zb_err *err)
{
    for (int id = 0; id < is->cap; id++)
        if (is->t[id] && trainer_host_sync(is->t[id], bufs, err) != 0)
            return -1;
    return 0;
}

static int island_add(island_set *is, outer_t *o, const sched_t *s, const zb_model *m,
                      const zb_data *d, const trainer_opts *base, uint64_t stream, zb_err *err)
{
    trainer_opts opts = *base;
    opts.data_stream = stream;
    trainer *t = NULL;
    if (trainer_create(s, m, d, &opts, &t, err))
        return -1;
    if (!is->l.n && islands_seg_layout_build(t, &is->l, err)) {
        trainer_free(t);
        return -1;
    }
    if (!is->ptr && !(is->ptr = malloc((size_t)is->l.n * sizeof *is->ptr))) {
        trainer_free(t);
        return zb_fail(err, "islands: out of memory");
    }
    if (o) {
        islands_seg_pointers(t, &is->l, is->ptr);
        int id = outer_add_replica(o, is->ptr, NULL, err);
        if (id < 0) {
            trainer_free(t);
            return -1;
        }
        if (island_slots(is, id + 1, err)) {
            trainer_free(t);
            return -1;
        }
        is->t[id] = t;
    } else {
        /* The first trainer only fixes the layout for outer_new. */
        if (island_slots(is, 8, err)) {
            trainer_free(t);
            return -1;
        }
        is->t[0] = t;
    }
    return 0;
}

static void island_set_free(island_set *is)
{
    for (int i = 0; i < is->cap; i++)
        trainer_free(is->t[i]);
    free(is->t);
    free(is->streak);
    free(is->ptr);
    islands_seg_layout_free(&is->l);
}

/* 1 when every present replica's parameters equal replica first's bit for
 * bit (what data parallelism promises after each step). */
static int replicas_identical(const island_set *is, int first)
{
    for (int id = 0; id < is->cap; id++) {
        if (!is->t[id] || id == first)
            continue;
        for (int st = 0; st < trainer_stage_count(is->t[id]); st++) {
            size_t n;
            const float *a = trainer_stage_params(is->t[first], st, &n);
            const float *b = trainer_stage_params(is->t[id], st, &n);
            if (memcmp(a, b, n * sizeof *a) != 0)
                return 0;
        }
    }
    return 1;
}

/* The synchronous baseline: K trainers (same seed, data streams 0..K-1)
 * each run their backward, the outer object all-reduces their gradients
 * segment by segment through the ring (fp32 or int8, every byte counted)
 * into the mean, and every trainer applies its optimizer step to that mean.
 * Identical weights, moments and gradients give identical steps, so the
 * replicas stay bit-identical; that is checked after every step. */
static int run_sync(const sched_t *s, const zb_model *m, const zb_data *d,
                    const trainer_opts *base, const islands_opts *io,
                    islands_result *res, zb_err *err)
{
    island_set is;
    memset(&is, 0, sizeof is);
    outer_t *o = NULL;
    float **gptr = NULL;
    int rc = 0;
    if (island_add(&is, NULL, s, m, d, base, 0, err)) {
        island_set_free(&is);
        return -1;
    }
    if (outer_new(&io->outer, is.l.n, is.l.len, &o, err)) {
        island_set_free(&is);
        return -1;
    }
    if (!(gptr = malloc((size_t)is.l.n * sizeof *gptr)))
        rc = zb_fail(err, "islands: out of memory");
    for (int r = 0; r < io->replicas && rc == 0; r++) {
        trainer *t = NULL;
        if (r > 0) {
            trainer_opts opts = *base;
            opts.data_stream = (uint64_t)r;
            if ((rc = trainer_create(s, m, d, &opts, &t, err)) != 0)
                break;
            if ((rc = island_slots(&is, r + 1, err)) != 0) {
                trainer_free(t);
                break;
            }
            is.t[r] = t;
        }
        t = is.t[r];
        islands_seg_pointers(t, &is.l, is.ptr);
        islands_seg_grad_pointers(t, &is.l, gptr);
        int id = outer_add_replica(o, is.ptr, gptr, err);
        if (id < 0)
            rc = -1;
        else
            assert(id == r); /* ids are handed out in order from 0 */
    }
    double *loss = malloc((size_t)io->replicas * sizeof *loss);
    long *skipped_before = malloc((size_t)io->replicas * sizeof *skipped_before);
    if (rc == 0 && (!loss || !skipped_before))
        rc = zb_fail(err, "islands: out of memory");
    for (long step = 0; step < io->steps && rc == 0; step++) {
        double sum = 0.0;
        for (int r = 0; r < io->replicas && rc == 0; r++) {
            skipped_before[r] = trainer_get_stats(is.t[r])->skipped_steps;
            if ((rc = trainer_backward(is.t[r], &loss[r], err)) != 0)
                break;
            sum += loss[r];
            res->tokens += trainer_get_stats(is.t[r])->tokens_per_step;
        }
        if (rc)
            break;
        res->loss[step] = sum / io->replicas;
        if ((rc = islands_host_sync(&is, TRAINER_BUF_GRADS, err)) != 0
            || (rc = outer_sync_grads(o, err)) != 0)
            break;
        for (int r = 0; r < io->replicas && rc == 0; r++)
            rc = trainer_apply(is.t[r], err);
        /* After the apply, which is where a step is skipped. */
        for (int r = 0; r < io->replicas && rc == 0; r++)
            rc = island_check_step(&is, r, step, loss[r], skipped_before[r], io, err);
        if (rc)
            break;
        if (!replicas_identical(&is, 0)) {
            rc = zb_fail(err, "islands: sync replicas diverged at step %ld", step);
            break;
        }
        if (io->eval_every > 0 && (step + 1) % io->eval_every == 0)
            rc = island_check_eval(is.t[0], step, &res->val_loss[step], err);
    }
    if (rc == 0)
        rc = trainer_eval(is.t[0], &res->final_val_loss, err);
    res->final_replicas = io->replicas;
    res->outer_steps = outer_step_count(o);
    res->bytes_sent = outer_traffic(o)->bytes_sent;
    free(loss);
    free(skipped_before);
    free(gptr);
    outer_free(o);
    island_set_free(&is);
    return rc;
}

static int run_outer(const sched_t *s, const zb_model *m, const zb_data *d,
                     const trainer_opts *base, const islands_opts *io,
                     islands_result *res, zb_err *err)
{
    island_set is;
    memset(&is, 0, sizeof is);
    outer_t *o = NULL;
    int rc = 0;
    uint64_t next_stream = 0;
    /* Replica 0 first (its trainer defines the segment layout). */
    if (island_add(&is, NULL, s, m, d, base, next_stream++, err)) {
        island_set_free(&is);
        return -1;
    }
    if (outer_new(&io->outer, is.l.n, is.l.len, &o, err)) {
        island_set_free(&is);
        return -1;
    }
    islands_seg_pointers(is.t[0], &is.l, is.ptr);
    if (outer_add_replica(o, is.ptr, NULL, err) != 0)
        rc = -1;
    for (int r = 1; r < io->replicas && rc == 0; r++)
        rc = island_add(&is, o, s, m, d, base, next_stream++, err);

    int ev = 0;
    outer_step_info info;
    for (long step = 0; step < io->steps && rc == 0; step++) {
        for (; ev < io->n_events && io->events[ev].step <= step && rc == 0; ev++) {
            const islands_event *e = &io->events[ev];
            if (e->kind == ISLANDS_LEAVE) {
                if ((rc = outer_remove_replica(o, e->replica, err)) == 0) {
                    trainer_free(is.t[e->replica]);
                    is.t[e->replica] = NULL;
                }
            } else {
                rc = island_add(&is, o, s, m, d, base, next_stream++, err);
            }
        }
        if (rc)
            break;
        double sum = 0.0;
        int trained = 0;
        for (int id = 0; id < is.cap && rc == 0; id++) {
            if (!is.t[id] || !outer_replica_trains(o, id))
                continue;
            double loss;
            long skipped_before = trainer_get_stats(is.t[id])->skipped_steps;
            if ((rc = trainer_step(is.t[id], &loss, err)) != 0)
                break;
            if ((rc = island_check_step(&is, id, step, loss, skipped_before, io, err)) != 0)
                break;
            outer_note_step(o, id);
            sum += loss;
            trained++;
            res->tokens += trainer_get_stats(is.t[id])->tokens_per_step;
        }
        if (rc)
            break;
        res->loss[step] = trained ? sum / trained : NAN;
        if (outer_should_sync(o)) {
            if ((rc = islands_host_sync(&is, TRAINER_BUF_PARAMS, err)) != 0
                || (rc = outer_step(o, &info, err)) != 0)
                break;
            res->eliminated += info.eliminated;
            res->skipped += info.skipped_segments;
        }
        if (io->eval_every > 0 && (step + 1) % io->eval_every == 0) {
            /* outer_replicas writes every present id: room for all of them
             * (a single int here overflowed the stack with K >= 2). */
            int n = outer_replicas(o, NULL);
            assert(n > 0); /* the last replica can never leave */
            int ids[n];
            outer_replicas(o, ids);
            rc = island_check_eval(is.t[ids[0]], step, &res->val_loss[step], err);
        }
    }
    /* Finish with the synchronized model when inner steps are pending. */
    if (rc == 0) {
        int n = outer_replicas(o, NULL);
        int ids[n];
        outer_replicas(o, ids);
        int pending = 0;
        for (int a = 0; a < n; a++)
            pending |= outer_steps_since_sync(o, ids[a]) > 0;
        if (pending && (rc = islands_host_sync(&is, TRAINER_BUF_PARAMS, err)) == 0
            && (rc = outer_step(o, &info, err)) == 0) {
            res->eliminated += info.eliminated;
            res->skipped += info.skipped_segments;
        }
        if (rc == 0)
            rc = trainer_eval(is.t[ids[0]], &res->final_val_loss, err);
        res->final_replicas = n;
    }
    res->outer_steps = outer_step_count(o);
    res->bytes_sent = outer_traffic(o)->bytes_sent;
    outer_free(o);
    island_set_free(&is);
    return rc;
}

int islands_run(const sched_t *s, const zb_model *m, const zb_data *d,
                const trainer_opts *base, const islands_opts *io,
                islands_result *res, zb_err *err)
{
    memset(res, 0, sizeof *res);
    if (check_opts(io, err))
        return -1;
    res->loss = malloc((size_t)io->steps * sizeof *res->loss);
    res->val_loss = malloc((size_t)io->steps * sizeof *res->val_loss);
    if (!res->loss || !res->val_loss) {
        islands_result_free(res);
        return zb_fail(err, "islands: out of memory for %ld steps", io->steps);
    }
    for (long i = 0; i < io->steps; i++)
        res->loss[i] = res->val_loss[i] = NAN;
    double t0 = now_s();
    int rc = io->outer.kind == OUTER_SYNC ? run_sync(s, m, d, base, io, res, err)
                                          : run_outer(s, m, d, base, io, res, err);
    res->steps = io->steps;
    res->wall_s = now_s() - t0;
    if (rc)
        islands_result_free(res);
    return rc;
}
