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
 * the module's backend (backend_create); since version 4 so are the
 * multi-GPU NCCL ranks (trainer_opts.one_device over backend_create_rank
 * and the NCCL transport, nccl_transport_make): the module has no
 * executor of its own any more.  Because both sides are compiled from the same
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
#define ZB_CUDA_API_VERSION 4

/* The module's communicator, opaque on this side (kernels/cuda/
 * gpu_transport.h defines it). */
struct gpu_comm;
struct zb_transport;
struct zb_transport_pool;

/* What the NCCL transport of a pipeline rank needs (the ctx of
 * nccl_transport_make, kernels/cuda/nccl_transport.h): filled by the
 * caller, counters by the transport. */
typedef struct zb_nccl_cfg {
    struct gpu_comm *comm; /* the ranks' communicator: rank r = schedule device r */
    int gpu;               /* this rank's CUDA device */
    size_t act_elems;      /* elements of an activation message (B*T*d; bf16 on the wire) */
    uint64_t bytes_sent;   /* bytes this rank sent */
    uint64_t messages;     /* messages this rank sent */
} zb_nccl_cfg;

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
    /* gpu_comm_create / gpu_comm_free: this rank's NCCL communicator */
    int (*comm_create)(const zb_rank_info *r, int timeout_s, struct gpu_comm **out, zb_err *err);
    void (*comm_free)(struct gpu_comm *c);
    /* backend_cuda_create (version 3): the executor's backend, every
     * schedule device a stream on CUDA device `gpu` (kernels/cuda/backend_cuda.h) */
    int (*backend_create)(int gpu, int n_devices, zb_backend **out, zb_err *err);
    /* gpu_nccl_unique_id / gpu_comm_create_from_id (version 2): the NCCL
     * bootstrap over another channel, MPI_Bcast under mpirun (128 bytes) */
    int (*nccl_unique_id)(unsigned char id[128], zb_err *err);
    int (*comm_create_from_id)(const zb_rank_info *r, const unsigned char id[128],
                               struct gpu_comm **out, zb_err *err);
    /* backend_cuda_create_rank (version 4): a pipeline rank's backend, one
     * stream for schedule device local_dev, the other devices' stages host
     * mirrors only */
    int (*backend_create_rank)(int gpu, int n_devices, int local_dev, zb_backend **out,
                               zb_err *err);
    /* nccl_transport_make (version 4): trainer_opts.make_transport of a
     * pipeline rank on GPUs; ctx is a zb_nccl_cfg.  Collective. */
    int (*transport_make)(void *ctx, const sched_t *s, int with_norms,
                          const struct zb_transport_pool *pool, struct zb_transport **out,
                          zb_err *err);
    /* gpu_comm_bcast_host / gpu_comm_min_int (version 4): the ranks' loss,
     * checkpoint tag and status agreement, between steps.  Collective. */
    int (*comm_bcast)(struct gpu_comm *c, void *buf, size_t bytes, int root, zb_err *err);
    int (*comm_min_int)(struct gpu_comm *c, int *v, zb_err *err);
} zb_cuda_api;

/* A fingerprint of the sizes of every type the table passes across.  Both
 * sides compute it from their own headers; the loader compares them. */
static inline uint64_t zb_cuda_api_layout(void)
{
    const size_t sizes[] = { sizeof(zb_cuda_api), sizeof(sched_t), sizeof(sched_lane),
                             sizeof(zb_model), sizeof(zb_data), sizeof(trainer_opts),
                             sizeof(adamw_config), sizeof(zb_profile), sizeof(zb_err),
                             sizeof(zb_rank_info), sizeof(zb_backend_ops), sizeof(zb_backend),
                             sizeof(llama_stage), sizeof(llama_tensor), sizeof(zb_nccl_cfg) };
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
