/*
 * layout.c: one job's parallel layout (layout.h).
 *
 * The checks are the engines' own preconditions, stated once: Megatron-LM
 * and torchtitan both need the heads (and, with grouped-query attention,
 * the KV heads) to divide over the tensor-parallel ranks, and the
 * load-balanced causal context parallelism of both splits the sequence
 * into 2c chunks.  TP and CP groups stay within a node because their
 * traffic is per layer (docs/cost-model.md, "Layouts").
 */
#include "src/layout.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

void layout_default(zb_layout *l)
{
    memset(l, 0, sizeof *l);
    l->tp = l->pp = l->chunks = l->dp = l->cp = 1;
    l->zero = LAYOUT_ZERO1;
}

long layout_gpus(const zb_layout *l)
{
    return (long)l->tp * l->cp * l->pp * l->dp;
}

int layout_is_extended(const zb_layout *l)
{
    return l->tp > 1 || l->cp > 1 || l->zero > LAYOUT_ZERO1 || l->offload > 0;
}

static int power_of_two(int x)
{
    return x > 0 && (x & (x - 1)) == 0;
}

int layout_check(const zb_layout *l, const zb_model *m, int gpus_per_node, zb_err *err)
{
    if (l->tp < 1 || l->pp < 1 || l->chunks < 1 || l->dp < 1 || l->cp < 1)
        return zb_fail(err, "layout: every size must be >= 1 (tp %d, pp %d, chunks %d, dp %d, cp %d)",
                       l->tp, l->pp, l->chunks, l->dp, l->cp);
    if (!power_of_two(l->tp) || !power_of_two(l->cp))
        return zb_fail(err, "layout: tensor- and context-parallel sizes must be powers of two (tp %d, cp %d)",
                       l->tp, l->cp);
    if (gpus_per_node > 0 && (long)l->tp * l->cp > gpus_per_node)
        return zb_fail(err, "layout: tp %d x cp %d = %d GPUs exceed a node's %d (their traffic is per layer)",
                       l->tp, l->cp, l->tp * l->cp, gpus_per_node);
    if (l->sp != 0 && l->sp != 1)
        return zb_fail(err, "layout: sequence_parallel must be 0 or 1, not %d", l->sp);
    if (l->sp && l->tp == 1)
        return zb_fail(err, "layout: sequence parallelism needs a tensor-parallel size above 1");
    if (l->zero < LAYOUT_ZERO1 || l->zero > LAYOUT_ZERO3)
        return zb_fail(err, "layout: zero must be 1, 2 or 3 (3 = FSDP), not %d", l->zero);
    if (!(l->offload >= 0 && l->offload <= 1))
        return zb_fail(err, "layout: offload must be a fraction in [0, 1], not %g", l->offload);
    if (!m)
        return 0;
    if (m->n_heads % l->tp || m->n_kv_heads % l->tp || m->d_ff % l->tp)
        return zb_fail(err, "layout: tp %d does not divide model %s's %d heads, %d KV heads and FFN %d",
                       l->tp, m->name, m->n_heads, m->n_kv_heads, m->d_ff);
    if (m->seq_len % (2 * l->cp) && l->cp > 1)
        return zb_fail(err, "layout: cp %d needs the sequence (%d) in %d equal chunks",
                       l->cp, m->seq_len, 2 * l->cp);
    return 0;
}

const char *layout_text(const zb_layout *l, char *buf, size_t len)
{
    size_t off = 0;
    buf[0] = 0;
#define PUT(...)                                                                 \
    do {                                                                         \
        if (off < len) {                                                         \
            int k_ = snprintf(buf + off, len - off, __VA_ARGS__);               \
            off += k_ > 0 ? (size_t)k_ : 0;                                      \
        }                                                                        \
    } while (0)
    if (l->tp > 1)
        PUT("tp%d%s ", l->tp, l->sp ? "+sp" : "");
    if (l->cp > 1)
        PUT("cp%d ", l->cp);
    PUT("pp%d ", l->pp);
    if (l->chunks > 1)
        PUT("v%d ", l->chunks);
    PUT("dp%d", l->dp);
    if (l->zero > LAYOUT_ZERO1)
        PUT(" zero%d", l->zero);
    if (l->offload > 0)
        PUT(" off%.2g", l->offload);
#undef PUT
    return buf;
}

cJSON *layout_to_json(const zb_layout *l)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    int ok = cJSON_AddNumberToObject(o, "tensor_parallel", l->tp) &&
             cJSON_AddBoolToObject(o, "sequence_parallel", l->sp) &&
             cJSON_AddNumberToObject(o, "pipeline_parallel", l->pp) &&
             cJSON_AddNumberToObject(o, "chunks", l->chunks) &&
             cJSON_AddNumberToObject(o, "data_parallel", l->dp) &&
             cJSON_AddNumberToObject(o, "context_parallel", l->cp) &&
             cJSON_AddNumberToObject(o, "zero", l->zero) &&
             cJSON_AddNumberToObject(o, "offload", l->offload);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* Reads an integer key in [min, max] into *out when present. */
static int get_int(const cJSON *obj, const char *key, int min, int max, int *out, zb_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v)
        return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < min ||
        v->valuedouble > max)
        return zb_fail(err, "layout: \"%s\" must be a whole number in %d..%d", key, min, max);
    *out = (int)v->valuedouble;
    return 0;
}

int layout_from_json(const cJSON *obj, zb_layout *l, zb_err *err)
{
    static const char *const known[] = { "tensor_parallel", "sequence_parallel", "pipeline_parallel",
                                         "chunks", "data_parallel", "context_parallel", "zero",
                                         "offload", NULL };
    if (!cJSON_IsObject(obj))
        return zb_fail(err, "layout: not a JSON object");
    for (const cJSON *it = obj->child; it; it = it->next) {
        int k = 0;
        while (known[k] && strcmp(known[k], it->string))
            k++;
        if (!known[k])
            return zb_fail(err, "layout: unknown key \"%s\"", it->string);
    }
    zb_layout r = *l;
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(obj, "sequence_parallel");
    if (sp && !cJSON_IsBool(sp))
        return zb_fail(err, "layout: \"sequence_parallel\" must be true or false");
    if (sp)
        r.sp = cJSON_IsTrue(sp);
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(obj, "offload");
    if (off && (!cJSON_IsNumber(off) || !(off->valuedouble >= 0 && off->valuedouble <= 1)))
        return zb_fail(err, "layout: \"offload\" must be a fraction in [0, 1]");
    if (off)
        r.offload = off->valuedouble;
    if (get_int(obj, "tensor_parallel", 1, 1 << 16, &r.tp, err) < 0 ||
        get_int(obj, "pipeline_parallel", 1, 1 << 20, &r.pp, err) < 0 ||
        get_int(obj, "chunks", 1, 1 << 16, &r.chunks, err) < 0 ||
        get_int(obj, "data_parallel", 1, 1 << 24, &r.dp, err) < 0 ||
        get_int(obj, "context_parallel", 1, 1 << 16, &r.cp, err) < 0 ||
        get_int(obj, "zero", LAYOUT_ZERO1, LAYOUT_ZERO3, &r.zero, err) < 0)
        return -1;
    if (layout_check(&r, NULL, 0, err) < 0)
        return -1;
    *l = r;
    return 0;
}

int layout_parse_zero(const char *text)
{
    if (!strcmp(text, "1"))
        return LAYOUT_ZERO1;
    if (!strcmp(text, "2"))
        return LAYOUT_ZERO2;
    if (!strcmp(text, "3") || !strcasecmp(text, "fsdp"))
        return LAYOUT_ZERO3;
    return -1;
}
