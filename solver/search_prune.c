/*
 * search_prune.c: which candidates of a search need not be built, and the
 * time buckets the ranking compares in (docs/search.md, "Pruning").
 *
 * The search builds every schedule family for every configuration of a
 * pipeline depth (micro-batch size, recompute setting, split rule) and
 * simulates each.  On 64 GPUs and more that is thousands of candidates,
 * most of them recompute settings of a family whose plan without
 * recompute already fits and runs faster than they possibly can.  Before
 * a candidate is built, search.c computes a lower bound of its time from
 * the costs of its placement alone (the busiest device's F+B+W, or, one
 * stage per device, the stage bound of bound.c under the memory limit,
 * plus the data-parallel sync the device cannot hide), and a lower bound
 * of its peak memory (each device's static memory plus one micro-batch's
 * activations on its stages, which every order holds at once before that
 * micro-batch's first B there); this file keeps, for the depth being
 * searched, each label's best time so far under every target's step
 * rule, and its smallest peak over the limit, and says whether the
 * bounds already lose to them.
 *
 * Only candidates the split search may start from are noted (not the
 * split-tuned ones): the bests a candidate is pruned against are then
 * bests among the split search's sources too, so a pruned candidate is
 * never the plan it would have tuned.
 *
 * Why per label and per target, and not against the best plan overall:
 * everything the search reports beyond its winner is made of label
 * bests.  The split search tunes each label's best (zbsched's rule, and
 * each synchronous target's), the vocabulary-parallel versions are built
 * from each label's best, and the why block's rows are each depth's and
 * each target's best, minima over labels.  A candidate is skipped only
 * when, for every target that can run it, its bound falls in a later time
 * bucket (search_time_bucket) than that target's best of its label, or
 * its peak bound is over the limit and that target has a fit of the
 * label or an OOM of a smaller peak (when nothing of a label fits, its
 * best is its smallest peak, which the split search starts from and the
 * "nothing fits" line names): it would have ranked behind that best
 * under every rule that could pick it, so no best changes, and the winner, the tuned plans, the
 * vocabulary versions and the why block stay what exhaustive search
 * gives.  What changes is the list: pruned candidates are counted
 * (search_result.n_pruned), not listed.
 *
 * search.c asks twice: before a candidate is built, with its placement's
 * bounds, and after, before it is simulated, with its order's own peak
 * (pruned_by_peak): a plan over the limit behind its label's best needs
 * no simulation either.
 *
 * The table is per depth and small (a few dozen labels): a fixed array
 * searched linearly, no allocation, nothing to free on the search's
 * error paths.  A label that does not fit in it is simply never pruned.
 */
#include "solver/solver_internal.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

long search_time_bucket(double ms)
{
    return ms > 0 ? (long)floor(log(ms) / log(SEARCH_TIME_RESOLUTION)) : 0;
}

void search_prune_clear(search_prune *p)
{
    p->n = 0;
}

/* The slot of label, or NULL when it has none (and create is 0 or the
 * table is full). */
static search_prune_slot *find_slot(search_prune *p, const char *label, int create)
{
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->slot[i].label, label))
            return &p->slot[i];
    if (!create || p->n == SEARCH_PRUNE_LABELS)
        return NULL;
    search_prune_slot *s = &p->slot[p->n++];
    snprintf(s->label, sizeof s->label, "%s", label);
    for (int t = 0; t < SEARCH_N_TARGETS; t++)
        s->best_ms[t] = s->oom_peak[t] = INFINITY;
    return s;
}

void search_prune_note(search_prune *p, const search_candidate *c)
{
    /* A split-tuned plan (the V light-ends split) is no source of the
     * split search: a label whose only fits are such plans is tuned from
     * its smallest peak over the limit, which must then not be pruned. */
    if ((c->status != SEARCH_FIT && c->status != SEARCH_OOM) || c->split_tuned)
        return;
    search_prune_slot *s = find_slot(p, c->label, 1);
    if (!s)
        return;
    for (int t = 0; t < SEARCH_N_TARGETS; t++) {
        if (!(c->targets >> t & 1))
            continue;
        if (c->status == SEARCH_OOM) {
            s->oom_peak[t] = fmin(s->oom_peak[t], c->peak_bytes);
            continue;
        }
        double ms = search_target_sync((search_target)t) ? c->sync_ms : c->async_ms;
        if (ms < s->best_ms[t])
            s->best_ms[t] = ms;
    }
}

int search_prune_loses(search_prune *p, const char *label, unsigned targets, double bound_ms, double peak_bytes,
                       double mem_limit)
{
    if (!targets) /* no rule to lose under */
        return 0;
    search_prune_slot *s = find_slot(p, label, 0);
    if (!s)
        return 0;
    long b = bound_ms > 0 ? search_time_bucket(bound_ms) : 0;
    int cannot_fit = peak_bytes > mem_limit;
    for (int t = 0; t < SEARCH_N_TARGETS; t++) {
        if (!(targets >> t & 1))
            continue;
        int has_fit = isfinite(s->best_ms[t]);
        /* Slower than a fit (fits rank first, by time bucket) ... */
        int slower = has_fit && bound_ms > 0 && b > search_time_bucket(s->best_ms[t]);
        /* ... or an OOM behind a fit or behind a smaller peak (OOMs rank
         * by peak under every rule). */
        int fuller = cannot_fit && (has_fit || peak_bytes > s->oom_peak[t]);
        if (!slower && !fuller)
            return 0;
    }
    return 1;
}

double search_prune_lose_ms(search_prune *p, const char *label, unsigned targets)
{
    search_prune_slot *s = targets ? find_slot(p, label, 0) : NULL;
    if (!s)
        return INFINITY;
    double lose = 0;
    for (int t = 0; t < SEARCH_N_TARGETS; t++) {
        if (!(targets >> t & 1))
            continue;
        if (!isfinite(s->best_ms[t]))
            return INFINITY;
        /* The first time of the next bucket, nudged up until the bucket
         * rule agrees (log's rounding); any later time is in that bucket
         * or a later one. */
        long b = search_time_bucket(s->best_ms[t]);
        double from = exp((double)(b + 1) * log(SEARCH_TIME_RESOLUTION));
        while (search_time_bucket(from) <= b)
            from = nextafter(from, INFINITY) * (1 + 1e-15);
        lose = fmax(lose, from);
    }
    assert(!(lose > 0) || search_prune_loses(p, label, targets, lose, 0, INFINITY));
    return lose > 0 ? lose : INFINITY;
}
