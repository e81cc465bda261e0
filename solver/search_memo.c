/*
 * search_memo.c: each distinct build of a depth made once (search_state.h,
 * docs/search.md "Pruning").
 *
 * The search tries every family on both split rules (balanced and the
 * paper's).  Where the two rules give a placement the same layers per
 * virtual stage, the plans are the same: a family's order reads only its
 * own placement's costs, its memory limits and, for the generators, the
 * uniform parameters; the costs read only the layers and the
 * configuration's micro-batch and recompute.  On deep pipelines the rules
 * mostly agree (llama3-405b on 128 stages of the V has at most one layer a
 * stage whichever rule splits it), and half of the 1,188 plans a
 * llama3-405b search on 1,024 GPUs built were such twins; a V solver's
 * twin costs its eight greedy runs again.
 *
 * So each build's key (search_build_key: the label, micro-batch, recompute
 * setting, the placement's costs, the limits and, for generators, the
 * uniform parameters) is kept with the figures it gave, and a later
 * candidate with an equal key takes the figures instead of being built.  It takes no schedule: an
 * equal candidate of the same label ranks after the first under every
 * rule (creation order breaks the tie), so it is never a label's best and
 * never the schedule a later step starts from or answers with.
 *
 * A build that was pruned (its plan lost to its label's best before it
 * was simulated: by its peak, or by the cost its solver could not get
 * under) is kept too, as search_memo_pruned: its twin's plan loses the
 * same way, the label's best having only improved since.
 *
 * Workload: a few thousand entries per depth, found by a 64-bit hash in an
 * open-addressed table, keys compared in full on a hash match.  Cleared
 * with the label bests at each depth and layout.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "solver/search_state.h"

/* One build: the key's arrays copied, and the figures it gave. */
struct search_memo_entry {
    uint64_t hash;           /* key_hash of its key */
    char label[40];          /* the family's label */
    int chunks, b, m;        /* virtual stages per device, micro-batch size, count */
    int rc_devices, rc_stages, rc_mlp; /* the recompute setting */
    int n_stages, n_devices; /* the placement's shape */
    stage_cost *cost;        /* [n_stages] its costs, owned */
    double *mem_static;      /* [n_devices] its static memory, owned */
    double t_comm;           /* its link time */
    int n_limit;             /* entries of limit, 0 when the build read none */
    double *limit;           /* [n_limit] owned */
    int has_gp;              /* 1: a generator, gp read */
    gen_params gp;           /* its uniform parameters (mem_limit cleared: in limit) */
    search_candidate fig;    /* the figures; layers owned (fig.n_stages), sched NULL */
    int pruned;              /* 1: the build was pruned, fig unused */
};

const search_candidate search_memo_pruned; /* what find returns for a pruned build */

/* FNV-1a's step, eight bytes at a time: a key holds every stage's costs
 * (up to a few hundred stages of 48 bytes), and hashing them a byte at a
 * time, one multiply after another, was 2% of a 70B search's time
 * (perf).  The hash only picks the slot (key_equal compares exactly). */
static uint64_t mix(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, sizeof w);
        h = (h ^ w) * 1099511628211ull;
        h ^= h >> 29; /* the high bits down: a multiply carries only upwards */
    }
    for (; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* The gen_params fields a generator reads (mem_limit is the key's limit). */
static void gp_fields(const gen_params *gp, double d[7], int i[3])
{
    d[0] = gp->t_f, d[1] = gp->t_b, d[2] = gp->t_w, d[3] = gp->t_comm;
    d[4] = gp->m_f, d[5] = gp->m_b, d[6] = gp->m_w;
    i[0] = gp->stages, i[1] = gp->microbatches, i[2] = gp->chunks;
}

static uint64_t key_hash(const search_build_key *k)
{
    const sched_t *pl = k->placement;
    uint64_t h = 14695981039346656037ull;
    h = mix(h, k->label, strlen(k->label));
    const int i[9] = { k->chunks, k->b, k->m, k->rc_devices, k->rc_stages, k->rc_mlp,
                       pl->n_stages, pl->n_devices, k->n_limit };
    h = mix(h, i, sizeof i);
    h = mix(h, pl->cost, sizeof *pl->cost * (size_t)pl->n_stages);
    h = mix(h, pl->mem_static, sizeof *pl->mem_static * (size_t)pl->n_devices);
    h = mix(h, &pl->t_comm, sizeof pl->t_comm);
    if (k->n_limit > 0)
        h = mix(h, k->limit, sizeof *k->limit * (size_t)k->n_limit);
    if (k->gp) {
        double d[7];
        int g[3];
        gp_fields(k->gp, d, g);
        h = mix(mix(h, d, sizeof d), g, sizeof g);
    }
    return h;
}

/* Exact comparison: the hash only finds the slot. */
static int key_equal(const search_memo_entry *e, uint64_t hash, const search_build_key *k)
{
    const sched_t *pl = k->placement;
    if (e->hash != hash || strcmp(e->label, k->label) || e->chunks != k->chunks || e->b != k->b ||
        e->m != k->m || e->rc_devices != k->rc_devices || e->rc_stages != k->rc_stages ||
        e->rc_mlp != k->rc_mlp || e->n_stages != pl->n_stages || e->n_devices != pl->n_devices ||
        e->t_comm != pl->t_comm || e->n_limit != k->n_limit || e->has_gp != (k->gp != NULL))
        return 0;
    if (memcmp(e->cost, pl->cost, sizeof *pl->cost * (size_t)pl->n_stages) ||
        memcmp(e->mem_static, pl->mem_static, sizeof *pl->mem_static * (size_t)pl->n_devices) ||
        (k->n_limit > 0 && memcmp(e->limit, k->limit, sizeof *k->limit * (size_t)k->n_limit)))
        return 0;
    if (k->gp) {
        double da[7], db[7];
        int ia[3], ib[3];
        gp_fields(&e->gp, da, ia);
        gp_fields(k->gp, db, ib);
        return !memcmp(da, db, sizeof da) && !memcmp(ia, ib, sizeof ia);
    }
    return 1;
}

static void entry_free(search_memo_entry *e)
{
    free(e->cost);
    free(e->mem_static);
    free(e->limit);
    free(e->fig.layers);
}

void search_memo_clear(search_memo *m)
{
    for (int i = 0; i < m->n; i++)
        entry_free(&m->e[i]);
    m->n = 0;
    for (int i = 0; i < m->n_slots; i++)
        m->slot[i] = -1;
}

void search_memo_free(search_memo *m)
{
    search_memo_clear(m);
    free(m->e);
    free(m->slot);
    memset(m, 0, sizeof *m);
}

/* The slot where key hash h is, or the empty slot where it would go. */
static int probe(const search_memo *m, uint64_t h, const search_build_key *k)
{
    int mask = m->n_slots - 1;
    for (int i = (int)(h & (uint64_t)mask);; i = (i + 1) & mask)
        if (m->slot[i] < 0 || (k && key_equal(&m->e[m->slot[i]], h, k)))
            return i;
}

const search_candidate *search_memo_find(const search_memo *m, const search_build_key *k)
{
    if (m->n == 0)
        return NULL;
    int i = probe(m, key_hash(k), k);
    if (m->slot[i] < 0)
        return NULL;
    return m->e[m->slot[i]].pruned ? &search_memo_pruned : &m->e[m->slot[i]].fig;
}

/* Doubles the table (at least 64 slots), rehashing every entry. */
static int grow(search_memo *m)
{
    int n_slots = m->n_slots ? 2 * m->n_slots : 64;
    int *slot = malloc(sizeof *slot * (size_t)n_slots);
    if (!slot)
        return -1;
    free(m->slot);
    m->slot = slot;
    m->n_slots = n_slots;
    for (int i = 0; i < n_slots; i++)
        slot[i] = -1;
    for (int j = 0; j < m->n; j++)
        slot[probe(m, m->e[j].hash, NULL)] = j;
    return 0;
}

/* search_memo_add and search_memo_add_pruned: c NULL for a pruned build. */
static int add(search_memo *m, const search_build_key *k, const search_candidate *c)
{
    static const search_candidate none;
    int pruned = !c;
    if (pruned)
        c = &none;
    if (2 * (m->n + 1) > m->n_slots && grow(m) < 0)
        return -1;
    if (m->n == m->cap) {
        int cap = m->cap ? 2 * m->cap : 64;
        search_memo_entry *e = realloc(m->e, sizeof *e * (size_t)cap);
        if (!e)
            return -1;
        m->e = e;
        m->cap = cap;
    }
    const sched_t *pl = k->placement;
    search_memo_entry *e = &m->e[m->n];
    memset(e, 0, sizeof *e);
    e->cost = malloc(sizeof *e->cost * (size_t)pl->n_stages);
    e->mem_static = malloc(sizeof *e->mem_static * (size_t)pl->n_devices);
    e->limit = k->n_limit > 0 ? malloc(sizeof *e->limit * (size_t)k->n_limit) : NULL;
    e->fig = *c;
    e->fig.sched = NULL;
    e->fig.layers = c->layers && c->n_stages > 0 ? malloc(sizeof *c->layers * (size_t)c->n_stages) : NULL;
    if (!e->cost || !e->mem_static || (k->n_limit > 0 && !e->limit) ||
        (c->layers && c->n_stages > 0 && !e->fig.layers)) {
        entry_free(e);
        return -1;
    }
    if (e->fig.layers)
        memcpy(e->fig.layers, c->layers, sizeof *c->layers * (size_t)c->n_stages);
    e->hash = key_hash(k);
    snprintf(e->label, sizeof e->label, "%s", k->label);
    e->chunks = k->chunks;
    e->b = k->b;
    e->m = k->m;
    e->rc_devices = k->rc_devices;
    e->rc_stages = k->rc_stages;
    e->rc_mlp = k->rc_mlp;
    e->n_stages = pl->n_stages;
    e->n_devices = pl->n_devices;
    memcpy(e->cost, pl->cost, sizeof *pl->cost * (size_t)pl->n_stages);
    memcpy(e->mem_static, pl->mem_static, sizeof *pl->mem_static * (size_t)pl->n_devices);
    e->t_comm = pl->t_comm;
    e->n_limit = k->n_limit;
    if (k->n_limit > 0)
        memcpy(e->limit, k->limit, sizeof *k->limit * (size_t)k->n_limit);
    e->has_gp = k->gp != NULL;
    if (k->gp) {
        e->gp = *k->gp;
        e->gp.mem_limit = NULL;
    }
    e->pruned = pruned;
    m->slot[probe(m, e->hash, NULL)] = m->n++;
    return 0;
}

int search_memo_add(search_memo *m, const search_build_key *k, const search_candidate *c)
{
    return add(m, k, c);
}

int search_memo_add_pruned(search_memo *m, const search_build_key *k)
{
    return add(m, k, NULL);
}
