/*
 * fake_cuda_module.c: a stand-in for zbsched_cuda.so, so that the loader
 * (runtime/cuda_module.h) and the CLI's GPU error paths are tested in
 * every build, CUDA or not.  ZBSCHED_CUDA_MODULE points the program at
 * this file; FAKE_CUDA_MODE picks its behaviour:
 *
 *   nogpu (default)  a valid table that sees no GPU
 *   onegpu           a valid table that sees one GPU (for `launch --gpus 2`)
 *                    and whose backend is a GPU-like wrapper of the CPU
 *                    backend (tests/common/mirror_backend.h: host mirrors
 *                    with download / upload, activation fences), so that
 *                    `run --device cuda` trains end to end without a GPU
 *   badversion       a table from "another build" (wrong interface version)
 *   noentry          no table at all (the entry returns NULL)
 *   mpi              the NCCL bootstrap under mpirun (tests/mpi): 8 GPUs,
 *                    every schedule accepted; nccl_unique_id makes an id
 *                    naming its process (and creates $FAKE_NCCL_LOG.made,
 *                    failing if it exists: one rank only may make it);
 *                    comm_create_from_id writes the id it was given to
 *                    $FAKE_NCCL_LOG.R and fails ("no NCCL here"), since
 *                    nothing past the bootstrap can run without a GPU
 *   mpi-noid         as mpi, but making the id fails
 *   mpi-v1           as mpi, but without the id functions (a version-1
 *                    module's table)
 *
 * Nothing else is implemented: the profiler and the GPU ranks stop at the
 * device count, or at the NCCL communicator (comm_create and
 * comm_create_from_id fail, so the rank backend and the NCCL transport
 * are never reached here).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/cuda_module.h"
#include "tests/common/mirror_backend.h"

__attribute__((visibility("default"))) const zb_cuda_api *zbsched_cuda_module(void);

/* FAKE_CUDA_MODE, or "nogpu". */
static const char *mode(void)
{
    const char *m = getenv("FAKE_CUDA_MODE");
    return m && *m ? m : "nogpu";
}

/* zb_fail's job; the module links nothing of zbsched's (the program does
 * not export its symbols). */
static int fake_fail(zb_err *err, const char *msg)
{
    snprintf(err->msg, sizeof err->msg, "%s", msg);
    return -1;
}

static int is_mpi_mode(void)
{
    return strncmp(mode(), "mpi", 3) == 0;
}

static int fake_device_count(void)
{
    return is_mpi_mode() ? 8 : strcmp(mode(), "onegpu") == 0 ? 1 : 0;
}

/* comm_create (the TCP rendezvous of `zbsched launch`): the last step a
 * GPU rank takes before the executor; fails, as there is no NCCL here. */
static int fake_comm_create(const zb_rank_info *r, int timeout_s, struct gpu_comm **out,
                            zb_err *err)
{
    (void)r;
    (void)timeout_s;
    (void)out;
    return fake_fail(err, "fake module: no NCCL here (the TCP bootstrap was reached)");
}

static int fake_unique_id(unsigned char id[128], zb_err *err)
{
    if (strcmp(mode(), "mpi-noid") == 0)
        return fake_fail(err, "fake module: ncclGetUniqueId failed");
    const char *log = getenv("FAKE_NCCL_LOG");
    if (log) {
        char path[4096];
        snprintf(path, sizeof path, "%s.made", log);
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
        if (fd < 0)
            return fake_fail(err, "fake module: a second process made an NCCL id");
        close(fd);
    }
    memset(id, 0, 128);
    snprintf((char *)id, 128, "fake-nccl-id of pid %ld", (long)getpid());
    return 0;
}

static int fake_comm_from_id(const zb_rank_info *r, const unsigned char id[128],
                             struct gpu_comm **out, zb_err *err)
{
    (void)out;
    const char *log = getenv("FAKE_NCCL_LOG");
    if (log) {
        char path[4096];
        snprintf(path, sizeof path, "%s.%d", log, r->rank);
        FILE *f = fopen(path, "w");
        if (f) {
            fprintf(f, "%.128s\n", (const char *)id);
            fclose(f);
        }
    }
    return fake_fail(err, "fake module: no NCCL here (the id arrived)");
}

/* The GPU ranks' members past the communicator: present (the CLI checks
 * the table before the bootstrap) but never reached, as comm_create and
 * comm_create_from_id fail first. */
static int fake_backend_rank(int gpu, int n_devices, int local_dev, zb_backend **out, zb_err *err)
{
    (void)gpu; (void)n_devices; (void)local_dev; (void)out;
    return fake_fail(err, "fake module: no rank backend here");
}

static int fake_transport(void *ctx, const sched_t *s, int with_norms,
                          const struct zb_transport_pool *pool, struct zb_transport **out,
                          zb_err *err)
{
    (void)ctx; (void)s; (void)with_norms; (void)pool; (void)out;
    return fake_fail(err, "fake module: no NCCL transport here");
}

static int fake_bcast(struct gpu_comm *c, void *buf, size_t bytes, int root, zb_err *err)
{
    (void)c; (void)buf; (void)bytes; (void)root;
    return fake_fail(err, "fake module: no NCCL here");
}

static int fake_min_int(struct gpu_comm *c, int *v, zb_err *err)
{
    (void)c; (void)v;
    return fake_fail(err, "fake module: no NCCL here");
}

static int fake_nccl(void)
{
    return 0;
}

/* backend_create: the mirrored CPU wrapper (the GPU index must exist). */
static int fake_backend_create(int gpu, int n_devices, zb_backend **out, zb_err *err)
{
    if (gpu >= fake_device_count())
        return zb_fail(err, "CUDA device %d does not exist", gpu);
    return mb_make_wrapper((void *)1, n_devices, out, err);
}

const zb_cuda_api *zbsched_cuda_module(void)
{
    static zb_cuda_api api;
    if (strcmp(mode(), "noentry") == 0)
        return NULL;
    api.version = strcmp(mode(), "badversion") == 0 ? ZB_CUDA_API_VERSION + 100 : ZB_CUDA_API_VERSION;
    api.layout = zb_cuda_api_layout();
    api.device_count = fake_device_count;
    api.nccl_available = fake_nccl;
    api.backend_create = fake_backend_create;
    if (is_mpi_mode()) {
        api.comm_create = fake_comm_create;
        api.backend_create_rank = fake_backend_rank;
        api.transport_make = fake_transport;
        api.comm_bcast = fake_bcast;
        api.comm_min_int = fake_min_int;
        if (strcmp(mode(), "mpi-v1") != 0) {
            api.nccl_unique_id = fake_unique_id;
            api.comm_create_from_id = fake_comm_from_id;
        }
    }
    return &api;
}
