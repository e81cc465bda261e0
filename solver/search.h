/*
 * search.h: the fastest pipeline plan that fits a per-GPU memory limit
 * (`zbsched search`).
 *
 * For every split of the GPUs into pipeline depth p x data-parallel width
 * N/p (ZeRO-1 across the replicas), every micro-batch size b that divides
 * the per-replica batch, every recompute setting (off, on for the first k
 * devices, on everywhere) and both layer-split rules, the search builds
 * each schedule family (1F1B; interleaved 1F1B with every chunk count the
 * layers allow; ZB-H1; ZB-H2; zb-auto at limits p, 1.5p and 2p times M_B
 * and at the largest limit that fits; the V family zb-v, v-min, v-half,
 * v-zb), puts the cost model's per-stage times and memory on it
 * (src/cost_model.h), simulates it (src/sim.h) and compares the peak of
 * static + activation memory on its fullest device with the limit.  The
 * best few of each family then get a local search over the layer split,
 * and (search_options.vocab) each label's best per depth gets
 * vocabulary-parallel versions (docs/vocab-parallel.md).
 * Candidates that fit are ranked by the time the target engine realises
 * (search_options.target): for zbsched and torch the largest per-device
 * span (the paper's cost; each device steps its optimizer when its own ops
 * are done) plus the exposed data-parallel gradient sync; for torchtitan
 * and Megatron-LM, which clip the gradient norm over the whole pipeline
 * before any stage steps, the first start to the last device's end plus
 * its exposed sync.  Every search builds the union of what the four
 * targets run (solver/search_target.c says which target runs what), so
 * that each target's best is known and the why block can compare them;
 * the searched target ranks only what it runs.  docs/search.md describes
 * the choices.
 *
 * Workload: a few thousand candidates of up to a few thousand ops each; the
 * default search takes well under a second of CPU (bench/README.md).
 */
#ifndef ZB_SEARCH_H
#define ZB_SEARCH_H

#include "src/cost_model.h"
#include "src/layout.h"
#include "src/sched.h"

/* Iteration times closer than this ratio rank as equal, and the smaller
 * peak memory wins among them: a schedule faster only in the fifth digit
 * (floating-point noise of the simulation, far below what a real run
 * resolves) should not beat one that needs much less memory. */
#define SEARCH_TIME_RESOLUTION 1.0005

/* A depth that fits a plan builds vocabulary-parallel versions only while
 * they may come within this factor of the best plan of every depth
 * (search_vocab.c): a near miss is worth a row, one a third behind is not
 * worth its placements.  Not nearer: a version's recompute steps stop
 * at the first that is cut, before the refinement that makes the last
 * one faster (at 1.10, intellect-1-10b over 64 GPUs lost a pp=2 version
 * 1.056x the winner's time: its by-device step was cut at 1.23x). */
#define SEARCH_VOCAB_NEAR 1.25

/* Largest pipeline depth and virtual stages the search handles. */
#define SEARCH_MAX_STAGES 4096

/* The engine a plan is searched for (search_options.target), each with
 * what it can execute (solver/search_target.c, docs/search.md "Targets"). */
typedef enum search_target {
    SEARCH_TARGET_ZBSCHED = 0,    /* this project's runtime: everything the search builds */
    SEARCH_TARGET_TORCH = 1,      /* torch.distributed.pipelining with the user's model code */
    SEARCH_TARGET_TORCHTITAN = 2, /* torchtitan: CSV order, one checkpointing policy, FSDP */
    SEARCH_TARGET_MEGATRON = 3,   /* Megatron-LM: (interleaved) 1F1B, global recompute */
} search_target;
#define SEARCH_N_TARGETS 4

typedef struct search_options {
    zb_model model;            /* model; its micro_batch is one of the sizes tried */
    zb_gpu gpu;                /* hardware of every device */
    const zb_profile *profile; /* measured figures replacing the estimate, or NULL; borrowed */
    double mem_bytes;          /* memory limit per GPU, bytes (> 0) */
    int n_devices;             /* p, pipeline depth; 0: try every p dividing n_gpus */
    int n_gpus;                /* GPUs of the whole job; data-parallel width = n_gpus / p */
    int nodes;                 /* nodes the GPUs span; 0: ceil(n_gpus / the GPU's gpus_per_node) */
    cost_loss loss;            /* loss kernel (plain or fused) */
    int split_search;          /* 1 (default): both split rules and a local search; 0: split only */
    int global_batch;          /* sequences per iteration; m = global_batch / b */
    int recompute;             /* -1 search off, first k devices, all (default); 0 off; 1 on everywhere */
    int flash_attention;       /* 1 (default) */
    cost_split split;          /* layer split; default COST_SPLIT_BALANCED */
    int zero1_dp;              /* extra ZeRO-1 degree beyond the data-parallel split; 1 = none */
    int max_micro_batch;       /* largest b tried (default 64) */
    int micro_batch_fixed;     /* 1: only the model's micro_batch is tried (--micro-batch) */
    search_target target;      /* the engine the plan is for; default SEARCH_TARGET_ZBSCHED */
    int vocab;                 /* vocabulary parallelism (docs/vocab-parallel.md), one of
                                * SEARCH_VOCAB_*: plain plans only (library default), both
                                * kinds ranked together (the CLI's default, --vocab auto), or
                                * only vocabulary-parallel plans may win (--vocab parallel);
                                * the vocabulary-parallel plans are each label's best of every
                                * depth with the output layer and embedding split over the
                                * devices, Vocab-1 and Vocab-2 */
    int ilp;                   /* 1: also run the ILP on the best few plain-placement configs */
    int exhaustive;            /* 1: build and simulate every candidate; 0 (default): skip
                                * those whose lower bound already loses to their label's
                                * best at their depth under every target that runs them
                                * (solver/search_prune.c; same winner and label bests,
                                * fewer rows).  With ilp set nothing is pruned either */
    int ilp_top;               /* how many configs the ILP refines (default 3) */
    double ilp_time_limit;     /* seconds per ILP run (default 10) */
    /* Progress: called after each candidate with done and an estimate of the
     * total; may be NULL. */
    void (*progress)(void *ctx, int done, int total);
    void *progress_ctx;        /* passed to progress */
    /* Called with what the search does next when that is slow (before each
     * ILP run: "ilp on b=1, recompute on"), with progress_ctx; may be NULL. */
    void (*progress_stage)(void *ctx, const char *what);
    /* The layout beyond pipeline x data parallel (src/layout.h,
     * solver/search_layout.c).  Each dimension is fixed (--tp, --cp,
     * --zero, --offload) or searched: tp 0 tries 1, 2, 4, 8 within a node,
     * cp 0 tries 1 and 2, zero 0 tries ZeRO-1 and ZeRO-3, offload < 0
     * tries 0 and 0.5; a searched dimension only takes the values the
     * target can run.  Library default: all fixed at the plain layout. */
    int tp;                    /* tensor-parallel size, or 0: searched */
    int cp;                    /* context-parallel size, or 0: searched */
    int zero;                  /* LAYOUT_ZERO1..3, or 0: searched */
    double offload;            /* activation offload fraction 0..1, or < 0: searched */
    int sp;                    /* 1 (default): sequence parallelism wherever tp > 1 */
    int tp_comm_overlap;       /* 1 (default): TP collectives under their GEMMs (--tp-comm-overlap) */
} search_options;

/* search_options.vocab */
#define SEARCH_VOCAB_PLAIN 0    /* plain plans only: the head on the last stage */
#define SEARCH_VOCAB_AUTO 1     /* plain and vocabulary-parallel plans, the fastest wins */
#define SEARCH_VOCAB_PARALLEL 2 /* only vocabulary-parallel plans may win (plain ones are built
                                 * as their sources, then listed as skipped) */

typedef enum search_status {
    SEARCH_FIT = 0,     /* simulated; its peak fits the limit */
    SEARCH_OOM = 1,     /* simulated; its peak exceeds the limit */
    SEARCH_SKIPPED = 2, /* the generator or solver could not build it (note says why) */
    SEARCH_UNSUPPORTED = 3, /* built, but the searched target cannot run it (note says why);
                             * its figures stay valid for the targets that can */
} search_status;

/* "Recompute everywhere at the MLP level" (Megatron-core's selective
 * recompute of the mlp and layernorm modules): rc_stages = rc_mlp_stages =
 * this many, i.e. every virtual stage, at the MLP level. */
#define SEARCH_RC_ALL SEARCH_MAX_STAGES

typedef struct search_candidate {
    char label[40];        /* "1f1b", "interleaved v=2", "zb-auto 1.5p", "ilp", ... */
    char family[16];       /* generator or solver kind: "1f1b", "interleaved", "zb-auto", ... */
    int chunks;            /* virtual stages per device */
    int micro_batch;       /* b, sequences per micro-batch */
    int n_micro;           /* m */
    int recompute;         /* 1 when some stage recomputes */
    int rc_devices;        /* leading pipeline devices that recompute (0 none .. pp all) */
    int rc_stages;         /* > 0: instead, the first rc_stages virtual stages in model order
                            * recompute (vocabulary-parallel versions of interleaved and V
                            * plans: the stages whose activations wait the longest) */
    int rc_mlp_stages;     /* with rc_stages: the last this many of those stages recompute
                            * only their MLP blocks (COST_RC_MLP), the others in full;
                            * both SEARCH_RC_ALL: every stage at the MLP level */
    int pp, dp;            /* pipeline depth, data-parallel width */
    zb_layout layout;      /* the whole layout: tp (+sp), cp, pp, chunks, dp, ZeRO level, offload */
    cost_split split;      /* the rule the split started from */
    int split_tuned;       /* 1 when the local search moved layers */
    int vocab;             /* 0 plain; 1 or 2: vocabulary-parallel plan (Vocab-1, Vocab-2) */
    int n_stages;          /* virtual stages */
    int *layers;           /* [n_stages] transformer layers per virtual stage; owned */
    search_status status;  /* fit, out of memory, or skipped */
    char note[512];        /* why it was dropped or skipped; empty when it fits */
    double peak_bytes;     /* static + activation peak on the fullest device */
    int peak_device;       /* that device */
    double static_bytes;   /* static memory (weights, optimizer, reserve) on that device */
    double iter_ms;        /* simulated makespan (first start to last end), ms */
    double cost_ms;        /* the paper's cost: largest per-device span, ms */
    double dp_ms;          /* data-parallel gradient sync the schedule cannot hide, ms */
    double time_ms;        /* the ranked figure: async_ms or sync_ms, by the target's step rule */
    double async_ms;       /* each device steps when its own ops are done: the largest
                            * per-device span with its exposed sync, ms (zbsched, torch) */
    double sync_ms;        /* every device steps after the last one is done: first start to
                            * the last device's end with its exposed sync, ms (torchtitan,
                            * Megatron-LM: a global gradient-norm clip before the step) */
    double busy_max_ms;    /* busiest device's compute time (imbalance bound), ms */
    double busy_mean_ms;   /* total compute / devices (work bound), ms */
    double speedup;        /* baseline time / time_ms (0 when there is no baseline) */
    double bubble_rate;    /* the paper's bubble rate, from the simulator */
    double tokens_per_s;   /* tokens per second per GPU over the whole job, at time_ms */
    double mfu;            /* model FLOPs utilisation (useful FLOPs / peak) */
    unsigned targets;      /* bit t set when target t can run this plan (search_target_mask) */
    int seq;               /* creation order: the last key of every ranking, so that a
                            * target's best is the same whatever the list's order */
    int peak_floor;        /* 1: over the limit (status SEARCH_OOM) by peak_bytes, a lower
                            * bound of its peak on peak_device, proven before any placement
                            * of its vocabulary passes; never simulated, so it has no times
                            * (search_vocab.c: once a plan that may win fits) */
    int static_floor;      /* 1: skipped, and stands for its whole depth (pp, dp, layout),
                            * none of whose plans was built: static_bytes, a lower bound of
                            * every plan's static memory there (cost_static_floor), alone
                            * exceeds the limit */
    sched_t *sched;        /* the schedule with costs, for the best few; else NULL; owned */
} search_candidate;

/* Most layouts one search considers (4 tp x 2 cp x 3 ZeRO x 2 offload). */
#define SEARCH_MAX_LAYOUTS 48

typedef struct search_result {
    int n;                    /* candidates */
    search_candidate *c;      /* [n] fits first (fastest first), then OOM (smallest peak first), then skipped */
    int n_fit;                /* leading candidates that fit */
    double min_peak_bytes;    /* smallest simulated peak over all candidates (what would fit); 0 if none ran */
    int min_peak_index;       /* candidate with that peak, or -1 */
    double bound_plain_ms;    /* work bound without recompute at the winner's depth and b
                               * (plain layout, balanced split): total F+B+W / devices; 0 when
                               * nothing fits */
    double bound_vocab_ms;    /* the same with vocabulary parallelism (even split, every
                               * device's S and T passes); 0 when not searched */
    int n_pruned;             /* candidates not built: their lower bound lost to their
                               * label's best at their depth under every target that runs
                               * them (search_options.exhaustive) */
    int n_reused;             /* listed candidates not built again: an earlier one of their
                               * depth had the same build (another split rule giving the
                               * same layers), whose figures they took (search_memo.c) */
    int vocab_pruned;         /* vocabulary-parallel versions cut short: their busiest
                               * device's compute, or every placement of their passes,
                               * reached the best plan's time at some recompute setting */
    search_candidate baseline; /* plain 1F1B, b=1, recompute everywhere, default split, deepest
                                * pipeline; status SEARCH_SKIPPED when it could not be built */
    int n_layouts;            /* layouts (tp, cp, ZeRO, offload) the search considered */
    int layouts_pruned;       /* of those, skipped: their work bound reached the best time
                               * found, or their static memory alone exceeded the limit */
    zb_layout layout[SEARCH_MAX_LAYOUTS]; /* [n_layouts] in the order searched (lowest bound first) */
    double layout_bound_ms[SEARCH_MAX_LAYOUTS];     /* each one's work bound, ms (0: none computed) */
    double layout_static_bytes[SEARCH_MAX_LAYOUTS]; /* each one's static memory at its deepest pipeline */
    int layout_pruned[SEARCH_MAX_LAYOUTS];          /* 1: skipped by its bounds (not simulated) */
    int n_other_layouts;      /* layouts another target runs that this target cannot, so that
                               * this search did not consider them (search_layouts for every
                               * other target, less r->layout); bounded, not simulated */
    zb_layout other_layout[SEARCH_MAX_LAYOUTS];        /* [n_other_layouts] */
    double other_bound_ms[SEARCH_MAX_LAYOUTS];         /* each one's work bound at its deepest
                                                        * pipeline, ms (0: no depth divides) */
    double other_static_bytes[SEARCH_MAX_LAYOUTS];     /* each one's static memory there */
    unsigned other_targets[SEARCH_MAX_LAYOUTS];        /* bit t: target t runs it */
    search_candidate best[SEARCH_N_TARGETS]; /* each target's best fit (time_ms under its
                                * step rule), or when nothing it runs fits its smallest peak
                                * (status SEARCH_OOM), or status SEARCH_SKIPPED; copies
                                * without layers or schedule */
} search_result;

/* Fills o with the defaults: llama3-8b on H100-80G, 8 GPUs with every
 * pipeline depth dividing 8, global batch 64, 40 GB (mem_bytes = 40e9),
 * the plain layout (tp 1, cp 1, ZeRO-1, no offload; SP and TP overlap on
 * should tp be set),
 * recompute searched, flash attention, plain loss, balanced and paper
 * splits with a local search, no extra ZeRO, b up to 64, no ILP (3 configs,
 * 10 s each when on), target zbsched. */
void search_options_default(search_options *o);

/* Runs the search.  Fills *r (caller frees with search_result_free); the
 * best candidate, when r->n_fit > 0, is r->c[0] with its schedule in
 * r->c[0].sched.  Returns 0 (also when nothing fits: r->n_fit == 0), or -1
 * with err set for bad options or when memory runs out. */
int search_run(const search_options *o, search_result *r, zb_err *err);

/* Frees what search_run allocated inside r; safe on a zeroed result. */
void search_result_free(search_result *r);

/* The "say why" figures of candidate c: work bound (total compute /
 * devices), imbalance bound (busiest device), and the shares of c's time
 * lost to the schedule's bubble (time - busiest), to imbalance (busiest -
 * mean) and in all (time - mean). */
typedef struct search_why {
    double work_bound_ms, imbalance_bound_ms, time_ms; /* ms */
    double bubble_share, imbalance_share, idle_share;  /* fractions of time_ms */
} search_why;
void search_explain(const search_candidate *c, search_why *w);

/* --- targets (solver/search_target.c) ------------------------------------ */

/* The target's name: "zbsched", "torch", "torchtitan" or "megatron". */
const char *search_target_name(search_target t);

/* Parses a target name into *t.  Returns 0, or -1 with err naming the
 * four. */
int search_target_parse(const char *name, search_target *t, zb_err *err);

/* 1 when target t steps every device together (torchtitan, Megatron-LM:
 * sync_ms is its time), 0 when each device steps on its own (async_ms). */
int search_target_sync(search_target t);

/* The targets that can run candidate c (its label, family, recompute
 * setting and vocabulary layout), bit t for target t. */
unsigned search_target_mask(const search_candidate *c);

/* Why target t cannot run candidate c, one clause into buf ("" when it
 * can), e.g. "megatron runs only 1F1B and interleaved 1F1B". */
void search_target_refusal(const search_candidate *c, search_target t, char *buf, size_t len);

/* c's recompute setting as the table's rc column writes it: "off", "on",
 * "mlp" (every stage at the MLP level), "0-3" (the first 4 devices),
 * "s0-20" (the first 21 virtual stages in model order), "s0-20m15"
 * (stages 15-20 of those at the MLP level).  Returns buf or a literal. */
const char *search_rc_text(const search_candidate *c, char *buf, size_t len);

/* --- layouts (solver/search_layout.c) ------------------------------------ */


/* The layouts search_run considers for o (tp, sp, cp, zero, offload set;
 * pp, chunks, dp 1): every combination of the fixed or searched values
 * that the model's shape, a node and the GPU count allow and that
 * o->target can run, the plain layout first when it is among them.
 * Returns how many (>= 1), or -1 with err saying why none is left (a
 * fixed value the target cannot run, or that does not fit the job). */
int search_layouts(const search_options *o, zb_layout *out, int cap, zb_err *err);

/* 1 when target t can run layout l, else 0 with why (one clause) in buf;
 * c may be NULL (the layout alone) or the candidate (its pipeline depth
 * and recompute also count). */
int search_layout_runs(const zb_layout *l, const search_candidate *c, search_target t, char *buf,
                       size_t len);

/* 1 when a and b have the same tp, sp, cp, ZeRO level and offload (the
 * dimensions search_layouts varies; pp, chunks and dp are not compared). */
int search_layout_same(const zb_layout *a, const zb_layout *b);

/* Sets every layout dimension of o to searched (what `zbsched search`
 * does before its flags): tp, cp, zero 0 and offload -1. */
void search_layouts_searched(search_options *o);

/* One layout flag of `zbsched search` into o: "--tp" and "--cp" (a power
 * of two up to 64, or "auto"), "--zero" (1, 2, 3, fsdp or auto),
 * "--offload" (a fraction in [0, 1] or auto), "--no-sp" and
 * "--no-tp-overlap" (arg NULL).  Returns 0, or -1 with err saying what
 * the value should be. */
int search_layout_flag(search_options *o, const char *flag, const char *arg, zb_err *err);

/* The layout family of l: "PP x DP", "TP x PP x DP", "FSDP", "with CP"
 * (CP wins over FSDP, FSDP over TP), "offload" when only offload differs. */
const char *search_layout_family(const zb_layout *l);

/* --- the why block (solver/search_why.c) ---------------------------------- */

/* One labelled row of the "why" account under the table: a label ("work
 * bound", "baseline", "pp=4 x dp=2", "megatron"), a time when the row has
 * one, and the rest of the sentence.  Rows of level 1 belong to the
 * heading row (kind SEARCH_WHY_HEADING) before them.  The CLI aligns the
 * labels and the times; the library decides what is said. */
typedef enum search_why_kind {
    SEARCH_WHY_ROW = 0,     /* label, optional ms, text */
    SEARCH_WHY_HEADING = 1, /* label only ("other pipeline depths:") */
} search_why_kind;

typedef struct search_why_row {
    search_why_kind kind; /* row or heading */
    int level;            /* 0: about the winner; 1: under the heading before it */
    char label[48];       /* what the row is about */
    double ms;            /* its time, ms; < 0 when the row has none */
    char text[512];       /* the rest of the line (no newline) */
} search_why_row;

/* Depths (64) + targets + the winner's rows. */
#define SEARCH_WHY_MAX_ROWS 96

typedef struct search_why_block {
    char head[256];                          /* first line ("the winner takes ...") */
    int n;                                   /* rows */
    search_why_row row[SEARCH_WHY_MAX_ROWS]; /* [n] in print order */
} search_why_block;

/* Builds the why block of result r (searched with o; r->n_fit > 0): the
 * bounds, the winner's losses, the baseline, vocabulary parallelism (the
 * zbsched target), every other pipeline depth, and last one row per other
 * target with its best plan and its time as a ratio of the winner's. */
void search_why_build(const search_options *o, const search_result *r, search_why_block *w);

/* "GPU" or, for a CPU device (the GPU file's "kind": "cpu"), "device";
 * plural with an "s" when n != 1. */
const char *search_device_noun(const zb_gpu *g, int n);

/* Adds the "model", "hardware", "predicted" and "plan" objects of candidate
 * c (which must carry a schedule) to c->sched->meta, so the schedule file
 * carries what the runtime needs.  Returns 0 or -1 when memory runs out. */
int search_annotate(const search_options *o, search_candidate *c, zb_err *err);

#endif
