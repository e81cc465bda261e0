/*
 * mirror_backend.h: a wrapper backend (runtime/backend.h) over the CPU
 * backend, for tests that need the executor's backend paths without a GPU.
 *
 *   counting  (mb_make_wrapper ctx NULL) forwards every op and mb_counts it; its
 *             host mirror is the CPU buffer, as on the CPU;
 *   mirrored  (ctx non-NULL) also keeps its own host copies, initialised
 *             to garbage, and implements download / upload and the
 *             activation fences like a GPU backend, so every path the
 *             CUDA backend takes through the executor (mirrors pushed
 *             before a step, pulled by accessors and checkpoints) runs,
 *             with results that must stay bit-identical to the CPU's.
 *             It also holds the executor to the two asynchronous parts of
 *             the contract: a forward's loss is poisoned (NaN) until the
 *             stage's sync writes it, and every activation an op touches
 *             must have been taken with act_wait by that op's device since
 *             another device last issued it (else the op fails, naming
 *             the buffer's state).
 *
 * Header-only (static functions): tests/runtime/test_backend.c includes it,
 * and so does the stand-in CUDA module (fake_cuda_module.c), whose
 * backend_create returns the mirrored wrapper so that `run --device cuda`
 * trains end to end without a GPU.
 */
#ifndef ZB_TESTS_MIRROR_BACKEND_H
#define ZB_TESTS_MIRROR_BACKEND_H

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/backend_cpu.h"
#include "runtime/backend.h"

/* Op counters (workers call concurrently: atomics). */
enum { MB_C_FWD, MB_C_B, MB_C_W, MB_C_ADAMW, MB_C_SUMSQ, MB_C_SNAP, MB_C_RESTORE, MB_C_DOWN, MB_C_UP, MB_C_WAIT, MB_C_ISSUED,
       MB_C_SYNC, MB_C_STAGE, MB_C_COUNT };
static long mb_counts[MB_C_COUNT];

static void mb_bump(int k)
{
    __atomic_add_fetch(&mb_counts[k], 1, __ATOMIC_RELAXED);
}

/* Activations tracked by the fence check (the executor's pool holds at
 * most 2 S m + 4, evaluation 2 more). */
#define MB_ACTS 4096
/* Fence states of a tracked activation (else the device that took it). */
enum { MB_FRESH = -2, MB_RELEASED = -1 };
/* Losses a stage holds between two syncs. */
#define MB_LOSS 256

typedef struct wrap_impl {
    zb_backend *inner;    /* the CPU backend */
    int mirrored;         /* 1: separate host copies, download/upload, checks */
    pthread_mutex_t mu;   /* guards the table below */
    void *act[MB_ACTS];   /* tracked activations (NULL: free slot) */
    int owner[MB_ACTS];   /* MB_FRESH, MB_RELEASED or the device holding it */
} wrap_impl;

typedef struct wrap_stage {
    zb_bstage *inner;             /* the CPU stage */
    int dev;                      /* its schedule device */
    size_t n;                     /* floats per buffer */
    float *mirror[ZB_BUF_COUNT];  /* mirrored mode: host copies */
    float *loss_to[MB_LOSS];      /* mirrored mode: losses awaiting sync */
    float loss_val[MB_LOSS];      /* their values */
    int n_loss;                   /* entries in use */
} wrap_stage;

#define IN(be) (((wrap_impl *)(be)->impl)->inner)
#define IST(st) (((wrap_stage *)(st))->inner)

static void w_destroy(zb_backend *be)
{
    pthread_mutex_destroy(&((wrap_impl *)be->impl)->mu);
    backend_free(IN(be));
    free(be->impl);
    free(be);
}

static void w_stage_free(zb_backend *be, zb_bstage *st)
{
    if (!st)
        return;
    wrap_stage *ws = (wrap_stage *)st;
    IN(be)->ops->stage_free(IN(be), ws->inner);
    for (int k = 0; k < ZB_BUF_COUNT; k++)
        free(ws->mirror[k]);
    free(ws);
}

static int w_stage_new(zb_backend *be, const llama_stage *layout, const llama_stage *compute,
                       int dev, zb_bstage **out, zb_err *err)
{
    mb_bump(MB_C_STAGE);
    wrap_stage *ws = calloc(1, sizeof *ws);
    if (!ws)
        return zb_fail(err, "out of memory");
    if (IN(be)->ops->stage_new(IN(be), layout, compute, dev, &ws->inner, err) != 0) {
        free(ws);
        return -1;
    }
    ws->n = llama_stage_num_params(layout);
    ws->dev = dev;
    if (((wrap_impl *)be->impl)->mirrored)
        for (int k = 0; k < ZB_BUF_COUNT; k++) {
            /* garbage, not zeros: a mirror handed out without a download
             * must show */
            ws->mirror[k] = malloc(sizeof(float) * (ws->n ? ws->n : 1));
            if (!ws->mirror[k]) {
                w_stage_free(be, (zb_bstage *)ws);
                return zb_fail(err, "out of memory");
            }
            for (size_t i = 0; i < ws->n; i++)
                ws->mirror[k][i] = 1e30f;
        }
    *out = (zb_bstage *)ws;
    return 0;
}

static float *w_host(zb_backend *be, zb_bstage *st, zb_bbuf which)
{
    wrap_stage *ws = (wrap_stage *)st;
    return ws->mirror[which] ? ws->mirror[which] : IN(be)->ops->host(IN(be), ws->inner, which);
}

static int w_download(zb_backend *be, zb_bstage *st, zb_bbuf which, zb_err *err)
{
    (void)err;
    mb_bump(MB_C_DOWN);
    wrap_stage *ws = (wrap_stage *)st;
    memcpy(ws->mirror[which], IN(be)->ops->host(IN(be), ws->inner, which), sizeof(float) * ws->n);
    return 0;
}

static int w_upload(zb_backend *be, zb_bstage *st, zb_bbuf which, zb_err *err)
{
    (void)err;
    mb_bump(MB_C_UP);
    wrap_stage *ws = (wrap_stage *)st;
    memcpy(IN(be)->ops->host(IN(be), ws->inner, which), ws->mirror[which], sizeof(float) * ws->n);
    return 0;
}

static int w_saved_new(zb_backend *be, zb_bstage *st, int batch, int recompute, zb_bsaved **out,
                       zb_err *err)
{
    return IN(be)->ops->saved_new(IN(be), IST(st), batch, recompute, out, err);
}

static void w_saved_free(zb_backend *be, zb_bsaved *sv)
{
    IN(be)->ops->saved_free(IN(be), sv);
}

static size_t w_saved_bytes(zb_backend *be, const zb_bsaved *sv)
{
    return IN(be)->ops->saved_bytes(IN(be), sv);
}

/* The table slot of activation p (a free one when p is NULL); caller
 * holds mu.  -1 when absent (or the table is full). */
static int mb_slot(wrap_impl *im, const void *p)
{
    for (int i = 0; i < MB_ACTS; i++)
        if (im->act[i] == p)
            return i;
    return -1;
}

static void *w_act_new(zb_backend *be, size_t n)
{
    wrap_impl *im = be->impl;
    void *p = IN(be)->ops->act_new(IN(be), n);
    if (p && im->mirrored) {
        pthread_mutex_lock(&im->mu);
        int i = mb_slot(im, NULL);
        if (i >= 0) {
            im->act[i] = p;
            im->owner[i] = MB_FRESH;
        }
        pthread_mutex_unlock(&im->mu);
    }
    return p;
}

static void w_act_free(zb_backend *be, void *a)
{
    wrap_impl *im = be->impl;
    if (a && im->mirrored) {
        pthread_mutex_lock(&im->mu);
        int i = mb_slot(im, a);
        if (i >= 0)
            im->act[i] = NULL;
        pthread_mutex_unlock(&im->mu);
    }
    IN(be)->ops->act_free(IN(be), a);
}

/* 0 when device dev may use activation a now (fresh, or taken by dev with
 * act_wait since it was last issued), else -1 with err.  With release,
 * a becomes MB_RELEASED (act_issued). */
static int mb_fence_use(zb_backend *be, int dev, const void *a, int release, const char *what,
                        zb_err *err)
{
    wrap_impl *im = be->impl;
    if (!a || !im->mirrored)
        return 0;
    pthread_mutex_lock(&im->mu);
    int i = mb_slot(im, a), rc = 0, owner = i >= 0 ? im->owner[i] : MB_FRESH;
    if (i >= 0 && owner != MB_FRESH && owner != dev)
        rc = -1;
    else if (i >= 0 && release)
        im->owner[i] = MB_RELEASED;
    pthread_mutex_unlock(&im->mu);
    if (rc != 0)
        return zb_fail(err, "fence protocol: device %d %s an activation it did not take with "
                       "act_wait (its state: %s %d)", dev, what,
                       owner == MB_RELEASED ? "issued, not taken since" : "held by device",
                       owner);
    return 0;
}

static int w_act_issued(zb_backend *be, int dev, void *a, zb_err *err)
{
    mb_bump(MB_C_ISSUED);
    return mb_fence_use(be, dev, a, 1, "issued", err);
}

static int w_act_wait(zb_backend *be, int dev, void *a, zb_err *err)
{
    (void)err;
    mb_bump(MB_C_WAIT);
    wrap_impl *im = be->impl;
    pthread_mutex_lock(&im->mu);
    int i = mb_slot(im, a);
    if (i >= 0)
        im->owner[i] = dev;
    pthread_mutex_unlock(&im->mu);
    return 0;
}

static int w_sync(zb_backend *be, zb_bstage *st, zb_err *err);

static int w_forward(zb_backend *be, zb_bstage *st, zb_bsaved *sv, const int32_t *tok,
                     const void *in, const int32_t *tgt, void *out, float *loss, zb_err *err)
{
    mb_bump(MB_C_FWD);
    wrap_stage *ws = (wrap_stage *)st;
    if (!((wrap_impl *)be->impl)->mirrored)
        return IN(be)->ops->forward(IN(be), IST(st), sv, tok, in, tgt, out, loss, err);
    if (mb_fence_use(be, ws->dev, in, 0, "read", err) != 0
        || mb_fence_use(be, ws->dev, out, 0, "wrote", err) != 0)
        return -1;
    float value = 0;
    if (IN(be)->ops->forward(IN(be), IST(st), sv, tok, in, tgt, out, loss ? &value : NULL, err)
        != 0)
        return -1;
    if (loss) { /* deferred like a GPU's: NaN until the stage syncs */
        if (ws->n_loss == MB_LOSS && w_sync(be, st, err) != 0)
            return -1;
        ws->loss_to[ws->n_loss] = loss;
        ws->loss_val[ws->n_loss++] = value;
        *loss = NAN;
    }
    return 0;
}

static int w_backward_b(zb_backend *be, zb_bstage *st, zb_bsaved *sv, float dloss,
                        const void *dy, void *dx, zb_err *err)
{
    mb_bump(MB_C_B);
    wrap_stage *ws = (wrap_stage *)st;
    if (mb_fence_use(be, ws->dev, dy, 0, "read", err) != 0
        || mb_fence_use(be, ws->dev, dx, 0, "wrote", err) != 0)
        return -1;
    return IN(be)->ops->backward_b(IN(be), IST(st), sv, dloss, dy, dx, err);
}

static int w_backward_w(zb_backend *be, zb_bstage *st, zb_bsaved *sv, zb_bgrads *into,
                        zb_err *err)
{
    mb_bump(MB_C_W);
    return IN(be)->ops->backward_w(IN(be), IST(st), sv, into, err);
}

static int w_sync(zb_backend *be, zb_bstage *st, zb_err *err)
{
    mb_bump(MB_C_SYNC);
    wrap_stage *ws = (wrap_stage *)st;
    for (int k = 0; k < ws->n_loss; k++)
        *ws->loss_to[k] = ws->loss_val[k];
    ws->n_loss = 0;
    return IN(be)->ops->sync(IN(be), IST(st), err);
}

static zb_bgrads *w_grads_new(zb_backend *be, zb_bstage *st)
{
    return IN(be)->ops->grads_new(IN(be), IST(st));
}

static void w_grads_free(zb_backend *be, zb_bgrads *g)
{
    IN(be)->ops->grads_free(IN(be), g);
}

static int w_grads_zero(zb_backend *be, zb_bstage *st, zb_bgrads *g, zb_err *err)
{
    return IN(be)->ops->grads_zero(IN(be), IST(st), g, err);
}

static int w_grads_add(zb_backend *be, zb_bstage *st, const zb_bgrads *g, zb_err *err)
{
    return IN(be)->ops->grads_add(IN(be), IST(st), g, err);
}

static int w_grad_sumsq(zb_backend *be, zb_bstage *st, double *out, zb_err *err)
{
    mb_bump(MB_C_SUMSQ);
    return IN(be)->ops->grad_sumsq(IN(be), IST(st), out, err);
}

static int w_adamw(zb_backend *be, zb_bstage *st, const adamw_config *c, int t, float lr,
                   float scale, zb_err *err)
{
    mb_bump(MB_C_ADAMW);
    return IN(be)->ops->adamw(IN(be), IST(st), c, t, lr, scale, err);
}

static int w_snapshot(zb_backend *be, zb_bstage *st, zb_err *err)
{
    mb_bump(MB_C_SNAP);
    return IN(be)->ops->snapshot(IN(be), IST(st), err);
}

static int w_restore(zb_backend *be, zb_bstage *st, zb_err *err)
{
    mb_bump(MB_C_RESTORE);
    return IN(be)->ops->restore(IN(be), IST(st), err);
}

/* The vocabulary passes (runtime/vocab_exec.h) on the inner stage, the
 * device's buffers: in mirrored mode the head input and its gradient obey
 * the fences like every other activation an op touches. */
/* S and T passes that went through the wrapper (workers: atomics). */
static long mb_vocab_passes;

static int w_vocab_new(zb_backend *be, const zb_vocab_shape *sh, zb_bvocab **out, zb_err *err)
{
    return IN(be)->ops->vocab_new(IN(be), sh, out, err);
}

static void w_vocab_free(zb_backend *be, zb_bvocab *v)
{
    IN(be)->ops->vocab_free(IN(be), v);
}

static int w_vocab_begin(zb_backend *be, zb_bvocab *v, zb_bstage *st, size_t off,
                         const int32_t *y, zb_err *err)
{
    return IN(be)->ops->vocab_begin(IN(be), v, IST(st), off, y, err);
}

static int w_vocab_put_x(zb_backend *be, zb_bvocab *v, int dev, int mb, const void *x,
                         zb_err *err)
{
    if (mb_fence_use(be, dev, x, 0, "read", err) != 0)
        return -1;
    return IN(be)->ops->vocab_put_x(IN(be), v, dev, mb, x, err);
}

static int w_vocab_s(zb_backend *be, zb_bvocab *v, int shard, int mb, zb_err *err)
{
    __atomic_add_fetch(&mb_vocab_passes, 1, __ATOMIC_RELAXED);
    return IN(be)->ops->vocab_s(IN(be), v, shard, mb, err);
}

static int w_vocab_t(zb_backend *be, zb_bvocab *v, int shard, int mb, zb_err *err)
{
    __atomic_add_fetch(&mb_vocab_passes, 1, __ATOMIC_RELAXED);
    return IN(be)->ops->vocab_t(IN(be), v, shard, mb, err);
}

static int w_vocab_dx(zb_backend *be, zb_bvocab *v, int dev, int mb, float dloss, void *dx,
                      float *loss, zb_err *err)
{
    if (mb_fence_use(be, dev, dx, 0, "wrote", err) != 0)
        return -1;
    return IN(be)->ops->vocab_dx(IN(be), v, dev, mb, dloss, dx, loss, err);
}

static int w_vocab_eval(zb_backend *be, zb_bvocab *v, zb_bstage *st, size_t off, const void *x,
                        const int32_t *y, int batch, double *loss, zb_err *err)
{
    return IN(be)->ops->vocab_eval(IN(be), v, IST(st), off, x, y, batch, loss, err);
}

static size_t w_vocab_cell_bytes(zb_backend *be, const zb_bvocab *v, int shard)
{
    return IN(be)->ops->vocab_cell_bytes(IN(be), v, shard);
}

static int w_memory(zb_backend *be, size_t *a, size_t *b, zb_err *err)
{
    return IN(be)->ops->memory(IN(be), a, b, err);
}

static const zb_backend_ops counting_ops = {
    .name = "counting", .destroy = w_destroy, .stage_new = w_stage_new,
    .stage_free = w_stage_free, .host = w_host, .saved_new = w_saved_new,
    .saved_free = w_saved_free, .saved_bytes = w_saved_bytes, .act_new = w_act_new,
    .act_free = w_act_free, .forward = w_forward, .backward_b = w_backward_b,
    .backward_w = w_backward_w, .sync = w_sync, .grads_new = w_grads_new,
    .grads_free = w_grads_free, .grads_zero = w_grads_zero, .grads_add = w_grads_add,
    .grad_sumsq = w_grad_sumsq, .adamw = w_adamw, .snapshot = w_snapshot,
    .restore = w_restore, .memory = w_memory, .vocab_new = w_vocab_new,
    .vocab_free = w_vocab_free, .vocab_begin = w_vocab_begin, .vocab_put_x = w_vocab_put_x,
    .vocab_s = w_vocab_s, .vocab_t = w_vocab_t, .vocab_dx = w_vocab_dx,
    .vocab_eval = w_vocab_eval, .vocab_cell_bytes = w_vocab_cell_bytes,
};

static const zb_backend_ops mirrored_ops = {
    .name = "mirrored", .destroy = w_destroy, .stage_new = w_stage_new,
    .stage_free = w_stage_free, .host = w_host, .download = w_download, .upload = w_upload,
    .saved_new = w_saved_new, .saved_free = w_saved_free, .saved_bytes = w_saved_bytes,
    .act_new = w_act_new, .act_free = w_act_free, .act_issued = w_act_issued,
    .act_wait = w_act_wait, .forward = w_forward, .backward_b = w_backward_b,
    .backward_w = w_backward_w, .sync = w_sync, .grads_new = w_grads_new,
    .grads_free = w_grads_free, .grads_zero = w_grads_zero, .grads_add = w_grads_add,
    .grad_sumsq = w_grad_sumsq, .adamw = w_adamw, .snapshot = w_snapshot,
    .restore = w_restore, .memory = w_memory, .vocab_new = w_vocab_new,
    .vocab_free = w_vocab_free, .vocab_begin = w_vocab_begin, .vocab_put_x = w_vocab_put_x,
    .vocab_s = w_vocab_s, .vocab_t = w_vocab_t, .vocab_dx = w_vocab_dx,
    .vocab_eval = w_vocab_eval, .vocab_cell_bytes = w_vocab_cell_bytes,
};

/* make_backend of trainer_opts: ctx is "1" for the mirrored mode. */
static int mb_make_wrapper(void *ctx, int n_devices, zb_backend **out, zb_err *err)
{
    int mirrored = ctx != NULL;
    zb_backend *be = calloc(1, sizeof *be);
    wrap_impl *im = calloc(1, sizeof *im);
    if (!be || !im || backend_cpu_create(n_devices, &im->inner, err) != 0) {
        free(be);
        free(im);
        return zb_fail(err, "cannot make the wrapper backend");
    }
    im->mirrored = mirrored;
    pthread_mutex_init(&im->mu, NULL);
    be->ops = mirrored ? &mirrored_ops : &counting_ops;
    be->impl = im;
    *out = be;
    return 0;
}

#endif
