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
 *
 * Nothing else is implemented: every other path the tests take stops at
 * the device count.
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/cuda_module.h"
#include "tests/common/mirror_backend.h"

__attribute__((visibility("default"))) const zb_cuda_api *zbsched_cuda_module(void);

/* FAKE_CUDA_MODE, or "nogpu". */
static const char *mode(void)
{
    const char *m = getenv("FAKE_CUDA_MODE");
    return m && *m ? m : "nogpu";
}

static int fake_device_count(void)
{
    return strcmp(mode(), "onegpu") == 0 ? 1 : 0;
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
    return &api;
}
