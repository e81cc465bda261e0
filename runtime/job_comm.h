/*
 * job_comm.h: how the processes of one job agree, whatever carries their
 * messages.
 *
 * A job of several processes (the pipeline ranks of `mpirun -np P zbsched
 * run`, the GPU ranks of `zbsched launch`) must take every decision that
 * ends or changes the run together: the step's loss and whether the
 * optimizer skipped it, whether the run diverged, whether a signal asked
 * it to stop, whether every part of a checkpoint was written.  Two
 * primitives are enough for all of them, and every communicator zbsched
 * has offers both: MPI (MPI_Bcast, MPI_Allreduce with MPI_MIN) and NCCL
 * (the CUDA module's comm_bcast and comm_min_int).  The helpers below
 * build the rest from the two: a logical OR, a sum, and the agreement on
 * a failure that carries the first failing rank's message to everyone.
 *
 * A NULL job_comm is one process: every helper then answers at once with
 * this process's own values.
 *
 * All of it is collective: every rank calls the same helper in the same
 * order, between steps (never while a step's messages are in flight).
 */
#ifndef ZB_RUNTIME_JOB_COMM_H
#define ZB_RUNTIME_JOB_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "src/err.h"

typedef struct job_comm {
    void *ctx;  /* the communicator, passed to the two functions */
    int rank;   /* this process's rank, 0 .. world-1 */
    int world;  /* processes in the job */
    /* Copies bytes of buf from rank root to every rank.  0 or -1 with err. */
    int (*bcast)(void *ctx, void *buf, size_t bytes, int root, zb_err *err);
    /* Replaces *v by its minimum over the ranks.  0 or -1 with err. */
    int (*min_int)(void *ctx, int *v, zb_err *err);
} job_comm;

/* This process's rank and the job's size (0 and 1 for NULL). */
int job_comm_rank(const job_comm *c);
int job_comm_world(const job_comm *c);

/* *flag = 1 when it is non-zero on any rank, else 0.  0 or -1 with err
 * (a failed collective: the job cannot agree any more). */
int job_comm_any(const job_comm *c, int *flag, zb_err *err);

/* *v = its sum over the ranks (one broadcast per rank: for a few counters
 * at the end of a run).  0 or -1 with err. */
int job_comm_sum(const job_comm *c, int64_t *v, zb_err *err);

/* The agreement after something every rank did (a step, a checkpoint
 * part): fail is this rank's outcome, err its message when it failed.
 * Returns 0 when no rank failed; otherwise 1 on every rank, with err
 * holding the lowest failing rank's message, prefixed "rank R: " on the
 * other ranks, so that any rank can print it.  -1 with err when the
 * collective itself failed. */
int job_comm_agree(const job_comm *c, int fail, zb_err *err);

#endif
