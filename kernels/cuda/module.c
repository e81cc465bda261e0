/*
 * module.c: the entry point of zbsched_cuda.so, the CUDA backend as a
 * loadable module (runtime/cuda_module.h).
 *
 * The module is everything of kernels/cuda/ plus the static libraries it
 * stands on, linked into one shared object with its own copies of those
 * libraries (-Bsymbolic: the module never binds to the program's copies),
 * so that zbsched itself needs no CUDA library to start.  This file only
 * fills the table; each member is the function of gpu_*.h it names.
 */
#include "kernels/cuda/backend_cuda.h"
#include "kernels/cuda/gpu_profile.h"
#include "kernels/cuda/nccl_transport.h"
#include "kernels/cuda/gpu_transport.h"
#include "kernels/cuda/zb_cuda.h"
#include "runtime/cuda_module.h"

/* The one exported symbol (the rest of the module is hidden or bound
 * locally); see ZB_CUDA_MODULE_ENTRY. */
__attribute__((visibility("default"))) const zb_cuda_api *zbsched_cuda_module(void);

const zb_cuda_api *zbsched_cuda_module(void)
{
    static const zb_cuda_api api = {
        .version = ZB_CUDA_API_VERSION,
        .layout = 0, /* set below: not a constant expression */
        .device_count = zb_cuda_device_count,
        .nccl_available = gpu_nccl_available,
        .profile_measure = gpu_profile_measure,
        .comm_create = gpu_comm_create,
        .comm_free = gpu_comm_free,
        .backend_create = backend_cuda_create,
        .nccl_unique_id = gpu_nccl_unique_id,
        .comm_create_from_id = gpu_comm_create_from_id,
        .backend_create_rank = backend_cuda_create_rank,
        .transport_make = nccl_transport_make,
        .comm_bcast = gpu_comm_bcast_host,
        .comm_min_int = gpu_comm_min_int,
    };
    static zb_cuda_api filled;
    if (!filled.version) {
        filled = api;
        filled.layout = zb_cuda_api_layout();
    }
    return &filled;
}
