/*
 * transport_slots.h: the default in-process transport, a mailbox slot per
 * message key (channel.h): any order, the buffer pointer handed over.
 */
#ifndef ZB_RUNTIME_TRANSPORT_SLOTS_H
#define ZB_RUNTIME_TRANSPORT_SLOTS_H

#include "runtime/transport.h"

/* Creates a slots transport for s over pool (which gets back the buffers
 * of undelivered messages at reset).  0, or -1 with err (memory). */
int transport_slots_create(const sched_t *s, const zb_transport_pool *pool, zb_transport **out,
                           zb_err *err);

#endif
