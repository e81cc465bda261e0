/*
 * glpk_load.c: dlopen of GLPK and its table of entry points (see
 * glpk_load.h).  The table is filled under a mutex and published with a
 * release store, so that later callers read it without the lock.
 */
#include "solver/glpk_load.h"
#include "src/dynload.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static zb_glpk_api table;                 /* filled once, under load_mu */
static const zb_glpk_api *loaded;         /* &table once a load succeeded */
static pthread_mutex_t load_mu = PTHREAD_MUTEX_INITIALIZER;

/* Opens the library and fills `table`.  Called under load_mu. */
static int open_glpk(zb_err *err)
{
    const char *file;
    void *h = zb_dl_open_library("ZBSCHED_GLPK", ZB_GLPK_SONAME, 1, "GLPK", "the ILP", "libglpk40", &file, err);
    if (!h)
        return -1;
    zb_glpk_api t;
#define ZB_GLPK_RESOLVE(field)                                                          \
    if (zb_dl_resolve(h, "glp_" #field, &t.field, sizeof t.field) != 0) {                     \
        dlclose(h);                                                                     \
        return zb_fail(err, "%s has no glp_" #field ": not GLPK 4.65 or later", file);  \
    }
    ZB_GLPK_RESOLVE(create_prob)
    ZB_GLPK_RESOLVE(set_obj_dir)
    ZB_GLPK_RESOLVE(add_cols)
    ZB_GLPK_RESOLVE(add_rows)
    ZB_GLPK_RESOLVE(set_col_bnds)
    ZB_GLPK_RESOLVE(set_row_bnds)
    ZB_GLPK_RESOLVE(set_obj_coef)
    ZB_GLPK_RESOLVE(set_col_kind)
    ZB_GLPK_RESOLVE(set_mat_row)
    ZB_GLPK_RESOLVE(get_num_nz)
    ZB_GLPK_RESOLVE(get_status)
    ZB_GLPK_RESOLVE(get_obj_val)
    ZB_GLPK_RESOLVE(get_col_prim)
    ZB_GLPK_RESOLVE(init_smcp)
    ZB_GLPK_RESOLVE(simplex)
    ZB_GLPK_RESOLVE(init_iocp)
    ZB_GLPK_RESOLVE(intopt)
    ZB_GLPK_RESOLVE(mip_status)
    ZB_GLPK_RESOLVE(mip_obj_val)
    ZB_GLPK_RESOLVE(mip_col_val)
    ZB_GLPK_RESOLVE(ios_reason)
    ZB_GLPK_RESOLVE(ios_get_prob)
    ZB_GLPK_RESOLVE(ios_heur_sol)
    ZB_GLPK_RESOLVE(ios_can_branch)
    ZB_GLPK_RESOLVE(ios_branch_upon)
    ZB_GLPK_RESOLVE(ios_best_node)
    ZB_GLPK_RESOLVE(ios_node_bound)
    ZB_GLPK_RESOLVE(term_hook)
    ZB_GLPK_RESOLVE(error_hook)
    ZB_GLPK_RESOLVE(free_env)
#undef ZB_GLPK_RESOLVE
    table = t;
    return 0;
}

int glpk_load(const zb_glpk_api **out, zb_err *err)
{
    const zb_glpk_api *api = __atomic_load_n(&loaded, __ATOMIC_ACQUIRE);
    if (!api) {
        pthread_mutex_lock(&load_mu);
        api = loaded;
        if (!api && open_glpk(err) == 0) {
            api = &table;
            __atomic_store_n(&loaded, api, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&load_mu);
        if (!api)
            return -1;
    }
    *out = api;
    return 0;
}
