/*
 * mpi_islands.h: islands across processes, K replicas of the pipeline
 * trainer on K*P MPI ranks, joined by DiLoCo, EDiT, A-EDiT or by
 * data-parallel gradient averaging (sync), with replicas that leave on
 * SIGTERM.
 *
 * runtime/outer/islands.h runs K replicas in one process and simulates
 * their ring.  This file runs the same arithmetic with each replica in its
 * own processes: replica r (seed shared, data stream r) is rank r (P = 1:
 * the whole schedule on its own device threads) or ranks r*P .. r*P+P-1
 * (P = the schedule's devices: a pipeline of ranks, mpi_pipeline.h).  The
 * replicas meet only in the outer step, whose all-reduce runs between the
 * corresponding ranks of the replicas (the same stages, so the same
 * segments) over MPI (runtime/mpi/mpi_ring.h: MPI_Allreduce for fp32,
 * INTELLECT-1's int8 ring on point-to-point).  Every replica keeps its own copy of the global
 * parameters and outer momentum, as in outer.c, so a replica that leaves
 * takes nothing the survivors need.
 *
 * Same bits as the in-process islands (same seed, same K, same flags):
 *   - the segment layout is islands.h's (islands_seg_layout_build);
 *   - DiLoCo: Delta = global - params, the all-reduce of the segment with
 *     divisor K, outer_nesterov, params = global, segment by segment;
 *   - sync: trainer_backward, the gradient all-reduce per segment with
 *     divisor K, trainer_apply; with ZeRO-1 (io->zero1, mpi_zero1.h) the
 *     reduce-scatter in the in-process ring's order, the norm's chain,
 *     trainer_apply on the shard, the all-gather: the same bits for every
 *     K (a partial leave then stops the job: the leaver's shard is the
 *     only copy);
 *   - each step's loss is summed in replica order starting from 0.0, then
 *     divided by the number of replicas that trained (on every rank).
 * With the int8 wire this holds for every K; with fp32 for K <= 2 (see
 * mpi_ring.h: MPI chooses the order of its additions).
 *
 * Leaving: a replica one of whose ranks got SIGTERM (the caller's flag)
 * still finishes the inner steps up to the next outer-step boundary (every step
 * in sync mode) and contributes to that outer step, so its work is not
 * lost.  Right after it, every rank publishes its flag (MPI_Allgather), the
 * survivors agree on the new membership with MPI_Comm_split (rank order
 * kept), and continue on that smaller communicator.  The leaver returns
 * with res->left set.  In-process, this is an ISLANDS_LEAVE event at the
 * step after the boundary (`run --leave R:S`), and gives the same bits
 * (tests/mpi/test_mpi_islands.sh compares them).  When every replica
 * asks at once, the whole job was asked to stop (scancel, a time limit):
 * nobody leaves, and the job loop stops every rank at that step instead
 * (runtime/job.h: checkpoint, JOB_STOPPED), as in one process.
 *
 * What MPI does not survive: a rank that dies without warning (SIGKILL, a
 * crash, a lost node).  Standard MPI then has no communicator left to
 * agree on; mpirun ends the job (docs/mpi.md).
 *
 * EDiT and A-EDiT: each replica keeps the anomaly detectors of its own
 * segments (outer.c keeps one per (replica, segment) too, fed only with
 * that replica's norm); the norms and the detectors' verdicts are
 * all-gathered per segment, so every rank computes the same weights; then
 * the weighted all-reduce and the clip as in outer.c: the same bits as
 * the in-process islands for the wires and K given above.  A-EDiT's
 * wall-clock interval is read on rank 0 of the current members and
 * broadcast, so every rank decides alike; the in-process run is
 * deterministic only when the interval is always over (tiny
 * --sync-interval), and then so is this one.  Elastic joins are not
 * offered across processes.
 *
 * Workload: K <= a few dozen ranks on one or several hosts, the `tiny` and
 * `shakespeare-char` models, hundreds to thousands of steps.
 */
#ifndef ZB_MPI_ISLANDS_H
#define ZB_MPI_ISLANDS_H

#include <signal.h>
#include <stdint.h>

#include <mpi.h>

#include "runtime/outer/islands.h"

typedef struct mpi_islands_result {
    long steps;            /* inner steps run (io->steps unless this replica left) */
    double *loss;          /* [io->steps] mean training loss per step (speaker only; NAN elsewhere) */
    double *val_loss;      /* [io->steps] validation loss where evaluated, else NAN (speaker) */
    double final_val_loss; /* validation loss of the final synchronized model (speaker) */
    uint64_t bytes_sent;   /* bytes put on links by every rank that took part, summed */
    long outer_steps;      /* outer synchronizations taken (sync: gradient all-reduces) */
    long eliminated;       /* EDiT: (replica, segment) contributions dropped, this rank's
                            * segments (the same on every rank of a ring) */
    long skipped;          /* EDiT: (outer step, segment) pairs left unchanged, likewise */
    int initial_replicas;  /* K at the start: the communicator's size */
    int final_replicas;    /* replicas present at the end */
    size_t optimizer_bytes; /* AdamW m and v of the lowest present replica, over its ranks
                             * (ZeRO-1: about 1/K of the unsharded figure) */
    long *left_at;         /* [initial_replicas] step after which each rank left, -1: stayed */
    long tokens;           /* training tokens consumed by all replicas (speaker) */
    double wall_s;         /* wall seconds of the run */
    int left;              /* 1 on a rank whose replica left (it prints nothing more) */
    int speaker;           /* 1 on the one rank that prints: rank 0 of the final communicator */
    int agreed_error;      /* after a failure: 1 when every rank failed with the same error
                            * (print it once), 0 when it may be this rank's alone (abort) */
} mpi_islands_result;

/* Checks io and the rank count of comm for s (the same answer on every
 * rank): 0, or -1 with err set. */
int mpi_islands_check(const sched_t *s, const islands_opts *io, MPI_Comm comm, zb_err *err);

/* The islands of one run over MPI, stepped by the job loop. */
typedef struct mpi_islands mpi_islands;
struct job_way;

/* Creates this rank's part of the islands over comm (io->replicas K
 * divides the size of comm into P = 1 or P = s->n_devices ranks per
 * replica, as mpi_islands_check requires; any outer kind; no events).
 * leave is this process's stop flag (SIGTERM, SIGINT), may be NULL.
 * Collective over comm.  Returns 0, -2 (the options, the same error on
 * every rank) or -1 (this rank's failure: the caller aborts the job). */
int mpi_islands_create(const sched_t *s, const zb_model *m, const zb_data *d,
                       const trainer_opts *base, const islands_opts *io, MPI_Comm comm,
                       volatile sig_atomic_t *leave, mpi_islands **out, zb_err *err);

/* Frees x; NULL is fine. */
void mpi_islands_free(mpi_islands *x);

/* Fills *w with the way of running x: one inner step per call, every
 * replica's loss and skip gathered over the ring (the job's members);
 * the boundary takes the outer step when due and, after one, lets the
 * replicas asked to leave go (the step's left on their ranks, fewer
 * members_after on the others); eval and finish as islands.h's; the
 * stop vote stops the job when every replica asked (see the header);
 * the speaker is rank 0 of the current members. */
void mpi_islands_way(mpi_islands *x, struct job_way *w);

/* The run's figures once the job ended (collective over the current
 * members; on a rank whose replica left, only steps, left and left_at):
 * bytes, outer steps, EDiT counts, replicas at the start and the end,
 * who left when, the speaker.  Not the losses, which the job's result
 * holds.  0 or -1 with err. */
int mpi_islands_totals(mpi_islands *x, mpi_islands_result *res, zb_err *err);

/* The whole run through the job loop (mpi_islands_create, _way, job_run,
 * _totals), with io->max_skipped and io->max_loss_factor as the
 * divergence rules.  Fills *res (free with mpi_islands_result_free).
 * Returns 0, or -1 with err set and res->agreed_error 1 when every rank
 * failed alike (the options, divergence, a rank's non-finite
 * pseudo-gradient), 0 when the failure may be this rank's alone (the
 * caller must then abort the job). */
int mpi_islands_run(const sched_t *s, const zb_model *m, const zb_data *d,
                    const trainer_opts *base, const islands_opts *io, MPI_Comm comm,
                    volatile sig_atomic_t *leave, mpi_islands_result *res, zb_err *err);

/* Frees what mpi_islands_run allocated in r (not r itself). */
void mpi_islands_result_free(mpi_islands_result *r);

#endif
