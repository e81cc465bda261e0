/*
 * search_print.c: the human output of `zbsched search` (search_print.h).
 *
 * Every table is a cli_table, so that columns are as wide as their
 * widest cell (labels such as "interleaved-zb v=4 +vocab-1" and recompute
 * settings such as "s0-20m15" used to overflow fixed widths).  Times are
 * in ms with one decimal and sizes go through zb_size_format (decimal
 * units written out, "39.9 GB"), the figure `simulate`, `render` and
 * `run` print for the same plan; no figure is printed in scientific
 * notation (the JSON keeps exact numbers).
 */
#include "src/cli/search_print.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "solver/search_runs_on.h"
#include "src/cli/cli.h"
#include "src/cli/cli_table.h"
#include "src/size.h"

static const char *status_name(search_status s)
{
    return s == SEARCH_FIT ? "fit" : s == SEARCH_OOM ? "oom" : s == SEARCH_SKIPPED ? "skipped" : "unsupported";
}

/* The ranked table of the first `rows` fits. */
static void print_ranked(const search_options *o, const search_result *r, int rows)
{
    cli_table t;
    cli_table_init(&t, "rlrrrlrrrrrrrr");
    char tok[32];
    snprintf(tok, sizeof tok, "tok/s/%s", o->gpu.cpu ? "dev" : "GPU");
    const char *head[] = { "rank", "schedule", r->n_layouts > 1 ? "layout" : "pp*dp", "b", "m", "rc", "peak", "dev", "time ms",
                           "makespan", tok, "bubble", "MFU", "speed" };
    for (size_t i = 0; i < sizeof head / sizeof head[0]; i++)
        cli_table_add(&t, "%s", head[i]);
    for (int i = 0; i < r->n_fit && i < rows; i++) {
        const search_candidate *c = &r->c[i];
        char rcb[32], peak[32];
        zb_size_format(c->peak_bytes, peak, sizeof peak);
        cli_table_add(&t, "%d", i + 1);
        cli_table_add(&t, "%s%s", c->label, c->split_tuned ? " *" : c->split == COST_SPLIT_PAPER ? " P" : "");
        char lay[96];
        if (layout_is_extended(&c->layout))
            cli_table_add(&t, "%s", layout_text(&c->layout, lay, sizeof lay));
        else
            cli_table_add(&t, "%dx%d", c->pp, c->dp);
        cli_table_add(&t, "%d", c->micro_batch);
        cli_table_add(&t, "%d", c->n_micro);
        cli_table_add(&t, "%s", search_rc_text(c, rcb, sizeof rcb));
        cli_table_add(&t, "%s", peak);
        cli_table_add(&t, "%d", c->peak_device);
        cli_table_add(&t, "%.1f", c->time_ms);
        cli_table_add(&t, "%.1f", c->iter_ms);
        cli_table_add(&t, "%.0f", c->tokens_per_s);
        cli_table_add(&t, "%.4f", c->bubble_rate);
        cli_table_add(&t, "%.1f%%", 100 * c->mfu);
        cli_table_add(&t, "%.3fx", c->speedup);
    }
    if (cli_table_print(&t, stdout, 0) < 0)
        fputs("(out of memory printing the table)\n", stdout);
    cli_table_free(&t);
}

/* The why block's rows: labels in one column, times right-aligned in the
 * next, the sentence after them. */
static void print_why(const search_why_block *w)
{
    size_t label_w = 0, ms_w = 0;
    char ms[48];
    for (int i = 0; i < w->n; i++) {
        const search_why_row *row = &w->row[i];
        if (row->kind != SEARCH_WHY_ROW)
            continue;
        size_t n = 2 * (size_t)row->level + strlen(row->label);
        if (n > label_w)
            label_w = n;
        if (row->ms >= 0) {
            size_t m = (size_t)snprintf(ms, sizeof ms, "%.1f ms", row->ms);
            if (m > ms_w)
                ms_w = m;
        }
    }
    printf("why: %s\n", w->head);
    for (int i = 0; i < w->n; i++) {
        const search_why_row *row = &w->row[i];
        int indent = 2 + 2 * row->level;
        if (row->kind == SEARCH_WHY_HEADING) {
            printf("%*s%s\n", indent, "", row->label);
            continue;
        }
        if (row->ms >= 0)
            snprintf(ms, sizeof ms, "%.1f ms", row->ms);
        else
            ms[0] = '\0';
        printf("%*s%-*s  %*s  %s\n", indent, "", (int)(label_w - 2 * (size_t)row->level), row->label, (int)ms_w,
               ms, row->text);
    }
}

/* Every candidate that did not make the table's fits, with its reason. */
static void print_dropped(const search_result *r)
{
    cli_table t;
    cli_table_init(&t, "llrrrll");
    cli_table_add(&t, "status");
    cli_table_add(&t, "schedule");
    cli_table_add(&t, "pp");
    cli_table_add(&t, "b");
    cli_table_add(&t, "m");
    cli_table_add(&t, "rc");
    cli_table_add(&t, "why");
    for (int i = r->n_fit; i < r->n; i++) {
        const search_candidate *c = &r->c[i];
        char rcb[32];
        cli_table_add(&t, "%s", status_name(c->status));
        cli_table_add(&t, "%s", c->label);
        cli_table_add(&t, "%d", c->pp);
        cli_table_add(&t, "%d", c->micro_batch);
        cli_table_add(&t, "%d", c->n_micro);
        cli_table_add(&t, "%s", search_rc_text(c, rcb, sizeof rcb));
        cli_table_add(&t, "%s", c->note);
    }
    if (cli_table_print(&t, stdout, 2) < 0)
        fputs("(out of memory printing the list)\n", stdout);
    cli_table_free(&t);
}

void search_print_table(const search_options *o, const search_result *r, const search_print_ctx *x, int rows,
                        int verbose)
{
    char lim[32], reserve[32] = "";
    zb_size_format(o->mem_bytes, lim, sizeof lim);
    const char *per = o->gpu.cpu ? "device" : "GPU";
    printf("model %s, %s, %d %s, global batch %d, memory limit %s per %s", o->model.name, o->gpu.name, o->n_gpus,
           search_device_noun(&o->gpu, o->n_gpus), o->global_batch, lim, per);
    if (x->mem_default && !o->gpu.cpu) {
        zb_size_format(COST_RESERVE_BYTES, reserve, sizeof reserve);
        printf(" (the %s's memory, %s of it the runtime reserve)", o->gpu.name, reserve);
    } else if (x->mem_default) {
        printf(" (the %s's memory)", o->gpu.name);
    }
    printf(", target %s\n", search_target_name(o->target));
    if (r->n_fit > 0 && rows > 0)
        print_ranked(o, r, rows);
    if (r->n_fit > rows && rows >= 0)
        printf("... %d more that fit (--top N shows more)\n", r->n_fit - (rows > 0 ? rows : 0));
    int n_oom = 0, n_skip = 0, n_unsup = 0, n_static = 0;
    for (int i = r->n_fit; i < r->n; i++) {
        search_status s = r->c[i].status;
        n_oom += s == SEARCH_OOM;
        n_static += r->c[i].static_floor;
        n_skip += s == SEARCH_SKIPPED && !r->c[i].static_floor;
        n_unsup += s == SEARCH_UNSUPPORTED;
    }
    printf("%d %s %s, %d %s the limit, %d could not be built", r->n_fit, r->n_fit == 1 ? "candidate" : "candidates",
           r->n_fit == 1 ? "fits" : "fit", n_oom, n_oom == 1 ? "exceeds" : "exceed", n_skip);
    if (o->target != SEARCH_TARGET_ZBSCHED)
        printf(", %d %s cannot run", n_unsup, search_target_name(o->target));
    printf("%s", verbose || !(n_oom + n_skip + n_unsup) ? "" : " (-v lists them)");
    if (n_static > 0)
        printf("; %d %s not built, the static memory alone over the limit", n_static,
               n_static == 1 ? "depth" : "depths");
    /* Not built at all, so not listed even with -v (docs/search.md, "Pruning"). */
    if (r->n_pruned > 0)
        printf("; %d more not built or not simulated, their bounds or peaks behind their label's best", r->n_pruned);
    printf("\n");
    if (r->n_fit > 0 && rows > 0) {
        if (search_target_sync(o->target))
            printf("time = first start to the last device's end (+ its exposed data-parallel sync): %s\n"
                   "steps every device together; ", search_target_name(o->target));
        else
            printf("time = largest per-device span (+ exposed data-parallel sync), what %s realises;\n",
                   o->target == SEARCH_TARGET_ZBSCHED ? "the runtime" : "torch's per-rank optimizer step");
        printf("makespan = first start to last end; P = paper split, * = split found by the local search\n");
        search_why_block w;
        search_why_build(o, r, &w);
        print_why(&w);
    }
    if (verbose && r->n > r->n_fit)
        print_dropped(r);
}

/* One line on where the memory layers went, from the plan search_annotate
 * wrote (nothing for models without memory layers). */
static void print_memory_placement(const cJSON *plan)
{
    const cJSON *layers = plan ? cJSON_GetObjectItem(plan, "memory_layers") : NULL;
    const cJSON *stages = plan ? cJSON_GetObjectItem(plan, "memory_layer_stages") : NULL;
    if (!cJSON_IsArray(layers) || !cJSON_IsArray(stages))
        return;
    printf("memory layers");
    for (int i = 0; i < cJSON_GetArraySize(layers); i++)
        printf("%s %d -> stage %d", i ? "," : "", (int)cJSON_GetArrayItem(layers, i)->valuedouble,
               (int)cJSON_GetArrayItem(stages, i)->valuedouble);
    const cJSON *split = cJSON_GetObjectItem(plan, "split");
    printf(" (%s split%s: docs/memory-layers.md)\n", cJSON_IsString(split) ? split->valuestring : "?",
           cJSON_IsString(split) && strcmp(split->valuestring, "paper") != 0 ? ", placed by time and memory" : "");
}

/* The plan's peak per device (static + activations), as `simulate` and
 * `run` print it: every device up to 16, else the largest and smallest. */
static void print_device_peaks(const cJSON *pred)
{
    const cJSON *peaks = pred ? cJSON_GetObjectItem(pred, "device_peak_bytes") : NULL;
    int n = cJSON_IsArray(peaks) ? cJSON_GetArraySize(peaks) : 0;
    if (n == 0)
        return;
    char size[32];
    printf("peak memory per device (static + activations):");
    if (n <= 16) {
        for (int d = 0; d < n; d++) {
            zb_size_format(cJSON_GetArrayItem(peaks, d)->valuedouble, size, sizeof size);
            printf("%s %s", d ? "," : "", size);
        }
    } else {
        int hi = 0, lo = 0;
        for (int d = 1; d < n; d++) {
            double v = cJSON_GetArrayItem(peaks, d)->valuedouble;
            hi = v > cJSON_GetArrayItem(peaks, hi)->valuedouble ? d : hi;
            lo = v < cJSON_GetArrayItem(peaks, lo)->valuedouble ? d : lo;
        }
        zb_size_format(cJSON_GetArrayItem(peaks, hi)->valuedouble, size, sizeof size);
        printf(" largest %s (device %d)", size, hi);
        zb_size_format(cJSON_GetArrayItem(peaks, lo)->valuedouble, size, sizeof size);
        printf(", smallest %s (device %d)", size, lo);
    }
    printf("\n");
}

void search_print_best(const search_options *o, const search_candidate *best, const char *output,
                       const char *svg)
{
    char rcb[32], lay[96];
    if (layout_is_extended(&best->layout))
        layout_text(&best->layout, lay, sizeof lay);
    else
        snprintf(lay, sizeof lay, "pp=%d x dp=%d", best->pp, best->dp);
    printf("best%s%s: %s, %s, b=%d, m=%d, recompute %s -> %s%s%s\n",
           o->target != SEARCH_TARGET_ZBSCHED ? " for " : "",
           o->target != SEARCH_TARGET_ZBSCHED ? search_target_name(o->target) : "", best->label, lay,
           best->micro_batch, best->n_micro, search_rc_text(best, rcb, sizeof rcb), output,
           svg ? ", " : "", svg ? svg : "");
    const cJSON *meta = best->sched ? best->sched->meta : NULL;
    print_device_peaks(meta ? cJSON_GetObjectItem(meta, "predicted") : NULL);
    print_memory_placement(meta ? cJSON_GetObjectItem(meta, "plan") : NULL);
}

void search_print_runs_on(const search_options *o, const search_result *r)
{
    if (r->n_fit == 0)
        return;
    unsigned uses = search_runs_on_uses(o, &r->c[0]);
    for (int p = 0; p < ZB_PATH_COUNT; p++) {
        char why[160], rcb[32];
        if (runs_on_can(uses, (zb_path)p, why, sizeof why))
            continue;
        int i = search_best_runs_on(o, r, (zb_path)p);
        if (i < 0) { /* --vocab parallel ranks vocabulary plans only */
            printf("note: %s, and no plan it runs %s\n", why,
                   o->vocab == SEARCH_VOCAB_PARALLEL ? "was ranked (--vocab parallel)" : "fits");
            continue;
        }
        const search_candidate *c = &r->c[i];
        printf("note: %s; the best plan it runs is %s, pp=%d x dp=%d, b=%d, recompute %s, %.1f ms "
               "(%.1f%% slower than the winner)\n", why, c->label, c->pp, c->dp, c->micro_batch,
               search_rc_text(c, rcb, sizeof rcb), c->time_ms,
               r->c[0].time_ms > 0 ? 100.0 * (c->time_ms / r->c[0].time_ms - 1.0) : 0.0);
    }
}

int search_print_nothing_fits(const search_options *o, const search_result *r)
{
    /* No plan was simulated: say what the static memory alone needs at
     * the depth that needs least, when depths were left out for it. */
    const search_candidate *floor = NULL;
    for (int i = 0; i < r->n && r->min_peak_index < 0; i++)
        if (r->c[i].static_floor && (!floor || r->c[i].static_bytes < floor->static_bytes))
            floor = &r->c[i];
    if (floor) {
        char lim[32], need[32];
        zb_size_format(o->mem_bytes, lim, sizeof lim);
        zb_size_format(floor->static_bytes, need, sizeof need);
        return cli_error("nothing fits in %s per %s: the weights, gradients and optimizer state alone take at "
                         "least %s a %s at pp=%d x dp=%d, before any activation: use more %s, or --mem well over "
                         "%.0fG", lim, o->gpu.cpu ? "device" : "GPU", need, o->gpu.cpu ? "device" : "GPU",
                         floor->pp, floor->dp, search_device_noun(&o->gpu, 2), ceil(floor->static_bytes / 1e9));
    }
    if (r->min_peak_index < 0)
        return cli_error("nothing %s can run could be built (-v or --json says why)", search_target_name(o->target));
    const search_candidate *c = &r->c[r->min_peak_index];
    char lim[32], peak[32], rcb[32], other[96] = "";
    zb_size_format(o->mem_bytes, lim, sizeof lim);
    zb_size_format(r->min_peak_bytes, peak, sizeof peak);
    /* Another engine's plan may fit where this one's do not. */
    const search_candidate *fit = NULL;
    for (int t = 0; t < SEARCH_N_TARGETS; t++)
        if (t != (int)o->target && r->best[t].status == SEARCH_FIT && (!fit || r->best[t].time_ms < fit->time_ms))
            fit = &r->best[t];
    if (fit)
        snprintf(other, sizeof other, ", or --target %s, whose %s fits",
                 search_target_name((search_target)(fit - r->best)), fit->label);
    return cli_error("nothing fits in %s per %s; the smallest peak is %s (%s, b=%d, recompute %s): "
                     "use --mem %.0fG or more, or more %s%s", lim, o->gpu.cpu ? "device" : "GPU", peak, c->label,
                     c->micro_batch, search_rc_text(c, rcb, sizeof rcb), r->min_peak_bytes / 1e9 + 0.5,
                     search_device_noun(&o->gpu, 2), other);
}
