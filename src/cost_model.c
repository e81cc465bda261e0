/*
 * cost_model.c: per-stage time and memory (cost_model.h).
 *
 * A stage is the sum of its pieces (cost_parts.h: transformer layers, the
 * embedding on stage 0, the head + loss on stage S-1) with its memory
 * layers' deltas (cost_memory.h); this file splits the layers over the
 * stages, sums the pieces and writes them into a schedule.
 * docs/cost-model.md derives every line.
 */
#include "src/cost_model.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "src/param_count.h"

int cost_layer_split(int n_layers, int n_stages, int *layers, zb_err *err)
{
    if (n_stages <= 0 || n_layers <= 0)
        return zb_fail(err, "cannot split %d layers over %d stages", n_layers, n_stages);
    if (n_stages == 1) {
        layers[0] = n_layers;
        return 0;
    }
    if (n_stages > n_layers + 2)
        return zb_fail(err, "%d layers are too few for %d virtual stages (at most %d)",
                       n_layers, n_stages, n_layers + 2);
    /* n_layers + 2 slots (embedding and head count as one layer each). */
    int slots = n_layers + 2, per = slots / n_stages, extra = slots % n_stages;
    for (int i = 0; i < n_stages; i++)
        layers[i] = per;
    layers[0] -= 1;
    layers[n_stages - 1] -= 1;
    /* Extra slots to the middle stages first, from the front, then to the
     * end stages (which gave up a slot each); per >= 1 so nothing is < 0. */
    for (int i = 1; i < n_stages - 1 && extra > 0; i++, extra--)
        layers[i]++;
    if (extra > 0) {
        layers[0]++;
        extra--;
    }
    if (extra > 0) {
        layers[n_stages - 1]++;
        extra--;
    }
    assert(extra == 0);
    return 0;
}

int cost_layer_split_balanced(int n_layers, int n_stages, double w_first, double w_last,
                              int *layers, zb_err *err)
{
    if (n_stages <= 0 || n_layers <= 0)
        return zb_fail(err, "cannot split %d layers over %d stages", n_layers, n_stages);
    if (!(w_first >= 0) || !(w_last >= 0) || !isfinite(w_first) || !isfinite(w_last))
        return zb_fail(err, "embedding and head weights must be finite and >= 0");
    if (n_stages == 1) {
        layers[0] = n_layers;
        return 0;
    }
    if (n_stages > n_layers + 2)
        return zb_fail(err, "%d layers are too few for %d virtual stages (at most %d)",
                       n_layers, n_stages, n_layers + 2);
    int S = n_stages, L = n_layers;
    /* The optimal largest load is one of k, k + w_first, k + w_last
     * (k = 0..L), the smallest that fits.  The three sequences are each
     * sorted, so they are merged in increasing order and the walk stops at
     * the first fit: O(L) with no allocation, where sorting all 3(L+1)
     * values made a search over a 10,000-layer model spend most of its
     * time in qsort. */
    const double eps = 1e-9;
    const double off[3] = { 0, w_first, w_last };
    int next[3] = { 0, 0, 0 };
    double T = -1;
    while (T < 0) {
        int q = -1;
        double t = INFINITY;
        for (int k = 0; k < 3; k++)
            if (next[k] <= L && next[k] + off[k] < t) {
                t = next[k] + off[k];
                q = k;
            }
        if (q < 0)
            break;
        next[q]++;
        double cf = floor(t - w_first + eps), cl = floor(t - w_last + eps), cm = floor(t + eps);
        if (cf < 0 || cl < 0 || (S > 2 && cm < 1))
            continue;
        if (cf + cl + (S - 2) * cm >= L)
            T = t;
    }
    assert(T >= 0); /* T = L + max weight always fits */
    double w[2] = { w_first, w_last };
    for (int i = 0; i < S; i++) {
        double wi = i == 0 ? w[0] : i == S - 1 ? w[1] : 0;
        double cap = floor(T - wi + eps);
        layers[i] = cap > L ? L : (int)cap;
    }
    long total = 0;
    for (int i = 0; i < S; i++)
        total += layers[i];
    /* Take the excess back from the most loaded stage, earliest first:
     * the stage a scan in stage order picks when it moves on only for a
     * load above its pick by more than eps (a middle stage keeps one
     * layer, the ends none).  The middle stages start equal and their
     * loads are whole layers, so the scan's pick among them is the first
     * with the most layers: middle stages 1..k hold h - 1 layers and the
     * rest h, each step taking the next one down.  That makes a step O(1)
     * where the scan was O(S): the excess runs to a few dozen layers on
     * interleaved placements, and the scans were 2% of a 70B search. */
    int n_mid = S - 2, h = n_mid > 0 ? layers[1] : 0, k = 0;
    for (; total > L; total--) {
        int best = -1;
        double best_load = -1;
        if (layers[0] > 0) { /* any load passes the scan's start, -1 */
            best = 0;
            best_load = layers[0] + w[0];
        }
        if (n_mid > 0) {
            int most = k < n_mid ? h : h - 1, first = k < n_mid ? 1 + k : 1;
            assert(layers[first] == most);
            if (most > 1 && most > best_load + eps) {
                best = first;
                best_load = most;
            }
        }
        if (layers[S - 1] > 0 && layers[S - 1] + w[1] > best_load + eps)
            best = S - 1;
        assert(best >= 0);
        layers[best]--;
        if (best > 0 && best < S - 1) {
            if (k < n_mid) {
                k++;
            } else { /* every middle stage was at h - 1: the next level down */
                h--;
                k = 1;
            }
        }
    }
    return 0;
}

double cost_param_count(const zb_model *m)
{
    return param_count(m);
}

int cost_split_layers(const zb_model *m, const zb_gpu *g, const cost_options *o, int n_stages,
                      int *layers, zb_err *err)
{
    if (o->layers) {
        long total = 0;
        for (int i = 0; i < n_stages; i++) {
            if (o->layers[i] < 0 || (o->layers[i] == 0 && i > 0 && i < n_stages - 1))
                return zb_fail(err, "layer split: stage %d has %d layers", i, o->layers[i]);
            layers[i] = o->layers[i];
            total += o->layers[i];
        }
        if (total != m->n_layers)
            return zb_fail(err, "layer split: %ld layers over the stages, model has %d", total, m->n_layers);
        return 0;
    }
    if (o->split == COST_SPLIT_BALANCED && m->memory.n_layers > 0)
        return cost_split_layers_memory(m, g, o, n_stages, layers, err);
    if (o->split != COST_SPLIT_BALANCED)
        return cost_layer_split(m->n_layers, n_stages, layers, err);
    cost_part layer, emb, head;
    if (cost_parts(m, g, o, &layer, &emb, &head, err) < 0)
        return -1;
    double unit = layer.t_f + layer.t_b + layer.t_w;
    double wf = unit > 0 ? (emb.t_f + emb.t_b + emb.t_w) / unit : 0;
    double wl = unit > 0 ? (head.t_f + head.t_b + head.t_w) / unit : 0;
    return cost_layer_split_balanced(m->n_layers, n_stages, wf, wl, layers, err);
}

static void add_part(cost_stage *st, const cost_part *p, double count)
{
    st->t_f += count * p->t_f;
    st->t_b += count * p->t_b;
    st->t_w += count * p->t_w;
    st->m_b += count * p->m_b;
    st->m_w += count * p->m_w;
    st->params += count * p->params;
    st->useful_flops += count * p->useful_flops;
    if (count > 0 && p->transient > st->transient)
        st->transient = p->transient;
}

int cost_stages(const zb_model *m, const zb_gpu *g, const cost_options *o, int n_stages,
                int first_last_same_device, cost_stage *stage, zb_err *err)
{
    if (model_check(m, err) < 0)
        return -1;
    cost_part layer, emb, head, layer_rc[COST_RC_LAST + 1];
    if (cost_parts(m, g, o, &layer, &emb, &head, err) < 0)
        return -1;
    /* The layer at each recompute level, for per-stage recompute. */
    for (int rc = COST_RC_NONE; rc <= COST_RC_LAST; rc++) {
        cost_options one = *o;
        one.recompute = rc;
        one.recompute_stage = NULL;
        cost_part e2, h2;
        if (cost_parts(m, g, &one, &layer_rc[rc], &e2, &h2, err) < 0)
            return -1;
    }
    int *split = malloc(sizeof *split * (size_t)n_stages);
    if (!split)
        return zb_fail(err, "out of memory");
    if (cost_split_layers(m, g, o, n_stages, split, err) < 0) {
        free(split);
        return -1;
    }
    double bpp = cost_bytes_per_param(m, o);
    double static_per_layer = layer.params * bpp;
    if (o->profile && o->profile->static_bytes_per_layer >= 0)
        static_per_layer = o->profile->static_bytes_per_layer;
    int first = 0;
    for (int i = 0; i < n_stages; i++) {
        cost_stage *st = &stage[i];
        memset(st, 0, sizeof *st);
        st->first_layer = first;
        st->n_layers = split[i];
        first += split[i];
        add_part(st, &layer_rc[cost_stage_recomputes(o, i)], split[i]);
        st->static_bytes = split[i] * static_per_layer;
        if (i == 0) {
            st->has_embedding = 1;
            add_part(st, &emb, 1);
            st->static_bytes += emb.params * bpp;
        }
        if (i == n_stages - 1) {
            st->has_head = 1;
            cost_part h = head;
            /* A tied head shares the embedding matrix when both sit on one
             * device; otherwise the last stage keeps its own copy. */
            if (m->tied_embedding && (n_stages == 1 || first_last_same_device))
                h.params -= (double)m->vocab * m->d_model;
            add_part(st, &h, 1);
            st->static_bytes += h.params * bpp;
        }
        cost_memory_stage_adjust(m, g, o, i, st);
    }
    free(split);
    return 0;
}

double cost_reserve_bytes(const cost_options *o)
{
    return o->profile && o->profile->reserve_bytes >= 0 ? o->profile->reserve_bytes : o->reserve_bytes;
}

int cost_fill_sched(const zb_model *m, const zb_gpu *g, const cost_options *o, sched_t *s, zb_err *err)
{
    int S = s->n_stages;
    for (int i = 0; i < S; i++)
        if (s->stage_device[i] < 0 || s->stage_device[i] >= s->n_devices)
            return zb_fail(err, "stage %d is not placed on a device", i);
    cost_stage *st = malloc(sizeof *st * (size_t)S);
    double *stat = calloc((size_t)s->n_devices, sizeof *stat);
    double *trans = calloc((size_t)s->n_devices, sizeof *trans);
    if (!st || !stat || !trans) {
        free(st);
        free(stat);
        free(trans);
        return zb_fail(err, "out of memory");
    }
    int same = s->stage_device[0] == s->stage_device[S - 1];
    if (cost_stages(m, g, o, S, same, st, err) < 0) {
        free(st);
        free(stat);
        free(trans);
        return -1;
    }
    for (int i = 0; i < S; i++) {
        stage_cost *c = &s->cost[i];
        int d = s->stage_device[i];
        double send_f = i + 1 < S ? cost_t_transfer(m, g, o, d, s->stage_device[i + 1]) : 0;
        double send_b = i > 0 ? cost_t_transfer(m, g, o, d, s->stage_device[i - 1]) : 0;
        c->t_f = (st[i].t_f + send_f) * 1e3;
        c->t_b = (st[i].t_b + send_b) * 1e3;
        c->t_w = st[i].t_w * 1e3;
        c->d_f = st[i].m_b;
        c->d_b = st[i].m_w - st[i].m_b;
        c->d_w = -st[i].m_w;
        stat[d] += st[i].static_bytes;
        if (st[i].transient > trans[d])
            trans[d] = st[i].transient;
    }
    double reserve = cost_reserve_bytes(o);
    if (!s->mem_static) {
        s->mem_static = malloc(sizeof *s->mem_static * (size_t)s->n_devices);
        if (!s->mem_static) {
            free(st);
            free(stat);
            free(trans);
            return zb_fail(err, "out of memory");
        }
    }
    for (int d = 0; d < s->n_devices; d++)
        s->mem_static[d] = stat[d] + trans[d] + reserve;
    s->t_comm = 0; /* blocking transfers are inside the ops */
    strcpy(s->time_unit, "ms");
    strcpy(s->mem_unit, "bytes");
    free(st);
    free(stat);
    free(trans);
    return 0;
}

int cost_static_floor(const zb_model *m, const zb_gpu *g, const cost_options *o, int p, double *bytes,
                      zb_err *err)
{
    if (p < 1)
        return zb_fail(err, "static memory floor: %d devices", p);
    /* One stage holds every layer: its static state is the layers' (the
     * split only moves it between devices) plus the embedding and head. */
    cost_options one = *o;
    one.layers = NULL;
    one.recompute = 0;
    one.recompute_stage = NULL;
    cost_stage st;
    cost_part layer, emb, head;
    if (cost_stages(m, g, &one, 1, 1, &st, err) < 0 || cost_parts(m, g, &one, &layer, &emb, &head, err) < 0)
        return -1;
    double bpp = cost_bytes_per_param(m, &one);
    double layers = fmax(0, st.static_bytes - (emb.params + head.params) * bpp);
    double reserve = cost_reserve_bytes(o);
    *bytes = layers / p + reserve;
    return 0;
}

double cost_model_flops(const zb_model *m, const cost_options *o)
{
    cost_options plain = *o;
    plain.profile = NULL;
    plain.recompute = 0;
    return cost_parts_flops(m, &plain) + cost_memory_flops_delta(m, &plain);
}
