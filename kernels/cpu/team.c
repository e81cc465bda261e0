/*
 * team.c: the thread teams and per-thread scratch of team.h.
 *
 * One mutex and two condition variables per team.  A job is published by
 * bumping `gen`; every helper runs the chunk of its index and decrements
 * `pending`; the caller runs chunk 0 and waits for pending == 0.  Helpers
 * never nest jobs (they run with in_job set), so kernels inside a chunk
 * run inline.
 *
 * Scratch buffers live in thread-local slots; a pthread key's destructor
 * frees them when a worker thread exits (the main thread's are left to the
 * process exit, reachable from static TLS, so leak checkers do not flag
 * them).
 */
#include "kernels/cpu/team.h"

#include <assert.h>
#include <pthread.h>
#include <stdlib.h>

struct kern_team {
    int n;                 /* threads, the caller included */
    pthread_t *tid;        /* [n-1] helpers */
    pthread_mutex_t mu;    /* guards every field below */
    pthread_cond_t go;     /* broadcast when gen changes or stop is set */
    pthread_cond_t done;   /* signalled when pending reaches 0 */
    unsigned long gen;     /* job generation */
    int pending;           /* helpers still running the current job */
    int chunks;            /* chunks of the current job (<= n) */
    int stop;              /* 1: helpers exit */
    kern_task_fn fn;       /* the current job */
    void *arg;             /* its argument */
    int total;             /* its range [0, total) */
};

/* Per-thread state: the bound team and whether a job is running here. */
static _Thread_local kern_team *cur_team;
static _Thread_local int in_job;

/* Chunk c of `chunks` over [0, total): as even as possible, earlier
 * chunks one longer. */
static void chunk_range(int total, int chunks, int c, int *lo, int *hi)
{
    int base = total / chunks, extra = total % chunks;
    *lo = c * base + (c < extra ? c : extra);
    *hi = *lo + base + (c < extra ? 1 : 0);
}

/* One helper: index `me` in 1..n-1. */
typedef struct helper_arg {
    kern_team *t; /* its team */
    int me;       /* its chunk index */
} helper_arg;

static void *helper_main(void *p)
{
    helper_arg ha = *(helper_arg *)p;
    free(p);
    kern_team *t = ha.t;
    in_job = 1; /* a helper's kernels never split again */
    unsigned long seen = 0;
    pthread_mutex_lock(&t->mu);
    for (;;) {
        while (!t->stop && t->gen == seen)
            pthread_cond_wait(&t->go, &t->mu);
        if (t->stop)
            break;
        seen = t->gen;
        if (ha.me >= t->chunks)
            continue; /* not needed for this job; it did not count us */
        kern_task_fn fn = t->fn;
        void *arg = t->arg;
        int lo, hi;
        chunk_range(t->total, t->chunks, ha.me, &lo, &hi);
        pthread_mutex_unlock(&t->mu);
        fn(arg, lo, hi);
        pthread_mutex_lock(&t->mu);
        if (--t->pending == 0)
            pthread_cond_signal(&t->done);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

int kern_team_create(int n, kern_team **out)
{
    assert(n >= 1);
    kern_team *t = calloc(1, sizeof *t);
    if (!t)
        return -1;
    t->n = n;
    t->tid = calloc((size_t)(n > 1 ? n - 1 : 1), sizeof *t->tid);
    if (!t->tid) {
        free(t);
        return -1;
    }
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->go, NULL);
    pthread_cond_init(&t->done, NULL);
    for (int i = 1; i < n; i++) {
        helper_arg *ha = malloc(sizeof *ha);
        if (ha) {
            ha->t = t;
            ha->me = i;
        }
        if (!ha || pthread_create(&t->tid[i - 1], NULL, helper_main, ha) != 0) {
            free(ha);
            t->n = i; /* helpers 1..i-1 exist: stop exactly those */
            kern_team_free(t);
            return -1;
        }
    }
    *out = t;
    return 0;
}

void kern_team_free(kern_team *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&t->mu);
    t->stop = 1;
    pthread_cond_broadcast(&t->go);
    pthread_mutex_unlock(&t->mu);
    for (int i = 1; i < t->n; i++)
        pthread_join(t->tid[i - 1], NULL);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->go);
    pthread_cond_destroy(&t->done);
    free(t->tid);
    free(t);
}

int kern_team_size(const kern_team *t)
{
    return t ? t->n : 1;
}

void kern_team_bind(kern_team *t)
{
    cur_team = t;
}

kern_team *kern_team_current(void)
{
    return cur_team;
}

void kern_parallel(int total, int grain, kern_task_fn fn, void *arg)
{
    kern_team *t = cur_team;
    if (grain < 1)
        grain = 1;
    int chunks = t ? t->n : 1;
    if (chunks > total / grain)
        chunks = total / grain;
    if (!t || in_job || chunks < 2) {
        if (total > 0)
            fn(arg, 0, total);
        return;
    }
    pthread_mutex_lock(&t->mu);
    t->fn = fn;
    t->arg = arg;
    t->total = total;
    t->chunks = chunks;
    t->pending = chunks - 1;
    t->gen++;
    pthread_cond_broadcast(&t->go);
    pthread_mutex_unlock(&t->mu);
    int lo, hi;
    chunk_range(total, chunks, 0, &lo, &hi);
    in_job = 1;
    fn(arg, lo, hi);
    in_job = 0;
    pthread_mutex_lock(&t->mu);
    while (t->pending > 0)
        pthread_cond_wait(&t->done, &t->mu);
    pthread_mutex_unlock(&t->mu);
}

/* ---- per-thread scratch -------------------------------------------------- */

typedef struct scratch_set {
    void *buf[KERN_SCRATCH_SLOTS];    /* per slot, or NULL */
    size_t cap[KERN_SCRATCH_SLOTS];   /* bytes of buf */
} scratch_set;

static _Thread_local scratch_set scratch;
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

/* Thread exit: free the thread's buffers (the key's value is &scratch). */
static void scratch_release(void *p)
{
    scratch_set *s = p;
    for (int i = 0; i < KERN_SCRATCH_SLOTS; i++) {
        free(s->buf[i]);
        s->buf[i] = NULL;
        s->cap[i] = 0;
    }
}

static void scratch_key_init(void)
{
    pthread_key_create(&scratch_key, scratch_release);
}

void *kern_scratch(int slot, size_t bytes)
{
    assert(slot >= 0 && slot < KERN_SCRATCH_SLOTS);
    if (bytes == 0)
        bytes = 1;
    if (scratch.cap[slot] >= bytes)
        return scratch.buf[slot];
    pthread_once(&scratch_once, scratch_key_init);
    free(scratch.buf[slot]);
    scratch.buf[slot] = malloc(bytes);
    scratch.cap[slot] = scratch.buf[slot] ? bytes : 0;
    if (scratch.buf[slot])
        pthread_setspecific(scratch_key, &scratch);
    return scratch.buf[slot];
}
