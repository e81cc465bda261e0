/*
 * backend_cpu.c: the CPU backend (runtime/backend.h, backend_cpu.h) over
 * kernels/cpu/llama.h and adamw.h.
 *
 * Every buffer lives in host memory, so the host mirror of a buffer is the
 * buffer itself (download and upload are NULL), an activation is a plain
 * fp32 array, and an op has finished when it returns (no fences, sync only
 * has nothing to wait for).  Each op is the kernel call the executor made
 * before the backend interface existed, with the same arguments, so the
 * executor's results are the same bits as before and no copy was added.
 *
 * The kernels run on the calling thread's team (kernels/cpu/team.h), which
 * the executor binds per worker: the backend itself has no threads and no
 * per-device state, so n_devices is unused.  The vocabulary passes' ops are
 * in backend_cpu_vocab.c.
 */
#include "kernels/cpu/backend_cpu.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/adamw_shard.h"
#include "kernels/cpu/backend_cpu_impl.h"
#include "kernels/cpu/backend_cpu_vocab.h"
#include "kernels/cpu/buf_pool.h"
#include "src/mem_ledger.h"

/* The backend's state: only the bytes it holds, for memory. */
typedef struct cpu_impl {
    size_t static_bytes; /* stage buffers and snapshots (trainer_create's thread
                          * and the workers' first snapshot add to it: atomics) */
    mem_ledger *ledger;  /* every buffer below, by device and class (owned) */
} cpu_impl;

/* A spare weight-gradient buffer (zb_bgrads): the floats, and what to
 * release from the ledger when it is freed. */
typedef struct cpu_grads {
    int dev;              /* device of its stage */
    size_t n;             /* floats */
    _Alignas(16) float f[]; /* [n] */
} cpu_grads;

static float *grads_floats(zb_bgrads *g)
{
    return ((cpu_grads *)g)->f;
}

static float *cpu_floats(size_t n)
{
    return calloc(n ? n : 1, sizeof(float));
}

static void cpu_destroy(zb_backend *be)
{
    mem_ledger_free(((cpu_impl *)be->impl)->ledger);
    free(be->impl);
    free(be);
}

/* The ledger's class of each stage buffer, in buf[] order. */
static const mem_class buf_class[ZB_BUF_COUNT] = { MEM_PARAMETERS, MEM_GRADIENTS, MEM_OPTIMIZER,
                                                   MEM_OPTIMIZER };

/* Floats in buf[k]: m and v hold only the shard's under ZeRO-1. */
static size_t buf_floats(const cpu_stage *st, int k)
{
    int moment = k == ZB_BUF_ADAM_M || k == ZB_BUF_ADAM_V;
    return moment && st->n_shard > 0 ? st->shard_n : st->n;
}

/* Makes snap[k] hold at least n floats (a copy made before sharding is
 * larger than the shard's and serves it).  0 or -1 with err. */
static int snap_reserve(cpu_impl *im, cpu_stage *st, int k, size_t n, zb_err *err)
{
    if (st->snap[k] && st->snap_n[k] >= n)
        return 0;
    float *p = cpu_floats(n);
    if (!p)
        return zb_fail(err, "out of memory for a post-validation copy of %zu floats", n);
    if (st->snap[k]) {
        free(st->snap[k]);
        __atomic_sub_fetch(&im->static_bytes, sizeof(float) * st->snap_n[k], __ATOMIC_RELAXED);
        mem_ledger_release(im->ledger, st->dev, MEM_ROLLBACK, sizeof(float) * st->snap_n[k]);
    }
    st->snap[k] = p;
    st->snap_n[k] = n;
    __atomic_add_fetch(&im->static_bytes, sizeof(float) * n, __ATOMIC_RELAXED);
    mem_ledger_charge(im->ledger, st->dev, MEM_ROLLBACK, sizeof(float) * n);
    return 0;
}

static void cpu_stage_free(zb_backend *be, zb_bstage *bst)
{
    cpu_impl *im = be->impl;
    cpu_stage *st = (cpu_stage *)bst;
    if (!st)
        return;
    for (int k = 0; k < ZB_BUF_COUNT; k++)
        if (st->buf[k]) {
            free(st->buf[k]);
            mem_ledger_release(im->ledger, st->dev, buf_class[k], sizeof(float) * buf_floats(st, k));
        }
    for (int k = 0; k < 3; k++)
        if (st->snap[k]) {
            free(st->snap[k]);
            mem_ledger_release(im->ledger, st->dev, MEM_ROLLBACK, sizeof(float) * st->snap_n[k]);
        }
    free(st->shard_lo);
    free(st->shard_len);
    free(st);
}

static int cpu_stage_new(zb_backend *be, const llama_stage *layout, const llama_stage *compute,
                         int dev, zb_bstage **out, zb_err *err)
{
    cpu_impl *im = be->impl;
    if (dev < 0 || dev >= mem_ledger_devices(im->ledger))
        return zb_fail(err, "a stage on device %d of a %d-device backend", dev,
                       mem_ledger_devices(im->ledger));
    cpu_stage *st = calloc(1, sizeof *st);
    if (!st)
        return zb_fail(err, "out of memory");
    st->dev = dev;
    st->layout = layout;
    st->compute = compute ? compute : layout;
    st->n = llama_stage_num_params(layout);
    for (int k = 0; k < ZB_BUF_COUNT; k++)
        if (!(st->buf[k] = cpu_floats(st->n))) {
            size_t n = st->n;
            cpu_stage_free(be, (zb_bstage *)st);
            return zb_fail(err, "out of memory for a stage of %zu parameters", n);
        } else
            mem_ledger_charge(im->ledger, dev, buf_class[k], sizeof(float) * st->n);
    __atomic_add_fetch(&im->static_bytes, sizeof(float) * ZB_BUF_COUNT * st->n, __ATOMIC_RELAXED);
    /* the saved states' slots come from the compute layout's pool: charge
     * them to this device (a stage's layout lives on one device) */
    if (st->compute->pool)
        buf_pool_set_ledger(st->compute->pool, im->ledger, dev);
    *out = (zb_bstage *)st;
    return 0;
}

static float *cpu_host(zb_backend *be, zb_bstage *bst, zb_bbuf which)
{
    (void)be;
    return ((cpu_stage *)bst)->buf[which];
}

static int cpu_saved_new(zb_backend *be, zb_bstage *bst, int batch, int recompute,
                         zb_bsaved **out, zb_err *err)
{
    (void)be;
    llama_saved *sv = llama_saved_new(((cpu_stage *)bst)->compute, batch);
    if (!sv)
        return zb_fail(err, "out of memory for a saved state");
    if (recompute)
        llama_saved_set_recompute(sv, recompute); /* a LLAMA_RC_* level */
    *out = (zb_bsaved *)sv;
    return 0;
}

static void cpu_saved_free(zb_backend *be, zb_bsaved *sv)
{
    (void)be;
    llama_saved_free((llama_saved *)sv);
}

static size_t cpu_saved_bytes(zb_backend *be, const zb_bsaved *sv)
{
    (void)be;
    return llama_saved_bytes((const llama_saved *)sv);
}

static void *cpu_act_new(zb_backend *be, size_t n)
{
    (void)be;
    return malloc(sizeof(float) * (n ? n : 1));
}

static void cpu_act_free(zb_backend *be, void *act)
{
    (void)be;
    free(act);
}

static int cpu_act_upload(zb_backend *be, void *act, const float *host, size_t n, zb_err *err)
{
    (void)be;
    (void)err;
    memcpy(act, host, sizeof(float) * n);
    return 0;
}

static int cpu_act_download(zb_backend *be, const void *act, float *host, size_t n, zb_err *err)
{
    (void)be;
    (void)err;
    memcpy(host, act, sizeof(float) * n);
    return 0;
}

static int cpu_forward(zb_backend *be, zb_bstage *bst, zb_bsaved *sv, const int32_t *tokens,
                       const void *act_in, const int32_t *targets, void *act_out, float *loss,
                       zb_err *err)
{
    (void)be;
    cpu_stage *st = (cpu_stage *)bst;
    return llama_stage_forward(st->compute, st->buf[ZB_BUF_PARAMS], tokens, act_in, targets,
                               (llama_saved *)sv, act_out, loss, NULL, err);
}

static int cpu_backward_b(zb_backend *be, zb_bstage *bst, zb_bsaved *sv, float dloss,
                          const void *dy_in, void *dx_out, zb_err *err)
{
    (void)be;
    cpu_stage *st = (cpu_stage *)bst;
    return llama_stage_backward_b(st->compute, st->buf[ZB_BUF_PARAMS], (llama_saved *)sv, dloss,
                                  dy_in, dx_out, err);
}

static int cpu_backward_w(zb_backend *be, zb_bstage *bst, zb_bsaved *sv, zb_bgrads *into,
                          zb_err *err)
{
    (void)be;
    cpu_stage *st = (cpu_stage *)bst;
    return llama_stage_backward_w(st->compute, (llama_saved *)sv,
                                  into ? grads_floats(into) : st->buf[ZB_BUF_GRADS], err);
}

static int cpu_sync(zb_backend *be, zb_bstage *bst, zb_err *err)
{
    (void)be;
    (void)bst;
    (void)err;
    return 0; /* every op finished when it returned */
}

static zb_bgrads *cpu_grads_new(zb_backend *be, zb_bstage *bst)
{
    cpu_impl *im = be->impl;
    cpu_stage *st = (cpu_stage *)bst;
    cpu_grads *g = calloc(1, sizeof *g + sizeof(float) * (st->n ? st->n : 1));
    if (!g)
        return NULL;
    g->dev = st->dev;
    g->n = st->n;
    mem_ledger_charge(im->ledger, g->dev, MEM_GRADIENTS, sizeof(float) * g->n);
    return (zb_bgrads *)g;
}

static void cpu_grads_free(zb_backend *be, zb_bgrads *bg)
{
    cpu_impl *im = be->impl;
    cpu_grads *g = (cpu_grads *)bg;
    if (!g)
        return;
    mem_ledger_release(im->ledger, g->dev, MEM_GRADIENTS, sizeof(float) * g->n);
    free(g);
}

static int cpu_grads_zero(zb_backend *be, zb_bstage *bst, zb_bgrads *g, zb_err *err)
{
    (void)be;
    (void)err;
    cpu_stage *st = (cpu_stage *)bst;
    llama_grads_zero(st->layout, g ? grads_floats(g) : st->buf[ZB_BUF_GRADS]);
    return 0;
}

static int cpu_grads_add(zb_backend *be, zb_bstage *bst, const zb_bgrads *g, zb_err *err)
{
    (void)be;
    (void)err;
    cpu_stage *st = (cpu_stage *)bst;
    /* compute, not layout: the vocabulary passes may be writing the head's
     * part of the gradient from another thread at the same time */
    llama_grads_add(st->compute, st->buf[ZB_BUF_GRADS], grads_floats((zb_bgrads *)g));
    return 0;
}

static int cpu_grad_sumsq(zb_backend *be, zb_bstage *bst, double *out, zb_err *err)
{
    (void)be;
    (void)err;
    cpu_stage *st = (cpu_stage *)bst;
    adamw_tensor_sum_squares(st->layout, st->buf[ZB_BUF_GRADS], out);
    return 0;
}

static int cpu_adamw(zb_backend *be, zb_bstage *bst, const adamw_config *c, int t, float lr,
                     float grad_scale, zb_err *err)
{
    (void)be;
    (void)err;
    cpu_stage *st = (cpu_stage *)bst;
    if (st->n_shard > 0)
        adamw_step_stage_ranges(st->layout, c, st->buf[ZB_BUF_PARAMS], st->buf[ZB_BUF_GRADS],
                                st->buf[ZB_BUF_ADAM_M], st->buf[ZB_BUF_ADAM_V], st->shard_lo,
                                st->shard_len, st->n_shard, t, lr, grad_scale);
    else
        adamw_step_stage(st->layout, c, st->buf[ZB_BUF_PARAMS], st->buf[ZB_BUF_GRADS],
                         st->buf[ZB_BUF_ADAM_M], st->buf[ZB_BUF_ADAM_V], t, lr, grad_scale);
    return 0;
}

/* ZeRO-1: m and v shrink to the shard's floats (backend.h's opt_shard). */
static int cpu_opt_shard(zb_backend *be, zb_bstage *bst, const size_t *lo, const size_t *len,
                         int n, zb_err *err)
{
    cpu_impl *im = be->impl;
    cpu_stage *st = (cpu_stage *)bst;
    if (st->n_shard > 0 || st->snap[1] || st->snap[2])
        return zb_fail(err, "opt_shard: the stage's optimizer state is already in use");
    if (n < 1)
        return zb_fail(err, "opt_shard: an empty shard");
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        if (len[i] == 0 || lo[i] + len[i] > st->n || (i > 0 && lo[i] < lo[i - 1] + len[i - 1]))
            return zb_fail(err, "opt_shard: range %d [%zu, +%zu) is empty, out of the stage "
                           "or out of order", i, lo[i], len[i]);
        total += len[i];
    }
    size_t *l = malloc((size_t)n * sizeof *l), *c = malloc((size_t)n * sizeof *c);
    float *m = cpu_floats(total), *v = cpu_floats(total);
    if (!l || !c || !m || !v) {
        free(l);
        free(c);
        free(m);
        free(v);
        return zb_fail(err, "out of memory for an optimizer shard of %zu floats", total);
    }
    memcpy(l, lo, (size_t)n * sizeof *l);
    memcpy(c, len, (size_t)n * sizeof *c);
    free(st->buf[ZB_BUF_ADAM_M]);
    free(st->buf[ZB_BUF_ADAM_V]);
    st->buf[ZB_BUF_ADAM_M] = m;
    st->buf[ZB_BUF_ADAM_V] = v;
    st->shard_lo = l;
    st->shard_len = c;
    st->n_shard = n;
    st->shard_n = total;
    __atomic_sub_fetch(&im->static_bytes, sizeof(float) * 2 * (st->n - total), __ATOMIC_RELAXED);
    mem_ledger_release(im->ledger, st->dev, MEM_OPTIMIZER, sizeof(float) * 2 * (st->n - total));
    return 0;
}

/* The shard's parameters gathered into (gather) or scattered from a
 * packed array of st->shard_n floats. */
static void shard_params(cpu_stage *st, float *packed, int gather)
{
    float *p = st->buf[ZB_BUF_PARAMS];
    size_t at = 0;
    for (int i = 0; i < st->n_shard; i++) {
        if (gather)
            memcpy(packed + at, p + st->shard_lo[i], sizeof(float) * st->shard_len[i]);
        else
            memcpy(p + st->shard_lo[i], packed + at, sizeof(float) * st->shard_len[i]);
        at += st->shard_len[i];
    }
}

/* The buffers a snapshot covers, in snap[] order. */
static const zb_bbuf snap_of[3] = { ZB_BUF_PARAMS, ZB_BUF_ADAM_M, ZB_BUF_ADAM_V };

static int cpu_snapshot(zb_backend *be, zb_bstage *bst, zb_err *err)
{
    cpu_impl *im = be->impl;
    cpu_stage *st = (cpu_stage *)bst;
    /* sharded (ZeRO-1): only the shard's params, m and v ever change */
    size_t n = st->n_shard > 0 ? st->shard_n : st->n;
    for (int k = 0; k < 3; k++)
        if (snap_reserve(im, st, k, n, err) != 0)
            return -1;
    for (int k = 0; k < 3; k++)
        if (k == 0 && st->n_shard > 0)
            shard_params(st, st->snap[0], 1);
        else
            memcpy(st->snap[k], st->buf[snap_of[k]], sizeof(float) * n);
    return 0;
}

static int cpu_restore(zb_backend *be, zb_bstage *bst, zb_err *err)
{
    (void)be;
    cpu_stage *st = (cpu_stage *)bst;
    if (!st->snap[2])
        return zb_fail(err, "restore without a snapshot");
    size_t n = st->n_shard > 0 ? st->shard_n : st->n;
    for (int k = 0; k < 3; k++)
        if (k == 0 && st->n_shard > 0)
            shard_params(st, st->snap[0], 0);
        else
            memcpy(st->buf[snap_of[k]], st->snap[k], sizeof(float) * n);
    return 0;
}

/* The speculative step's half: snap[0] (the params' copy, the rollback
 * state) is the only buffer it needs. */
static int cpu_adamw_params(zb_backend *be, zb_bstage *bst, const adamw_config *c, int t,
                            float lr, float grad_scale, zb_err *err)
{
    cpu_impl *im = be->impl;
    cpu_stage *st = (cpu_stage *)bst;
    if (st->n_shard > 0) {
        /* ZeRO-1: m and v are packed by shard, which the split update does
         * not walk; the whole step over a copy of the shard (the moments
         * half is then a no-op, the undo a restore).  Same bits. */
        if (cpu_snapshot(be, bst, err) != 0)
            return -1;
        return cpu_adamw(be, bst, c, t, lr, grad_scale, err);
    }
    if (snap_reserve(im, st, 0, st->n, err) != 0)
        return -1;
    memcpy(st->snap[0], st->buf[ZB_BUF_PARAMS], sizeof(float) * st->n);
    adamw_step_stage_params(st->layout, c, st->buf[ZB_BUF_PARAMS], st->buf[ZB_BUF_GRADS],
                            st->buf[ZB_BUF_ADAM_M], st->buf[ZB_BUF_ADAM_V], t, lr, grad_scale);
    return 0;
}

static int cpu_adamw_moments(zb_backend *be, zb_bstage *bst, const adamw_config *c,
                             float grad_scale, zb_err *err)
{
    (void)be;
    (void)err;
    cpu_stage *st = (cpu_stage *)bst;
    if (st->n_shard > 0)
        return 0; /* cpu_adamw_params stepped them */
    adamw_step_stage_moments(st->layout, c, st->buf[ZB_BUF_GRADS], st->buf[ZB_BUF_ADAM_M],
                             st->buf[ZB_BUF_ADAM_V], grad_scale);
    return 0;
}

static int cpu_adamw_undo(zb_backend *be, zb_bstage *bst, zb_err *err)
{
    (void)be;
    cpu_stage *st = (cpu_stage *)bst;
    if (st->n_shard > 0)
        return cpu_restore(be, bst, err);
    if (!st->snap[0])
        return zb_fail(err, "adamw_undo without a speculative step");
    memcpy(st->buf[ZB_BUF_PARAMS], st->snap[0], sizeof(float) * st->n);
    return 0;
}

static int cpu_memory(zb_backend *be, size_t *static_bytes, size_t *peak, zb_err *err)
{
    (void)err;
    cpu_impl *im = be->impl;
    *static_bytes = __atomic_load_n(&im->static_bytes, __ATOMIC_RELAXED);
    *peak = 0; /* the executor samples the saved states itself (trainer_trace) */
    return 0;
}

static mem_ledger *cpu_ledger(zb_backend *be)
{
    return ((cpu_impl *)be->impl)->ledger;
}

static const zb_backend_ops cpu_ops = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .bind = NULL,
    .stage_new = cpu_stage_new,
    .stage_free = cpu_stage_free,
    .host = cpu_host,
    .download = NULL,
    .upload = NULL,
    .saved_new = cpu_saved_new,
    .saved_free = cpu_saved_free,
    .saved_bytes = cpu_saved_bytes,
    .act_new = cpu_act_new,
    .act_free = cpu_act_free,
    .act_upload = cpu_act_upload,
    .act_download = cpu_act_download,
    .act_issued = NULL,
    .act_wait = NULL,
    .forward = cpu_forward,
    .backward_b = cpu_backward_b,
    .backward_w = cpu_backward_w,
    .sync = cpu_sync,
    .grads_new = cpu_grads_new,
    .grads_free = cpu_grads_free,
    .grads_zero = cpu_grads_zero,
    .grads_add = cpu_grads_add,
    .grad_sumsq = cpu_grad_sumsq,
    .adamw = cpu_adamw,
    .adamw_params = cpu_adamw_params,
    .adamw_moments = cpu_adamw_moments,
    .adamw_undo = cpu_adamw_undo,
    .snapshot = cpu_snapshot,
    .restore = cpu_restore,
    .opt_shard = cpu_opt_shard,
    .vocab_new = cpu_vocab_new,
    .vocab_free = cpu_vocab_free,
    .vocab_begin = cpu_vocab_begin,
    .vocab_put_x = cpu_vocab_put_x,
    .vocab_s = cpu_vocab_s,
    .vocab_t = cpu_vocab_t,
    .vocab_dx = cpu_vocab_dx,
    .vocab_eval = cpu_vocab_eval,
    .vocab_cell_bytes = cpu_vocab_cell_bytes,
    .vocab_wire_bytes = cpu_vocab_wire_bytes,
    .vocab_export = cpu_vocab_export,
    .vocab_import = cpu_vocab_import,
    .memory = cpu_memory,
    .ledger = cpu_ledger,
};

int backend_cpu_create(int n_devices, zb_backend **out, zb_err *err)
{
    zb_backend *be = calloc(1, sizeof *be);
    cpu_impl *im = calloc(1, sizeof *im);
    mem_ledger *l = mem_ledger_new(n_devices > 0 ? n_devices : 1);
    if (!be || !im || !l) {
        free(be);
        free(im);
        mem_ledger_free(l);
        return zb_fail(err, "out of memory");
    }
    im->ledger = l;
    be->ops = &cpu_ops;
    be->impl = im;
    *out = be;
    return 0;
}
