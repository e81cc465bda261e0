/*
 * cuda_module.c: finding and loading zbsched_cuda.so (see cuda_module.h).
 *
 * The loaded table is cached in a process-wide static: the module is
 * loaded at most once and never unloaded.  A failed load is not cached, so
 * a test may point ZBSCHED_CUDA_MODULE elsewhere and try again.
 */
#include "runtime/cuda_module.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const zb_cuda_api *loaded; /* the table once a load succeeded */

/* Opens path (which exists) and checks its table.  0 or -1 with err. */
static int open_module(const char *path, const zb_cuda_api **out, zb_err *err)
{
    dlerror();
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        return zb_fail(err, "cannot load the CUDA module %s: %s", path, why ? why : "unknown error");
    }
    /* POSIX allows the object-to-function pointer conversion dlsym needs. */
    void *sym = dlsym(h, ZB_CUDA_MODULE_ENTRY);
    zb_cuda_module_entry entry;
    memcpy(&entry, &sym, sizeof entry);
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
    *out = api;
    return 0;
}

/* Writes dir/ZB_CUDA_MODULE_FILE into buf; 0, or -1 when it does not fit. */
static int module_path(char *buf, size_t len, const char *dir)
{
    int n = snprintf(buf, len, "%s/%s", dir, ZB_CUDA_MODULE_FILE);
    return n > 0 && (size_t)n < len ? 0 : -1;
}

int cuda_module_load(const zb_cuda_api **out, zb_err *err)
{
    if (loaded) {
        *out = loaded;
        return 0;
    }
    const char *forced = getenv("ZBSCHED_CUDA_MODULE");
    if (forced && *forced) {
        if (access(forced, F_OK) != 0)
            return zb_fail(err, "ZBSCHED_CUDA_MODULE=%s: no such file", forced);
        if (open_module(forced, &loaded, err) != 0)
            return -1;
        *out = loaded;
        return 0;
    }
    /* Beside the running program, then the install directory. */
    char self[PATH_MAX], dir[PATH_MAX], path[PATH_MAX + 32];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    dir[0] = '\0';
    if (n > 0) {
        self[n] = '\0';
        char *slash = strrchr(self, '/');
        if (slash) {
            *slash = '\0';
            snprintf(dir, sizeof dir, "%s", self);
        }
    }
    const char *places[2] = { dir[0] ? dir : NULL, NULL };
#ifdef ZB_CUDA_MODULE_DIR
    places[1] = ZB_CUDA_MODULE_DIR;
#endif
    for (int i = 0; i < 2; i++) {
        if (!places[i] || module_path(path, sizeof path, places[i]) != 0 || access(path, F_OK) != 0)
            continue;
        if (open_module(path, &loaded, err) != 0)
            return -1;
        *out = loaded;
        return 0;
    }
    return zb_fail(err, "no CUDA module: %s is neither beside zbsched (%s) nor in %s; build with "
                   "meson -Dcuda=enabled or set ZBSCHED_CUDA_MODULE", ZB_CUDA_MODULE_FILE,
                   dir[0] ? dir : "unknown", places[1] ? places[1] : "an install directory");
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
