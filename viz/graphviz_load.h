/*
 * graphviz_load.h: Graphviz (cgraph + gvc), loaded with dlopen the first
 * time a dependency graph is drawn.
 *
 * zbsched links no Graphviz.  Mapping and relocating libgvc, libcgraph
 * and their dependencies (libcdt, libpathplan, libltdl, libxdot) cost
 * every command start-up time although only `render --format dag` uses
 * them (bench/README.md, "Start-up against the authors' heuristic").  So
 * viz/dag.c calls Graphviz through the table below, filled once with
 * dlsym from ZB_GVC_SONAME (whose own NEEDED entries bring libcgraph; a
 * dlsym on its handle searches them too), the way kernels/cpu/kernels.c
 * loads BLAS.  The types come from cgraph.h and gvc.h at build time: the
 * sonames' major version (6) fixes their layout.  Graphviz then loads its
 * layout and render plugins itself, as it always did.
 *
 * $ZBSCHED_GRAPHVIZ, when set, names the file to load instead of the
 * soname (tests point it at a missing file to check the error line).
 *
 * Threading: Graphviz is not thread-safe, and neither is this; the DAG
 * renderer is called from one thread.  The library stays loaded until
 * the process exits (Graphviz's plugins do not support unloading).
 */
#ifndef ZB_VIZ_GRAPHVIZ_LOAD_H
#define ZB_VIZ_GRAPHVIZ_LOAD_H

#include <cgraph.h>
#include <gvc.h>

#include "src/err.h"

/* The library loaded: Graphviz 2.40 - 2.50's gvc (Debian 12: 2.42.2). */
#define ZB_GVC_SONAME "libgvc.so.6"

/* The Graphviz entry points and objects viz/dag.c uses, typed as the
 * headers declare them. */
typedef struct zb_graphviz_api {
    __typeof__(agopen) *agopen;           /* a new root graph */
    __typeof__(agclose) *agclose;         /* free a graph and all in it */
    __typeof__(agsubg) *agsubg;           /* a subgraph (a device's cluster) */
    __typeof__(agnode) *agnode;           /* a node by name */
    __typeof__(agedge) *agedge;           /* an edge between two nodes */
    __typeof__(agattr) *agattr;           /* a default attribute */
    __typeof__(agsafeset) *agsafeset;     /* an object's attribute */
    __typeof__(agseterr) *agseterr;       /* the level of messages reported */
    __typeof__(agseterrf) *agseterrf;     /* where messages go */
    __typeof__(gvContext) *gvContext;     /* the context with its plugins */
    __typeof__(gvLayout) *gvLayout;       /* lay a graph out with an engine */
    __typeof__(gvRenderData) *gvRenderData; /* render a laid-out graph to memory */
    __typeof__(gvFreeRenderData) *gvFreeRenderData; /* free what gvRenderData gave */
    __typeof__(gvFreeLayout) *gvFreeLayout; /* free a layout */
    Agmemdisc_t *AgMemDisc;               /* cgraph's default memory discipline */
    Agiodisc_t *AgIoDisc;                 /* cgraph's default I/O discipline */
    Agdesc_t *Agdirected;                 /* the descriptor of a directed graph */
} zb_graphviz_api;

/* Loads Graphviz (once per process; later calls return the same table)
 * and stores its table in *out.  Returns 0, or -1 with err set to one
 * line naming the library and dlerror's reason (not installed, or a
 * symbol missing).  A failed load is not cached. */
int graphviz_load(const zb_graphviz_api **out, zb_err *err);

#endif
