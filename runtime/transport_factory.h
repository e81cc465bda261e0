/*
 * transport_factory.h: the in-process transports by kind, for
 * trainer_opts.transport (trainer.h).  Transports between processes (MPI,
 * NCCL) are made by their own modules and handed to the trainer through
 * trainer_opts.make_transport instead.
 */
#ifndef ZB_RUNTIME_TRANSPORT_FACTORY_H
#define ZB_RUNTIME_TRANSPORT_FACTORY_H

#include "runtime/transport.h"

/* The in-process transports (transport.h's header comment). */
enum { ZB_TRANSPORT_SLOTS = 0, ZB_TRANSPORT_FIFO = 1 };

/* Creates transport `kind` for schedule s (with_norms as link_plan_build)
 * over pool.  0 and *out, or -1 with err (an unknown kind, memory). */
int transport_create(int kind, const sched_t *s, int with_norms, const zb_transport_pool *pool,
                     zb_transport **out, zb_err *err);

#endif
