/*
 * outer.c: DiLoCo, EDiT and A-EDiT outer steps, gradient averaging for the
 * sync baseline, and elastic replica membership (see outer.h).
 *
 * State per replica is three contiguous arrays of n_total floats (global
 * copy, momentum, pseudo-gradient scratch) indexed by segment offsets, plus
 * one anomaly detector per segment for EDiT.  Replica ids are slots that are
 * never reused, so an id a caller holds cannot silently come to mean a
 * different replica after a leave and a join.
 */
#include "runtime/outer/outer.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/outer/outer_edit.h"

typedef struct outer_replica {
    int present;         /* 1 while the replica is part of the run */
    int joining;         /* 1: joined since the last outer step, contributes nothing yet */
    long steps;          /* inner steps since the last outer step */
    float **params;      /* [n_seg] the replica's live parameter segments (borrowed) */
    float **grads;       /* [n_seg] its gradient segments (borrowed; sync mode) or NULL */
    float *global;       /* [n_total] its copy of the last synchronized parameters */
    float *mom;          /* [n_total] its copy of the outer Nesterov momentum */
    float *delta;        /* [n_total] pseudo-gradient scratch (the ring's buffer) */
    outer_zdetect *det;  /* [n_seg] EDiT anomaly detectors, or NULL */
} outer_replica;

struct outer_t {
    outer_config cfg;        /* as given to outer_new */
    int n_seg;               /* segments per replica */
    size_t *seg_len;         /* [n_seg] floats per segment */
    size_t *seg_off;         /* [n_seg] offset of each segment in the state arrays */
    size_t n_total;          /* sum of seg_len */
    int n_slots;             /* replica slots used so far (ids 0..n_slots-1) */
    int cap;                 /* allocated slots */
    outer_replica *rep;      /* [cap] */
    int started;             /* 1 once a step was noted or taken */
    long n_outer;            /* outer steps taken */
    double last_sync;        /* clock time of the last outer step (or creation) */
    outer_ring_stats traffic; /* bytes and messages of every exchange */
};

static double monotonic_now(void *ctx)
{
    (void)ctx;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double outer_now(const outer_t *o)
{
    return o->cfg.clock ? o->cfg.clock(o->cfg.clock_ctx) : monotonic_now(NULL);
}

void outer_config_default(outer_config *c, outer_kind kind)
{
    memset(c, 0, sizeof *c);
    c->kind = kind;
    c->wire = OUTER_WIRE_FP32;
    c->inner_steps = 50;
    c->outer_lr = 0.7f;
    c->outer_momentum = 0.9f;
    c->edit_temperature = 1.0;
    c->edit_clip = 10.0;
    c->edit_alpha = 0.02;
    c->edit_warmup = 100;
    c->edit_threshold = 3.0;
    c->aedit_interval_s = 600.0;
    c->aedit_min_steps = 100;
    c->aedit_step_weight = 0.5;
}

static const char *const kind_names[] = { "sync", "diloco", "edit", "a-edit" };

const char *outer_kind_name(outer_kind k)
{
    return (unsigned)k < 4 ? kind_names[k] : "?";
}

int outer_kind_parse(const char *text)
{
    for (int k = 0; k < 4; k++)
        if (!strcmp(text, kind_names[k]))
            return k;
    return -1;
}

static int is_edit(const outer_t *o)
{
    return o->cfg.kind == OUTER_EDIT || o->cfg.kind == OUTER_AEDIT;
}

int outer_new(const outer_config *cfg, int n_seg, const size_t *seg_len,
              outer_t **out, zb_err *err)
{
    const outer_config *c = cfg;
    if ((unsigned)c->kind > OUTER_AEDIT)
        return zb_fail(err, "outer: unknown kind %d", (int)c->kind);
    if (c->wire != OUTER_WIRE_FP32 && c->wire != OUTER_WIRE_INT8)
        return zb_fail(err, "outer: unknown all-reduce %d", (int)c->wire);
    if (n_seg < 1)
        return zb_fail(err, "outer: %d parameter segments (need at least 1)", n_seg);
    if (c->kind != OUTER_SYNC) {
        if (c->kind != OUTER_AEDIT && c->inner_steps < 1)
            return zb_fail(err, "outer: inner steps %d must be at least 1", c->inner_steps);
        if (!(c->outer_lr > 0.0f) || !isfinite(c->outer_lr))
            return zb_fail(err, "outer: outer lr %g must be positive", (double)c->outer_lr);
        if (!(c->outer_momentum >= 0.0f && c->outer_momentum < 1.0f))
            return zb_fail(err, "outer: outer momentum %g must be in [0, 1)", (double)c->outer_momentum);
    }
    if (c->kind == OUTER_EDIT || c->kind == OUTER_AEDIT) {
        if (!(c->edit_temperature > 0.0) || !isfinite(c->edit_temperature))
            return zb_fail(err, "outer: EDiT temperature %g must be positive", c->edit_temperature);
        if (!(c->edit_alpha > 0.0 && c->edit_alpha <= 1.0))
            return zb_fail(err, "outer: EDiT alpha %g must be in (0, 1]", c->edit_alpha);
        if (c->edit_warmup < 1)
            return zb_fail(err, "outer: EDiT warm-up %d must be at least 1", c->edit_warmup);
        if (!(c->edit_threshold > 0.0))
            return zb_fail(err, "outer: EDiT threshold %g must be positive", c->edit_threshold);
        if (isnan(c->edit_clip))
            return zb_fail(err, "outer: EDiT clip is not a number");
    }
    if (c->kind == OUTER_AEDIT) {
        if (!(c->aedit_interval_s > 0.0) || !isfinite(c->aedit_interval_s))
            return zb_fail(err, "outer: A-EDiT interval %g s must be positive", c->aedit_interval_s);
        if (c->aedit_min_steps < 0)
            return zb_fail(err, "outer: A-EDiT minimum steps %ld is negative", c->aedit_min_steps);
        if (!(c->aedit_step_weight >= 0.0 && c->aedit_step_weight <= 1.0))
            return zb_fail(err, "outer: A-EDiT step weight %g must be in [0, 1]", c->aedit_step_weight);
    }
    for (int i = 0; i < n_seg; i++)
        if (seg_len[i] == 0)
            return zb_fail(err, "outer: segment %d is empty", i);

    outer_t *o = calloc(1, sizeof *o);
    if (!o)
        return zb_fail(err, "outer: out of memory");
    o->cfg = *cfg;
    o->n_seg = n_seg;
    o->seg_len = malloc((size_t)n_seg * sizeof *o->seg_len);
    o->seg_off = malloc((size_t)n_seg * sizeof *o->seg_off);
    if (!o->seg_len || !o->seg_off) {
        outer_free(o);
        return zb_fail(err, "outer: out of memory");
    }
    for (int i = 0; i < n_seg; i++) {
        o->seg_len[i] = seg_len[i];
        o->seg_off[i] = o->n_total;
        o->n_total += seg_len[i];
    }
    o->last_sync = outer_now(o);
    *out = o;
    return 0;
}

static void replica_release(outer_t *o, outer_replica *r)
{
    free(r->params);
    free(r->grads);
    free(r->global);
    free(r->mom);
    free(r->delta);
    if (r->det) {
        for (int i = 0; i < o->n_seg; i++)
            outer_zdetect_free(&r->det[i]);
        free(r->det);
    }
    memset(r, 0, sizeof *r);
}

void outer_free(outer_t *o)
{
    if (!o)
        return;
    for (int i = 0; i < o->n_slots; i++)
        if (o->rep[i].present)
            replica_release(o, &o->rep[i]);
    free(o->rep);
    free(o->seg_len);
    free(o->seg_off);
    free(o);
}

static int count_present(const outer_t *o)
{
    int n = 0;
    for (int i = 0; i < o->n_slots; i++)
        n += o->rep[i].present;
    return n;
}

static const outer_replica *first_present(const outer_t *o)
{
    for (int i = 0; i < o->n_slots; i++)
        if (o->rep[i].present)
            return &o->rep[i];
    return NULL;
}

int outer_add_replica(outer_t *o, float *const *params, float *const *grads, zb_err *err)
{
    if (o->cfg.kind == OUTER_SYNC && o->started)
        return zb_fail(err, "outer: a replica cannot join a running sync run "
                            "(data parallel would need the inner optimizer state)");
    if (o->cfg.kind == OUTER_SYNC && !grads)
        return zb_fail(err, "outer: sync mode needs the replica's gradient buffers");
    if (o->n_slots == o->cap) {
        int cap = o->cap ? 2 * o->cap : 8;
        outer_replica *rep = realloc(o->rep, (size_t)cap * sizeof *rep);
        if (!rep)
            return zb_fail(err, "outer: out of memory");
        memset(rep + o->cap, 0, (size_t)(cap - o->cap) * sizeof *rep);
        o->rep = rep;
        o->cap = cap;
    }
    const outer_replica *src = first_present(o);
    outer_replica *r = &o->rep[o->n_slots];
    size_t nt = o->n_total;
    r->params = malloc((size_t)o->n_seg * sizeof *r->params);
    if (grads)
        r->grads = malloc((size_t)o->n_seg * sizeof *r->grads);
    int fail = !r->params || (grads && !r->grads);
    if (o->cfg.kind != OUTER_SYNC) {
        r->global = malloc(nt * sizeof(float));
        r->mom = calloc(nt, sizeof(float));
        r->delta = malloc(nt * sizeof(float));
        fail |= !r->global || !r->mom || !r->delta;
    } else {
        r->delta = NULL;
    }
    if (!fail && is_edit(o)) {
        r->det = calloc((size_t)o->n_seg, sizeof *r->det);
        fail |= !r->det;
        for (int i = 0; !fail && i < o->n_seg; i++)
            fail |= outer_zdetect_init(&r->det[i], o->cfg.edit_warmup, o->cfg.edit_alpha,
                                       o->cfg.edit_threshold) != 0;
    }
    if (fail) {
        replica_release(o, r);
        return zb_fail(err, "outer: out of memory for a replica of %zu parameters", nt);
    }
    for (int i = 0; i < o->n_seg; i++) {
        r->params[i] = params[i];
        if (grads)
            r->grads[i] = grads[i];
    }
    if (o->cfg.kind == OUTER_SYNC) {
        /* Data parallel starts from identical weights. */
        if (src)
            for (int i = 0; i < o->n_seg; i++)
                memcpy(r->params[i], src->params[i], o->seg_len[i] * sizeof(float));
    } else if (!src) {
        for (int i = 0; i < o->n_seg; i++)
            memcpy(r->global + o->seg_off[i], params[i], o->seg_len[i] * sizeof(float));
    } else {
        /* Every present replica holds the same global and momentum; the
         * joiner copies them (INTELLECT-1's live checkpoint download). */
        memcpy(r->global, src->global, nt * sizeof(float));
        memcpy(r->mom, src->mom, nt * sizeof(float));
        for (int i = 0; i < o->n_seg; i++)
            memcpy(r->params[i], r->global + o->seg_off[i], o->seg_len[i] * sizeof(float));
        r->joining = o->started;
    }
    r->present = 1;
    return o->n_slots++;
}

int outer_remove_replica(outer_t *o, int id, zb_err *err)
{
    if (id < 0 || id >= o->n_slots || !o->rep[id].present)
        return zb_fail(err, "outer: no replica %d", id);
    if (count_present(o) == 1)
        return zb_fail(err, "outer: cannot remove replica %d, the last one", id);
    replica_release(o, &o->rep[id]);
    return 0;
}

int outer_replicas(const outer_t *o, int *ids)
{
    int n = 0;
    for (int i = 0; i < o->n_slots; i++)
        if (o->rep[i].present) {
            if (ids)
                ids[n] = i;
            n++;
        }
    return n;
}

int outer_replica_trains(const outer_t *o, int id)
{
    return id >= 0 && id < o->n_slots && o->rep[id].present && !o->rep[id].joining;
}

void outer_note_step(outer_t *o, int id)
{
    o->started = 1;
    if (id >= 0 && id < o->n_slots && o->rep[id].present)
        o->rep[id].steps++;
}

long outer_steps_since_sync(const outer_t *o, int id)
{
    return id >= 0 && id < o->n_slots && o->rep[id].present ? o->rep[id].steps : 0;
}

int outer_should_sync(outer_t *o)
{
    if (o->cfg.kind == OUTER_SYNC)
        return 0;
    long most = 0, total = 0;
    int n = 0;
    for (int i = 0; i < o->n_slots; i++) {
        const outer_replica *r = &o->rep[i];
        if (!r->present || r->joining)
            continue;
        n++;
        total += r->steps;
        if (r->steps > most)
            most = r->steps;
    }
    if (n == 0)
        return 0;
    if (o->cfg.kind != OUTER_AEDIT)
        return most >= o->cfg.inner_steps;
    if (outer_now(o) - o->last_sync < o->cfg.aedit_interval_s)
        return 0;
    /* Time is up: the replicas exchange their step counters and sync only
     * when enough work was done since the last sync. */
    outer_ring_count_allgather(&o->traffic, count_present(o), 1);
    return total >= o->cfg.aedit_min_steps && total > 0;
}

void outer_nesterov(float *x, float *mom, const float *delta, size_t n, float lr, float mu)
{
    for (size_t j = 0; j < n; j++) {
        float m = mu * mom[j] + delta[j];
        mom[j] = m;
        x[j] -= lr * (delta[j] + mu * m);
    }
}

static double norm2(const float *x, size_t n)
{
    double ss = 0.0;
    for (size_t j = 0; j < n; j++)
        ss += (double)x[j] * (double)x[j];
    return ss;
}

/* EDiT's weights for one segment over the ring members: norms exchanged,
 * anomalies dropped, softmax, A-EDiT step blend.  Returns survivors. */
static int edit_segment_weights(outer_t *o, int seg, const int *ring, int k,
                                const double *norm, double *w, int *eliminated)
{
    int keep[k];
    long steps_kept = 0;
    for (int a = 0; a < k; a++) {
        outer_replica *r = &o->rep[ring[a]];
        keep[a] = 0;
        if (r->joining)
            continue;
        if (!isfinite(norm[a])) {
            (*eliminated)++;
            continue;
        }
        if (outer_zdetect_feed(&r->det[seg], norm[a], NULL)) {
            (*eliminated)++;
            continue;
        }
        keep[a] = 1;
        steps_kept += r->steps;
    }
    int kept = outer_edit_weights(norm, keep, k, o->cfg.edit_temperature, w);
    if (kept && o->cfg.kind == OUTER_AEDIT && steps_kept > 0) {
        double rr = o->cfg.aedit_step_weight;
        for (int a = 0; a < k; a++)
            if (keep[a])
                w[a] = (1.0 - rr) * w[a] + rr * (double)o->rep[ring[a]].steps / (double)steps_kept;
    }
    return kept;
}

int outer_step(outer_t *o, outer_step_info *info, zb_err *err)
{
    if (o->cfg.kind == OUTER_SYNC)
        return zb_fail(err, "outer: sync mode has no outer step");
    outer_step_info st;
    memset(&st, 0, sizeof st);
    int k = count_present(o);
    int ring[k > 0 ? k : 1];
    outer_replicas(o, ring);
    float *bufs[k > 0 ? k : 1];
    double w[k > 0 ? k : 1];
    for (int a = 0; a < k; a++)
        st.contributors += !o->rep[ring[a]].joining;
    st.ring_size = k;
    double applied_ss = 0.0;

    /* Phase 1: every pseudo-gradient and its norm, before anything changes,
     * so that a rejected step (non-finite DiLoCo pseudo-gradient) leaves
     * every replica as it was. */
    double *norms = malloc((size_t)o->n_seg * (size_t)(k > 0 ? k : 1) * sizeof *norms);
    if (!norms)
        return zb_fail(err, "outer: out of memory");
    for (int s = 0; s < o->n_seg; s++) {
        size_t off = o->seg_off[s], len = o->seg_len[s];
        for (int a = 0; a < k; a++) {
            outer_replica *r = &o->rep[ring[a]];
            float *d = r->delta + off;
            if (r->joining) {
                memset(d, 0, len * sizeof(float));
            } else {
                const float *g = r->global + off, *p = r->params[s];
                for (size_t j = 0; j < len; j++)
                    d[j] = g[j] - p[j];
            }
            norms[(size_t)s * k + a] = sqrt(norm2(d, len));
            if (o->cfg.kind == OUTER_DILOCO && !isfinite(norms[(size_t)s * k + a])) {
                free(norms);
                return zb_fail(err, "outer: replica %d: pseudo-gradient of segment %d is not finite",
                               ring[a], s);
            }
        }
    }

    /* Phase 2: combine through the ring and apply, segment by segment. */
    for (int s = 0; s < o->n_seg && st.contributors > 0; s++) {
        size_t off = o->seg_off[s], len = o->seg_len[s];
        const double *norm = norms + (size_t)s * k;
        for (int a = 0; a < k; a++)
            bufs[a] = o->rep[ring[a]].delta + off;
        int apply = 1;
        if (o->cfg.kind == OUTER_DILOCO) {
            if (outer_allreduce(o->cfg.wire, bufs, k, len, (float)st.contributors,
                                &o->traffic, err)) {
                free(norms);
                return -1;
            }
        } else {
            outer_ring_count_allgather(&o->traffic, k, 1); /* the norms */
            int kept = edit_segment_weights(o, s, ring, k, norm, w, &st.eliminated);
            if (!kept) {
                st.skipped_segments++;
                apply = 0;
            } else {
                for (int a = 0; a < k; a++) {
                    if (w[a] == 0.0) {
                        memset(bufs[a], 0, len * sizeof(float)); /* also clears NaN */
                    } else {
                        float wf = (float)w[a];
                        for (size_t j = 0; j < len; j++)
                            bufs[a][j] *= wf;
                    }
                }
                if (outer_allreduce(o->cfg.wire, bufs, k, len, 1.0f, &o->traffic, err)) {
                    free(norms);
                    return -1;
                }
                /* Identical buffers everywhere, so every replica computes
                 * the same factor; compute it once. */
                double f = outer_edit_clip_factor(sqrt(norm2(bufs[0], len)), o->cfg.edit_clip);
                if (f < 1.0) {
                    st.clipped++;
                    float ff = (float)f;
                    for (int a = 0; a < k; a++)
                        for (size_t j = 0; j < len; j++)
                            bufs[a][j] *= ff;
                }
            }
        }
        if (apply)
            applied_ss += norm2(bufs[0], len);
        for (int a = 0; a < k; a++) {
            outer_replica *r = &o->rep[ring[a]];
            if (apply)
                outer_nesterov(r->global + off, r->mom + off, r->delta + off, len,
                               o->cfg.outer_lr, o->cfg.outer_momentum);
            memcpy(r->params[s], r->global + off, len * sizeof(float));
        }
    }
    for (int a = 0; a < k; a++) {
        o->rep[ring[a]].joining = 0;
        o->rep[ring[a]].steps = 0;
    }
    free(norms);
    st.delta_norm = sqrt(applied_ss);
    o->n_outer++;
    o->started = 1;
    o->last_sync = outer_now(o);
    if (info)
        *info = st;
    return 0;
}

int outer_sync_grads(outer_t *o, zb_err *err)
{
    if (o->cfg.kind != OUTER_SYNC)
        return zb_fail(err, "outer: gradient averaging is the sync mode's");
    int k = count_present(o);
    int ring[k];
    float *bufs[k];
    outer_replicas(o, ring);
    o->started = 1;
    for (int s = 0; s < o->n_seg; s++) {
        for (int a = 0; a < k; a++)
            bufs[a] = o->rep[ring[a]].grads[s];
        if (outer_allreduce(o->cfg.wire, bufs, k, o->seg_len[s], (float)k, &o->traffic, err))
            return -1;
    }
    return 0;
}

const outer_ring_stats *outer_traffic(const outer_t *o)
{
    return &o->traffic;
}

long outer_step_count(const outer_t *o)
{
    return o->n_outer;
}

const float *outer_global(const outer_t *o, int id, int seg)
{
    if (id < 0 || id >= o->n_slots || !o->rep[id].present || !o->rep[id].global ||
        seg < 0 || seg >= o->n_seg)
        return NULL;
    return o->rep[id].global + o->seg_off[seg];
}

const float *outer_momentum(const outer_t *o, int id, int seg)
{
    if (id < 0 || id >= o->n_slots || !o->rep[id].present || !o->rep[id].mom ||
        seg < 0 || seg >= o->n_seg)
        return NULL;
    return o->rep[id].mom + o->seg_off[seg];
}

/* ---- the state a resumed run needs (outer_state_save / outer_state_load) ----
 *
 * One byte buffer: a header of int64 fields (the layout and counters),
 * then per replica slot (present, joining, steps since the last outer
 * step), then per present replica its global copy and momentum (not in
 * sync mode, which has neither), then with EDiT each present replica's
 * anomaly detectors (mean, M2, count, the z-score history).  The replicas'
 * live parameters are not in it: they are the trainers' checkpoints.  The
 * A-EDiT clock is not either: wall time does not resume. */

#define OUTER_STATE_MAGIC 0x7a626f7574657231LL /* "zbouter1" */
#define OUTER_STATE_HEADER 10                  /* int64 fields before the slots */

/* Bytes of one EDiT detector in the buffer. */
static size_t detector_bytes(const outer_t *o)
{
    return 3 * sizeof(int64_t) + 2 * sizeof(double) + (size_t)o->cfg.edit_warmup * sizeof(double);
}

/* Bytes of the whole buffer for o's current replicas. */
static size_t state_bytes(const outer_t *o)
{
    size_t n = OUTER_STATE_HEADER * sizeof(int64_t) + 3 * sizeof(int64_t) * (size_t)o->n_slots;
    int present = count_present(o);
    if (o->cfg.kind != OUTER_SYNC)
        n += (size_t)present * 2 * o->n_total * sizeof(float);
    if (is_edit(o))
        n += (size_t)present * (size_t)o->n_seg * detector_bytes(o);
    return n;
}

/* Appends or takes n bytes at *p (save: from src; load: into dst). */
static void put_bytes(unsigned char **p, const void *src, size_t n)
{
    memcpy(*p, src, n);
    *p += n;
}

static void take_bytes(const unsigned char **p, void *dst, size_t n)
{
    memcpy(dst, *p, n);
    *p += n;
}

int outer_state_save(const outer_t *o, void **buf, size_t *len, zb_err *err)
{
    size_t n = state_bytes(o);
    unsigned char *b = malloc(n), *p = b;
    if (!b)
        return zb_fail(err, "outer: out of memory for its checkpoint");
    int64_t h[OUTER_STATE_HEADER] = { OUTER_STATE_MAGIC, o->cfg.kind, o->n_seg,
                                      (int64_t)o->n_total, o->n_slots, o->n_outer, o->started,
                                      (int64_t)o->traffic.bytes_sent,
                                      (int64_t)o->traffic.messages,
                                      (int64_t)o->traffic.reductions };
    put_bytes(&p, h, sizeof h);
    for (int i = 0; i < o->n_slots; i++) {
        int64_t s[3] = { o->rep[i].present, o->rep[i].joining, o->rep[i].steps };
        put_bytes(&p, s, sizeof s);
    }
    for (int i = 0; i < o->n_slots; i++) {
        const outer_replica *r = &o->rep[i];
        if (!r->present)
            continue;
        if (o->cfg.kind != OUTER_SYNC) {
            put_bytes(&p, r->global, o->n_total * sizeof(float));
            put_bytes(&p, r->mom, o->n_total * sizeof(float));
        }
        for (int s = 0; is_edit(o) && s < o->n_seg; s++) {
            const outer_zdetect *d = &r->det[s];
            assert(d->hist_cap == o->cfg.edit_warmup);
            int64_t c[3] = { d->count, d->hist_len, d->hist_pos };
            put_bytes(&p, c, sizeof c);
            put_bytes(&p, &d->mean, sizeof d->mean);
            put_bytes(&p, &d->m2, sizeof d->m2);
            put_bytes(&p, d->hist, (size_t)d->hist_cap * sizeof(double));
        }
    }
    assert((size_t)(p - b) == n);
    *buf = b;
    *len = n;
    return 0;
}

int outer_state_load(outer_t *o, const void *buf, size_t len, zb_err *err)
{
    const unsigned char *p = buf;
    int64_t h[OUTER_STATE_HEADER];
    if (len < sizeof h)
        return zb_fail(err, "outer: the checkpoint's outer state is truncated");
    take_bytes(&p, h, sizeof h);
    if (h[0] != OUTER_STATE_MAGIC)
        return zb_fail(err, "outer: the checkpoint's outer state is not one (bad magic)");
    if (h[1] != o->cfg.kind || h[2] != o->n_seg || h[3] != (int64_t)o->n_total ||
        h[4] != o->n_slots)
        return zb_fail(err, "outer: the checkpoint is of another run: outer %s, %lld segments "
                       "of %lld parameters, %lld replicas; this run has outer %s, %d, %zu, %d",
                       outer_kind_name((outer_kind)h[1]), (long long)h[2], (long long)h[3],
                       (long long)h[4], outer_kind_name(o->cfg.kind), o->n_seg, o->n_total,
                       o->n_slots);
    if (len < OUTER_STATE_HEADER * sizeof(int64_t) + 3 * sizeof(int64_t) * (size_t)o->n_slots)
        return zb_fail(err, "outer: the checkpoint's outer state is truncated");
    const unsigned char *slots = p;
    for (int i = 0; i < o->n_slots; i++) {
        int64_t s[3];
        take_bytes(&p, s, sizeof s);
        if (s[0] != o->rep[i].present)
            return zb_fail(err, "outer: the checkpoint's replica %d is %s, this run's %s", i,
                           s[0] ? "present" : "gone", o->rep[i].present ? "present" : "gone");
    }
    if (len != state_bytes(o))
        return zb_fail(err, "outer: the checkpoint's outer state has %zu bytes, expected %zu",
                       len, state_bytes(o));
    /* every check passed: nothing above changed o */
    p = slots;
    for (int i = 0; i < o->n_slots; i++) {
        int64_t s[3];
        take_bytes(&p, s, sizeof s);
        o->rep[i].joining = (int)s[1];
        o->rep[i].steps = s[2];
    }
    for (int i = 0; i < o->n_slots; i++) {
        outer_replica *r = &o->rep[i];
        if (!r->present)
            continue;
        if (o->cfg.kind != OUTER_SYNC) {
            take_bytes(&p, r->global, o->n_total * sizeof(float));
            take_bytes(&p, r->mom, o->n_total * sizeof(float));
        }
        for (int s = 0; is_edit(o) && s < o->n_seg; s++) {
            outer_zdetect *d = &r->det[s];
            int64_t c[3];
            take_bytes(&p, c, sizeof c);
            d->count = c[0];
            d->hist_len = (int)c[1];
            d->hist_pos = (int)c[2];
            take_bytes(&p, &d->mean, sizeof d->mean);
            take_bytes(&p, &d->m2, sizeof d->m2);
            take_bytes(&p, d->hist, (size_t)d->hist_cap * sizeof(double));
        }
    }
    o->n_outer = h[5];
    o->started = (int)h[6];
    o->traffic.bytes_sent = (uint64_t)h[7];
    o->traffic.messages = (uint64_t)h[8];
    o->traffic.reductions = (uint64_t)h[9];
    o->last_sync = outer_now(o);
    return 0;
}
