/*
 * search_runs_on.h: which of zbsched's execution paths (cpu, cuda, mpi;
 * src/runs_on.h) can run a searched plan, and the best plan each path
 * can run when the winner is beyond it.
 *
 * The rule itself is src/runs_on.c's table; this only reads a search
 * candidate's features (vocabulary variant, recompute levels, the model's
 * memory layers) into its "uses" mask, so the search and a plan file that
 * `run` loads are judged by the same table.
 */
#ifndef ZB_SEARCH_RUNS_ON_H
#define ZB_SEARCH_RUNS_ON_H

#include <cjson/cJSON.h>

#include "solver/search.h"
#include "src/runs_on.h"

/* The uses mask (src/runs_on.h) of candidate c searched under o. */
unsigned search_runs_on_uses(const search_options *o, const search_candidate *c);

/* Index in r->c of the fastest fitting candidate that path p runs, or -1
 * when none does. */
int search_best_runs_on(const search_options *o, const search_result *r, zb_path p);

/* Adds "runs_on": [the paths that run c] to the plan object.  0, or -1
 * when memory runs out. */
int search_runs_on_annotate(const search_options *o, const search_candidate *c, cJSON *plan);

#endif
