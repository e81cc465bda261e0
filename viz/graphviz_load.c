/*
 * graphviz_load.c: dlopen of Graphviz and its table of entry points (see
 * graphviz_load.h).  Single-threaded, like Graphviz itself.
 */
#include "viz/graphviz_load.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

static zb_graphviz_api table;           /* filled by the first successful load */
static const zb_graphviz_api *loaded;   /* &table once a load succeeded */

/* dlsym of name into *slot (a pointer of any type); 0 or -1. */
static int resolve(void *h, const char *name, void *slot, size_t size)
{
    void *sym = dlsym(h, name);
    if (!sym)
        return -1;
    /* POSIX allows the object-to-function pointer conversion dlsym needs. */
    memcpy(slot, &sym, size);
    return 0;
}

int graphviz_load(const zb_graphviz_api **out, zb_err *err)
{
    if (loaded) {
        *out = loaded;
        return 0;
    }
    const char *forced = getenv("ZBSCHED_GRAPHVIZ");
    const char *file = forced && *forced ? forced : ZB_GVC_SONAME;
    dlerror();
    void *h = dlopen(file, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        return zb_fail(err, "cannot load Graphviz (%s), which --format dag needs: %s; install "
                       "libgvc6", file, why ? why : "unknown error");
    }
    zb_graphviz_api t;
#define ZB_GV_RESOLVE(field)                                                    \
    if (resolve(h, #field, &t.field, sizeof t.field) != 0) {                    \
        dlclose(h);                                                             \
        return zb_fail(err, "%s has no " #field ": not Graphviz's libgvc", file); \
    }
    ZB_GV_RESOLVE(agopen)
    ZB_GV_RESOLVE(agclose)
    ZB_GV_RESOLVE(agsubg)
    ZB_GV_RESOLVE(agnode)
    ZB_GV_RESOLVE(agedge)
    ZB_GV_RESOLVE(agattr)
    ZB_GV_RESOLVE(agsafeset)
    ZB_GV_RESOLVE(agseterr)
    ZB_GV_RESOLVE(agseterrf)
    ZB_GV_RESOLVE(gvContext)
    ZB_GV_RESOLVE(gvLayout)
    ZB_GV_RESOLVE(gvRenderData)
    ZB_GV_RESOLVE(gvFreeRenderData)
    ZB_GV_RESOLVE(gvFreeLayout)
    ZB_GV_RESOLVE(AgMemDisc)
    ZB_GV_RESOLVE(AgIoDisc)
    ZB_GV_RESOLVE(Agdirected)
#undef ZB_GV_RESOLVE
    table = t;
    loaded = &table;
    *out = loaded;
    return 0;
}
