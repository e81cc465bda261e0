/*
 * gpu_trainer.h: the multi-GPU executor of a pipeline schedule, one
 * schedule device per process and GPU with NCCL between them (the
 * `zbsched launch` ranks).  A one-GPU run uses the one executor,
 * runtime/trainer.h, over the CUDA backend (backend_cuda.h); this file
 * keeps the ranked path only, until NCCL is a transport of that executor
 * (runtime/transport.h).  It shares the issue logic described below.
 *
 * The rank's schedule device gets a zb_cuda context (a stream and a
 * cuBLASLt handle) on its GPU; each of its virtual stages a gpu_stage.
 * One host thread issues the rank's ops in lane order, each as soon as
 * its inputs have been ISSUED (not finished): a producer on the same rank
 * records a fence (CUDA event) after the op and the consumer's stream
 * waits for it (gpu_transport.h); across ranks the NCCL group below.
 *
 * Data, initial weights, the split into stages, the learning-rate schedule
 * and AdamW follow the CPU trainer (same seed, same generator, same
 * llama_stage_init_params, split_layers, adamw_lr), so losses of the two
 * can be compared step by step; they agree within bf16 tolerance, not bit
 * for bit (bf16 activations, W accumulated in schedule order).  The
 * optimizer is the synchronous global-norm clip (the CPU trainer's
 * opts.sync_optimizer reference path).
 *
 * Expected workload: `tiny` and `shakespeare-char`, p <= 8 devices sharing
 * one H100/H200; steps of milliseconds.
 */
#ifndef ZB_GPU_TRAINER_H
#define ZB_GPU_TRAINER_H

#include <stddef.h>

#include "kernels/cuda/gpu_transport.h"
#include "runtime/data.h"
#include "runtime/trainer.h"
#include "src/err.h"
#include "src/model.h"
#include "src/sched.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gpu_trainer gpu_trainer;

/* This process is rank gpu_comm_rank(comm) of
 * gpu_comm_size(comm) == s->n_devices ranks and runs schedule device
 * `rank` on CUDA device rk->local_rank, holding only that device's stages.
 * Stage boundaries between ranks go through NCCL: right after each op, one
 * group holds the op's outgoing activation or gradient (ncclSend) and the
 * next op's incoming one (ncclRecv), Megatron's send_forward_recv_backward
 * pattern, so two neighbours never wait on each other's later ops.
 * Boundaries inside the rank (the turn of a V schedule) use events as on
 * one GPU.  The global gradient norm and the losses are all-reduced.
 * NCCL matches messages by order only, so schedules whose two sides of a
 * rank boundary run a direction's micro-batches in different orders, or
 * with two boundaries joining the same ranks the same way, are refused
 * (plain pipelines such as 1F1B and ZB-H1/H2 pass).
 * comm is borrowed.  Every rank must call this with the same arguments.
 * 0 or -1 with err set.  Built and type-checked; not yet run on two GPUs
 * (docs/gpu.md). */
int gpu_trainer_create_ranked(const sched_t *s, const zb_model *m, const zb_data *d,
                              const trainer_opts *opts, const gpu_rank_info *rk, gpu_comm *comm,
                              gpu_trainer **out, zb_err *err);

/* The schedule check gpu_trainer_create_ranked applies (needs no GPU):
 * 0 when every cross-rank channel can be matched by order, -1 with err
 * naming the offending stages otherwise. */
int gpu_trainer_check_ranked(const sched_t *s, zb_err *err);

/* Frees everything; NULL is fine. */
void gpu_trainer_free(gpu_trainer *t);

/* One optimizer step over the schedule's micro-batches; *loss = mean
 * training loss (on every rank in the ranked variant).  Returns 0 or -1
 * with err set. */
int gpu_trainer_step(gpu_trainer *t, double *loss, zb_err *err);

/* Seconds of the last step (host wall clock, including the final sync). */
double gpu_trainer_last_step_s(const gpu_trainer *t);

/* Device memory: static bytes (weights, grads, moments, transfer buffers)
 * and the stream-ordered pool's high-water mark of activations since the
 * trainer was created.  0 or -1. */
int gpu_trainer_memory(const gpu_trainer *t, size_t *static_bytes, size_t *peak_activation_bytes,
                       zb_err *err);

/* Downloads stage `stage`'s master weights (llama layout, n floats). */
int gpu_trainer_stage_params(gpu_trainer *t, int stage, float *params, size_t n, zb_err *err);

#ifdef __cplusplus
}
#endif

#endif
