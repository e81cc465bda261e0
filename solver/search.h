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
 * Candidates that fit are ranked by the time the runtime realises: the
 * largest per-device span (the paper's cost; the runtime steps each
 * device's optimizer when its own ops are done) plus the exposed
 * data-parallel gradient sync.  docs/search.md describes the choices.
 *
 * Workload: a few thousand candidates of up to a few thousand ops each; the
 * default search takes well under a second of CPU (bench/README.md).
 */
#ifndef ZB_SEARCH_H
#define ZB_SEARCH_H

#include "src/cost_model.h"
#include "src/sched.h"

/* Iteration times closer than this ratio rank as equal, and the smaller
 * peak memory wins among them: a schedule faster only in the fifth digit
 * (floating-point noise of the simulation, far below what a real run
 * resolves) should not beat one that needs much less memory. */
#define SEARCH_TIME_RESOLUTION 1.0005

/* Largest pipeline depth and virtual stages the search handles. */
#define SEARCH_MAX_STAGES 4096

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
    int vocab;                 /* vocabulary parallelism (docs/vocab-parallel.md), one of
                                * SEARCH_VOCAB_*: plain plans only (library default), both
                                * kinds ranked together (the CLI's default, --vocab auto), or
                                * only vocabulary-parallel plans may win (--vocab parallel);
                                * the vocabulary-parallel plans are each label's best of every
                                * depth with the output layer and embedding split over the
                                * devices, Vocab-1 and Vocab-2 */
    int ilp;                   /* 1: also run the ILP on the best few plain-placement configs */
    int ilp_top;               /* how many configs the ILP refines (default 3) */
    double ilp_time_limit;     /* seconds per ILP run (default 10) */
    /* Progress: called after each candidate with done and an estimate of the
     * total; may be NULL. */
    void (*progress)(void *ctx, int done, int total);
    void *progress_ctx;        /* passed to progress */
    /* Called with what the search does next when that is slow (before each
     * ILP run: "ilp on b=1, recompute on"), with progress_ctx; may be NULL. */
    void (*progress_stage)(void *ctx, const char *what);
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
} search_status;

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
    int pp, dp;            /* pipeline depth, data-parallel width */
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
    double time_ms;        /* the ranked figure: largest per-device span with its exposed sync, ms */
    double busy_max_ms;    /* busiest device's compute time (imbalance bound), ms */
    double busy_mean_ms;   /* total compute / devices (work bound), ms */
    double speedup;        /* baseline time / time_ms (0 when there is no baseline) */
    double bubble_rate;    /* the paper's bubble rate, from the simulator */
    double tokens_per_s;   /* tokens per second per GPU over the whole job, at time_ms */
    double mfu;            /* model FLOPs utilisation (useful FLOPs / peak) */
    sched_t *sched;        /* the schedule with costs, for the best few; else NULL; owned */
} search_candidate;

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
    int vocab_pruned;         /* vocabulary-parallel versions not simulated: their busiest
                               * device's compute alone reached the best plan's time */
    search_candidate baseline; /* plain 1F1B, b=1, recompute everywhere, default split, deepest
                                * pipeline; status SEARCH_SKIPPED when it could not be built */
} search_result;

/* Fills o with the defaults: llama3-8b on H100-80G, 8 GPUs with every
 * pipeline depth dividing 8, global batch 64, 40 GB (mem_bytes = 40e9),
 * recompute searched, flash attention, plain loss, balanced and paper
 * splits with a local search, no extra ZeRO, b up to 64, no ILP (3 configs,
 * 10 s each when on). */
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

/* Adds the "model", "hardware", "predicted" and "plan" objects of candidate
 * c (which must carry a schedule) to c->sched->meta, so the schedule file
 * carries what the runtime needs.  Returns 0 or -1 when memory runs out. */
int search_annotate(const search_options *o, search_candidate *c, zb_err *err);

#endif
