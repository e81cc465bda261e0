/*
 * gpu_transport.h: moving activations and gradients between pipeline
 * stages on GPUs.
 *
 * ONE GPU (gpu_local_*): every device of a schedule gets its own zb_cuda
 * context (its own stream) on the same GPU.  A transfer records an event
 * on the producer's stream after the producing op, makes the consumer's
 * stream wait for it (cudaStreamWaitEvent: no host blocking) and copies
 * device to device on the consumer's stream into a buffer the consumer
 * owns.  NCCL cannot serve this case: it refuses two ranks on one GPU.
 *
 * SEVERAL GPUs (gpu_nccl_*): one process per GPU, rank r runs device r of
 * the schedule.  Bootstrap either through NCCL_COMM_ID=host:port (NCCL's
 * own: every rank derives the same id, rank 0 serves it) or, without it,
 * through ZB_MASTER_ADDR / ZB_MASTER_PORT: rank 0 creates the unique id
 * and hands it to the others over TCP.  Rank and size come from ZB_RANK,
 * ZB_WORLD_SIZE and ZB_LOCAL_RANK (set by `zbsched launch`, mpirun wrappers
 * or a cluster launcher; docs/gpu.md).  All sends and receives of one
 * schedule step between neighbours go into ONE ncclGroupStart/End, so the
 * order in which the two sides post them cannot deadlock.
 *
 * Everything returns 0 or -1 with a zb_err line; built without NCCL, the
 * multi-GPU functions fail with "built without NCCL".  Workload: one
 * transfer per F and per B of each micro-batch and stage boundary,
 * B·T·d bf16 each (a few MB).
 */
#ifndef ZB_GPU_TRANSPORT_H
#define ZB_GPU_TRANSPORT_H

#include <stddef.h>

#include "kernels/cuda/zb_cuda.h"
#include "runtime/rank.h"
#include "src/err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- one GPU, several streams ---------------------------------------- */

/* An ordering token between two streams (a CUDA event without timing). */
typedef struct gpu_fence gpu_fence;

int gpu_fence_new(gpu_fence **f, zb_err *err);
void gpu_fence_free(gpu_fence *f);

/* Records f on `from`'s stream: everything queued there so far. */
int gpu_fence_signal(gpu_fence *f, zb_cuda *from, zb_err *err);

/* Makes `to`'s stream wait for the work f captured (host does not block). */
int gpu_fence_wait(gpu_fence *f, zb_cuda *to, zb_err *err);

/* 1 when the work f captured has finished (or f was never signalled),
 * 0 while it runs, -1 with err on a CUDA error.  Does not block. */
int gpu_fence_done(gpu_fence *f, zb_err *err);

/* The one-GPU transfer: signal f on `from`, wait on `to`, then copy bytes
 * from src (written by work queued on `from`) to dst (owned by `to`) on
 * `to`'s stream.  After the call, work queued on `to` sees dst. */
int gpu_local_send(zb_cuda *from, zb_cuda *to, gpu_fence *f, void *dst, const void *src,
                   size_t bytes, zb_err *err);

/* ---- several GPUs, NCCL ------------------------------------------------ */

/* Where this process sits in a multi-GPU run (runtime/rank.h: read from
 * the environment, no GPU needed). */
typedef zb_rank_info gpu_rank_info;

/* The rank variables (zb_rank_from_env): 1 multi-process, 0 single
 * process, -1 with err when malformed. */
static inline int gpu_rank_from_env(gpu_rank_info *r, zb_err *err)
{
    return zb_rank_from_env(r, err);
}

/* 1 when this build has NCCL. */
int gpu_nccl_available(void);

typedef struct gpu_comm gpu_comm;

/* Creates the communicator of this rank on CUDA device r->local_rank
 * (bootstrap as described above; timeout_s bounds the TCP wait).
 * Returns 0 and *out, or -1 with err set. */
int gpu_comm_create(const gpu_rank_info *r, int timeout_s, gpu_comm **out, zb_err *err);

/* Bytes of NCCL's unique id (NCCL_UNIQUE_ID_BYTES). */
#define GPU_NCCL_ID_BYTES 128

/* Rank 0's half of a bootstrap over another channel (MPI_Bcast under
 * mpirun, NCCL's "one device per process" example): a fresh unique id
 * (ncclGetUniqueId) into id.  0, or -1 with err (no NCCL). */
int gpu_nccl_unique_id(unsigned char id[GPU_NCCL_ID_BYTES], zb_err *err);

/* Creates this rank's communicator on CUDA device r->local_rank from an
 * id every rank already holds: no TCP rendezvous.  0 and *out, or -1. */
int gpu_comm_create_from_id(const gpu_rank_info *r, const unsigned char id[GPU_NCCL_ID_BYTES],
                            gpu_comm **out, zb_err *err);

/* Destroys the communicator (ncclCommDestroy); NULL is fine. */
void gpu_comm_free(gpu_comm *c);

/* One message of a grouped exchange. */
typedef struct gpu_msg {
    int peer;      /* the other rank */
    void *buf;     /* device buffer: read for a send, written for a receive */
    size_t bytes;  /* size (bf16 activations: 2·B·T·d) */
} gpu_msg;

/* Posts every send and receive of one step as ONE NCCL group on stream s
 * (a zb_cuda context on this rank's GPU).  Completes asynchronously on the
 * stream.  0 or -1. */
int gpu_comm_exchange(gpu_comm *c, zb_cuda *s, const gpu_msg *sends, int n_sends,
                      const gpu_msg *recvs, int n_recvs, zb_err *err);

/* Sum all-reduce of n floats in place (data-parallel gradients, the outer
 * optimizer's pseudo-gradients).  Queued on s.  0 or -1. */
int gpu_comm_allreduce_sum(gpu_comm *c, zb_cuda *s, float *buf, size_t n, zb_err *err);

/* The same for n doubles (global gradient norm, losses).  Queued on s. */
int gpu_comm_allreduce_sum_f64(gpu_comm *c, zb_cuda *s, double *buf, size_t n, zb_err *err);

/* The communicator itself (an ncclComm_t), for the NCCL transport
 * (nccl_transport.c), which splits it per link; NULL without NCCL. */
void *gpu_comm_nccl(gpu_comm *c);

/* Between steps, from the host: broadcast `bytes` of host memory buf from
 * rank root to every rank, and the minimum of *v over the ranks into *v
 * (the ranks' agreement on a status).  Collective and synchronous (a
 * staging device buffer and a stream of their own).  0 or -1. */
int gpu_comm_bcast_host(gpu_comm *c, void *buf, size_t bytes, int root, zb_err *err);
int gpu_comm_min_int(gpu_comm *c, int *v, zb_err *err);

/* This communicator's rank and size. */
int gpu_comm_rank(const gpu_comm *c);
int gpu_comm_size(const gpu_comm *c);

#ifdef __cplusplus
}
#endif

#endif
