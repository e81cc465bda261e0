/*
 * backend_cpu_vocab.c: the CPU backend's vocabulary passes (backend.h's
 * vocab_* ops) over kernels/cpu/vocab_shard.h: the arithmetic of S, T and
 * the barriers' combines, and every buffer they keep.  When and in which
 * order they run is the executor's (runtime/vocab_exec.h); nothing here
 * waits.
 *
 * LIFETIMES.  A step at the default shape (64 micro-batches of 8,192
 * tokens, shards of 16,032 entries) would need 33.6 GB a device if every
 * cell kept its logits for the whole step, so each buffer lives only as
 * long as some pass still reads it, and comes back to a free list from
 * which the next user takes it (after the first steps nothing is
 * allocated, as with the trainer's saved states):
 *
 *   logits [N, v]   S(k, j) to T(k, j), where they become the logit
 *                   gradient in place; shard k's free list (only device
 *                   k's worker touches it: no lock);
 *   partial [N, d]  the input-gradient partial: Vocab-1 from S(k, j),
 *                   Vocab-2 from T(k, j), to the last stage's dx(j), which
 *                   sums every shard's; one shared free list;
 *   x [N, d]        micro-batch j's head input, from put_x(j) to the last
 *                   T(·, j) run in this process; one shared free list;
 *   statistics      row max, row sum, target logit (16 bytes a row): kept
 *                   per cell for the step (every T(·, j) and dx(j) read
 *                   all shards' of j; 1 MB a device at the default shape).
 *
 * The shared lists and the per-micro-batch count of T passes still to run
 * are under one mutex, taken once per buffer hand-over, never during
 * arithmetic.  The bytes a device holds at each point are what
 * src/cost_vocab.c prices and runtime/vocab_exec.c reports to the trace.
 *
 * Per shard: its copy of the head's columns, gathered at the start of each
 * step (parameters change only between steps), its weight-gradient
 * scratch and Vocab-1's local-softmax scratch.  A T that runs ahead of
 * micro-batch order keeps its weight gradient in a buffer of its own until
 * its turn, as the executor's W does.
 *
 * One shard per process (shape.local = k >= 0, runtime/vocab_link.h):
 * only shard k's S and T run here; the other shards' statistics and (on
 * the last stage's process) partials arrive through vocab_import into the
 * same cells, and the shards' head-gradient columns through the DW part.
 *
 * Threading (the executor's): S and T of shard k on device k's worker,
 * put_x and dx on the last stage's; a T reads every shard's statistics of
 * its micro-batch only after barrier C0, dx every partial only after C0 or
 * C1.  begin between steps, while no pass runs (on the trainer's thread,
 * or inside a batch of steps on the last stage's worker), eval on the
 * trainer's thread while no worker runs.
 */
#include "kernels/cpu/backend_cpu_vocab.h"

#include <assert.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/backend_cpu_impl.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/vocab_shard.h"
#include "src/mem_ledger.h"
#include "src/sched.h"

/* One shard's work on one micro-batch. */
typedef struct cv_cell {
    float *logits;   /* [N, v] logits after S; the logit gradient after T; NULL
                      * outside S..T (back on the shard's free list) */
    float *row_max;  /* [N] local row max (kept for the step) */
    double *row_sum; /* [N] local Σ exp(logit - row_max) */
    float *tgt;      /* [N] target logit where the target is in the shard, else 0 */
    float *partial;  /* [N, d] input-gradient partial; NULL when not held */
} cv_cell;

/* A stack of same-sized free buffers. */
typedef struct cv_list {
    float **buf; /* [cap] */
    int n, cap;  /* held, capacity */
} cv_list;

/* One shard: its copy of the head's columns and its scratch. */
typedef struct cv_shard {
    int v0, v;        /* columns [v0, v0+v) of the head */
    float *w;         /* [d, v] this step's copy of those columns */
    float *scratch;   /* [N, v] Vocab-1's local softmax (NULL for Vocab-2) */
    float *lse;       /* [N] global log-sum-exp, recomputed by each T */
    float *dw;        /* [d, v] one T's weight gradient */
    float **dw_ahead; /* [m] gradients of T passes that ran ahead of order */
    int next_t;       /* next micro-batch whose dW goes into the head gradient */
    cv_list logits;   /* free [N, v] logits buffers (this shard's worker only) */
} cv_shard;

/* The backend's zb_bvocab. */
typedef struct cpu_vocab {
    mem_ledger *ledger;     /* the CPU backend's (its ops->ledger), charged with every
                             * buffer below; NULL: none */
    zb_vocab_shape shape;   /* as vocab_new got it */
    int N;                  /* rows per micro-batch, B*T */
    cv_shard *shard;        /* [p] */
    cv_cell *cell;          /* [m * p] */
    float **x;              /* [m] head input of each micro-batch, [N, d]; NULL when not held */
    int *x_dev;             /* [m] the device x[j] is charged to (put_x's) */
    int *t_left;            /* [m] T passes of the micro-batch this process has still to run */
    cv_list free_x;         /* free [N, d] head inputs (under mu) */
    cv_list free_partial;   /* free [N, d] partials (under mu) */
    pthread_mutex_t mu;     /* guards free_x, free_partial, t_left and x[] hand-overs */
    const int32_t *targets; /* [m][N] this step's targets (borrowed) */
    float *head_grad;       /* [d, V] the head's gradient (the stage's buffer) */
    float *dx_lse;          /* [N] dx's scratch (the last stage's worker only; made by
                             * the first dx, which knows the device to charge) */
    double **dx_weight;     /* [p] of [N] Vocab-1 rescale weights (dx's scratch, as dx_lse) */
    int dx_dev;             /* the device dx's scratch is charged to; -1 before the first dx */
} cpu_vocab;

#define CV(v) ((cpu_vocab *)(v))

/* THE LEDGER.  Every buffer below is charged to the memory ledger
 * (src/mem_ledger.h) while it is in use, on the device that holds it,
 * and released when it goes back to a free list or is freed: a free
 * list's idle buffers are not charged (as the activation pool's are not),
 * so a class's peak is the peak in use.  The classes (docs/cost-model.md,
 * "Buffer classes"):
 *
 *   vocab_cells   each shard's copy of the head's columns and its dW, a
 *                 cell's logits (S to T) and statistics (from its first S,
 *                 kept), its partial (S or T to dx) and the dW of a T run
 *                 ahead of micro-batch order: on the shard's device;
 *   comm_buffers  the head input X(j), the last stage's broadcast to the
 *                 shards: on the device that put it, from put_x to the
 *                 last T of j;
 *   workspace     Vocab-1's local softmax and each T's lse (the shard's
 *                 device), dx's lse and rescale weights (dx's device).
 *
 * In one process shard k is device k; across processes (shape.local >= 0)
 * everything this process holds is its one device's.  The evaluation's
 * buffers (cpu_vocab_eval, on the trainer's thread between steps, freed
 * before it returns) are not charged, as the trainer's evaluation
 * activations are not. */

/* The device that holds shard k's buffers in this process. */
static int holder(const cpu_vocab *cv, int k)
{
    return cv->shape.local >= 0 ? cv->shape.local : k;
}

/* Bytes of one [N, v_k] logits buffer of shard k. */
static size_t logits_bytes(const cpu_vocab *cv, int k)
{
    return sizeof(float) * (size_t)cv->N * (size_t)cv->shard[k].v;
}

/* Bytes of one [N, d] head input or partial. */
static size_t rows_bytes(const cpu_vocab *cv)
{
    return sizeof(float) * (size_t)cv->N * (size_t)cv->shape.d;
}

/* Bytes of one [d, v_k] copy of shard k's columns (or of their dW). */
static size_t columns_bytes(const cpu_vocab *cv, int k)
{
    return sizeof(float) * (size_t)cv->shape.d * (size_t)cv->shard[k].v;
}

/* Bytes of one cell's statistics: row max, row sum (fp64), target logit. */
static size_t stats_bytes(const cpu_vocab *cv)
{
    return (size_t)cv->N * (2 * sizeof(float) + sizeof(double));
}

/* Bytes of dx's scratch: lse and p rows of rescale weights. */
static size_t dx_scratch_bytes(const cpu_vocab *cv)
{
    return (size_t)cv->N * (sizeof(float) + (size_t)cv->shape.shards * sizeof(double));
}

/* A buffer of n floats from list l (or a new one); NULL when out of memory. */
static float *list_take(cv_list *l, size_t n)
{
    return l->n > 0 ? l->buf[--l->n] : malloc(sizeof(float) * n);
}

/* Gives b back to l (frees it when l is full; NULL is fine). */
static void list_give(cv_list *l, float *b)
{
    if (!b)
        return;
    if (l->n < l->cap)
        l->buf[l->n++] = b;
    else
        free(b);
}

static void list_free(cv_list *l)
{
    for (int i = 0; i < l->n; i++)
        free(l->buf[i]);
    free(l->buf);
    l->buf = NULL;
    l->n = l->cap = 0;
}

/* Under mu: a shared list's buffer, and its return. */
static float *shared_take(cpu_vocab *cv, cv_list *l)
{
    pthread_mutex_lock(&cv->mu);
    float *b = list_take(l, (size_t)cv->N * (size_t)cv->shape.d);
    pthread_mutex_unlock(&cv->mu);
    return b;
}

static void shared_give(cpu_vocab *cv, cv_list *l, float *b)
{
    pthread_mutex_lock(&cv->mu);
    list_give(l, b);
    pthread_mutex_unlock(&cv->mu);
}

/* Shard k's logits buffer from its free list, charged to its holder
 * (shard k's worker only); NULL when out of memory. */
static float *logits_take(cpu_vocab *cv, int k)
{
    float *b = list_take(&cv->shard[k].logits, (size_t)cv->N * (size_t)cv->shard[k].v);
    if (b)
        mem_ledger_charge(cv->ledger, holder(cv, k), MEM_VOCAB, logits_bytes(cv, k));
    return b;
}

/* Gives logits buffer b of shard k back (NULL is fine). */
static void logits_give(cpu_vocab *cv, int k, float *b)
{
    if (!b)
        return;
    mem_ledger_release(cv->ledger, holder(cv, k), MEM_VOCAB, logits_bytes(cv, k));
    list_give(&cv->shard[k].logits, b);
}

/* A partial for a cell of shard k, charged to its holder; NULL when out
 * of memory. */
static float *partial_take(cpu_vocab *cv, int k)
{
    float *b = shared_take(cv, &cv->free_partial);
    if (b)
        mem_ledger_charge(cv->ledger, holder(cv, k), MEM_VOCAB, rows_bytes(cv));
    return b;
}

/* Gives partial b of a cell of shard k back (NULL is fine). */
static void partial_give(cpu_vocab *cv, int k, float *b)
{
    if (!b)
        return;
    mem_ledger_release(cv->ledger, holder(cv, k), MEM_VOCAB, rows_bytes(cv));
    shared_give(cv, &cv->free_partial, b);
}

void cpu_vocab_free(zb_backend *be, zb_bvocab *bv)
{
    (void)be;
    cpu_vocab *cv = CV(bv);
    if (!cv)
        return;
    int p = cv->shape.shards, m = cv->shape.micro;
    /* what is still charged goes back to the ledger first (the shards'
     * sizes are known once cv->shard is) */
    for (int i = 0; cv->cell && cv->shard && i < m * p; i++) {
        int k = i % p, dev = holder(cv, k);
        if (cv->cell[i].logits)
            mem_ledger_release(cv->ledger, dev, MEM_VOCAB, logits_bytes(cv, k));
        if (cv->cell[i].partial)
            mem_ledger_release(cv->ledger, dev, MEM_VOCAB, rows_bytes(cv));
        if (cv->cell[i].row_max)
            mem_ledger_release(cv->ledger, dev, MEM_VOCAB, stats_bytes(cv));
    }
    for (int k = 0; cv->shard && k < p; k++) {
        cv_shard *sh = &cv->shard[k];
        int dev = holder(cv, k);
        if (sh->w)
            mem_ledger_release(cv->ledger, dev, MEM_VOCAB, columns_bytes(cv, k));
        if (sh->dw)
            mem_ledger_release(cv->ledger, dev, MEM_VOCAB, columns_bytes(cv, k));
        if (sh->scratch)
            mem_ledger_release(cv->ledger, dev, MEM_WORKSPACE, logits_bytes(cv, k));
        if (sh->lse)
            mem_ledger_release(cv->ledger, dev, MEM_WORKSPACE, sizeof(float) * (size_t)cv->N);
        for (int j = 0; sh->dw_ahead && j < m; j++)
            if (sh->dw_ahead[j])
                mem_ledger_release(cv->ledger, dev, MEM_VOCAB, columns_bytes(cv, k));
    }
    for (int j = 0; cv->x && cv->x_dev && j < m; j++)
        if (cv->x[j])
            mem_ledger_release(cv->ledger, cv->x_dev[j], MEM_COMM, rows_bytes(cv));
    if (cv->dx_dev >= 0)
        mem_ledger_release(cv->ledger, cv->dx_dev, MEM_WORKSPACE, dx_scratch_bytes(cv));
    if (cv->cell)
        for (int i = 0; i < m * p; i++) {
            free(cv->cell[i].logits);
            free(cv->cell[i].row_max);
            free(cv->cell[i].row_sum);
            free(cv->cell[i].tgt);
            free(cv->cell[i].partial);
        }
    if (cv->shard)
        for (int k = 0; k < p; k++) {
            cv_shard *sh = &cv->shard[k];
            free(sh->w);
            free(sh->scratch);
            free(sh->lse);
            free(sh->dw);
            if (sh->dw_ahead)
                for (int j = 0; j < m; j++)
                    free(sh->dw_ahead[j]);
            free(sh->dw_ahead);
            list_free(&sh->logits);
        }
    if (cv->x)
        for (int j = 0; j < m; j++)
            free(cv->x[j]);
    if (cv->dx_weight)
        for (int k = 0; k < p; k++)
            free(cv->dx_weight[k]);
    list_free(&cv->free_x);
    list_free(&cv->free_partial);
    pthread_mutex_destroy(&cv->mu);
    free(cv->dx_weight);
    free(cv->dx_lse);
    free(cv->x);
    free(cv->x_dev);
    free(cv->t_left);
    free(cv->cell);
    free(cv->shard);
    free(cv);
}

/* 1 when shard k's S and T run in this process. */
static int runs_here(const cpu_vocab *cv, int k)
{
    return cv->shape.local < 0 || cv->shape.local == k;
}

int cpu_vocab_new(zb_backend *be, const zb_vocab_shape *shape, zb_bvocab **out, zb_err *err)
{
    assert(shape->shards > 0 && shape->micro > 0 && shape->batch > 0);
    assert(shape->local >= -1 && shape->local < shape->shards);
    if (shape->vocab < shape->shards)
        return zb_fail(err, "a vocabulary of %d entries cannot be split over %d devices",
                       shape->vocab, shape->shards);
    cpu_vocab *cv = calloc(1, sizeof *cv);
    if (!cv)
        return zb_fail(err, "out of memory for the vocabulary shards");
    pthread_mutex_init(&cv->mu, NULL);
    cv->ledger = be->ops->ledger ? be->ops->ledger(be) : NULL;
    cv->dx_dev = -1;
    cv->shape = *shape;
    cv->N = shape->batch * shape->seq;
    int p = shape->shards, m = shape->micro;
    size_t N = (size_t)cv->N, d = (size_t)shape->d;
    int v1 = shape->variant == SCHED_VOCAB_1;
    cv->shard = calloc((size_t)p, sizeof *cv->shard);
    cv->cell = calloc((size_t)m * (size_t)p, sizeof *cv->cell);
    cv->x = calloc((size_t)m, sizeof *cv->x);
    cv->x_dev = calloc((size_t)m, sizeof *cv->x_dev);
    cv->t_left = calloc((size_t)m, sizeof *cv->t_left);
    cv->dx_weight = calloc((size_t)p, sizeof *cv->dx_weight);
    /* at most every micro-batch's buffer is out at once */
    cv->free_x.buf = calloc((size_t)m, sizeof(float *));
    cv->free_partial.buf = calloc((size_t)m * (size_t)p, sizeof(float *));
    cv->free_x.cap = m;
    cv->free_partial.cap = m * p;
    int oom = !cv->shard || !cv->cell || !cv->x || !cv->x_dev || !cv->t_left || !cv->dx_weight
              || !cv->free_x.buf || !cv->free_partial.buf;
    for (int k = 0; k < p && !oom; k++) {
        cv_shard *sh = &cv->shard[k];
        sh->v0 = vshard_begin(k, p, shape->vocab);
        sh->v = vshard_begin(k + 1, p, shape->vocab) - sh->v0;
        size_t v = (size_t)sh->v;
        int here = runs_here(cv, k);
        /* every process copies every shard's columns: Vocab-1's dx reads
         * the target's column of whichever shard owns it */
        sh->w = malloc(sizeof(float) * d * v);
        sh->scratch = v1 && here ? malloc(sizeof(float) * N * v) : NULL;
        sh->lse = here ? malloc(sizeof(float) * N) : NULL;
        sh->dw = here ? malloc(sizeof(float) * d * v) : NULL;
        sh->dw_ahead = calloc((size_t)m, sizeof *sh->dw_ahead);
        sh->logits.buf = here ? calloc((size_t)m, sizeof(float *)) : NULL;
        sh->logits.cap = here ? m : 0;
        /* charged as made, so that cpu_vocab_free's releases match
         * whatever a failure here leaves */
        int dev = holder(cv, k);
        if (sh->w)
            mem_ledger_charge(cv->ledger, dev, MEM_VOCAB, columns_bytes(cv, k));
        if (sh->dw)
            mem_ledger_charge(cv->ledger, dev, MEM_VOCAB, columns_bytes(cv, k));
        if (sh->scratch)
            mem_ledger_charge(cv->ledger, dev, MEM_WORKSPACE, logits_bytes(cv, k));
        if (sh->lse)
            mem_ledger_charge(cv->ledger, dev, MEM_WORKSPACE, sizeof(float) * N);
        oom = !sh->w || (v1 && here && !sh->scratch) || (here && (!sh->lse || !sh->dw))
              || !sh->dw_ahead || (here && !sh->logits.buf);
    }
    if (oom) {
        cpu_vocab_free(be, (zb_bvocab *)cv);
        return zb_fail(err, "out of memory for the vocabulary shards");
    }
    *out = (zb_bvocab *)cv;
    return 0;
}

/* Allocates the statistics of cell c (of shard k) on first use, charged
 * to the shard's holder for as long as the cell exists; 0 or -1. */
static int stats_ready(cpu_vocab *cv, cv_cell *c, int k)
{
    if (c->row_max)
        return 0;
    size_t N = (size_t)cv->N;
    c->row_max = malloc(sizeof(float) * N);
    c->row_sum = malloc(sizeof(double) * N);
    c->tgt = malloc(sizeof(float) * N);
    if (c->row_max && c->row_sum && c->tgt) {
        mem_ledger_charge(cv->ledger, holder(cv, k), MEM_VOCAB, stats_bytes(cv));
        return 0;
    }
    free(c->row_max);
    free(c->row_sum);
    free(c->tgt);
    c->row_max = NULL;
    c->row_sum = NULL;
    c->tgt = NULL;
    return -1;
}

/* Puts back what a failed step left held (no pass running: begin is
 * called between steps, by the trainer or, inside a batch of steps, by the
 * last stage's worker once every pass of the step before is over). */
static void release_leftovers(cpu_vocab *cv)
{
    int p = cv->shape.shards, m = cv->shape.micro;
    pthread_mutex_lock(&cv->mu);
    for (int j = 0; j < m; j++) {
        for (int k = 0; k < p; k++) {
            cv_cell *c = &cv->cell[j * p + k];
            if (c->logits) {
                mem_ledger_release(cv->ledger, holder(cv, k), MEM_VOCAB, logits_bytes(cv, k));
                list_give(&cv->shard[k].logits, c->logits);
            }
            if (c->partial) {
                mem_ledger_release(cv->ledger, holder(cv, k), MEM_VOCAB, rows_bytes(cv));
                list_give(&cv->free_partial, c->partial);
            }
            c->logits = c->partial = NULL;
        }
        if (cv->x[j]) {
            mem_ledger_release(cv->ledger, cv->x_dev[j], MEM_COMM, rows_bytes(cv));
            list_give(&cv->free_x, cv->x[j]);
        }
        cv->x[j] = NULL;
    }
    pthread_mutex_unlock(&cv->mu);
}

int cpu_vocab_begin(zb_backend *be, zb_bvocab *bv, zb_bstage *bst, size_t head_offset,
                    const int32_t *targets, zb_err *err)
{
    (void)be;
    (void)err;
    cpu_vocab *cv = CV(bv);
    cpu_stage *st = (cpu_stage *)bst;
    const float *head = st->buf[ZB_BUF_PARAMS] + head_offset;
    int d = cv->shape.d, V = cv->shape.vocab, p = cv->shape.shards;
    release_leftovers(cv);
    for (int k = 0; k < p; k++) {
        cv_shard *sh = &cv->shard[k];
        vshard_gather(sh->w, head, d, V, sh->v0, sh->v);
        sh->next_t = 0;
        for (int j = 0; j < cv->shape.micro; j++) { /* a failed step's leftovers */
            if (sh->dw_ahead[j])
                mem_ledger_release(cv->ledger, holder(cv, k), MEM_VOCAB, columns_bytes(cv, k));
            free(sh->dw_ahead[j]);
            sh->dw_ahead[j] = NULL;
        }
    }
    for (int j = 0; j < cv->shape.micro; j++)
        cv->t_left[j] = cv->shape.local < 0 ? p : 1;
    cv->head_grad = st->buf[ZB_BUF_GRADS] + head_offset;
    cv->targets = targets;
    return 0;
}

int cpu_vocab_put_x(zb_backend *be, zb_bvocab *bv, int dev, int mb, const void *x, zb_err *err)
{
    (void)be;
    cpu_vocab *cv = CV(bv);
    assert(mb >= 0 && mb < cv->shape.micro && !cv->x[mb]);
    float *buf = shared_take(cv, &cv->free_x);
    if (!buf)
        return zb_fail(err, "out of memory for the head input of micro-batch %d", mb);
    memcpy(buf, x, sizeof(float) * (size_t)cv->N * (size_t)cv->shape.d);
    /* the broadcast's one copy in this process: the putting device's
     * until the last T of mb gives it back */
    mem_ledger_charge(cv->ledger, dev, MEM_COMM, rows_bytes(cv));
    cv->x_dev[mb] = dev;
    cv->x[mb] = buf; /* read only by S and T of mb, which wait for it */
    return 0;
}

int cpu_vocab_s(zb_backend *be, zb_bvocab *bv, int shard, int mb, zb_err *err)
{
    (void)be;
    cpu_vocab *cv = CV(bv);
    int p = cv->shape.shards, d = cv->shape.d;
    assert(shard >= 0 && shard < p && mb >= 0 && mb < cv->shape.micro && runs_here(cv, shard));
    assert(cv->x[mb]);
    cv_shard *sh = &cv->shard[shard];
    cv_cell *c = &cv->cell[mb * p + shard];
    int v1 = cv->shape.variant == SCHED_VOCAB_1;
    assert(!c->logits && !c->partial);
    c->logits = logits_take(cv, shard);
    if (v1 && c->logits)
        c->partial = partial_take(cv, shard);
    if (!c->logits || (v1 && !c->partial) || stats_ready(cv, c, shard) != 0) {
        logits_give(cv, shard, c->logits);
        partial_give(cv, shard, c->partial);
        c->logits = c->partial = NULL;
        return zb_fail(err, "S of shard %d, micro-batch %d: out of memory for its logits", shard,
                       mb);
    }
    const int32_t *y = cv->targets + (size_t)mb * cv->N;
    vshard_forward(c->logits, c->row_max, c->row_sum, c->tgt, sh->scratch, cv->x[mb], sh->w, y,
                   sh->v0, cv->N, d, sh->v);
    if (v1)
        vshard_local_partial(c->partial, sh->scratch, c->row_sum, sh->w, cv->N, d, sh->v);
    return 0;
}

/* Barrier C0's statistics of micro-batch mb (all S done): lse into
 * lse[N], Vocab-1's rescale weights into weight (or NULL).  Returns the
 * micro-batch's mean loss. */
static double combine_stats(const cpu_vocab *cv, int mb, float *lse, double *const *weight)
{
    int p = cv->shape.shards;
    const float *mx[p], *tg[p];
    const double *sm[p];
    for (int k = 0; k < p; k++) {
        const cv_cell *c = &cv->cell[mb * p + k];
        assert(c->row_max);
        mx[k] = c->row_max;
        sm[k] = c->row_sum;
        tg[k] = c->tgt;
    }
    return vshard_combine_stats(lse, weight, mx, sm, tg, cv->targets + (size_t)mb * cv->N, p,
                                cv->shape.vocab, cv->N);
}

int cpu_vocab_t(zb_backend *be, zb_bvocab *bv, int shard, int mb, zb_err *err)
{
    (void)be;
    cpu_vocab *cv = CV(bv);
    int p = cv->shape.shards, m = cv->shape.micro, d = cv->shape.d, V = cv->shape.vocab;
    assert(shard >= 0 && shard < p && mb >= 0 && mb < m && runs_here(cv, shard));
    cv_shard *sh = &cv->shard[shard];
    cv_cell *c = &cv->cell[mb * p + shard];
    assert(c->logits && cv->x[mb]);
    const int32_t *y = cv->targets + (size_t)mb * cv->N;
    if (cv->shape.variant == SCHED_VOCAB_2 && !(c->partial = partial_take(cv, shard)))
        return zb_fail(err, "T of shard %d, micro-batch %d: out of memory", shard, mb);
    float *dw = sh->dw; /* dW in micro-batch order: now if it is this one's turn, else later */
    if (mb != sh->next_t) {
        assert(mb > sh->next_t);
        if (!(dw = malloc(sizeof(float) * (size_t)d * (size_t)sh->v)))
            return zb_fail(err, "T of shard %d, micro-batch %d: out of memory", shard, mb);
        mem_ledger_charge(cv->ledger, holder(cv, shard), MEM_VOCAB, columns_bytes(cv, shard));
    }
    combine_stats(cv, mb, sh->lse, NULL);
    /* the trainer's B passes 1/m as dloss; T has no B to hear it from,
     * so it uses the same value: every micro-batch weighs 1/m */
    float dloss = 1.0f / (float)m;
    vshard_logit_grad(c->logits, c->logits, sh->lse, y, sh->v0, dloss, cv->N, sh->v);
    if (cv->shape.variant == SCHED_VOCAB_2)
        kern_matmul_backward_b(c->partial, c->logits, sh->w, cv->N, d, sh->v);
    kern_matmul_backward_w(dw, cv->x[mb], c->logits, cv->N, d, sh->v);
    if (mb == sh->next_t) {
        vshard_scatter_add(cv->head_grad, dw, d, V, sh->v0, sh->v);
        for (sh->next_t++; sh->next_t < m && sh->dw_ahead[sh->next_t]; sh->next_t++) {
            vshard_scatter_add(cv->head_grad, sh->dw_ahead[sh->next_t], d, V, sh->v0, sh->v);
            free(sh->dw_ahead[sh->next_t]);
            mem_ledger_release(cv->ledger, holder(cv, shard), MEM_VOCAB, columns_bytes(cv, shard));
            sh->dw_ahead[sh->next_t] = NULL;
        }
    } else {
        sh->dw_ahead[mb] = dw;
    }
    /* the logit gradient is spent: its buffer goes to the shard's next S */
    logits_give(cv, shard, c->logits);
    c->logits = NULL;
    /* the last T of mb here frees its head input */
    pthread_mutex_lock(&cv->mu);
    if (--cv->t_left[mb] == 0) {
        mem_ledger_release(cv->ledger, cv->x_dev[mb], MEM_COMM, rows_bytes(cv));
        list_give(&cv->free_x, cv->x[mb]);
        cv->x[mb] = NULL;
    }
    pthread_mutex_unlock(&cv->mu);
    return 0;
}

int cpu_vocab_dx(zb_backend *be, zb_bvocab *bv, int dev, int mb, float dloss, void *dx,
                 float *loss, zb_err *err)
{
    (void)be;
    cpu_vocab *cv = CV(bv);
    int p = cv->shape.shards, v1 = cv->shape.variant == SCHED_VOCAB_1;
    assert(mb >= 0 && mb < cv->shape.micro);
    if (cv->dx_dev < 0) { /* the first dx: its scratch, on the device that sums */
        size_t N = (size_t)cv->N;
        if (!cv->dx_lse) /* (a retry after running out keeps what it got) */
            cv->dx_lse = malloc(sizeof(float) * N);
        int oom = !cv->dx_lse;
        for (int k = 0; k < p && !oom; k++)
            if (!cv->dx_weight[k])
                oom = !(cv->dx_weight[k] = malloc(sizeof(double) * N));
        if (oom)
            return zb_fail(err, "dX of micro-batch %d: out of memory for its scratch", mb);
        cv->dx_dev = dev;
        mem_ledger_charge(cv->ledger, dev, MEM_WORKSPACE, dx_scratch_bytes(cv));
    }
    assert(dev == cv->dx_dev); /* one device sums every micro-batch's partials */
    *loss = (float)combine_stats(cv, mb, cv->dx_lse, v1 ? cv->dx_weight : NULL);
    const float *part[p], *w[p];
    for (int k = 0; k < p; k++) {
        part[k] = cv->cell[mb * p + k].partial;
        w[k] = cv->shard[k].w;
        assert(part[k]);
    }
    if (v1)
        vshard_combine_dx_v1(dx, part, cv->dx_weight, w, cv->targets + (size_t)mb * cv->N, dloss,
                             p, cv->shape.vocab, cv->N, cv->shape.d);
    else
        vshard_combine_dx_v2(dx, part, p, cv->N, cv->shape.d);
    /* the barrier's sum is taken: every partial of mb is free again */
    pthread_mutex_lock(&cv->mu);
    for (int k = 0; k < p; k++) {
        mem_ledger_release(cv->ledger, holder(cv, k), MEM_VOCAB, rows_bytes(cv));
        list_give(&cv->free_partial, cv->cell[mb * p + k].partial);
        cv->cell[mb * p + k].partial = NULL;
    }
    pthread_mutex_unlock(&cv->mu);
    return 0;
}

int cpu_vocab_eval(zb_backend *be, zb_bvocab *bv, zb_bstage *bst, size_t head_offset,
                   const void *xv, const int32_t *y, int batch, double *loss, zb_err *err)
{
    (void)be;
    cpu_vocab *cv = CV(bv);
    const float *head = ((cpu_stage *)bst)->buf[ZB_BUF_PARAMS] + head_offset;
    const float *x = xv;
    int N = batch * cv->shape.seq, p = cv->shape.shards, d = cv->shape.d, V = cv->shape.vocab;
    float *lse = malloc(sizeof(float) * (size_t)N), *lg = NULL;
    float **mx = calloc((size_t)p, sizeof *mx), **tg = calloc((size_t)p, sizeof *tg);
    double **sm = calloc((size_t)p, sizeof *sm);
    int oom = !lse || !mx || !tg || !sm;
    for (int k = 0; k < p && !oom; k++) {
        mx[k] = malloc(sizeof(float) * (size_t)N);
        tg[k] = malloc(sizeof(float) * (size_t)N);
        sm[k] = malloc(sizeof(double) * (size_t)N);
        oom = !mx[k] || !tg[k] || !sm[k];
    }
    int vmax = 0;
    for (int k = 0; k < p; k++)
        vmax = cv->shard[k].v > vmax ? cv->shard[k].v : vmax;
    oom = oom || !(lg = malloc(sizeof(float) * (size_t)N * (size_t)vmax));
    if (!oom) {
        for (int k = 0; k < p; k++) {
            cv_shard *sh = &cv->shard[k];
            vshard_gather(sh->w, head, d, V, sh->v0, sh->v);
            vshard_forward(lg, mx[k], sm[k], tg[k], NULL, x, sh->w, y, sh->v0, N, d, sh->v);
        }
        *loss = vshard_combine_stats(lse, NULL, (const float *const *)mx,
                                     (const double *const *)sm, (const float *const *)tg, y, p,
                                     V, N);
    }
    for (int k = 0; k < p && mx && tg && sm; k++) {
        free(mx[k]);
        free(tg[k]);
        free(sm[k]);
    }
    free(mx);
    free(tg);
    free(sm);
    free(lg);
    free(lse);
    return oom ? zb_fail(err, "out of memory for the evaluation's logits") : 0;
}

double backend_cpu_vocab_cell_bytes(const zb_vocab_shape *shape, int shard)
{
    if (shard < 0 || shard >= shape->shards)
        return 0;
    double N = (double)shape->batch * shape->seq;
    double v = vshard_begin(shard + 1, shape->shards, shape->vocab)
               - vshard_begin(shard, shape->shards, shape->vocab);
    /* logits, row max, target logit, row sum, and the device's view of the
     * head input (one copy per process here, one per device across them);
     * the partial is counted apart (its lifetime is S or T to dx) */
    return N * (sizeof(float) * (v + 2) + sizeof(double)) + N * shape->d * sizeof(float);
}

double backend_cpu_vocab_bytes(const zb_vocab_shape *shape)
{
    double N = (double)shape->batch * shape->seq, d = shape->d, f = sizeof(float);
    int p = shape->shards, v1 = shape->variant == SCHED_VOCAB_1;
    double bytes = N * f; /* dx's lse */
    for (int k = 0; k < p; k++) {
        double v = vshard_begin(k + 1, p, shape->vocab) - vshard_begin(k, p, shape->vocab);
        bytes += 2 * d * v * f                /* w, dw */
                 + (v1 ? N * v * f : 0)       /* Vocab-1's local softmax */
                 + N * f + N * sizeof(double) /* lse, dx's rescale weights */
                 /* every cell's statistics (kept for the step), and at most
                  * every cell's partial (held until the last stage's B) */
                 + shape->micro * N * (2 * f + sizeof(double) + d * f);
    }
    return bytes;
}

size_t cpu_vocab_cell_bytes(zb_backend *be, const zb_bvocab *bv, int shard)
{
    (void)be;
    return (size_t)backend_cpu_vocab_cell_bytes(&((const cpu_vocab *)bv)->shape, shard);
}

size_t cpu_vocab_wire_bytes(zb_backend *be, const zb_bvocab *bv, zb_vocab_wire part, int shard)
{
    (void)be;
    const cpu_vocab *cv = (const cpu_vocab *)bv;
    size_t N = (size_t)cv->N, d = (size_t)cv->shape.d;
    assert(shard >= 0 && shard < cv->shape.shards);
    switch (part) {
    case ZB_VOCAB_WIRE_STATS:
        return N * (sizeof(double) + 2 * sizeof(float)); /* row sum, row max, target */
    case ZB_VOCAB_WIRE_PARTIAL:
        return N * d * sizeof(float);
    case ZB_VOCAB_WIRE_DW:
        return d * (size_t)cv->shard[shard].v * sizeof(float);
    }
    return 0;
}

int cpu_vocab_export(zb_backend *be, zb_bvocab *bv, zb_vocab_wire part, int shard, int mb,
                     void *buf, zb_err *err)
{
    (void)be;
    cpu_vocab *cv = CV(bv);
    int p = cv->shape.shards, d = cv->shape.d, V = cv->shape.vocab;
    size_t N = (size_t)cv->N;
    assert(shard >= 0 && shard < p);
    cv_shard *sh = &cv->shard[shard];
    if (part == ZB_VOCAB_WIRE_DW) {
        vshard_gather(buf, cv->head_grad, d, V, sh->v0, sh->v);
        return 0;
    }
    assert(mb >= 0 && mb < cv->shape.micro);
    cv_cell *c = &cv->cell[mb * p + shard];
    if (part == ZB_VOCAB_WIRE_STATS) {
        if (!c->row_max)
            return zb_fail(err, "shard %d, micro-batch %d: no statistics to send", shard, mb);
        char *b = buf;
        memcpy(b, c->row_sum, N * sizeof(double));
        memcpy(b + N * sizeof(double), c->row_max, N * sizeof(float));
        memcpy(b + N * (sizeof(double) + sizeof(float)), c->tgt, N * sizeof(float));
        return 0;
    }
    if (!c->partial)
        return zb_fail(err, "shard %d, micro-batch %d: no partial to send", shard, mb);
    memcpy(buf, c->partial, N * (size_t)d * sizeof(float));
    /* it has left for the last stage's process, which sums it: free here */
    partial_give(cv, shard, c->partial);
    c->partial = NULL;
    return 0;
}

int cpu_vocab_import(zb_backend *be, zb_bvocab *bv, zb_vocab_wire part, int shard, int mb,
                     const void *buf, zb_err *err)
{
    (void)be;
    cpu_vocab *cv = CV(bv);
    int p = cv->shape.shards, d = cv->shape.d, V = cv->shape.vocab;
    size_t N = (size_t)cv->N;
    assert(shard >= 0 && shard < p);
    cv_shard *sh = &cv->shard[shard];
    if (part == ZB_VOCAB_WIRE_DW) {
        const float *dw = buf;
        for (int r = 0; r < d; r++)
            memcpy(cv->head_grad + (size_t)r * V + sh->v0, dw + (size_t)r * sh->v,
                   sizeof(float) * (size_t)sh->v);
        return 0;
    }
    assert(mb >= 0 && mb < cv->shape.micro);
    cv_cell *c = &cv->cell[mb * p + shard];
    if (part == ZB_VOCAB_WIRE_STATS) {
        if (stats_ready(cv, c, shard) != 0)
            return zb_fail(err, "out of memory for shard %d's statistics", shard);
        const char *b = buf;
        memcpy(c->row_sum, b, N * sizeof(double));
        memcpy(c->row_max, b + N * sizeof(double), N * sizeof(float));
        memcpy(c->tgt, b + N * (sizeof(double) + sizeof(float)), N * sizeof(float));
        return 0;
    }
    assert(!c->partial);
    if (!(c->partial = partial_take(cv, shard)))
        return zb_fail(err, "out of memory for shard %d's partial", shard);
    memcpy(c->partial, buf, N * (size_t)d * sizeof(float));
    return 0;
}
