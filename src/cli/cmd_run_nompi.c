/*
 * cmd_run_nompi.c: `zbsched run` under mpirun in a build without MPI
 * (cli_mpi.h).  Every rank would otherwise train the same job on its own,
 * so the run is refused with one line (printed by rank 0 only).
 */
#include "src/cli/cli.h"
#include "src/cli/cli_mpi.h"


int cli_mpi_load(zb_err *err)
{
    return zb_fail(err, "this zbsched was built without MPI (meson -Dmpi=enabled), so every rank "
                   "would train the same job; run it without mpirun");
}

int cli_run_mpi(const cli_mpi_run *r, const sched_t *s, const zb_model *m, const zb_data *d,
                trainer_opts *o)
{
    (void)s, (void)m, (void)d, (void)o;
    if (r->saved_stderr >= 0)
        return 1;
    return cli_error("this zbsched was built without MPI (meson -Dmpi=enabled), so every rank "
                     "would train the same job; run it without mpirun");
}

int cli_mpi_nccl_comm(const zb_cuda_api *cu, const zb_rank_info *rk, struct gpu_comm **comm,
                      zb_err *err)
{
    (void)cu, (void)rk, (void)comm, (void)err;
    return 0; /* no MPI: zbsched's own TCP rendezvous */
}

void cli_mpi_nccl_end(void)
{
}
