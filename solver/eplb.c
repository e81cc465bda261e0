/*
 * eplb.c: DeepSeek's expert-parallel load balancer (eplb.h), one layer at a
 * time.
 *
 * The reference (eplb.py) works on whole [layers, ...] tensors with
 * gathers, scatters and inverse permutations.  Row by row the same steps are
 * plain index arithmetic, so this file keeps the reference's names for the
 * intermediate numberings and computes them per layer:
 *
 *   log    logical expert, 0..E-1 (the input's column)
 *   mlog   "meta-logical" expert: logical experts renumbered so that node n
 *          owns mlog n*E/N .. (n+1)*E/N - 1, its groups in pack-rank order
 *   phy    a node's physical replica before packing, 0..R/N-1: the first
 *          E/N are one replica of each of its experts, the rest are the
 *          redundant ones in the order replication chose them
 *   pphy   the final slot inside the node: GPU-major, R/M slots per GPU
 *
 * All arithmetic that steers a decision is float32, as in the reference
 * (see eplb.h on exactness); the loads reported afterwards are doubles.
 *
 * Memory: the result tables (O(L R + L E max_count) ints) plus per-layer
 * scratch of O(E + R); nothing is allocated inside the per-layer loop.
 */
#include "solver/eplb.h"

#include <assert.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One index and its key, for sorting items by load. */
typedef struct eplb_item {
    float key; /* the item's load */
    int index; /* the item's position in its row */
} eplb_item;

/* Largest load first; equal loads in index order.  That is what a stable
 * descending sort (torch.sort on the CPU) yields, and as a total order it
 * makes qsort's result unique. */
static int item_cmp_desc(const void *a, const void *b)
{
    const eplb_item *x = a, *y = b;
    if (x->key != y->key)
        return x->key > y->key ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

/* Scratch for one layer, sized for the largest row any step sees. */
typedef struct eplb_scratch {
    eplb_item *items;  /* [max(G, R/N)] sort buffer */
    float *pack_load;  /* [max(N, M/N)] running load of each pack */
    int *pack_items;   /* [max(N, M/N)] items placed in each pack so far */
    float *group_load; /* [G] total load of each group */
    int *group_pack;   /* [G] node each group goes to */
    int *group_rank;   /* [G] the group's position within its node */
    int *log2mlog;     /* [E] */
    int *mlog2log;     /* [E] */
    int *mlogcnt;      /* [E] replica count, indexed by mlog */
    float *mlog_load;  /* [E/N] loads of one node's experts, by mlog */
    int *phy2mlog;     /* [R/N] */
    int *phy_rank;     /* [R/N] replica rank of each phy */
    float *phy_load;   /* [R/N] share of load each phy carries */
    int *phy_pack;     /* [R/N] GPU (within the node) of each phy */
    int *phy_in_pack;  /* [R/N] its position on that GPU */
    int *pphy2phy;     /* [R/N] */
} eplb_scratch;

/* balanced_packing for one row: places n items of loads w into n_packs
 * packs of n / n_packs items each.  Items go largest first (ties by index)
 * into the least loaded pack with room (ties: lowest pack).  With one item
 * per pack the reference skips the greedy and puts item i in pack i; so do
 * we, since the greedy would order them by load instead. */
static void pack_row(const float *w, int n, int n_packs, int *pack, int *rank,
                     eplb_scratch *s)
{
    assert(n_packs > 0 && n % n_packs == 0);
    int per_pack = n / n_packs;
    if (per_pack == 1) {
        for (int i = 0; i < n; i++) {
            pack[i] = i;
            rank[i] = 0;
        }
        return;
    }
    for (int i = 0; i < n; i++) {
        s->items[i].key = w[i];
        s->items[i].index = i;
    }
    qsort(s->items, (size_t)n, sizeof *s->items, item_cmp_desc);
    for (int p = 0; p < n_packs; p++) {
        s->pack_load[p] = 0.0f;
        s->pack_items[p] = 0;
    }
    for (int k = 0; k < n; k++) {
        int item = s->items[k].index, best = -1;
        for (int p = 0; p < n_packs; p++)
            if (s->pack_items[p] < per_pack && (best < 0 || s->pack_load[p] < s->pack_load[best]))
                best = p;
        assert(best >= 0);
        pack[item] = best;
        rank[item] = s->pack_items[best]++;
        s->pack_load[best] += w[item]; /* float32 running sum, as in the reference */
    }
}

/* replicate_experts for one row: n_log experts of loads w into n_phy
 * replicas.  phy i < n_log is expert i; each later phy goes to the expert
 * with the largest load per replica, the first on ties (torch.max). */
static void replicate_row(const float *w, int n_log, int n_phy, int *phy2log, int *rank,
                          int *cnt)
{
    assert(n_phy >= n_log);
    for (int i = 0; i < n_log; i++) {
        phy2log[i] = i;
        rank[i] = 0;
        cnt[i] = 1;
    }
    for (int i = n_log; i < n_phy; i++) {
        int best = 0;
        float best_share = w[0] / (float)cnt[0];
        for (int j = 1; j < n_log; j++) {
            float share = w[j] / (float)cnt[j];
            if (share > best_share) {
                best_share = share;
                best = j;
            }
        }
        phy2log[i] = best;
        rank[i] = cnt[best]++;
    }
}

/* The hierarchical policy for one layer (the global one is this with one
 * group and one node).  w: the layer's E loads in float; fills the layer's
 * rows of phy2log, phyrank and logcnt. */
static void rebalance_layer(const float *w, int E, int R, int G, int N, int M, int *phy2log,
                            int *phyrank, int *logcnt, eplb_scratch *s)
{
    int group_size = E / G, groups_per_node = G / N;
    int log_per_node = E / N, phy_per_node = R / N, slots_per_gpu = R / M;

    /* Step 1: groups onto nodes by their total load. */
    for (int g = 0; g < G; g++) {
        double sum = 0;
        for (int k = 0; k < group_size; k++)
            sum += w[g * group_size + k];
        s->group_load[g] = (float)sum;
    }
    pack_row(s->group_load, G, N, s->group_pack, s->group_rank, s);
    for (int g = 0; g < G; g++)
        for (int k = 0; k < group_size; k++) {
            int log = g * group_size + k;
            int mlog = (s->group_pack[g] * groups_per_node + s->group_rank[g]) * group_size + k;
            s->log2mlog[log] = mlog;
            s->mlog2log[mlog] = log;
        }

    for (int n = 0; n < N; n++) {
        /* Step 2: replicate the node's experts into its slots. */
        for (int j = 0; j < log_per_node; j++)
            s->mlog_load[j] = w[s->mlog2log[n * log_per_node + j]];
        int *cnt = s->mlogcnt + n * log_per_node;
        replicate_row(s->mlog_load, log_per_node, phy_per_node, s->phy2mlog, s->phy_rank, cnt);

        /* Step 3: the replicas onto the node's GPUs by their shares. */
        for (int p = 0; p < phy_per_node; p++) {
            int j = s->phy2mlog[p];
            s->phy_load[p] = s->mlog_load[j] / (float)cnt[j];
        }
        pack_row(s->phy_load, phy_per_node, M / N, s->phy_pack, s->phy_in_pack, s);
        for (int p = 0; p < phy_per_node; p++)
            s->pphy2phy[s->phy_pack[p] * slots_per_gpu + s->phy_in_pack[p]] = p;
        for (int q = 0; q < phy_per_node; q++) {
            int p = s->pphy2phy[q], slot = n * phy_per_node + q;
            phy2log[slot] = s->mlog2log[n * log_per_node + s->phy2mlog[p]];
            phyrank[slot] = s->phy_rank[p];
        }
    }
    for (int e = 0; e < E; e++)
        logcnt[e] = s->mlogcnt[s->log2mlog[e]];
}

static void scratch_free(eplb_scratch *s)
{
    free(s->items);
    free(s->pack_load);
    free(s->pack_items);
    free(s->group_load);
    free(s->group_pack);
    free(s->group_rank);
    free(s->log2mlog);
    free(s->mlog2log);
    free(s->mlogcnt);
    free(s->mlog_load);
    free(s->phy2mlog);
    free(s->phy_rank);
    free(s->phy_load);
    free(s->phy_pack);
    free(s->phy_in_pack);
    free(s->pphy2phy);
}

static int scratch_alloc(eplb_scratch *s, int E, int R, int G, int N, int M)
{
    memset(s, 0, sizeof *s);
    size_t rows = (size_t)(G > R / N ? G : R / N), packs = (size_t)(N > M / N ? N : M / N);
    size_t phy = (size_t)(R / N);
    s->items = malloc(rows * sizeof *s->items);
    s->pack_load = malloc(packs * sizeof *s->pack_load);
    s->pack_items = malloc(packs * sizeof *s->pack_items);
    s->group_load = malloc((size_t)G * sizeof *s->group_load);
    s->group_pack = malloc((size_t)G * sizeof *s->group_pack);
    s->group_rank = malloc((size_t)G * sizeof *s->group_rank);
    s->log2mlog = malloc((size_t)E * sizeof *s->log2mlog);
    s->mlog2log = malloc((size_t)E * sizeof *s->mlog2log);
    s->mlogcnt = malloc((size_t)E * sizeof *s->mlogcnt);
    s->mlog_load = malloc((size_t)(E / N) * sizeof *s->mlog_load);
    s->phy2mlog = malloc(phy * sizeof *s->phy2mlog);
    s->phy_rank = malloc(phy * sizeof *s->phy_rank);
    s->phy_load = malloc(phy * sizeof *s->phy_load);
    s->phy_pack = malloc(phy * sizeof *s->phy_pack);
    s->phy_in_pack = malloc(phy * sizeof *s->phy_in_pack);
    s->pphy2phy = malloc(phy * sizeof *s->pphy2phy);
    if (!s->items || !s->pack_load || !s->pack_items || !s->group_load || !s->group_pack ||
        !s->group_rank || !s->log2mlog || !s->mlog2log || !s->mlogcnt || !s->mlog_load ||
        !s->phy2mlog || !s->phy_rank || !s->phy_load || !s->phy_pack || !s->phy_in_pack ||
        !s->pphy2phy) {
        scratch_free(s);
        return -1;
    }
    return 0;
}

const char *eplb_policy_name(eplb_policy policy)
{
    switch (policy) {
    case EPLB_HIERARCHICAL: return "hierarchical";
    case EPLB_GLOBAL: return "global";
    default: return "auto";
    }
}

int eplb_policy_parse(const char *name, eplb_policy *out, zb_err *err)
{
    static const eplb_policy all[] = { EPLB_AUTO, EPLB_HIERARCHICAL, EPLB_GLOBAL };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (!strcmp(name, eplb_policy_name(all[i]))) {
            *out = all[i];
            return 0;
        }
    return zb_fail(err, "--policy: '%s' is not one of auto, hierarchical, global", name);
}

int eplb_check_params(const eplb_params *p, zb_err *err)
{
    if (p->n_layers < 1 || p->n_layers > EPLB_MAX_LAYERS)
        return zb_fail(err, "layers: %d is out of range (1..%d)", p->n_layers, EPLB_MAX_LAYERS);
    if (p->n_experts < 1 || p->n_experts > EPLB_MAX_EXPERTS)
        return zb_fail(err, "experts per layer: %d is out of range (1..%d)", p->n_experts,
                       EPLB_MAX_EXPERTS);
    if (p->n_replicas < 1 || p->n_replicas > EPLB_MAX_REPLICAS)
        return zb_fail(err, "replicas: %d is out of range (1..%d)", p->n_replicas,
                       EPLB_MAX_REPLICAS);
    if (p->n_groups < 1 || p->n_nodes < 1 || p->n_gpus < 1)
        return zb_fail(err, "groups, nodes and GPUs must each be at least 1");
    if (p->n_replicas < p->n_experts)
        return zb_fail(err, "replicas (%d) must be at least the number of experts (%d)",
                       p->n_replicas, p->n_experts);
    if (p->n_replicas % p->n_gpus)
        return zb_fail(err, "replicas (%d) must be a multiple of GPUs (%d)", p->n_replicas,
                       p->n_gpus);
    if (p->n_nodes > p->n_gpus)
        return zb_fail(err, "nodes (%d) must not outnumber GPUs (%d)", p->n_nodes, p->n_gpus);
    if (p->n_experts % p->n_groups)
        return zb_fail(err, "experts (%d) must be a multiple of groups (%d)", p->n_experts,
                       p->n_groups);
    if (p->policy != EPLB_AUTO && p->policy != EPLB_HIERARCHICAL && p->policy != EPLB_GLOBAL)
        return zb_fail(err, "unknown policy %d", (int)p->policy);
    if (p->policy == EPLB_HIERARCHICAL && p->n_groups % p->n_nodes)
        return zb_fail(err,
                       "groups (%d) must be a multiple of nodes (%d) for the hierarchical policy",
                       p->n_groups, p->n_nodes);
    /* The global policy ignores nodes (the reference passes it one node),
     * so only the hierarchical one needs whole nodes of GPUs. */
    if (eplb_runs_hierarchical(p) && p->n_gpus % p->n_nodes)
        return zb_fail(err, "GPUs (%d) must be a multiple of nodes (%d) for the hierarchical "
                       "policy%s", p->n_gpus, p->n_nodes,
                       p->policy == EPLB_AUTO ? ", which auto picks because the nodes divide "
                                                "the groups; --policy global places them anyway"
                                              : "");
    /* The worst case of max_count is R - E + 1, all redundancy on one expert. */
    long entries = (long)p->n_layers * p->n_experts * (p->n_replicas - p->n_experts + 1);
    long slots = (long)p->n_layers * p->n_replicas;
    if (entries > EPLB_MAX_ENTRIES || slots > EPLB_MAX_ENTRIES)
        return zb_fail(err, "%d layers x %d experts x %d replicas is too large (limit %ld table entries)",
                       p->n_layers, p->n_experts, p->n_replicas, EPLB_MAX_ENTRIES);
    return 0;
}

int eplb_runs_hierarchical(const eplb_params *p)
{
    return p->policy == EPLB_HIERARCHICAL ||
           (p->policy == EPLB_AUTO && p->n_nodes > 0 && p->n_groups % p->n_nodes == 0);
}

int eplb_node_of_gpu(int g, int n_gpus, int n_nodes)
{
    assert(n_gpus > 0 && n_nodes > 0 && n_nodes <= n_gpus && g >= 0 && g < n_gpus);
    return (int)((long)g * n_nodes / n_gpus);
}

void eplb_result_free(eplb_result *r)
{
    free(r->phy2log);
    free(r->phyrank);
    free(r->logcnt);
    free(r->log2phy);
    memset(r, 0, sizeof *r);
}

int eplb_rebalance(const double *weight, const eplb_params *p, eplb_result *out, zb_err *err)
{
    memset(out, 0, sizeof *out);
    if (eplb_check_params(p, err))
        return -1;
    int L = p->n_layers, E = p->n_experts, R = p->n_replicas, M = p->n_gpus;
    int hier = eplb_runs_hierarchical(p);
    int G = hier ? p->n_groups : 1, N = hier ? p->n_nodes : 1;
    for (int l = 0; l < L; l++)
        for (int e = 0; e < E; e++) {
            double v = weight[(size_t)l * E + e];
            if (!isfinite(v))
                return zb_fail(err, "layer %d, expert %d: load is not finite", l, e);
            if (v < 0)
                return zb_fail(err, "layer %d, expert %d: load %g is negative", l, e, v);
            if (v > FLT_MAX)
                return zb_fail(err, "layer %d, expert %d: load %g is beyond float range", l, e, v);
        }

    float *wf = malloc((size_t)E * sizeof *wf);
    eplb_scratch s;
    int scratch_ok = scratch_alloc(&s, E, R, G, N, M) == 0;
    out->phy2log = malloc((size_t)L * R * sizeof *out->phy2log);
    out->phyrank = malloc((size_t)L * R * sizeof *out->phyrank);
    out->logcnt = malloc((size_t)L * E * sizeof *out->logcnt);
    if (!wf || !scratch_ok || !out->phy2log || !out->phyrank || !out->logcnt) {
        free(wf);
        if (scratch_ok)
            scratch_free(&s);
        eplb_result_free(out);
        return zb_fail(err, "out of memory for %d layers x %d replicas", L, R);
    }
    out->n_layers = L;
    out->n_experts = E;
    out->n_replicas = R;
    out->n_gpus = M;
    out->n_nodes = p->n_nodes;
    out->hierarchical = hier;
    out->fell_back = p->policy == EPLB_AUTO && !hier;
    for (int l = 0; l < L; l++) {
        for (int e = 0; e < E; e++)
            wf[e] = (float)weight[(size_t)l * E + e];
        rebalance_layer(wf, E, R, G, N, M, out->phy2log + (size_t)l * R,
                        out->phyrank + (size_t)l * R, out->logcnt + (size_t)l * E, &s);
    }
    free(wf);
    scratch_free(&s);

    int maxc = 1;
    for (size_t i = 0; i < (size_t)L * E; i++)
        maxc = out->logcnt[i] > maxc ? out->logcnt[i] : maxc;
    out->max_count = maxc;
    size_t n_entries = (size_t)L * E * maxc;
    out->log2phy = malloc(n_entries * sizeof *out->log2phy);
    if (!out->log2phy) {
        eplb_result_free(out);
        return zb_fail(err, "out of memory for the logical-to-physical map");
    }
    for (size_t i = 0; i < n_entries; i++)
        out->log2phy[i] = -1;
    for (int l = 0; l < L; l++)
        for (int q = 0; q < R; q++) {
            size_t i = (size_t)l * R + q;
            int e = out->phy2log[i], k = out->phyrank[i];
            assert(e >= 0 && e < E && k >= 0 && k < out->logcnt[(size_t)l * E + e]);
            size_t at = ((size_t)l * E + e) * maxc + k;
            assert(out->log2phy[at] == -1);
            out->log2phy[at] = q;
        }
    return 0;
}

void eplb_loads_free(eplb_loads *l)
{
    free(l->gpu_before);
    free(l->gpu_after);
    free(l->node_before);
    free(l->node_after);
    free(l->balance_before);
    free(l->balance_after);
    free(l->node_balance_before);
    free(l->node_balance_after);
    memset(l, 0, sizeof *l);
}

/* max / mean of n loads; 1 when they are all zero. */
static double balance_of(const double *load, int n)
{
    double max = 0, sum = 0;
    for (int i = 0; i < n; i++) {
        sum += load[i];
        max = load[i] > max ? load[i] : max;
    }
    return sum > 0 ? max / (sum / n) : 1.0;
}

int eplb_compute_loads(const double *weight, const eplb_result *r, eplb_loads *out, zb_err *err)
{
    memset(out, 0, sizeof *out);
    int L = r->n_layers, E = r->n_experts, R = r->n_replicas, M = r->n_gpus, N = r->n_nodes;
    int slots_per_gpu = R / M;
    out->n_layers = L;
    out->n_gpus = M;
    out->n_nodes = N;
    out->gpu_before = calloc((size_t)L * M, sizeof(double));
    out->gpu_after = calloc((size_t)L * M, sizeof(double));
    out->node_before = calloc((size_t)L * N, sizeof(double));
    out->node_after = calloc((size_t)L * N, sizeof(double));
    out->balance_before = calloc((size_t)L, sizeof(double));
    out->balance_after = calloc((size_t)L, sizeof(double));
    out->node_balance_before = calloc((size_t)L, sizeof(double));
    out->node_balance_after = calloc((size_t)L, sizeof(double));
    if (!out->gpu_before || !out->gpu_after || !out->node_before || !out->node_after ||
        !out->balance_before || !out->balance_after || !out->node_balance_before ||
        !out->node_balance_after) {
        eplb_loads_free(out);
        return zb_fail(err, "out of memory for the load tables");
    }
    for (int l = 0; l < L; l++) {
        const double *w = weight + (size_t)l * E;
        double *gb = out->gpu_before + (size_t)l * M, *ga = out->gpu_after + (size_t)l * M;
        double *nb = out->node_before + (size_t)l * N, *na = out->node_after + (size_t)l * N;
        for (int e = 0; e < E; e++)
            gb[(long)e * M / E] += w[e];
        for (int q = 0; q < R; q++) {
            int e = r->phy2log[(size_t)l * R + q];
            ga[q / slots_per_gpu] += w[e] / r->logcnt[(size_t)l * E + e];
        }
        for (int g = 0; g < M; g++) {
            nb[eplb_node_of_gpu(g, M, N)] += gb[g];
            na[eplb_node_of_gpu(g, M, N)] += ga[g];
        }
        out->balance_before[l] = balance_of(gb, M);
        out->balance_after[l] = balance_of(ga, M);
        out->node_balance_before[l] = balance_of(nb, N);
        out->node_balance_after[l] = balance_of(na, N);
    }
    return 0;
}

/* The first layer with the largest value of v[0..n-1]. */
static int worst_of(const double *v, int n)
{
    int worst = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[worst])
            worst = i;
    return worst;
}

int eplb_compare_global(const double *weight, const eplb_params *p, const eplb_loads *hier,
                        eplb_global_compare *out, zb_err *err)
{
    memset(out, 0, sizeof *out);
    eplb_params gp = *p;
    gp.policy = EPLB_GLOBAL;
    eplb_result g;
    eplb_loads gl;
    if (eplb_rebalance(weight, &gp, &g, err))
        return -1;
    if (eplb_compute_loads(weight, &g, &gl, err)) {
        eplb_result_free(&g);
        return -1;
    }
    int L = hier->n_layers;
    out->layer = worst_of(hier->node_balance_after, L);
    out->node_balance = hier->node_balance_after[out->layer];
    out->gpu_balance = hier->balance_after[worst_of(hier->balance_after, L)];
    out->global_layer = worst_of(gl.node_balance_after, L);
    out->global_node_balance = gl.node_balance_after[out->global_layer];
    out->global_gpu_balance = gl.balance_after[worst_of(gl.balance_after, L)];
    /* 1 %: below that the two are the same balance for any purpose, and a
     * note would only be noise. */
    out->worse = out->node_balance > out->global_node_balance * 1.01;
    eplb_loads_free(&gl);
    eplb_result_free(&g);
    return 0;
}
