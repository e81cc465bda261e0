/*
 * search_runs_on.c: a search candidate against src/runs_on.c's table
 * (search_runs_on.h).
 *
 * A candidate records its recompute setting compactly (search.h): either
 * the first rc_devices pipeline devices recompute in full, or the first
 * rc_stages virtual stages recompute, the last rc_mlp_stages of them at
 * the MLP level (search_rc_level).  Which levels occur follows from those
 * counts without the schedule, so every candidate of the result, with or
 * without its schedule kept, can be judged.
 */
#include "solver/search_runs_on.h"

unsigned search_runs_on_uses(const search_options *o, const search_candidate *c)
{
    int rc[2] = { COST_RC_NONE, COST_RC_NONE }; /* the levels that occur */
    if (c->rc_stages > 0) {
        int n = c->n_stages > 0 && c->n_stages < c->rc_stages ? c->n_stages : c->rc_stages;
        int mlp = c->rc_mlp_stages < c->rc_stages ? c->rc_mlp_stages : c->rc_stages;
        /* stages [0, rc_stages - mlp) full, [rc_stages - mlp, rc_stages) mlp */
        if (c->rc_stages - mlp > 0)
            rc[0] = COST_RC_FULL;
        if (mlp > 0 && c->rc_stages - mlp < n)
            rc[1] = COST_RC_MLP;
    } else if (c->rc_devices > 0) {
        rc[0] = COST_RC_FULL;
    }
    return runs_on_uses(c->vocab, rc, 2, &o->model);
}

int search_best_runs_on(const search_options *o, const search_result *r, zb_path p)
{
    for (int i = 0; i < r->n_fit; i++) /* fits come first, fastest first */
        if (runs_on_can(search_runs_on_uses(o, &r->c[i]), p, NULL, 0))
            return i;
    return -1;
}

int search_runs_on_annotate(const search_options *o, const search_candidate *c, cJSON *plan)
{
    unsigned mask = runs_on_mask(search_runs_on_uses(o, c));
    cJSON *a = cJSON_CreateArray();
    if (!a)
        return -1;
    for (int p = 0; p < ZB_PATH_COUNT; p++) {
        cJSON *name = mask >> p & 1 ? cJSON_CreateString(runs_on_path_name((zb_path)p)) : NULL;
        if ((mask >> p & 1) && !name) {
            cJSON_Delete(a);
            return -1;
        }
        if (name)
            cJSON_AddItemToArray(a, name);
    }
    cJSON_DeleteItemFromObjectCaseSensitive(plan, "runs_on");
    cJSON_AddItemToObject(plan, "runs_on", a);
    return 0;
}
