/*
 * dynload.h: loading the libraries and modules only some commands use.
 *
 * zbsched links only cJSON, libm and libc, so that `gen`, `simulate` and
 * the other commands that plan start in about a millisecond (bench/README.md,
 * issue 28).  What a command needs beyond that is opened with dlopen when
 * the command first needs it:
 *
 *   a shared library by its soname: BLAS (kernels/cpu/kernels.c), GLPK
 *   (solver/glpk_load.c), Graphviz (viz/graphviz_load.c); an environment
 *   variable may name another file;
 *   a zbsched module, built with the program: zbsched_cuda.so
 *   (runtime/cuda_module.c), zbsched_mpi.so (src/cli/cli_mpi_module.c),
 *   found through its environment variable, else beside the running
 *   program, else in the install directory.
 *
 * Each caller keeps its own table of entry points, resolved once, and its
 * own check that a module is from this build; this file only finds, opens
 * and resolves, with one-line errors that name the file and what needs it.
 */
#ifndef ZB_DYNLOAD_H
#define ZB_DYNLOAD_H

#include <stddef.h>

#include "src/err.h"

/* dlsym of name in handle h into *slot, a function pointer of `size`
 * bytes (POSIX allows the object-to-function pointer conversion).
 * 0, or -1 when h has no such symbol (nothing written). */
int zb_dl_resolve(void *h, const char *name, void *slot, size_t size);

/* Opens a shared library: the file $env names when env is set and
 * non-empty, else soname (*file gets which, for the caller's messages).
 * local: RTLD_LOCAL, else RTLD_GLOBAL; both RTLD_NOW.  Returns the
 * handle, or NULL with err: "cannot load WHAT (FILE), which NEEDED_BY
 * needs: WHY; install PACKAGE". */
void *zb_dl_open_library(const char *env, const char *soname, int local, const char *what,
                         const char *needed_by, const char *package, const char **file, zb_err *err);

/* Where a zbsched module is looked for, and how it is named in errors. */
typedef struct zb_module_place {
    const char *what;        /* "CUDA", "MPI": in "the CUDA module", "no CUDA module" */
    const char *env;         /* the variable naming the file to load instead */
    const char *file;        /* its file name, beside the program or in install_dir */
    const char *install_dir; /* the install directory, or NULL when there is none */
    const char *rebuild;     /* how to get one, e.g. "build with meson -Dcuda=enabled" */
    int global;              /* 1: RTLD_GLOBAL (its libraries dlopen components that need its symbols) */
} zb_module_place;

/* Finds and opens the module: $env (which must exist), else file beside
 * the running program (/proc/self/exe), else in install_dir.  Stores the
 * path opened in path[cap].  Returns the handle, or NULL with err naming
 * the places tried or why the file would not load. */
void *zb_module_open(const zb_module_place *m, char *path, size_t cap, zb_err *err);

#endif
