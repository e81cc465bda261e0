/*
 * backend_rank.c: only the local device's stages reach the inner backend
 * (see backend_rank.h).
 */
#include "runtime/backend_rank.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct rank_impl {
    zb_backend *inner;      /* the wrapped backend (owned) */
    int local;              /* the one device whose stages it holds */
    zb_backend_ops ops;     /* this wrapper's table (optional members as the inner's) */
    char name[64];          /* "<inner>/rank" */
} rank_impl;

typedef struct rank_stage {
    zb_bstage *inner;           /* the inner stage; NULL: remote */
    int dev;                    /* its schedule device */
    size_t n;                   /* parameters */
    float *mirror[ZB_BUF_COUNT]; /* remote: the host arrays */
} rank_stage;

/* A remote stage's saved state: one shared token. */
static char remote_saved;

#define IMPL(be) ((rank_impl *)(be)->impl)
#define INNER(be) (IMPL(be)->inner)
#define RS(st) ((rank_stage *)(st))

static int remote(const rank_stage *rs, const char *op, zb_err *err)
{
    return zb_fail(err, "%s of a stage of device %d, which another rank runs", op, rs->dev);
}

static void rk_destroy(zb_backend *be)
{
    backend_free(INNER(be));
    free(IMPL(be));
    free(be);
}

static int rk_bind(zb_backend *be, int dev, zb_err *err)
{
    return INNER(be)->ops->bind(INNER(be), dev, err);
}

static void rk_stage_free(zb_backend *be, zb_bstage *st)
{
    rank_stage *rs = RS(st);
    if (!rs)
        return;
    if (rs->inner && INNER(be)->ops->stage_free)
        INNER(be)->ops->stage_free(INNER(be), rs->inner);
    for (int k = 0; k < ZB_BUF_COUNT; k++)
        free(rs->mirror[k]);
    free(rs);
}

static int rk_stage_new(zb_backend *be, const llama_stage *layout, const llama_stage *compute,
                        int dev, zb_bstage **out, zb_err *err)
{
    rank_stage *rs = calloc(1, sizeof *rs);
    if (!rs)
        return zb_fail(err, "out of memory");
    rs->dev = dev;
    rs->n = llama_stage_num_params(layout);
    if (dev == IMPL(be)->local) {
        if (INNER(be)->ops->stage_new(INNER(be), layout, compute, dev, &rs->inner, err) != 0) {
            free(rs);
            return -1;
        }
    } else {
        for (int k = 0; k < ZB_BUF_COUNT; k++)
            if (!(rs->mirror[k] = calloc(rs->n ? rs->n : 1, sizeof(float)))) {
                rk_stage_free(be, (zb_bstage *)rs);
                return zb_fail(err, "out of host memory for a remote stage's mirrors");
            }
    }
    *out = (zb_bstage *)rs;
    return 0;
}

static float *rk_host(zb_backend *be, zb_bstage *st, zb_bbuf which)
{
    rank_stage *rs = RS(st);
    return rs->inner ? INNER(be)->ops->host(INNER(be), rs->inner, which) : rs->mirror[which];
}

static int rk_download(zb_backend *be, zb_bstage *st, zb_bbuf which, zb_err *err)
{
    rank_stage *rs = RS(st);
    if (!rs->inner || !INNER(be)->ops->download)
        return 0;
    return INNER(be)->ops->download(INNER(be), rs->inner, which, err);
}

static int rk_upload(zb_backend *be, zb_bstage *st, zb_bbuf which, zb_err *err)
{
    rank_stage *rs = RS(st);
    if (!rs->inner || !INNER(be)->ops->upload)
        return 0;
    return INNER(be)->ops->upload(INNER(be), rs->inner, which, err);
}

static int rk_saved_new(zb_backend *be, zb_bstage *st, int batch, int recompute, zb_bsaved **out,
                        zb_err *err)
{
    rank_stage *rs = RS(st);
    if (!rs->inner) {
        *out = (zb_bsaved *)(void *)&remote_saved;
        return 0;
    }
    return INNER(be)->ops->saved_new(INNER(be), rs->inner, batch, recompute, out, err);
}

static void rk_saved_free(zb_backend *be, zb_bsaved *sv)
{
    if (sv && (void *)sv != (void *)&remote_saved && INNER(be)->ops->saved_free)
        INNER(be)->ops->saved_free(INNER(be), sv);
}

static size_t rk_saved_bytes(zb_backend *be, const zb_bsaved *sv)
{
    if ((const void *)sv == (const void *)&remote_saved)
        return 0;
    return INNER(be)->ops->saved_bytes(INNER(be), sv);
}

static void *rk_act_new(zb_backend *be, size_t n)
{
    return INNER(be)->ops->act_new(INNER(be), n);
}

static void rk_act_free(zb_backend *be, void *act)
{
    if (INNER(be)->ops->act_free)
        INNER(be)->ops->act_free(INNER(be), act);
}

static int rk_act_upload(zb_backend *be, void *act, const float *host, size_t n, zb_err *err)
{
    return INNER(be)->ops->act_upload(INNER(be), act, host, n, err);
}

static int rk_act_download(zb_backend *be, const void *act, float *host, size_t n, zb_err *err)
{
    return INNER(be)->ops->act_download(INNER(be), act, host, n, err);
}

static int rk_act_issued(zb_backend *be, int dev, void *act, zb_err *err)
{
    return INNER(be)->ops->act_issued(INNER(be), dev, act, err);
}

static int rk_act_wait(zb_backend *be, int dev, void *act, zb_err *err)
{
    return INNER(be)->ops->act_wait(INNER(be), dev, act, err);
}

static int rk_forward(zb_backend *be, zb_bstage *st, zb_bsaved *sv, const int32_t *tokens,
                      const void *act_in, const int32_t *targets, void *act_out, float *loss,
                      zb_err *err)
{
    rank_stage *rs = RS(st);
    if (!rs->inner)
        return remote(rs, "a forward", err);
    return INNER(be)->ops->forward(INNER(be), rs->inner, sv, tokens, act_in, targets, act_out,
                                   loss, err);
}

static int rk_backward_b(zb_backend *be, zb_bstage *st, zb_bsaved *sv, float dloss,
                         const void *dy_in, void *dx_out, zb_err *err)
{
    rank_stage *rs = RS(st);
    if (!rs->inner)
        return remote(rs, "an input-gradient pass (B)", err);
    return INNER(be)->ops->backward_b(INNER(be), rs->inner, sv, dloss, dy_in, dx_out, err);
}

static int rk_backward_w(zb_backend *be, zb_bstage *st, zb_bsaved *sv, zb_bgrads *into,
                         zb_err *err)
{
    rank_stage *rs = RS(st);
    if (!rs->inner)
        return remote(rs, "a weight-gradient pass (W)", err);
    return INNER(be)->ops->backward_w(INNER(be), rs->inner, sv, into, err);
}

static int rk_sync(zb_backend *be, zb_bstage *st, zb_err *err)
{
    rank_stage *rs = RS(st);
    if (!rs->inner)
        return 0; /* nothing queued */
    return INNER(be)->ops->sync(INNER(be), rs->inner, err);
}

static zb_bgrads *rk_grads_new(zb_backend *be, zb_bstage *st)
{
    rank_stage *rs = RS(st);
    return rs->inner ? INNER(be)->ops->grads_new(INNER(be), rs->inner) : NULL;
}

static void rk_grads_free(zb_backend *be, zb_bgrads *g)
{
    if (g && INNER(be)->ops->grads_free)
        INNER(be)->ops->grads_free(INNER(be), g);
}

static int rk_grads_zero(zb_backend *be, zb_bstage *st, zb_bgrads *g, zb_err *err)
{
    rank_stage *rs = RS(st);
    if (rs->inner)
        return INNER(be)->ops->grads_zero(INNER(be), rs->inner, g, err);
    if (g)
        return remote(rs, "zeroing a spare gradient", err);
    memset(rs->mirror[ZB_BUF_GRADS], 0, rs->n * sizeof(float));
    return 0;
}

static int rk_grads_add(zb_backend *be, zb_bstage *st, const zb_bgrads *g, zb_err *err)
{
    rank_stage *rs = RS(st);
    if (!rs->inner)
        return remote(rs, "adding gradients", err);
    return INNER(be)->ops->grads_add(INNER(be), rs->inner, g, err);
}

static int rk_grad_sumsq(zb_backend *be, zb_bstage *st, double *out, zb_err *err)
{
    rank_stage *rs = RS(st);
    if (!rs->inner)
        return remote(rs, "a gradient norm", err);
    return INNER(be)->ops->grad_sumsq(INNER(be), rs->inner, out, err);
}

static int rk_adamw(zb_backend *be, zb_bstage *st, const adamw_config *c, int t, float lr,
                    float grad_scale, zb_err *err)
{
    rank_stage *rs = RS(st);
    if (!rs->inner)
        return remote(rs, "an optimizer step", err);
    return INNER(be)->ops->adamw(INNER(be), rs->inner, c, t, lr, grad_scale, err);
}

static int rk_adamw_params(zb_backend *be, zb_bstage *st, const adamw_config *c, int t,
                           float lr, float grad_scale, zb_err *err)
{
    rank_stage *rs = RS(st);
    if (!rs->inner)
        return remote(rs, "an optimizer step", err);
    return INNER(be)->ops->adamw_params(INNER(be), rs->inner, c, t, lr, grad_scale, err);
}

static int rk_adamw_moments(zb_backend *be, zb_bstage *st, const adamw_config *c,
                            float grad_scale, zb_err *err)
{
    rank_stage *rs = RS(st);
    if (!rs->inner)
        return remote(rs, "an optimizer step", err);
    return INNER(be)->ops->adamw_moments(INNER(be), rs->inner, c, grad_scale, err);
}

static int rk_adamw_undo(zb_backend *be, zb_bstage *st, zb_err *err)
{
    rank_stage *rs = RS(st);
    if (!rs->inner)
        return remote(rs, "an optimizer step", err);
    return INNER(be)->ops->adamw_undo(INNER(be), rs->inner, err);
}

static int rk_snapshot(zb_backend *be, zb_bstage *st, zb_err *err)
{
    rank_stage *rs = RS(st);
    if (!rs->inner)
        return remote(rs, "a snapshot", err);
    return INNER(be)->ops->snapshot(INNER(be), rs->inner, err);
}

static int rk_restore(zb_backend *be, zb_bstage *st, zb_err *err)
{
    rank_stage *rs = RS(st);
    if (!rs->inner)
        return remote(rs, "a restore", err);
    return INNER(be)->ops->restore(INNER(be), rs->inner, err);
}

/* ZeRO-1: a remote stage's mirrors are never stepped here; nothing to do. */
static int rk_opt_shard(zb_backend *be, zb_bstage *st, const size_t *lo, const size_t *len, int n,
                        zb_err *err)
{
    rank_stage *rs = RS(st);
    if (!rs->inner)
        return 0;
    return INNER(be)->ops->opt_shard(INNER(be), rs->inner, lo, len, n, err);
}

static mem_ledger *rk_ledger(zb_backend *be)
{
    return INNER(be)->ops->ledger(INNER(be));
}

static int rk_memory(zb_backend *be, size_t *static_bytes, size_t *peak, zb_err *err)
{
    return INNER(be)->ops->memory(INNER(be), static_bytes, peak, err);
}

int backend_rank_wrap(zb_backend *inner, int local, zb_backend **out, zb_err *err)
{
    if (local < 0) {
        backend_free(inner);
        return zb_fail(err, "a rank's device must be >= 0, got %d", local);
    }
    zb_backend *be = calloc(1, sizeof *be);
    rank_impl *im = calloc(1, sizeof *im);
    if (!be || !im) {
        free(be);
        free(im);
        backend_free(inner);
        return zb_fail(err, "out of memory");
    }
    const zb_backend_ops *in = inner->ops;
    im->inner = inner;
    im->local = local;
    snprintf(im->name, sizeof im->name, "%s/rank", in->name);
    im->ops = (zb_backend_ops){
        .name = im->name,
        .destroy = rk_destroy,
        .bind = in->bind ? rk_bind : NULL,
        .stage_new = rk_stage_new,
        .stage_free = rk_stage_free,
        .host = rk_host,
        /* remote stages keep their own mirrors, so the executor must treat
         * the wrapper as mirrored whatever the inner backend is */
        .download = rk_download,
        .upload = rk_upload,
        .saved_new = rk_saved_new,
        .saved_free = rk_saved_free,
        .saved_bytes = rk_saved_bytes,
        .act_new = rk_act_new,
        .act_free = rk_act_free,
        .act_upload = in->act_upload ? rk_act_upload : NULL,
        .act_download = in->act_download ? rk_act_download : NULL,
        .act_issued = in->act_issued ? rk_act_issued : NULL,
        .act_wait = in->act_wait ? rk_act_wait : NULL,
        .forward = rk_forward,
        .backward_b = rk_backward_b,
        .backward_w = rk_backward_w,
        .sync = rk_sync,
        .grads_new = rk_grads_new,
        .grads_free = rk_grads_free,
        .grads_zero = rk_grads_zero,
        .grads_add = rk_grads_add,
        .grad_sumsq = rk_grad_sumsq,
        .adamw = rk_adamw,
        .adamw_params = in->adamw_params ? rk_adamw_params : NULL,
        .adamw_moments = in->adamw_moments ? rk_adamw_moments : NULL,
        .adamw_undo = in->adamw_undo ? rk_adamw_undo : NULL,
        .snapshot = rk_snapshot,
        .restore = rk_restore,
        .opt_shard = in->opt_shard ? rk_opt_shard : NULL,
        .memory = rk_memory,
        .ledger = in->ledger ? rk_ledger : NULL,
    };
    be->ops = &im->ops;
    be->impl = im;
    *out = be;
    return 0;
}
