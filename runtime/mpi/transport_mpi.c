/*
 * transport_mpi.c: links between ranks as MPI point-to-point (see
 * transport_mpi.h).
 *
 * Per link: the receiver's read cursor and stash (indexed by the position
 * the plan gives each key), and for a link to itself the sender's cursor.
 * Sends in flight are a list of (request, buffer, value) whose buffers go
 * back to the pool when MPI is done with them.
 */
#include "runtime/mpi/transport_mpi.h"

#include <stdlib.h>
#include <string.h>

/* One received (or self-sent) message not yet taken. */
typedef struct mpi_entry {
    void *buf;   /* payload buffer (activations, gradients), or NULL */
    double val;  /* scalar payload (norms) */
    int full;    /* 1 while it holds a message */
} mpi_entry;

/* A send MPI has not finished with. */
typedef struct mpi_inflight {
    MPI_Request req; /* the MPI_Isend */
    void *buf;       /* its buffer (back to the pool when done), or NULL */
    double *val;     /* its scalar payload's storage, or NULL */
} mpi_inflight;

typedef struct mpi_link {
    int read;          /* messages received into the stash (receiver's cursor) */
    int sent;          /* messages sent (the sender's cursor, checked against the plan) */
    mpi_entry *stash;  /* [n_msgs] */
} mpi_link;

typedef struct mpi_impl {
    zb_link_plan plan;        /* the order of every link */
    mpi_link *links;          /* [plan.n_links] */
    zb_transport_pool pool;   /* where buffers come from and go back */
    transport_mpi_cfg *cfg;   /* communicator, message size, byte counters */
    int me;                   /* this rank = this device */
    mpi_inflight *fly;        /* [n_fly] sends in flight */
    int n_fly, cap_fly;       /* used and allocated */
    int aborted;              /* 1: receives fail */
} mpi_impl;

static int mpi_failed(zb_err *err, int rc, const char *what)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    return zb_fail(err, "transport: %s: %s", what, text);
}

/* Returns the buffers of completed sends to the pool (all of them, waiting,
 * when wait is set). */
static void reap(mpi_impl *im, int wait)
{
    int kept = 0;
    for (int i = 0; i < im->n_fly; i++) {
        mpi_inflight *f = &im->fly[i];
        int done = 0;
        if (wait)
            done = MPI_Wait(&f->req, MPI_STATUS_IGNORE) == MPI_SUCCESS || 1;
        else
            MPI_Test(&f->req, &done, MPI_STATUS_IGNORE);
        if (done) {
            im->pool.put(im->pool.ctx, f->buf);
            free(f->val);
        } else {
            im->fly[kept++] = *f;
        }
    }
    im->n_fly = kept;
}

static int mpi_send(zb_transport *tr, zb_msg_key key, void *buf, double val, zb_err *err)
{
    mpi_impl *im = tr->impl;
    int l, planned;
    if (link_plan_locate(&im->plan, im->me, 0, key, &l, &planned, err) != 0) {
        im->pool.put(im->pool.ctx, buf);
        return -1;
    }
    mpi_link *ln = &im->links[l];
    int seq = ln->sent++;
    if (seq != planned) {
        im->pool.put(im->pool.ctx, buf);
        return link_plan_order_error(key, seq, planned, err);
    }
    int to = im->plan.links[l].to;
    if (to == im->me) { /* to itself: straight into the stash */
        ln->stash[seq] = (mpi_entry){ buf, val, 1 };
        ln->read = seq + 1;
        return 0;
    }
    reap(im, 0);
    if (im->n_fly == im->cap_fly) {
        int cap = im->cap_fly ? 2 * im->cap_fly : 16;
        mpi_inflight *f = realloc(im->fly, (size_t)cap * sizeof *f);
        if (!f) {
            im->pool.put(im->pool.ctx, buf);
            return zb_fail(err, "transport: out of memory");
        }
        im->fly = f;
        im->cap_fly = cap;
    }
    mpi_inflight *f = &im->fly[im->n_fly];
    memset(f, 0, sizeof *f);
    const void *data;
    size_t bytes;
    if (link_plan_is_scalar(key.kind)) {
        if (!(f->val = malloc(sizeof *f->val))) {
            im->pool.put(im->pool.ctx, buf);
            return zb_fail(err, "transport: out of memory");
        }
        *f->val = val;
        f->buf = buf; /* NULL for norms; returned all the same */
        data = f->val;
        bytes = sizeof(double);
    } else {
        f->buf = buf;
        data = buf;
        bytes = im->cfg->act_floats * sizeof(float);
    }
    int rc = MPI_Isend(data, (int)bytes, MPI_BYTE, to, 0, im->cfg->comm, &f->req);
    if (rc != MPI_SUCCESS) {
        im->pool.put(im->pool.ctx, f->buf);
        free(f->val);
        return mpi_failed(err, rc, "MPI_Isend");
    }
    im->n_fly++;
    im->cfg->bytes_sent += bytes;
    im->cfg->messages++;
    return 0;
}

static int mpi_recv(zb_transport *tr, zb_msg_key key, void **buf, double *val, zb_err *err)
{
    mpi_impl *im = tr->impl;
    if (im->aborted)
        return zb_fail(err, "aborted");
    int l, want;
    if (link_plan_locate(&im->plan, im->me, 1, key, &l, &want, err) != 0)
        return -1;
    mpi_link *ln = &im->links[l];
    const zb_link *pl = &im->plan.links[l];
    if (pl->from == im->me && !ln->stash[want].full)
        return zb_fail(err, "transport: device %d waits for its own message (%d, stage %d, mb %d) "
                       "before sending it", im->me, key.kind, key.stage, key.mb);
    while (!ln->stash[want].full) {
        int seq = ln->read;
        const zb_msg_key *next = &pl->msgs[seq];
        mpi_entry e = { NULL, 0, 1 };
        int rc;
        if (link_plan_is_scalar(next->kind)) {
            rc = MPI_Recv(&e.val, (int)sizeof(double), MPI_BYTE, pl->from, 0, im->cfg->comm,
                          MPI_STATUS_IGNORE);
        } else {
            if (!(e.buf = im->pool.get(im->pool.ctx)))
                return zb_fail(err, "transport: out of memory for a message");
            rc = MPI_Recv(e.buf, (int)(im->cfg->act_floats * sizeof(float)), MPI_BYTE, pl->from,
                          0, im->cfg->comm, MPI_STATUS_IGNORE);
        }
        if (rc != MPI_SUCCESS) {
            im->pool.put(im->pool.ctx, e.buf);
            return mpi_failed(err, rc, "MPI_Recv");
        }
        ln->stash[seq] = e;
        ln->read++;
    }
    if (buf)
        *buf = ln->stash[want].buf;
    else
        im->pool.put(im->pool.ctx, ln->stash[want].buf);
    if (val)
        *val = ln->stash[want].val;
    ln->stash[want] = (mpi_entry){ 0 };
    return 0;
}

static void mpi_abort_tr(zb_transport *tr)
{
    mpi_impl *im = tr->impl;
    im->aborted = 1;
}

static void mpi_reset(zb_transport *tr)
{
    mpi_impl *im = tr->impl;
    reap(im, 1);
    for (int l = 0; l < im->plan.n_links; l++) {
        mpi_link *ln = &im->links[l];
        for (int i = 0; i < im->plan.links[l].n_msgs; i++)
            if (ln->stash[i].full)
                im->pool.put(im->pool.ctx, ln->stash[i].buf);
        memset(ln->stash, 0, (size_t)im->plan.links[l].n_msgs * sizeof *ln->stash);
        ln->read = ln->sent = 0;
    }
    im->aborted = 0;
}

static void mpi_destroy(zb_transport *tr)
{
    mpi_impl *im = tr->impl;
    if (im->links) {
        mpi_reset(tr);
        for (int l = 0; l < im->plan.n_links; l++)
            free(im->links[l].stash);
    }
    free(im->links);
    free(im->fly);
    link_plan_free(&im->plan);
    free(im);
}

static const zb_transport_ops mpi_ops = {
    .name = "mpi",
    .send = mpi_send,
    .recv = mpi_recv,
    .abort = mpi_abort_tr,
    .reset = mpi_reset,
    .destroy = mpi_destroy,
};

int transport_mpi_make(void *ctx, const sched_t *s, int with_norms,
                       const struct zb_transport_pool *pool, struct zb_transport **out,
                       zb_err *err)
{
    transport_mpi_cfg *cfg = ctx;
    int size, me;
    MPI_Comm_size(cfg->comm, &size);
    MPI_Comm_rank(cfg->comm, &me);
    if (size != s->n_devices)
        return zb_fail(err, "the schedule has %d devices but the pipeline has %d MPI ranks "
                       "(one device per rank)", s->n_devices, size);
    if (cfg->act_floats * sizeof(float) > (size_t)0x7fffffff)
        return zb_fail(err, "an activation of %zu floats is too large for one MPI message",
                       cfg->act_floats);
    zb_transport *tr = calloc(1, sizeof *tr);
    mpi_impl *im = calloc(1, sizeof *im);
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
    im->links = calloc((size_t)(im->plan.n_links ? im->plan.n_links : 1), sizeof *im->links);
    int oom = !im->links;
    for (int l = 0; l < im->plan.n_links && !oom; l++) {
        im->links[l].stash = calloc((size_t)im->plan.links[l].n_msgs, sizeof(mpi_entry));
        oom = !im->links[l].stash;
    }
    tr->ops = &mpi_ops;
    tr->impl = im;
    if (oom) {
        tr->ops->destroy(tr);
        free(tr);
        return zb_fail(err, "out of memory for the transport");
    }
    *out = tr;
    return 0;
}
