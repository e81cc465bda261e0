/*
 * vocab_exec.c: the order of the vocabulary passes (vocab_exec.h): the
 * barriers C0 and C1 as waits on counters, the head input's broadcast and
 * the hand-back of its gradient.  The arithmetic and every buffer of the
 * passes are the backend's (backend.h's vocab_* ops; on the CPU
 * kernels/cpu/backend_cpu_vocab.c): this file computes nothing.
 *
 * Per micro-batch three counters under one mutex (S passes done, T passes
 * done, X published) and the step's total of T passes; per (micro-batch,
 * shard) whether its cell is held between S and T, for the activation
 * profile.
 */
#include "runtime/vocab_exec.h"

#include <assert.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct vocab_exec {
    zb_backend *be;           /* the trainer's backend (borrowed) */
    zb_bvocab *bv;            /* its vocabulary buffers (owned) */
    int variant;              /* SCHED_VOCAB_1 or SCHED_VOCAB_2 */
    int p, m;                 /* shards (= devices), micro-batches */
    int *x_ready;             /* [m] 1 once the last stage published x */
    int *s_done, *t_done;     /* [m] S / T passes finished */
    int t_total;              /* T passes finished this step */
    unsigned char *held;      /* [m * p] 1 between a cell's S and its T */
    int aborted;              /* 1: waits fail until reset */
    const struct timespec *t0; /* the step's clock (borrowed) */
    pthread_mutex_t mu;       /* guards the counters, x_ready and aborted */
    pthread_cond_t cv;        /* broadcast on every counter change and abort */
};

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
    free(ve->held);
    pthread_mutex_destroy(&ve->mu);
    pthread_cond_destroy(&ve->cv);
    free(ve);
}

int vocab_exec_create(const sched_t *s, const zb_model *m, int batch, zb_backend *be,
                      vocab_exec **out, zb_err *err)
{
    assert(sched_has_vocab(s) && batch > 0);
    if (!be->ops->vocab_new)
        return zb_fail(err, "schedule: the %s backend does not run vocabulary-parallel passes "
                       "(S, T); generate the schedule with --vocab plain", be->ops->name);
    vocab_exec *ve = calloc(1, sizeof *ve);
    if (!ve)
        return zb_fail(err, "out of memory");
    pthread_mutex_init(&ve->mu, NULL);
    pthread_cond_init(&ve->cv, NULL);
    ve->be = be;
    ve->variant = s->vocab.variant;
    ve->p = s->n_devices;
    ve->m = s->n_micro;
    ve->x_ready = calloc((size_t)ve->m, sizeof *ve->x_ready);
    ve->s_done = calloc((size_t)ve->m, sizeof *ve->s_done);
    ve->t_done = calloc((size_t)ve->m, sizeof *ve->t_done);
    ve->held = calloc((size_t)ve->m * (size_t)ve->p, 1);
    if (!ve->x_ready || !ve->s_done || !ve->t_done || !ve->held) {
        vocab_exec_free(ve);
        return zb_fail(err, "out of memory for the vocabulary passes");
    }
    zb_vocab_shape shape = { .variant = ve->variant, .shards = ve->p, .micro = ve->m,
                             .batch = batch, .seq = m->seq_len, .d = m->d_model,
                             .vocab = m->vocab };
    if (be->ops->vocab_new(be, &shape, &ve->bv, err) != 0) {
        ve->bv = NULL;
        vocab_exec_free(ve);
        return -1;
    }
    *out = ve;
    return 0;
}

static void clear_progress(vocab_exec *ve)
{
    for (int j = 0; j < ve->m; j++) {
        ve->x_ready[j] = 0;
        ve->s_done[j] = 0;
        ve->t_done[j] = 0;
    }
    memset(ve->held, 0, (size_t)ve->m * (size_t)ve->p);
    ve->t_total = 0;
    ve->aborted = 0;
}

int vocab_exec_begin(vocab_exec *ve, zb_bstage *head_stage, size_t head_offset,
                     const int32_t *targets, const struct timespec *t0, zb_err *err)
{
    ve->t0 = t0;
    clear_progress(ve);
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

int vocab_exec_put_x(vocab_exec *ve, int dev, int mb, const void *x, zb_err *err)
{
    assert(mb >= 0 && mb < ve->m);
    /* x[mb] is only read by S and T of mb, which wait for x_ready */
    if (ve->be->ops->vocab_put_x(ve->be, ve->bv, dev, mb, x, err) != 0)
        return -1;
    bump(ve, &ve->x_ready[mb]);
    return 0;
}

int vocab_exec_s(vocab_exec *ve, int shard, int mb, double *start, double *end, zb_err *err)
{
    assert(shard >= 0 && shard < ve->p && mb >= 0 && mb < ve->m);
    if (wait_for(ve, &ve->x_ready[mb], 1, err) != 0)
        return -1;
    stamp(ve, start);
    if (ve->be->ops->vocab_s(ve->be, ve->bv, shard, mb, err) != 0)
        return -1;
    ve->held[mb * ve->p + shard] = 1;
    stamp(ve, end);
    bump(ve, &ve->s_done[mb]);
    return 0;
}

int vocab_exec_t(vocab_exec *ve, int shard, int mb, double *start, double *end, zb_err *err)
{
    assert(shard >= 0 && shard < ve->p && mb >= 0 && mb < ve->m);
    if (wait_for(ve, &ve->s_done[mb], ve->p, err) != 0) /* barrier C0 */
        return -1;
    stamp(ve, start);
    if (ve->be->ops->vocab_t(ve->be, ve->bv, shard, mb, err) != 0)
        return -1;
    ve->held[mb * ve->p + shard] = 0;
    stamp(ve, end);
    pthread_mutex_lock(&ve->mu);
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
    /* Vocab-1: barrier C0 carries dX; Vocab-2: C1 does */
    if (wait_for(ve, v1 ? &ve->s_done[mb] : &ve->t_done[mb], ve->p, err) != 0)
        return -1;
    return ve->be->ops->vocab_dx(ve->be, ve->bv, dev, mb, dloss, dx, loss, err);
}

int vocab_exec_wait_done(vocab_exec *ve, zb_err *err)
{
    return wait_for(ve, &ve->t_total, ve->m * ve->p, err);
}

double vocab_exec_held_bytes(vocab_exec *ve, int dev)
{
    if (dev < 0 || dev >= ve->p)
        return 0;
    double per = (double)ve->be->ops->vocab_cell_bytes(ve->be, ve->bv, dev), held = 0;
    for (int j = 0; j < ve->m; j++)
        if (ve->held[j * ve->p + dev])
            held += per;
    return held;
}

int vocab_exec_eval(vocab_exec *ve, zb_bstage *head_stage, size_t head_offset, const void *x,
                    const int32_t *y, int batch, double *loss, zb_err *err)
{
    return ve->be->ops->vocab_eval(ve->be, ve->bv, head_stage, head_offset, x, y, batch, loss,
                                   err);
}
