/*
 * transport_factory.c: the in-process transports by kind
 * (transport_factory.h).
 */
#include "runtime/transport_factory.h"

#include "runtime/transport_fifo.h"
#include "runtime/transport_slots.h"

int transport_create(int kind, const sched_t *s, int with_norms, const zb_transport_pool *pool,
                     zb_transport **out, zb_err *err)
{
    switch (kind) {
    case ZB_TRANSPORT_SLOTS:
        return transport_slots_create(s, pool, out, err);
    case ZB_TRANSPORT_FIFO:
        return transport_fifo_create(s, with_norms, pool, out, err);
    default:
        return zb_fail(err, "unknown transport %d", kind);
    }
}
