/*
 * dynload.c: finding, opening and resolving the libraries and modules
 * zbsched loads on demand (see dynload.h).  Nothing here is cached: each
 * caller caches its own resolved table once a load succeeded, and a
 * failed load leaves nothing behind, so a test may point the environment
 * variable elsewhere and try again.
 */
#include "src/dynload.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int zb_dl_resolve(void *h, const char *name, void *slot, size_t size)
{
    void *sym = dlsym(h, name);
    if (!sym)
        return -1;
    memcpy(slot, &sym, size);
    return 0;
}

void *zb_dl_open_library(const char *env, const char *soname, int local, const char *what,
                         const char *needed_by, const char *package, const char **file, zb_err *err)
{
    const char *forced = env ? getenv(env) : NULL;
    *file = forced && *forced ? forced : soname;
    dlerror();
    void *h = dlopen(*file, RTLD_NOW | (local ? RTLD_LOCAL : RTLD_GLOBAL));
    if (!h) {
        const char *why = dlerror();
        zb_fail(err, "cannot load %s (%s), which %s needs: %s; install %s", what, *file, needed_by,
                why ? why : "unknown error", package);
    }
    return h;
}

/* Opens path, which exists. */
static void *open_path(const zb_module_place *m, const char *path, zb_err *err)
{
    dlerror();
    void *h = dlopen(path, RTLD_NOW | (m->global ? RTLD_GLOBAL : RTLD_LOCAL));
    if (!h) {
        const char *why = dlerror();
        zb_fail(err, "cannot load the %s module %s: %s", m->what, path, why ? why : "unknown error");
    }
    return h;
}

void *zb_module_open(const zb_module_place *m, char *path, size_t cap, zb_err *err)
{
    const char *forced = getenv(m->env);
    if (forced && *forced) {
        if (access(forced, F_OK) != 0) {
            zb_fail(err, "%s=%s: no such file", m->env, forced);
            return NULL;
        }
        snprintf(path, cap, "%s", forced);
        return open_path(m, forced, err);
    }
    /* Beside the running program, then the install directory. */
    char self[PATH_MAX], dir[PATH_MAX];
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
    const char *places[2] = { dir[0] ? dir : NULL, m->install_dir };
    for (int i = 0; i < 2; i++) {
        if (!places[i])
            continue;
        int len = snprintf(path, cap, "%s/%s", places[i], m->file);
        if (len <= 0 || (size_t)len >= cap || access(path, F_OK) != 0)
            continue;
        return open_path(m, path, err);
    }
    zb_fail(err, "no %s module: %s is neither beside zbsched (%s) nor in %s; %s or set %s", m->what,
            m->file, dir[0] ? dir : "unknown", m->install_dir ? m->install_dir : "an install directory",
            m->rebuild, m->env);
    return NULL;
}
