/*
 * search_vocab.c: the vocabulary-parallel versions of a depth's plans
 * (docs/vocab-parallel.md; search.h).
 *
 * Each label's best of the depth gets Vocab-1 and Vocab-2 versions: the
 * same op order, the layers split evenly, the head and embedding sharded
 * over the devices and the S/T passes placed by gen_vocab_insert.  Their
 * recompute is searched again, by device and, for interleaved and V
 * plans, by stage (the first q virtual stages in model order, whose
 * activations wait the longest, the last of them at the MLP level).  A
 * version whose busiest device's compute alone reaches the best plan so
 * far is not simulated: no order could make it win; nor is one whose
 * every placement's walk shows it reaching that time (span so far plus
 * work left).
 *
 * Workload: two versions of a few dozen sources per depth, each a few
 * placements of the passes (three lookaheads, hold on and off) per
 * recompute setting tried; a setting that is not the last tried and whose
 * plan without passes is already over the limit (vocab_oom_floor) is not
 * placed: on llama3-405b over 1,024 GPUs that was 4 of its 15 s.
 */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "solver/search_state.h"
#include "src/cost_model.h"
#include "src/cost_vocab.h"
#include "src/size.h"
#include "src/validate.h"

/* zb-auto plans its order for the memory it is given; the plain plan's
 * order spent every byte the head and embedding no longer use, and none on
 * the passes.  So a zb-auto plan is planned again on the vocabulary
 * layout's own stage costs, with the largest limit that leaves room for
 * two logits shards (the passes' bound per device), and its order replaces
 * s's lanes.  s is priced by cost_vocab_fill_sched. */
static int vocab_replan(const search_state *st, sched_t *s, zb_err *err)
{
    int p = s->n_devices;
    double *limit = malloc(sizeof *limit * (size_t)p);
    if (!limit)
        return zb_fail(err, "out of memory");
    for (int d = 0; d < p; d++)
        limit[d] = fmax(0, st->o->mem_bytes - s->mem_static[d] - 2 * s->vocab.d_s);
    solver_problem pr = { .p = p, .m = s->n_micro, .cost = s->cost, .t_comm = s->t_comm, .limit = limit };
    sched_t *ns = NULL;
    int rc = solver_zb_auto_costs(&pr, &ns, NULL, err);
    free(limit);
    if (rc < 0)
        return -1;
    if (ns->n_devices != p) {
        sched_free(ns);
        return zb_fail(err, "zb-auto returned %d devices for %d", ns->n_devices, p);
    }
    sched_lane *tmp = s->dev; /* take its lanes, keep s's header */
    s->dev = ns->dev;
    ns->dev = tmp;
    sched_free(ns);
    return 0;
}

int search_vocab_price(const search_state *st, search_config *cf, int variant, sched_t *s, int *layers,
                       zb_err *err)
{
    cost_vocab_options vo;
    cost_vocab_options_default(&vo);
    vo.whole_state = 1; /* what zbsched's runtime holds (issue 25) */
    vo.variant = variant;
    if (cost_layer_split_balanced(cf->model.n_layers, s->n_stages, 0, 0, layers, err) < 0 ||
        search_cost_sched(st, cf, layers, s, err) < 0)
        return -1;
    cost_options co = cf->copt; /* as cost_sched left it: this schedule's recompute */
    co.layers = layers;
    return cost_vocab_fill_sched(&cf->model, &st->o->gpu, &co, &vo, s, NULL, err);
}

/* The largest static + activation memory of s's devices (its device in
 * *device), s being a vocabulary version's plan before its passes are
 * placed, when that proves every placement of the passes over the limit;
 * else 0.  The
 * placement keeps each lane's base ops in order but may run a forward
 * ahead of a waiting backward; forwards only take memory, and a device
 * has run no more T passes than S passes at any point, so when an S takes
 * at least what its T gives back, every prefix of the placed lane holds at
 * least what the matching prefix of the plain lane holds (the lane peak is
 * the order's, sched_lane_peak). */
static double vocab_oom_floor(const search_state *st, const sched_t *s, const sched_vocab *pv, int *device)
{
    if (!(pv->d_s >= 0 && pv->d_s + pv->d_t >= 0))
        return 0;
    for (int i = 0; i < s->n_stages; i++)
        if (s->cost[i].d_f < 0)
            return 0; /* a forward that frees memory: the argument fails */
    double most = 0;
    for (int d = 0; d < s->n_devices; d++) { /* search_plan_peak, and where */
        double peak = search_device_peak(s, d);
        if (peak > most) {
            most = peak;
            *device = d;
        }
    }
    assert(most == search_plan_peak(s));
    return most > st->o->mem_bytes ? most : 0;
}

/* Marks c over the limit by peak, a lower bound of its peak on device
 * (-1: unknown) that its plan before the passes proves (how). */
static void vocab_over_floor(const search_state *st, search_candidate *c, double peak, int device, const char *how)
{
    char need[32], lim[32];
    zb_size_format(peak, need, sizeof need);
    zb_size_format(st->o->mem_bytes, lim, sizeof lim);
    c->status = SEARCH_OOM;
    c->peak_bytes = peak;
    c->peak_device = device;
    c->peak_floor = 1;
    if (device >= 0)
        snprintf(c->note, sizeof c->note, "needs at least %s on device %d %s > limit %s", need, device, how, lim);
    else
        snprintf(c->note, sizeof c->note, "needs more than %s %s", lim, how);
}

/* What a version cut short at beat could not do, for its note, in buf. */
static const char *vocab_goal(const search_state *st, double beat, char *buf, size_t size)
{
    if (st->vocab_near && beat == st->vocab_beat)
        snprintf(buf, size, "come within %.0f%% of the best plan", (SEARCH_VOCAB_NEAR - 1) * 100);
    else
        snprintf(buf, size, "beat the best plan");
    return buf;
}

/* Builds, costs and measures the vocabulary-parallel version of src's
 * schedule under config cf into the zeroed candidate c (layers split
 * evenly: the head no longer weighs on the last stage).  On success c owns
 * its layers and schedule; failures leave c skipped with the reason.
 * Returns 1 when its busiest device's compute alone reaches beat (the
 * time it must stay under: the best plan's, or the caller's), c skipped;
 * 3 when every placement of its passes provably reaches beat (the walk's
 * stop rule: its span so far plus its work left), c skipped too; 2
 * when discard_oom or by_floor is set and its plan without passes
 * already proves it over the limit (vocab_oom_floor): c is then marked
 * over the limit with that floor as its peak (peak_floor), and nothing is
 * placed or simulated, for callers that drop a version over the limit or
 * need no exact peak of it; with discard_oom each placement is also given
 * up as soon as it goes over (when all six do, c is marked over the limit
 * the same way and 2 returned); else 0. */
static int vocab_build(search_state *st, search_config *cf, const search_candidate *src, int variant,
                       int discard_oom, int by_floor, double beat, search_candidate *c)
{
    int pruned = 0;
    int S = src->n_stages;
    int *layers = malloc(sizeof *layers * (size_t)S);
    sched_t *s = sched_clone(src->sched), *v = NULL;
    double *exposed = NULL; /* [p] each device's exposed data-parallel sync */
    int beaten = 0;         /* some placement was given up on reaching beat */
    zb_err e2 = { { 0 } };
    c->vocab = variant;
    c->n_stages = S;
    if (!layers || !s) {
        search_skip(c, "out of memory");
        goto out;
    }
    if (search_vocab_price(st, cf, variant, s, layers, &e2) < 0) {
        search_skip(c, e2.msg);
        goto out;
    }
    int replanned = !strcmp(src->family, "zb-auto") && S == st->pp;
    if (replanned && vocab_replan(st, s, &e2) < 0) {
        search_skip(c, e2.msg);
        goto out;
    }
    /* No schedule beats its busiest device's compute (its stages and
     * every micro-batch's S and T).  When that alone reaches the best plan
     * found so far, placing and simulating the passes cannot change the
     * answer, and more recompute only adds work. */
    double busiest = search_busiest_ms(s); /* priced by cost_vocab_fill_sched, passes not placed yet */
    if (busiest >= beat) {
        char why[160];
        char goal[64];
        snprintf(why, sizeof why, "cannot %s: its busiest device computes %.1f ms >= %.1f ms",
                 vocab_goal(st, beat, goal, sizeof goal), busiest, beat);
        search_skip(c, why);
        pruned = 1;
        goto out;
    }
    sched_vocab pv = s->vocab;
    sched_set_vocab(s, SCHED_VOCAB_NONE, 0, 0, 0, 0, 0, 0);
    /* Once: the placements trust them.  src's order was validated and
     * simulated when it was built (the simulation proves it runs), so
     * only its new costs need checking; a replanned order in full. */
    if ((replanned ? gen_vocab_insert_check(s, &pv, &e2)
                   : gen_vocab_check(&pv, &e2) || sched_check_magnitudes(s, &e2) ? -1 : 0) < 0) {
        search_skip(c, e2.msg);
        goto out;
    }
    /* --exhaustive places them anyway, and checks the floor below. */
    int floor_device = -1;
    double floor_bytes = vocab_oom_floor(st, s, &pv, &floor_device);
    if (floor_bytes > 0 && (discard_oom || by_floor) && !st->o->exhaustive) {
        vocab_over_floor(st, c, floor_bytes, floor_device, "before its vocabulary passes are placed");
        c->layers = layers; /* the even split it was priced on */
        layers = NULL;
        pruned = 2;
        goto out;
    }
    /* A plan's time adds to each device's span the data-parallel
     * all-reduce it leaves exposed (search_measure), the same for every
     * placement: the walk's stop rule adds it too, or it would compare
     * spans alone with a time they can never reach. */
    exposed = malloc(sizeof *exposed * (size_t)s->n_devices);
    if (!exposed || search_dp_exposed_all(st, cf, layers, s, exposed, &e2) < 0) {
        search_skip(c, exposed ? e2.msg : "out of memory");
        goto out;
    }
    /* Each lookahead (forwards run ahead of a waiting backward) holds
     * more micro-batches, with and without the hold rule: keep the
     * fastest that fits, else the smallest. */
    search_candidate keep = *c;
    for (int q = 0; q < 2 * (GEN_VOCAB_MAX_LOOKAHEAD + 1); q++) {
        sched_t *vk = NULL;
        search_candidate trial = *c;
        double walk_cost = NAN;
        /* Once one is kept, a placement is kept only when it beats it
         * (below): the walk gives up on one that provably cannot, over
         * the limit (or, while nothing fits, not under the kept peak) or
         * a time bucket behind, as soon as it is.  A caller that drops a
         * version over the limit needs no placement over it at all. */
        gen_vocab_stop stop = { INFINITY, 1, INFINITY, exposed };
        if (v && keep.status == SEARCH_FIT)
            stop = (gen_vocab_stop){ st->o->mem_bytes, 1, keep.time_ms / SEARCH_TIME_RESOLUTION, exposed };
        else if (discard_oom)
            stop.peak_over = st->o->mem_bytes;
        else if (v)
            stop.peak_over = nextafter(keep.peak_bytes, -INFINITY);
        /* A placement that reaches beat cannot make the version win, kept
         * or not: given up as the busiest device's bound would have been.
         * Not when the floor proves the version over the limit: it is
         * reported so, as when it is not placed at all. */
        int at_beat = !(floor_bytes > 0) && beat <= stop.span_reach;
        if (at_beat)
            stop.span_reach = beat;
        int placed = gen_vocab_insert_trusted(s, &pv, q / 2, q % 2, &stop, &vk, &walk_cost, &e2);
        if (placed < 0) {
            search_skip(c, e2.msg);
            goto out; /* which frees v */
        }
        beaten |= placed == 2 && at_beat;
        if (placed > 0)
            continue; /* given up: it could not have been kept */
        /* Not simulated when it cannot be kept: a placement over the
         * limit is kept only for a smaller peak while nothing fits (its
         * peak is the order's), and one that fits only for a faster time,
         * which its largest span (the walk's cost) already rules out when
         * that alone is a time bucket behind. */
        double peak = search_plan_peak(vk);
        int over = peak > st->o->mem_bytes;
        if (v && ((over && (keep.status == SEARCH_FIT || peak >= keep.peak_bytes)) ||
                  (!over && keep.status == SEARCH_FIT && walk_cost * SEARCH_TIME_RESOLUTION >= keep.time_ms))) {
            sched_free(vk);
            continue;
        }
        if (search_measure(st, cf, layers, &trial, vk, &e2) < 0) {
            sched_free(vk);
            search_skip(c, e2.msg);
            goto out; /* which frees v */
        }
        /* The walk times its ops as the simulator does. */
        assert(isnan(walk_cost) || fabs(trial.cost_ms - walk_cost) <= 1e-9 * fmax(1, walk_cost));
        int better = !v || (trial.status == SEARCH_FIT && (keep.status != SEARCH_FIT ||
                                                           trial.time_ms * SEARCH_TIME_RESOLUTION < keep.time_ms)) ||
                     (trial.status != SEARCH_FIT && keep.status != SEARCH_FIT &&
                      trial.peak_bytes < keep.peak_bytes);
        if (better) {
            sched_free(v);
            v = vk;
            keep = trial;
        } else {
            sched_free(vk);
        }
    }
    /* Some placement reached beat and none that fits beat it: the
     * version cannot win, whichever placement it would have kept. */
    if (beaten && !(v && keep.status == SEARCH_FIT && keep.time_ms < beat)) {
        char why[160];
        char goal[64];
        snprintf(why, sizeof why, "cannot %s: every placement of its passes reaches %.1f ms",
                 vocab_goal(st, beat, goal, sizeof goal), beat);
        search_skip(c, why);
        pruned = 3;
        goto out; /* which frees v */
    }
    if (!v) { /* every placement went over the limit: discard_oom's caller drops it */
        assert(discard_oom);
        vocab_over_floor(st, c, nextafter(st->o->mem_bytes, INFINITY), -1,
                         "in every placement of its vocabulary passes");
        c->layers = layers;
        layers = NULL;
        pruned = 2;
        goto out;
    }
    /* Placed without checks (each is valid by construction, as the walk
     * commits every op once and after what it waits for): the one kept is
     * validated, all but the walk the simulation that measured it made. */
    if (sched_validate_static(v, &e2) < 0) {
        zb_wrap(&e2, "vocabulary parallelism: placement gave an invalid schedule: ");
        search_skip(c, e2.msg);
        goto out;
    }
    /* The floor is a lower bound of every placement's peak. */
    assert(!(floor_bytes > 0) || (keep.status != SEARCH_FIT && keep.peak_bytes >= floor_bytes * (1 - 1e-9)));
    *c = keep;
    c->layers = layers;
    layers = NULL;
    c->sched = v;
    v = NULL;
out:
    free(layers);
    free(exposed);
    sched_free(s);
    sched_free(v);
    return pruned;
}

/* Whether the vocabulary-parallel version of src with the first q stages
 * recomputing (the last j of them at the MLP level only) is likely to fit: its plan without passes (src's order,
 * even split, shards), its peak plus two logits shards (what
 * the passes hold at most per device, docs/vocab-parallel.md) within the
 * limit.  Returns 1 or 0, or -1 when it cannot be priced. */
static int vocab_stage_fits(search_state *st, const search_candidate *src, int variant, int q, int j,
                            zb_err *err)
{
    int S = src->n_stages, ok = -1;
    search_config cf;
    int *layers = malloc(sizeof *layers * (size_t)S);
    sched_t *s = sched_clone(src->sched);
    zb_err e2 = { { 0 } };
    if (search_config_init(st, &cf, src->micro_batch, 0, src->split, err) < 0 || !layers || !s) {
        if (!layers || !s)
            zb_fail(err, "out of memory");
        goto out;
    }
    cf.rc_first_stages = q;
    cf.rc_mlp_stages = j;
    if (search_vocab_price(st, &cf, variant, s, layers, &e2) < 0) {
        ok = 0; /* does not apply: treated as not fitting */
        goto out;
    }
    double held = 2 * s->vocab.d_s; /* the passes' memory: the plan is measured without them */
    sched_set_vocab(s, SCHED_VOCAB_NONE, 0, 0, 0, 0, 0, 0);
    /* the peak is the order's: no need to simulate times */
    ok = held != 0 && search_plan_peak(s) + held <= st->o->mem_bytes;
out:
    search_config_free(&cf);
    free(layers);
    sched_free(s);
    return ok;
}

/* The version of src with the first q virtual stages recomputing, the
 * last j of them at the MLP level only: built, and made *best when it
 * fits and *best does not or is slower.  Returns 1 when more recompute
 * cannot help (it fits, or its busiest device alone already loses to the
 * best plan or to *best), 0 when it may, -1 with err. */
static int vocab_stage_try(search_state *st, const search_candidate *src, int variant, int q, int j,
                           search_candidate *best, zb_err *err)
{
    search_config cf;
    if (search_config_init(st, &cf, src->micro_batch, 0, src->split, err) < 0) {
        search_config_free(&cf);
        return -1;
    }
    cf.rc_first_stages = q;
    cf.rc_mlp_stages = j;
    search_candidate trial;
    memset(&trial, 0, sizeof trial);
    trial.peak_device = -1;
    /* A trial is kept only when it fits and is a time bucket faster than
     * *best: its busiest device must leave room for that too. */
    double beat = st->vocab_beat;
    if (best->status == SEARCH_FIT)
        beat = fmin(beat, best->time_ms / SEARCH_TIME_RESOLUTION);
    int built = vocab_build(st, &cf, src, variant, 1, 1, beat, &trial);
    int pruned = built == 1 || built == 3;
    search_config_free(&cf);
    trial.rc_devices = 0;
    trial.rc_stages = q;
    trial.rc_mlp_stages = j;
    int fits = trial.status == SEARCH_FIT;
    if (fits && (best->status != SEARCH_FIT || trial.time_ms * SEARCH_TIME_RESOLUTION < best->time_ms)) {
        sched_free(best->sched);
        free(best->layers);
        *best = trial;
    } else {
        sched_free(trial.sched);
        free(trial.layers);
    }
    return pruned || fits;
}

/* The MLP-level refinement of a by-stage recompute result *best (first q
 * stages in full): a recomputed layer costs its device a whole forward,
 * while the MLP level reruns three of its matmuls (about three quarters
 * of F on Llama-3 8B) and keeps the attention half's activations.  The
 * most of the last stages of the prefix (up to one round of pp) that may
 * drop to the MLP level and still fit is found by bisection on the plan
 * without passes (shared by the two variants, as the q bisection is); the
 * plan with passes is built there and one step lower (the time is not
 * monotone in j: each step moves one device's chunk, and the order's
 * bubble shifts with it), and the fastest that fits replaces *best when
 * it beats it. */
static int vocab_stage_mlp(search_state *st, const search_candidate *src, int variant,
                           search_candidate *best, zb_err *err)
{
    int q = best->rc_stages, lo = 0, hi = q < st->pp ? q : st->pp;
    /* Moving a stage from full to MLP-level recompute removes
     * (B_full − B_mlp) per layer and micro-batch from its device; with
     * the pass order fixed no start moves later and no end earlier by
     * more than the compute removed, so a plan cannot gain more than all
     * of it.  When even that leaves it at or above the time to beat (the
     * V family here: twice the winner's time), it is not refined. */
    search_config pc;
    if (search_config_init(st, &pc, src->micro_batch, 0, src->split, err) < 0) {
        search_config_free(&pc);
        return -1;
    }
    cost_part lf, lm, e2, h2;
    cost_options one = pc.copt;
    one.recompute_stage = NULL;
    one.recompute = COST_RC_FULL;
    int priced = cost_parts(&pc.model, &st->o->gpu, &one, &lf, &e2, &h2, NULL) == 0;
    one.recompute = COST_RC_MLP;
    priced = priced && cost_parts(&pc.model, &st->o->gpu, &one, &lm, &e2, &h2, NULL) == 0;
    double per_layer_ms = priced ? (lf.t_b - lm.t_b) * 1e3 : INFINITY;
    double layers = (double)pc.model.n_layers / src->n_stages;
    double removed = hi * ceil(layers) * pc.m * per_layer_ms;
    search_config_free(&pc);
    if (best->time_ms - removed >= st->vocab_beat)
        return 0;
    if (st->stage_mlp >= 0 && q == st->stage_q)
        lo = hi = st->stage_mlp;
    while (lo < hi) { /* largest j that fits */
        int mid = (lo + hi + 1) / 2, f = vocab_stage_fits(st, src, variant, q, mid, err);
        if (f < 0)
            return -1;
        if (f)
            lo = mid;
        else
            hi = mid - 1;
    }
    if (q == st->stage_q)
        st->stage_mlp = lo;
    for (int j = lo; j > 0 && j >= lo - 1; j--)
        if (vocab_stage_try(st, src, variant, q, j, best, err) < 0)
            return -1;
    return 0;
}

/* The by-stage recompute search of vocab_candidate: replaces *best (a
 * by-device result) when a version with the first q stages recomputing
 * fits and is faster. */
static int vocab_stage_rc(search_state *st, int src_index, const search_candidate *src, int variant,
                          search_candidate *best, zb_err *err)
{
    int S = src->n_stages, lo = 0, hi = S;
    if (st->stage_q_src == src_index)
        lo = hi = st->stage_q;
    while (lo < hi) { /* smallest q whose plan without passes fits */
        int mid = (lo + hi) / 2, f = vocab_stage_fits(st, src, variant, mid, 0, err);
        if (f < 0)
            return -1;
        if (f)
            hi = mid;
        else
            lo = mid + 1;
    }
    if (st->stage_q_src != src_index || st->stage_q != lo)
        st->stage_mlp = -1;
    st->stage_q_src = src_index;
    st->stage_q = lo;
    for (int q = lo; q < S && q <= lo + 3; q++) {
        int r = vocab_stage_try(st, src, variant, q, 0, best, err);
        if (r < 0)
            return -1;
        if (r > 0)
            break; /* more recompute only adds work */
    }
    if (best->status == SEARCH_FIT && best->rc_stages > 0 && best->rc_mlp_stages == 0)
        return vocab_stage_mlp(st, src, variant, best, err);
    return 0;
}

/* The vocabulary-parallel version of candidate src (its op order kept),
 * appended as "<label> +vocab-N".  The passes and the even split move
 * memory between devices, so src's recompute setting may no longer fit:
 * recompute on the first k devices is tried from src's k towards all of
 * them, halving the distance each time (k, (k+p)/2, ..., p), and the first
 * that fits (the fastest of those, as recompute only adds time) is kept,
 * or the last that did not. */
static int vocab_candidate(search_state *st, int src_index, int variant, zb_err *err)
{
    search_candidate src = st->r->c[src_index]; /* copy: the array may move */
    search_candidate best;
    memset(&best, 0, sizeof best);
    best.status = SEARCH_SKIPPED;
    search_config keep_cf;
    memset(&keep_cf, 0, sizeof keep_cf);
    /* k, then halfway to all, ...: a few settings, not every k.  With
     * --recompute off or on (o->recompute 0 or 1) the source's setting is
     * the only one: the user fixed it. */
    int k_last = st->o->recompute >= 0 ? src.rc_devices : st->pp;
    /* Once a plan that may win fits, a version over the limit can be
     * neither the answer nor the smallest peak a job that fits nothing
     * reports: when the floor its plan without passes proves is over the
     * limit, it is reported by that floor (vocab_build's code 2) instead
     * of being placed in full for its exact peak.  That full placement
     * was half the vocabulary versions' time on llama3-405b over 1,024
     * GPUs (zb-h1 and zb-h2 at pp=128 need 0.6 and 1.1 TB).  A version
     * the floor does not prove over is placed as before, so that what it
     * reports (a time, over the limit, or cut short) is what --exhaustive
     * reports.  --exhaustive places every one. */
    int settled = isfinite(st->vocab_beat) && !st->o->exhaustive;
    for (int k = src.rc_devices, next; k <= k_last; k = next) {
        next = k + ((st->pp - k + 1) / 2 > 0 ? (st->pp - k + 1) / 2 : 1);
        search_config cf;
        if (search_config_init(st, &cf, src.micro_batch, k, src.split, err) < 0) {
            search_config_free(&cf);
            sched_free(best.sched);
            free(best.layers);
            return -1;
        }
        search_candidate trial;
        memset(&trial, 0, sizeof trial);
        trial.peak_device = -1;
        /* a setting over the limit is reported only when it is the last */
        int built = vocab_build(st, &cf, &src, variant, next <= k_last, settled, st->vocab_beat, &trial);
        int pruned = built == 1 || built == 3;
        search_config_free(&cf);
        /* A skipped trial (a pruned one among them) is kept only while
         * nothing better was built: it keeps the reason. */
        if (best.status == SEARCH_SKIPPED || trial.status != SEARCH_SKIPPED) {
            sched_free(best.sched);
            free(best.layers);
            best = trial;
            best.rc_devices = k;
        } else {
            sched_free(trial.sched);
            free(trial.layers);
        }
        /* More recompute only adds work: it cannot help the busiest
         * device (code 1), and the search assumes it does not help a
         * placement either (code 3), as it stops at the first setting
         * that fits, however slow. */
        if (pruned) {
            st->r->vocab_pruned++;
            break;
        }
        if (best.status == SEARCH_FIT)
            break;
    }
    /* Interleaved and V plans: recompute by stage instead of by device.
     * Their later chunks hold activations briefly (the last chunk's B
     * follows its F after a short round trip), so leaving only those
     * without recompute balances the devices at a fraction of the
     * memory.  The fewest recomputed stages (first q in model order) that
     * fit is found by bisection on the plan without passes (its peak plus
     * the two logits shards a device may hold), then the passes are
     * placed at q and up to three more until one fits. */
    if (st->o->recompute < 0 && src.n_stages > st->pp && src.sched
        && vocab_stage_rc(st, src_index, &src, variant, &best, err) < 0) {
        sched_free(best.sched);
        free(best.layers);
        return -1;
    }
    /* The version reported over the limit was proven so without its
     * passes (a later setting was then cut short): built now, so that it
     * shows its own peak, unless a plan that may win already fits and
     * the floor proved it (its device known).  Over the limit in every
     * placement, it is built: its walks stopped at the limit, and built
     * whole they may first reach the best time, as --exhaustive finds. */
    int by_floor = best.peak_floor && best.peak_device >= 0;
    if (best.status == SEARCH_OOM && !best.sched && !(settled && by_floor)) {
        search_config cf;
        int rk = best.rc_devices;
        free(best.layers); /* the floor's; the build gives its own */
        if (search_config_init(st, &cf, src.micro_batch, rk, src.split, err) < 0) {
            search_config_free(&cf);
            return -1;
        }
        memset(&best, 0, sizeof best);
        best.peak_device = -1;
        vocab_build(st, &cf, &src, variant, 0, 0, st->vocab_beat, &best);
        search_config_free(&cf);
        best.rc_devices = rk;
    }
    search_config cf;
    if (search_config_init(st, &cf, src.micro_batch, best.rc_devices, src.split, err) < 0) {
        search_config_free(&cf);
        sched_free(best.sched);
        free(best.layers);
        return -1;
    }
    cf.rc_first_stages = best.rc_stages;
    cf.rc_mlp_stages = best.rc_mlp_stages;
    char label[40];
    snprintf(label, sizeof label, "%.28s +vocab-%d", src.label, variant);
    search_candidate *c = search_new_candidate(st, &cf, label, src.family, src.chunks, err);
    search_config_free(&cf);
    if (!c) {
        sched_free(best.sched);
        free(best.layers);
        return -1;
    }
    search_candidate base = *c; /* identity fields from new_candidate */
    *c = best;
    memcpy(c->label, base.label, sizeof c->label);
    memcpy(c->family, base.family, sizeof c->family);
    c->chunks = base.chunks;
    c->micro_batch = base.micro_batch;
    c->n_micro = base.n_micro;
    c->rc_devices = base.rc_devices;
    c->rc_stages = base.rc_stages;
    c->rc_mlp_stages = base.rc_mlp_stages;
    c->recompute = base.recompute;
    c->pp = base.pp;
    c->dp = base.dp;
    c->layout = base.layout;
    c->split = base.split;
    c->split_tuned = 0;
    c->seq = base.seq;
    c->targets = search_target_mask(c);
    search_tick(st);
    return 0;
}

/* Each label's best candidate of depth st->pp (as the split search picks
 * them, its tuned versions included), in both variants. */
int search_vocab_depth(search_state *st, zb_err *err)
{
    search_result *r = st->r;
    if (search_rank(r) < 0)
        return zb_fail(err, "out of memory");
    int n = r->n, n_pick = 0;
    int *pick = malloc(sizeof *pick * (size_t)(n ? n : 1));
    if (!pick)
        return zb_fail(err, "out of memory");
    /* The best fit that may win among the depths up to this one (fits
     * sort first, fastest first), one resolution up: a time that close
     * ties, and ties go to the lower peak.  The search builds every
     * depth's plain candidates before any version, so that a depth that
     * fits something also has its versions cut once they cannot come
     * within SEARCH_VOCAB_NEAR of the best plan of every depth: on
     * llama3-405b over 1,024 GPUs the versions of pp=64, 1.33x the
     * winner's time, were 12% of the search's instructions, each
     * placement walked to its end to lose to pp=64's own best by a
     * hair.  A depth where nothing fits keeps its versions: one of them
     * may fit. */
    st->vocab_beat = INFINITY;
    st->stage_q_src = -1;
    st->stage_mlp = -1;
    double near = INFINITY;
    int depth_fits = 0;
    for (int i = 0; i < r->n_fit; i++) {
        const search_candidate *c = &r->c[i];
        depth_fits |= search_of_depth(st, c);
        if (st->o->vocab == SEARCH_VOCAB_PARALLEL && !c->vocab)
            continue;
        if (!isfinite(near))
            near = c->time_ms * SEARCH_VOCAB_NEAR;
        if (!isfinite(st->vocab_beat) && c->pp <= st->pp)
            st->vocab_beat = c->time_ms * SEARCH_TIME_RESOLUTION;
    }
    st->vocab_near = depth_fits && near < st->vocab_beat;
    if (st->vocab_near)
        st->vocab_beat = near;
    for (int i = 0; i < n; i++) {
        const search_candidate *c = &r->c[i];
        if (!search_of_depth(st, c) || c->status == SEARCH_SKIPPED || !c->sched || c->vocab)
            continue;
        int dup = 0;
        for (int k = 0; k < n_pick && !dup; k++)
            dup = !strcmp(r->c[pick[k]].label, c->label);
        if (!dup)
            pick[n_pick++] = i;
    }
    int rc = 0;
    for (int k = 0; k < n_pick && rc == 0; k++)
        for (int variant = 1; variant <= 2 && rc == 0; variant++)
            rc = vocab_candidate(st, pick[k], variant, err);
    free(pick);
    return rc;
}
