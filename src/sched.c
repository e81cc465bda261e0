/*
 * sched.c: construction and basic queries of the schedule model (sched.h).
 *
 * Lanes grow by doubling, so a generator can push ops one by one without
 * knowing the count in advance; 200,000 pushes cost a few milliseconds.
 */
#include "src/sched.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

sched_t *sched_new(int n_devices, int n_micro, int n_stages)
{
    if (n_devices <= 0 || n_micro <= 0 || n_stages <= 0)
        return NULL;
    sched_t *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->n_devices = n_devices;
    s->n_micro = n_micro;
    s->n_stages = n_stages;
    s->stage_device = malloc(sizeof *s->stage_device * (size_t)n_stages);
    s->cost = calloc((size_t)n_stages, sizeof *s->cost);
    s->dev = calloc((size_t)n_devices, sizeof *s->dev);
    if (!s->stage_device || !s->cost || !s->dev) {
        sched_free(s);
        return NULL;
    }
    for (int i = 0; i < n_stages; i++)
        s->stage_device[i] = -1;
    sched_set_costs(s, 1, 1, 1, 0);
    sched_set_mem(s, 2, -1, -1);
    strcpy(s->time_unit, "units");
    strcpy(s->mem_unit, "units");
    return s;
}

void sched_free(sched_t *s)
{
    if (!s)
        return;
    if (s->dev) {
        for (int d = 0; d < s->n_devices; d++) {
            free(s->dev[d].ops);
            free(s->dev[d].start);
            free(s->dev[d].end);
        }
    }
    free(s->dev);
    free(s->stage_device);
    free(s->cost);
    free(s->mem_limit);
    free(s->mem_static);
    cJSON_Delete(s->meta);
    free(s);
}

static void *dup_array(const void *src, size_t bytes, int *failed)
{
    if (!src)
        return NULL;
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        *failed = 1;
        return NULL;
    }
    memcpy(p, src, bytes);
    return p;
}

sched_t *sched_clone(const sched_t *s)
{
    sched_t *c = sched_new(s->n_devices, s->n_micro, s->n_stages);
    if (!c)
        return NULL;
    int failed = 0;
    memcpy(c->name, s->name, sizeof c->name);
    memcpy(c->stage_device, s->stage_device, sizeof *s->stage_device * (size_t)s->n_stages);
    memcpy(c->cost, s->cost, sizeof *s->cost * (size_t)s->n_stages);
    c->t_comm = s->t_comm;
    c->mem_limit = dup_array(s->mem_limit, sizeof(double) * (size_t)s->n_devices, &failed);
    c->mem_static = dup_array(s->mem_static, sizeof(double) * (size_t)s->n_devices, &failed);
    memcpy(c->time_unit, s->time_unit, sizeof c->time_unit);
    memcpy(c->mem_unit, s->mem_unit, sizeof c->mem_unit);
    c->vocab = s->vocab;
    for (int d = 0; d < s->n_devices && !failed; d++) {
        const sched_lane *src = &s->dev[d];
        sched_lane *dst = &c->dev[d];
        dst->n_ops = dst->cap = src->n_ops;
        dst->ops = dup_array(src->ops, sizeof *src->ops * (size_t)src->n_ops, &failed);
        dst->start = dup_array(src->start, sizeof(double) * (size_t)src->n_ops, &failed);
        dst->end = dup_array(src->end, sizeof(double) * (size_t)src->n_ops, &failed);
    }
    if (s->meta && !failed) {
        c->meta = cJSON_Duplicate(s->meta, 1);
        failed = c->meta == NULL;
    }
    if (failed) {
        sched_free(c);
        return NULL;
    }
    return c;
}

int sched_lane_grow(sched_lane *l)
{
    return sched_lane_reserve(l, l->cap ? l->cap * 2 : 16);
}

int sched_lane_reserve(sched_lane *l, int n)
{
    if (n <= l->cap)
        return 0;
    sched_op *ops = realloc(l->ops, sizeof *ops * (size_t)n);
    if (!ops)
        return -1;
    l->ops = ops;
    if (l->start) {
        double *st = realloc(l->start, sizeof(double) * (size_t)n);
        if (!st)
            return -1;
        l->start = st;
        double *en = realloc(l->end, sizeof(double) * (size_t)n);
        if (!en)
            return -1;
        l->end = en;
    }
    l->cap = n;
    return 0;
}

int sched_lane_alloc_times(sched_t *s, int dev)
{
    sched_lane *l = &s->dev[dev];
    if (l->start)
        return 0;
    size_t n = (size_t)(l->cap ? l->cap : 1);
    l->start = calloc(n, sizeof(double));
    l->end = calloc(n, sizeof(double));
    if (!l->start || !l->end) {
        free(l->start);
        free(l->end);
        l->start = l->end = NULL;
        return -1;
    }
    return 0;
}

void sched_place_interleaved(sched_t *s)
{
    for (int i = 0; i < s->n_stages; i++)
        s->stage_device[i] = i % s->n_devices;
}

void sched_place_v(sched_t *s)
{
    assert(s->n_stages == 2 * s->n_devices);
    int p = s->n_devices;
    for (int i = 0; i < s->n_stages; i++)
        s->stage_device[i] = i < p ? i : 2 * p - 1 - i;
}

void sched_set_costs(sched_t *s, double t_f, double t_b, double t_w, double t_comm)
{
    for (int i = 0; i < s->n_stages; i++) {
        s->cost[i].t_f = t_f;
        s->cost[i].t_b = t_b;
        s->cost[i].t_w = t_w;
    }
    s->t_comm = t_comm;
}

void sched_set_mem(sched_t *s, double d_f, double d_b, double d_w)
{
    for (int i = 0; i < s->n_stages; i++) {
        s->cost[i].d_f = d_f;
        s->cost[i].d_b = d_b;
        s->cost[i].d_w = d_w;
    }
}

void sched_set_vocab(sched_t *s, sched_vocab_variant variant, double t_s, double t_t,
                     double d_s, double d_t, double t_c0, double t_c1)
{
    assert(variant >= SCHED_VOCAB_NONE && variant <= SCHED_VOCAB_2);
    memset(&s->vocab, 0, sizeof s->vocab);
    s->vocab.variant = variant;
    if (variant == SCHED_VOCAB_NONE)
        return;
    s->vocab.t_s = t_s;
    s->vocab.t_t = t_t;
    s->vocab.d_s = d_s;
    s->vocab.d_t = d_t;
    s->vocab.t_c0 = t_c0;
    s->vocab.t_c1 = variant == SCHED_VOCAB_2 ? t_c1 : 0;
}

int sched_has_vocab(const sched_t *s)
{
    return s->vocab.variant != SCHED_VOCAB_NONE;
}

double sched_lane_peak(const sched_t *s, int d)
{
    assert(d >= 0 && d < s->n_devices);
    const sched_lane *l = &s->dev[d];
    double mem = 0, peak = 0;
    for (int i = 0; i < l->n_ops; i++) {
        mem += sched_op_mem(s, l->ops[i]);
        if (mem > peak)
            peak = mem;
    }
    return peak;
}

long sched_op_count(const sched_t *s)
{
    long n = 0;
    for (int d = 0; d < s->n_devices; d++)
        n += s->dev[d].n_ops;
    return n;
}

const char *op_kind_name(op_kind k)
{
    static const char *const names[OP_KIND_COUNT] = { "F", "B", "W", "BW", "S", "T" };
    assert(k >= 0 && k < OP_KIND_COUNT);
    return names[k];
}

int op_kind_parse(const char *str, size_t len)
{
    if (len == 1 && str[0] == 'F') return OP_F;
    if (len == 1 && str[0] == 'B') return OP_B;
    if (len == 1 && str[0] == 'W') return OP_W;
    if (len == 2 && str[0] == 'B' && str[1] == 'W') return OP_BW;
    if (len == 1 && str[0] == 'S') return OP_S;
    if (len == 1 && str[0] == 'T') return OP_T;
    return -1;
}

int sched_device_stage_count(const sched_t *s, int dev)
{
    int n = 0;
    for (int i = 0; i < s->n_stages; i++)
        n += s->stage_device[i] == dev;
    return n;
}
