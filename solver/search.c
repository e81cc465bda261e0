/*
 * search.c: enumerate, cost, simulate and rank pipeline plans under a
 * memory limit (search.h; docs/search.md).
 *
 * One "config" is a pipeline depth p (with data-parallel width N/p), a
 * micro-batch size b, a recompute setting (the first k devices recompute)
 * and a layer-split rule.  For each config the cost model gives per-stage
 * times and memory on the plain placement (one stage per device) and on
 * the V placement; every family is then built, re-costed on its own
 * placement (interleaving changes the layer split), validated and
 * simulated.  Generators see uniform costs (they only order ops); the
 * simulator sees the real per-stage ones, so the figures include the
 * embedding's and the head's extra time and memory.  The V solvers and
 * zb-auto see the per-stage costs themselves.
 *
 * After all configs of one depth ran, the best candidate of each family
 * gets a local search over the layer split (search_split.c), and then
 * (search_options.vocab) each label's best of the depth gets
 * vocabulary-parallel versions, Vocab-1 and Vocab-2 (search_vocab.c).
 * Both work through the helpers search_state.h declares, so that every
 * candidate is priced, simulated and ranked here, one way.  A depth whose
 * static memory alone is over the limit is not built at all
 * (depth_holds_static).
 *
 * Before a family is built on a config, placement_bound bounds the time
 * (if it fits) and the peak memory of any schedule on its placement from
 * the costs alone; a candidate whose bounds already lose to its label's
 * best at this depth under every target that runs it is not built
 * (search_prune.c says why per label and target: every best the search
 * reports stays; --exhaustive builds them all).  settle() asserts each
 * simulated candidate against its bounds.  The three V variants of one
 * placement share their greedy list runs (solver_greedy_memo), and the
 * V-Min and V-Half patterns, which depend on p and m only, are laid out
 * once per shape and search (v_pattern_cache).
 *
 * Candidates are kept in one growing array.  Only the schedules of the
 * best few survive (and those of each family's best, which the local
 * search starts from): the rest are freed as soon as they are ranked, so
 * memory stays at a few dozen schedules however many candidates run.
 */
#include "solver/search.h"
#include "solver/search_state.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schedules/gen.h"
#include "solver/solver.h"
#include "solver/solver_internal.h"
#include "src/cost_vocab.h"
#include "src/size.h"
#include "src/validate.h"

/* zb-auto limits, as multiples of p * M_B of the device's own stage; 0 is
 * "the largest that fits" (memory limit minus the device's static memory). */
static const double zb_auto_k[] = { 1.0, 1.5, 2.0, 0.0 };
#define N_ZB_AUTO (int)(sizeof zb_auto_k / sizeof zb_auto_k[0])

/* The most virtual stages per device the interleaved family tries.  Each
 * chunk needs a layer, so a deep model allowed hundreds of candidates of
 * p * v stages each (10,000 layers on 8 GPUs: v up to 1,250, 5.9 GB and
 * minutes); past a few chunks interleaving only adds communication
 * (Megatron-LM's interleaved schedule is used with small v), so the
 * family stops at 8. */
#define SEARCH_MAX_CHUNKS 8

/* The most ops one candidate schedule may have.  A candidate is built,
 * validated and simulated in memory linear in its ops (~100 bytes each
 * with the simulator's arrays); 1,000,000 (p=64, m=2,600 at one stage per
 * device) keeps each under ~100 MB and a few seconds, where 1,024 GPUs
 * at m=4,096 (12.6 million ops) grew without visible end. */
#define SEARCH_MAX_OPS 1000000

/* Largest interleaving degree tried for model m on p devices. */
static int search_max_chunks(const zb_model *m, int p)
{
    int v = p > 1 ? (m->n_layers + 2) / p : 1;
    return v < SEARCH_MAX_CHUNKS ? v : SEARCH_MAX_CHUNKS;
}

void search_options_default(search_options *o)
{
    memset(o, 0, sizeof *o);
    model_preset("llama3-8b", &o->model, NULL);
    gpu_preset("H100-80G", &o->gpu, NULL);
    o->mem_bytes = 40e9;
    o->n_devices = 0;
    o->n_gpus = 8;
    o->split_search = 1;
    o->global_batch = 64;
    o->recompute = -1;
    o->flash_attention = 1;
    o->split = COST_SPLIT_BALANCED;
    o->zero1_dp = 1;
    o->max_micro_batch = 64;
    o->ilp_top = 3;
    o->ilp_time_limit = 10;
    o->vocab = SEARCH_VOCAB_PLAIN; /* the CLI defaults to SEARCH_VOCAB_AUTO (zbsched search --vocab auto) */
    o->tp = o->cp = o->zero = 1;   /* the plain layout; 0 searches a dimension (search_layouts) */
    o->offload = 0;
    o->sp = 1;
    o->tp_comm_overlap = 1;
}

void search_result_free(search_result *r)
{
    if (!r)
        return;
    for (int i = 0; i < r->n; i++) {
        sched_free(r->c[i].sched);
        free(r->c[i].layers);
    }
    free(r->c);
    sched_free(r->baseline.sched);
    free(r->baseline.layers);
    memset(r, 0, sizeof *r);
}

/* A lower bound of device d's span in any schedule on placement s (costed;
 * any placement): its busy time, m (F+B+W) of its stages, plus the idle
 * the pipeline's round trip forces on it.  Let s_d be d's first stage in
 * model order.  Between the end of F(s_d, j) and the start of B(s_d, j)
 * lies the round trip C: every later stage's F and B of micro-batch j,
 * and t_comm at each change of device (the simulator's arrival rule).
 * Take j the micro-batch of the first B on s_d: in that window d can run
 * neither a B nor a W of s_d, nor F(s_d, j) itself, so it idles at least C
 * minus the rest of its work.  Take j the micro-batch of the last F on
 * s_d: in that window d can run no F of s_d, nor B(s_d, j) and W(s_d, j).
 * Both windows lie within d's span.  This is the fill and drain of a
 * pipeline with few micro-batches (m = 2 on 32 devices idles most of
 * the span), which the busy time alone does not see.
 *
 * Memory bounds it too, for a schedule whose activations on d stay
 * within act_limit (INFINITY: none): F(s, j) on d holds its activations
 * at least from its end until B(s, j) may start, s's round trip later,
 * and d never holds more than act_limit, all within its span; so the
 * span is at least the sum over d's stages of m dF times the round trip,
 * over act_limit (Little's law: at most act_limit / dF micro-batches in
 * flight on a stage, each for a round trip).  This is what starves a deep
 * pipeline whose memory admits few micro-batches (Llama-3 70B on 32
 * H100s: a middle device's bound rises well above its work), which the
 * windows do not see. */
static double device_span_bound(const sched_t *s, int d, double act_limit)
{
    int S = s->n_stages, m = s->n_micro, first = -1;
    double busy = 0;
    for (int i = 0; i < S; i++)
        if (s->stage_device[i] == d) {
            if (first < 0)
                first = i;
            busy += m * (s->cost[i].t_f + s->cost[i].t_b + s->cost[i].t_w);
        }
    if (first < 0)
        return 0;
    double trip = 0;
    for (int k = first + 1; k < S; k++)
        trip += s->cost[k].t_f + s->cost[k].t_b + (s->stage_device[k] != s->stage_device[k - 1] ? 2 * s->t_comm : 0);
    const stage_cost *c = &s->cost[first];
    double head_work = busy - m * (c->t_b + c->t_w) - c->t_f; /* what d may run before its first B of s_d */
    double tail_work = busy - m * c->t_f - c->t_b - c->t_w;   /* ... after its last F of s_d */
    double idle = fmax(0, trip - fmin(head_work, tail_work));
    double span = busy + idle;
    if (isfinite(act_limit) && act_limit > 0) {
        double area = 0, after = 0; /* after: the round trip of stage k, built from the last stage down */
        for (int k = S - 1; k >= first; k--) {
            if (s->stage_device[k] == d && s->cost[k].d_f > 0)
                area += m * s->cost[k].d_f * after;
            after += s->cost[k].t_f + s->cost[k].t_b +
                     (k > 0 && s->stage_device[k] != s->stage_device[k - 1] ? 2 * s->t_comm : 0);
        }
        span = fmax(span, area / act_limit);
    }
    return span;
}

/* A lower bound of device d's peak memory (static plus activations) in
 * any schedule on placement s (costed).  Micro-batch 0's F on every stage
 * of d precedes its B on d's last stage, which is its first B on d (the
 * backward runs down the stages): at that moment d holds dF of each of
 * its stages for it.  Every other micro-batch holds on each stage one of
 * its partial sums (0, dF, dF+dB, dF+dB+dW), the smallest of which, when
 * negative (never, with the cost model's deltas), is charged to all m-1. */
static double device_peak_bound(const sched_t *s, int d)
{
    double act = 0, other = 0;
    for (int i = 0; i < s->n_stages; i++)
        if (s->stage_device[i] == d) {
            const stage_cost *c = &s->cost[i];
            act += c->d_f;
            other += fmin(0, fmin(c->d_f, fmin(c->d_f + c->d_b, c->d_f + c->d_b + c->d_w)));
        }
    return s->mem_static[d] + fmax(0, act + (s->n_micro - 1) * other);
}

/* A lower bound of the time of any fitting schedule on placement s (costed
 * under cf, with split layers or the rule's when NULL): the largest over
 * devices of device_span_bound plus the data-parallel sync the device
 * cannot hide (search_dp_exposed_all, which reads the costs only): both step
 * rules' times hold some device's span plus its exposed sync.  With one
 * stage per device (one_per_device) the stage bound of bound.c counts too:
 * it adds the idle a stage's memory limit (the memory minus its static
 * memory; a schedule over it does not fit) forces before its first B and
 * after its last F; device_span_bound's memory terms read the same limit.
 * Stores it in *bound_ms, and in *peak_bytes the largest over devices of
 * device_peak_bound.  Both 0 when the parameters cannot be costed
 * (nothing is then pruned). */
static void placement_bound(const search_state *st, search_config *cf, const int *layers, const sched_t *s,
                            int one_per_device, double *bound_ms, double *peak_bytes)
{
    int P = s->n_devices;
    double *exposed = malloc(sizeof *exposed * (size_t)P), *limit = malloc(sizeof *limit * (size_t)P);
    zb_err e2 = { { 0 } };
    *bound_ms = *peak_bytes = 0;
    if (!exposed || !limit || search_dp_exposed_all(st, cf, layers, s, exposed, &e2) < 0) {
        free(exposed);
        free(limit);
        return;
    }
    assert(!one_per_device || s->n_stages == P);
    for (int d = 0; d < P; d++)
        limit[d] = st->o->mem_bytes - s->mem_static[d];
    solver_problem pr = { .p = P, .m = s->n_micro, .cost = s->cost, .t_comm = s->t_comm, .limit = limit };
    double bound = 0, peak = 0;
    for (int d = 0; d < P; d++) {
        double span = device_span_bound(s, d, limit[d]);
        if (one_per_device)
            span = fmax(span, solver_stage_lower_bound(&pr, d));
        bound = fmax(bound, span + exposed[d]);
        peak = fmax(peak, device_peak_bound(s, d));
    }
    free(exposed);
    free(limit);
    *bound_ms = bound;
    *peak_bytes = peak;
}

/* 1 when st prunes at all: not with --exhaustive, nor with the ILP,
 * which refines the runners-up too. */
static int search_prunes(const search_state *st)
{
    return !st->o->exhaustive && !st->o->ilp;
}

/* Takes candidate c, the last one created, back off the list (with the
 * layers it holds) and counts it in n_pruned. */
static void take_back_pruned(search_state *st, search_candidate *c)
{
    assert(c == &st->r->c[st->r->n - 1]);
    free(c->layers);
    c->layers = NULL;
    st->r->n--;
    st->next_seq--;
    st->r->n_pruned++;
    search_tick(st);
}

/* 1 when candidate c, just created by new_candidate on cf, need not be
 * built: cf's bounds lose to the best of c's label under every target
 * that runs c (search_prune_loses).  It is then taken back off the list
 * (take_back_pruned). */
static int pruned(search_state *st, const search_config *cf, search_candidate *c)
{
    if (!(cf->bound_ms > 0 || cf->peak_bound > 0) ||
        !search_prune_loses(&st->prune, c->label, c->targets, cf->bound_ms, cf->peak_bound, st->o->mem_bytes))
        return 0;
    take_back_pruned(st, c);
    return 1;
}

/* Records evaluated candidate c among its label's bests and checks that
 * the bound it was built under holds. */
static void settle(search_state *st, const search_config *cf, const search_candidate *c)
{
    /* The bound is a lower bound of every fitting schedule's time on its
     * placement; a fit faster than it means the bound (and what it
     * pruned) is wrong. */
    assert(c->status != SEARCH_FIT || !(cf->bound_ms > 0) ||
           c->async_ms >= cf->bound_ms * (1 - 1e-9) - 1e-9);
    assert(c->status == SEARCH_SKIPPED || c->peak_bytes >= cf->peak_bound * (1 - 1e-9));
    /* And every plan's peak holds the depth's static floor, else the
     * depths it skipped could have fitted. */
    assert(c->status == SEARCH_SKIPPED || c->peak_bytes >= st->static_floor * (1 - 1e-9));
    search_prune_note(&st->prune, c);
}

/* 1 when candidate c, its schedule s costed and validated, is over the
 * limit by its order's peak (search_plan_peak: the same prefix sums the
 * simulation takes, so its peak to the bit) and that peak already loses
 * to its label's best under every target that runs it (a fit, or a
 * smaller peak: search_prune_loses with the peak as its bound).  c is
 * then not simulated but taken back off the list (take_back_pruned), as
 * a candidate whose bounds lose before its build is: on llama3-70b over
 * 64 GPUs 1,826 of the 2,059 plans over the limit. */
static int pruned_by_peak(search_state *st, search_candidate *c, const sched_t *s)
{
    double peak = search_plan_peak(s);
    if (!(peak > st->o->mem_bytes) ||
        !search_prune_loses(&st->prune, c->label, c->targets, 0, peak, st->o->mem_bytes))
        return 0;
    take_back_pruned(st, c);
    return 1;
}

/* Costs, validates and simulates c's schedule s (taking ownership of s),
 * then fills c's figures.  A schedule the cost model, validator or
 * simulator rejects becomes a skipped candidate with their message.
 * With may_prune, a plan over the limit whose peak loses to its label's
 * best is not simulated (pruned_by_peak): returns 1, c off the list;
 * else 0. */
static int evaluate(search_state *st, search_config *cf, search_candidate *c, sched_t *s, const int *layers,
                    int may_prune)
{
    zb_err e2 = { { 0 } };
    int S = s->n_stages;
    c->n_stages = S;
    c->layers = malloc(sizeof *c->layers * (size_t)S);
    cost_options co = cf->copt;
    co.layers = layers;
    c->split_tuned = layers != NULL;
    int built = c->layers && search_cost_sched(st, cf, layers, s, &e2) == 0 &&
                cost_split_layers(&cf->model, &st->o->gpu, &co, S, c->layers, &e2) == 0;
    /* A plan pruned by its peak is not validated either: its peak reads
     * only its ops' kinds and stages, which sched_push asserts in range
     * (generators and solvers are trusted code; --exhaustive, which
     * prunes nothing, still validates every plan). */
    if (built && may_prune && pruned_by_peak(st, c, s)) {
        sched_free(s);
        return 1;
    }
    built = built && sched_validate_static(s, &e2) == 0;
    /* The simulation finds a deadlock itself; the validator's walk runs
     * only then, to name the stuck ops. */
    if (built && search_measure(st, cf, layers, c, s, &e2) < 0) {
        zb_err e3 = { { 0 } };
        if (sched_validate(s, &e3) < 0)
            e2 = e3;
        built = 0;
    }
    if (!built) {
        search_skip(c, e2.msg[0] ? e2.msg : "out of memory");
        sched_free(s);
        return 0;
    }
    c->sched = s;
    return 0;
}

/* The memo key of candidate c's build on cf: placement pl (costed; NULL:
 * none known, no memo), the limits it plans under (p of them, or NULL)
 * and a generator's parameters (NULL for a solver). */
static search_build_key build_key(const search_config *cf, const search_candidate *c, const sched_t *pl,
                                  const double *limit, const gen_params *gp)
{
    return (search_build_key){ .label = c->label, .chunks = c->chunks, .b = cf->b, .m = cf->m,
                               .rc_devices = cf->rc_devices, .rc_stages = cf->rc_first_stages,
                               .rc_mlp = cf->rc_mlp_stages, .placement = pl,
                               .n_limit = limit && pl ? pl->n_devices : 0, .limit = limit, .gp = gp };
}

/* 1 when this depth already built a candidate with key k: c, just created
 * by new_candidate, takes its figures and a copy of its layers (no
 * schedule: search_memo.c says why none is needed), and is settled and
 * counted; or, when that build was pruned, c is taken back off the list
 * as it was.  --exhaustive builds every candidate, so that the tests can
 * compare the twins with their own builds. */
static int memo_hit(search_state *st, const search_config *cf, search_candidate *c, const search_build_key *k,
                    int split_tuned)
{
    if (!k->placement || st->o->exhaustive)
        return 0;
    const search_candidate *f = search_memo_find(st->memo, k);
    if (!f)
        return 0;
    if (f == &search_memo_pruned) { /* its twin was pruned: so is it */
        take_back_pruned(st, c);
        return 1;
    }
    int *layers = NULL;
    if (f->layers) {
        layers = malloc(sizeof *layers * (size_t)f->n_stages);
        if (!layers)
            return 0; /* built instead */
        memcpy(layers, f->layers, sizeof *layers * (size_t)f->n_stages);
    }
    int seq = c->seq;
    cost_split split = c->split;
    *c = *f;
    c->seq = seq;
    c->split = split;
    c->split_tuned = f->n_stages > 0 && split_tuned; /* as evaluate sets it, when the build got that far */
    c->layers = layers;
    c->sched = NULL;
    c->targets = search_target_mask(c);
    st->r->n_reused++;
    settle(st, cf, c);
    search_tick(st);
    return 1;
}

/* Keeps built candidate c under key k for its twins, or (c NULL) that
 * its build was pruned (nothing when memory runs out: they are then
 * built). */
static void memo_keep(search_state *st, const search_build_key *k, const search_candidate *c)
{
    if (k->placement && !st->o->exhaustive)
        c ? search_memo_add(st->memo, k, c) : search_memo_add_pruned(st->memo, k);
}

/* 1 when st searches a layout beyond PP x DP for Megatron-LM: only its
 * families (1F1B, interleaved 1F1B) and global recompute settings are
 * built (torchtitan, the other engine that runs such layouts, is not the
 * one ranked). */
static int megatron_layout(const search_state *st)
{
    return layout_is_extended(&st->layout) && st->o->target == SEARCH_TARGET_MEGATRON;
}

/* Runs one generator-built family on placement pl (costed under cf with
 * layers, an explicit split, or the rule's when NULL; pl NULL when not
 * costed: no memo). */
static int run_gen_split(search_state *st, search_config *cf, const char *label, const char *kind,
                         int chunks, double *limit, const int *layers, const sched_t *pl, zb_err *err);
static int run_gen(search_state *st, search_config *cf, const char *label, const char *kind,
                   int chunks, double *limit, const sched_t *pl, zb_err *err)
{
    return run_gen_split(st, cf, label, kind, chunks, limit, NULL, pl, err);
}

static int run_gen_split(search_state *st, search_config *cf, const char *label, const char *kind,
                         int chunks, double *limit, const int *layers, const sched_t *pl, zb_err *err)
{
    search_candidate *c = search_new_candidate(st, cf, label, kind, chunks, err);
    if (!c)
        return -1;
    if (pruned(st, cf, c))
        return 0;
    gen_fn fn = gen_lookup(kind);
    gen_params gp = cf->gp;
    gp.chunks = chunks;
    gp.mem_limit = limit;
    search_build_key key = build_key(cf, c, pl, limit, &gp);
    if (memo_hit(st, cf, c, &key, layers != NULL))
        return 0;
    sched_t *s = NULL;
    zb_err e2 = { { 0 } };
    if (!fn)
        search_skip(c, "generator not available in this build");
    else if (fn(&gp, &s, &e2) < 0)
        search_skip(c, e2.msg);
    else if (evaluate(st, cf, c, s, layers, search_prunes(st)) > 0) {
        memo_keep(st, &key, NULL);
        return 0;
    }
    settle(st, cf, c);
    memo_keep(st, &key, c);
    search_tick(st);
    return 0;
}

/* The V solvers, in the order they are run on one placement. */
static const char *const v_labels[] = { "v-min", "v-half", "v-zb" };
#define N_V_LABELS (sizeof v_labels / sizeof v_labels[0])

/* Runs a V solver on the V placement's per-stage costs and limits; memo
 * keeps its greedy list runs for the next variant on the same vt. */
static int run_v_solver(search_state *st, search_config *cf, const sched_t *vt, const int *layers,
                        const char *label, const double *limit, solver_greedy_memo *memo, zb_err *err)
{
    search_candidate *c = search_new_candidate(st, cf, label, label, 2, err);
    if (!c)
        return -1;
    if (pruned(st, cf, c))
        return 0;
    search_build_key key = build_key(cf, c, vt, limit, NULL);
    if (memo_hit(st, cf, c, &key, layers != NULL))
        return 0;
    sched_t *s = NULL;
    zb_err e2 = { { 0 } };
    /* An order costing what already loses to its label's best is of no
     * use: the solver gives up on its runs there, and when it finds
     * nothing cheaper the candidate is pruned as its bounds would have
     * been (its time, async or sync, is at least the order's cost).  The
     * three variants share the greedy's runs (memo), so the runs are
     * given up only where all three labels lose: then the next variant
     * finds them given up in the memo instead of running them again. */
    double beat = search_prunes(st) ? 0 : INFINITY;
    for (size_t i = 0; i < N_V_LABELS && beat < INFINITY; i++)
        beat = fmax(beat, search_prune_lose_ms(&st->prune, v_labels[i], c->targets));
    int solved = solver_v_costs_memo(label, vt, limit, memo, st->patterns, beat, &s, &e2);
    if (solved > 0) {
        take_back_pruned(st, c);
        memo_keep(st, &key, NULL);
        return 0;
    }
    if (solved < 0)
        search_skip(c, e2.msg);
    else if (evaluate(st, cf, c, s, layers, search_prunes(st)) > 0) {
        memo_keep(st, &key, NULL);
        return 0;
    }
    settle(st, cf, c);
    memo_keep(st, &key, c);
    search_tick(st);
    return 0;
}

/* zb-auto (and the ILP) on the plain placement's per-stage costs; memo
 * keeps zb-auto's knob runs for the next label on the same costs (NULL:
 * none). */
static int run_per_stage(search_state *st, search_config *cf, const char *label, const char *family,
                         const double *limit, int ilp, solver_zb_auto_memo *memo, zb_err *err)
{
    search_candidate *c = search_new_candidate(st, cf, label, family, 1, err);
    if (!c)
        return -1;
    if (!ilp && pruned(st, cf, c))
        return 0;
    search_build_key key = build_key(cf, c, ilp ? NULL : cf->plain, limit, NULL);
    if (memo_hit(st, cf, c, &key, 0))
        return 0;
    solver_problem pr = { .p = st->pp, .m = cf->m, .cost = cf->plain->cost,
                          .t_comm = cf->plain->t_comm, .limit = limit };
    sched_t *s = NULL;
    zb_err e2 = { { 0 } };
    int rc = ilp ? solver_ilp_costs(&pr, st->o->ilp_time_limit, &s, &e2)
                 : solver_zb_auto_costs_memo(&pr, memo, &s, NULL, &e2);
    if (rc < 0)
        search_skip(c, e2.msg);
    else if (evaluate(st, cf, c, s, NULL, !ilp && search_prunes(st)) > 0) {
        memo_keep(st, &key, NULL);
        return 0;
    }
    settle(st, cf, c);
    memo_keep(st, &key, c);
    search_tick(st);
    return 0;
}

/* Fills limit[d] = mem - static(d) for sched s's placement; returns the
 * smallest headroom (negative when static memory alone does not fit). */
static double headroom(const search_options *o, const sched_t *s, double *limit)
{
    double least = INFINITY;
    for (int d = 0; d < s->n_devices; d++) {
        limit[d] = o->mem_bytes - s->mem_static[d];
        if (limit[d] < least)
            least = limit[d];
    }
    return least;
}

/* The interleaved zero-bubble kind joins the families when its generator
 * is linked in (gen_lookup finds it); until then it is not listed. */
#define INTERLEAVED_ZB_KIND "interleaved-zb"

/* The V family on the light-ends split (see run_config). */
static int run_v_light(search_state *st, search_config *cf, double *limit, zb_err *err)
{
    int p = st->pp, S = 2 * p, L = cf->model.n_layers;
    if (S - 2 > L)
        return 0;
    int *layers = malloc(sizeof *layers * (size_t)S);
    sched_t *vt = sched_new(p, cf->m, S);
    int rc = -1;
    if (!layers || !vt) {
        zb_fail(err, "out of memory");
        goto out;
    }
    layers[0] = layers[S - 1] = 0;
    for (int i = 1; i < S - 1; i++)
        layers[i] = L / (S - 2) + (S - 1 - i <= L % (S - 2)); /* remainder to the later stages */
    sched_place_v(vt);
    zb_err e2 = { { 0 } };
    if (search_cost_sched(st, cf, layers, vt, &e2) < 0) {
        rc = 0; /* this split does not apply; the others stand */
        goto out;
    }
    headroom(st->o, vt, limit);
    for (int d = 0; d < p; d++)
        if (limit[d] < 0)
            limit[d] = 0;
    cf->bound_ms = cf->peak_bound = 0;
    if (search_prunes(st))
        placement_bound(st, cf, layers, vt, 0, &cf->bound_ms, &cf->peak_bound);
    if (run_gen_split(st, cf, "zb-v", "zb-v", 2, NULL, layers, vt, err) < 0)
        goto out;
    solver_greedy_memo memo = { 0 };
    for (size_t i = 0; i < N_V_LABELS; i++)
        if (run_v_solver(st, cf, vt, layers, v_labels[i], limit, &memo, err) < 0) {
            solver_greedy_memo_free(&memo);
            goto out;
        }
    solver_greedy_memo_free(&memo);
    rc = 0;
out:
    free(layers);
    sched_free(vt);
    return rc;
}

static int run_config(search_state *st, search_config *cf, zb_err *err)
{
    const search_options *o = st->o;
    int p = st->pp;
    /* The V family has 2p stages: 6 p m ops.  Past the cap the whole
     * configuration is one skipped candidate, built never. */
    if (6.0 * p * cf->m > SEARCH_MAX_OPS) {
        search_candidate *c = search_new_candidate(st, cf, "(all families)", "none", 1, err);
        if (!c)
            return -1;
        char why[160];
        snprintf(why, sizeof why, "p=%d, m=%d: schedules of up to %.0f ops, above the search's cap of %d; "
                 "use a larger micro-batch or fewer GPUs", p, cf->m, 6.0 * p * cf->m, SEARCH_MAX_OPS);
        search_skip(c, why);
        search_tick(st);
        return 0;
    }
    double *limit = malloc(sizeof *limit * (size_t)p);
    if (!limit)
        return zb_fail(err, "out of memory");
    int rc = -1;
    solver_zb_auto_memo zmemo = { 0 }; /* zb-auto's knob runs, shared by its labels */
    /* Lower bounds of each placement's families (placement_bound), which
     * skip the candidates that cannot beat their label's best; none with
     * the ILP, which refines the runners-up too. */
    int prune_on = search_prunes(st);
    double plain_ms = 0, plain_peak = 0;
    if (prune_on)
        placement_bound(st, cf, NULL, cf->plain, 1, &plain_ms, &plain_peak);

    cf->bound_ms = plain_ms;
    cf->peak_bound = plain_peak;
    if (run_gen(st, cf, "1f1b", "1f1b", 1, NULL, cf->plain, err) < 0)
        goto out;
    int vmax = search_max_chunks(&cf->model, p);
    while (vmax > 1 && 3.0 * p * vmax * cf->m > SEARCH_MAX_OPS)
        vmax--;
    /* Every stage at the MLP level is Megatron-LM's global selective
     * recompute: it is tried with the families Megatron runs (1F1B and
     * interleaved 1F1B); the others have per-device and per-stage
     * settings of their own. */
    int mlp_all = cf->rc_mlp_stages == SEARCH_RC_ALL;
    /* A layout beyond PP x DP runs on torchtitan and Megatron-LM only;
     * searched for Megatron, its families are all it needs to build (the
     * other targets' rows then show their best of the plain layout and
     * of what Megatron's families give them): a third of the work. */
    int megatron_only = megatron_layout(st);
    int izb = !mlp_all && !megatron_only && gen_lookup(INTERLEAVED_ZB_KIND) != NULL;
    for (int v = 2; v <= vmax; v++) {
        char label[40];
        /* The interleaved placement's costs: the families' bound, and the
         * memory-limited variant's limit (memory minus each device's
         * static memory on this placement, in the deltas' bytes). */
        int ok = 0, costed = 0;
        sched_t *it = NULL; /* the placement, costed (the memo's key), or NULL */
        cf->bound_ms = cf->peak_bound = 0;
        if (izb || prune_on) {
            it = sched_new(p, cf->m, v * p);
            zb_err e2 = { { 0 } };
            if (!it) {
                zb_fail(err, "out of memory");
                goto out;
            }
            sched_place_interleaved(it);
            ok = costed = search_cost_sched(st, cf, NULL, it, &e2) == 0;
            if (ok && prune_on)
                placement_bound(st, cf, NULL, it, 0, &cf->bound_ms, &cf->peak_bound);
            ok = ok && headroom(o, it, limit) > 0;
        }
        const sched_t *pl = costed ? it : NULL;
        snprintf(label, sizeof label, "interleaved v=%d", v);
        int failed = run_gen(st, cf, label, "interleaved", v, NULL, pl, err) < 0;
        if (izb && !failed) {
            /* Its own memory rule, then its memory-limited variant at the
             * largest limit that fits. */
            snprintf(label, sizeof label, "interleaved-zb v=%d", v);
            failed = run_gen(st, cf, label, INTERLEAVED_ZB_KIND, v, NULL, pl, err) < 0;
            snprintf(label, sizeof label, "interleaved-zb v=%d max", v);
            failed = failed || (ok && run_gen(st, cf, label, INTERLEAVED_ZB_KIND, v, limit, pl, err) < 0);
        }
        sched_free(it);
        if (failed)
            goto out;
    }
    if (p == 1 || mlp_all || megatron_only) { /* one device: every family is the same sequence */
        rc = 0;
        goto out;
    }
    cf->bound_ms = plain_ms;
    cf->peak_bound = plain_peak;
    if (run_gen(st, cf, "zb-h1", "zb-h1", 1, NULL, cf->plain, err) < 0 ||
        run_gen(st, cf, "zb-h2", "zb-h2", 1, NULL, cf->plain, err) < 0)
        goto out;

    double room = headroom(o, cf->plain, limit);
    for (int k = 0; k < N_ZB_AUTO; k++) {
        char label[40];
        if (zb_auto_k[k] > 0) {
            snprintf(label, sizeof label, "zb-auto %gp", zb_auto_k[k]);
            /* M_B of the device's stage: what one micro-batch holds at
             * its largest (after F, or after B when recompute makes the
             * gradients kept for W larger than the checkpoint). */
            for (int d = 0; d < p; d++) {
                const stage_cost *sc = &cf->plain->cost[d];
                limit[d] = zb_auto_k[k] * p * fmax(sc->d_f, sc->d_f + sc->d_b);
            }
        } else {
            snprintf(label, sizeof label, "zb-auto max");
            room = headroom(o, cf->plain, limit);
            if (room <= 0) {
                search_candidate *c = search_new_candidate(st, cf, label, "zb-auto", 1, err);
                if (!c)
                    goto out;
                search_skip(c, "static memory alone exceeds the limit");
                search_tick(st);
                continue;
            }
        }
        if (run_per_stage(st, cf, label, "zb-auto", limit, 0, &zmemo, err) < 0)
            goto out;
    }

    if (!cf->vshape) {
        search_candidate *c = search_new_candidate(st, cf, "zb-v", "zb-v", 2, err);
        if (!c)
            goto out;
        search_skip(c, "too few layers for 2 stages per device");
        search_tick(st);
    } else {
        headroom(o, cf->vshape, limit);
        /* A device whose static memory already exceeds the limit gets 0
         * and the solver reports it. */
        for (int d = 0; d < p; d++)
            if (limit[d] < 0)
                limit[d] = 0;
        cf->bound_ms = cf->peak_bound = 0;
        if (prune_on)
            placement_bound(st, cf, NULL, cf->vshape, 0, &cf->bound_ms, &cf->peak_bound);
        if (run_gen(st, cf, "zb-v", "zb-v", 2, NULL, cf->vshape, err) < 0)
            goto out;
        solver_greedy_memo memo = { 0 };
        for (size_t i = 0; i < N_V_LABELS; i++)
            if (run_v_solver(st, cf, cf->vshape, NULL, v_labels[i], limit, &memo, err) < 0) {
                solver_greedy_memo_free(&memo);
                goto out;
            }
        solver_greedy_memo_free(&memo);
        /* The V puts the embedding and the head on device 0.  When that
         * is what overflows, the "light ends" split gives stages 0 and
         * 2p-1 no transformer layer, so device 0 holds only the two
         * vocabulary matrices and their activations. */
        if (o->split_search && cf->copt.split == o->split && run_v_light(st, cf, limit, err) < 0)
            goto out;
    }
    rc = 0;
out:
    solver_zb_auto_memo_free(&zmemo);
    cf->bound_ms = cf->peak_bound = 0;
    free(limit);
    return rc;
}

static int check_options(const search_options *o, zb_err *err)
{
    if (model_check(&o->model, err) < 0)
        return -1;
    if (!(o->mem_bytes > 0))
        return zb_fail(err, "the memory limit must be positive");
    if (o->n_gpus < 1 || o->n_gpus > 65536)
        return zb_fail(err, "the number of GPUs must be 1..65536, got %d", o->n_gpus);
    if (o->n_devices < 0 || o->n_devices > 1024)
        return zb_fail(err, "the number of pipeline devices must be 1..1024, got %d", o->n_devices);
    if (o->n_devices > 0 && o->n_gpus % o->n_devices != 0)
        return zb_fail(err, "%d pipeline devices do not divide %d GPUs", o->n_devices, o->n_gpus);
    if (o->nodes < 0 || (o->nodes > 0 && o->n_gpus % o->nodes != 0))
        return zb_fail(err, "%d nodes do not divide %d GPUs", o->nodes, o->n_gpus);
    if (o->global_batch < 1)
        return zb_fail(err, "the global batch must be positive, got %d", o->global_batch);
    if (o->n_devices > o->model.n_layers + 2)
        return zb_fail(err, "%d devices need at least %d layers; model '%s' has %d",
                       o->n_devices, o->n_devices - 2, o->model.name, o->model.n_layers);
    if (o->recompute < -1 || o->recompute > 1)
        return zb_fail(err, "recompute must be -1 (search), 0 or 1");
    if (o->zero1_dp < 1)
        return zb_fail(err, "the ZeRO-1 degree must be >= 1");
    if (o->max_micro_batch < 1)
        return zb_fail(err, "the largest micro-batch size must be >= 1");
    if (o->target < 0 || o->target >= SEARCH_N_TARGETS)
        return zb_fail(err, "unknown target %d", (int)o->target);
    if (o->vocab == SEARCH_VOCAB_PARALLEL && o->target != SEARCH_TARGET_ZBSCHED)
        return zb_fail(err, "%s runs no vocabulary-parallel plans; --vocab parallel needs --target zbsched",
                       search_target_name(o->target));
    if (!(o->gpu.peak_flops > 0) || !(o->gpu.link_bw > 0) || !(o->gpu.efficiency > 0))
        return zb_fail(err, "GPU '%s' needs positive peak_flops, link_bw and efficiency", o->gpu.name);
    return 0;
}

/* Micro-batch sizes tried: powers of two and the model's own b, each
 * dividing the per-replica batch and at most max_micro_batch. */
static int micro_batch_sizes(const search_options *o, int batch, int *sizes, int cap)
{
    int n = 0;
    if (o->micro_batch_fixed) { /* --micro-batch: that size only */
        int b = o->model.micro_batch;
        if (b <= batch && batch % b == 0 && cap > 0)
            sizes[n++] = b;
        return n;
    }
    for (int b = 1; b <= o->max_micro_batch && b <= batch && n < cap; b *= 2)
        if (batch % b == 0)
            sizes[n++] = b;
    int own = o->model.micro_batch;
    int have = 0;
    for (int i = 0; i < n; i++)
        have |= sizes[i] == own;
    if (!have && n < cap && own <= batch && batch % own == 0 && own <= o->max_micro_batch) {
        int i = n++;
        while (i > 0 && sizes[i - 1] > own) {
            sizes[i] = sizes[i - 1];
            i--;
        }
        sizes[i] = own;
    }
    return n;
}

/* The ILP on the plain placement of the best few distinct configs. */
static int run_ilp(search_state *st, zb_err *err)
{
    const search_options *o = st->o;
    search_result *r = st->r;
    if (search_rank(r) < 0)
        return zb_fail(err, "out of memory");
    int done = 0, n_seen = 0;
    int seen_b[64], seen_rc[64];
    int n_fit = r->n_fit;
    double *limit = malloc(sizeof *limit * (size_t)st->pp);
    if (!limit)
        return zb_fail(err, "out of memory");
    for (int i = 0; i < n_fit && done < o->ilp_top && n_seen < 64; i++) {
        const search_candidate *c = &r->c[i];
        if (!search_of_depth(st, c) || c->split_tuned || c->rc_mlp_stages == SEARCH_RC_ALL)
            continue;
        int b = c->micro_batch, rc = c->rc_devices, dup = 0;
        cost_split split = c->split;
        for (int k = 0; k < n_seen; k++)
            dup |= seen_b[k] == b && seen_rc[k] == rc;
        if (dup)
            continue;
        seen_b[n_seen] = b;
        seen_rc[n_seen++] = rc;
        search_config cf;
        if (search_config_init(st, &cf, b, rc, split, err) < 0) {
            search_config_free(&cf);
            free(limit);
            return -1;
        }
        headroom(o, cf.plain, limit);
        if (o->progress_stage) {
            char what[64];
            char rcs[16];
            if (rc <= 0 || rc >= st->pp)
                snprintf(rcs, sizeof rcs, "%s", rc <= 0 ? "off" : "on");
            else
                snprintf(rcs, sizeof rcs, "0-%d", rc - 1);
            snprintf(what, sizeof what, "ilp %d/%d on pp=%d, b=%d, recompute %s", done + 1,
                     o->ilp_top, st->pp, b, rcs);
            o->progress_stage(o->progress_ctx, what);
        }
        int ok = run_per_stage(st, &cf, "ilp", "ilp", limit, 1, NULL, err);
        search_config_free(&cf);
        if (ok < 0) {
            free(limit);
            return -1;
        }
        done++;
    }
    free(limit);
    return 0;
}

/* Every config of pipeline depth st->pp. */
/* Whether the depth being searched can hold the model at all: when its
 * static floor (cost_static_floor: the layers' weights, gradients and
 * optimizer state spread evenly, and the reserve) exceeds the limit, no
 * plan of any family, split, recompute or micro-batch fits there, so
 * none is built (a 405B model on 512 GPUs: every depth up to 32, half
 * the search's time; --exhaustive builds them).  The depth is then one
 * skipped candidate carrying the floor, for the why block and the
 * "nothing fits" line.  Sets
 * st->static_floor; returns 1 when the depth fits, 0 when it was
 * skipped, -1 with err. */
static int depth_holds_static(search_state *st, int b, zb_err *err)
{
    const search_options *o = st->o;
    cost_options co;
    search_cost_options_for(o, st, o->split, &co);
    zb_model m = o->model;
    m.micro_batch = b;
    if (cost_static_floor(&m, &o->gpu, &co, st->pp, &st->static_floor, err) < 0)
        return -1;
    if (!(st->static_floor > o->mem_bytes) || o->exhaustive)
        return 1;
    search_config cf = { .b = b, .m = o->global_batch / st->dp / b };
    cf.copt.split = o->split;
    search_candidate *c = search_new_candidate(st, &cf, "(every plan)", "none", 1, err);
    if (!c)
        return -1;
    char need[32], lim[32];
    zb_size_format(st->static_floor, need, sizeof need);
    zb_size_format(o->mem_bytes, lim, sizeof lim);
    char why[200];
    snprintf(why, sizeof why, "pp=%d x dp=%d: the weights, gradients and optimizer state alone take at least "
             "%s per device > limit %s; no plan of this depth was built", st->pp, st->dp, need, lim);
    search_skip(c, why);
    c->static_floor = 1;
    c->static_bytes = st->static_floor;
    search_tick(st);
    return 0;
}

static int run_depth(search_state *st, zb_err *err)
{
    const search_options *o = st->o;
    search_prune_clear(&st->prune); /* label bests are per depth and layout */
    search_memo_clear(st->memo);     /* and so are the builds */
    int sizes[32];
    int batch = o->global_batch / st->dp;
    int n_sizes = micro_batch_sizes(o, batch, sizes, 32);
    int p = st->pp;
    st->static_floor = 0;
    if (n_sizes > 0) {
        int holds = depth_holds_static(st, sizes[0], err);
        if (holds <= 0)
            return holds;
    }
    int rc_list[4], n_rc = 0;
    if (o->recompute <= 0)
        rc_list[n_rc++] = 0;
    if (o->recompute != 0)
        rc_list[n_rc++] = p;
    /* First k devices recompute: they hold the most micro-batches in
     * flight.  Every k for p <= 8; k = p/8, 2p/8, ..., 7p/8 beyond. */
    int partial[8], n_partial = 0;
    /* Beyond PP x DP only Megatron-LM and torchtitan run a layout, and
     * both recompute every stage alike: per-device settings are built
     * for the plain layout only. */
    int ext = layout_is_extended(&st->layout);
    if (o->recompute < 0 && !ext)
        for (int q = 1; q <= 7; q++) {
            int k = p <= 8 ? q : (p * q + 4) / 8;
            if (k > 0 && k < p && (n_partial == 0 || partial[n_partial - 1] != k))
                partial[n_partial++] = k;
        }
    cost_split splits[2] = { o->split, o->split == COST_SPLIT_BALANCED ? COST_SPLIT_PAPER : COST_SPLIT_BALANCED };
    int n_splits = o->split_search ? 2 : 1;
    /* With recompute searched, also every stage at the MLP level: the
     * global selective setting Megatron-LM offers (its mlp and layernorm
     * modules), which zbsched and torch run too. */
    int n_mlp = o->recompute < 0 && !(ext && o->target == SEARCH_TARGET_TORCHTITAN); /* it has no MLP level */
    for (int i = 0; i < n_sizes; i++) {
        for (int si = 0; si < n_splits; si++) {
            for (int ri = 0; ri < n_rc + n_partial + n_mlp; ri++) {
                int mlp = ri == n_rc + n_partial;
                int k = mlp ? 0 : ri < n_rc ? rc_list[ri] : partial[ri - n_rc];
                search_config cf;
                if (search_config_init_rc(st, &cf, sizes[i], k, mlp ? SEARCH_RC_ALL : 0, mlp ? SEARCH_RC_ALL : 0,
                                   splits[si], err) < 0 || run_config(st, &cf, err) < 0) {
                    search_config_free(&cf);
                    return -1;
                }
                search_config_free(&cf);
            }
            /* Drop schedules early so memory stays bounded. */
            if (search_rank(st->r) < 0)
                return zb_fail(err, "out of memory");
        }
    }
    if (o->split_search && search_tune_depth(st, err) < 0)
        return -1;
    return 0;
}

/* The second pass over depth st->pp, once every depth's plain candidates
 * are built: its vocabulary-parallel versions, then the ILP. */
static int run_depth_vocab(search_state *st, zb_err *err)
{
    const search_options *o = st->o;
    /* Over one device there is nothing to split the vocabulary over. */
    if (o->vocab && st->pp > 1 && !layout_is_extended(&st->layout) && search_vocab_depth(st, err) < 0)
        return -1;
    if (o->ilp && !layout_is_extended(&st->layout) && run_ilp(st, err) < 0)
        return -1;
    return 0;
}

/* Sets st's depth p, width N/p and how they map onto nodes: a
 * data-parallel group takes consecutive GPUs (its gradient traffic is the
 * largest), so pipeline neighbours are dp GPUs apart. */
static void set_depth(search_state *st, int p)
{
    const search_options *o = st->o;
    st->pp = p;
    st->dp = st->n_gpus / p;
    int per_node = o->nodes > 0 ? o->n_gpus / o->nodes : gpu_per_node(&o->gpu);
    if (per_node < 1)
        per_node = 1;
    /* Ranks in Megatron's order: TP fastest, then CP, then DP, then PP. */
    int inner = st->layout.tp * st->layout.cp;
    st->dp_intra = (long)st->dp * inner <= per_node;
    st->devices_per_node = (long)st->dp * inner >= per_node ? 1 : per_node / (st->dp * inner);
}

/* The baseline: plain 1F1B, b=1, recompute on every stage, the default
 * split, on the deepest pipeline that --gpus alone used to mean. */
static int run_baseline(search_state *st, int p, zb_err *err)
{
    search_result *r = st->r;
    set_depth(st, p);
    search_config cf;
    search_candidate *c = &r->baseline;
    memset(c, 0, sizeof *c);
    snprintf(c->label, sizeof c->label, "1f1b");
    snprintf(c->family, sizeof c->family, "1f1b");
    if (st->o->global_batch % st->dp != 0) {
        search_skip(c, "the global batch does not divide over the replicas");
        return 0;
    }
    if (search_config_init(st, &cf, 1, p, st->o->split, err) < 0) {
        search_config_free(&cf);
        return -1;
    }
    c->chunks = 1;
    c->micro_batch = 1;
    c->n_micro = cf.m;
    c->rc_devices = p;
    c->recompute = 1;
    c->pp = st->pp;
    c->dp = st->dp;
    c->layout = st->layout;
    c->layout.pp = st->pp;
    c->layout.dp = st->dp;
    c->split = st->o->split;
    gen_params gp = cf.gp;
    sched_t *s = NULL;
    zb_err e2 = { { 0 } };
    if (gen_1f1b(&gp, &s, &e2) < 0)
        search_skip(c, e2.msg);
    else
        evaluate(st, &cf, c, s, NULL, 0); /* the baseline is not on the list */
    search_config_free(&cf);
    return 0;
}

/* The work bounds at depth p and micro-batch b (no recompute, balanced
 * split): total F+B+W of the plain layout / p, and of the
 * vocabulary-parallel layout (even split, head and embedding sharded, one
 * S and T per device and micro-batch) / p.  No schedule of this depth and
 * b beats them, whatever its recompute, split or order.  Sets
 * r->bound_plain_ms and, when o->vocab, r->bound_vocab_ms. */
static int work_bounds(search_state *st, int p, int b, zb_err *err)
{
    search_result *r = st->r;
    set_depth(st, p);
    search_config cf;
    if (search_config_init(st, &cf, b, 0, COST_SPLIT_BALANCED, err) < 0) {
        search_config_free(&cf);
        return -1;
    }
    const sched_t *pl = cf.plain;
    double total = 0;
    for (int i = 0; i < pl->n_stages; i++)
        total += pl->n_micro * (pl->cost[i].t_f + pl->cost[i].t_b + pl->cost[i].t_w);
    r->bound_plain_ms = total / p;
    int rc = 0;
    if (st->o->vocab != SEARCH_VOCAB_PLAIN && st->o->target == SEARCH_TARGET_ZBSCHED && p > 1) {
        int *layers = malloc(sizeof *layers * (size_t)p);
        sched_t *v = sched_clone(pl);
        zb_err e2 = { { 0 } };
        if (!layers || !v) {
            rc = zb_fail(err, "out of memory");
        } else if (search_vocab_price(st, &cf, 1, v, layers, &e2) == 0) {
            total = (double)p * v->n_micro * (v->vocab.t_s + v->vocab.t_t);
            for (int i = 0; i < v->n_stages; i++)
                total += v->n_micro * (v->cost[i].t_f + v->cost[i].t_b + v->cost[i].t_w);
            r->bound_vocab_ms = total / p;
        } /* else: the layout does not apply at this depth; no bound */
        free(layers);
        sched_free(v);
    }
    search_config_free(&cf);
    return rc;
}

/* --- the target's view of the result -------------------------------------- */

/* Whether the searched-for ranking of target t may pick c: t runs it, and
 * for zbsched --vocab parallel lets only vocabulary-parallel plans win. */
static int eligible(const search_options *o, const search_candidate *c, search_target t)
{
    if (!(c->targets >> t & 1))
        return 0;
    return !(t == SEARCH_TARGET_ZBSCHED && o->vocab == SEARCH_VOCAB_PARALLEL && !c->vocab);
}

/* Puts c's time under the step rule (sync_ms when sync, else async_ms)
 * into time_ms, with the tokens/s and MFU that follow from it. */
static void apply_rule(search_candidate *c, int sync)
{
    double t = sync ? c->sync_ms : c->async_ms;
    if (c->status == SEARCH_SKIPPED || !(t > 0))
        return;
    if (c->time_ms > 0) {
        c->tokens_per_s *= c->time_ms / t;
        c->mfu *= c->time_ms / t;
    }
    c->time_ms = t;
}

/* r->best[t] for every target: its best fit under its own rule, or its
 * smallest-peak OOM, or a skipped placeholder. */
static void target_bests(const search_options *o, search_result *r)
{
    for (int t = 0; t < SEARCH_N_TARGETS; t++) {
        int sync = search_target_sync((search_target)t), best = -1;
        for (int i = 0; i < r->n; i++) {
            const search_candidate *c = &r->c[i];
            if ((c->status == SEARCH_FIT || c->status == SEARCH_OOM) && eligible(o, c, (search_target)t) &&
                (best < 0 || search_rule_cmp(c, &r->c[best], sync) < 0))
                best = i;
        }
        search_candidate *b = &r->best[t];
        memset(b, 0, sizeof *b);
        b->status = SEARCH_SKIPPED;
        b->peak_device = -1;
        if (best < 0)
            continue;
        *b = r->c[best];
        b->layers = NULL;
        b->sched = NULL;
        apply_rule(b, sync);
        search_candidate base = r->baseline;
        apply_rule(&base, sync);
        b->speedup = base.status != SEARCH_SKIPPED && b->time_ms > 0 ? base.time_ms / b->time_ms : 0;
    }
}

/* The result as the searched target sees it: what it cannot run is
 * SEARCH_UNSUPPORTED (with zbsched's --vocab parallel, a plain plan is
 * skipped, as the option says), every time is under its rule, the list is
 * ranked again and the speed-ups are against its baseline.  0, or -1 when
 * memory runs out. */
static int present(const search_options *o, search_result *r)
{
    search_target t = o->target;
    int sync = search_target_sync(t);
    for (int i = 0; i < r->n; i++) {
        search_candidate *c = &r->c[i];
        if (c->status != SEARCH_FIT && c->status != SEARCH_OOM) {
            /* skipped: nothing to run */
        } else if (!(c->targets >> t & 1)) {
            c->status = SEARCH_UNSUPPORTED;
            search_target_refusal(c, t, c->note, sizeof c->note);
        } else if (!eligible(o, c, t)) {
            search_skip(c, "plain plan: --vocab parallel ranks only vocabulary-parallel plans");
        }
        apply_rule(c, sync);
    }
    apply_rule(&r->baseline, sync);
    if (search_rank(r) < 0)
        return -1;
    double base = r->baseline.status != SEARCH_SKIPPED ? r->baseline.time_ms : 0;
    r->baseline.speedup = base > 0 ? 1 : 0;
    for (int i = 0; i < r->n; i++)
        r->c[i].speedup = base > 0 && r->c[i].status != SEARCH_SKIPPED ? base / r->c[i].time_ms : 0;
    return 0;
}

/* The pipeline depths of st's layout: every p dividing the GPUs left for
 * pipeline x data parallel (st->n_gpus) with the global batch dividing
 * over the replicas, or o->n_devices.  Returns how many (0: none). */
static int layout_depths(const search_state *st, int *depths, int cap)
{
    const search_options *o = st->o;
    int n = 0;
    if (o->n_devices > 0) {
        if (st->n_gpus % o->n_devices == 0 && o->global_batch % (st->n_gpus / o->n_devices) == 0)
            depths[n++] = o->n_devices;
        return n;
    }
    for (int p = 1; p <= st->n_gpus && n < cap; p++)
        if (st->n_gpus % p == 0 && p <= o->model.n_layers + 2 && o->global_batch % (st->n_gpus / p) == 0)
            depths[n++] = p;
    return n;
}

/* The best time found so far under the target's step rule among the fits
 * it may pick, or INFINITY. */
static double best_time(const search_state *st)
{
    const search_options *o = st->o;
    int sync = search_target_sync(o->target);
    double best = INFINITY;
    for (int i = 0; i < st->r->n; i++) {
        const search_candidate *c = &st->r->c[i];
        if (c->status == SEARCH_FIT && eligible(o, c, o->target))
            best = fmin(best, sync ? c->sync_ms : c->async_ms);
    }
    return best;
}

/* Lower bounds of st's layout over its deepest pipeline p: the work
 * bound (F+B+W of every stage without recompute, over the devices, at the
 * largest micro-batch tried: no schedule, recompute or sync makes a plan
 * faster, and larger micro-batches only amortise latencies) into *ms, and
 * the static memory of the fullest device at the smallest micro-batch
 * (weights, gradients, optimizer, the largest transient, reserve: only a
 * deeper pipeline or a smaller micro-batch shrinks it) into
 * *static_bytes.  0, or -1 with err. */
static int layout_bounds(search_state *st, int p, double *ms, double *static_bytes, zb_err *err)
{
    const search_options *o = st->o;
    int sizes[32];
    set_depth(st, p);
    int n_sizes = micro_batch_sizes(o, o->global_batch / st->dp, sizes, 32);
    *ms = 0;
    *static_bytes = 0;
    if (n_sizes == 0)
        return 0;
    int lo = sizes[0], hi = sizes[0];
    for (int i = 1; i < n_sizes; i++) {
        lo = sizes[i] < lo ? sizes[i] : lo;
        hi = sizes[i] > hi ? sizes[i] : hi;
    }
    for (int pass = 0; pass < 2; pass++) {
        search_config cf;
        if (search_config_init(st, &cf, pass ? lo : hi, 0, COST_SPLIT_BALANCED, err) < 0) {
            search_config_free(&cf);
            return -1;
        }
        const sched_t *pl = cf.plain;
        if (pass == 0) {
            double total = 0;
            for (int i = 0; i < pl->n_stages; i++)
                total += pl->n_micro * (pl->cost[i].t_f + pl->cost[i].t_b + pl->cost[i].t_w);
            *ms = total / p;
        } else {
            for (int d = 0; d < pl->n_devices; d++)
                *static_bytes = fmax(*static_bytes, pl->mem_static[d]);
        }
        search_config_free(&cf);
    }
    return 0;
}

/* The layouts the other targets run and st's target cannot (so that
 * search_layouts left them out), with their work bound and static memory
 * at their deepest pipeline (layout_bounds), into r->other_*.  They are
 * not simulated: the bound is what tells a user of the default target
 * that another engine's layout (tensor parallelism on a 70B model, say)
 * would beat every plan this runtime can run, for the cost of a few cost
 * model calls.  Leaves st's layout and depth changed.  0, or -1 with err. */
static int other_layout_bounds(search_state *st, zb_err *err)
{
    const search_options *o = st->o;
    search_result *r = st->r;
    r->n_other_layouts = 0;
    if (o->gpu.cpu) /* CPU devices are this runtime's own; the other engines' layouts are GPU ones */
        return 0;
    for (int t = 0; t < SEARCH_N_TARGETS; t++) {
        if (t == (int)o->target)
            continue;
        search_options ot = *o;
        ot.target = (search_target)t;
        zb_layout ls[SEARCH_MAX_LAYOUTS];
        zb_err ignored = { { 0 } };
        int n = search_layouts(&ot, ls, SEARCH_MAX_LAYOUTS, &ignored);
        for (int i = 0; i < n; i++) {
            int known = 0;
            for (int k = 0; k < r->n_layouts && !known; k++)
                known = search_layout_same(&ls[i], &r->layout[k]);
            for (int k = 0; k < r->n_other_layouts && !known; k++)
                if (search_layout_same(&ls[i], &r->other_layout[k])) {
                    r->other_targets[k] |= 1u << t;
                    known = 1;
                }
            if (!known && r->n_other_layouts < SEARCH_MAX_LAYOUTS) {
                int k = r->n_other_layouts++;
                r->other_layout[k] = ls[i];
                r->other_targets[k] = 1u << t;
            }
        }
    }
    for (int k = 0; k < r->n_other_layouts; k++) {
        st->layout = r->other_layout[k];
        st->n_gpus = o->n_gpus / (st->layout.tp * st->layout.cp);
        int d[64], nd = layout_depths(st, d, 64);
        r->other_bound_ms[k] = r->other_static_bytes[k] = 0;
        if (nd > 0 && layout_bounds(st, d[nd - 1], &r->other_bound_ms[k], &r->other_static_bytes[k], err) < 0)
            return -1;
        if (nd > 0) { /* the depth the bounds are for */
            r->other_layout[k].pp = d[nd - 1];
            r->other_layout[k].dp = st->n_gpus / d[nd - 1];
        }
    }
    return 0;
}

/* Searches every depth of st's layout (st->layout, st->n_gpus set);
 * *deepest gets its deepest depth (0 when none divides). */
static int run_layout(search_state *st, int *deepest, zb_err *err)
{
    int depths[64];
    int n_depths = layout_depths(st, depths, 64);
    *deepest = n_depths > 0 ? depths[n_depths - 1] : 0;
    for (int i = 0; i < n_depths; i++) {
        set_depth(st, depths[i]);
        if (run_depth(st, err) < 0)
            return -1;
    }
    /* The vocabulary-parallel versions and the ILP once every depth's
     * plain candidates are known (search_vocab_depth: a depth's versions
     * are built only while they may come near the best plan of them
     * all), in the same order, each against what the depths up to it
     * found, as when they ran depth by depth. */
    for (int i = 0; i < n_depths; i++) {
        set_depth(st, depths[i]);
        search_prune_clear(&st->prune);
        search_memo_clear(st->memo);
        if (run_depth_vocab(st, err) < 0)
            return -1;
    }
    return 0;
}

/* search_run with the caches its candidates share (search_state). */
static int search_run_with(const search_options *o, search_result *r, v_pattern_cache *patterns,
                           search_memo *memo, zb_err *err)
{
    memset(r, 0, sizeof *r);
    r->min_peak_index = -1;
    if (check_options(o, err) < 0)
        return -1;
    search_state st = { .o = o, .r = r, .patterns = patterns, .memo = memo };
    zb_layout layouts[SEARCH_MAX_LAYOUTS];
    int n_layouts = search_layouts(o, layouts, SEARCH_MAX_LAYOUTS, err);
    if (n_layouts < 0)
        return -1;
    r->n_layouts = n_layouts;
    /* The plain layout (first when searched) checks the job as before. */
    st.layout = layouts[0];
    st.n_gpus = o->n_gpus / (layouts[0].tp * layouts[0].cp);
    int depths[64];
    int n_depths = layout_depths(&st, depths, 64);
    if (n_depths == 0 && o->n_devices <= 0)
        return zb_fail(err, "no pipeline depth divides %d GPUs with the global batch %d divisible by the replicas "
                       "and at most %d stages", st.n_gpus, o->global_batch, o->model.n_layers + 2);
    if (n_depths == 0)
        return zb_fail(err, "%d pipeline devices do not divide %d GPUs with the global batch %d divisible by "
                       "the replicas", o->n_devices, st.n_gpus, o->global_batch);
    int any_sizes = 0;
    for (int i = 0; i < n_depths; i++) {
        int sizes[32];
        any_sizes |= micro_batch_sizes(o, o->global_batch / (st.n_gpus / depths[i]), sizes, 32) > 0;
    }
    if (!any_sizes && o->micro_batch_fixed)
        return zb_fail(err, "micro-batch %d does not divide the batch of a replica (global batch %d over "
                       "the data-parallel width) at any pipeline depth", o->model.micro_batch, o->global_batch);
    if (!any_sizes)
        return zb_fail(err, "no micro-batch size up to %d divides the batch of a replica",
                       o->max_micro_batch);
    /* Progress estimate: configs x families per depth (the split search
     * adds a few dozen more), for the first layout; later ones add theirs. */
    st.total = 0;
    for (int i = 0; i < n_depths; i++) {
        int p = depths[i], sizes[32];
        int n_sizes = micro_batch_sizes(o, o->global_batch / (st.n_gpus / p), sizes, 32);
        int n_rc = o->recompute < 0 ? 3 + (p <= 8 ? p - 1 : 7) : 1;
        int fams = 1 + (p > 1 ? search_max_chunks(&o->model, p) - 1 + 2 + N_ZB_AUTO + 4 : 0);
        st.total += n_sizes * (o->split_search ? 2 : 1) * n_rc * fams + (o->split_search ? 4 * n_sizes * n_rc : 0);
    }
    int base_depth = 0;
    zb_layout base_layout = layouts[0];
    /* Every layout's bounds first, then the layouts in order of their
     * work bound, so that the likely winner is found early and the rest
     * are skipped when their bound already loses.  The plain layout
     * stays first: its work bound is the lowest (no TP or CP traffic)
     * but ignores the recompute memory forces on it, so sorting it in
     * made the big jobs search every layout (llama3-70b on 64 GPUs for
     * megatron: 137 s of CPU against 15 s). */
    for (int k = 0; k < n_layouts; k++) {
        st.layout = layouts[k];
        st.n_gpus = o->n_gpus / (layouts[k].tp * layouts[k].cp);
        int d[64], nd = layout_depths(&st, d, 64);
        r->layout[k] = layouts[k];
        r->layout_bound_ms[k] = 0;
        r->layout_static_bytes[k] = 0;
        if (n_layouts > 1 && nd > 0 &&
            layout_bounds(&st, d[nd - 1], &r->layout_bound_ms[k], &r->layout_static_bytes[k], err) < 0) {
            search_result_free(r);
            return -1;
        }
    }
    for (int k = 2; k < n_layouts; k++) /* insertion sort of 1..n-1 by bound, stable; n <= 48 */
        for (int j = k; j > 1 && r->layout_bound_ms[j] < r->layout_bound_ms[j - 1]; j--) {
            zb_layout tl = r->layout[j];
            r->layout[j] = r->layout[j - 1];
            r->layout[j - 1] = tl;
            double tb = r->layout_bound_ms[j], ts = r->layout_static_bytes[j];
            r->layout_bound_ms[j] = r->layout_bound_ms[j - 1];
            r->layout_static_bytes[j] = r->layout_static_bytes[j - 1];
            r->layout_bound_ms[j - 1] = tb;
            r->layout_static_bytes[j - 1] = ts;
        }
    for (int k = 0; k < n_layouts; k++) {
        st.layout = r->layout[k];
        st.n_gpus = o->n_gpus / (st.layout.tp * st.layout.cp);
        /* Bounds: skip a layout whose work alone loses to the best plan so
         * far, or whose static memory fits no depth. */
        if (k > 0 && (!(r->layout_bound_ms[k] > 0) || r->layout_bound_ms[k] >= best_time(&st) ||
                      r->layout_static_bytes[k] > o->mem_bytes)) {
            r->layout_pruned[k] = 1;
            r->layouts_pruned++;
            continue;
        }
        int deepest = 0;
        if (run_layout(&st, &deepest, err) < 0) {
            search_result_free(r);
            return -1;
        }
        if (k == 0)
            base_depth = deepest;
    }
    /* Baseline on the deepest depth of the first layout (what --gpus N
     * alone meant). */
    st.layout = base_layout;
    st.n_gpus = o->n_gpus / (base_layout.tp * base_layout.cp);
    if (base_depth > 0 && run_baseline(&st, base_depth, err) < 0) {
        search_result_free(r);
        return -1;
    }
    if (base_depth == 0) {
        r->baseline.status = SEARCH_SKIPPED;
        snprintf(r->baseline.note, sizeof r->baseline.note, "no depth");
    }
    for (int i = 0; i < r->n; i++) /* the vocabulary versions were assembled from copies */
        r->c[i].targets = search_target_mask(&r->c[i]);
    r->baseline.targets = search_target_mask(&r->baseline);
    target_bests(o, r);
    if (other_layout_bounds(&st, err) < 0) {
        search_result_free(r);
        return -1;
    }
    if (present(o, r) < 0) {
        search_result_free(r);
        return zb_fail(err, "out of memory");
    }
    if (r->n_fit > 0 && !r->c[0].sched) { /* search_rank() keeps every target's best; a bug otherwise */
        search_result_free(r);
        return zb_fail(err, "the best plan's schedule was dropped while ranking (a bug: please report it)");
    }
    if (r->n_fit > 0) {
        st.layout = r->c[0].layout;
        st.layout.pp = st.layout.dp = st.layout.chunks = 1;
        st.n_gpus = o->n_gpus / (st.layout.tp * st.layout.cp);
        if (work_bounds(&st, r->c[0].pp, r->c[0].micro_batch, err) < 0) {
            search_result_free(r);
            return -1;
        }
    }
    return 0;
}

int search_run(const search_options *o, search_result *r, zb_err *err)
{
    v_pattern_cache patterns = { 0 };
    search_memo memo = { 0 };
    int rc = search_run_with(o, r, &patterns, &memo, err);
    v_pattern_cache_free(&patterns);
    search_memo_free(&memo);
    return rc;
}

void search_explain(const search_candidate *c, search_why *w)
{
    memset(w, 0, sizeof *w);
    w->work_bound_ms = c->busy_mean_ms;
    w->imbalance_bound_ms = c->busy_max_ms;
    w->time_ms = c->time_ms;
    if (c->time_ms > 0) {
        w->bubble_share = (c->time_ms - c->busy_max_ms) / c->time_ms;
        w->imbalance_share = (c->busy_max_ms - c->busy_mean_ms) / c->time_ms;
        w->idle_share = (c->time_ms - c->busy_mean_ms) / c->time_ms;
    }
}
