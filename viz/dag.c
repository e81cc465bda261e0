/*
 * dag.c: the op dependency graph of a schedule, laid out and rendered in
 * process by Graphviz (viz_dag_svg).
 *
 * Nodes are ops, boxed and coloured like the timeline, one cluster per
 * device.  Solid edges are data dependencies (F(s,j) -> F(s+1,j); the last
 * stage's F -> its B/BW; B/BW(s+1,j) -> B/BW(s,j); F(s,j) -> B/BW(s,j);
 * B(s,j) -> W(s,j)); dashed grey edges are the device's own order, which
 * binds as hard as data does.  The graph runs left to right so each
 * device's ops read like its timeline row.
 *
 * Critical path: with every op starting as soon as its predecessors allow
 * (which is what the simulator computes), walking back from the op that
 * ends last and always stepping to the predecessor whose result arrived
 * last gives the longest path through the graph, weighted by op times and
 * T_comm.  Measured times give the chain that actually bound the run.
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

#include <cgraph.h>
#include <gvc.h>

#include "viz/palette.h"
#include "viz/times.h"

/* Up to this many ops dot runs with its default effort; above, its
 * iteration limits are cut so that VIZ_DAG_MAX_OPS stays interactive. */
#define DAG_FULL_QUALITY_OPS 400

/* Graphviz's last message while we render; Graphviz itself is not
 * thread-safe, so neither is this. */
static char dag_gv_msg[256];

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
    long *by_key;      /* [4 * S * m] global index of (kind, stage, mb), or -1 */
    long *crit_pred;   /* [n] predecessor on the critical path, -1 at its start */
    unsigned char *on_crit; /* [n] 1 when on the critical path */
} dag_ops;

static long dag_key(const sched_t *s, int kind, int stage, int mb)
{
    return ((long)kind * s->n_stages + stage) * s->n_micro + mb;
}

static void dag_ops_free(dag_ops *o)
{
    free(o->first);
    free(o->dev);
    free(o->pos);
    free(o->by_key);
    free(o->crit_pred);
    free(o->on_crit);
}

static int dag_ops_index(const sched_t *s, dag_ops *o, zb_err *err)
{
    memset(o, 0, sizeof *o);
    o->n = sched_op_count(s);
    size_t keys = (size_t)OP_KIND_COUNT * (size_t)s->n_stages * (size_t)s->n_micro;
    size_t n = (size_t)(o->n ? o->n : 1);
    o->first = malloc(sizeof *o->first * (size_t)s->n_devices);
    o->dev = malloc(sizeof *o->dev * n);
    o->pos = malloc(sizeof *o->pos * n);
    o->by_key = malloc(sizeof *o->by_key * keys);
    o->crit_pred = malloc(sizeof *o->crit_pred * n);
    o->on_crit = calloc(n, 1);
    if (!o->first || !o->dev || !o->pos || !o->by_key || !o->crit_pred || !o->on_crit) {
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

/* The data predecessors of op g (at most 2); returns how many. */
static int dag_data_preds(const sched_t *s, const dag_ops *o, long g, long preds[2])
{
    sched_op op = s->dev[o->dev[g]].ops[o->pos[g]];
    int n = 0;
    long p;
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
    }
    return n;
}

/* When the result of op `from` is available to the device of op `to`. */
static double dag_ready(const sched_t *s, const dag_ops *o, const viz_times *t, long from, long to)
{
    double e = t->r.dev[o->dev[from]].end[o->pos[from]];
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
        int n = dag_data_preds(s, o, g, preds);
        if (o->pos[g] > 0)
            preds[n++] = g - 1;
        long best = -1;
        double best_t = 0;
        for (int k = 0; k < n; k++) {
            double r = dag_ready(s, o, t, preds[k], g);
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
    agsafeset(obj, (char *)name, (char *)value, (char *)"");
}

static Agraph_t *dag_build(const sched_t *s, dag_ops *o, const viz_times *t)
{
    Agdisc_t disc = { &AgMemDisc, &dag_id_disc, &AgIoDisc };
    Agraph_t *g = agopen((char *)"schedule", Agdirected, &disc);
    if (!g)
        return NULL;
    char label[512];
    snprintf(label, sizeof label, "%s: dependency graph, p=%d, m=%d; %s cost %.4g %s; red: critical path",
             s->name[0] ? s->name : "schedule", s->n_devices, s->n_micro,
             t->measured ? "measured" : "simulated", t->r.cost, s->time_unit);
    dag_set(g, "label", label);
    dag_set(g, "labelloc", "t");
    dag_set(g, "rankdir", "LR");
    dag_set(g, "fontname", "sans-serif");
    dag_set(g, "nodesep", "0.08");
    dag_set(g, "ranksep", "0.25");
    dag_set(g, "bgcolor", "white");
    if (o->n > DAG_FULL_QUALITY_OPS) {
        /* dot's network simplex (ranking and x placement) and crossing
         * minimisation dominate on big graphs: 768 ops took 48 s with the
         * defaults on a 2-core VM and 3 s with these limits, 1920 ops 10 s. */
        dag_set(g, "nslimit", "0.2");
        dag_set(g, "nslimit1", "0.2");
        dag_set(g, "mclimit", "0.1");
        dag_set(g, "remincross", "false");
    }
    agattr(g, AGNODE, (char *)"shape", (char *)"box");
    agattr(g, AGNODE, (char *)"style", (char *)"filled");
    agattr(g, AGNODE, (char *)"fontname", (char *)"sans-serif");
    agattr(g, AGNODE, (char *)"fontsize", (char *)"10");
    agattr(g, AGNODE, (char *)"width", (char *)"0.3");
    agattr(g, AGNODE, (char *)"height", (char *)"0.2");
    agattr(g, AGNODE, (char *)"margin", (char *)"0.03,0.02");
    agattr(g, AGNODE, (char *)"color", (char *)"#555555");
    agattr(g, AGNODE, (char *)"penwidth", (char *)"0.5");
    agattr(g, AGEDGE, (char *)"arrowsize", (char *)"0.5");
    agattr(g, AGEDGE, (char *)"color", (char *)"#333333");
    agattr(g, AGEDGE, (char *)"penwidth", (char *)"0.7");
    agattr(g, AGEDGE, (char *)"style", (char *)"solid");

    Agnode_t **node = calloc((size_t)(o->n ? o->n : 1), sizeof *node);
    if (!node) {
        agclose(g);
        return NULL;
    }
    char name[64], text[160];
    for (int d = 0; d < s->n_devices; d++) {
        snprintf(name, sizeof name, "cluster_device%d", d);
        Agraph_t *c = agsubg(g, name, 1);
        snprintf(text, sizeof text, "device %d", d);
        dag_set(c, "label", text);
        dag_set(c, "style", "rounded,filled");
        dag_set(c, "fillcolor", "#f4f4f4");
        dag_set(c, "color", "#cccccc");
        dag_set(c, "fontname", "sans-serif");
        dag_set(c, "fontsize", "11");
        for (int i = 0; i < s->dev[d].n_ops; i++) {
            long gi = o->first[d] + i;
            sched_op op = s->dev[d].ops[i];
            const char *kn = op_kind_name((op_kind)op.kind);
            int chunk = t->stage_chunk[op.stage];
            viz_color col = viz_op_color((op_kind)op.kind, chunk, t->n_chunks);
            snprintf(name, sizeof name, "%s%d_s%d", kn, op.mb, op.stage);
            Agnode_t *n = node[gi] = agnode(c, name, 1);
            if (t->n_chunks > 1)
                snprintf(text, sizeof text, "%s%d s%d", kn, op.mb, op.stage);
            else
                snprintf(text, sizeof text, "%s%d", kn, op.mb);
            dag_set(n, "label", text);
            dag_set(n, "fillcolor", col.fill);
            dag_set(n, "fontcolor", col.text);
            snprintf(text, sizeof text, "%s%d stage %d on device %d: %.6g to %.6g", kn, op.mb,
                     op.stage, d, t->r.dev[d].start[i], t->r.dev[d].end[i]);
            dag_set(n, "tooltip", text);
            if (o->on_crit[gi]) {
                dag_set(n, "color", "#d62728");
                dag_set(n, "penwidth", "2.5");
            }
        }
    }
    for (long gi = 0; gi < o->n; gi++) {
        long preds[2];
        int np = dag_data_preds(s, o, gi, preds);
        for (int k = 0; k < np; k++) {
            Agedge_t *e = agedge(g, node[preds[k]], node[gi], NULL, 1);
            if (o->crit_pred[gi] == preds[k] && o->on_crit[gi]) {
                dag_set(e, "color", "#d62728");
                dag_set(e, "penwidth", "2.5");
            }
        }
        if (o->pos[gi] > 0) {
            Agedge_t *e = agedge(g, node[gi - 1], node[gi], NULL, 1);
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
        gvc = gvContext();
    return gvc;
}

int viz_dag_svg(const sched_t *s, char **svg, size_t *len, zb_err *err)
{
    long n_ops = sched_op_count(s);
    if (n_ops > VIZ_DAG_MAX_OPS)
        return zb_fail(err, "the schedule has %ld ops; the dependency graph is drawn for at most %d "
                       "(use the SVG timeline or the trace for big schedules)", n_ops, VIZ_DAG_MAX_OPS);
    viz_times t;
    if (viz_times_compute(s, &t, err) != 0)
        return -1;
    dag_ops o;
    if (dag_ops_index(s, &o, err) != 0) {
        viz_times_free(&t);
        return -1;
    }
    dag_critical(s, &o, &t);

    agerrlevel_t old_level = agseterr(AGMAX);
    agusererrf old_fn = agseterrf(dag_gv_err);
    dag_gv_msg[0] = '\0';
    int rc = -1;
    GVC_t *gvc = dag_context();
    Agraph_t *g = gvc ? dag_build(s, &o, &t) : NULL;
    if (!gvc || !g) {
        zb_fail(err, "cannot set up Graphviz%s%s", dag_gv_msg[0] ? ": " : "", dag_gv_msg);
    } else if (gvLayout(gvc, g, "dot") != 0) {
        zb_fail(err, "Graphviz dot layout failed%s%s", dag_gv_msg[0] ? ": " : "", dag_gv_msg);
    } else {
        char *data = NULL;
        unsigned int n = 0;
        if (gvRenderData(gvc, g, "svg", &data, &n) != 0 || !data) {
            zb_fail(err, "Graphviz SVG rendering failed%s%s", dag_gv_msg[0] ? ": " : "", dag_gv_msg);
        } else if (!(*svg = malloc((size_t)n + 1))) {
            zb_fail(err, "out of memory");
        } else {
            memcpy(*svg, data, n);
            (*svg)[n] = '\0';
            *len = n;
            rc = 0;
        }
        gvFreeRenderData(data);
        gvFreeLayout(gvc, g);
    }
    if (g)
        agclose(g);
    agseterrf(old_fn);
    agseterr(old_level);
    dag_ops_free(&o);
    viz_times_free(&t);
    return rc;
}
