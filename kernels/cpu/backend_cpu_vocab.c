/*
 * backend_cpu_vocab.c: the CPU backend's vocabulary passes (backend.h's
 * vocab_* ops) over kernels/cpu/vocab_shard.h: the arithmetic of S, T and
 * the barriers' combines, and every buffer they keep.  When and in which
 * order they run is the executor's (runtime/vocab_exec.h); nothing here
 * waits or locks.
 *
 * State per (shard k, micro-batch j), in cell[j * p + k]: the shard's
 * logits (from S until T, where they become the logit gradient in place),
 * its row statistics, and its input-gradient partial (Vocab-1: from S;
 * Vocab-2: from T; read by the last stage's B).  Per micro-batch the head
 * input X; per shard its copy of the head's columns, gathered at the start
 * of each step (parameters change only between steps).  A cell's buffers
 * are allocated on its first S and kept, like the trainer's saved states,
 * so that steps after the first allocate nothing (except a T that runs
 * ahead of micro-batch order: its weight gradient waits in a buffer of its
 * own until its turn, as the executor's W does).
 *
 * Threading (the executor's): S and T of shard k on device k's worker,
 * put_x and dx on the last stage's; a T reads every shard's statistics of
 * its micro-batch only after barrier C0, dx every partial only after C0 or
 * C1.  begin and eval on the trainer's thread while no worker runs.
 */
#include "kernels/cpu/backend_cpu_vocab.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/backend_cpu_impl.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/vocab_shard.h"
#include "src/sched.h"

/* One shard's work on one micro-batch. */
typedef struct cv_cell {
    float *logits;   /* [N, v] logits after S; the logit gradient after T */
    float *row_max;  /* [N] local row max */
    double *row_sum; /* [N] local Σ exp(logit - row_max) */
    float *tgt;      /* [N] target logit where the target is in the shard, else 0 */
    float *partial;  /* [N, d] input-gradient partial */
} cv_cell;

/* One shard: its copy of the head's columns and its scratch. */
typedef struct cv_shard {
    int v0, v;        /* columns [v0, v0+v) of the head */
    float *w;         /* [d, v] this step's copy of those columns */
    float *scratch;   /* [N, v] Vocab-1's local softmax (NULL for Vocab-2) */
    float *lse;       /* [N] global log-sum-exp, recomputed by each T */
    float *dw;        /* [d, v] one T's weight gradient */
    float **dw_ahead; /* [m] gradients of T passes that ran ahead of order */
    int next_t;       /* next micro-batch whose dW goes into the head gradient */
} cv_shard;

/* The backend's zb_bvocab. */
typedef struct cpu_vocab {
    zb_vocab_shape shape;   /* as vocab_new got it */
    int N;                  /* rows per micro-batch, B*T */
    cv_shard *shard;        /* [p] */
    cv_cell *cell;          /* [m * p] */
    float **x;              /* [m] head input of each micro-batch, [N, d] */
    const int32_t *targets; /* [m][N] this step's targets (borrowed) */
    float *head_grad;       /* [d, V] the head's gradient (the stage's buffer) */
    float *dx_lse;          /* [N] dx's scratch (the last stage's worker only) */
    double **dx_weight;     /* [p] of [N] Vocab-1 rescale weights (dx's scratch) */
} cpu_vocab;

#define CV(v) ((cpu_vocab *)(v))

void cpu_vocab_free(zb_backend *be, zb_bvocab *bv)
{
    (void)be;
    cpu_vocab *cv = CV(bv);
    if (!cv)
        return;
    int p = cv->shape.shards, m = cv->shape.micro;
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
        }
    if (cv->x)
        for (int j = 0; j < m; j++)
            free(cv->x[j]);
    if (cv->dx_weight)
        for (int k = 0; k < p; k++)
            free(cv->dx_weight[k]);
    free(cv->dx_weight);
    free(cv->dx_lse);
    free(cv->x);
    free(cv->cell);
    free(cv->shard);
    free(cv);
}

int cpu_vocab_new(zb_backend *be, const zb_vocab_shape *shape, zb_bvocab **out, zb_err *err)
{
    assert(shape->shards > 0 && shape->micro > 0 && shape->batch > 0);
    if (shape->vocab < shape->shards)
        return zb_fail(err, "a vocabulary of %d entries cannot be split over %d devices",
                       shape->vocab, shape->shards);
    cpu_vocab *cv = calloc(1, sizeof *cv);
    if (!cv)
        return zb_fail(err, "out of memory for the vocabulary shards");
    cv->shape = *shape;
    cv->N = shape->batch * shape->seq;
    int p = shape->shards, m = shape->micro;
    size_t N = (size_t)cv->N, d = (size_t)shape->d;
    int v1 = shape->variant == SCHED_VOCAB_1;
    cv->shard = calloc((size_t)p, sizeof *cv->shard);
    cv->cell = calloc((size_t)m * (size_t)p, sizeof *cv->cell);
    cv->x = calloc((size_t)m, sizeof *cv->x);
    cv->dx_lse = malloc(sizeof(float) * N);
    cv->dx_weight = calloc((size_t)p, sizeof *cv->dx_weight);
    int oom = !cv->shard || !cv->cell || !cv->x || !cv->dx_lse || !cv->dx_weight;
    for (int j = 0; j < m && !oom; j++)
        oom = !(cv->x[j] = malloc(sizeof(float) * N * d));
    for (int k = 0; k < p && !oom; k++) {
        cv_shard *sh = &cv->shard[k];
        sh->v0 = vshard_begin(k, p, shape->vocab);
        sh->v = vshard_begin(k + 1, p, shape->vocab) - sh->v0;
        size_t v = (size_t)sh->v;
        sh->w = malloc(sizeof(float) * d * v);
        sh->scratch = v1 ? malloc(sizeof(float) * N * v) : NULL;
        sh->lse = malloc(sizeof(float) * N);
        sh->dw = malloc(sizeof(float) * d * v);
        sh->dw_ahead = calloc((size_t)m, sizeof *sh->dw_ahead);
        cv->dx_weight[k] = malloc(sizeof(double) * N);
        oom = !sh->w || (v1 && !sh->scratch) || !sh->lse || !sh->dw || !sh->dw_ahead
              || !cv->dx_weight[k];
    }
    if (oom) {
        cpu_vocab_free(be, (zb_bvocab *)cv);
        return zb_fail(err, "out of memory for the vocabulary shards");
    }
    *out = (zb_bvocab *)cv;
    return 0;
}

/* Allocates a cell's buffers on first use; 0 or -1. */
static int cell_ready(cpu_vocab *cv, cv_cell *c, int v)
{
    if (c->logits)
        return 0;
    size_t N = (size_t)cv->N;
    c->logits = malloc(sizeof(float) * N * (size_t)v);
    c->row_max = malloc(sizeof(float) * N);
    c->row_sum = malloc(sizeof(double) * N);
    c->tgt = malloc(sizeof(float) * N);
    c->partial = malloc(sizeof(float) * N * (size_t)cv->shape.d);
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

int cpu_vocab_begin(zb_backend *be, zb_bvocab *bv, zb_bstage *bst, size_t head_offset,
                    const int32_t *targets, zb_err *err)
{
    (void)be;
    (void)err;
    cpu_vocab *cv = CV(bv);
    cpu_stage *st = (cpu_stage *)bst;
    const float *head = st->buf[ZB_BUF_PARAMS] + head_offset;
    int d = cv->shape.d, V = cv->shape.vocab;
    for (int k = 0; k < cv->shape.shards; k++) {
        cv_shard *sh = &cv->shard[k];
        vshard_gather(sh->w, head, d, V, sh->v0, sh->v);
        sh->next_t = 0;
        for (int j = 0; j < cv->shape.micro; j++) { /* a failed step's leftovers */
            free(sh->dw_ahead[j]);
            sh->dw_ahead[j] = NULL;
        }
    }
    cv->head_grad = st->buf[ZB_BUF_GRADS] + head_offset;
    cv->targets = targets;
    return 0;
}

int cpu_vocab_put_x(zb_backend *be, zb_bvocab *bv, int dev, int mb, const void *x, zb_err *err)
{
    (void)be;
    (void)dev;
    (void)err;
    cpu_vocab *cv = CV(bv);
    assert(mb >= 0 && mb < cv->shape.micro);
    memcpy(cv->x[mb], x, sizeof(float) * (size_t)cv->N * (size_t)cv->shape.d);
    return 0;
}

int cpu_vocab_s(zb_backend *be, zb_bvocab *bv, int shard, int mb, zb_err *err)
{
    (void)be;
    cpu_vocab *cv = CV(bv);
    int p = cv->shape.shards, d = cv->shape.d;
    assert(shard >= 0 && shard < p && mb >= 0 && mb < cv->shape.micro);
    cv_shard *sh = &cv->shard[shard];
    cv_cell *c = &cv->cell[mb * p + shard];
    if (cell_ready(cv, c, sh->v) != 0)
        return zb_fail(err, "S of shard %d, micro-batch %d: out of memory for its logits", shard,
                       mb);
    const int32_t *y = cv->targets + (size_t)mb * cv->N;
    vshard_forward(c->logits, c->row_max, c->row_sum, c->tgt, sh->scratch, cv->x[mb], sh->w, y,
                   sh->v0, cv->N, d, sh->v);
    if (cv->shape.variant == SCHED_VOCAB_1)
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
    assert(shard >= 0 && shard < p && mb >= 0 && mb < m);
    cv_shard *sh = &cv->shard[shard];
    cv_cell *c = &cv->cell[mb * p + shard];
    const int32_t *y = cv->targets + (size_t)mb * cv->N;
    combine_stats(cv, mb, sh->lse, NULL);
    /* the trainer's B passes 1/m as dloss; T has no B to hear it from,
     * so it uses the same value: every micro-batch weighs 1/m */
    float dloss = 1.0f / (float)m;
    vshard_logit_grad(c->logits, c->logits, sh->lse, y, sh->v0, dloss, cv->N, sh->v);
    if (cv->shape.variant == SCHED_VOCAB_2)
        kern_matmul_backward_b(c->partial, c->logits, sh->w, cv->N, d, sh->v);
    /* dW in micro-batch order: now if it is this one's turn, else later */
    float *dw = sh->dw;
    if (mb != sh->next_t) {
        assert(mb > sh->next_t);
        if (!(dw = malloc(sizeof(float) * (size_t)d * (size_t)sh->v)))
            return zb_fail(err, "T of shard %d, micro-batch %d: out of memory", shard, mb);
    }
    kern_matmul_backward_w(dw, cv->x[mb], c->logits, cv->N, d, sh->v);
    if (mb == sh->next_t) {
        vshard_scatter_add(cv->head_grad, dw, d, V, sh->v0, sh->v);
        for (sh->next_t++; sh->next_t < m && sh->dw_ahead[sh->next_t]; sh->next_t++) {
            vshard_scatter_add(cv->head_grad, sh->dw_ahead[sh->next_t], d, V, sh->v0, sh->v);
            free(sh->dw_ahead[sh->next_t]);
            sh->dw_ahead[sh->next_t] = NULL;
        }
    } else {
        sh->dw_ahead[mb] = dw;
    }
    return 0;
}

int cpu_vocab_dx(zb_backend *be, zb_bvocab *bv, int dev, int mb, float dloss, void *dx,
                 float *loss, zb_err *err)
{
    (void)be;
    (void)dev;
    (void)err;
    cpu_vocab *cv = CV(bv);
    int p = cv->shape.shards, v1 = cv->shape.variant == SCHED_VOCAB_1;
    assert(mb >= 0 && mb < cv->shape.micro);
    *loss = (float)combine_stats(cv, mb, cv->dx_lse, v1 ? cv->dx_weight : NULL);
    const float *part[p], *w[p];
    for (int k = 0; k < p; k++) {
        part[k] = cv->cell[mb * p + k].partial;
        w[k] = cv->shard[k].w;
    }
    if (v1)
        vshard_combine_dx_v1(dx, part, cv->dx_weight, w, cv->targets + (size_t)mb * cv->N, dloss,
                             p, cv->shape.vocab, cv->N, cv->shape.d);
    else
        vshard_combine_dx_v2(dx, part, p, cv->N, cv->shape.d);
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
    /* logits, row max, target logit, row sum; Vocab-1's partial is held
     * from S too (Vocab-2 writes it at T) */
    return N * (sizeof(float) * (v + 2) + sizeof(double))
           + (shape->variant == SCHED_VOCAB_1 ? N * shape->d * sizeof(float) : 0);
}

double backend_cpu_vocab_bytes(const zb_vocab_shape *shape)
{
    double N = (double)shape->batch * shape->seq, d = shape->d, f = sizeof(float);
    int p = shape->shards, v1 = shape->variant == SCHED_VOCAB_1;
    double bytes = shape->micro * N * d * f  /* each micro-batch's head input */
                   + N * f;                  /* dx's lse */
    for (int k = 0; k < p; k++) {
        double v = vshard_begin(k + 1, p, shape->vocab) - vshard_begin(k, p, shape->vocab);
        bytes += 2 * d * v * f                /* w, dw */
                 + (v1 ? N * v * f : 0)       /* Vocab-1's local softmax */
                 + N * f + N * sizeof(double) /* lse, dx's rescale weights */
                 /* every cell: logits, row max, row sum, target logit, partial */
                 + shape->micro * N * (f * (v + 2 + d) + sizeof(double));
    }
    return bytes;
}

size_t cpu_vocab_cell_bytes(zb_backend *be, const zb_bvocab *bv, int shard)
{
    (void)be;
    return (size_t)backend_cpu_vocab_cell_bytes(&((const cpu_vocab *)bv)->shape, shard);
}
