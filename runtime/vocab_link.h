/*
 * vocab_link.h: how the vocabulary passes of one schedule device reach
 * the other devices' when each device is its own process (`mpirun -np P
 * zbsched run PLAN` on a "+vocab-N" plan).  In one process the passes
 * share their buffers and a barrier is a wait on a counter
 * (runtime/vocab_exec.c); across processes the same data moves as
 * messages, and this interface is all runtime/vocab_exec.c knows of the
 * carrier (the MPI one: runtime/mpi/vocab_link_mpi.h).
 *
 * DESIGN.  Each message is named by (kind, micro-batch) and its sender;
 * both ends derive which messages exist from the schedule, so there are
 * no tags beyond that name.  Per step, with L the last stage's device:
 *
 *   X(j)        L -> every other device: the head input of micro-batch j,
 *               sent by L's F, received by each device's S(·, j);
 *   STATS(j)    every device -> every other: its shard's row statistics,
 *               sent by S, received by the first of the receiver's T(·, j)
 *               or dx(j) that needs them (barrier C0 is this exchange);
 *   PARTIAL(j)  every device -> L: the input-gradient partial (Vocab-1
 *               from S, Vocab-2 from T), received by L's dx(j) (barrier
 *               C0 or C1);
 *   DW          every device -> L, once per step after its last T: its
 *               shard's columns of the head gradient, received before L's
 *               optimizer step;
 * and before the step, on the trainer's thread, a broadcast of the head
 * from L (the head and its optimizer state live on L; the other devices
 * compute with copies of their columns, as in one process).
 *
 * Every value a device combines is the one-process run's, in the same
 * shard order, so losses and parameters are bit-identical to it.
 *
 * Workload: p <= 8 devices; per step p-1 head inputs and p(p-1) statistics
 * of B·T rows, p-1 partials of B·T·d floats, p-1 gradient shards.
 */
#ifndef ZB_RUNTIME_VOCAB_LINK_H
#define ZB_RUNTIME_VOCAB_LINK_H

#include <stddef.h>
#include <stdlib.h>

#include "src/err.h"

/* What a message carries (the name's kind). */
typedef enum vocab_msg {
    VOCAB_MSG_X = 0,       /* the head input of a micro-batch */
    VOCAB_MSG_STATS = 1,   /* a shard's row statistics of a micro-batch */
    VOCAB_MSG_PARTIAL = 2, /* a shard's input-gradient partial of a micro-batch */
    VOCAB_MSG_DW = 3,      /* a shard's columns of the step's head gradient (mb 0) */
    VOCAB_MSG_KINDS = 4
} vocab_msg;

typedef struct zb_vocab_link zb_vocab_link;

/* The operations a carrier implements. */
typedef struct zb_vocab_link_ops {
    /* Sends n bytes of buf to device `to` as message (kind, mb); buf is
     * copied, and the call never waits for the receiver.  0, or -1 with err. */
    int (*send)(zb_vocab_link *l, int to, vocab_msg kind, int mb, const void *buf, size_t n,
                zb_err *err);
    /* Waits for message (kind, mb) from device `from` and stores its n
     * bytes in buf.  0, or -1 with err (a size that differs, a failure). */
    int (*recv)(zb_vocab_link *l, int from, vocab_msg kind, int mb, void *buf, size_t n,
                zb_err *err);
    /* Collective, on every device's trainer thread: n floats of buf from
     * device root to every device.  0, or -1 with err. */
    int (*bcast)(zb_vocab_link *l, int root, float *buf, size_t n, zb_err *err);
    /* Frees the carrier's state (impl), finishing sends in flight. */
    void (*destroy)(zb_vocab_link *l);
} zb_vocab_link_ops;

struct zb_vocab_link {
    const zb_vocab_link_ops *ops; /* the carrier */
    void *impl;                   /* its state */
    int me;                       /* the one device (and shard) this process runs */
};

/* Frees l through its ops; NULL is fine. */
static inline void vocab_link_free(zb_vocab_link *l)
{
    if (!l)
        return;
    l->ops->destroy(l);
    free(l);
}

#endif
