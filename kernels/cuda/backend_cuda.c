/*
 * backend_cuda.c: the CUDA backend of the executor (runtime/backend.h)
 * over kernels/cuda/gpu_stage.h, built into the module zbsched_cuda.so.
 *
 * One GPU holds every device of the schedule: each device gets its own
 * zb_cuda context (a stream and a cuBLASLt handle), so the schedule's
 * devices overlap on the GPU exactly as far as the schedule's dependencies
 * allow.  The executor's worker thread of device d issues d's ops on d's
 * stream and never waits for the GPU inside a step:
 *
 *   activations  a bf16 device buffer of B*T*d plus one fence (a CUDA
 *                event).  act_issued records the fence on the stream of
 *                the device that last used the buffer; act_wait makes the
 *                next user's stream wait for it.  The in-process transport
 *                hands the pointer over, so a message costs no copy: the
 *                consumer reads the producer's buffer once its stream has
 *                passed the fence.
 *   losses       a forward of the head stage queues a device-to-device
 *                copy of its loss sum into the stage's loss slots; sync
 *                waits for the stream and converts them into the
 *                executor's host floats.
 *   mirrors      each stage has four host arrays (params, grads, m, v) in
 *                the CPU layout; download / upload copy the fp32 master
 *                weights, gradients and moments, so checkpoints, the
 *                outer optimizer and replica averaging work on the host
 *                and a checkpoint loads on either backend.
 *
 * Post-validation: stage 0's speculative step is gpu_stage.h's split
 * update (adamw_params, then adamw_moments or adamw_undo), which keeps one
 * fp32 copy of the stage's master weights (4 bytes a parameter) and no
 * copy of m and v; snapshot and restore (master, m and v, 12 bytes a
 * parameter) remain for callers that want the whole state back.
 *
 * Precision is gpu_stage.h's: bf16 weights and activations, fp32 master,
 * gradients and moments, so results agree with the CPU backend within
 * bf16 tolerance (tests/cuda/test_cuda_backend.c), not bit for bit.
 *
 * Pipeline ranks (backend_cuda_create_rank): a process that runs one
 * schedule device of several (trainer_opts.one_device, one GPU per rank)
 * gets a context for that device only, wrapped by runtime/backend_rank.h,
 * which keeps the other devices' stages as host mirrors (nothing of them
 * on the GPU: a GPU cannot hold every stage of a real model, and this
 * rank never runs them).
 *
 * Recomputation (saved_new's level: full or mlp) is gpu_stage.h's, with
 * the CPU stage's semantics.  Vocabulary parallelism: the head stage runs
 * its final-norm-only form (gpu_stage_create_compute) and the S and T
 * passes are backend_cuda_vocab.c's.  Memory layers are gpu_stage.cu's
 * (over memory_cuda.h's kernels).
 */
#include "kernels/cuda/backend_cuda.h"

#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "kernels/cuda/backend_cuda_impl.h"
#include "kernels/cuda/gpu_stage.h"
#include "runtime/backend_rank.h"
#include "kernels/cuda/gpu_transport.h"
#include "kernels/cuda/zb_cuda.h"


/* Makes the backend's GPU current on the calling thread.  The workers bind
 * once per job, but the executor's main thread also calls some ops
 * between steps (zeroing grads, the synchronous clip, resets, frees), so
 * every op that may run there starts with this; it costs a driver call of
 * well under a microsecond when the device is already current. */
static int on_gpu(zb_backend *be, zb_err *err)
{
    return zb_cuda_set_device(IMPL(be)->gpu, err);
}


/* on_gpu where there is no error to report (frees). */
static void on_gpu_quiet(zb_backend *be)
{
    zb_err ignored;
    on_gpu(be, &ignored);
}

static void cb_destroy(zb_backend *be)
{
    cuda_impl *im = IMPL(be);
    for (int d = 0; d < im->n_devices && im->ctx; d++)
        if (im->ctx[d])
            zb_cuda_free(im->ctx[d]);
    free(im->ctx);
    free(im);
    free(be);
}

static int cb_bind(zb_backend *be, int dev, zb_err *err)
{
    (void)dev;
    return on_gpu(be, err);
}

static void cb_stage_free(zb_backend *be, zb_bstage *bst)
{
    cuda_stage *cs = (cuda_stage *)bst;
    if (!cs)
        return;
    on_gpu_quiet(be);
    gpu_stage_free(cs->st);
    zb_cuda_release(cs->loss_dev);
    for (int k = 0; k < ZB_BUF_COUNT; k++)
        free(cs->mirror[k]);
    free(cs);
}

static int cb_stage_new(zb_backend *be, const llama_stage *layout, const llama_stage *compute,
                        int dev, zb_bstage **out, zb_err *err)
{
    cuda_impl *im = IMPL(be);
    if (dev < 0 || dev >= im->n_devices)
        return zb_fail(err, "device %d is not one of the backend's %d", dev, im->n_devices);
    cuda_stage *cs = calloc(1, sizeof *cs);
    if (!cs)
        return zb_fail(err, "out of memory");
    if (!im->ctx[dev]) {
        free(cs);
        return zb_fail(err, "device %d has no stream in this process (the pipeline rank of "
                       "device %d)", dev, im->local_dev);
    }
    cs->c = im->ctx[dev];
    cs->n = llama_stage_num_params(layout);
    for (int k = 0; k < ZB_BUF_COUNT; k++)
        if (!(cs->mirror[k] = calloc(cs->n ? cs->n : 1, sizeof(float)))) {
            cb_stage_free(be, (zb_bstage *)cs);
            return zb_fail(err, "out of host memory for a stage's mirrors");
        }
    /* a vocabulary-parallel head stage: buffers of layout, ops of compute */
    if (gpu_stage_create_compute(cs->c, layout, compute ? compute : layout, &cs->st, err) != 0
        || zb_cuda_alloc((void **)&cs->loss_dev, sizeof(double) * LOSS_SLOTS, err) != 0) {
        cb_stage_free(be, (zb_bstage *)cs);
        return -1;
    }
    __atomic_add_fetch(&im->static_bytes, gpu_stage_static_bytes(cs->st), __ATOMIC_RELAXED);
    *out = (zb_bstage *)cs;
    return 0;
}

static float *cb_host(zb_backend *be, zb_bstage *bst, zb_bbuf which)
{
    (void)be;
    return ((cuda_stage *)bst)->mirror[which];
}

/* zb_bbuf -> gpu_stage's buffer names (the same order, by design). */
static int gpu_buf(zb_bbuf which)
{
    static const int map[ZB_BUF_COUNT] = { GPU_BUF_MASTER, GPU_BUF_GRADS, GPU_BUF_M, GPU_BUF_V };
    return map[which];
}

static int cb_download(zb_backend *be, zb_bstage *bst, zb_bbuf which, zb_err *err)
{
    cuda_stage *cs = (cuda_stage *)bst;
    if (on_gpu(be, err) != 0 || zb_cuda_sync(cs->c, err) != 0)
        return -1;
    return gpu_stage_get(cs->st, gpu_buf(which), cs->mirror[which], err);
}

static int cb_upload(zb_backend *be, zb_bstage *bst, zb_bbuf which, zb_err *err)
{
    cuda_stage *cs = (cuda_stage *)bst;
    if (on_gpu(be, err) != 0)
        return -1;
    return gpu_stage_set(cs->st, gpu_buf(which), cs->mirror[which], err);
}

static int cb_saved_new(zb_backend *be, zb_bstage *bst, int batch, int recompute,
                        zb_bsaved **out, zb_err *err)
{
    if (recompute < LLAMA_RC_NONE || recompute > LLAMA_RC_MLP)
        return zb_fail(err, "recompute level %d is not none (0), full (1) or mlp (2)", recompute);
    if (on_gpu(be, err) != 0)
        return -1;
    gpu_saved *sv = gpu_saved_new(((cuda_stage *)bst)->st, batch);
    if (!sv)
        return zb_fail(err, "out of memory for a saved state");
    gpu_saved_set_recompute(sv, recompute);
    *out = (zb_bsaved *)sv;
    return 0;
}

static void cb_saved_free(zb_backend *be, zb_bsaved *sv)
{
    if (!sv)
        return;
    on_gpu_quiet(be);
    gpu_saved_free((gpu_saved *)sv);
}

static size_t cb_saved_bytes(zb_backend *be, const zb_bsaved *sv)
{
    (void)be;
    return gpu_saved_bytes((const gpu_saved *)sv);
}

static void cb_act_free(zb_backend *be, void *p)
{
    cuda_act *a = p;
    if (!a)
        return;
    on_gpu_quiet(be);
    zb_cuda_release(a->p);
    gpu_fence_free(a->last);
    free(a);
}

static void *cb_act_new(zb_backend *be, size_t n)
{
    cuda_act *a = calloc(1, sizeof *a);
    zb_err ignored;
    if (!a)
        return NULL;
    if (on_gpu(be, &ignored) != 0
        || zb_cuda_alloc((void **)&a->p, 2 * (n ? n : 1), &ignored) != 0
        || gpu_fence_new(&a->last, &ignored) != 0) {
        cb_act_free(be, a);
        return NULL;
    }
    __atomic_add_fetch(&IMPL(be)->static_bytes, 2 * n, __ATOMIC_RELAXED);
    return a;
}

/* Device dev's context, or -1 with err when it is another rank's. */
static int dev_ctx(zb_backend *be, int dev, zb_cuda **c, zb_err *err)
{
    cuda_impl *im = IMPL(be);
    if (dev < 0 || dev >= im->n_devices || !im->ctx[dev])
        return zb_fail(err, "device %d has no stream in this process (pipeline rank of device "
                       "%d)", dev, im->local_dev);
    *c = im->ctx[dev];
    return 0;
}

static int cb_act_issued(zb_backend *be, int dev, void *p, zb_err *err)
{
    zb_cuda *c = NULL;
    if (dev_ctx(be, dev, &c, err) != 0)
        return -1;
    return gpu_fence_signal(((cuda_act *)p)->last, c, err);
}

/* The context host copies of activations run on: device 0's, or the
 * rank's own device's. */
static zb_cuda *home(zb_backend *be)
{
    cuda_impl *im = IMPL(be);
    return im->ctx[im->local_dev >= 0 ? im->local_dev : 0];
}

static int cb_act_upload(zb_backend *be, void *p, const float *host, size_t n, zb_err *err)
{
    zb_bf16 *tmp = malloc(2 * (n ? n : 1));
    if (!tmp)
        return zb_fail(err, "out of memory");
    for (size_t i = 0; i < n; i++)
        tmp[i] = zb_bf16_from_f32(host[i]);
    /* after the buffer's last use, on device 0's stream */
    int rc = on_gpu(be, err) != 0 || gpu_fence_wait(((cuda_act *)p)->last, home(be), err)
                 ? -1
                 : zb_cuda_upload(home(be), ((cuda_act *)p)->p, tmp, 2 * n, err);
    if (rc == 0) /* later users on any stream come after the copy */
        rc = gpu_fence_signal(((cuda_act *)p)->last, home(be), err);
    if (rc == 0)
        rc = zb_cuda_sync(home(be), err);
    free(tmp);
    return rc;
}

static int cb_act_download(zb_backend *be, const void *p, float *host, size_t n, zb_err *err)
{
    zb_bf16 *tmp = malloc(2 * (n ? n : 1));
    if (!tmp)
        return zb_fail(err, "out of memory");
    const cuda_act *a = p;
    int rc = on_gpu(be, err) != 0
                 ? -1
                 : gpu_fence_wait(a->last, home(be), err);
    if (rc == 0)
        rc = zb_cuda_download(home(be), tmp, a->p, 2 * n, err);
    for (size_t i = 0; rc == 0 && i < n; i++)
        host[i] = zb_bf16_to_f32(tmp[i]);
    free(tmp);
    return rc;
}

static int cb_act_wait(zb_backend *be, int dev, void *p, zb_err *err)
{
    zb_cuda *c = NULL;
    if (dev_ctx(be, dev, &c, err) != 0)
        return -1;
    return gpu_fence_wait(((cuda_act *)p)->last, c, err);
}

static zb_bf16 *act_ptr(const void *p)
{
    return p ? ((const cuda_act *)p)->p : NULL;
}

static int cb_sync(zb_backend *be, zb_bstage *bst, zb_err *err);

static int cb_forward(zb_backend *be, zb_bstage *bst, zb_bsaved *sv, const int32_t *tokens,
                      const void *act_in, const int32_t *targets, void *act_out, float *loss,
                      zb_err *err)
{
    cuda_stage *cs = (cuda_stage *)bst;
    gpu_saved *gs = (gpu_saved *)sv;
    if (gpu_stage_forward(cs->st, gs, tokens, act_ptr(act_in), targets, act_ptr(act_out), err)
        != 0)
        return -1;
    if (!targets || !loss)
        return 0;
    if (cs->n_loss == LOSS_SLOTS && cb_sync(be, bst, err) != 0)
        return -1;
    int k = cs->n_loss++;
    cs->loss_to[k] = loss;
    /* the mean is over the micro-batch's B*T tokens */
    cs->loss_div[k] = (double)gpu_saved_batch(gs) * (double)gpu_stage_layout(cs->st)->cfg.seq_len;
    return gpu_saved_copy_loss_sum(gs, cs->loss_dev + k, err);
}

static int cb_backward_b(zb_backend *be, zb_bstage *bst, zb_bsaved *sv, float dloss,
                         const void *dy_in, void *dx_out, zb_err *err)
{
    (void)be;
    return gpu_stage_backward_b(((cuda_stage *)bst)->st, (gpu_saved *)sv, dloss, act_ptr(dy_in),
                                act_ptr(dx_out), err);
}

static int cb_backward_w(zb_backend *be, zb_bstage *bst, zb_bsaved *sv, zb_bgrads *into,
                         zb_err *err)
{
    (void)be;
    cuda_stage *cs = (cuda_stage *)bst;
    if (!into)
        return gpu_stage_backward_w(cs->st, (gpu_saved *)sv, err);
    return gpu_stage_backward_w_into(cs->st, (gpu_saved *)sv, (float *)into, err);
}

static int cb_sync(zb_backend *be, zb_bstage *bst, zb_err *err)
{
    cuda_stage *cs = (cuda_stage *)bst;
    if (on_gpu(be, err) != 0 || zb_cuda_sync(cs->c, err) != 0)
        return -1;
    if (cs->n_loss == 0)
        return 0;
    double sums[LOSS_SLOTS];
    if (zb_cuda_download(cs->c, sums, cs->loss_dev, sizeof(double) * (size_t)cs->n_loss, err) != 0)
        return -1;
    for (int k = 0; k < cs->n_loss; k++)
        *cs->loss_to[k] = (float)(sums[k] / cs->loss_div[k]);
    cs->n_loss = 0;
    return 0;
}

static zb_bgrads *cb_grads_new(zb_backend *be, zb_bstage *bst)
{
    cuda_stage *cs = (cuda_stage *)bst;
    float *g = NULL;
    zb_err ignored;
    if (on_gpu(be, &ignored) != 0
        || zb_cuda_alloc((void **)&g, 4 * (cs->n ? cs->n : 1), &ignored) != 0)
        return NULL;
    if (zb_cuda_zero(cs->c, g, 4 * cs->n, &ignored) != 0) {
        zb_cuda_release(g);
        return NULL;
    }
    __atomic_add_fetch(&IMPL(be)->static_bytes, 4 * cs->n, __ATOMIC_RELAXED);
    return (zb_bgrads *)g;
}

static void cb_grads_free(zb_backend *be, zb_bgrads *g)
{
    if (!g)
        return;
    on_gpu_quiet(be);
    zb_cuda_release(g);
}

static int cb_grads_zero(zb_backend *be, zb_bstage *bst, zb_bgrads *g, zb_err *err)
{
    cuda_stage *cs = (cuda_stage *)bst;
    if (on_gpu(be, err) != 0)
        return -1;
    if (!g)
        return gpu_stage_grads_zero(cs->st, err);
    return zb_cuda_zero(cs->c, g, 4 * cs->n, err);
}

static int cb_grads_add(zb_backend *be, zb_bstage *bst, const zb_bgrads *g, zb_err *err)
{
    if (on_gpu(be, err) != 0)
        return -1;
    return gpu_stage_grads_add(((cuda_stage *)bst)->st, (const float *)g, err);
}

static int cb_grad_sumsq(zb_backend *be, zb_bstage *bst, double *out, zb_err *err)
{
    double total;
    if (on_gpu(be, err) != 0)
        return -1;
    return gpu_stage_grad_sumsq(((cuda_stage *)bst)->st, out, &total, err);
}

static int cb_adamw(zb_backend *be, zb_bstage *bst, const adamw_config *c, int t, float lr,
                    float grad_scale, zb_err *err)
{
    if (on_gpu(be, err) != 0)
        return -1;
    return gpu_stage_adamw(((cuda_stage *)bst)->st, c, t, lr, grad_scale, err);
}

static int cb_snapshot(zb_backend *be, zb_bstage *bst, zb_err *err)
{
    cuda_stage *cs = (cuda_stage *)bst;
    if (on_gpu(be, err) != 0)
        return -1;
    size_t before = gpu_stage_static_bytes(cs->st);
    int rc = gpu_stage_snapshot(cs->st, err);
    size_t after = gpu_stage_static_bytes(cs->st);
    if (after > before) /* also when a later buffer failed */
        __atomic_add_fetch(&IMPL(be)->static_bytes, after - before, __ATOMIC_RELAXED);
    return rc;
}

static int cb_restore(zb_backend *be, zb_bstage *bst, zb_err *err)
{
    if (on_gpu(be, err) != 0)
        return -1;
    return gpu_stage_restore(((cuda_stage *)bst)->st, err);
}

/* backend.h's split update over gpu_stage's (gpu_stage_adamw_params):
 * the one fp32 copy of the master weights, counted in the static bytes
 * when the first call allocates it. */
static int cb_adamw_params(zb_backend *be, zb_bstage *bst, const adamw_config *c, int t,
                           float lr, float grad_scale, zb_err *err)
{
    cuda_stage *cs = (cuda_stage *)bst;
    if (on_gpu(be, err) != 0)
        return -1;
    size_t before = gpu_stage_static_bytes(cs->st);
    int rc = gpu_stage_adamw_params(cs->st, c, t, lr, grad_scale, err);
    size_t after = gpu_stage_static_bytes(cs->st);
    if (after > before) /* also when a launch failed after the allocation */
        __atomic_add_fetch(&IMPL(be)->static_bytes, after - before, __ATOMIC_RELAXED);
    return rc;
}

static int cb_adamw_moments(zb_backend *be, zb_bstage *bst, const adamw_config *c,
                            float grad_scale, zb_err *err)
{
    if (on_gpu(be, err) != 0)
        return -1;
    return gpu_stage_adamw_moments(((cuda_stage *)bst)->st, c, grad_scale, err);
}

static int cb_adamw_undo(zb_backend *be, zb_bstage *bst, zb_err *err)
{
    if (on_gpu(be, err) != 0)
        return -1;
    return gpu_stage_adamw_undo(((cuda_stage *)bst)->st, err);
}

static int cb_memory(zb_backend *be, size_t *static_bytes, size_t *peak, zb_err *err)
{
    cuda_impl *im = IMPL(be);
    cudaMemPool_t pool;
    uint64_t high = 0;
    cudaError_t st = cudaDeviceGetDefaultMemPool(&pool, im->gpu);
    if (st == cudaSuccess)
        st = cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &high);
    if (st != cudaSuccess)
        return zb_fail(err, "memory pool: %s", cudaGetErrorString(st));
    *static_bytes = __atomic_load_n(&im->static_bytes, __ATOMIC_RELAXED);
    *peak = (size_t)high; /* the stream-ordered pool: saved activations */
    return 0;
}

static const zb_backend_ops cuda_ops = {
    .name = "cuda",
    .destroy = cb_destroy,
    .bind = cb_bind,
    .stage_new = cb_stage_new,
    .stage_free = cb_stage_free,
    .host = cb_host,
    .download = cb_download,
    .upload = cb_upload,
    .saved_new = cb_saved_new,
    .saved_free = cb_saved_free,
    .saved_bytes = cb_saved_bytes,
    .act_new = cb_act_new,
    .act_free = cb_act_free,
    .act_upload = cb_act_upload,
    .act_download = cb_act_download,
    .act_issued = cb_act_issued,
    .act_wait = cb_act_wait,
    .forward = cb_forward,
    .backward_b = cb_backward_b,
    .backward_w = cb_backward_w,
    .sync = cb_sync,
    .grads_new = cb_grads_new,
    .grads_free = cb_grads_free,
    .grads_zero = cb_grads_zero,
    .grads_add = cb_grads_add,
    .grad_sumsq = cb_grad_sumsq,
    .adamw = cb_adamw,
    .adamw_params = cb_adamw_params,
    .adamw_moments = cb_adamw_moments,
    .adamw_undo = cb_adamw_undo,
    .snapshot = cb_snapshot,
    .restore = cb_restore,
    .vocab_new = cuda_vocab_new,
    .vocab_free = cuda_vocab_free,
    .vocab_begin = cuda_vocab_begin,
    .vocab_put_x = cuda_vocab_put_x,
    .vocab_s = cuda_vocab_s,
    .vocab_t = cuda_vocab_t,
    .vocab_dx = cuda_vocab_dx,
    .vocab_eval = cuda_vocab_eval,
    .vocab_cell_bytes = cuda_vocab_cell_bytes,
    .memory = cb_memory,
};

/* The backend of backend_cuda_create (local_dev -1: every device a
 * context) or backend_cuda_create_rank (only local_dev has one). */
static int create(int gpu, int n_devices, int local_dev, zb_backend **out, zb_err *err)
{
    if (n_devices <= 0)
        return zb_fail(err, "the CUDA backend needs at least one device, got %d", n_devices);
    if (local_dev >= n_devices)
        return zb_fail(err, "device %d is not one of the schedule's %d", local_dev, n_devices);
    int visible = zb_cuda_device_count();
    if (visible == 0)
        return zb_fail(err, "no CUDA device");
    if (gpu < 0 || gpu >= visible)
        return zb_fail(err, "CUDA device %d does not exist (%d visible)", gpu, visible);
    zb_backend *be = calloc(1, sizeof *be);
    cuda_impl *im = calloc(1, sizeof *im);
    zb_cuda **ctx = calloc((size_t)n_devices, sizeof *ctx);
    if (!be || !im || !ctx) {
        free(be);
        free(im);
        free(ctx);
        return zb_fail(err, "out of memory");
    }
    im->gpu = gpu;
    im->n_devices = n_devices;
    im->local_dev = local_dev;
    im->ctx = ctx;
    be->ops = &cuda_ops;
    be->impl = im;
    for (int d = 0; d < n_devices; d++)
        if ((local_dev < 0 || d == local_dev) && zb_cuda_create(gpu, &ctx[d], err) != 0) {
            cb_destroy(be);
            return zb_wrap(err, "CUDA context of device %d: ", d);
        }
    /* keep freed activations in the stream-ordered pool between steps
     * instead of handing them back to the driver at every sync, and start
     * the high-water mark that memory reports from here */
    cudaMemPool_t pool;
    uint64_t keep = UINT64_MAX, zero = 0;
    if (cudaDeviceGetDefaultMemPool(&pool, gpu) == cudaSuccess) {
        cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
        cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero);
    }
    cudaGetLastError();
    *out = be;
    return 0;
}

int backend_cuda_create(int gpu, int n_devices, zb_backend **out, zb_err *err)
{
    return create(gpu, n_devices, -1, out, err);
}

int backend_cuda_create_rank(int gpu, int n_devices, int local_dev, zb_backend **out,
                             zb_err *err)
{
    if (local_dev < 0)
        return zb_fail(err, "device %d is not one of the schedule's %d", local_dev, n_devices);
    zb_backend *inner;
    if (create(gpu, n_devices, local_dev, &inner, err) != 0)
        return -1;
    return backend_rank_wrap(inner, local_dev, out, err);
}

void *backend_cuda_act_data(void *act)
{
    return act ? ((cuda_act *)act)->p : NULL;
}

struct gpu_fence *backend_cuda_act_fence(void *act)
{
    return act ? ((cuda_act *)act)->last : NULL;
}
