/*
 * search_state.h: what the files of the search share beyond search.h:
 * the state of one search run, one configuration's cost templates, and
 * the helpers that create, cost, simulate and rank candidates.
 *
 * search_candidate.c owns these helpers; search.c enumerates depths,
 * configurations and families with them, and search_split.c (the
 * layer-split local search) and search_vocab.c (the vocabulary-parallel
 * versions) work on the candidates it built through the same helpers, so
 * that every candidate is priced, simulated and ranked one way.  Not part of the solver's
 * interface: only solver/search*.c include it.
 */
#ifndef ZB_SOLVER_SEARCH_STATE_H
#define ZB_SOLVER_SEARCH_STATE_H

#include "schedules/gen.h"
#include "solver/search.h"
#include "solver/solver_internal.h"

/* What one build of a candidate reads besides its identity (search_memo.c):
 * two candidates of a depth with equal keys have equal plans and figures.
 * The placement's costs stand for its layers: a stage's costs grow with
 * its layers, so equal costs on one shape are equal layers. */
typedef struct search_build_key {
    const char *label;        /* the family's label ("zb-h1", "v-min", ...) */
    int chunks, b, m;         /* virtual stages per device, micro-batch size, count */
    int rc_devices, rc_stages, rc_mlp; /* the configuration's recompute setting */
    const sched_t *placement; /* the plan's placement, costed: stage costs, static memory,
                               * link time */
    int n_limit;              /* entries of limit; 0: the build reads none */
    const double *limit;      /* [n_limit] memory limits the family plans under */
    const gen_params *gp;     /* a generator's uniform parameters, or NULL (a solver) */
} search_build_key;

typedef struct search_memo_entry search_memo_entry;

/* The builds of the depth being searched, by key (search_memo.c). */
typedef struct search_memo {
    search_memo_entry *e; /* [n] in the order added */
    int n, cap;           /* entries used, allocated */
    int *slot;            /* [n_slots] open-addressed table of indices into e, -1 empty */
    int n_slots;          /* a power of two, at least twice n */
} search_memo;

/* Forgets every build (a new depth or layout); keeps the storage. */
void search_memo_clear(search_memo *m);

/* Frees what m holds and zeroes it. */
void search_memo_free(search_memo *m);

/* The figures of an earlier build with key k (layers owned by the memo,
 * schedule NULL), &search_memo_pruned when that build was pruned, or
 * NULL. */
const search_candidate *search_memo_find(const search_memo *m, const search_build_key *k);
extern const search_candidate search_memo_pruned;

/* Keeps candidate c's figures under key k (k's arrays copied).  0, or -1
 * on out of memory (m unchanged). */
int search_memo_add(search_memo *m, const search_build_key *k, const search_candidate *c);

/* Keeps under key k that its build was pruned; as search_memo_add. */
int search_memo_add_pruned(search_memo *m, const search_build_key *k);

typedef struct search_state {
    const search_options *o; /* the caller's options */
    search_result *r;        /* growing candidate list */
    int cap;                 /* allocated length of r->c */
    int done, total;         /* progress */
    int pp, dp;              /* the pipeline depth being searched and its data-parallel width */
    int devices_per_node;    /* consecutive pipeline devices on one node */
    int dp_intra;            /* 1 when a data-parallel group fits inside a node */
    double vocab_beat;       /* time a vocabulary-parallel version must beat to be worth
                              * simulating: the best plan that may win so far (INFINITY: none),
                              * or SEARCH_VOCAB_NEAR times the best of every depth */
    int vocab_near;          /* 1 when vocab_beat is that SEARCH_VOCAB_NEAR bound */
    int stage_q_src;         /* candidate index whose by-stage recompute bisection gave
                              * stage_q (the variants share it: memory does not depend on
                              * the variant's pass times), or -1 */
    int stage_q;             /* that bisection's fewest recomputed stages */
    int stage_mlp;           /* the MLP-level bisection's most stages for stage_q_src at
                              * stage_q (shared by the variants likewise), or -1 */
    int next_seq;            /* search_candidate.seq of the next candidate */
    zb_layout layout;        /* the layout being searched (tp, sp, cp, zero, offload) */
    int n_gpus;              /* GPUs left for pipeline x data parallel: o->n_gpus / (tp * cp) */
    search_prune prune;      /* each label's best at this depth, what lower bounds are
                              * compared with (search_prune.c) */
    v_pattern_cache *patterns; /* the V-Min and V-Half patterns laid out so far, by shape */
    double static_floor;     /* at this depth, no plan's fullest device holds less static
                              * memory (cost_static_floor) */
    search_memo *memo;       /* this depth's builds by key: twins are not built again */
} search_state;

/* One config: the model at micro-batch b, the cost options, the costs of
 * the plain and V placements, and the uniform parameters generators see. */
typedef struct search_config {
    zb_model model;      /* o->model with micro_batch = b */
    cost_options copt;   /* recompute, split, loss, ZeRO, topology */
    int b, m;            /* micro-batch size, count */
    int rc_devices;      /* leading devices that recompute */
    int rc_first_stages; /* > 0: the first this many virtual stages (model order) recompute
                          * instead of the first rc_devices devices' stages */
    int rc_mlp_stages;   /* with rc_first_stages: the last this many of them recompute at
                          * the MLP level only */
    unsigned char *rc_stage; /* [SEARCH_MAX_STAGES] per-stage recompute of the schedule being costed */
    sched_t *plain;      /* p stages, plain placement, costs filled; no ops */
    sched_t *vshape;     /* 2p stages, V placement, costs filled; NULL when layers are too few */
    gen_params gp;       /* uniform costs and shape for the generators */
    double bound_ms;     /* lower bound of the time of the families about to be built on
                          * this config if they fit (placement_bound), or 0: none */
    double peak_bound;   /* lower bound of their peak memory (placement_bound), or 0 */
} search_config;

/* The targets with a step rule of their own (sync) whose best of each
 * label the split search also tunes: their label bests are not zbsched's
 * when they cannot run its per-device recompute or its families. */
#define SEARCH_N_SYNC_TARGETS 2
extern const search_target search_sync_targets[SEARCH_N_SYNC_TARGETS];

/* Appends a candidate of st's depth and layout for cf, with its label,
 * family and chunks, to the list: its identity fields set, its figures
 * zero until it is measured or skipped.  NULL with err on out of memory. */
search_candidate *search_new_candidate(search_state *st, const search_config *cf, const char *label,
                                       const char *family, int chunks, zb_err *err);

/* Counts one candidate done for the progress callback. */
void search_tick(search_state *st);

/* Marks c skipped, with why as its note. */
void search_skip(search_candidate *c, const char *why);

/* Costs s under cf's options (with split layers, or the rule's when NULL). */
int search_cost_sched(const search_state *st, search_config *cf, const int *layers, sched_t *s, zb_err *err);

/* The busiest device's compute of s (costed): its stages' F+B+W and, with
 * vocabulary parallelism, one S and T pass, for every micro-batch, ms.  No
 * order runs faster: a lower bound of its time under every step rule. */
double search_busiest_ms(const sched_t *s);

/* Device d's static memory plus its lane's activation peak (s costed),
 * which the op order alone fixes (sched_lane_peak). */
double search_device_peak(const sched_t *s, int d);

/* The peak search_measure would report for s (costed): search_device_peak
 * of the fullest device, so no simulation is needed. */
double search_plan_peak(const sched_t *s);

/* Simulates s (already costed) and fills c's figures; 0 or -1 with err. */
int search_measure(const search_state *st, search_config *cf, const int *layers, search_candidate *c,
                   const sched_t *s, zb_err *err);

/* The cost options of every candidate of st's depth and layout, with
 * split rule split. */
void search_cost_options_for(const search_options *o, const search_state *st, cost_split split, cost_options *c);


/* Parameters held by each device of s (per the cost model's split) into
 * params[n_devices].  0, or -1 with err. */
int search_device_params(const search_state *st, search_config *cf, const int *layers, const sched_t *s,
                         double *params, zb_err *err);

/* Every device's exposed data-parallel sync of s (costed under cf with
 * layers), ms, into exposed[n_devices]: the parameters each holds, then
 * what syncing them leaves exposed (0 everywhere with one replica).  What
 * a plan's time adds to each device's span.  0, or -1 with err. */
int search_dp_exposed_all(const search_state *st, search_config *cf, const int *layers, const sched_t *s,
                          double *exposed, zb_err *err);

/* 1 when c is of st's depth and layout. */
int search_of_depth(const search_state *st, const search_candidate *c);

/* Builds a config's cost templates and uniform generator parameters, with
 * recompute on the first rc_devices devices or, when rc_stages > 0, on the
 * first rc_stages virtual stages (the last rc_mlp of them at the MLP
 * level; both SEARCH_RC_ALL: every stage at the MLP level).  0, or -1
 * with err (then search_config_free still frees what was built). */
int search_config_init_rc(search_state *st, search_config *cf, int b, int rc_devices, int rc_stages,
                          int rc_mlp, cost_split split, zb_err *err);

/* search_config_init_rc with recompute by device only. */
int search_config_init(search_state *st, search_config *cf, int b, int rc_devices, cost_split split, zb_err *err);

/* Frees what cf holds. */
void search_config_free(search_config *cf);

/* Ranking of a and b under one step rule (sync: sync_ms, else async_ms),
 * as qsort's comparator would order them. */
int search_rule_cmp(const search_candidate *a, const search_candidate *b, int sync);

/* Sorts r's candidates, counts the fits, finds the smallest peak, and
 * frees every schedule except those a later step starts from or may
 * answer with (the best few fits, the smallest peak, each label's bests).
 * 0, or -1 on out of memory. */
int search_rank(search_result *r);

/* The layer-split local search of depth st->pp (search_split.c): each
 * family's best gets single-layer moves between neighbouring virtual
 * stages.  0, or -1 with err. */
int search_tune_depth(search_state *st, zb_err *err);

/* Prices s (a clone of a plain plan of depth st->pp, with its op order)
 * as its vocabulary-parallel version under cf (search_vocab.c): the
 * layers split evenly into layers[s->n_stages], the stages costed, the
 * head and embedding sharded over the devices with Vocab-variant passes,
 * the state zbsched's runtime holds.  0, or -1 with err when the layout
 * does not apply. */
int search_vocab_price(const search_state *st, search_config *cf, int variant, sched_t *s, int *layers,
                       zb_err *err);

/* The vocabulary-parallel versions of each label's best of depth st->pp
 * (search_vocab.c), in both variants.  0, or -1 with err. */
int search_vocab_depth(search_state *st, zb_err *err);

#endif
