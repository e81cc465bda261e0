/*
 * transport_fifo.h: the in-process transport whose links are untagged
 * first-in-first-out queues, the model of MPI and NCCL point-to-point
 * (link_plan.h explains the plan that replaces tags).
 */
#ifndef ZB_RUNTIME_TRANSPORT_FIFO_H
#define ZB_RUNTIME_TRANSPORT_FIFO_H

#include "runtime/transport.h"

/* Creates a FIFO transport for s over pool, with the norms of
 * post-validation on its links when with_norms (link_plan_build).  0, or
 * -1 with err (memory). */
int transport_fifo_create(const sched_t *s, int with_norms, const zb_transport_pool *pool,
                          zb_transport **out, zb_err *err);

#endif
