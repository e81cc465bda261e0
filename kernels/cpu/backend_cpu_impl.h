/*
 * backend_cpu_impl.h: what the files of the CPU backend share (internal to
 * kernels/cpu/backend_cpu*.c): a stage's buffers.
 */
#ifndef ZB_KERNELS_BACKEND_CPU_IMPL_H
#define ZB_KERNELS_BACKEND_CPU_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/backend.h"

/* One stage's buffers. */
typedef struct cpu_stage {
    const llama_stage *layout; /* borrowed description of the buffers */
    const llama_stage *compute; /* what F, B, W and grads_add run (borrowed):
                                 * layout, or a prefix of it (stage_new) */
    int dev;                   /* schedule device it lives on (the ledger's) */
    size_t n;                  /* floats per buffer */
    float *buf[ZB_BUF_COUNT];  /* params, grads, m, v */
    float *snap[3];            /* snapshot of params, m, v (allocated at first use;
                                * snap[0] alone is adamw_params's copy) */
    size_t snap_n[3];          /* floats allocated in each snap[k] */
    int n_shard;               /* ZeRO-1 (opt_shard): ranges of the optimizer shard;
                                * 0: m, v and snapshots cover the whole stage */
    size_t *shard_lo;          /* [n_shard] first float of each range */
    size_t *shard_len;         /* [n_shard] floats of each range */
    size_t shard_n;            /* floats in m, v and each snapshot when sharded */
} cpu_stage;

/* The memory ledger (src/mem_ledger.h; docs/cost-model.md, "Buffer
 * classes") is charged by each file with the buffers it allocates:
 * backend_cpu.c through its cpu_impl, backend_cpu_vocab.c through the
 * ledger the ops table's `ledger` returns (backend_cpu.c calls
 * backend_cpu_vocab.c, so a call back would make the two a circle). */

#endif
