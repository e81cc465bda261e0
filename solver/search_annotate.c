/*
 * search_annotate.c: what the search writes into the best schedule file
 * (search.h, search_annotate; docs/search.md "Output"): the "model",
 * "hardware", "predicted" and "plan" objects of sched_t.meta, which
 * `zbsched run`, `export`, `simulate` and `render` read.  The plan names
 * the target it was searched for and every target that can run it
 * (docs/schedule-format.md).
 */
#include "solver/search.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "solver/search_runs_on.h"
#include "solver/solver_internal.h"
#include "src/sim.h"

/* --- the schedule file's annotations --------------------------------------- */

static cJSON *number_array(const double *v, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < n; i++) {
        cJSON *x = cJSON_CreateNumber(v[i]);
        if (!x) {
            cJSON_Delete(a);
            return NULL;
        }
        cJSON_AddItemToArray(a, x);
    }
    return a;
}

static int meta_set(cJSON *meta, const char *key, cJSON *value)
{
    if (!value)
        return -1;
    cJSON_DeleteItemFromObjectCaseSensitive(meta, key);
    cJSON_AddItemToObject(meta, key, value);
    return 0;
}

/* The plan's account of memory layers: where they went, each stage's
 * static bytes and how the split chose (cost_split_layers_memory). */
static int annotate_memory(const zb_model *m, const search_options *o, const cost_options *copt,
                           const search_candidate *c, const int *split, int S, cJSON *plan)
{
    cost_stage *st = malloc(sizeof *st * (size_t)S);
    double *v = malloc(sizeof *v * (size_t)(S > ZB_MEMORY_MAX_LAYERS ? S : ZB_MEMORY_MAX_LAYERS));
    int bad = !st || !v;
    if (!bad && cost_stages(m, &o->gpu, copt, S, 0, st, NULL) < 0)
        bad = 1;
    if (!bad) {
        for (int i = 0; i < m->memory.n_layers; i++) {
            int l = m->memory.layers[i], first = 0, s = 0;
            while (s < S - 1 && l >= first + split[s])
                first += split[s++];
            v[i] = s;
        }
        cJSON *a = cJSON_CreateArray();
        for (int i = 0; a && i < m->memory.n_layers; i++)
            cJSON_AddItemToArray(a, cJSON_CreateNumber(m->memory.layers[i]));
        bad |= !a;
        if (a)
            cJSON_AddItemToObject(plan, "memory_layers", a);
        a = number_array(v, m->memory.n_layers);
        bad |= !a;
        if (a)
            cJSON_AddItemToObject(plan, "memory_layer_stages", a);
        for (int i = 0; i < S; i++)
            v[i] = st[i].static_bytes;
        a = number_array(v, S);
        bad |= !a;
        if (a)
            cJSON_AddItemToObject(plan, "stage_static_bytes", a);
        for (int i = 0; i < S; i++)
            v[i] = (st[i].t_f + st[i].t_b + st[i].t_w) * 1e3;
        a = number_array(v, S);
        bad |= !a;
        if (a)
            cJSON_AddItemToObject(plan, "stage_fbw_ms", a);
        char why[512];
        const char *shared = m->memory.shared_values
                                 ? "; the shared value table's layers on one stage" : "";
        if (c->split_tuned)
            snprintf(why, sizeof why,
                     "memory layers placed by time and memory: the split search started from "
                     "the rules' splits (balanced: the smallest largest stage F+B+W time, then, "
                     "within %.0f%% of it, the smallest largest static state) and moved single "
                     "layers between neighbouring stages while the peak's excess over the "
                     "memory limit shrank or, within it, the predicted time improved%s",
                     100 * COST_MEMORY_TIME_SLACK, shared);
        else if (c->split == COST_SPLIT_BALANCED)
            snprintf(why, sizeof why,
                     "memory layers placed by time and memory: the smallest largest stage F+B+W "
                     "time, then, within %.0f%% of it, the smallest largest static state%s",
                     100 * COST_MEMORY_TIME_SLACK, shared);
        else
            snprintf(why, sizeof why, "memory layers placed by the paper's layer-count rule, "
                     "which weighs neither their time nor their memory");
        bad |= !cJSON_AddStringToObject(plan, "layer_placement", why);
    }
    free(st);
    free(v);
    return bad ? -1 : 0;
}

int search_annotate(const search_options *o, search_candidate *c, zb_err *err)
{
    sched_t *s = c->sched;
    assert(s);
    zb_model m = o->model;
    m.micro_batch = c->micro_batch;
    int S = s->n_stages, p = s->n_devices;
    if (!c->layers || c->n_stages != S)
        return zb_fail(err, "candidate '%s' has no layer split to write", c->label);
    double *v = malloc(sizeof *v * (size_t)(S > p ? S : p));
    double *dev_peak = malloc(sizeof *dev_peak * (size_t)p);
    if (!v || !dev_peak) {
        free(v);
        free(dev_peak);
        return zb_fail(err, "out of memory");
    }
    sim_result sr;
    memset(&sr, 0, sizeof sr);
    if (sim_run(s, &sr, err) < 0) {
        sim_result_free(&sr);
        free(v);
        free(dev_peak);
        return -1;
    }
    for (int d = 0; d < p; d++)
        dev_peak[d] = s->mem_static[d] + sr.dev[d].peak_mem;
    sim_result_free(&sr);

    if (!s->meta)
        s->meta = cJSON_CreateObject();
    int bad = !s->meta;
    cJSON *pred = cJSON_CreateObject(), *plan = cJSON_CreateObject();
    bad |= !pred || !plan;
    if (!bad) {
        bad |= !cJSON_AddStringToObject(pred, "cost_source", o->profile ? "profile" : "flops");
        bad |= !cJSON_AddNumberToObject(pred, "time_ms", c->time_ms);
        /* time_ms under the target's step rule (search_target_sync), and both rules */
        bad |= !cJSON_AddStringToObject(pred, "step", search_target_sync(o->target) ? "sync" : "async");
        bad |= !cJSON_AddNumberToObject(pred, "async_ms", c->async_ms);
        bad |= !cJSON_AddNumberToObject(pred, "sync_ms", c->sync_ms);
        bad |= !cJSON_AddNumberToObject(pred, "iteration_ms", c->iter_ms);
        bad |= !cJSON_AddNumberToObject(pred, "cost_ms", c->cost_ms);
        bad |= !cJSON_AddNumberToObject(pred, "dp_sync_ms", c->dp_ms);
        bad |= !cJSON_AddNumberToObject(pred, "bubble_rate", c->bubble_rate);
        bad |= !cJSON_AddNumberToObject(pred, "tokens_per_s_per_gpu", c->tokens_per_s);
        bad |= !cJSON_AddNumberToObject(pred, "mfu", c->mfu);
        bad |= !cJSON_AddNumberToObject(pred, "peak_bytes", c->peak_bytes);
        bad |= !cJSON_AddNumberToObject(pred, "peak_device", c->peak_device);
        cJSON *a = number_array(dev_peak, p);
        bad |= !a;
        if (a)
            cJSON_AddItemToObject(pred, "device_peak_bytes", a);
        a = number_array(s->mem_static, p);
        bad |= !a;
        if (a)
            cJSON_AddItemToObject(pred, "device_static_bytes", a);

        bad |= !cJSON_AddStringToObject(plan, "schedule", c->label);
        /* the engine it was searched for and every engine that can run it */
        bad |= !cJSON_AddStringToObject(plan, "target", search_target_name(o->target));
        cJSON *tg = cJSON_CreateArray();
        bad |= !tg;
        unsigned mask = search_target_mask(c);
        for (int t = 0; tg && t < SEARCH_N_TARGETS; t++) {
            cJSON *name = mask >> t & 1 ? cJSON_CreateString(search_target_name((search_target)t)) : NULL;
            bad |= (mask >> t & 1) && !name;
            if (name)
                cJSON_AddItemToArray(tg, name);
        }
        if (tg)
            cJSON_AddItemToObject(plan, "targets", tg);
        /* and which of zbsched's own paths (cpu, cuda, mpi) can run it */
        bad |= search_runs_on_annotate(o, c, plan) < 0;
        bad |= !cJSON_AddStringToObject(plan, "family", c->family);
        bad |= !cJSON_AddStringToObject(plan, "vocab", c->vocab ? "parallel" : "plain");
        if (c->vocab)
            bad |= !cJSON_AddNumberToObject(plan, "vocab_variant", c->vocab);
        bad |= !cJSON_AddNumberToObject(plan, "chunks", c->chunks);
        bad |= !cJSON_AddNumberToObject(plan, "micro_batch", c->micro_batch);
        bad |= !cJSON_AddNumberToObject(plan, "n_micro", c->n_micro);
        bad |= !cJSON_AddNumberToObject(plan, "global_batch", o->global_batch);
        bad |= !cJSON_AddNumberToObject(plan, "pipeline_parallel", c->pp);
        bad |= !cJSON_AddNumberToObject(plan, "data_parallel", c->dp);
        bad |= !cJSON_AddBoolToObject(plan, "recompute", c->recompute);
        /* recompute_stages: whether each stage recomputes at all (what
         * files before the MLP level carry); recompute_levels, only when
         * some stage recomputes at the MLP level, says how */
        cJSON *rs = cJSON_CreateArray();
        cJSON *rl = c->rc_stages > 0 && c->rc_mlp_stages > 0 ? cJSON_CreateArray() : NULL;
        bad |= !rs || (c->rc_stages > 0 && c->rc_mlp_stages > 0 && !rl);
        for (int i = 0; rs && i < S; i++) {
            int level = search_rc_level(s, i, c->rc_devices, c->rc_stages, c->rc_mlp_stages);
            cJSON *b = cJSON_CreateBool(level != COST_RC_NONE);
            bad |= !b;
            if (b)
                cJSON_AddItemToArray(rs, b);
            cJSON *l = rl ? cJSON_CreateString(level == COST_RC_FULL ? "full"
                                               : level == COST_RC_MLP ? "mlp" : "none") : NULL;
            bad |= rl && !l;
            if (l)
                cJSON_AddItemToArray(rl, l);
        }
        if (rs)
            cJSON_AddItemToObject(plan, "recompute_stages", rs);
        if (rl)
            cJSON_AddItemToObject(plan, "recompute_levels", rl);
        bad |= !cJSON_AddBoolToObject(plan, "flash_attention", o->flash_attention);
        bad |= !cJSON_AddStringToObject(plan, "loss", o->loss == COST_LOSS_FUSED ? "fused" : "plain");
        bad |= !cJSON_AddStringToObject(plan, "split", c->split_tuned ? "searched"
                                                       : c->split != COST_SPLIT_BALANCED ? "paper"
                                                       : m.memory.n_layers > 0 ? "balanced-time-then-memory"
                                                       : "balanced");
        bad |= !cJSON_AddNumberToObject(plan, "zero1_dp", o->zero1_dp * c->dp);
        cJSON *lay = layout_to_json(&c->layout);
        bad |= !lay;
        if (lay)
            cJSON_AddItemToObject(plan, "layout", lay);
        bad |= !cJSON_AddNumberToObject(plan, "mem_limit_bytes", o->mem_bytes);
        for (int i = 0; i < S; i++)
            v[i] = c->layers[i];
        a = number_array(v, S);
        bad |= !a;
        if (a)
            cJSON_AddItemToObject(plan, "layers_per_stage", a);
        if (m.memory.n_layers > 0) {
            cost_options co;
            search_cost_options(o, c->split, c->dp, 0, &co);
            co.layout = c->layout;
            co.recompute = c->recompute;
            co.layers = c->layers;
            bad |= annotate_memory(&m, o, &co, c, c->layers, S, plan) < 0;
        }
    }
    if (!bad) {
        bad |= meta_set(s->meta, "model", model_to_json(&m)) < 0;
        bad |= meta_set(s->meta, "hardware", gpu_to_json(&o->gpu)) < 0;
        bad |= meta_set(s->meta, "predicted", pred) < 0;
        pred = NULL;
        bad |= meta_set(s->meta, "plan", plan) < 0;
        plan = NULL;
    }
    cJSON_Delete(pred);
    cJSON_Delete(plan);
    free(v);
    free(dev_peak);
    if (bad)
        return zb_fail(err, "out of memory annotating the schedule");
    return 0;
}
