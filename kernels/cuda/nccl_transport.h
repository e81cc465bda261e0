/*
 * nccl_transport.h: the links between pipeline ranks on GPUs as NCCL
 * point-to-point, one implementation of runtime/transport.h for
 * trainer_opts.one_device (rank d runs schedule device d on its own GPU).
 *
 * Design.  Each link of the schedule's link plan (an ordered pair of
 * devices: one direction) between two ranks is a CHANNEL of its own: a
 * two-rank NCCL communicator split from the ranks' communicator
 * (ncclCommSplit, colour = the link, sender rank 0 and receiver rank 1:
 * link_plan_channel) and, on each of the two ranks, a CUDA stream of its
 * own.  Both ends issue the link's messages in the plan's order (the
 * sender as its lane sends them, the receiver draining in that order into
 * a stash, as every transport of transport.h does), so on every channel
 * the k-th ncclSend meets the k-th ncclRecv and no tags are needed.
 * Because a channel's operations wait only on that channel's stream, a
 * send never queues behind a receive of another link, nor behind the
 * compute stream: the deadlock of one stream for everything (an NCCL send
 * on the compute stream waiting for a receive that the peer queued behind
 * its own send) cannot form.  Megatron-LM's p2p_communication.py avoids
 * it differently, by batching each step's send/recv pairs into one
 * batch_isend_irecv group; a schedule-derived per-link order lets a rank
 * issue each message when its op produces it instead.
 *
 * Buffers and fences (runtime/backend.h).  A send: the executor has
 * recorded the producing op's fence on the buffer (act_issued); the
 * channel's stream waits for it, sends, and records the fence again; the
 * buffer goes back to the pool only once that send has finished
 * (polled, as the MPI transport polls MPI_Test), so no compute stream
 * ever waits on another rank's progress.  A receive: a pool buffer, the
 * channel's stream waits for its last use, receives into it and records
 * its fence; the executor then makes the consumer's stream wait
 * (act_wait).  The host never blocks for an activation.
 *
 * Scalars.  The post-validation norms (kind CHAN_NORM_UP/DOWN, only when
 * with_norms) travel on the same channel, in their plan position, as one
 * double staged through a per-link device array; the receiving host waits
 * for that one message (the norm decides its next step).  The step's loss
 * is not a message: the caller broadcasts it (gpu_comm_bcast_host).
 *
 * A device's link to itself (V-shape: two stages on one device) needs no
 * communicator: the buffer goes straight into the stash.
 *
 * Caveat (never run: no two-GPU machine yet).  NCCL's guide ("Using
 * multiple NCCL communicators concurrently") does not promise that
 * communicators used at once on one GPU progress, since CUDA does not
 * guarantee that kernels of different streams run concurrently; here one
 * thread per rank issues every call (allowed), the channels are few and
 * their kernels small, but the ranks issue in different orders.
 * docs/gpu.md ("Several GPUs") says what to fall back to if it hangs.
 *
 * Threading: one worker thread per rank sends and receives (one_device);
 * reset and destroy run between steps.  Workload: a few links per rank,
 * 2·S·m activation messages of B·T·d bf16 per step.
 */
#ifndef ZB_NCCL_TRANSPORT_H
#define ZB_NCCL_TRANSPORT_H

#include "runtime/cuda_module.h"
#include "runtime/link_plan.h"
#include "runtime/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

/* trainer_opts.make_transport for pipeline ranks on GPUs: ctx is a
 * zb_nccl_cfg (runtime/cuda_module.h) whose communicator has one rank per
 * schedule device.  Collective: every rank must call it (trainer_create
 * does), because each link's communicator is split from cfg->comm.
 * 0 and *out, or -1 with err (sizes, no NCCL, a failed split). */
int nccl_transport_make(void *ctx, const sched_t *s, int with_norms,
                        const zb_transport_pool *pool, zb_transport **out, zb_err *err);

#ifdef __cplusplus
}
#endif

#endif
