/*
 * channel.h: the in-process transport between pipeline devices.
 *
 * Devices are threads of one process, so "sending" an activation is handing
 * over a pointer: a message is a malloc'd buffer whose ownership passes
 * from sender to receiver, plus an optional double (the partial gradient
 * norms of post-validation travel this way).  Messages are keyed by
 * (kind, stage, micro-batch): every key carries exactly one message per
 * training step, so the mailbox is a flat array of slots, sends never block
 * (unbounded buffering, as with asynchronous NCCL sends) and a receive
 * blocks until its slot fills.  A failing worker aborts the channel, which
 * wakes every blocked receiver with an error instead of hanging.
 *
 * One mutex and one condition variable guard all slots: with a handful of
 * devices and a few messages per op, contention is negligible, and a
 * single lock makes abort trivially race-free.
 *
 * Expected workload: p <= 8 threads, 2*S*m + 2*S messages per step.
 */
#ifndef ZB_RUNTIME_CHANNEL_H
#define ZB_RUNTIME_CHANNEL_H

#include <pthread.h>

typedef enum chan_kind {
    CHAN_ACT = 0,      /* activation into stage `stage` for micro-batch mb */
    CHAN_GRAD = 1,     /* gradient into stage `stage` from stage+1 */
    CHAN_NORM_UP = 2,  /* partial squared norm of stages 0..stage-1 (mb = 0) */
    CHAN_NORM_DOWN = 3, /* full squared norm, flowing back to `stage` (mb = 0) */
} chan_kind;

#define CHAN_KIND_COUNT 4

typedef struct chan_slot {
    void *ptr;  /* message buffer (owned by the channel while full) */
    double val; /* scalar payload */
    int full;   /* 1 between send and receive */
} chan_slot;

typedef struct zb_chan {
    pthread_mutex_t mu; /* guards every field below */
    pthread_cond_t cv;  /* broadcast on every send and on abort */
    int n_stages;       /* S */
    int n_micro;        /* m */
    chan_slot *slots;   /* [CHAN_KIND_COUNT][n_stages][n_micro] */
    int aborted;        /* 1: receives fail immediately */
} zb_chan;

/* Initialises ch for S stages and m micro-batches.  Returns 0 or -1 when
 * memory runs out. */
int chan_init(zb_chan *ch, int n_stages, int n_micro);

/* Frees every undelivered buffer and the slots. */
void chan_destroy(zb_chan *ch);

/* Delivers (ptr, val) to key (kind, stage, mb); the channel owns ptr until
 * it is received.  The slot must be empty (asserted: one message per key
 * per step). */
void chan_send(zb_chan *ch, chan_kind kind, int stage, int mb, void *ptr, double val);

/* Waits for the message of key (kind, stage, mb) and takes it: the caller
 * now owns *ptr.  Returns 0, or -1 when the channel was aborted (nothing
 * taken). */
int chan_recv(zb_chan *ch, chan_kind kind, int stage, int mb, void **ptr, double *val);

/* Makes every pending and future receive fail; idempotent. */
void chan_abort(zb_chan *ch);

/* Frees undelivered buffers, empties every slot and clears the abort flag
 * (between steps; no thread may be using the channel). */
void chan_reset(zb_chan *ch);

#endif
