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

#include "kernels/cpu/backend_cpu_impl.h"
#include "kernels/cpu/backend_cpu_vocab.h"

/* The backend's state: only the bytes it holds, for memory. */
typedef struct cpu_impl {
    size_t static_bytes; /* stage buffers and snapshots (trainer_create's thread
                          * and the workers' first snapshot add to it: atomics) */
} cpu_impl;

static float *cpu_floats(size_t n)
{
    return calloc(n ? n : 1, sizeof(float));
}

static void cpu_destroy(zb_backend *be)
{
    free(be->impl);
    free(be);
}

static void cpu_stage_free(zb_backend *be, zb_bstage *bst)
{
    (void)be;
    cpu_stage *st = (cpu_stage *)bst;
    if (!st)
        return;
    for (int k = 0; k < ZB_BUF_COUNT; k++)
        free(st->buf[k]);
    for (int k = 0; k < 3; k++)
        free(st->snap[k]);
    free(st);
}

static int cpu_stage_new(zb_backend *be, const llama_stage *layout, const llama_stage *compute,
                         int dev, zb_bstage **out, zb_err *err)
{
    (void)dev;
    cpu_impl *im = be->impl;
    cpu_stage *st = calloc(1, sizeof *st);
    if (!st)
        return zb_fail(err, "out of memory");
    st->layout = layout;
    st->compute = compute ? compute : layout;
    st->n = llama_stage_num_params(layout);
    for (int k = 0; k < ZB_BUF_COUNT; k++)
        if (!(st->buf[k] = cpu_floats(st->n))) {
            size_t n = st->n;
            cpu_stage_free(be, (zb_bstage *)st);
            return zb_fail(err, "out of memory for a stage of %zu parameters", n);
        }
    __atomic_add_fetch(&im->static_bytes, sizeof(float) * ZB_BUF_COUNT * st->n, __ATOMIC_RELAXED);
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
                                  into ? (float *)into : st->buf[ZB_BUF_GRADS], err);
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
    (void)be;
    return (zb_bgrads *)cpu_floats(((cpu_stage *)bst)->n);
}

static void cpu_grads_free(zb_backend *be, zb_bgrads *g)
{
    (void)be;
    free(g);
}

static int cpu_grads_zero(zb_backend *be, zb_bstage *bst, zb_bgrads *g, zb_err *err)
{
    (void)be;
    (void)err;
    cpu_stage *st = (cpu_stage *)bst;
    llama_grads_zero(st->layout, g ? (float *)g : st->buf[ZB_BUF_GRADS]);
    return 0;
}

static int cpu_grads_add(zb_backend *be, zb_bstage *bst, const zb_bgrads *g, zb_err *err)
{
    (void)be;
    (void)err;
    cpu_stage *st = (cpu_stage *)bst;
    /* compute, not layout: the vocabulary passes may be writing the head's
     * part of the gradient from another thread at the same time */
    llama_grads_add(st->compute, st->buf[ZB_BUF_GRADS], (const float *)g);
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
    adamw_step_stage(st->layout, c, st->buf[ZB_BUF_PARAMS], st->buf[ZB_BUF_GRADS],
                     st->buf[ZB_BUF_ADAM_M], st->buf[ZB_BUF_ADAM_V], t, lr, grad_scale);
    return 0;
}

/* The buffers a snapshot covers, in snap[] order. */
static const zb_bbuf snap_of[3] = { ZB_BUF_PARAMS, ZB_BUF_ADAM_M, ZB_BUF_ADAM_V };

static int cpu_snapshot(zb_backend *be, zb_bstage *bst, zb_err *err)
{
    cpu_impl *im = be->impl;
    cpu_stage *st = (cpu_stage *)bst;
    if (!st->snap[0]) {
        for (int k = 0; k < 3; k++)
            if (!st->snap[k] && !(st->snap[k] = cpu_floats(st->n)))
                return zb_fail(err, "out of memory for a post-validation snapshot");
        __atomic_add_fetch(&im->static_bytes, sizeof(float) * 3 * st->n, __ATOMIC_RELAXED);
    }
    for (int k = 0; k < 3; k++)
        memcpy(st->snap[k], st->buf[snap_of[k]], sizeof(float) * st->n);
    return 0;
}

static int cpu_restore(zb_backend *be, zb_bstage *bst, zb_err *err)
{
    (void)be;
    cpu_stage *st = (cpu_stage *)bst;
    if (!st->snap[0])
        return zb_fail(err, "restore without a snapshot");
    for (int k = 0; k < 3; k++)
        memcpy(st->buf[snap_of[k]], st->snap[k], sizeof(float) * st->n);
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
    .snapshot = cpu_snapshot,
    .restore = cpu_restore,
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
};

int backend_cpu_create(int n_devices, zb_backend **out, zb_err *err)
{
    (void)n_devices;
    zb_backend *be = calloc(1, sizeof *be);
    cpu_impl *im = calloc(1, sizeof *im);
    if (!be || !im) {
        free(be);
        free(im);
        return zb_fail(err, "out of memory");
    }
    be->ops = &cpu_ops;
    be->impl = im;
    *out = be;
    return 0;
}
