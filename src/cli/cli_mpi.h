/*
 * cli_mpi.h: `zbsched run` under mpirun or srun (docs/mpi.md).
 *
 * cmd_run.c loads and checks everything a rank needs (schedule, model,
 * data, flags) the same way on every rank, then hands over here.  Two
 * implementations: in a build with MPI (meson feature `mpi`),
 * cli_mpi_module.c, which loads cmd_run_mpi.c built as the module
 * zbsched_mpi.so (mpi_module.h), so that the program links no MPI; and
 * cmd_run_nompi.c without it, which refuses the multi-process run with
 * one line instead of letting every rank train the same job.
 */
#ifndef ZB_CLI_MPI_H
#define ZB_CLI_MPI_H

#include "runtime/cuda_module.h"
#include "runtime/rank.h"
#include "runtime/run_record.h"
#include "runtime/trainer.h"
#include "src/cli/run_args.h"

/* What the multi-process run needs besides the flags. */
typedef struct cli_mpi_run {
    run_args *a;                  /* the flags (a->isl.replicas 0: pipeline ranks) */
    const run_identity *identity; /* what a checkpoint's run record holds, --resume checks */
    int saved_stderr;             /* this rank's stderr when cmd_run muted a non-zero rank, else -1 */
} cli_mpi_run;

/* Makes the MPI code ready: in a build with MPI, loads the module
 * zbsched_mpi.so (mpi_module.h).  Returns 0, or -1 with err set to one
 * line: the build has no MPI, or the module is missing or fails to load.
 * Called before cli_run_mpi, before any work. */
int cli_mpi_load(zb_err *err);

/* Runs this rank's part of the job: pipeline ranks, or the islands.  Returns the
 * exit status, having printed any error line itself (once for an error
 * every rank meets, "rank R: ..." for one rank's own failure, after which
 * the job is aborted). */
int cli_run_mpi(const cli_mpi_run *r, const sched_t *s, const zb_model *m, const zb_data *d,
                trainer_opts *o);

/* --device cuda under mpirun or srun (an MPI launch: the MPI rank
 * variables, no ZB_RANK from `zbsched launch`): MPI carries rank 0's NCCL
 * unique id to every rank (MPI_Bcast, as NCCL's "one device per process"
 * example does), so a multi-node GPU run needs no TCP port of its own.
 * Returns 1 with *comm created, 0 when this is not an MPI launch or the
 * build has no MPI (the caller then uses the TCP rendezvous), -1 with err
 * (the same on every rank when rank 0 could not make the id). */
int cli_mpi_nccl_comm(const zb_cuda_api *cu, const zb_rank_info *rk, struct gpu_comm **comm,
                      zb_err *err);

/* Ends MPI if cli_mpi_nccl_comm started it (after the communicator is
 * freed). */
void cli_mpi_nccl_end(void);

#endif
