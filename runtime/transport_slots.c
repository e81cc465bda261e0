/*
 * transport_slots.c: the default in-process transport (transport_slots.h):
 * the keyed mailbox of channel.h behind the transport interface, any
 * order, pointers handed over.
 */
#include "runtime/transport_slots.h"

#include <stdlib.h>

/* State of a slots transport. */
typedef struct slots_impl {
    zb_chan chan;            /* the mailbox */
    zb_transport_pool pool;  /* where dropped buffers go back */
} slots_impl;

static int slots_send(zb_transport *tr, zb_msg_key key, void *buf, double val, zb_err *err)
{
    (void)err;
    slots_impl *im = tr->impl;
    chan_send(&im->chan, (chan_kind)key.kind, key.stage, key.mb, buf, val);
    return 0;
}

static int slots_recv(zb_transport *tr, zb_msg_key key, void **buf, double *val, zb_err *err)
{
    slots_impl *im = tr->impl;
    if (chan_recv(&im->chan, (chan_kind)key.kind, key.stage, key.mb, buf, val) != 0)
        return zb_fail(err, "aborted");
    return 0;
}

static void slots_abort(zb_transport *tr)
{
    slots_impl *im = tr->impl;
    chan_abort(&im->chan);
}

static void slots_reset(zb_transport *tr)
{
    slots_impl *im = tr->impl;
    chan_reset(&im->chan);
}

static void slots_destroy(zb_transport *tr)
{
    slots_impl *im = tr->impl;
    chan_destroy(&im->chan);
    free(im);
}

static const zb_transport_ops slots_ops = {
    .name = "slots",
    .send = slots_send,
    .recv = slots_recv,
    .abort = slots_abort,
    .reset = slots_reset,
    .destroy = slots_destroy,
};

int transport_slots_create(const sched_t *s, const zb_transport_pool *pool, zb_transport **out,
                           zb_err *err)
{
    zb_transport *tr = calloc(1, sizeof *tr);
    slots_impl *im = calloc(1, sizeof *im);
    if (!tr || !im || chan_init(&im->chan, s->n_stages, s->n_micro) != 0) {
        free(tr);
        free(im);
        return zb_fail(err, "out of memory for the transport");
    }
    im->pool = *pool;
    tr->ops = &slots_ops;
    tr->impl = im;
    *out = tr;
    return 0;
}
