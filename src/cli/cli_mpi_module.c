/*
 * cli_mpi_module.c: cli_mpi.h in a build with MPI, by loading the module
 * zbsched_mpi.so (mpi_module.h) and forwarding to its table.
 *
 * The module is loaded only when MPI is needed: `run` as one of several
 * CPU ranks (cli_mpi_load, before any work), or `run --device cuda` under
 * an MPI launcher (cli_mpi_nccl_comm, for the NCCL id over MPI_Bcast).
 * Every other command, and `run` in one process, never maps MPI.
 *
 * The table is cached in a static once loaded, and the module is never
 * unloaded (MPI cannot be initialised twice in a process).  A failed load
 * is not cached.  Called from the main thread only.
 */
#include "src/cli/cli_mpi.h"
#include "src/cli/mpi_module.h"
#include "src/dynload.h"

#include <assert.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const zb_mpi_api *loaded; /* the module's table once a load succeeded */

/* The module's places and how errors name it. */
static const zb_module_place mpi_place = {
    .what = "MPI",
    .env = "ZBSCHED_MPI_MODULE",
    .file = ZB_MPI_MODULE_FILE,
    .install_dir = ZB_MPI_MODULE_DIR,
    .rebuild = "rebuild (meson -Dmpi=enabled)",
    .global = 1, /* Open MPI dlopens its own components, which expect libmpi's symbols global */
};

int cli_mpi_load(zb_err *err)
{
    if (loaded)
        return 0;
    char path[PATH_MAX + 32];
    void *h = zb_module_open(&mpi_place, path, sizeof path, err);
    if (!h)
        return -1;
    zb_mpi_module_entry entry = NULL;
    zb_dl_resolve(h, ZB_MPI_MODULE_ENTRY, &entry, sizeof entry);
    const zb_mpi_api *api = entry ? entry() : NULL;
    if (!api)
        return zb_fail(err, "%s is not a zbsched MPI module (no %s)", path, ZB_MPI_MODULE_ENTRY);
    if (api->version != ZB_MPI_API_VERSION || api->layout != zb_mpi_api_layout())
        return zb_fail(err, "the MPI module %s is from another zbsched build (interface %u, this "
                       "program's %u); rebuild both together", path, (unsigned)api->version,
                       ZB_MPI_API_VERSION);
    loaded = api;
    return 0;
}

int cli_run_mpi(const cli_mpi_run *r, const sched_t *s, const zb_model *m, const zb_data *d,
                trainer_opts *o)
{
    assert(loaded); /* cmd_run called cli_mpi_load first */
    return loaded->run(r, s, m, d, o);
}

/* An MPI launcher's variables, and not zbsched launch's. */
static int mpi_launched(void)
{
    if (getenv("ZB_RANK"))
        return 0;
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

int cli_mpi_nccl_comm(const zb_cuda_api *cu, const zb_rank_info *rk, struct gpu_comm **comm,
                      zb_err *err)
{
    if (!mpi_launched())
        return 0;
    if (cli_mpi_load(err) != 0)
        return -1;
    return loaded->nccl_comm(cu, rk, comm, err);
}

void cli_mpi_nccl_end(void)
{
    if (loaded)
        loaded->nccl_end();
}
