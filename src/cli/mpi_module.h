/*
 * mpi_module.h: `zbsched run` under mpirun as a loadable module.
 *
 * zbsched links no MPI.  Open MPI's libmpi brings libopen-rte,
 * libopen-pal, libhwloc, libevent and libudev, and mapping and relocating
 * them cost every command about a third of a millisecond of start-up
 * although only `run` under mpirun or srun uses them (bench/README.md,
 * "Start-up against the authors' heuristic").  MPI's handles
 * (MPI_COMM_WORLD, MPI_BYTE, ...) are macros over the library's own
 * symbols, so the MPI code cannot be called through a table of dlsym'd
 * pointers the way GLPK is; instead cmd_run_mpi.c and runtime/mpi/ are
 * built into the module zbsched_mpi.so, linked against MPI, and the
 * program loads it (cli_mpi_module.c) only when it runs as one of
 * several MPI ranks.
 *
 * The module leaves the program's own functions (cli_error, the run
 * report, the runtime) undefined and binds them to the program, which
 * exports its symbols (meson's export_dynamic) for this; the runtime's
 * objects it needs that the program lacks come from its own copy of the
 * static libraries.  So there is one copy of every piece of state the two
 * share (the stop flags of run_report.h, the BLAS table).
 *
 * The module exports one symbol, ZB_MPI_MODULE_ENTRY, which returns the
 * table below; like the CUDA module's (runtime/cuda_module.h) it carries
 * a version and a fingerprint of the sizes of the structs it passes, and
 * the loader refuses a module from another build.
 *
 * Where the loader looks, first match wins:
 *   1. $ZBSCHED_MPI_MODULE, when set: that file and nothing else;
 *   2. the directory of the running program (/proc/self/exe);
 *   3. the install directory configured at build time (ZB_MPI_MODULE_DIR).
 */
#ifndef ZB_CLI_MPI_MODULE_H
#define ZB_CLI_MPI_MODULE_H

#include <stdint.h>

#include "src/cli/cli_mpi.h"

/* File name of the module and the name of its one exported function. */
#define ZB_MPI_MODULE_FILE "zbsched_mpi.so"
#define ZB_MPI_MODULE_ENTRY "zbsched_mpi_module"
/* Bumped whenever a member of zb_mpi_api changes meaning. */
#define ZB_MPI_API_VERSION 1

/* What the program asks of the MPI module: cli_mpi.h's functions. */
typedef struct zb_mpi_api {
    uint32_t version; /* ZB_MPI_API_VERSION of the module's build */
    uint64_t layout;  /* zb_mpi_api_layout() of the module's build */
    /* cli_run_mpi: this rank's part of the job */
    int (*run)(const cli_mpi_run *r, const sched_t *s, const zb_model *m, const zb_data *d,
               trainer_opts *o);
    /* cli_mpi_nccl_comm, called only under an MPI launch */
    int (*nccl_comm)(const zb_cuda_api *cu, const zb_rank_info *rk, struct gpu_comm **comm,
                     zb_err *err);
    /* cli_mpi_nccl_end */
    void (*nccl_end)(void);
} zb_mpi_api;

/* A fingerprint of the sizes of every type the table passes across. */
static inline uint64_t zb_mpi_api_layout(void)
{
    const size_t sizes[] = { sizeof(zb_mpi_api), sizeof(cli_mpi_run), sizeof(run_args),
                             sizeof(run_identity), sizeof(sched_t), sizeof(zb_model),
                             sizeof(zb_data), sizeof(trainer_opts), sizeof(zb_rank_info),
                             sizeof(zb_err), sizeof(zb_cuda_api) };
    uint64_t h = 1469598103934665603ULL; /* FNV-1a over the sizes */
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        h ^= (uint64_t)sizes[i];
        h *= 1099511628211ULL;
    }
    return h;
}

/* The module's entry point (what ZB_MPI_MODULE_ENTRY names). */
typedef const zb_mpi_api *(*zb_mpi_module_entry)(void);

#endif
