/*
 * graphviz_load.c: dlopen of Graphviz and its table of entry points (see
 * graphviz_load.h).  Single-threaded, like Graphviz itself.
 */
#include "viz/graphviz_load.h"
#include "src/dynload.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

static zb_graphviz_api table;           /* filled by the first successful load */
static const zb_graphviz_api *loaded;   /* &table once a load succeeded */

int graphviz_load(const zb_graphviz_api **out, zb_err *err)
{
    if (loaded) {
        *out = loaded;
        return 0;
    }
    const char *file;
    void *h = zb_dl_open_library("ZBSCHED_GRAPHVIZ", ZB_GVC_SONAME, 1, "Graphviz", "--format dag", "libgvc6",
                                 &file, err);
    if (!h)
        return -1;
    zb_graphviz_api t;
#define ZB_GV_RESOLVE(field)                                                    \
    if (zb_dl_resolve(h, #field, &t.field, sizeof t.field) != 0) {                    \
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
