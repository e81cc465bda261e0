/*
 * nccl_transport.c: one NCCL communicator and one stream per link between
 * pipeline ranks (see nccl_transport.h).
 *
 * Per link this rank is an end of: the two-rank communicator and the
 * stream (a zb_cuda context), the receiver's read cursor and stash, the
 * sender's cursor (checked against the plan), and a device array of the
 * link's scalar payloads with its host twin.  Sends in flight are a list
 * of buffers whose fence is polled before they go back to the pool.
 */
#include "kernels/cuda/nccl_transport.h"

#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>
#ifdef ZB_HAVE_NCCL
#include <nccl.h>
#endif

#include "kernels/cuda/backend_cuda.h"
#include "kernels/cuda/gpu_transport.h"
#include "kernels/cuda/zb_cuda.h"

#ifdef ZB_HAVE_NCCL

/* One received (or self-sent) message not yet taken. */
typedef struct nt_entry {
    void *buf;  /* activation (CUDA backend act), or NULL for a scalar */
    int full;   /* 1 while it holds a message */
} nt_entry;

typedef struct nt_link {
    ncclComm_t comm;   /* the link's two ranks (NULL: not ours, or to itself) */
    zb_cuda *ctx;      /* the link's stream on this rank (NULL as comm) */
    int read;          /* messages received (receiver's cursor) */
    int sent;          /* messages sent (sender's cursor) */
    nt_entry *stash;   /* [n_msgs] */
    double *val_dev;   /* device [n_msgs] scalar payloads (NULL: no scalars) */
    double *val_host;  /* pinned host [n_msgs]: sent values, received values once
                        * synced (pinned, so both copies stay asynchronous); for a
                        * link to itself or of others plain host memory */
    int val_pinned;    /* 1: val_host is cudaMallocHost's */
} nt_link;

typedef struct nt_impl {
    zb_link_plan plan;       /* the order of every link */
    nt_link *links;          /* [plan.n_links] */
    zb_transport_pool pool;  /* where buffers come from and go back */
    zb_nccl_cfg *cfg;        /* communicator, GPU, message size, counters */
    int me;                  /* this rank = this device */
    void **fly;              /* [n_fly] sent buffers whose send may still run */
    int n_fly, cap_fly;      /* used and allocated */
    int aborted;             /* 1: receives fail */
} nt_impl;

static int nccl_ok(ncclResult_t st, const char *what, zb_err *err)
{
    if (st == ncclSuccess)
        return 0;
    return zb_fail(err, "transport: %s: NCCL error %d (%s)", what, (int)st,
                   ncclGetErrorString(st));
}

static int cuda_ok(cudaError_t st, const char *what, zb_err *err)
{
    if (st == cudaSuccess)
        return 0;
    return zb_fail(err, "transport: %s: CUDA error %d (%s)", what, (int)st,
                   cudaGetErrorString(st));
}

static cudaStream_t stream_of(const nt_link *ln)
{
    return (cudaStream_t)zb_cuda_stream(ln->ctx);
}

/* Returns the buffers of finished sends to the pool (waiting for all of
 * them when wait is set). */
static void reap(nt_impl *im, int wait)
{
    int kept = 0;
    for (int i = 0; i < im->n_fly; i++) {
        gpu_fence *f = backend_cuda_act_fence(im->fly[i]);
        zb_err ignored;
        int done = gpu_fence_done(f, &ignored);
        /* wait: between steps only, for this send to finish */
        while (wait && done == 0)
            done = gpu_fence_done(f, &ignored);
        if (done != 0) /* finished, or failed: the buffer is free either way */
            im->pool.put(im->pool.ctx, im->fly[i]);
        else
            im->fly[kept++] = im->fly[i];
    }
    im->n_fly = kept;
}

static int nt_send(zb_transport *tr, zb_msg_key key, void *buf, double val, zb_err *err)
{
    nt_impl *im = tr->impl;
    int l, planned;
    if (link_plan_locate(&im->plan, im->me, 0, key, &l, &planned, err) != 0) {
        im->pool.put(im->pool.ctx, buf);
        return -1;
    }
    nt_link *ln = &im->links[l];
    int seq = ln->sent++;
    if (seq != planned) {
        im->pool.put(im->pool.ctx, buf);
        return link_plan_order_error(key, seq, planned, err);
    }
    if (im->plan.links[l].to == im->me) { /* to itself: straight into the stash */
        ln->stash[seq] = (nt_entry){ buf, 1 };
        if (link_plan_is_scalar(key.kind))
            ln->val_host[seq] = val;
        ln->read = seq + 1;
        return 0;
    }
    reap(im, 0);
    cudaStream_t st = stream_of(ln);
    if (link_plan_is_scalar(key.kind)) {
        /* the value's own slot: it stays put until the step ends */
        ln->val_host[seq] = val;
        im->pool.put(im->pool.ctx, buf); /* NULL for norms */
        if (cuda_ok(cudaMemcpyAsync(ln->val_dev + seq, ln->val_host + seq, sizeof(double),
                                    cudaMemcpyHostToDevice, st), "cudaMemcpyAsync", err) != 0
            || nccl_ok(ncclSend(ln->val_dev + seq, 1, ncclDouble, 1, ln->comm, st), "ncclSend",
                       err) != 0)
            return -1;
        im->cfg->bytes_sent += sizeof(double);
        im->cfg->messages++;
        return 0;
    }
    if (im->n_fly == im->cap_fly) {
        int cap = im->cap_fly ? 2 * im->cap_fly : 16;
        void **f = realloc(im->fly, (size_t)cap * sizeof *f);
        if (!f) {
            im->pool.put(im->pool.ctx, buf);
            return zb_fail(err, "transport: out of memory");
        }
        im->fly = f;
        im->cap_fly = cap;
    }
    gpu_fence *fence = backend_cuda_act_fence(buf);
    size_t bytes = 2 * im->cfg->act_elems; /* bf16 */
    /* after the producing op (the executor's act_issued), on the link's stream */
    if (gpu_fence_wait(fence, ln->ctx, err) != 0
        || nccl_ok(ncclSend(backend_cuda_act_data(buf), bytes, ncclChar, 1, ln->comm, st),
                   "ncclSend", err) != 0
        || gpu_fence_signal(fence, ln->ctx, err) != 0) {
        im->pool.put(im->pool.ctx, buf);
        return -1;
    }
    im->fly[im->n_fly++] = buf;
    im->cfg->bytes_sent += bytes;
    im->cfg->messages++;
    return 0;
}

/* Posts the receive of the link's next message into the stash. */
static int post_next(nt_impl *im, int l, zb_err *err)
{
    nt_link *ln = &im->links[l];
    const zb_link *pl = &im->plan.links[l];
    int seq = ln->read;
    cudaStream_t st = stream_of(ln);
    if (link_plan_is_scalar(pl->msgs[seq].kind)) {
        if (nccl_ok(ncclRecv(ln->val_dev + seq, 1, ncclDouble, 0, ln->comm, st), "ncclRecv",
                    err) != 0
            || cuda_ok(cudaMemcpyAsync(ln->val_host + seq, ln->val_dev + seq, sizeof(double),
                                       cudaMemcpyDeviceToHost, st), "cudaMemcpyAsync", err) != 0)
            return -1;
        ln->stash[seq] = (nt_entry){ NULL, 1 };
        ln->read++;
        return 0;
    }
    void *buf = im->pool.get(im->pool.ctx);
    if (!buf)
        return zb_fail(err, "transport: out of memory for a message");
    gpu_fence *fence = backend_cuda_act_fence(buf);
    /* after the buffer's last use; the consumer then waits for the receive */
    if (gpu_fence_wait(fence, ln->ctx, err) != 0
        || nccl_ok(ncclRecv(backend_cuda_act_data(buf), 2 * im->cfg->act_elems, ncclChar, 0,
                            ln->comm, st), "ncclRecv", err) != 0
        || gpu_fence_signal(fence, ln->ctx, err) != 0) {
        im->pool.put(im->pool.ctx, buf);
        return -1;
    }
    ln->stash[seq] = (nt_entry){ buf, 1 };
    ln->read++;
    return 0;
}

static int nt_recv(zb_transport *tr, zb_msg_key key, void **buf, double *val, zb_err *err)
{
    nt_impl *im = tr->impl;
    if (im->aborted)
        return zb_fail(err, "aborted");
    int l, want;
    if (link_plan_locate(&im->plan, im->me, 1, key, &l, &want, err) != 0)
        return -1;
    nt_link *ln = &im->links[l];
    const zb_link *pl = &im->plan.links[l];
    if (pl->from == im->me && !ln->stash[want].full)
        return zb_fail(err, "transport: device %d waits for its own message (%d, stage %d, mb %d) "
                       "before sending it", im->me, key.kind, key.stage, key.mb);
    while (!ln->stash[want].full)
        if (post_next(im, l, err) != 0)
            return -1;
    if (link_plan_is_scalar(key.kind) && pl->from != im->me
        && zb_cuda_sync(ln->ctx, err) != 0) /* the value decides this rank's next step */
        return -1;
    if (buf)
        *buf = ln->stash[want].buf;
    else
        im->pool.put(im->pool.ctx, ln->stash[want].buf);
    if (val)
        *val = link_plan_is_scalar(key.kind) ? ln->val_host[want] : 0;
    ln->stash[want] = (nt_entry){ 0 };
    return 0;
}

static void nt_abort(zb_transport *tr)
{
    ((nt_impl *)tr->impl)->aborted = 1;
}

static void nt_reset(zb_transport *tr)
{
    nt_impl *im = tr->impl;
    reap(im, 1);
    for (int l = 0; l < im->plan.n_links; l++) {
        nt_link *ln = &im->links[l];
        if (ln->ctx) {
            zb_err ignored;
            zb_cuda_sync(ln->ctx, &ignored);
        }
        if (!ln->stash) /* a channel that failed to open */
            continue;
        for (int i = 0; i < im->plan.links[l].n_msgs; i++)
            if (ln->stash[i].full)
                im->pool.put(im->pool.ctx, ln->stash[i].buf);
        memset(ln->stash, 0, (size_t)im->plan.links[l].n_msgs * sizeof *ln->stash);
        ln->read = ln->sent = 0;
    }
    im->aborted = 0;
}

static void nt_destroy(zb_transport *tr)
{
    nt_impl *im = tr->impl;
    if (im->links) {
        nt_reset(tr);
        for (int l = 0; l < im->plan.n_links; l++) {
            nt_link *ln = &im->links[l];
            if (ln->comm)
                ncclCommDestroy(ln->comm);
            if (ln->val_dev)
                cudaFree(ln->val_dev);
            if (ln->ctx)
                zb_cuda_free(ln->ctx);
            if (ln->val_pinned)
                cudaFreeHost(ln->val_host);
            else
                free(ln->val_host);
            free(ln->stash);
        }
    }
    free(im->links);
    free(im->fly);
    link_plan_free(&im->plan);
    free(im);
}

static const zb_transport_ops nt_ops = {
    .name = "nccl",
    .send = nt_send,
    .recv = nt_recv,
    .abort = nt_abort,
    .reset = nt_reset,
    .destroy = nt_destroy,
};

/* The link's channel on this rank: its communicator (split collectively:
 * every rank calls this for every link in plan order), stream and scalar
 * slots.  0 or -1. */
static int link_open(nt_impl *im, int l, ncclComm_t parent, zb_err *err)
{
    nt_link *ln = &im->links[l];
    int n = im->plan.links[l].n_msgs, key;
    int colour = link_plan_channel(&im->plan, l, im->me, &key);
    ncclComm_t c = NULL;
    /* the split first: it is collective whatever happens here after it */
    if (nccl_ok(ncclCommSplit(parent, colour < 0 ? NCCL_SPLIT_NOCOLOR : colour, key < 0 ? 0 : key,
                              &c, NULL), "ncclCommSplit", err) != 0)
        return zb_wrap(err, "link %d -> %d: ", im->plan.links[l].from, im->plan.links[l].to);
    ln->comm = c;
    if (!(ln->stash = calloc((size_t)n, sizeof *ln->stash))
        || !(ln->val_host = calloc((size_t)n, sizeof *ln->val_host)))
        return zb_fail(err, "transport: out of memory");
    if (colour < 0)
        return 0;
    if (zb_cuda_create(im->cfg->gpu, &ln->ctx, err) != 0)
        return zb_wrap(err, "transport, link %d -> %d: ", im->plan.links[l].from,
                       im->plan.links[l].to);
    double *pinned = NULL;
    if (cuda_ok(cudaMallocHost((void **)&pinned, sizeof(double) * (size_t)(n ? n : 1)),
                "cudaMallocHost", err) != 0)
        return -1;
    free(ln->val_host);
    ln->val_host = pinned;
    ln->val_pinned = 1;
    return cuda_ok(cudaMalloc((void **)&ln->val_dev, sizeof(double) * (size_t)(n ? n : 1)),
                   "cudaMalloc", err);
}

int nccl_transport_make(void *ctx, const sched_t *s, int with_norms,
                        const zb_transport_pool *pool, zb_transport **out, zb_err *err)
{
    zb_nccl_cfg *cfg = ctx;
    if (!cfg->comm)
        return zb_fail(err, "transport: no NCCL communicator");
    int size = gpu_comm_size(cfg->comm), me = gpu_comm_rank(cfg->comm);
    if (size != s->n_devices)
        return zb_fail(err, "the schedule has %d devices but the run has %d GPU ranks (one device "
                       "per rank)", s->n_devices, size);
    zb_transport *tr = calloc(1, sizeof *tr);
    nt_impl *im = calloc(1, sizeof *im);
    if (!tr || !im) {
        free(tr);
        free(im);
        return zb_fail(err, "out of memory for the transport");
    }
    im->pool = *pool;
    im->cfg = cfg;
    im->me = me;
    if (link_plan_build(s, with_norms, &im->plan, err) != 0) {
        free(tr);
        free(im);
        return -1;
    }
    tr->ops = &nt_ops;
    tr->impl = im;
    im->links = calloc((size_t)(im->plan.n_links ? im->plan.n_links : 1), sizeof *im->links);
    if (!im->links) {
        nt_destroy(tr);
        free(tr);
        return zb_fail(err, "out of memory for the transport");
    }
    if (cuda_ok(cudaSetDevice(cfg->gpu), "cudaSetDevice", err) != 0) {
        nt_destroy(tr);
        free(tr);
        return -1;
    }
    /* Every rank splits for every link, in plan order, even after a local
     * failure: a rank that stopped early would leave the others waiting in
     * the next split.  The first error is kept. */
    int rc = 0;
    zb_err first = { { 0 } };
    for (int l = 0; l < im->plan.n_links; l++) {
        zb_err e = { { 0 } };
        if (link_open(im, l, (ncclComm_t)gpu_comm_nccl(cfg->comm), &e) != 0 && rc == 0) {
            rc = -1;
            first = e;
        }
    }
    if (rc != 0) {
        nt_destroy(tr);
        free(tr);
        *err = first;
        return -1;
    }
    *out = tr;
    return 0;
}

#else /* no NCCL in this build */

int nccl_transport_make(void *ctx, const sched_t *s, int with_norms,
                        const zb_transport_pool *pool, zb_transport **out, zb_err *err)
{
    (void)ctx; (void)s; (void)with_norms; (void)pool; (void)out;
    return zb_fail(err, "multi-GPU transport: built without NCCL (set -Dnccl_dir)");
}

#endif
