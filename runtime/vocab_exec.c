/*
 * vocab_exec.c: S and T passes, barriers C0/C1 and the head input's
 * broadcast and gradient hand-back for the CPU executor (vocab_exec.h).
 *
 * State per (shard k, micro-batch j), in ve->cell[j * p + k]: the shard's
 * logits (from S until T, where they become the logit gradient in place),
 * its row statistics, and its input-gradient partial (Vocab-1: from S;
 * Vocab-2: from T; read by the last stage's B).  Per micro-batch: the head
 * input X and three counters under one mutex (S passes done, T passes done,
 * X published).  Nothing is freed between steps.
 */
#include "runtime/vocab_exec.h"

#include <assert.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/vocab_shard.h"

/* One shard's work on one micro-batch. */
typedef struct ve_cell {
    float *logits;  /* [N, v] logits after S; the logit gradient after T */
    float *row_max; /* [N] local row max */
    double *row_sum; /* [N] local Σ exp(logit - row_max) */
    float *tgt;     /* [N] target logit where the target is in the shard, else 0 */
    float *partial; /* [N, d] input-gradient partial */
    int held;       /* 1 between S and T (for the activation profile) */
} ve_cell;

/* One shard: its copy of the head's columns and its scratch. */
typedef struct ve_shard {
    int v0, v;        /* columns [v0, v0+v) of the head */
    float *w;         /* [d, v] this step's copy of those columns */
    float *scratch;   /* [N, v] Vocab-1's local softmax (NULL for Vocab-2) */
    float *lse;       /* [N] global log-sum-exp, recomputed by each T */
    float *dw;        /* [d, v] one T's weight gradient */
    float **dw_ahead; /* [m] gradients of T passes that ran ahead of order */
    int next_t;       /* next micro-batch whose dW goes into the head gradient */
} ve_shard;

struct vocab_exec {
    int variant;              /* SCHED_VOCAB_1 or SCHED_VOCAB_2 */
    int p, m;                 /* shards (= devices), micro-batches */
    int N, d, V;              /* rows per micro-batch, model width, vocabulary */
    int seq;                  /* tokens per sequence T */
    ve_shard *shard;          /* [p] */
    ve_cell *cell;            /* [m * p] */
    float **x;                /* [m] head input of each micro-batch, [N, d] */
    int *x_ready;             /* [m] 1 once the last stage published x */
    int *s_done, *t_done;     /* [m] S / T passes finished */
    int t_total;              /* T passes finished this step */
    int aborted;              /* 1: waits fail until reset */
    const int32_t *targets;   /* [m][N] this step's targets (borrowed) */
    float *head_grad;         /* [d, V] the head's gradient (borrowed) */
    const struct timespec *t0; /* the step's clock (borrowed) */
    /* take_dx's scratch (only the last stage's worker calls it) */
    float *dx_lse;            /* [N] */
    double **dx_weight;       /* [p] of [N] Vocab-1 rescale weights */
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
    if (ve->cell)
        for (int i = 0; i < ve->m * ve->p; i++) {
            free(ve->cell[i].logits);
            free(ve->cell[i].row_max);
            free(ve->cell[i].row_sum);
            free(ve->cell[i].tgt);
            free(ve->cell[i].partial);
        }
    if (ve->shard)
        for (int k = 0; k < ve->p; k++) {
            ve_shard *sh = &ve->shard[k];
            free(sh->w);
            free(sh->scratch);
            free(sh->lse);
            free(sh->dw);
            if (sh->dw_ahead)
                for (int j = 0; j < ve->m; j++)
                    free(sh->dw_ahead[j]);
            free(sh->dw_ahead);
        }
    if (ve->x)
        for (int j = 0; j < ve->m; j++)
            free(ve->x[j]);
    if (ve->dx_weight)
        for (int k = 0; k < ve->p; k++)
            free(ve->dx_weight[k]);
    free(ve->dx_weight);
    free(ve->dx_lse);
    free(ve->x);
    free(ve->x_ready);
    free(ve->s_done);
    free(ve->t_done);
    free(ve->cell);
    free(ve->shard);
    pthread_mutex_destroy(&ve->mu);
    pthread_cond_destroy(&ve->cv);
    free(ve);
}

int vocab_exec_create(const sched_t *s, const zb_model *m, int batch, vocab_exec **out,
                      zb_err *err)
{
    assert(sched_has_vocab(s) && batch > 0);
    if (m->vocab < s->n_devices)
        return zb_fail(err, "a vocabulary of %d entries cannot be split over %d devices",
                       m->vocab, s->n_devices);
    vocab_exec *ve = calloc(1, sizeof *ve);
    if (!ve)
        return zb_fail(err, "out of memory");
    pthread_mutex_init(&ve->mu, NULL);
    pthread_cond_init(&ve->cv, NULL);
    ve->variant = s->vocab.variant;
    ve->p = s->n_devices;
    ve->m = s->n_micro;
    ve->N = batch * m->seq_len;
    ve->seq = m->seq_len;
    ve->d = m->d_model;
    ve->V = m->vocab;
    size_t N = (size_t)ve->N, d = (size_t)ve->d;
    ve->shard = calloc((size_t)ve->p, sizeof *ve->shard);
    ve->cell = calloc((size_t)ve->m * ve->p, sizeof *ve->cell);
    ve->x = calloc((size_t)ve->m, sizeof *ve->x);
    ve->x_ready = calloc((size_t)ve->m, sizeof *ve->x_ready);
    ve->s_done = calloc((size_t)ve->m, sizeof *ve->s_done);
    ve->t_done = calloc((size_t)ve->m, sizeof *ve->t_done);
    ve->dx_lse = malloc(sizeof(float) * N);
    ve->dx_weight = calloc((size_t)ve->p, sizeof *ve->dx_weight);
    int oom = !ve->shard || !ve->cell || !ve->x || !ve->x_ready || !ve->s_done || !ve->t_done
              || !ve->dx_lse || !ve->dx_weight;
    for (int j = 0; j < ve->m && !oom; j++)
        oom = !(ve->x[j] = malloc(sizeof(float) * N * d));
    for (int k = 0; k < ve->p && !oom; k++) {
        ve_shard *sh = &ve->shard[k];
        sh->v0 = vshard_begin(k, ve->p, ve->V);
        sh->v = vshard_begin(k + 1, ve->p, ve->V) - sh->v0;
        size_t v = (size_t)sh->v;
        sh->w = malloc(sizeof(float) * d * v);
        sh->scratch = ve->variant == SCHED_VOCAB_1 ? malloc(sizeof(float) * N * v) : NULL;
        sh->lse = malloc(sizeof(float) * N);
        sh->dw = malloc(sizeof(float) * d * v);
        sh->dw_ahead = calloc((size_t)ve->m, sizeof *sh->dw_ahead);
        ve->dx_weight[k] = malloc(sizeof(double) * N);
        oom = !sh->w || (ve->variant == SCHED_VOCAB_1 && !sh->scratch) || !sh->lse || !sh->dw
              || !sh->dw_ahead || !ve->dx_weight[k];
    }
    if (oom) {
        vocab_exec_free(ve);
        return zb_fail(err, "out of memory for the vocabulary shards");
    }
    *out = ve;
    return 0;
}

/* Allocates a cell's buffers on first use; 0 or -1. */
static int cell_ready(vocab_exec *ve, ve_cell *c, int v)
{
    if (c->logits)
        return 0;
    size_t N = (size_t)ve->N;
    c->logits = malloc(sizeof(float) * N * (size_t)v);
    c->row_max = malloc(sizeof(float) * N);
    c->row_sum = malloc(sizeof(double) * N);
    c->tgt = malloc(sizeof(float) * N);
    c->partial = malloc(sizeof(float) * N * (size_t)ve->d);
    if (c->logits && c->row_max && c->row_sum && c->tgt && c->partial)
        return 0;
    free(c->logits);
    free(c->row_max);
    free(c->row_sum);
    free(c->tgt);
    free(c->partial);
    memset(c, 0, sizeof *c);
    return -1;
}

static void clear_progress(vocab_exec *ve)
{
    for (int j = 0; j < ve->m; j++) {
        ve->x_ready[j] = 0;
        ve->s_done[j] = 0;
        ve->t_done[j] = 0;
    }
    for (int i = 0; i < ve->m * ve->p; i++)
        ve->cell[i].held = 0;
    for (int k = 0; k < ve->p; k++) {
        ve_shard *sh = &ve->shard[k];
        sh->next_t = 0;
        for (int j = 0; j < ve->m; j++) {
            free(sh->dw_ahead[j]);
            sh->dw_ahead[j] = NULL;
        }
    }
    ve->t_total = 0;
    ve->aborted = 0;
}

void vocab_exec_begin(vocab_exec *ve, const float *head, float *head_grad,
                      const int32_t *targets, const struct timespec *t0)
{
    for (int k = 0; k < ve->p; k++)
        vshard_gather(ve->shard[k].w, head, ve->d, ve->V, ve->shard[k].v0, ve->shard[k].v);
    ve->head_grad = head_grad;
    ve->targets = targets;
    ve->t0 = t0;
    clear_progress(ve);
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

void vocab_exec_put_x(vocab_exec *ve, int mb, const float *x)
{
    assert(mb >= 0 && mb < ve->m);
    /* x[mb] is only read by S and T of mb, which wait for x_ready */
    memcpy(ve->x[mb], x, sizeof(float) * (size_t)ve->N * ve->d);
    bump(ve, &ve->x_ready[mb]);
}

int vocab_exec_s(vocab_exec *ve, int shard, int mb, double *start, double *end, zb_err *err)
{
    assert(shard >= 0 && shard < ve->p && mb >= 0 && mb < ve->m);
    ve_shard *sh = &ve->shard[shard];
    ve_cell *c = &ve->cell[mb * ve->p + shard];
    if (wait_for(ve, &ve->x_ready[mb], 1, err) != 0)
        return -1;
    stamp(ve, start);
    if (cell_ready(ve, c, sh->v) != 0)
        return zb_fail(err, "S of shard %d, micro-batch %d: out of memory for its logits", shard,
                       mb);
    const int32_t *y = ve->targets + (size_t)mb * ve->N;
    vshard_forward(c->logits, c->row_max, c->row_sum, c->tgt, sh->scratch, ve->x[mb], sh->w, y,
                   sh->v0, ve->N, ve->d, sh->v);
    if (ve->variant == SCHED_VOCAB_1)
        vshard_local_partial(c->partial, sh->scratch, c->row_sum, sh->w, ve->N, ve->d, sh->v);
    c->held = 1;
    stamp(ve, end);
    bump(ve, &ve->s_done[mb]);
    return 0;
}

/* Barrier C0's statistics of micro-batch mb (all S done): lse into
 * lse[N], Vocab-1's rescale weights into weight (or NULL).  Returns the
 * micro-batch's mean loss. */
static double combine_stats(vocab_exec *ve, int mb, float *lse, double *const *weight)
{
    const float *mx[ve->p], *tg[ve->p];
    const double *sm[ve->p];
    for (int k = 0; k < ve->p; k++) {
        const ve_cell *c = &ve->cell[mb * ve->p + k];
        mx[k] = c->row_max;
        sm[k] = c->row_sum;
        tg[k] = c->tgt;
    }
    return vshard_combine_stats(lse, weight, mx, sm, tg, ve->targets + (size_t)mb * ve->N, ve->p,
                                ve->V, ve->N);
}

int vocab_exec_t(vocab_exec *ve, int shard, int mb, double *start, double *end, zb_err *err)
{
    assert(shard >= 0 && shard < ve->p && mb >= 0 && mb < ve->m);
    ve_shard *sh = &ve->shard[shard];
    ve_cell *c = &ve->cell[mb * ve->p + shard];
    if (wait_for(ve, &ve->s_done[mb], ve->p, err) != 0) /* barrier C0 */
        return -1;
    stamp(ve, start);
    const int32_t *y = ve->targets + (size_t)mb * ve->N;
    combine_stats(ve, mb, sh->lse, NULL);
    /* the trainer's B passes 1/m as dloss; T has no B to hear it from,
     * so it uses the same value: every micro-batch weighs 1/m */
    float dloss = 1.0f / (float)ve->m;
    vshard_logit_grad(c->logits, c->logits, sh->lse, y, sh->v0, dloss, ve->N, sh->v);
    if (ve->variant == SCHED_VOCAB_2)
        kern_matmul_backward_b(c->partial, c->logits, sh->w, ve->N, ve->d, sh->v);
    /* dW in micro-batch order: now if it is this one's turn, else later */
    float *dw = sh->dw;
    if (mb != sh->next_t) {
        assert(mb > sh->next_t);
        if (!(dw = malloc(sizeof(float) * (size_t)ve->d * sh->v)))
            return zb_fail(err, "T of shard %d, micro-batch %d: out of memory", shard, mb);
    }
    kern_matmul_backward_w(dw, ve->x[mb], c->logits, ve->N, ve->d, sh->v);
    if (mb == sh->next_t) {
        vshard_scatter_add(ve->head_grad, dw, ve->d, ve->V, sh->v0, sh->v);
        for (sh->next_t++; sh->next_t < ve->m && sh->dw_ahead[sh->next_t]; sh->next_t++) {
            vshard_scatter_add(ve->head_grad, sh->dw_ahead[sh->next_t], ve->d, ve->V, sh->v0,
                               sh->v);
            free(sh->dw_ahead[sh->next_t]);
            sh->dw_ahead[sh->next_t] = NULL;
        }
    } else {
        sh->dw_ahead[mb] = dw;
    }
    c->held = 0;
    stamp(ve, end);
    pthread_mutex_lock(&ve->mu);
    ve->t_done[mb]++;
    ve->t_total++;
    pthread_cond_broadcast(&ve->cv);
    pthread_mutex_unlock(&ve->mu);
    return 0;
}

int vocab_exec_take_dx(vocab_exec *ve, int mb, float dloss, float *dx, float *loss,
                       zb_err *err)
{
    assert(mb >= 0 && mb < ve->m);
    int v1 = ve->variant == SCHED_VOCAB_1;
    /* Vocab-1: barrier C0 carries dX; Vocab-2: C1 does */
    if (wait_for(ve, v1 ? &ve->s_done[mb] : &ve->t_done[mb], ve->p, err) != 0)
        return -1;
    *loss = (float)combine_stats(ve, mb, ve->dx_lse, v1 ? ve->dx_weight : NULL);
    const float *part[ve->p], *w[ve->p];
    for (int k = 0; k < ve->p; k++) {
        part[k] = ve->cell[mb * ve->p + k].partial;
        w[k] = ve->shard[k].w;
    }
    if (v1)
        vshard_combine_dx_v1(dx, part, ve->dx_weight, w, ve->targets + (size_t)mb * ve->N, dloss,
                             ve->p, ve->V, ve->N, ve->d);
    else
        vshard_combine_dx_v2(dx, part, ve->p, ve->N, ve->d);
    return 0;
}

int vocab_exec_wait_done(vocab_exec *ve, zb_err *err)
{
    return wait_for(ve, &ve->t_total, ve->m * ve->p, err);
}

double vocab_exec_held_bytes(vocab_exec *ve, int dev)
{
    if (dev < 0 || dev >= ve->p)
        return 0;
    size_t N = (size_t)ve->N;
    size_t per = N * (sizeof(float) * ((size_t)ve->shard[dev].v + 2) + sizeof(double))
                 + (ve->variant == SCHED_VOCAB_1 ? N * ve->d * sizeof(float) : 0);
    double held = 0;
    for (int j = 0; j < ve->m; j++)
        if (ve->cell[j * ve->p + dev].held)
            held += (double)per;
    return held;
}

int vocab_exec_eval(vocab_exec *ve, const float *head, const float *x, const int32_t *y,
                    int batch, double *loss, zb_err *err)
{
    int N = batch * ve->seq, p = ve->p;
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
        vmax = ve->shard[k].v > vmax ? ve->shard[k].v : vmax;
    oom = oom || !(lg = malloc(sizeof(float) * (size_t)N * (size_t)vmax));
    if (!oom) {
        for (int k = 0; k < p; k++) {
            ve_shard *sh = &ve->shard[k];
            vshard_gather(sh->w, head, ve->d, ve->V, sh->v0, sh->v);
            vshard_forward(lg, mx[k], sm[k], tg[k], NULL, x, sh->w, y, sh->v0, N, ve->d, sh->v);
        }
        *loss = vshard_combine_stats(lse, NULL, (const float *const *)mx,
                                     (const double *const *)sm, (const float *const *)tg, y, p,
                                     ve->V, N);
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
