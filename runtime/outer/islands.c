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
#include "runtime/job.h"
#include "runtime/outer/zero1.h"

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
    if (io->zero1 && io->outer.kind != OUTER_SYNC)
        return zb_fail(err, "islands: ZeRO-1 shards data-parallel replicas: it needs --outer sync");
    if (io->zero1 && io->outer.wire != OUTER_WIRE_FP32)
        return zb_fail(err, "islands: ZeRO-1 runs on the fp32 wire only (int8 would quantize "
                       "the stepped parameters)");
    for (int i = 1; i < io->n_events; i++)
        if (io->events[i].step < io->events[i - 1].step)
            return zb_fail(err, "islands: elastic events are not sorted by step");
    return 0;
}

typedef struct island_set {
    trainer **t;   /* [cap] trainer of each outer replica id, NULL once gone */
    long *before;  /* [cap] each replica's skipped-step counter before the step */
    int cap;       /* allocated ids */
    float **ptr;   /* [n_seg] scratch: segment pointers of one replica */
    islands_seg_layout l;  /* the segment layout (same for every replica) */
} island_set;

/* Grows is->t and is->before to hold at least `need` ids (new slots
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
    long *ns = realloc(is->before, (size_t)cap * sizeof *ns);
    if (!ns)
        return zb_fail(err, "islands: out of memory");
    is->before = ns;
    memset(nt + is->cap, 0, (size_t)(cap - is->cap) * sizeof *nt);
    memset(ns + is->cap, 0, (size_t)(cap - is->cap) * sizeof *ns);
    is->cap = cap;
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
    free(is->before);
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

/* The islands of one run, stepped by the job loop. */
struct islands {
    const sched_t *s;       /* the schedule (borrowed) */
    const zb_model *m;      /* the model (borrowed) */
    const zb_data *d;       /* the text (borrowed) */
    trainer_opts base;      /* every replica's options but its data stream */
    islands_opts io;        /* the run's options (events borrowed) */
    island_set is;          /* the replicas' trainers */
    outer_t *o;             /* the outer optimizer (sync: the gradient all-reduce) */
    float **gptr;           /* [segments] sync: gradient pointers, scratch */
    int ev;                 /* next elastic event */
    uint64_t next_stream;   /* data stream of the next replica to join */
    long step;              /* inner steps taken */
    long eliminated;        /* EDiT: (replica, layer) contributions dropped */
    long skipped_segments;  /* EDiT: (outer step, layer) pairs left unchanged */
    outer_ring_stats zero1_traffic; /* ZeRO-1: the reduce-scatters and all-gathers */
    int *ids;               /* [cap_members] the step's replicas, for the job */
    double *mloss;          /* [cap_members] their losses */
    unsigned char *mskip;   /* [cap_members] whether each skipped */
    int cap_members;        /* room in the three arrays */
    islands_saver saver;    /* writes a checkpoint (islands_ckpt.c), or NULL: none */
    void *saver_ctx;        /* passed to saver */
};

static int members_room(islands *x, int n, zb_err *err)
{
    if (n <= x->cap_members)
        return 0;
    int cap = n + 8;
    int *ids = realloc(x->ids, (size_t)cap * sizeof *ids);
    if (ids)
        x->ids = ids;
    double *l = realloc(x->mloss, (size_t)cap * sizeof *l);
    if (l)
        x->mloss = l;
    unsigned char *k = realloc(x->mskip, (size_t)cap);
    if (k)
        x->mskip = k;
    if (!ids || !l || !k)
        return zb_fail(err, "islands: out of memory");
    x->cap_members = cap;
    return 0;
}

void islands_free(islands *x)
{
    if (!x)
        return;
    outer_free(x->o);
    island_set_free(&x->is);
    free(x->gptr);
    free(x->ids);
    free(x->mloss);
    free(x->mskip);
    free(x);
}

int islands_create(const sched_t *s, const zb_model *m, const zb_data *d,
                   const trainer_opts *base, const islands_opts *io, islands **out, zb_err *err)
{
    if (check_opts(io, err))
        return -1;
    islands *x = calloc(1, sizeof *x);
    if (!x)
        return zb_fail(err, "islands: out of memory");
    x->s = s;
    x->m = m;
    x->d = d;
    x->base = *base;
    x->io = *io;
    int sync = io->outer.kind == OUTER_SYNC;
    /* Replica 0 first: its trainer defines the segment layout. */
    int rc = island_add(&x->is, NULL, s, m, d, base, x->next_stream++, err);
    if (rc == 0)
        rc = outer_new(&io->outer, x->is.l.n, x->is.l.len, &x->o, err);
    if (rc == 0 && sync && !(x->gptr = malloc((size_t)x->is.l.n * sizeof *x->gptr)))
        rc = zb_fail(err, "islands: out of memory");
    if (rc == 0 && members_room(x, io->replicas, err))
        rc = -1;
    for (int r = 0; r < io->replicas && rc == 0; r++) {
        if (r > 0 && !sync) {
            rc = island_add(&x->is, x->o, s, m, d, base, x->next_stream++, err);
            continue;
        }
        if (r > 0) {
            /* sync: the replicas join with their gradients, ids in order */
            trainer_opts opts = *base;
            opts.data_stream = x->next_stream++;
            trainer *t = NULL;
            if ((rc = trainer_create(s, m, d, &opts, &t, err)) != 0)
                break;
            if ((rc = island_slots(&x->is, r + 1, err)) != 0) {
                trainer_free(t);
                break;
            }
            x->is.t[r] = t;
        }
        trainer *t = x->is.t[r];
        if (io->zero1 && (rc = zero1_shard_trainer(t, &x->is.l, io->replicas, r, err)) != 0)
            break;
        islands_seg_pointers(t, &x->is.l, x->is.ptr);
        if (sync)
            islands_seg_grad_pointers(t, &x->is.l, x->gptr);
        int id = outer_add_replica(x->o, x->is.ptr, sync ? x->gptr : NULL, err);
        if (id < 0)
            rc = -1;
        else
            assert(id == r); /* ids are handed out in order from 0 */
    }
    if (rc != 0) {
        islands_free(x);
        return -1;
    }
    *out = x;
    return 0;
}

/* The synchronous baseline's step: every replica's backward, the
 * gradient all-reduce (fp32 or int8, every byte counted) into the mean,
 * every replica's optimizer step on that mean.  Identical weights,
 * moments and gradients give identical steps; the boundary checks it. */
static int step_sync(islands *x, job_step *out, zb_err *err)
{
    island_set *is = &x->is;
    int k = x->io.replicas;
    double sum = 0.0;
    for (int r = 0; r < k; r++) {
        is->before[r] = trainer_get_stats(is->t[r])->skipped_steps;
        if (trainer_backward(is->t[r], &x->mloss[r], err) != 0)
            return -1;
        sum += x->mloss[r];
        x->ids[r] = r;
        out->tokens += trainer_get_stats(is->t[r])->tokens_per_step;
    }
    out->loss = sum / k;
    if (x->io.zero1) {
        if (zero1_reduce(is->t, k, &is->l, &x->zero1_traffic, err) != 0)
            return -1;
    } else if (islands_host_sync(is, TRAINER_BUF_GRADS, err) != 0 || outer_sync_grads(x->o, err) != 0) {
        return -1;
    }
    for (int r = 0; r < k; r++)
        if (trainer_apply(is->t[r], err) != 0)
            return -1;
    if (x->io.zero1)
        zero1_gather(is->t, k, &is->l, &x->zero1_traffic);
    /* after the apply, which is where a step is skipped */
    for (int r = 0; r < k; r++)
        x->mskip[r] = trainer_get_stats(is->t[r])->skipped_steps > is->before[r];
    out->members = k;
    return 0;
}

/* An outer optimizer's inner step: this step's elastic events, then a
 * step of every replica that trains. */
static int step_outer(islands *x, job_step *out, zb_err *err)
{
    island_set *is = &x->is;
    const islands_opts *io = &x->io;
    for (; x->ev < io->n_events && io->events[x->ev].step <= x->step; x->ev++) {
        const islands_event *e = &io->events[x->ev];
        if (e->kind == ISLANDS_LEAVE) {
            if (outer_remove_replica(x->o, e->replica, err) != 0)
                return -1;
            trainer_free(is->t[e->replica]);
            is->t[e->replica] = NULL;
        } else if (island_add(is, x->o, x->s, x->m, x->d, &x->base, x->next_stream++, err) != 0) {
            return -1;
        }
    }
    if (members_room(x, is->cap, err))
        return -1;
    double sum = 0.0;
    int trained = 0;
    for (int id = 0; id < is->cap; id++) {
        if (!is->t[id] || !outer_replica_trains(x->o, id))
            continue;
        double loss;
        long before = trainer_get_stats(is->t[id])->skipped_steps;
        if (trainer_step(is->t[id], &loss, err) != 0)
            return -1;
        outer_note_step(x->o, id);
        x->ids[trained] = id;
        x->mloss[trained] = loss;
        x->mskip[trained] = trainer_get_stats(is->t[id])->skipped_steps > before;
        sum += loss;
        trained++;
        out->tokens += trainer_get_stats(is->t[id])->tokens_per_step;
    }
    out->loss = trained ? sum / trained : NAN;
    out->members = trained;
    return 0;
}

static int way_steps(void *ctx, int n, job_step *out, zb_err *err)
{
    islands *x = ctx;
    assert(n == 1);
    (void)n;
    double t0 = now_s();
    memset(out, 0, sizeof *out);
    out->grad_norm = NAN;
    int rc = x->io.outer.kind == OUTER_SYNC ? step_sync(x, out, err) : step_outer(x, out, err);
    if (rc != 0)
        return -1;
    x->step++;
    out->members_after = out->members;
    out->member_id = x->ids;
    out->member_loss = x->mloss;
    out->member_skipped = x->mskip;
    for (int i = 0; i < out->members; i++)
        out->skipped |= x->mskip[i];
    out->lr = out->members ? trainer_get_stats(x->is.t[x->ids[0]])->last_lr : NAN;
    out->seconds = now_s() - t0;
    return 0;
}

/* After a step passed the job's rules: sync replicas must still agree;
 * an outer optimizer syncs when it is due. */
static int way_boundary(void *ctx, job_step *info, zb_err *err)
{
    islands *x = ctx;
    if (x->io.outer.kind == OUTER_SYNC) {
        if (!replicas_identical(&x->is, 0))
            return zb_fail(err, "islands: sync replicas diverged at step %ld", x->step - 1);
        return 0;
    }
    if (!outer_should_sync(x->o))
        return 0;
    outer_step_info oi;
    if (islands_host_sync(&x->is, TRAINER_BUF_PARAMS, err) != 0 || outer_step(x->o, &oi, err) != 0)
        return -1;
    x->eliminated += oi.eliminated;
    x->skipped_segments += oi.skipped_segments;
    info->outer_step = outer_step_count(x->o);
    return 0;
}

/* The lowest present replica's id. */
static int first_replica_id(const islands *x)
{
    int n = outer_replicas(x->o, NULL);
    assert(n > 0);
    int ids[n];
    outer_replicas(x->o, ids);
    return ids[0];
}

/* The lowest present replica: after a sync, every replica's model. */
static trainer *first_replica(islands *x)
{
    int n = outer_replicas(x->o, NULL);
    assert(n > 0); /* the last replica can never leave */
    /* outer_replicas writes every present id: room for all of them */
    int ids[n];
    outer_replicas(x->o, ids);
    return x->is.t[ids[0]];
}

static int way_eval(void *ctx, double *val, zb_err *err)
{
    islands *x = ctx;
    return trainer_eval(first_replica(x), val, err) != 0 ? -1 : 0;
}

/* The synchronized model at the end, when inner steps are pending. */
static int way_finish(void *ctx, zb_err *err)
{
    islands *x = ctx;
    if (x->io.outer.kind == OUTER_SYNC)
        return 0;
    int n = outer_replicas(x->o, NULL);
    int ids[n];
    outer_replicas(x->o, ids);
    int pending = 0;
    for (int a = 0; a < n; a++)
        pending |= outer_steps_since_sync(x->o, ids[a]) > 0;
    if (!pending)
        return 0;
    outer_step_info oi;
    if (islands_host_sync(&x->is, TRAINER_BUF_PARAMS, err) != 0 || outer_step(x->o, &oi, err) != 0)
        return -1;
    x->eliminated += oi.eliminated;
    x->skipped_segments += oi.skipped_segments;
    return 0;
}

static long way_step_count(void *ctx)
{
    const islands *x = ctx;
    return x->step;
}

/* The metrics log's counters: every present replica's rollbacks and
 * backend memory, summed (one process holds them all). */
static int way_counters(void *ctx, job_counters *out, zb_err *err)
{
    islands *x = ctx;
    (void)err;
    long rollbacks = 0;
    double bytes = 0;
    int known = 1;
    for (int id = 0; id < x->is.cap; id++) {
        trainer *t = x->is.t[id];
        if (!t)
            continue;
        rollbacks += trainer_get_stats(t)->rollbacks;
        size_t st = 0, peak = 0;
        zb_err ignored = { { 0 } }; /* memory is a figure to show, not a reason to stop */
        if (trainer_memory(t, &st, &peak, &ignored) == 0)
            bytes += (double)st;
        else
            known = 0;
    }
    out->rollbacks = rollbacks;
    out->static_bytes = known ? bytes : NAN;
    out->peak_activation_bytes = NAN; /* not summed: each replica's peak is its own */
    return 0;
}

/* Writes the islands' checkpoint through the saver that was set. */
static int way_save(void *ctx, const char *dir, zb_err *err)
{
    islands *x = ctx;
    return x->saver(x, dir, x->saver_ctx, err) != 0 ? -1 : 0;
}

void islands_way(islands *x, job_way *w)
{
    memset(w, 0, sizeof *w);
    w->ctx = x;
    w->max_batch = 1;
    w->steps = way_steps;
    w->boundary = way_boundary;
    w->eval = way_eval;
    w->finish = way_finish;
    w->step_count = way_step_count;
    w->save = x->saver ? way_save : NULL;
    w->counters = way_counters;
}

void islands_set_saver(islands *x, islands_saver saver, void *ctx)
{
    x->saver = saver;
    x->saver_ctx = ctx;
}

trainer *islands_replica(islands *x, int id)
{
    return id >= 0 && id < x->is.cap ? x->is.t[id] : NULL;
}

outer_t *islands_outer(islands *x)
{
    return x->o;
}

const islands_opts *islands_options(const islands *x)
{
    return &x->io;
}

void islands_get_progress(const islands *x, islands_progress *p)
{
    *p = (islands_progress){ x->step, x->ev, x->next_stream, x->eliminated,
                             x->skipped_segments };
}

void islands_set_progress(islands *x, const islands_progress *p)
{
    x->step = p->step;
    x->ev = p->ev;
    x->next_stream = p->next_stream;
    x->eliminated = p->eliminated;
    x->skipped_segments = p->skipped_segments;
}

int islands_checkpoint_begin(islands *x, zero1_ckpt *c, zb_err *err)
{
    memset(c, 0, sizeof *c);
    if (!x->io.zero1)
        return 0;
    return zero1_ckpt_begin(x->is.t, x->io.replicas, &x->is.l, c, err);
}

void islands_checkpoint_end(islands *x, zero1_ckpt *c, int loaded)
{
    if (x->io.zero1)
        zero1_ckpt_end(x->is.t, x->io.replicas, &x->is.l, c, loaded);
}

void islands_totals(const islands *x, islands_result *r)
{
    r->bytes_sent = outer_traffic(x->o)->bytes_sent + x->zero1_traffic.bytes_sent;
    r->optimizer_bytes = zero1_optimizer_bytes(x->is.t[first_replica_id(x)], NULL);
    r->outer_steps = outer_step_count(x->o);
    r->eliminated = x->eliminated;
    r->skipped = x->skipped_segments;
    r->final_replicas = outer_replicas(x->o, NULL);
}

int islands_run(const sched_t *s, const zb_model *m, const zb_data *d,
                const trainer_opts *base, const islands_opts *io,
                islands_result *res, zb_err *err)
{
    memset(res, 0, sizeof *res);
    islands *x = NULL;
    double t0 = now_s();
    if (islands_create(s, m, d, base, io, &x, err) != 0)
        return -1;
    job_way w;
    islands_way(x, &w);
    job_opts jo;
    job_opts_default(&jo);
    jo.steps = jo.stop_at = io->steps;
    jo.eval_every = io->eval_every;
    jo.max_skipped = io->max_skipped;
    jo.max_loss_factor = io->max_loss_factor;
    jo.hint = "try a lower --lr or --outer-lr";
    job_result jr;
    job_status st = job_run(&w, &jo, &jr, err);
    int rc = st == JOB_DONE ? 0 : -1;
    if (rc == 0) {
        res->steps = jr.n_losses;
        res->loss = malloc((size_t)jr.n_losses * sizeof *res->loss);
        res->val_loss = malloc((size_t)jr.n_losses * sizeof *res->val_loss);
        if (!res->loss || !res->val_loss)
            rc = zb_fail(err, "islands: out of memory for %ld steps", jr.n_losses);
    }
    if (rc == 0) {
        for (long i = 0; i < jr.n_losses; i++) {
            res->loss[i] = jr.losses[i];
            res->val_loss[i] = NAN;
        }
        for (int e = 0; e < jr.n_evals; e++)
            res->val_loss[jr.eval_step[e] - 1] = jr.eval_loss[e];
        res->final_val_loss = jr.val_loss;
        res->tokens = jr.tokens;
        islands_totals(x, res);
    }
    res->wall_s = now_s() - t0;
    job_result_free(&jr);
    islands_free(x);
    if (rc)
        islands_result_free(res);
    return rc;
}
