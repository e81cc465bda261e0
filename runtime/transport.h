/*
 * transport.h: the interface through which pipeline devices hand each
 * other activations, gradients and the post-validation norms, whatever
 * carries them.
 *
 * The executor (trainer_ops.c) names every message of a step by a key: (kind,
 * stage, micro-batch), as in channel.h.  A transport delivers the message
 * of a key from the device that sends it to the device that receives it.
 * Implementations:
 *
 *   slots   threads of one process (channel.h): a mailbox slot per key,
 *           any order; the default.
 *   fifo    threads of one process, but each link (an ordered pair of
 *           devices) is ONE first-in-first-out queue of untagged messages,
 *           exactly what MPI point-to-point with a single tag or NCCL
 *           send/recv give.  It is the model, and the test, of every
 *           transport between processes (transport_fifo.h).
 *   mpi     processes, one per device (runtime/mpi/transport_mpi.h).
 *   nccl    GPU ranks (kernels/cuda/nccl_transport.h).
 *
 * This header is the interface only, with no code of its own but
 * transport_free: every transport includes it and nothing it includes
 * knows any transport.  The order of a link's messages is link_plan.h;
 * making the in-process transports by kind is transport_factory.h.
 *
 * NO TAGS.  A FIFO link carries no keys; both ends derive the order of
 * every link's messages from the schedule instead (link_plan.h).
 *
 * Buffers: a send passes ownership of an activation-sized buffer to the
 * transport, a receive hands one back.  In-process transports move the
 * pointer; a transport between processes would copy the bytes out and
 * return the buffer to its owner's pool (zb_transport_pool), and receive
 * into a buffer taken from it.
 *
 * Expected workload: p <= 64 devices, 2*S*m + 2*S messages per step.
 */
#ifndef ZB_RUNTIME_TRANSPORT_H
#define ZB_RUNTIME_TRANSPORT_H

#include <stddef.h>
#include <stdlib.h>

#include "runtime/channel.h"
#include "src/err.h"
#include "src/sched.h"

/* One message's name (chan_kind values; mb is 0 for the norms). */
typedef struct zb_msg_key {
    int kind;  /* CHAN_ACT, CHAN_GRAD, CHAN_NORM_UP, CHAN_NORM_DOWN */
    int stage; /* the stage the message goes INTO */
    int mb;    /* micro-batch */
} zb_msg_key;

/* Where a transport gets and returns activation-sized buffers. */
typedef struct zb_transport_pool {
    void *(*get)(void *ctx);           /* a buffer, NULL when memory runs out */
    void (*put)(void *ctx, void *buf); /* returns one (NULL is fine) */
    void *ctx;                         /* passed to both */
} zb_transport_pool;

typedef struct zb_transport zb_transport;

/* The operations every transport implements. */
typedef struct zb_transport_ops {
    const char *name; /* "slots", "fifo", "mpi", "nccl" */
    /* Delivers (buf, val) for key; the transport owns buf from now on.
     * Never waits for the receiver.  0, or -1 with err (order broken,
     * aborted). */
    int (*send)(zb_transport *tr, zb_msg_key key, void *buf, double val, zb_err *err);
    /* Waits for key's message; the caller owns *buf.  0, or -1 with err
     * ("aborted" after transport_abort). */
    int (*recv)(zb_transport *tr, zb_msg_key key, void **buf, double *val, zb_err *err);
    /* Makes every pending and future receive fail. */
    void (*abort)(zb_transport *tr);
    /* Between steps (no thread using it): drops undelivered messages
     * (buffers back to the pool) and clears the abort. */
    void (*reset)(zb_transport *tr);
    /* Frees the state (impl), not tr itself (transport_free does both). */
    void (*destroy)(zb_transport *tr);
} zb_transport_ops;

struct zb_transport {
    const zb_transport_ops *ops; /* the implementation */
    void *impl;                  /* its state */
};

/* Frees tr through its ops; NULL is fine. */
static inline void transport_free(zb_transport *tr)
{
    if (!tr)
        return;
    tr->ops->destroy(tr);
    free(tr);
}

#endif
