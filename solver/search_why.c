/*
 * search_why.c: the search's account of why the winner takes the time it
 * takes, as labelled rows (search.h, search_why_build; docs/search.md "Say
 * why").  The CLI prints the rows under the ranked table, aligning labels
 * and times; `--json` carries the same rows.
 *
 * What is said, in order: the bounds no schedule (work bound) or no
 * schedule with this split (imbalance bound) beats; the winner's time and
 * its losses to bubble, imbalance and data-parallel sync; the plain 1F1B
 * baseline; the work bounds of the winner's depth and micro-batch without
 * recompute (plain and vocabulary-parallel layouts); for the zbsched
 * target whether vocabulary parallelism won and what the other kind's
 * best took; every other pipeline depth's best or smallest peak; and last
 * every other target's best plan with its time as a ratio of the
 * winner's (each under its own step rule, search_target.c).
 *
 * Workload: a few dozen rows once per search.
 */
#include "solver/search.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "src/size.h"

/* Appends a row; rows past SEARCH_WHY_MAX_ROWS are dropped (at most 64
 * depths and 4 targets fit). */
static search_why_row *add_row(search_why_block *w, search_why_kind kind, int level, const char *label,
                               double ms, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static search_why_row *add_row(search_why_block *w, search_why_kind kind, int level, const char *label,
                               double ms, const char *fmt, ...)
{
    if (w->n >= SEARCH_WHY_MAX_ROWS)
        return NULL;
    search_why_row *row = &w->row[w->n++];
    row->kind = kind;
    row->level = level;
    row->ms = ms;
    snprintf(row->label, sizeof row->label, "%s", label);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(row->text, sizeof row->text, fmt, ap);
    va_end(ap);
    return row;
}

/* The plan in a few words: "zb-auto max, pp=8 x dp=1, b=1, recompute 0-3". */
static void plan_words(const search_candidate *c, char *buf, size_t len)
{
    char rcb[32], lay[96];
    if (layout_is_extended(&c->layout))
        snprintf(buf, len, "%s, %s, b=%d, recompute %s", c->label, layout_text(&c->layout, lay, sizeof lay),
                 c->micro_batch, search_rc_text(c, rcb, sizeof rcb));
    else
        snprintf(buf, len, "%s, pp=%d x dp=%d, b=%d, recompute %s", c->label, c->pp, c->dp, c->micro_batch,
                 search_rc_text(c, rcb, sizeof rcb));
}

/* The row of a layout family the target cannot run (refusal: why):
 * the lowest work bound among the other targets' layouts of the family
 * (r->other_*), which of them run it, and the flag that searches it; a
 * layout whose static memory alone exceeds the limit counts only when
 * every one of the family's does. */
static void other_layout_row(const search_options *o, const search_result *r, const char *family,
                             const char *refusal, search_why_block *w)
{
    const search_candidate *win = &r->c[0];
    int best = -1, best_fits = 0;
    for (int k = 0; k < r->n_other_layouts; k++) {
        if (strcmp(search_layout_family(&r->other_layout[k]), family) || !(r->other_bound_ms[k] > 0))
            continue;
        int fits = r->other_static_bytes[k] <= o->mem_bytes;
        if (best < 0 || fits > best_fits || (fits == best_fits && r->other_bound_ms[k] < r->other_bound_ms[best])) {
            best = k;
            best_fits = fits;
        }
    }
    if (best < 0) {
        add_row(w, SEARCH_WHY_ROW, 1, family, -1, "%s", refusal);
        return;
    }
    char names[80] = "", flag[32] = "", dims[64] = "", peak[32];
    int n_names = 0;
    for (int t = 0; t < SEARCH_N_TARGETS; t++)
        if (r->other_targets[best] & (1u << t)) {
            n_names++;
            size_t used = strlen(names);
            snprintf(names + used, sizeof names - used, "%s%s", used ? ", " : "", search_target_name((search_target)t));
            if (!flag[0])
                snprintf(flag, sizeof flag, "--target %s", search_target_name((search_target)t));
        }
    const zb_layout *l = &r->other_layout[best]; /* its dimensions beyond the pipeline's */
    size_t off = 0;
    if (l->tp > 1)
        off += (size_t)snprintf(dims + off, sizeof dims - off, " tp%d%s", l->tp, l->sp ? "+sp" : "");
    if (l->cp > 1 && off < sizeof dims)
        off += (size_t)snprintf(dims + off, sizeof dims - off, " cp%d", l->cp);
    if (l->zero > LAYOUT_ZERO1 && off < sizeof dims)
        off += (size_t)snprintf(dims + off, sizeof dims - off, " zero%d", l->zero);
    if (l->offload > 0 && off < sizeof dims)
        snprintf(dims + off, sizeof dims - off, " off%.2g", l->offload);
    if (!best_fits) {
        zb_size_format(r->other_static_bytes[best], peak, sizeof peak);
        add_row(w, SEARCH_WHY_ROW, 1, family, -1, "%s %s it, %s does not; but%s holds %s of static state "
                "a GPU at pp=%d already, over the limit", names, n_names > 1 ? "run" : "runs",
                search_target_name(o->target), dims, peak, l->pp);
        return;
    }
    add_row(w, SEARCH_WHY_ROW, 1, family, r->other_bound_ms[best], "%s %s it, %s does not:%s's compute alone "
            "takes %.1f ms a GPU (%.3fx the winner's time), a bound, not simulated; %s searches it", names,
            n_names > 1 ? "run" : "runs", search_target_name(o->target), dims, r->other_bound_ms[best], r->other_bound_ms[best] / win->time_ms,
            flag);
}

/* One row per layout family (search_layout_family) when the search
 * considered more than one layout, or another target runs layouts this
 * one cannot: its best plan the target runs and what
 * limits it (bubble, imbalance, exposed sync), or why it has none. */
static void family_rows(const search_options *o, const search_result *r, search_why_block *w)
{
    static const char *const families[] = { "PP x DP", "TP x PP x DP", "FSDP", "with CP", "offload" };
    const search_candidate *win = &r->c[0];
    char head[96];
    if (r->n_other_layouts > 0) /* the label has 47 characters */
        snprintf(head, sizeof head, "layouts (%d, %d skipped, %d bounded):", r->n_layouts, r->layouts_pruned,
                 r->n_other_layouts);
    else
        snprintf(head, sizeof head, "layouts (%d, %d skipped):", r->n_layouts, r->layouts_pruned);
    add_row(w, SEARCH_WHY_HEADING, 0, head, -1, "%s", "");
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++) {
        const search_candidate *best = NULL, *small = NULL, *refused = NULL;
        for (int i = 0; i < r->n; i++) {
            const search_candidate *c = &r->c[i];
            if (strcmp(search_layout_family(&c->layout), families[f]))
                continue;
            if (c->status == SEARCH_FIT && !best)
                best = c; /* fits come first, fastest first */
            else if (c->status == SEARCH_OOM && (!small || c->peak_bytes < small->peak_bytes))
                small = c;
            else if (c->status == SEARCH_UNSUPPORTED && !refused)
                refused = c;
        }
        char plan[200], peak[32];
        if (best) {
            search_why y;
            search_explain(best, &y);
            plan_words(best, plan, sizeof plan);
            add_row(w, SEARCH_WHY_ROW, 1, families[f], best->time_ms,
                    "%s: %.3fx the winner's time; limited by %s (bubble %.1f%%, imbalance %.1f%%, sync %.0f ms)",
                    plan, best->time_ms / win->time_ms,
                    best == win ? "nothing better: it is the winner"
                    : y.bubble_share > y.imbalance_share ? "its schedule's bubble" : "its busiest device",
                    100 * y.bubble_share, 100 * y.imbalance_share, best->dp_ms);
        } else if (small) {
            zb_size_format(small->peak_bytes, peak, sizeof peak);
            plan_words(small, plan, sizeof plan);
            add_row(w, SEARCH_WHY_ROW, 1, families[f], -1, "limited by memory: nothing fits; the smallest peak "
                    "is %s (%s)", peak, plan);
        } else if (refused) {
            add_row(w, SEARCH_WHY_ROW, 1, families[f], -1, "%s", refused->note);
        } else {
            /* Not simulated: skipped by its bounds, refused by the target, or
             * left out by a flag. */
            int k = -1;
            for (int i = 0; i < r->n_layouts && k < 0; i++)
                if (r->layout_pruned[i] && !strcmp(search_layout_family(&r->layout[i]), families[f]))
                    k = i;
            zb_layout rep;
            layout_default(&rep);
            rep.tp = f == 1 ? 2 : 1;
            rep.sp = rep.tp > 1;
            rep.zero = f == 2 ? LAYOUT_ZERO3 : LAYOUT_ZERO1;
            rep.cp = f == 3 ? 2 : 1;
            rep.offload = f == 4 ? 0.5 : 0;
            char why[300];
            if (k >= 0 && r->layout_static_bytes[k] > o->mem_bytes) {
                zb_size_format(r->layout_static_bytes[k], peak, sizeof peak);
                add_row(w, SEARCH_WHY_ROW, 1, families[f], -1, "limited by memory: %s of static state per "
                        "GPU already (%s), not simulated", peak, layout_text(&r->layout[k], plan, sizeof plan));
            } else if (k >= 0 && !(r->layout_bound_ms[k] > 0)) {
                add_row(w, SEARCH_WHY_ROW, 1, families[f], -1, "no pipeline depth of %s divides the GPUs "
                        "left (GPUs / (tp x cp)) with the global batch over the replicas",
                        layout_text(&r->layout[k], plan, sizeof plan));
            } else if (k >= 0) {
                add_row(w, SEARCH_WHY_ROW, 1, families[f], -1, "limited by its work: %s's compute alone "
                        "takes %.1f ms (%.3fx the winner's time), not simulated",
                        layout_text(&r->layout[k], plan, sizeof plan), r->layout_bound_ms[k],
                        r->layout_bound_ms[k] / win->time_ms);
            } else if (!search_layout_runs(&rep, NULL, o->target, why, sizeof why)) {
                other_layout_row(o, r, families[f], why, w);
            } else {
                add_row(w, SEARCH_WHY_ROW, 1, families[f], -1, "not searched: a flag (--tp, --cp, --zero, "
                        "--offload) or the job's shape leaves it out");
            }
        }
    }
}

/* The rows on vocabulary parallelism (zbsched target): which kind won and
 * the other kind's best. */
static void vocab_rows(const search_options *o, const search_result *r, search_why_block *w)
{
    const search_candidate *win = &r->c[0];
    const search_candidate *other = NULL;
    for (int i = 1; i < r->n_fit && !other; i++)
        if (!r->c[i].vocab != !win->vocab)
            other = &r->c[i];
    char text[512], rcb[32];
    size_t n = 0;
    if (win->vocab)
        n += (size_t)snprintf(text + n, sizeof text - n,
                              "chosen (Vocab-%d): the head's and embedding's compute no longer loads one device (their state stays whole where the runtime keeps it)", win->vocab);
    else
        n += (size_t)snprintf(text + n, sizeof text - n, "not chosen");
    if (other && n < sizeof text)
        n += (size_t)snprintf(text + n, sizeof text - n,
                              "; the best %s plan, %s (pp=%d, recompute %s), takes %.1f ms (%.3fx the winner's time)",
                              other->vocab ? "vocabulary-parallel" : "plain", other->label, other->pp,
                              search_rc_text(other, rcb, sizeof rcb), other->time_ms, other->time_ms / win->time_ms);
    else if (o->vocab == SEARCH_VOCAB_AUTO && (win->vocab || r->vocab_pruned == 0) && n < sizeof text)
        n += (size_t)snprintf(text + n, sizeof text - n, "; no %s plan fits", win->vocab ? "plain" : "vocabulary-parallel");
    else if (o->vocab == SEARCH_VOCAB_AUTO && n < sizeof text)
        n += (size_t)snprintf(text + n, sizeof text - n, "; no vocabulary-parallel plan that fits was simulated");
    if (r->vocab_pruned > 0 && n < sizeof text)
        snprintf(text + n, sizeof text - n,
                 "; %d vocabulary-parallel %s cut short: their busiest device alone, or every placement of their passes, reaches the best time so far, or %.2fx the best of every depth",
                 r->vocab_pruned, r->vocab_pruned == 1 ? "version" : "versions", SEARCH_VOCAB_NEAR);
    add_row(w, SEARCH_WHY_ROW, 0, "vocabulary parallelism", -1, "%s", text);
}

/* One row per pipeline depth other than the winner's: its best fit, or
 * its smallest peak when nothing of it fits. */
static void depth_rows(const search_options *o, const search_result *r, search_why_block *w)
{
    const search_candidate *win = &r->c[0];
    int shown = 0;
    for (int i = 0; i < r->n; i++) {
        const search_candidate *c = &r->c[i];
        if (c->pp == win->pp || (c->status != SEARCH_FIT && c->status != SEARCH_OOM) ||
            !search_layout_same(&c->layout, &win->layout))
            continue;
        int first = 1;
        for (int k = 0; k < i && first; k++)
            first = (r->c[k].status != SEARCH_FIT && r->c[k].status != SEARCH_OOM) || r->c[k].pp != c->pp ||
                    !search_layout_same(&r->c[k].layout, &win->layout);
        if (!first)
            continue;
        if (!shown++)
            add_row(w, SEARCH_WHY_HEADING, 0, "other pipeline depths:", -1, "%s", "");
        char label[48], peak[32];
        snprintf(label, sizeof label, "pp=%d x dp=%d", c->pp, c->dp);
        char rcb[32];
        if (c->status == SEARCH_FIT)
            add_row(w, SEARCH_WHY_ROW, 1, label, c->time_ms,
                    "best %s, recompute %s (%.0f tok/s/%s, %.0f ms exposed sync), %.3fx the winner's time",
                    c->label, search_rc_text(c, rcb, sizeof rcb), c->tokens_per_s, search_device_noun(&o->gpu, 1),
                    c->dp_ms, c->time_ms / win->time_ms);
        else { /* OOM candidates sort by peak: this is the depth's smallest */
            zb_size_format(c->peak_bytes, peak, sizeof peak);
            add_row(w, SEARCH_WHY_ROW, 1, label, -1, "nothing fits; the smallest peak is %s (%s, b=%d)", peak,
                    c->label, c->micro_batch);
        }
    }
    /* The depths not built: their static memory alone is over the limit
     * (the list holds them in creation order, shallowest first; deepest
     * first reads as the smallest need first, as the rows above). */
    for (int i = r->n - 1; i >= 0; i--) {
        const search_candidate *c = &r->c[i];
        if (!c->static_floor || !search_layout_same(&c->layout, &win->layout))
            continue;
        if (!shown++)
            add_row(w, SEARCH_WHY_HEADING, 0, "other pipeline depths:", -1, "%s", "");
        char label[48], need[32];
        snprintf(label, sizeof label, "pp=%d x dp=%d", c->pp, c->dp);
        zb_size_format(c->static_bytes, need, sizeof need);
        add_row(w, SEARCH_WHY_ROW, 1, label, -1,
                "nothing fits; the weights, gradients and optimizer state alone take at least %s a %s "
                "(not built)", need, search_device_noun(&o->gpu, 1));
    }
}

/* One row per target other than the searched one: its best plan and its
 * time (under its own step rule) as a ratio of the winner's. */
static void target_rows(const search_options *o, const search_result *r, search_why_block *w)
{
    const search_candidate *win = &r->c[0];
    add_row(w, SEARCH_WHY_HEADING, 0, "other targets:", -1, "%s", "");
    for (int t = 0; t < SEARCH_N_TARGETS; t++) {
        if (t == (int)o->target)
            continue;
        const search_candidate *b = &r->best[t];
        const char *name = search_target_name((search_target)t);
        char plan[160], peak[32], more[96] = "";
        plan_words(b, plan, sizeof plan);
        for (int k = 0; k < r->n_other_layouts && !more[0]; k++)
            if (r->other_targets[k] & (1u << t)) /* its own search goes further */
                snprintf(more, sizeof more, "; among these layouts only: --target %s searches its own", name);
        if (b->status == SEARCH_FIT)
            add_row(w, SEARCH_WHY_ROW, 1, name, b->time_ms, "%s: %.3fx the winner's time%s%s", plan,
                    b->time_ms / win->time_ms,
                    search_target_sync((search_target)t) ? " (every device steps together)" : "", more);
        else if (b->status == SEARCH_OOM) {
            zb_size_format(b->peak_bytes, peak, sizeof peak);
            add_row(w, SEARCH_WHY_ROW, 1, name, -1, "nothing it runs fits; the smallest peak is %s (%s)", peak, plan);
        } else
            add_row(w, SEARCH_WHY_ROW, 1, name, -1, "nothing it runs could be built");
    }
}

void search_why_build(const search_options *o, const search_result *r, search_why_block *w)
{
    memset(w, 0, sizeof *w);
    if (r->n_fit <= 0)
        return;
    const search_candidate *win = &r->c[0];
    search_why y;
    search_explain(win, &y);
    int p = win->pp;
    const char *dev = search_device_noun(&o->gpu, p);
    char lay[100], text[96];
    if (layout_is_extended(&win->layout))
        snprintf(lay, sizeof lay, "%s", layout_text(&win->layout, text, sizeof text));
    else
        snprintf(lay, sizeof lay, "pp=%d x dp=%d", win->pp, win->dp);
    snprintf(w->head, sizeof w->head, "the winner takes %.1f ms per iteration (%s, %s, b=%d%s%s).",
             y.time_ms, win->label, lay, win->micro_batch,
             o->target != SEARCH_TARGET_ZBSCHED ? ", for " : "",
             o->target != SEARCH_TARGET_ZBSCHED ? search_target_name(o->target) : "");
    add_row(w, SEARCH_WHY_ROW, 0, "work bound", y.work_bound_ms, "total compute / devices");
    add_row(w, SEARCH_WHY_ROW, 0, "imbalance bound", y.imbalance_bound_ms, "busiest device's compute");
    char sync[64] = "";
    if (win->dp_ms > 0)
        snprintf(sync, sizeof sync, ", of which data-parallel sync %.1f ms", win->dp_ms);
    add_row(w, SEARCH_WHY_ROW, 0, "winner", y.time_ms,
            "schedule bubble %.1f%%, imbalance %.1f%%, total idle %.1f%%%s%s", 100 * y.bubble_share,
            100 * y.imbalance_share, 100 * y.idle_share, sync,
            search_target_sync(o->target) ? " (every device steps after the last one is done)" : "");
    if (r->baseline.status != SEARCH_SKIPPED && r->baseline.time_ms > 0)
        add_row(w, SEARCH_WHY_ROW, 0, "baseline", r->baseline.time_ms,
                "plain 1F1B, b=1, recompute everywhere, pp=%d: winner %.3fx faster%s", r->baseline.pp,
                win->speedup, r->baseline.status == SEARCH_OOM ? " (the baseline itself does not fit)" : "");
    if (r->bound_plain_ms > 0)
        add_row(w, SEARCH_WHY_ROW, 0, "work bound, no recompute", r->bound_plain_ms,
                "plain layout, pp=%d, b=%d: no schedule, split or recompute beats it", p, win->micro_batch);
    if (r->bound_vocab_ms > 0)
        add_row(w, SEARCH_WHY_ROW, 0, "with vocab parallelism", r->bound_vocab_ms,
                "output layer and embedding split over the %d %s", p, dev);
    if (o->target == SEARCH_TARGET_ZBSCHED && o->vocab != SEARCH_VOCAB_PLAIN)
        vocab_rows(o, r, w);
    depth_rows(o, r, w);
    if (r->n_layouts > 1 || r->n_other_layouts > 0)
        family_rows(o, r, w);
    target_rows(o, r, w);
}
