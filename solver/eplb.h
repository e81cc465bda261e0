/*
 * eplb.h: expert placement for mixture-of-experts layers, a C port of
 * DeepSeek's expert-parallel load balancer (EPLB, github.com/deepseek-ai/EPLB,
 * eplb.py).
 *
 * An MoE layer has E logical experts, each with a measured load (tokens
 * routed to it).  The cluster has N nodes of M/N GPUs each, and R physical
 * expert slots, R/M per GPU.  Since R >= E, the R - E redundant slots hold
 * extra replicas of hot experts; a replica takes an equal share of its
 * expert's load.  The balancer decides how many replicas each expert gets
 * and which slot holds each replica, so that the most loaded GPU carries as
 * little as possible.  Experts come in G groups (group-limited routing sends
 * a token to experts of few groups), and traffic inside a node is cheap.
 *
 * Two policies, exactly as in the reference:
 *   - hierarchical (used by `auto` when N divides G): pack the G groups
 *     onto the N nodes (G/N groups each, balancing the group loads), then
 *     within each node replicate its E/N experts into R/N slots, then pack
 *     those slots onto the node's M/N GPUs (R/M slots each).  A group's
 *     experts, and all their replicas, stay inside one node.  It needs N
 *     to divide M.
 *   - global (used by `auto` otherwise): the same with one group and one
 *     node: replicate over all experts, pack the slots over all GPUs.
 *     Nodes play no part in it, so, as in the reference, N need not
 *     divide M: 4 GPUs on 3 nodes is placed, and its node loads are told
 *     with GPU g on node floor(g N / M) (eplb_node_of_gpu).
 *
 * Keeping groups inside nodes can cost node balance: step 1 moves whole
 * groups, and with heavy-tailed loads one group can outweigh a node's
 * share (DeepSeek-V3's shape, 8 groups on 4 nodes, leaves a worst layer
 * near 3x the mean where the global policy gets about 1.1).
 * eplb_compare_global runs the global policy beside a hierarchical
 * placement so that a caller can say so, with both figures.
 *
 * Both steps are greedy.  Replication gives the next redundant slot to the
 * expert with the largest load per replica (w / count), the first such
 * expert on ties.  Packing visits items by load, largest first (ties: lower
 * index first), and puts each into the least loaded pack that still has
 * room (ties: the lower pack index), with equal item counts per pack.
 *
 * Exactness.  The reference runs in float32 (weight.float()).  So does this
 * port: loads are rounded to float, replicas' shares are float divisions,
 * and pack loads are float sums accumulated in the reference's order, so
 * that every comparison the greedy makes, ties included, goes the same
 * way.  Ties matter: the replicas of one expert have equal shares.
 * torch.max(dim) returns the first maximal index, and Python's min the
 * first least pack, as here.  The reference's sort is
 * torch.sort(descending=True) without stable=True; on x86 CPUs PyTorch
 * sorts with x86-simd-sort there, which does not keep equal loads in index
 * order (rows longer than 16 in our measurements, PyTorch 2.15 on AVX2),
 * and whose tie order depends on the CPU's vector width.  This port uses
 * the stable order (equal loads by index), i.e. the reference with
 * stable=True.  When replicas of equal share trade places between GPUs
 * that leaves every GPU's load, and so the balance, unchanged; only two
 * groups of equal total trading nodes (step 1, more than 16 groups) could
 * change more (docs/eplb.md).  The one place the float results may differ
 * is a group's total (step 1): torch sums with a vectorised cascade whose
 * rounding depends on the CPU's vector width; here the sum is taken in
 * double and rounded once to float.  Both are exact, and so the placements identical,
 * whenever the group totals are exactly representable, e.g. integer token
 * counts below 2^24 (tests/solver/eplb_golden.json is checked that way:
 * slot for slot against the reference with stable=True, and in per-GPU
 * loads against the unmodified reference).
 *
 * Workload: DeepSeek-V3 (61 layers x 256 experts -> 288 slots, 8 groups,
 * 4 nodes, 32 GPUs) takes about 1.5 ms with the load figures
 * (bench/bench_eplb.c); the cost is
 * O(L (R - E) E/N + L R log R + L R M/N).
 *
 * Nothing here prints or exits; bad parameters and loads come back as -1
 * with one line in a zb_err.
 */
#ifndef ZB_SOLVER_EPLB_H
#define ZB_SOLVER_EPLB_H

#include <stddef.h>

#include "src/err.h"

/* Limits on the shapes: far beyond real models (DeepSeek-V3: 61 layers, 256
 * experts, 288 slots), small enough that every index product fits an int
 * and a placement's tables stay within a few hundred megabytes. */
#define EPLB_MAX_LAYERS 4096
#define EPLB_MAX_EXPERTS 65536
#define EPLB_MAX_REPLICAS 262144
#define EPLB_MAX_ENTRIES (1L << 26) /* largest layers x experts x max replicas */

typedef enum eplb_policy {
    EPLB_AUTO = 0,     /* hierarchical when nodes divide groups, else global (the reference) */
    EPLB_HIERARCHICAL, /* always hierarchical; groups must be a multiple of nodes */
    EPLB_GLOBAL,       /* always global: groups and nodes ignored for placement */
} eplb_policy;

typedef struct eplb_params {
    int n_layers;       /* rows of the load matrix (MoE layers) */
    int n_experts;      /* columns: logical experts per layer (E) */
    int n_replicas;     /* physical expert slots per layer (R), a multiple of n_gpus, >= E */
    int n_groups;       /* expert groups (G); E must be a multiple of G */
    int n_nodes;        /* server nodes (N), at most M; the hierarchical policy needs
                         * n_gpus to be a multiple of N */
    int n_gpus;         /* GPUs (M), R/M slots each; GPU g lives on node
                         * eplb_node_of_gpu(g) = floor(g N / M) */
    eplb_policy policy; /* which of the two policies to run */
} eplb_params;

typedef struct eplb_result {
    int n_layers;     /* copied from the parameters */
    int n_experts;    /* copied from the parameters */
    int n_replicas;   /* copied from the parameters */
    int n_gpus;       /* copied from the parameters */
    int n_nodes;      /* copied from the parameters */
    int hierarchical; /* 1 when the hierarchical policy ran, 0 for global */
    int fell_back;    /* 1 when `auto` ran the global policy because the
                       * groups do not divide into the nodes (the reference's
                       * fallback), 0 otherwise */
    int max_count;    /* largest replica count of any expert in any layer (>= 1) */
    int *phy2log;     /* [layer][slot]: the logical expert that slot holds */
    int *phyrank;     /* [layer][slot]: which replica of that expert it is (0-based) */
    int *logcnt;      /* [layer][expert]: replicas of the expert (>= 1) */
    int *log2phy;     /* [layer][expert][max_count]: slots of each replica, -1 padded */
} eplb_result;

/* Per-GPU and per-node loads of a placement, next to the loads of the plain
 * layout without redundant experts (expert e on GPU floor(e * M / E), the
 * usual contiguous expert-parallel split), and each layer's balance: the
 * largest load divided by the mean (1 is perfect; a layer with no load at
 * all counts as 1). */
typedef struct eplb_loads {
    int n_layers;          /* rows of every table below */
    int n_gpus;            /* columns of the GPU tables */
    int n_nodes;           /* columns of the node tables */
    double *gpu_before;    /* [layer][gpu] load of the plain layout */
    double *gpu_after;     /* [layer][gpu] load of the placement */
    double *node_before;   /* [layer][node] load of the plain layout */
    double *node_after;    /* [layer][node] load of the placement */
    double *balance_before;      /* [layer] max/mean over GPUs, plain layout */
    double *balance_after;       /* [layer] max/mean over GPUs, placement */
    double *node_balance_before; /* [layer] max/mean over nodes, plain layout */
    double *node_balance_after;  /* [layer] max/mean over nodes, placement */
} eplb_loads;

/* Checks the parameters alone (shapes, divisibility, limits).  The policy
 * that will run decides the rest: the hierarchical one needs G and M to be
 * multiples of N, the global one only N <= M.  Returns 0, or -1 with one
 * line in err naming the first problem. */
int eplb_check_params(const eplb_params *p, zb_err *err);

/* Whether p runs the hierarchical policy: asked for, or `auto` with N
 * dividing G (the reference's rule). */
int eplb_runs_hierarchical(const eplb_params *p);

/* The node of GPU g among M GPUs on N nodes, floor(g N / M): g / (M/N)
 * when N divides M, and contiguous, nearly equal nodes otherwise.  The
 * load tables and the pictures use it. */
int eplb_node_of_gpu(int g, int n_gpus, int n_nodes);

/* The global policy next to a hierarchical placement: the worst layer's
 * node balance (max / mean over nodes) under each, and the GPU balance
 * the global policy gets on that layer and overall. */
typedef struct eplb_global_compare {
    int worse;                  /* 1 when the hierarchical worst node balance is above
                                 * the global one's by more than 1 % */
    int layer;                  /* the hierarchical placement's worst layer (node balance) */
    double node_balance;        /* hierarchical: that layer's node balance */
    double global_node_balance; /* global: its own worst layer's node balance */
    int global_layer;           /* global: that worst layer */
    double gpu_balance;         /* hierarchical: worst layer's GPU balance */
    double global_gpu_balance;  /* global: worst layer's GPU balance */
} eplb_global_compare;

/* Runs the global policy on weight with p's shape and compares it with
 * hier, the loads of a hierarchical placement of the same weight.  Returns
 * 0 and fills *out, or -1 with err set (out of memory). */
int eplb_compare_global(const double *weight, const eplb_params *p, const eplb_loads *hier,
                        eplb_global_compare *out, zb_err *err);

/* Computes the placement of weight (n_layers x n_experts loads, row-major)
 * under p.  Loads must be finite, non-negative and within float range.
 * On success fills *out (caller frees with eplb_result_free) and returns 0;
 * otherwise returns -1 with err set and *out zeroed. */
int eplb_rebalance(const double *weight, const eplb_params *p, eplb_result *out, zb_err *err);

/* Frees the tables of r and zeroes it; safe on a zeroed result. */
void eplb_result_free(eplb_result *r);

/* Computes the loads of placement r for weight (the matrix r was computed
 * from; a replica carries weight / count).  Fills *out (caller frees with
 * eplb_loads_free) and returns 0, or -1 with err set when memory runs out. */
int eplb_compute_loads(const double *weight, const eplb_result *r, eplb_loads *out, zb_err *err);

/* Frees the tables of l and zeroes it; safe on a zeroed value. */
void eplb_loads_free(eplb_loads *l);

/* The policy's name ("auto", "hierarchical", "global"), and the reverse:
 * returns 0 and stores the policy, or -1 with err set for another name. */
const char *eplb_policy_name(eplb_policy policy);
int eplb_policy_parse(const char *name, eplb_policy *out, zb_err *err);

/* Parses a load matrix from text: a JSON array of per-layer arrays of
 * numbers, or CSV (one layer per line, numbers separated by commas; blank
 * lines ignored).  The format is told by the first non-blank character
 * ('[' or '{' is JSON, which must be an array).  Every row must have the
 * same, non-zero length.  Stores a malloc'd row-major matrix in *weight
 * (caller frees) with its shape and returns 0, or -1 with err naming the
 * row and column of the first problem (not a number, not finite, negative,
 * ragged rows, empty), or the JSON problem (text after the array, a NUL in
 * a string, a key twice) or a NUL byte in a CSV. */
int eplb_parse_weights(const char *text, size_t len, double **weight, int *n_layers,
                       int *n_experts, zb_err *err);

/* The mean and the largest of v[0..n), n > 0: a column of a placement's
 * per-layer balances summarised as the table and the JSON both show it. */
void eplb_mean_max(const double *v, int n, double *mean, double *max);

/* The whole placement as one JSON document (the one `zbsched eplb --json`
 * prints; docs/eplb.md lists its keys): p and r as computed, ld their
 * loads, cmp the global policy's comparison when the hierarchical one ran,
 * else NULL.  Stores a malloc'd NUL-terminated text ending in a newline in
 * *doc (caller frees) with its length in *len and returns 0, or -1 with
 * err set when memory runs out. */
int eplb_placement_json(const eplb_params *p, const eplb_result *r, const eplb_loads *ld,
                        const eplb_global_compare *cmp, char **doc, size_t *len, zb_err *err);

#endif
