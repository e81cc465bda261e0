/*
 * dag.c: the op dependency graph of a schedule, laid out and rendered in
 * process by Graphviz (viz_dag_svg).
 *
 * Nodes are ops, boxed and coloured like the timeline, one cluster per
 * device.  Solid edges are data dependencies (F(s,j) -> F(s+1,j); the last
 * stage's F -> its B/BW; B/BW(s+1,j) -> B/BW(s,j); F(s,j) -> B/BW(s,j);
 * B(s,j) -> W(s,j)); dashed grey edges are the device's own order, which
 * binds as hard as data does.  With vocabulary parallelism the all-reduce
 * barriers are violet ellipses outside the devices: F(S-1,j) -> S(d,j) ->
 * C0 j -> T(d,j), and C0 j (Vocab-1) or C1 j, after every T(d,j)
 * (Vocab-2), -> the last stage's B/BW of j.  The graph runs left to right so each
 * device's ops read like its timeline row.
 *
 * Critical path: with every op starting as soon as its predecessors allow
 * (which is what the simulator computes), walking back from the op that
 * ends last and always stepping to the predecessor whose result arrived
 * last gives the longest path through the graph, weighted by op times and
 * T_comm.  Measured times give the chain that actually bound the run.
 *
 * A view (view.h: a time window, micro-batches, devices) draws a part of a
 * schedule of any size: the ops it selects, the edges among them, and the
 * whole schedule's critical path wherever it passes through them (it is
 * found on every op first).  The op limit applies to the part.
 *
 * Graphviz is loaded with dlopen on the first graph (graphviz_load.h), so
 * the program links none of it.
 *
 * Graphviz prints its warnings on stderr by default; they are routed into a
 * buffer while we hold the library (agseterr / agseterrf) so that the CLI
 * can keep its one-line error rule.  dot's layout is superlinear, so graphs
 * over VIZ_DAG_MAX_OPS are refused up front, and above DAG_FULL_QUALITY_OPS
 * dot's iteration limits are lowered (about 10 s for 2000 ops on a 2-core VM
 * instead of many minutes).
 */
#include "viz/viz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/numfmt.h"
#include "viz/graphviz_load.h"
#include "viz/palette.h"
#include "viz/times.h"
#include "viz/view.h"

/* Up to this many ops dot runs with its default effort; above, its
 * iteration limits are cut so that VIZ_DAG_MAX_OPS stays interactive. */
#define DAG_FULL_QUALITY_OPS 400

/* Graphviz's last message while we render; Graphviz itself is not
 * thread-safe, so neither is this. */
static char dag_gv_msg[256];

/* Graphviz's entry points (graphviz_load.h), loaded by viz_dag_svg_view
 * before anything here calls them. */
static const zb_graphviz_api *gv;

static int dag_gv_err(char *msg)
{
    snprintf(dag_gv_msg, sizeof dag_gv_msg, "%s", msg);
    size_t n = strlen(dag_gv_msg);
    while (n > 0 && (dag_gv_msg[n - 1] == '\n' || dag_gv_msg[n - 1] == ' '))
        dag_gv_msg[--n] = '\0';
    return 0;
}

/* Flat op numbering: ops of device 0, then device 1, ... */
typedef struct dag_ops {
    long n;            /* total ops */
    long *first;       /* [n_devices] global index of each device's op 0 */
    int *dev;          /* [n] device of each op */
    int *pos;          /* [n] position in its lane */
    long *by_key;      /* [kinds * max(S, p) * m] global index of (kind, stage or
                        * shard, mb), or -1 */
    long *crit_pred;   /* [n] predecessor on the critical path, -1 at its start */
    unsigned char *on_crit; /* [n] 1 when on the critical path */
    unsigned char *shown;   /* [n] 1 when the view selects the op (a node is drawn) */
    long n_shown;           /* how many are */
} dag_ops;

/* Rows per kind in by_key: stages, or vocabulary shards when there are
 * more devices than stages. */
static long dag_rows(const sched_t *s)
{
    return s->n_stages > s->n_devices ? s->n_stages : s->n_devices;
}

static long dag_key(const sched_t *s, int kind, int stage, int mb)
{
    return ((long)kind * dag_rows(s) + stage) * s->n_micro + mb;
}

static void dag_ops_free(dag_ops *o)
{
    free(o->first);
    free(o->dev);
    free(o->pos);
    free(o->by_key);
    free(o->crit_pred);
    free(o->on_crit);
    free(o->shown);
}

static int dag_ops_index(const sched_t *s, dag_ops *o, zb_err *err)
{
    memset(o, 0, sizeof *o);
    o->n = sched_op_count(s);
    size_t keys = (size_t)OP_KIND_COUNT * (size_t)dag_rows(s) * (size_t)s->n_micro;
    size_t n = (size_t)(o->n ? o->n : 1);
    o->first = malloc(sizeof *o->first * (size_t)s->n_devices);
    o->dev = malloc(sizeof *o->dev * n);
    o->pos = malloc(sizeof *o->pos * n);
    o->by_key = malloc(sizeof *o->by_key * keys);
    o->crit_pred = malloc(sizeof *o->crit_pred * n);
    o->on_crit = calloc(n, 1);
    o->shown = calloc(n, 1);
    if (!o->first || !o->dev || !o->pos || !o->by_key || !o->crit_pred || !o->on_crit ||
        !o->shown) {
        dag_ops_free(o);
        return zb_fail(err, "out of memory");
    }
    for (size_t k = 0; k < keys; k++)
        o->by_key[k] = -1;
    long g = 0;
    for (int d = 0; d < s->n_devices; d++) {
        o->first[d] = g;
        for (int i = 0; i < s->dev[d].n_ops; i++, g++) {
            sched_op op = s->dev[d].ops[i];
            o->dev[g] = d;
            o->pos[g] = i;
            o->by_key[dag_key(s, op.kind, op.stage, op.mb)] = g;
        }
    }
    return 0;
}

/* The pass of kind `pass` (S or T) of micro-batch mb that ends last over
 * all devices: the one a barrier waits for longest, or -1. */
static long dag_last_pass(const sched_t *s, const dag_ops *o, const viz_times *t, int pass, int mb)
{
    long best = -1;
    double best_end = 0;
    for (int d = 0; d < s->n_devices; d++) {
        long p = o->by_key[dag_key(s, pass, d, mb)];
        if (p < 0)
            continue;
        double e = t->r.dev[o->dev[p]].end[o->pos[p]];
        if (best < 0 || e > best_end) {
            best = p;
            best_end = e;
        }
    }
    return best;
}

/* The data predecessors of op g (at most 2); returns how many.  A
 * predecessor through a barrier is the pass that ended last. */
static int dag_data_preds(const sched_t *s, const dag_ops *o, const viz_times *t, long g, long preds[2])
{
    sched_op op = s->dev[o->dev[g]].ops[o->pos[g]];
    int n = 0;
    long p;
    if (op.kind == OP_S) {
        if ((p = o->by_key[dag_key(s, OP_F, s->n_stages - 1, op.mb)]) >= 0)
            preds[n++] = p;
        return n;
    }
    if (op.kind == OP_T) {
        if ((p = dag_last_pass(s, o, t, OP_S, op.mb)) >= 0)
            preds[n++] = p;
        return n;
    }
    if ((op.kind == OP_B || op.kind == OP_BW) && op.stage == s->n_stages - 1 && sched_has_vocab(s) &&
        (p = dag_last_pass(s, o, t, s->vocab.variant == SCHED_VOCAB_2 ? OP_T : OP_S, op.mb)) >= 0)
        preds[n++] = p;
    switch ((op_kind)op.kind) {
    case OP_F:
        if (op.stage > 0 && (p = o->by_key[dag_key(s, OP_F, op.stage - 1, op.mb)]) >= 0)
            preds[n++] = p;
        break;
    case OP_B:
    case OP_BW:
        if ((p = o->by_key[dag_key(s, OP_F, op.stage, op.mb)]) >= 0)
            preds[n++] = p;
        if (op.stage + 1 < s->n_stages) {
            p = o->by_key[dag_key(s, OP_B, op.stage + 1, op.mb)];
            if (p < 0)
                p = o->by_key[dag_key(s, OP_BW, op.stage + 1, op.mb)];
            if (p >= 0)
                preds[n++] = p;
        }
        break;
    case OP_W:
        if ((p = o->by_key[dag_key(s, OP_B, op.stage, op.mb)]) >= 0)
            preds[n++] = p;
        break;
    case OP_S:
    case OP_T:
        break; /* handled above */
    }
    return n;
}

/* When the result of op `from` is available to the device of op `to`. */
static double dag_ready(const sched_t *s, const dag_ops *o, const viz_times *t, long from, long to,
                        int via_lane)
{
    double e = t->r.dev[o->dev[from]].end[o->pos[from]];
    int kind = s->dev[o->dev[from]].ops[o->pos[from]].kind;
    if (OP_IS_VOCAB(kind) && !via_lane) /* through barrier C0 or C1 */
        return e + (kind == OP_S ? s->vocab.t_c0 : s->vocab.t_c1);
    return o->dev[from] == o->dev[to] ? e : e + s->t_comm;
}

/* Marks the critical path (see the file comment). */
static void dag_critical(const sched_t *s, dag_ops *o, const viz_times *t)
{
    long last = -1;
    double last_end = 0;
    for (long g = 0; g < o->n; g++) {
        double e = t->r.dev[o->dev[g]].end[o->pos[g]];
        if (last < 0 || e > last_end) {
            last = g;
            last_end = e;
        }
    }
    for (long g = 0; g < o->n; g++)
        o->crit_pred[g] = -1;
    for (long g = last; g >= 0; g = o->crit_pred[g]) {
        o->on_crit[g] = 1;
        long preds[3];
        int n = dag_data_preds(s, o, t, g, preds), n_data = n;
        if (o->pos[g] > 0)
            preds[n++] = g - 1;
        long best = -1;
        double best_t = 0;
        for (int k = 0; k < n; k++) {
            double r = dag_ready(s, o, t, preds[k], g, k >= n_data);
            if (best < 0 || r > best_t) {
                best = preds[k];
                best_t = r;
            }
        }
        o->crit_pred[g] = best;
    }
}

/* Object IDs.  cgraph's default discipline uses the address of each
 * interned name as its ID and keeps subgraphs ordered by ID, so cluster
 * order (and with it the layout) would depend on malloc.  This discipline
 * declines to map names, which makes cgraph keep names in its internal
 * map, and hands out IDs in creation order instead: the same schedule then
 * always gives the same drawing. */
typedef struct dag_ids {
    IDTYPE next; /* next ID to hand out (odd, like cgraph's anonymous IDs) */
} dag_ids;

static void *dag_id_open(Agraph_t *g, Agdisc_t *disc)
{
    dag_ids *ids = malloc(sizeof *ids);
    if (ids)
        ids->next = 1;
    return ids;
}

static long dag_id_map(void *state, int objtype, char *str, IDTYPE *id, int createflag)
{
    dag_ids *ids = state;
    if (str || !createflag)
        return 0; /* names live in cgraph's internal map */
    *id = ids->next;
    ids->next += 2;
    return 1;
}

static long dag_id_alloc(void *state, int objtype, IDTYPE id)
{
    return 0; /* no caller-chosen IDs */
}

static void dag_id_free(void *state, int objtype, IDTYPE id)
{
}

static char *dag_id_print(void *state, int objtype, IDTYPE id)
{
    return NULL; /* cgraph prints names from its internal map */
}

static void dag_id_close(void *state)
{
    free(state);
}

static void dag_id_register(void *state, int objtype, void *obj)
{
}

static Agiddisc_t dag_id_disc = {
    dag_id_open, dag_id_map, dag_id_alloc, dag_id_free, dag_id_print, dag_id_close, dag_id_register,
};

/* Graphviz takes attribute values as char *; these helpers keep the
 * casts in one place. */
static void dag_set(void *obj, const char *name, const char *value)
{
    gv->agsafeset(obj, (char *)name, (char *)value, (char *)"");
}

/* Barrier node C<c> j, made on first use (a view draws only the barriers
 * its ops touch); barrier[] holds 2m slots.  NULL for C1 under Vocab-1. */
static Agnode_t *dag_barrier(const sched_t *s, Agraph_t *g, Agnode_t **barrier, int c, int j)
{
    if (c == 1 && s->vocab.variant != SCHED_VOCAB_2)
        return NULL;
    Agnode_t **slot = &barrier[c * s->n_micro + j];
    if (!*slot) {
        char name[48];
        snprintf(name, sizeof name, "C%d %d", c, j);
        Agnode_t *n = *slot = gv->agnode(g, name, 1);
        dag_set(n, "shape", "ellipse");
        dag_set(n, "style", "solid");
        dag_set(n, "color", VIZ_BARRIER_STROKE);
        dag_set(n, "fontcolor", VIZ_BARRIER_STROKE);
        dag_set(n, "tooltip", c == 0 ? "barrier C0: all-reduce over all devices after every S"
                                     : "barrier C1: all-reduce over all devices after every T");
    }
    return *slot;
}

/* The edges of op gi that pass through a barrier: S -> C0, C0 -> T;
 * Vocab-2 T -> C1; C0 or C1 -> the last stage's B/BW. */
static void dag_barrier_edges(const sched_t *s, const dag_ops *o, Agraph_t *g, Agnode_t **node,
                              Agnode_t **barrier, long gi)
{
    sched_op op = s->dev[o->dev[gi]].ops[o->pos[gi]];
    int needs = OP_IS_VOCAB(op.kind) ||
                ((op.kind == OP_B || op.kind == OP_BW) && op.stage == s->n_stages - 1);
    if (!needs)
        return;
    Agnode_t *c0 = dag_barrier(s, g, barrier, 0, op.mb), *c1 = dag_barrier(s, g, barrier, 1, op.mb);
    Agedge_t *e = NULL;
    if (op.kind == OP_S) {
        e = gv->agedge(g, node[gi], c0, NULL, 1);
    } else if (op.kind == OP_T) {
        e = gv->agedge(g, c0, node[gi], NULL, 1);
        if (c1) {
            dag_set(e, "color", VIZ_BARRIER_STROKE);
            e = gv->agedge(g, node[gi], c1, NULL, 1);
        }
    } else if ((op.kind == OP_B || op.kind == OP_BW) && op.stage == s->n_stages - 1) {
        e = gv->agedge(g, c1 ? c1 : c0, node[gi], NULL, 1);
    }
    if (e)
        dag_set(e, "color", VIZ_BARRIER_STROKE);
}

static Agraph_t *dag_build(const sched_t *s, dag_ops *o, const viz_times *t, const viz_window *w)
{
    Agdisc_t disc = { gv->AgMemDisc, &dag_id_disc, gv->AgIoDisc };
    Agraph_t *g = gv->agopen((char *)"schedule", *gv->Agdirected, &disc);
    if (!g)
        return NULL;
    char label[768], cost[48], view[256];
    zb_num_format(t->r.cost, 6, cost, sizeof cost);
    viz_window_describe(s, w, s->time_unit, view, sizeof view);
    snprintf(label, sizeof label, "%s: dependency graph, p=%d, m=%d; %s cost %s %s; red: critical path%s%s%s",
             s->name[0] ? s->name : "schedule", s->n_devices, s->n_micro,
             t->measured ? "measured" : "simulated", cost, s->time_unit[0] ? s->time_unit : "units",
             view[0] ? "\n" : "", view, view[0] ? " (edges to ops outside it are not drawn)" : "");
    dag_set(g, "label", label);
    dag_set(g, "labelloc", "t");
    dag_set(g, "rankdir", "LR");
    dag_set(g, "fontname", "sans-serif");
    dag_set(g, "nodesep", "0.08");
    dag_set(g, "ranksep", "0.25");
    dag_set(g, "bgcolor", "white");
    if (o->n_shown > DAG_FULL_QUALITY_OPS) {
        /* dot's network simplex (ranking and x placement) and crossing
         * minimisation dominate on big graphs: 768 ops took 48 s with the
         * defaults on a 2-core VM and 3 s with these limits, 1920 ops 10 s. */
        dag_set(g, "nslimit", "0.2");
        dag_set(g, "nslimit1", "0.2");
        dag_set(g, "mclimit", "0.1");
        dag_set(g, "remincross", "false");
    }
    gv->agattr(g, AGNODE, (char *)"shape", (char *)"box");
    gv->agattr(g, AGNODE, (char *)"style", (char *)"filled");
    gv->agattr(g, AGNODE, (char *)"fontname", (char *)"sans-serif");
    gv->agattr(g, AGNODE, (char *)"fontsize", (char *)"10");
    gv->agattr(g, AGNODE, (char *)"width", (char *)"0.3");
    gv->agattr(g, AGNODE, (char *)"height", (char *)"0.2");
    gv->agattr(g, AGNODE, (char *)"margin", (char *)"0.03,0.02");
    gv->agattr(g, AGNODE, (char *)"color", (char *)"#555555");
    gv->agattr(g, AGNODE, (char *)"penwidth", (char *)"0.5");
    gv->agattr(g, AGEDGE, (char *)"arrowsize", (char *)"0.5");
    gv->agattr(g, AGEDGE, (char *)"color", (char *)"#333333");
    gv->agattr(g, AGEDGE, (char *)"penwidth", (char *)"0.7");
    gv->agattr(g, AGEDGE, (char *)"style", (char *)"solid");

    Agnode_t **node = calloc((size_t)(o->n ? o->n : 1), sizeof *node);
    if (!node) {
        gv->agclose(g);
        return NULL;
    }
    char name[64], text[160];
    for (int d = w->dev_lo; d <= w->dev_hi; d++) {
        int any = 0;
        for (int i = 0; i < s->dev[d].n_ops && !any; i++)
            any = o->shown[o->first[d] + i];
        if (!any)
            continue;
        snprintf(name, sizeof name, "cluster_device%d", d);
        Agraph_t *c = gv->agsubg(g, name, 1);
        snprintf(text, sizeof text, "device %d", d);
        dag_set(c, "label", text);
        dag_set(c, "style", "rounded,filled");
        dag_set(c, "fillcolor", "#f4f4f4");
        dag_set(c, "color", "#cccccc");
        dag_set(c, "fontname", "sans-serif");
        dag_set(c, "fontsize", "11");
        for (int i = 0; i < s->dev[d].n_ops; i++) {
            long gi = o->first[d] + i;
            if (!o->shown[gi])
                continue;
            sched_op op = s->dev[d].ops[i];
            const char *kn = op_kind_name((op_kind)op.kind);
            int vocab = OP_IS_VOCAB(op.kind);
            int chunk = vocab ? 0 : t->stage_chunk[op.stage];
            viz_color col = viz_op_color((op_kind)op.kind, chunk, t->n_chunks);
            snprintf(name, sizeof name, "%s%d_s%d", kn, op.mb, op.stage);
            Agnode_t *n = node[gi] = gv->agnode(c, name, 1);
            if (vocab)
                snprintf(text, sizeof text, "%s%d", kn, op.mb);
            else if (t->n_chunks > 1)
                snprintf(text, sizeof text, "%s%d s%d", kn, op.mb, op.stage);
            else
                snprintf(text, sizeof text, "%s%d", kn, op.mb);
            dag_set(n, "label", text);
            dag_set(n, "fillcolor", col.fill);
            dag_set(n, "fontcolor", col.text);
            char a[32], e[32];
            zb_num_format(t->r.dev[d].start[i] - t->t0, 6, a, sizeof a);
            zb_num_format(t->r.dev[d].end[i] - t->t0, 6, e, sizeof e);
            snprintf(text, sizeof text, "%s%d %s %d on device %d: %s to %s %s", kn, op.mb,
                     vocab ? "vocabulary shard" : "stage", op.stage, d, a, e,
                     s->time_unit[0] ? s->time_unit : "units");
            dag_set(n, "tooltip", text);
            if (o->on_crit[gi]) {
                dag_set(n, "color", "#d62728");
                dag_set(n, "penwidth", "2.5");
            }
        }
    }
    Agnode_t **barrier = NULL;
    if (sched_has_vocab(s) && !(barrier = calloc(2 * (size_t)s->n_micro, sizeof *barrier))) {
        free(node);
        gv->agclose(g);
        return NULL;
    }
    for (long gi = 0; gi < o->n; gi++) {
        if (!o->shown[gi])
            continue;
        long preds[2];
        int np = dag_data_preds(s, o, t, gi, preds);
        if (barrier)
            dag_barrier_edges(s, o, g, node, barrier, gi);
        for (int k = 0; k < np; k++) {
            sched_op pop = s->dev[o->dev[preds[k]]].ops[o->pos[preds[k]]];
            if (OP_IS_VOCAB(pop.kind) || !o->shown[preds[k]])
                continue; /* drawn through the barrier node, or outside the view */
            Agedge_t *e = gv->agedge(g, node[preds[k]], node[gi], NULL, 1);
            if (o->crit_pred[gi] == preds[k] && o->on_crit[gi]) {
                dag_set(e, "color", "#d62728");
                dag_set(e, "penwidth", "2.5");
            }
        }
        if (o->pos[gi] > 0 && o->shown[gi - 1]) {
            Agedge_t *e = gv->agedge(g, node[gi - 1], node[gi], NULL, 1);
            dag_set(e, "style", "dashed");
            dag_set(e, "weight", "10");
            if (o->crit_pred[gi] == gi - 1 && o->on_crit[gi]) {
                dag_set(e, "color", "#d62728");
                dag_set(e, "penwidth", "2.5");
            } else {
                dag_set(e, "color", "#aaaaaa");
            }
        }
    }
    free(node);
    free(barrier);
    return g;
}

/* The process's one Graphviz context, made on first use and kept.  A
 * context per call would be cleaner, but Graphviz 2.43's pango plugin
 * caches a font name that gvFreeContext frees, so a second context in the
 * same process reads freed memory.  Reachable from here, it is not a leak. */
static GVC_t *dag_context(void)
{
    static GVC_t *gvc;
    if (!gvc)
        gvc = gv->gvContext();
    return gvc;
}

int viz_dag_svg(const sched_t *s, char **svg, size_t *len, zb_err *err)
{
    return viz_dag_svg_view(s, NULL, svg, len, err);
}

int viz_dag_svg_view(const sched_t *s, const viz_view *v, char **svg, size_t *len, zb_err *err)
{
    long n_ops = sched_op_count(s);
    if (!v && n_ops > VIZ_DAG_MAX_OPS) /* refused before any work */
        return zb_fail(err, "the schedule has %ld ops; the dependency graph is drawn for at most %d: "
                       "draw a part of it with --from/--to, --micro-batches or --devices",
                       n_ops, VIZ_DAG_MAX_OPS);
    viz_times t;
    if (viz_times_compute(s, &t, err) != 0)
        return -1;
    viz_window w;
    dag_ops o;
    if (viz_window_resolve(s, &t, v, 1, &w, err) != 0 || dag_ops_index(s, &o, err) != 0) {
        viz_times_free(&t);
        return -1;
    }
    for (long g = 0; g < o.n; g++) {
        int d = o.dev[g], i = o.pos[g];
        o.shown[g] = viz_window_has_op(&w, &t, d, i) && viz_window_selected(&w, s->dev[d].ops[i].mb);
        o.n_shown += o.shown[g];
    }
    if (o.n_shown > VIZ_DAG_MAX_OPS) {
        if (w.narrowed)
            zb_fail(err, "the part chosen holds %ld ops; the dependency graph is drawn for at most %d: "
                    "narrow it with --from/--to, --micro-batches or --devices", o.n_shown,
                    VIZ_DAG_MAX_OPS);
        else
            zb_fail(err, "the schedule has %ld ops; the dependency graph is drawn for at most %d: "
                    "draw a part of it with --from/--to, --micro-batches or --devices",
                    o.n_shown, VIZ_DAG_MAX_OPS);
        dag_ops_free(&o);
        viz_times_free(&t);
        return -1;
    }
    dag_critical(s, &o, &t);
    if (graphviz_load(&gv, err) != 0) {
        dag_ops_free(&o);
        viz_times_free(&t);
        return -1;
    }

    agerrlevel_t old_level = gv->agseterr(AGMAX);
    agusererrf old_fn = gv->agseterrf(dag_gv_err);
    dag_gv_msg[0] = '\0';
    int rc = -1;
    GVC_t *gvc = dag_context();
    Agraph_t *g = gvc ? dag_build(s, &o, &t, &w) : NULL;
    if (!gvc || !g) {
        zb_fail(err, "cannot set up Graphviz%s%s", dag_gv_msg[0] ? ": " : "", dag_gv_msg);
    } else if (gv->gvLayout(gvc, g, "dot") != 0) {
        zb_fail(err, "Graphviz dot layout failed%s%s", dag_gv_msg[0] ? ": " : "", dag_gv_msg);
    } else {
        char *data = NULL;
        unsigned int n = 0;
        if (gv->gvRenderData(gvc, g, "svg", &data, &n) != 0 || !data) {
            zb_fail(err, "Graphviz SVG rendering failed%s%s", dag_gv_msg[0] ? ": " : "", dag_gv_msg);
        } else if (!(*svg = malloc((size_t)n + 1))) {
            zb_fail(err, "out of memory");
        } else {
            memcpy(*svg, data, n);
            (*svg)[n] = '\0';
            *len = n;
            rc = 0;
        }
        gv->gvFreeRenderData(data);
        gv->gvFreeLayout(gvc, g);
    }
    if (g)
        gv->agclose(g);
    gv->agseterrf(old_fn);
    gv->agseterr(old_level);
    dag_ops_free(&o);
    viz_times_free(&t);
    return rc;
}
