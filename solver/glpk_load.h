/*
 * glpk_load.h: GLPK, loaded with dlopen the first time an ILP needs it.
 *
 * zbsched links no GLPK.  Mapping and relocating libglpk and its five
 * dependencies (libgmp, libamd, libcolamd, libsuitesparseconfig, libz)
 * cost every command about half a millisecond of start-up although only
 * `gen ... ilp` and the search's ILP paths ever solve a model (bench/
 * README.md, "Start-up against the authors' heuristic").  So solver/ilp.c
 * calls GLPK through the table of function pointers below, filled once
 * with dlsym from ZB_GLPK_SONAME, the way kernels/cpu/kernels.c loads
 * BLAS.  The types (glp_prob, glp_iocp, ...) still come from glpk.h at
 * build time: the soname's major version (40) fixes their layout.
 *
 * $ZBSCHED_GLPK, when set, names the file to load instead of the soname
 * (tests point it at a missing file to check the error line).
 *
 * Threading: glpk_load may be called from any thread; the first call
 * loads under a mutex, later calls read the table without one.  The
 * library stays loaded until the process exits.
 */
#ifndef ZB_SOLVER_GLPK_LOAD_H
#define ZB_SOLVER_GLPK_LOAD_H

#include <glpk.h>

#include "src/err.h"

/* The soname loaded: the GLPK 4.65 / 5.0 ABI whose glpk.h we compile with. */
#define ZB_GLPK_SONAME "libglpk.so.40"

/* The GLPK entry points ilp.c calls, each typed as glpk.h declares it. */
typedef struct zb_glpk_api {
    __typeof__(glp_create_prob) *create_prob;       /* a new, empty problem */
    __typeof__(glp_set_obj_dir) *set_obj_dir;       /* minimise or maximise */
    __typeof__(glp_add_cols) *add_cols;             /* append columns */
    __typeof__(glp_add_rows) *add_rows;             /* append rows */
    __typeof__(glp_set_col_bnds) *set_col_bnds;     /* a column's bounds */
    __typeof__(glp_set_row_bnds) *set_row_bnds;     /* a row's bounds */
    __typeof__(glp_set_obj_coef) *set_obj_coef;     /* an objective coefficient */
    __typeof__(glp_set_col_kind) *set_col_kind;     /* continuous, integer, binary */
    __typeof__(glp_set_mat_row) *set_mat_row;       /* a row's coefficients */
    __typeof__(glp_get_num_nz) *get_num_nz;         /* non-zeros of the matrix */
    __typeof__(glp_get_status) *get_status;         /* the LP's status */
    __typeof__(glp_get_obj_val) *get_obj_val;       /* the LP's objective */
    __typeof__(glp_get_col_prim) *get_col_prim;     /* a column's LP value */
    __typeof__(glp_init_smcp) *init_smcp;           /* simplex defaults */
    __typeof__(glp_simplex) *simplex;               /* the LP relaxation */
    __typeof__(glp_init_iocp) *init_iocp;           /* branch-and-cut defaults */
    __typeof__(glp_intopt) *intopt;                 /* branch and cut */
    __typeof__(glp_mip_status) *mip_status;         /* the MIP's status */
    __typeof__(glp_mip_obj_val) *mip_obj_val;       /* the MIP's objective */
    __typeof__(glp_mip_col_val) *mip_col_val;       /* a column's MIP value */
    __typeof__(glp_ios_reason) *ios_reason;         /* why the callback was called */
    __typeof__(glp_ios_get_prob) *ios_get_prob;     /* the tree's problem */
    __typeof__(glp_ios_heur_sol) *ios_heur_sol;     /* hand in a heuristic solution */
    __typeof__(glp_ios_can_branch) *ios_can_branch; /* may a column be branched on */
    __typeof__(glp_ios_branch_upon) *ios_branch_upon; /* branch on a column */
    __typeof__(glp_ios_best_node) *ios_best_node;   /* the active node of best bound */
    __typeof__(glp_ios_node_bound) *ios_node_bound; /* a node's bound */
    __typeof__(glp_term_hook) *term_hook;           /* GLPK's terminal output */
    __typeof__(glp_error_hook) *error_hook;         /* GLPK's fatal errors */
    __typeof__(glp_free_env) *free_env;             /* free GLPK's whole environment */
} zb_glpk_api;

/* Loads GLPK (once per process; later calls return the same table) and
 * stores its table in *out.  Returns 0, or -1 with err set to one line
 * naming the library and dlerror's reason (not installed, or a symbol
 * missing).  A failed load is not cached. */
int glpk_load(const zb_glpk_api **out, zb_err *err);

#endif
