/*
 * fake_cuda_ranks.c: a stand-in for zbsched_cuda.so whose GPU ranks train,
 * over MPI and the CPU, so that `zbsched run --device cuda` across ranks
 * (src/cli/run_gpu.c) runs end to end under mpirun on a machine without a
 * GPU.  ZBSCHED_CUDA_MODULE points the program at this file.
 *
 * The table is the CUDA module's, with every member a GPU rank uses:
 *
 *   device_count          8 GPUs
 *   nccl_unique_id,       the bootstrap under mpirun: any id; the
 *   comm_create_from_id   "communicator" is a duplicate of MPI_COMM_WORLD
 *   comm_bcast,           MPI_Bcast and MPI_Allreduce(MPI_MIN) on it, in
 *   comm_min_int          place of NCCL's
 *   backend_create_rank   backend_rank.h's wrapper over the mirrored CPU
 *                         backend (tests/common/mirror_backend.h: host
 *                         mirrors, download / upload, activation fences,
 *                         as the CUDA backend), so only the rank's own
 *                         stages reach the "device"
 *   transport_make        the MPI transport (runtime/mpi/transport_mpi.h)
 *                         over that communicator, in place of NCCL's
 *
 * So the CLI's GPU-rank path (bootstrap, one_device executor on a rank
 * backend, checkpoints in parts through the module's collectives, the job
 * loop's agreement) is the one a real module drives; only the arithmetic
 * runs on the CPU, with the CPU's bits.  What this cannot test is CUDA
 * and NCCL themselves.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "runtime/backend_rank.h"
#include "runtime/cuda_module.h"
#include "runtime/mpi/transport_mpi.h"
#include "tests/common/mirror_backend.h"

__attribute__((visibility("default"))) const zb_cuda_api *zbsched_cuda_module(void);

/* The module's communicator. */
struct gpu_comm {
    MPI_Comm comm; /* a duplicate of MPI_COMM_WORLD */
};

static int fail_mpi(zb_err *err, const char *what)
{
    snprintf(err->msg, sizeof err->msg, "fake ranks module: %s failed", what);
    return -1;
}

static int fake_device_count(void)
{
    return 8;
}

static int fake_nccl(void)
{
    return 1;
}

static int fake_comm_create(const zb_rank_info *r, int timeout_s, struct gpu_comm **out,
                            zb_err *err)
{
    (void)r, (void)timeout_s, (void)out;
    snprintf(err->msg, sizeof err->msg, "fake ranks module: run it under mpirun");
    return -1;
}

static int fake_unique_id(unsigned char id[128], zb_err *err)
{
    (void)err;
    memset(id, 0, 128);
    snprintf((char *)id, 128, "fake ranks id");
    return 0;
}

static int fake_comm_from_id(const zb_rank_info *r, const unsigned char id[128],
                             struct gpu_comm **out, zb_err *err)
{
    (void)r, (void)id;
    struct gpu_comm *c = calloc(1, sizeof *c);
    if (!c)
        return fail_mpi(err, "calloc");
    if (MPI_Comm_dup(MPI_COMM_WORLD, &c->comm) != MPI_SUCCESS) {
        free(c);
        return fail_mpi(err, "MPI_Comm_dup");
    }
    *out = c;
    return 0;
}

static void fake_comm_free(struct gpu_comm *c)
{
    if (!c)
        return;
    MPI_Comm_free(&c->comm);
    free(c);
}

static int fake_bcast(struct gpu_comm *c, void *buf, size_t bytes, int root, zb_err *err)
{
    return MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, c->comm) == MPI_SUCCESS
               ? 0 : fail_mpi(err, "MPI_Bcast");
}

static int fake_min_int(struct gpu_comm *c, int *v, zb_err *err)
{
    return MPI_Allreduce(MPI_IN_PLACE, v, 1, MPI_INT, MPI_MIN, c->comm) == MPI_SUCCESS
               ? 0 : fail_mpi(err, "MPI_Allreduce");
}

static int fake_backend_rank(int gpu, int n_devices, int local_dev, zb_backend **out, zb_err *err)
{
    (void)gpu;
    zb_backend *inner = NULL;
    if (mb_make_wrapper((void *)1, n_devices, &inner, err) != 0)
        return -1;
    return backend_rank_wrap(inner, local_dev, out, err);
}

/* The MPI transport's settings, for the one trainer of this process. */
static transport_mpi_cfg mpi_cfg;

static int fake_transport(void *ctx, const sched_t *s, int with_norms,
                          const struct zb_transport_pool *pool, struct zb_transport **out,
                          zb_err *err)
{
    zb_nccl_cfg *nc = ctx;
    mpi_cfg.comm = nc->comm->comm;
    mpi_cfg.act_floats = nc->act_elems;
    return transport_mpi_make(&mpi_cfg, s, with_norms, pool, out, err);
}

static int fake_backend_create(int gpu, int n_devices, zb_backend **out, zb_err *err)
{
    (void)gpu;
    return mb_make_wrapper((void *)1, n_devices, out, err);
}

const zb_cuda_api *zbsched_cuda_module(void)
{
    static zb_cuda_api api;
    api.version = ZB_CUDA_API_VERSION;
    api.layout = zb_cuda_api_layout();
    api.device_count = fake_device_count;
    api.nccl_available = fake_nccl;
    api.backend_create = fake_backend_create;
    api.comm_create = fake_comm_create;
    api.comm_free = fake_comm_free;
    api.nccl_unique_id = fake_unique_id;
    api.comm_create_from_id = fake_comm_from_id;
    api.backend_create_rank = fake_backend_rank;
    api.transport_make = fake_transport;
    api.comm_bcast = fake_bcast;
    api.comm_min_int = fake_min_int;
    return &api;
}
