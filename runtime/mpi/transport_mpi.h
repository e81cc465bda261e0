/*
 * transport_mpi.h: the pipeline transport between processes, one schedule
 * device per MPI rank (runtime/transport.h's interface).
 *
 * The transport design of transport.h is what makes this file short: every
 * link (an ordered pair of devices) is a FIFO of untagged messages whose
 * order both ends derive from the schedule (zb_link_plan).  Here a link
 * between two ranks is MPI point-to-point from rank `from` to rank `to`
 * with a single tag, which MPI keeps in order (its non-overtaking rule),
 * so the k-th message received on a link is the plan's k-th key.  The
 * receiver drains earlier messages of the link into a stash, exactly as
 * the in-process fifo transport does, so V-shape and interleaved schedules,
 * whose links carry several stage boundaries in orders the two ends do not
 * run in step, work unchanged.
 *
 * Payloads: an activation or gradient is act_floats floats (the trainer's
 * buffer size, given at creation); a post-validation norm is one double.
 * The receiver knows which from the plan.  Sends are MPI_Isend: they never
 * wait for the receiver; the buffer goes back to the pool when the send
 * completes (checked at every call, and all awaited at the step's reset).
 * A device's messages to itself (V-shape: stages 0 and S-1 on one device)
 * never touch MPI: they go straight into the link's stash.
 *
 * Threads: only this rank's one worker thread calls send and receive,
 * and the main thread calls reset between steps, so MPI must be
 * initialised with at least MPI_THREAD_SERIALIZED.
 *
 * Failures: abort makes later receives fail, but a receive blocked in
 * MPI_Recv waiting for a rank that failed cannot be woken; the caller must
 * end the job (MPI_Abort) when its step fails, which cmd_run_mpi.c does.
 *
 * Bytes: every byte handed to MPI_Isend is counted (transport_mpi_bytes).
 */
#ifndef ZB_TRANSPORT_MPI_H
#define ZB_TRANSPORT_MPI_H

#include <stddef.h>
#include <stdint.h>

#include <mpi.h>

#include "runtime/link_plan.h"
#include "runtime/transport.h"

/* What trainer_opts.make_transport_ctx points to for this transport. */
typedef struct transport_mpi_cfg {
    MPI_Comm comm;           /* one rank per schedule device: rank d is device d */
    size_t act_floats;       /* floats per activation / gradient message */
    uint64_t bytes_sent;     /* out: bytes this rank handed to MPI, over the trainer's life */
    uint64_t messages;       /* out: messages this rank sent over MPI */
} transport_mpi_cfg;

/* trainer_opts.make_transport for MPI (ctx: a transport_mpi_cfg that
 * outlives the trainer).  0, or -1 with err (memory, a communicator whose
 * size is not the schedule's device count). */
int transport_mpi_make(void *ctx, const sched_t *s, int with_norms,
                       const struct zb_transport_pool *pool, struct zb_transport **out,
                       zb_err *err);

#endif
