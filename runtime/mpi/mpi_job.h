/*
 * mpi_job.h: a job's agreement (runtime/job_comm.h) over an MPI
 * communicator: MPI_Bcast and MPI_Allreduce with MPI_MIN.
 *
 * The job loop calls it between steps only, from the thread that steps,
 * so it needs no more than MPI_THREAD_SERIALIZED.
 */
#ifndef ZB_MPI_JOB_H
#define ZB_MPI_JOB_H

#include <mpi.h>

#include "runtime/job_comm.h"

/* Fills *out for *comm (borrowed: it must outlive out), with this
 * process's rank and the communicator's size. */
void mpi_job_comm(MPI_Comm *comm, job_comm *out);

#endif
