/*
 * rank.h: where this process sits in a multi-process run, read from the
 * environment.
 *
 * A run of several processes (one per GPU under `zbsched launch`, one per
 * MPI rank under mpirun, one per Slurm task) learns its rank, the number
 * of ranks and its index on the node from variables its launcher sets.
 * Reading them needs no GPU and no communication library, so it lives
 * here, below every transport: the CUDA module's NCCL transport and an MPI
 * transport both start from the same zb_rank_info.  ZB_* variables win;
 * otherwise Open MPI's, MPICH's (PMI_*) and Slurm's equivalents are read.
 *
 * Expected workload: called once per process at start-up.
 */
#ifndef ZB_RUNTIME_RANK_H
#define ZB_RUNTIME_RANK_H

#include "src/err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where this process sits in a multi-process run. */
typedef struct zb_rank_info {
    int rank;       /* ZB_RANK (or OMPI_COMM_WORLD_RANK / PMI_RANK / SLURM_PROCID) */
    int world;      /* ZB_WORLD_SIZE (or the MPI / Slurm equivalents) */
    int local_rank; /* ZB_LOCAL_RANK: the GPU index on this node (default: rank) */
} zb_rank_info;

/* Reads the rank variables into *r.  Returns 1 when they describe a
 * multi-process run, 0 when none is set (single process: rank 0 of 1),
 * -1 with err when they are malformed (not numbers, rank >= world, only
 * one of rank and world set). */
int zb_rank_from_env(zb_rank_info *r, zb_err *err);

#ifdef __cplusplus
}
#endif

#endif
