/*
 * search.h: the fastest pipeline schedule that fits a per-GPU memory limit
 * (`zbsched search`).
 *
 * For every micro-batch size b that divides the global batch (powers of two
 * and the model's own b), with activation recompute off and on, the search
 * builds each schedule family on p devices (1F1B; interleaved 1F1B with
 * every chunk count the layers allow; ZB-H1; ZB-H2; zb-auto at limits p,
 * 1.5p and 2p times M_B and at the largest limit that fits; the V family
 * zb-v, v-min, v-half, v-zb), puts the cost model's per-stage times and
 * memory on it (src/cost_model.h), simulates it (src/sim.h) and compares
 * the peak of static + activation memory on its fullest device with the
 * limit.  Candidates that fit are ranked by simulated iteration time.
 * docs/search.md describes the choices.
 *
 * Workload: a few hundred candidates of up to a few thousand ops each; the
 * default search takes well under a second of CPU.
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

typedef struct search_options {
    zb_model model;            /* model; its micro_batch is one of the sizes tried */
    zb_gpu gpu;                /* hardware of every device */
    const zb_profile *profile; /* measured figures replacing the estimate, or NULL; borrowed */
    double mem_bytes;          /* memory limit per GPU, bytes (> 0) */
    int n_devices;             /* p, pipeline devices */
    int global_batch;          /* sequences per iteration; m = global_batch / b */
    int recompute;             /* -1 try both (default), 0 off, 1 on */
    int flash_attention;       /* 1 (default) */
    cost_split split;          /* layer split; default COST_SPLIT_BALANCED */
    int zero1_dp;              /* ZeRO-1 data-parallel degree; 1 = none */
    int max_micro_batch;       /* largest b tried (default 64) */
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
    int recompute;         /* 1 with activation recompute */
    search_status status;  /* fit, out of memory, or skipped */
    char note[512];        /* why it was dropped or skipped; empty when it fits */
    double peak_bytes;     /* static + activation peak on the fullest device */
    int peak_device;       /* that device */
    double static_bytes;   /* static memory (weights, optimizer, reserve) on that device */
    double iter_ms;        /* simulated iteration time (makespan), ms */
    double cost_ms;        /* the paper's cost: largest per-device span, ms */
    double bubble_rate;    /* the paper's bubble rate, from the simulator */
    double tokens_per_s;   /* tokens per second per GPU */
    double mfu;            /* model FLOPs utilisation (useful FLOPs / peak) */
    sched_t *sched;        /* the schedule with costs, for the best few; else NULL; owned */
} search_candidate;

typedef struct search_result {
    int n;                    /* candidates */
    search_candidate *c;      /* [n] fits first (fastest first), then OOM (smallest peak first), then skipped */
    int n_fit;                /* leading candidates that fit */
    double min_peak_bytes;    /* smallest simulated peak over all candidates (what would fit); 0 if none ran */
    int min_peak_index;       /* candidate with that peak, or -1 */
} search_result;

/* Fills o with the defaults: llama3-8b on H100-80G, 8 devices, global batch
 * 64, 40 GB (mem_bytes = 40e9), recompute tried both ways, flash attention,
 * balanced layer split, no ZeRO, b up to 64, no ILP (3 configs, 10 s each
 * when on). */
void search_options_default(search_options *o);

/* Runs the search.  Fills *r (caller frees with search_result_free); the
 * best candidate, when r->n_fit > 0, is r->c[0] with its schedule in
 * r->c[0].sched.  Returns 0 (also when nothing fits: r->n_fit == 0), or -1
 * with err set for bad options or when memory runs out. */
int search_run(const search_options *o, search_result *r, zb_err *err);

/* Frees what search_run allocated inside r; safe on a zeroed result. */
void search_result_free(search_result *r);

/* Adds the "model", "hardware", "predicted" and "plan" objects of candidate
 * c (which must carry a schedule) to c->sched->meta, so the schedule file
 * carries what the runtime needs.  Returns 0 or -1 when memory runs out. */
int search_annotate(const search_options *o, search_candidate *c, zb_err *err);

#endif
