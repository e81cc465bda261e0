/*
 * cuda_module.h: the CUDA backend as a loadable module.
 *
 * zbsched itself links no CUDA library.  Loading libcudart, cuBLAS,
 * cuBLASLt and NCCL costs every command 100-200 ms and 200 MB even when it
 * never touches a GPU (`zbsched simulate` of a small file went from 10 ms
 * and 11 MB to 117-214 ms and 219 MB), so everything that needs them is
 * built into a separate shared module, zbsched_cuda.so, installed beside
 * the program (build/zbsched_cuda.so in a build tree; $libdir/zbsched/ when
 * installed).  `run --device cuda`, `profile --device cuda` and `launch ...
 * --device cuda` load it with dlopen the first time they need it; every
 * other command never does.
 *
 * The module exports one symbol, ZB_CUDA_MODULE_ENTRY, a function that
 * returns a table of function pointers (zb_cuda_api).  The table is the
 * whole contract between the two sides: plain C types of this project's
 * headers (sched_t, zb_model, zb_data, trainer_opts, zb_profile, zb_err,
 * the backend interface of runtime/backend.h) and two opaque handles.
 * Since version 3 a one-GPU run is the executor of runtime/trainer.h over
 * the module's backend (backend_create); the module's own executor
 * remains only for the multi-GPU NCCL ranks (trainer_create_ranked).  Because both sides are compiled from the same
 * headers but may come from different builds, the table carries a version
 * and a fingerprint of the sizes of every struct it passes; the loader
 * refuses a module whose fingerprint differs instead of crashing in it.
 *
 * Where the loader looks, first match wins:
 *   1. $ZBSCHED_CUDA_MODULE, when set: that file and nothing else;
 *   2. the directory of the running program (/proc/self/exe);
 *   3. the install directory configured at build time.
 * A file that exists but fails to load (a missing libcudart, a wrong
 * architecture, no entry symbol, another build) is an error naming it and
 * dlerror's reason, not a silent fall-through to the next place.
 *
 * Threading: cuda_module_load is called from the main thread before any
 * worker starts; the module stays loaded until the process exits (CUDA
 * libraries do not support dlclose reliably).
 */
#ifndef ZB_RUNTIME_CUDA_MODULE_H
#define ZB_RUNTIME_CUDA_MODULE_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/backend.h"
#include "runtime/data.h"
#include "runtime/rank.h"
#include "runtime/trainer.h"
#include "src/err.h"
#include "src/model.h"
#include "src/profile.h"
#include "src/sched.h"

#ifdef __cplusplus
extern "C" {
#endif

/* File name of the module and the name of its one exported function. */
#define ZB_CUDA_MODULE_FILE "zbsched_cuda.so"
#define ZB_CUDA_MODULE_ENTRY "zbsched_cuda_module"
/* Bumped whenever a member of zb_cuda_api changes meaning. */
#define ZB_CUDA_API_VERSION 3

/* The module's handles, opaque on this side (kernels/cuda/gpu_trainer.h
 * and gpu_transport.h define them). */
struct gpu_trainer;
struct gpu_comm;

/* Everything the CLI can ask of the CUDA backend. */
typedef struct zb_cuda_api {
    uint32_t version;  /* ZB_CUDA_API_VERSION of the module's build */
    uint64_t layout;   /* zb_cuda_api_layout() of the module's build */
    /* CUDA devices visible; 0 without a driver or a device (never an error) */
    int (*device_count)(void);
    /* 1 when the module was built with NCCL (multi-GPU runs) */
    int (*nccl_available)(void);
    /* gpu_profile_measure: F, B, W and memory of one layer on a GPU */
    int (*profile_measure)(const zb_model *m, int batch, int reps, int device, zb_profile *p,
                           zb_err *err);
    /* gpu_trainer_check_ranked: can every cross-rank link be matched by order */
    int (*check_ranked)(const sched_t *s, zb_err *err);
    /* gpu_comm_create / gpu_comm_free: this rank's NCCL communicator */
    int (*comm_create)(const zb_rank_info *r, int timeout_s, struct gpu_comm **out, zb_err *err);
    void (*comm_free)(struct gpu_comm *c);
    /* backend_cuda_create (version 3): the executor's backend, every
     * schedule device a stream on CUDA device `gpu` (kernels/cuda/backend_cuda.h) */
    int (*backend_create)(int gpu, int n_devices, zb_backend **out, zb_err *err);
    /* gpu_trainer_create_ranked: this rank's schedule device on its own GPU
     * (the NCCL executor; trainer_free .. trainer_memory belong to it) */
    int (*trainer_create_ranked)(const sched_t *s, const zb_model *m, const zb_data *d,
                                 const trainer_opts *opts, const zb_rank_info *rk,
                                 struct gpu_comm *comm, struct gpu_trainer **out, zb_err *err);
    void (*trainer_free)(struct gpu_trainer *t);
    /* one optimizer step; *loss = mean training loss */
    int (*trainer_step)(struct gpu_trainer *t, double *loss, zb_err *err);
    /* seconds of the last step */
    double (*trainer_last_step_s)(const struct gpu_trainer *t);
    /* static device bytes and the activation high-water mark */
    int (*trainer_memory)(const struct gpu_trainer *t, size_t *static_bytes,
                          size_t *peak_activation_bytes, zb_err *err);
    /* gpu_nccl_unique_id / gpu_comm_create_from_id (version 2): the NCCL
     * bootstrap over another channel, MPI_Bcast under mpirun (128 bytes) */
    int (*nccl_unique_id)(unsigned char id[128], zb_err *err);
    int (*comm_create_from_id)(const zb_rank_info *r, const unsigned char id[128],
                               struct gpu_comm **out, zb_err *err);
} zb_cuda_api;

/* A fingerprint of the sizes of every type the table passes across.  Both
 * sides compute it from their own headers; the loader compares them. */
static inline uint64_t zb_cuda_api_layout(void)
{
    const size_t sizes[] = { sizeof(zb_cuda_api), sizeof(sched_t), sizeof(sched_lane),
                             sizeof(zb_model), sizeof(zb_data), sizeof(trainer_opts),
                             sizeof(adamw_config), sizeof(zb_profile), sizeof(zb_err),
                             sizeof(zb_rank_info), sizeof(zb_backend_ops), sizeof(zb_backend),
                             sizeof(llama_stage), sizeof(llama_tensor) };
    uint64_t h = 1469598103934665603ULL; /* FNV-1a over the sizes */
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        h ^= (uint64_t)sizes[i];
        h *= 1099511628211ULL;
    }
    return h;
}

/* The module's entry point (what ZB_CUDA_MODULE_ENTRY names). */
typedef const zb_cuda_api *(*zb_cuda_module_entry)(void);

/* Loads the module (once per process; later calls return the same table)
 * and stores its table in *out.  Returns 0, or -1 with err set to one line:
 * no module found (naming where it looked), a module that fails to load
 * (dlerror's reason), has no entry point, or is from another build. */
int cuda_module_load(const zb_cuda_api **out, zb_err *err);

/* cuda_module_load, then at least one visible GPU: -1 with err "no CUDA
 * device" otherwise. */
int cuda_module_load_with_gpu(const zb_cuda_api **out, zb_err *err);

#ifdef __cplusplus
}
#endif

#endif
