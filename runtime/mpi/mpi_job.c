/*
 * mpi_job.c: job_comm over MPI (mpi_job.h).
 */
#include "runtime/mpi/mpi_job.h"

static int mpi_failed(zb_err *err, int rc, const char *what)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    return zb_fail(err, "%s: %s", what, text);
}

static int bcast(void *ctx, void *buf, size_t bytes, int root, zb_err *err)
{
    MPI_Comm comm = *(MPI_Comm *)ctx;
    for (size_t done = 0; done < bytes;) {
        size_t part = bytes - done > 0x40000000u ? 0x40000000u : bytes - done;
        int rc = MPI_Bcast((char *)buf + done, (int)part, MPI_BYTE, root, comm);
        if (rc != MPI_SUCCESS)
            return mpi_failed(err, rc, "MPI_Bcast");
        done += part;
    }
    return 0;
}

static int min_int(void *ctx, int *v, zb_err *err)
{
    int in = *v;
    int rc = MPI_Allreduce(&in, v, 1, MPI_INT, MPI_MIN, *(MPI_Comm *)ctx);
    return rc != MPI_SUCCESS ? mpi_failed(err, rc, "MPI_Allreduce") : 0;
}

void mpi_job_comm(MPI_Comm *comm, job_comm *out)
{
    out->ctx = comm;
    MPI_Comm_rank(*comm, &out->rank);
    MPI_Comm_size(*comm, &out->world);
    out->bcast = bcast;
    out->min_int = min_int;
}
