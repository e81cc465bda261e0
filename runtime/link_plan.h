/*
 * link_plan.h: the order of every link's messages, derived from the
 * schedule alone, so that the two ends of a link agree on it without tags.
 *
 * A FIFO link (MPI point-to-point with one tag, NCCL send/recv, the
 * in-process model of them, transport_fifo.h) carries no keys, so the
 * receiver must know which key the k-th message of a link is.  Both sides
 * know the schedule, so both derive the same link plan (zb_link_plan below): for each link, the keys
 * in the order the SENDER sends them, which is its lane's op order (an F
 * sends its activation, a B or BW its input gradient), then the norms of
 * post-validation (up pass in increasing stage order, down pass in
 * decreasing).  A receiver that needs key K while earlier messages of the
 * link are still unread reads those first into a stash (it will need them
 * anyway this step).  Sends never wait for the receiver (buffered, like
 * MPI_Isend), so draining can only wait for messages the sender has already
 * passed: no deadlock, and V-shape and interleaved schedules, whose links
 * carry several stage boundaries in orders the two sides do not run in
 * step, work on every transport.
 *
 * Used by every transport with ordered links: transport_fifo.c,
 * runtime/mpi/transport_mpi.c and kernels/cuda/nccl_transport.c.  It
 * knows the message keys of transport.h and nothing of any transport.
 *
 * Expected workload: p <= 64 devices, 2*S*m + 2*S messages per step; a
 * plan is built once per trainer.
 */
#ifndef ZB_RUNTIME_LINK_PLAN_H
#define ZB_RUNTIME_LINK_PLAN_H

#include <stddef.h>

#include "runtime/channel.h"
#include "runtime/transport.h"
#include "src/err.h"
#include "src/sched.h"

/* The messages of one link in the order its sender sends them. */
typedef struct zb_link {
    int from, to;      /* devices (from == to: a device talking to itself) */
    int n_msgs;        /* messages per step */
    zb_msg_key *msgs;  /* [n_msgs] in send order */
} zb_link;

/* Every link of a schedule and where each key sits on its link. */
typedef struct zb_link_plan {
    int n_devices;     /* p */
    int n_stages;      /* S */
    int n_micro;       /* m */
    int n_links;       /* links that carry at least one message */
    zb_link *links;    /* [n_links] ordered by (from, to) */
    int *link_of_key;  /* [CHAN_KIND_COUNT * S * m] link of each key, -1: never sent */
    int *seq_of_key;   /* [CHAN_KIND_COUNT * S * m] its position on that link */
} zb_link_plan;

/* Builds the link plan of s (must pass sched_validate): ops messages from
 * the lanes, then the norms when with_norms (post-validation; 0 for the
 * synchronous clip, which sends none).  0, or -1 with err (memory). */
int link_plan_build(const sched_t *s, int with_norms, zb_link_plan *out, zb_err *err);

/* Frees what link_plan_build allocated; a zeroed plan is fine. */
void link_plan_free(zb_link_plan *p);

/* The channel of link l as device `me` sees it when every device is a
 * process and each link between two of them gets a communicator of its
 * own (the NCCL transport splits the ranks' communicator once per link,
 * every rank calling for every link in plan order): the split's colour,
 * l when me is one end of the link and -1 (no colour) otherwise or when
 * the link is a device's link to itself (no communicator: in-process);
 * *key, me's rank in the link's communicator: 0 the sender, 1 the
 * receiver (-1 with no colour). */
int link_plan_channel(const zb_link_plan *p, int l, int me, int *key);

/* Index of key (kind, stage, mb) in the plan's per-key arrays. */
static inline size_t link_plan_key(const zb_link_plan *p, int kind, int stage, int mb)
{
    return ((size_t)kind * (size_t)p->n_stages + (size_t)stage) * (size_t)p->n_micro + (size_t)mb;
}

/* Whether messages of kind carry one double (the post-validation norms)
 * rather than an activation-sized buffer. */
static inline int link_plan_is_scalar(int kind)
{
    return kind == CHAN_NORM_UP || kind == CHAN_NORM_DOWN;
}

/* One process's end of the plan (pipeline ranks over MPI or NCCL): the
 * link key travels on (*link) and its position there (*seq).  Sending
 * (receiving == 0), the key must leave device me; receiving, arrive at
 * it.  0, or -1 with err naming the key. */
int link_plan_locate(const zb_link_plan *p, int me, int receiving, zb_msg_key key, int *link,
                     int *seq, zb_err *err);

/* The error for key sent as message `sent` of its link while the plan has
 * it at `planned` (the two ends do not share an order).  Returns -1. */
int link_plan_order_error(zb_msg_key key, int sent, int planned, zb_err *err);

#endif
