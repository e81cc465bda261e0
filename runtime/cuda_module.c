/*
 * cuda_module.c: finding and loading zbsched_cuda.so (see cuda_module.h).
 *
 * The loaded table is cached in a process-wide static: the module is
 * loaded at most once and never unloaded.  A failed load is not cached, so
 * a test may point ZBSCHED_CUDA_MODULE elsewhere and try again.
 */
#include "runtime/cuda_module.h"
#include "src/dynload.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const zb_cuda_api *loaded; /* the table once a load succeeded */

int cuda_module_load(const zb_cuda_api **out, zb_err *err)
{
    if (loaded) {
        *out = loaded;
        return 0;
    }
    zb_module_place place = {
        .what = "CUDA",
        .env = "ZBSCHED_CUDA_MODULE",
        .file = ZB_CUDA_MODULE_FILE,
        .install_dir = NULL,
        .rebuild = "build with meson -Dcuda=enabled",
        .global = 0,
    };
#ifdef ZB_CUDA_MODULE_DIR
    place.install_dir = ZB_CUDA_MODULE_DIR;
#endif
    char path[PATH_MAX + 32];
    void *h = zb_module_open(&place, path, sizeof path, err);
    if (!h)
        return -1;
    zb_cuda_module_entry entry = NULL;
    zb_dl_resolve(h, ZB_CUDA_MODULE_ENTRY, &entry, sizeof entry);
    const zb_cuda_api *api = entry ? entry() : NULL;
    if (!api) {
        dlclose(h);
        return zb_fail(err, "%s is not a zbsched CUDA module (no %s)", path, ZB_CUDA_MODULE_ENTRY);
    }
    if (api->version != ZB_CUDA_API_VERSION || api->layout != zb_cuda_api_layout()) {
        unsigned version = api->version; /* the table dies with dlclose */
        dlclose(h);
        return zb_fail(err, "the CUDA module %s is from another zbsched build (interface %u, "
                       "this program's %u); rebuild both together", path, version,
                       ZB_CUDA_API_VERSION);
    }
    loaded = api;
    *out = loaded;
    return 0;
}

int cuda_module_load_with_gpu(const zb_cuda_api **out, zb_err *err)
{
    const zb_cuda_api *api;
    if (cuda_module_load(&api, err) != 0)
        return -1;
    if (api->device_count() <= 0)
        return zb_fail(err, "no CUDA device");
    *out = api;
    return 0;
}
