/*
 * transport_fifo.c: links as untagged FIFO queues (transport_fifo.h).
 *
 * Per link: a queue of (buf, val) written by the sender in send order and
 * a stash the receiver drains the queue into, indexed by the position the
 * link plan gives each key.  The queue carries no key; only to catch an
 * executor that breaks the plan, each entry also carries the key the
 * sender meant, and the receiver checks it against the plan (a real MPI
 * or NCCL transport has no such check and would silently mix buffers).
 *
 * Locking: one mutex and condition variable per link; the stash and the
 * read cursor belong to the receiving device's thread alone.
 */
#include "runtime/transport_fifo.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/link_plan.h"

/* One message in flight. */
typedef struct fifo_entry {
    void *buf;      /* payload buffer (owned by the transport) */
    double val;     /* scalar payload */
    zb_msg_key key; /* what the sender meant (checked, never used to route) */
    int full;       /* 1 while it holds a message */
} fifo_entry;

/* One link's state. */
typedef struct fifo_link {
    pthread_mutex_t mu;  /* guards sent and queue */
    pthread_cond_t cv;   /* broadcast on every send and on abort */
    fifo_entry *queue;   /* [n_msgs] slot k holds the k-th message sent */
    int sent;            /* messages sent this step (the sender's cursor) */
    int read;            /* messages moved to the stash (receiver only) */
    fifo_entry *stash;   /* [n_msgs] read messages not yet taken (receiver only) */
} fifo_link;

/* State of a FIFO transport. */
typedef struct fifo_impl {
    zb_link_plan plan;       /* the order of every link */
    fifo_link *links;        /* [plan.n_links] */
    zb_transport_pool pool;  /* where dropped buffers go back */
    int aborted;             /* 1: receives fail (read under each link's lock) */
} fifo_impl;

static int fifo_send(zb_transport *tr, zb_msg_key key, void *buf, double val, zb_err *err)
{
    fifo_impl *im = tr->impl;
    size_t k = link_plan_key(&im->plan, key.kind, key.stage, key.mb);
    int l = im->plan.link_of_key[k];
    if (l < 0) {
        im->pool.put(im->pool.ctx, buf);
        return zb_fail(err, "transport: message (%d, stage %d, mb %d) is not in the link plan",
                       key.kind, key.stage, key.mb);
    }
    fifo_link *ln = &im->links[l];
    pthread_mutex_lock(&ln->mu);
    int seq = ln->sent;
    if (seq != im->plan.seq_of_key[k]) {
        pthread_mutex_unlock(&ln->mu);
        im->pool.put(im->pool.ctx, buf);
        return zb_fail(err, "transport: device %d sent (%d, stage %d, mb %d) as message %d of "
                       "its link to device %d, but the plan has it at %d",
                       im->plan.links[l].from, key.kind, key.stage, key.mb, seq,
                       im->plan.links[l].to, im->plan.seq_of_key[k]);
    }
    ln->queue[seq] = (fifo_entry){ buf, val, key, 1 };
    ln->sent++;
    pthread_cond_broadcast(&ln->cv);
    pthread_mutex_unlock(&ln->mu);
    return 0;
}

static int fifo_recv(zb_transport *tr, zb_msg_key key, void **buf, double *val, zb_err *err)
{
    fifo_impl *im = tr->impl;
    size_t k = link_plan_key(&im->plan, key.kind, key.stage, key.mb);
    int l = im->plan.link_of_key[k];
    if (l < 0)
        return zb_fail(err, "transport: nobody sends (%d, stage %d, mb %d)", key.kind, key.stage,
                       key.mb);
    fifo_link *ln = &im->links[l];
    int want = im->plan.seq_of_key[k];
    /* Read the link in order until the wanted position is in the stash. */
    while (!ln->stash[want].full) {
        pthread_mutex_lock(&ln->mu);
        while (!im->aborted && ln->sent <= ln->read)
            pthread_cond_wait(&ln->cv, &ln->mu);
        if (im->aborted) {
            pthread_mutex_unlock(&ln->mu);
            return zb_fail(err, "aborted");
        }
        fifo_entry e = ln->queue[ln->read];
        ln->queue[ln->read].full = 0;
        pthread_mutex_unlock(&ln->mu);
        const zb_msg_key *planned = &im->plan.links[l].msgs[ln->read];
        if (memcmp(planned, &e.key, sizeof e.key) != 0) {
            im->pool.put(im->pool.ctx, e.buf);
            return zb_fail(err, "transport: message %d of the link %d->%d is not the plan's",
                           ln->read, im->plan.links[l].from, im->plan.links[l].to);
        }
        ln->stash[ln->read++] = e;
    }
    if (buf)
        *buf = ln->stash[want].buf;
    else
        im->pool.put(im->pool.ctx, ln->stash[want].buf);
    if (val)
        *val = ln->stash[want].val;
    ln->stash[want] = (fifo_entry){ 0 };
    return 0;
}

static void fifo_abort(zb_transport *tr)
{
    fifo_impl *im = tr->impl;
    for (int l = 0; l < im->plan.n_links; l++) {
        pthread_mutex_lock(&im->links[l].mu);
        im->aborted = 1;
        pthread_cond_broadcast(&im->links[l].cv);
        pthread_mutex_unlock(&im->links[l].mu);
    }
}

static void fifo_reset(zb_transport *tr)
{
    fifo_impl *im = tr->impl;
    for (int l = 0; l < im->plan.n_links; l++) {
        fifo_link *ln = &im->links[l];
        /* a link whose arrays a failed create did not get holds nothing */
        for (int i = 0; ln->queue && ln->stash && i < im->plan.links[l].n_msgs; i++) {
            if (ln->queue[i].full)
                im->pool.put(im->pool.ctx, ln->queue[i].buf);
            if (ln->stash[i].full)
                im->pool.put(im->pool.ctx, ln->stash[i].buf);
            ln->queue[i] = ln->stash[i] = (fifo_entry){ 0 };
        }
        ln->sent = ln->read = 0;
    }
    im->aborted = 0;
}

static void fifo_destroy(zb_transport *tr)
{
    fifo_impl *im = tr->impl;
    if (im->links) {
        fifo_reset(tr);
        for (int l = 0; l < im->plan.n_links; l++) {
            free(im->links[l].queue);
            free(im->links[l].stash);
            pthread_mutex_destroy(&im->links[l].mu);
            pthread_cond_destroy(&im->links[l].cv);
        }
    }
    free(im->links);
    link_plan_free(&im->plan);
    free(im);
}

static const zb_transport_ops fifo_ops = {
    .name = "fifo",
    .send = fifo_send,
    .recv = fifo_recv,
    .abort = fifo_abort,
    .reset = fifo_reset,
    .destroy = fifo_destroy,
};

int transport_fifo_create(const sched_t *s, int with_norms, const zb_transport_pool *pool,
                          zb_transport **out, zb_err *err)
{
    zb_transport *tr = calloc(1, sizeof *tr);
    fifo_impl *im = calloc(1, sizeof *im);
    if (!tr || !im) {
        free(tr);
        free(im);
        return zb_fail(err, "out of memory for the transport");
    }
    im->pool = *pool;
    if (link_plan_build(s, with_norms, &im->plan, err) != 0) {
        free(tr);
        free(im);
        return -1;
    }
    im->links = calloc((size_t)(im->plan.n_links ? im->plan.n_links : 1), sizeof *im->links);
    int oom = !im->links;
    /* every link's lock first, so that destroy may take them all */
    for (int l = 0; l < im->plan.n_links && !oom; l++) {
        pthread_mutex_init(&im->links[l].mu, NULL);
        pthread_cond_init(&im->links[l].cv, NULL);
    }
    for (int l = 0; l < im->plan.n_links && !oom; l++) {
        size_t n = (size_t)im->plan.links[l].n_msgs;
        im->links[l].queue = calloc(n, sizeof(fifo_entry));
        im->links[l].stash = calloc(n, sizeof(fifo_entry));
        oom = !im->links[l].queue || !im->links[l].stash;
    }
    tr->ops = &fifo_ops;
    tr->impl = im;
    if (oom) {
        transport_free(tr);
        return zb_fail(err, "out of memory for the transport");
    }
    *out = tr;
    return 0;
}
