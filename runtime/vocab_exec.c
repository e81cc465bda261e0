/*
 * vocab_exec.c: the order of the vocabulary passes (vocab_exec.h): the
 * barriers C0 and C1 as waits on counters, the head input's broadcast and
 * the hand-back of its gradient.  The arithmetic and every buffer of the
 * passes are the backend's (backend.h's vocab_* ops; on the CPU
 * kernels/cpu/backend_cpu_vocab.c): this file computes nothing.
 *
 * Per micro-batch three counters under one mutex (S passes done, T passes
 * done, X published) and the total of T passes, cumulative over the steps
 * of a trainer_steps batch, and per (device, micro-batch) how many of its
 * S and T it has run: a pass waits for the counter to pass what its own
 * step needs, so the last stage's worker can begin the next step while
 * other devices are anywhere in theirs (no barrier between steps).  Per
 * (micro-batch, shard) what its cell holds (between S and T; the last
 * stage's own partial until its B sums them), for the activation profile.
 *
 * Across processes (a link, runtime/vocab_link.h) the process runs one
 * device, and the counters' waits become the link's receives: S receives
 * X, the first T or dx of a micro-batch receives every shard's statistics
 * (barrier C0), dx the partials (C0 or C1), and the last stage's device
 * receives every shard's head-gradient columns before its optimizer step
 * (vocab_exec_finish).  Only the device's own worker talks to the link
 * during a step, so the per-micro-batch flags need no lock.
 */
#include "runtime/vocab_exec.h"

#include <assert.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct vocab_exec {
    zb_backend *be;           /* the trainer's backend (borrowed) */
    zb_bvocab *bv;            /* its vocabulary buffers (owned) */
    int variant;              /* SCHED_VOCAB_1 or SCHED_VOCAB_2 */
    int p, m;                 /* shards (= devices), micro-batches */
    int bv_d, bv_vocab;       /* model width, vocabulary: the head is [bv_d, bv_vocab] */
    size_t x_bytes;           /* one head input (or partial): [B·T, d] fp32 */
    /* Counters since the last begin/reset, cumulative over the steps of a
     * trainer_steps batch (a device may reach step i+1's S before the
     * last stage's device has begun that step: it waits for one more X
     * than it has used, not for a flag a reset would race with) */
    int *x_ready;             /* [m] head inputs published */
    int *s_done, *t_done;     /* [m] S / T passes finished */
    int t_total;              /* T passes finished */
    int *s_seen, *t_seen;     /* [p * m] S / T passes of (device, mb) run (that device's worker) */
    int *dx_seen;             /* [m] dX taken (the last stage's worker) */
    int fin_seen;             /* steps finished (the last stage's worker) */
    unsigned char *held;      /* [m * p] HELD_* bits of each cell, for the profile */
    int aborted;              /* 1: waits fail until reset */
    int last_dev;             /* the device of the last stage (it sums dX, steps the head) */
    zb_vocab_link *link;      /* across processes: the carrier (owned); NULL in one */
    void *wire;               /* link: one message's bytes (the device's worker only) */
    unsigned char *have_stats; /* link: [m] every shard's statistics of mb are here */
    const struct timespec *t0; /* the step's clock (borrowed) */
    pthread_mutex_t mu;       /* guards the counters, x_ready and aborted */
    pthread_cond_t cv;        /* broadcast on every counter change and abort */
};

/* What a cell holds (held[] bits). */
enum { HELD_CELL = 1, HELD_PARTIAL = 2 }; /* logits + statistics + X from S to T; the partial */

static double ms_since(const struct timespec *t0)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - t0->tv_sec) * 1e3 + (double)(now.tv_nsec - t0->tv_nsec) * 1e-6;
}

static void stamp(const vocab_exec *ve, double *at)
{
    if (at && ve->t0)
        *at = ms_since(ve->t0);
}

void vocab_exec_free(vocab_exec *ve)
{
    if (!ve)
        return;
    if (ve->bv && ve->be->ops->vocab_free)
        ve->be->ops->vocab_free(ve->be, ve->bv);
    free(ve->x_ready);
    free(ve->s_done);
    free(ve->t_done);
    free(ve->s_seen);
    free(ve->t_seen);
    free(ve->dx_seen);
    free(ve->held);
    free(ve->wire);
    free(ve->have_stats);
    vocab_link_free(ve->link);
    pthread_mutex_destroy(&ve->mu);
    pthread_cond_destroy(&ve->cv);
    free(ve);
}

int vocab_exec_create(const sched_t *s, const zb_model *m, int batch, zb_backend *be,
                      zb_vocab_link *link, vocab_exec **out, zb_err *err)
{
    assert(sched_has_vocab(s) && batch > 0);
    if (!be->ops->vocab_new) {
        vocab_link_free(link);
        return zb_fail(err, "schedule: the %s backend does not run vocabulary-parallel passes "
                       "(S, T); generate the schedule with --vocab plain", be->ops->name);
    }
    if (link && (!be->ops->vocab_export || !be->ops->vocab_import || !be->ops->host)) {
        vocab_link_free(link);
        return zb_fail(err, "schedule: the %s backend cannot hand vocabulary passes' results "
                       "to other processes; generate the schedule with --vocab plain",
                       be->ops->name);
    }
    vocab_exec *ve = calloc(1, sizeof *ve);
    if (!ve) {
        vocab_link_free(link);
        return zb_fail(err, "out of memory");
    }
    ve->link = link;
    ve->last_dev = s->stage_device[s->n_stages - 1];
    pthread_mutex_init(&ve->mu, NULL);
    pthread_cond_init(&ve->cv, NULL);
    ve->be = be;
    ve->variant = s->vocab.variant;
    ve->p = s->n_devices;
    ve->m = s->n_micro;
    ve->bv_d = m->d_model;
    ve->bv_vocab = m->vocab;
    ve->x_bytes = sizeof(float) * (size_t)batch * (size_t)m->seq_len * (size_t)m->d_model;
    ve->x_ready = calloc((size_t)ve->m, sizeof *ve->x_ready);
    ve->s_done = calloc((size_t)ve->m, sizeof *ve->s_done);
    ve->t_done = calloc((size_t)ve->m, sizeof *ve->t_done);
    ve->s_seen = calloc((size_t)ve->m * (size_t)ve->p, sizeof *ve->s_seen);
    ve->t_seen = calloc((size_t)ve->m * (size_t)ve->p, sizeof *ve->t_seen);
    ve->dx_seen = calloc((size_t)ve->m, sizeof *ve->dx_seen);
    ve->held = calloc((size_t)ve->m * (size_t)ve->p, 1);
    if (!ve->x_ready || !ve->s_done || !ve->t_done || !ve->held || !ve->s_seen || !ve->t_seen
        || !ve->dx_seen) {
        vocab_exec_free(ve);
        return zb_fail(err, "out of memory for the vocabulary passes");
    }
    zb_vocab_shape shape = { .variant = ve->variant, .shards = ve->p, .micro = ve->m,
                             .batch = batch, .seq = m->seq_len, .d = m->d_model,
                             .vocab = m->vocab, .local = link ? link->me : -1 };
    if (be->ops->vocab_new(be, &shape, &ve->bv, err) != 0) {
        ve->bv = NULL;
        vocab_exec_free(ve);
        return -1;
    }
    if (link) { /* the largest message: X, a partial, a shard's statistics or columns */
        size_t big = sizeof(float) * (size_t)batch * (size_t)m->seq_len * (size_t)m->d_model;
        for (int k = 0; k < ve->p; k++)
            for (int part = ZB_VOCAB_WIRE_STATS; part <= ZB_VOCAB_WIRE_DW; part++) {
                size_t n = be->ops->vocab_wire_bytes(be, ve->bv, (zb_vocab_wire)part, k);
                big = n > big ? n : big;
            }
        ve->wire = malloc(big);
        ve->have_stats = calloc((size_t)ve->m, 1);
        if (!ve->wire || !ve->have_stats) {
            vocab_exec_free(ve);
            return zb_fail(err, "out of memory for the vocabulary passes' messages");
        }
    }
    *out = ve;
    return 0;
}

/* Back to nothing (under mu: other workers' profiles read held[]). */
static void clear_progress(vocab_exec *ve)
{
    pthread_mutex_lock(&ve->mu);
    for (int j = 0; j < ve->m; j++) {
        ve->x_ready[j] = 0;
        ve->s_done[j] = 0;
        ve->t_done[j] = 0;
        ve->dx_seen[j] = 0;
    }
    memset(ve->held, 0, (size_t)ve->m * (size_t)ve->p);
    if (ve->have_stats)
        memset(ve->have_stats, 0, (size_t)ve->m);
    memset(ve->s_seen, 0, sizeof *ve->s_seen * (size_t)ve->m * (size_t)ve->p);
    memset(ve->t_seen, 0, sizeof *ve->t_seen * (size_t)ve->m * (size_t)ve->p);
    ve->t_total = 0;
    ve->fin_seen = 0;
    ve->aborted = 0;
    pthread_mutex_unlock(&ve->mu);
}

int vocab_exec_begin(vocab_exec *ve, zb_bstage *head_stage, size_t head_offset,
                     const int32_t *targets, const struct timespec *t0, int mid_batch,
                     zb_err *err)
{
    assert(!mid_batch || !ve->link);
    ve->t0 = t0;
    if (!mid_batch)
        clear_progress(ve);
    if (ve->link) { /* the head is current on the last stage's device only */
        float *head = ve->be->ops->host(ve->be, head_stage, ZB_BUF_PARAMS) + head_offset;
        size_t n = (size_t)ve->bv_d * (size_t)ve->bv_vocab;
        if (ve->link->ops->bcast(ve->link, ve->last_dev, head, n, err) != 0)
            return -1;
    }
    return ve->be->ops->vocab_begin(ve->be, ve->bv, head_stage, head_offset, targets, err);
}

void vocab_exec_reset(vocab_exec *ve)
{
    clear_progress(ve);
}

void vocab_exec_abort(vocab_exec *ve)
{
    pthread_mutex_lock(&ve->mu);
    ve->aborted = 1;
    pthread_cond_broadcast(&ve->cv);
    pthread_mutex_unlock(&ve->mu);
}

/* Waits until *counter >= goal.  0, or -1 with err "aborted". */
static int wait_for(vocab_exec *ve, const int *counter, int goal, zb_err *err)
{
    pthread_mutex_lock(&ve->mu);
    while (*counter < goal && !ve->aborted)
        pthread_cond_wait(&ve->cv, &ve->mu);
    int ok = *counter >= goal;
    pthread_mutex_unlock(&ve->mu);
    return ok ? 0 : zb_fail(err, "aborted");
}

/* Adds one to *counter and wakes every waiter. */
static void bump(vocab_exec *ve, int *counter)
{
    pthread_mutex_lock(&ve->mu);
    (*counter)++;
    pthread_cond_broadcast(&ve->cv);
    pthread_mutex_unlock(&ve->mu);
}

/* link: sends `part` of shard `shard`'s cell mb (exported into the wire
 * buffer) to device `to`, or to every other device when to < 0. */
static int send_part(vocab_exec *ve, zb_vocab_wire part, vocab_msg kind, int shard, int mb,
                     int to, zb_err *err)
{
    zb_backend *be = ve->be;
    size_t n = be->ops->vocab_wire_bytes(be, ve->bv, part, shard);
    if (be->ops->vocab_export(be, ve->bv, part, shard, mb, ve->wire, err) != 0)
        return -1;
    for (int e = 0; e < ve->p; e++)
        if (e != ve->link->me && (to < 0 || e == to)
            && ve->link->ops->send(ve->link, e, kind, mb, ve->wire, n, err) != 0)
            return -1;
    return 0;
}

/* link: receives `part` of every other shard's cell mb from its device
 * and hands it to the backend. */
static int recv_parts(vocab_exec *ve, zb_vocab_wire part, vocab_msg kind, int mb, zb_err *err)
{
    zb_backend *be = ve->be;
    for (int e = 0; e < ve->p; e++) {
        if (e == ve->link->me)
            continue;
        size_t n = be->ops->vocab_wire_bytes(be, ve->bv, part, e);
        if (ve->link->ops->recv(ve->link, e, kind, mb, ve->wire, n, err) != 0
            || be->ops->vocab_import(be, ve->bv, part, e, mb, ve->wire, err) != 0)
            return -1;
    }
    return 0;
}

/* link: barrier C0 of mb as seen here: every shard's statistics, once. */
static int have_stats(vocab_exec *ve, int mb, zb_err *err)
{
    if (ve->have_stats[mb])
        return 0;
    if (recv_parts(ve, ZB_VOCAB_WIRE_STATS, VOCAB_MSG_STATS, mb, err) != 0)
        return -1;
    ve->have_stats[mb] = 1;
    return 0;
}

/* Clears then sets bits of cell (mb, shard)'s held[] (under mu: the last
 * stage's dx clears other devices' partial bits). */
static void mark(vocab_exec *ve, int mb, int shard, int clear, int set)
{
    pthread_mutex_lock(&ve->mu);
    unsigned char *h = &ve->held[mb * ve->p + shard];
    *h = (unsigned char)((*h & ~clear) | set);
    pthread_mutex_unlock(&ve->mu);
}

int vocab_exec_put_x(vocab_exec *ve, int dev, int mb, const void *x, zb_err *err)
{
    assert(mb >= 0 && mb < ve->m);
    /* x[mb] is only read by S and T of mb, which wait for x_ready */
    if (ve->be->ops->vocab_put_x(ve->be, ve->bv, dev, mb, x, err) != 0)
        return -1;
    if (ve->link) /* the broadcast: a CPU activation is host memory */
        for (int e = 0; e < ve->p; e++)
            if (e != ve->link->me
                && ve->link->ops->send(ve->link, e, VOCAB_MSG_X, mb, x, ve->x_bytes, err) != 0)
                return -1;
    bump(ve, &ve->x_ready[mb]);
    return 0;
}

int vocab_exec_s(vocab_exec *ve, int shard, int mb, double *start, double *end, zb_err *err)
{
    assert(shard >= 0 && shard < ve->p && mb >= 0 && mb < ve->m);
    assert(!ve->link || shard == ve->link->me);
    if (ve->link && shard != ve->last_dev) {
        if (ve->link->ops->recv(ve->link, ve->last_dev, VOCAB_MSG_X, mb, ve->wire, ve->x_bytes,
                                err) != 0
            || ve->be->ops->vocab_put_x(ve->be, ve->bv, shard, mb, ve->wire, err) != 0)
            return -1;
    } else if (wait_for(ve, &ve->x_ready[mb], ve->s_seen[shard * ve->m + mb] + 1, err) != 0) {
        return -1;
    }
    stamp(ve, start);
    if (ve->be->ops->vocab_s(ve->be, ve->bv, shard, mb, err) != 0)
        return -1;
    int v1 = ve->variant == SCHED_VOCAB_1;
    /* a partial counts on its device while it is there: the last stage's
     * own until its B sums it, another device's only during its pass (it
     * leaves at once across processes) */
    int keeps = shard == ve->last_dev;
    mark(ve, mb, shard, 0, HELD_CELL | (v1 && keeps ? HELD_PARTIAL : 0));
    stamp(ve, end);
    if (ve->link) {
        if (send_part(ve, ZB_VOCAB_WIRE_STATS, VOCAB_MSG_STATS, shard, mb, -1, err) != 0)
            return -1;
        if (v1 && shard != ve->last_dev /* Vocab-1's partial joins C0 on the last stage */
            && send_part(ve, ZB_VOCAB_WIRE_PARTIAL, VOCAB_MSG_PARTIAL, shard, mb, ve->last_dev,
                         err) != 0)
            return -1;
    }
    ve->s_seen[shard * ve->m + mb]++;
    bump(ve, &ve->s_done[mb]);
    return 0;
}

int vocab_exec_t(vocab_exec *ve, int shard, int mb, double *start, double *end, zb_err *err)
{
    assert(shard >= 0 && shard < ve->p && mb >= 0 && mb < ve->m);
    assert(!ve->link || shard == ve->link->me);
    if (ve->link ? have_stats(ve, mb, err) != 0
                 : wait_for(ve, &ve->s_done[mb], ve->p * (ve->t_seen[shard * ve->m + mb] + 1),
                            err) != 0) /* barrier C0 */
        return -1;
    stamp(ve, start);
    if (ve->be->ops->vocab_t(ve->be, ve->bv, shard, mb, err) != 0)
        return -1;
    int v2 = ve->variant == SCHED_VOCAB_2;
    mark(ve, mb, shard, HELD_CELL, v2 && shard == ve->last_dev ? HELD_PARTIAL : 0);
    stamp(ve, end);
    if (ve->link && v2 && shard != ve->last_dev /* Vocab-2's partial: barrier C1 */
        && send_part(ve, ZB_VOCAB_WIRE_PARTIAL, VOCAB_MSG_PARTIAL, shard, mb, ve->last_dev,
                     err) != 0)
        return -1;
    pthread_mutex_lock(&ve->mu);
    ve->t_seen[shard * ve->m + mb]++;
    ve->t_done[mb]++;
    ve->t_total++;
    pthread_cond_broadcast(&ve->cv);
    pthread_mutex_unlock(&ve->mu);
    return 0;
}

int vocab_exec_take_dx(vocab_exec *ve, int dev, int mb, float dloss, void *dx, float *loss,
                       zb_err *err)
{
    assert(mb >= 0 && mb < ve->m);
    int v1 = ve->variant == SCHED_VOCAB_1;
    if (ve->link) {
        assert(dev == ve->link->me && dev == ve->last_dev);
        if (have_stats(ve, mb, err) != 0
            || recv_parts(ve, ZB_VOCAB_WIRE_PARTIAL, VOCAB_MSG_PARTIAL, mb, err) != 0)
            return -1;
    } else if (wait_for(ve, v1 ? &ve->s_done[mb] : &ve->t_done[mb],
                        ve->p * (ve->dx_seen[mb] + 1), err) != 0) {
        return -1; /* Vocab-1: barrier C0 carries dX; Vocab-2: C1 does */
    }
    if (ve->be->ops->vocab_dx(ve->be, ve->bv, dev, mb, dloss, dx, loss, err) != 0)
        return -1;
    ve->dx_seen[mb]++;
    mark(ve, mb, dev, HELD_PARTIAL, 0); /* the partials are summed and freed */
    return 0;
}

int vocab_exec_finish(vocab_exec *ve, int dev, zb_err *err)
{
    if (!ve->link) {
        if (dev != ve->last_dev)
            return 0;
        if (wait_for(ve, &ve->t_total, ve->m * ve->p * (ve->fin_seen + 1), err) != 0)
            return -1;
        ve->fin_seen++;
        return 0;
    }
    assert(dev == ve->link->me);
    if (dev != ve->last_dev) /* this shard's T passes are over: its columns */
        return send_part(ve, ZB_VOCAB_WIRE_DW, VOCAB_MSG_DW, dev, 0, ve->last_dev, err);
    return recv_parts(ve, ZB_VOCAB_WIRE_DW, VOCAB_MSG_DW, 0, err);
}

double vocab_exec_held_bytes(vocab_exec *ve, int dev)
{
    if (dev < 0 || dev >= ve->p)
        return 0;
    double per = (double)ve->be->ops->vocab_cell_bytes(ve->be, ve->bv, dev), held = 0;
    pthread_mutex_lock(&ve->mu); /* dx clears other devices' partial bits */
    for (int j = 0; j < ve->m; j++) {
        unsigned char h = ve->held[j * ve->p + dev];
        held += ((h & HELD_CELL) ? per : 0) + ((h & HELD_PARTIAL) ? (double)ve->x_bytes : 0);
    }
    pthread_mutex_unlock(&ve->mu);
    return held;
}

int vocab_exec_eval(vocab_exec *ve, zb_bstage *head_stage, size_t head_offset, const void *x,
                    const int32_t *y, int batch, double *loss, zb_err *err)
{
    return ve->be->ops->vocab_eval(ve->be, ve->bv, head_stage, head_offset, x, y, batch, loss,
                                   err);
}
