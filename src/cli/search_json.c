/*
 * search_json.c: `zbsched search --json` (search_print.h): every
 * candidate with its figures and the targets that can run it, the
 * baseline, the why figures and rows, each pipeline depth's best and each
 * target's best, exact numbers throughout (docs/search.md lists the keys).
 */
#include "src/cli/search_print.h"

#include <stdio.h>
#include <stdlib.h>

#include "src/cli/cli.h"

static const char *status_name(search_status s)
{
    return s == SEARCH_FIT ? "fit" : s == SEARCH_OOM ? "oom" : s == SEARCH_SKIPPED ? "skipped" : "unsupported";
}

/* The names of the targets in mask, as an array (NULL when memory runs out). */
static cJSON *targets_json(unsigned mask)
{
    cJSON *a = cJSON_CreateArray();
    for (int t = 0; a && t < SEARCH_N_TARGETS; t++)
        if (mask >> t & 1)
            cJSON_AddItemToArray(a, cJSON_CreateString(search_target_name((search_target)t)));
    return a;
}

/* One candidate as a JSON object (NULL when memory runs out). */
static cJSON *candidate_json(const search_candidate *c)
{
    cJSON *j = cJSON_CreateObject();
    if (!j)
        return NULL;
    cJSON_AddStringToObject(j, "schedule", c->label);
    cJSON_AddStringToObject(j, "family", c->family);
    cJSON_AddNumberToObject(j, "vocab", c->vocab); /* 0 plain, 1 or 2: Vocab-1/2 */
    cJSON_AddStringToObject(j, "status", status_name(c->status));
    cJSON_AddItemToObject(j, "targets", targets_json(c->targets));
    cJSON_AddNumberToObject(j, "chunks", c->chunks);
    cJSON_AddNumberToObject(j, "pipeline_parallel", c->pp);
    cJSON_AddNumberToObject(j, "data_parallel", c->dp);
    if (c->layout.tp > 0) /* the whole layout: tp (+sp), cp, pp, chunks, dp, ZeRO, offload */
        cJSON_AddItemToObject(j, "layout", layout_to_json(&c->layout));
    cJSON_AddNumberToObject(j, "micro_batch", c->micro_batch);
    cJSON_AddNumberToObject(j, "n_micro", c->n_micro);
    cJSON_AddBoolToObject(j, "recompute", c->recompute);
    cJSON_AddNumberToObject(j, "recompute_devices", c->rc_devices);
    if (c->rc_mlp_stages == SEARCH_RC_ALL) {
        cJSON_AddStringToObject(j, "recompute_level", "mlp"); /* every stage at the MLP level */
    } else {
        if (c->rc_stages > 0)
            cJSON_AddNumberToObject(j, "recompute_first_stages", c->rc_stages);
        if (c->rc_stages > 0 && c->rc_mlp_stages > 0)
            cJSON_AddNumberToObject(j, "recompute_mlp_stages", c->rc_mlp_stages);
    }
    cJSON_AddStringToObject(j, "split", c->split_tuned ? "searched" : c->split == COST_SPLIT_BALANCED ? "balanced" : "paper");
    if (c->layers) {
        cJSON *a = cJSON_AddArrayToObject(j, "layers_per_stage");
        for (int i = 0; a && i < c->n_stages; i++)
            cJSON_AddItemToArray(a, cJSON_CreateNumber(c->layers[i]));
    }
    if (c->peak_floor) { /* over the limit by a bound: never simulated, no times */
        cJSON_AddNumberToObject(j, "peak_bytes", c->peak_bytes);
        cJSON_AddNumberToObject(j, "peak_device", c->peak_device);
        cJSON_AddBoolToObject(j, "peak_is_lower_bound", 1);
    } else if (c->status != SEARCH_SKIPPED) {
        cJSON_AddNumberToObject(j, "peak_bytes", c->peak_bytes);
        cJSON_AddNumberToObject(j, "peak_device", c->peak_device);
        cJSON_AddNumberToObject(j, "static_bytes", c->static_bytes);
        cJSON_AddNumberToObject(j, "time_ms", c->time_ms);
        cJSON_AddNumberToObject(j, "async_ms", c->async_ms);
        cJSON_AddNumberToObject(j, "sync_ms", c->sync_ms);
        cJSON_AddNumberToObject(j, "iteration_ms", c->iter_ms);
        cJSON_AddNumberToObject(j, "cost_ms", c->cost_ms);
        cJSON_AddNumberToObject(j, "dp_sync_ms", c->dp_ms);
        cJSON_AddNumberToObject(j, "bubble_rate", c->bubble_rate);
        cJSON_AddNumberToObject(j, "tokens_per_s_per_gpu", c->tokens_per_s);
        cJSON_AddNumberToObject(j, "mfu", c->mfu);
        cJSON_AddNumberToObject(j, "speedup", c->speedup);
    }
    if (c->note[0])
        cJSON_AddStringToObject(j, "note", c->note);
    return j;
}

/* The why figures of the winner and its rows. */
static void why_json(const search_options *o, const search_result *r, cJSON *w)
{
    search_why y;
    search_explain(&r->c[0], &y);
    cJSON_AddNumberToObject(w, "work_bound_ms", y.work_bound_ms);
    cJSON_AddNumberToObject(w, "imbalance_bound_ms", y.imbalance_bound_ms);
    cJSON_AddNumberToObject(w, "winner_ms", y.time_ms);
    cJSON_AddNumberToObject(w, "bubble_share", y.bubble_share);
    cJSON_AddNumberToObject(w, "imbalance_share", y.imbalance_share);
    cJSON_AddNumberToObject(w, "idle_share", y.idle_share);
    cJSON_AddNumberToObject(w, "dp_sync_ms", r->c[0].dp_ms);
    cJSON_AddNumberToObject(w, "speedup", r->c[0].speedup);
    cJSON_AddNumberToObject(w, "work_bound_no_recompute_ms", r->bound_plain_ms);
    if (r->bound_vocab_ms > 0)
        cJSON_AddNumberToObject(w, "work_bound_vocab_parallel_ms", r->bound_vocab_ms);
    cJSON_AddStringToObject(w, "vocab", r->c[0].vocab ? "parallel" : "plain");
    cJSON_AddNumberToObject(w, "vocab_pruned", r->vocab_pruned);
    search_why_block *block = malloc(sizeof *block);
    cJSON *rows = block ? cJSON_AddArrayToObject(w, "rows") : NULL;
    if (rows) {
        search_why_build(o, r, block);
        for (int i = 0; i < block->n; i++) {
            const search_why_row *row = &block->row[i];
            cJSON *e = cJSON_CreateObject();
            if (!e)
                break;
            cJSON_AddItemToArray(rows, e);
            cJSON_AddStringToObject(e, "label", row->label);
            cJSON_AddNumberToObject(e, "level", row->level);
            if (row->kind == SEARCH_WHY_HEADING)
                cJSON_AddBoolToObject(e, "heading", 1);
            if (row->ms >= 0)
                cJSON_AddNumberToObject(e, "ms", row->ms);
            if (row->text[0])
                cJSON_AddStringToObject(e, "text", row->text);
        }
    }
    free(block);
}

/* The layouts other targets run and the searched one cannot: each with
 * its family, the work bound and static memory at its deepest pipeline
 * (not simulated), and the targets that run it. */
static void other_layouts_json(const search_result *r, cJSON *list)
{
    for (int k = 0; list && k < r->n_other_layouts; k++) {
        cJSON *e = cJSON_CreateObject();
        if (!e)
            break;
        cJSON_AddItemToArray(list, e);
        cJSON_AddItemToObject(e, "layout", layout_to_json(&r->other_layout[k]));
        cJSON_AddStringToObject(e, "family", search_layout_family(&r->other_layout[k]));
        cJSON_AddNumberToObject(e, "work_bound_ms", r->other_bound_ms[k]);
        cJSON_AddNumberToObject(e, "static_bytes", r->other_static_bytes[k]);
        cJSON *ts = cJSON_AddArrayToObject(e, "targets");
        for (int t = 0; ts && t < SEARCH_N_TARGETS; t++)
            if (r->other_targets[k] & (1u << t))
                cJSON_AddItemToArray(ts, cJSON_CreateString(search_target_name((search_target)t)));
    }
}

/* Each target's best plan (its time under its own step rule and, when
 * the searched target has a winner, as a ratio of the winner's). */
static void targets_best_json(const search_result *r, cJSON *targets)
{
    for (int t = 0; targets && t < SEARCH_N_TARGETS; t++) {
        const search_candidate *b = &r->best[t];
        cJSON *e = cJSON_CreateObject();
        if (!e)
            break;
        cJSON_AddItemToArray(targets, e);
        cJSON_AddStringToObject(e, "target", search_target_name((search_target)t));
        cJSON_AddBoolToObject(e, "fits", b->status == SEARCH_FIT);
        if (b->status == SEARCH_SKIPPED)
            continue;
        char rcb[32];
        cJSON_AddStringToObject(e, "schedule", b->label);
        cJSON_AddNumberToObject(e, "pipeline_parallel", b->pp);
        cJSON_AddNumberToObject(e, "data_parallel", b->dp);
        cJSON_AddNumberToObject(e, "micro_batch", b->micro_batch);
        cJSON_AddStringToObject(e, "recompute", search_rc_text(b, rcb, sizeof rcb));
        cJSON_AddNumberToObject(e, "peak_bytes", b->peak_bytes);
        if (b->status == SEARCH_FIT) {
            cJSON_AddNumberToObject(e, "time_ms", b->time_ms);
            if (r->n_fit > 0)
                cJSON_AddNumberToObject(e, "ratio_to_winner", b->time_ms / r->c[0].time_ms);
        }
    }
}

/* Per pipeline depth: its best fit (time) or its smallest peak, or, for
 * a depth not built, the static floor that alone exceeds the limit. */
static void depths_json(const search_result *r, cJSON *depths)
{
    for (int i = 0; depths && i < r->n; i++) {
        const search_candidate *c = &r->c[i];
        if (!c->static_floor) {
            if (c->status != SEARCH_FIT && c->status != SEARCH_OOM)
                continue;
            int first = 1;
            for (int k = 0; k < i && first; k++)
                first = (r->c[k].status != SEARCH_FIT && r->c[k].status != SEARCH_OOM) || r->c[k].pp != c->pp;
            if (!first)
                continue;
        }
        cJSON *d = cJSON_CreateObject();
        if (!d)
            break;
        cJSON_AddItemToArray(depths, d);
        cJSON_AddNumberToObject(d, "pipeline_parallel", c->pp);
        cJSON_AddNumberToObject(d, "data_parallel", c->dp);
        cJSON_AddBoolToObject(d, "fits", c->status == SEARCH_FIT);
        if (c->static_floor) {
            cJSON_AddNumberToObject(d, "static_floor_bytes", c->static_bytes);
            continue;
        }
        cJSON_AddStringToObject(d, "schedule", c->label);
        cJSON_AddNumberToObject(d, c->status == SEARCH_FIT ? "time_ms" : "min_peak_bytes",
                                c->status == SEARCH_FIT ? c->time_ms : c->peak_bytes);
        if (c->status == SEARCH_FIT)
            cJSON_AddNumberToObject(d, "tokens_per_s_per_gpu", c->tokens_per_s);
    }
}

int search_print_json(const search_options *o, const search_result *r)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *list = cJSON_CreateArray();
    if (!root || !list) {
        cJSON_Delete(root);
        cJSON_Delete(list);
        return cli_error("out of memory");
    }
    cJSON_AddItemToObject(root, "candidates", list);
    cJSON_AddStringToObject(root, "target", search_target_name(o->target));
    cJSON_AddItemToObject(root, "model", model_to_json(&o->model));
    cJSON_AddItemToObject(root, "hardware", gpu_to_json(&o->gpu));
    cJSON_AddNumberToObject(root, "mem_limit_bytes", o->mem_bytes);
    cJSON_AddNumberToObject(root, "n_gpus", o->n_gpus);
    if (o->n_devices > 0)
        cJSON_AddNumberToObject(root, "n_devices", o->n_devices);
    cJSON_AddNumberToObject(root, "global_batch", o->global_batch);
    cJSON_AddNumberToObject(root, "n_fit", r->n_fit);
    if (r->min_peak_index >= 0)
        cJSON_AddNumberToObject(root, "min_peak_bytes", r->min_peak_bytes);
    cJSON_AddNumberToObject(root, "n_pruned", r->n_pruned);
    cJSON_AddNumberToObject(root, "n_reused", r->n_reused);
    cJSON *base = candidate_json(&r->baseline);
    if (base)
        cJSON_AddItemToObject(root, "baseline", base);
    if (r->n_fit > 0) {
        cJSON *w = cJSON_AddObjectToObject(root, "why");
        if (w)
            why_json(o, r, w);
    }
    depths_json(r, cJSON_AddArrayToObject(root, "depths"));
    targets_best_json(r, cJSON_AddArrayToObject(root, "targets"));
    other_layouts_json(r, cJSON_AddArrayToObject(root, "other_target_layouts"));
    for (int i = 0; i < r->n; i++) {
        cJSON *j = candidate_json(&r->c[i]);
        if (!j)
            break;
        cJSON_AddItemToArray(list, j);
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text)
        return cli_error("out of memory");
    puts(text);
    free(text);
    return 0;
}
