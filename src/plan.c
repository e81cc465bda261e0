/*
 * plan.c: reading the plan of a `zbsched search` file (plan.h).
 *
 * Everything comes from cJSON objects that sched_io.c kept verbatim in
 * sched_t.meta.  The plan's required fields (micro_batch,
 * layers_per_stage, the model beside it) are refused in one line when
 * missing or wrong; the optional ones fall back to what the schedule
 * itself says (its m and p) or to what search wrote before the field
 * existed (recompute: the old all-stage bool; target: zbsched).
 */
#include "src/plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "src/cost_model.h"

static const char *const target_names[PLAN_TARGET_COUNT] = {
    [PLAN_TARGET_ZBSCHED] = "zbsched",
    [PLAN_TARGET_TORCH] = "torch",
    [PLAN_TARGET_TORCHTITAN] = "torchtitan",
    [PLAN_TARGET_MEGATRON] = "megatron",
};

const char *plan_target_name(plan_target t)
{
    return t >= 0 && t < PLAN_TARGET_COUNT ? target_names[t] : "?";
}

int plan_target_parse(const char *name)
{
    for (int t = 0; t < PLAN_TARGET_COUNT; t++)
        if (!strcmp(name, target_names[t]))
            return t;
    return -1;
}

void plan_free(zb_plan *p)
{
    free(p->layers);
    free(p->recompute);
    p->layers = p->recompute = NULL;
}

/* A whole number in [lo, hi] at key of o into *out: 1 when present and
 * valid, 0 when absent, -1 with err when present and not such a number. */
static int get_int(const cJSON *o, const char *key, long lo, long hi, int *out, zb_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v)
        return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo ||
        v->valuedouble > hi)
        return zb_fail(err, "the plan's %s is not a whole number in %ld..%ld", key, lo, hi);
    *out = (int)v->valuedouble;
    return 1;
}

/* Reads plan[key], an array of S whole numbers in [0, hi] (bools count
 * as 0 and 1), into out[S]. */
static int get_ints(const cJSON *plan, const char *key, int S, int hi, int *out, zb_err *err)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(plan, key);
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != S)
        return zb_fail(err, "the plan's %s is missing or does not have %d entries (one per "
                       "virtual stage)", key, S);
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a) {
        if (cJSON_IsBool(e)) {
            out[i++] = cJSON_IsTrue(e);
            continue;
        }
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > hi ||
            e->valuedouble != floor(e->valuedouble))
            return zb_fail(err, "the plan's %s[%d] is out of range (0..%d)", key, i, hi);
        out[i++] = (int)e->valuedouble;
    }
    return 0;
}

/* plan.recompute_levels over p->recompute (which holds recompute_stages
 * when had, else zeros): names, and agreement where both are given. */
static int get_levels(const cJSON *levels, int had, zb_plan *p, zb_err *err)
{
    static const char *const names[] = { [COST_RC_NONE] = "none", [COST_RC_FULL] = "full",
                                         [COST_RC_MLP] = "mlp", [COST_RC_ATTN] = "attn" };
    if (!cJSON_IsArray(levels) || cJSON_GetArraySize(levels) != p->n_stages)
        return zb_fail(err, "the plan's recompute_levels does not have %d entries (one per "
                       "virtual stage)", p->n_stages);
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, levels) {
        int level = -1;
        for (int k = 0; k <= COST_RC_LAST && cJSON_IsString(e); k++)
            if (!strcmp(e->valuestring, names[k]))
                level = k;
        if (level < 0)
            return zb_fail(err, "the plan's recompute_levels[%d] is not \"none\", \"full\", "
                           "\"mlp\" or \"attn\"", i);
        if (had && (p->recompute[i] != 0) != (level != COST_RC_NONE))
            return zb_fail(err, "the plan's recompute_levels[%d] (\"%s\") contradicts "
                           "recompute_stages[%d]", i, names[level], i);
        p->recompute[i++] = level;
    }
    return 0;
}

static void copy_string(const cJSON *o, const char *key, char *dst, size_t cap)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsString(v))
        snprintf(dst, cap, "%s", v->valuestring);
}

/* The body of plan_read once the plan object was found. */
static int read_fields(const sched_t *s, const cJSON *plan, zb_plan *p, zb_err *err)
{
    const cJSON *jm = cJSON_GetObjectItemCaseSensitive(s->meta, "model");
    if (!cJSON_IsObject(jm))
        return zb_fail(err, "the plan has no \"model\" object beside it");
    if (model_from_json(jm, &p->model, err) != 0)
        return zb_wrap(err, "the plan's model: ");
    const cJSON *hw = cJSON_GetObjectItemCaseSensitive(s->meta, "hardware");
    if (cJSON_IsObject(hw))
        copy_string(hw, "name", p->gpu, sizeof p->gpu);

    const cJSON *target = cJSON_GetObjectItemCaseSensitive(plan, "target");
    if (target) {
        int t = cJSON_IsString(target) ? plan_target_parse(target->valuestring) : -1;
        if (t < 0)
            return zb_fail(err, "the plan's target is not \"zbsched\", \"torch\", \"torchtitan\" "
                           "or \"megatron\"");
        p->target = (plan_target)t;
        p->target_given = 1;
    }
    copy_string(plan, "schedule", p->schedule, sizeof p->schedule);
    copy_string(plan, "family", p->family, sizeof p->family);

    int r = get_int(plan, "micro_batch", 1, 1 << 20, &p->micro_batch, err);
    if (r < 0)
        return -1;
    if (r == 0)
        return zb_fail(err, "the plan has no micro_batch");
    p->model.micro_batch = p->micro_batch;
    p->n_micro = s->n_micro;
    p->pipeline_parallel = s->n_devices;
    p->data_parallel = 1;
    p->zero1_dp = 1;
    p->flash_attention = 1;
    if (get_int(plan, "n_micro", 1, 1 << 24, &p->n_micro, err) < 0 ||
        get_int(plan, "pipeline_parallel", 1, 1 << 16, &p->pipeline_parallel, err) < 0 ||
        get_int(plan, "data_parallel", 1, 1 << 20, &p->data_parallel, err) < 0 ||
        get_int(plan, "zero1_dp", 1, 1 << 30, &p->zero1_dp, err) < 0)
        return -1;
    if (p->n_micro != s->n_micro)
        return zb_fail(err, "the plan's n_micro (%d) is not the schedule's %d micro-batches",
                       p->n_micro, s->n_micro);
    if (p->pipeline_parallel != s->n_devices)
        return zb_fail(err, "the plan's pipeline_parallel (%d) is not the schedule's %d devices",
                       p->pipeline_parallel, s->n_devices);
    double gb = (double)p->micro_batch * p->n_micro * p->data_parallel;
    if (gb > 1 << 30)
        return zb_fail(err, "the plan's global batch (%.0f sequences) is too large", gb);
    p->global_batch = (int)gb;
    int given = 0;
    if ((r = get_int(plan, "global_batch", 1, 1 << 30, &given, err)) < 0)
        return -1;
    if (r == 1 && given != p->global_batch)
        return zb_fail(err, "the plan's global_batch (%d) is not micro_batch %d x n_micro %d x "
                       "data_parallel %d", given, p->micro_batch, p->n_micro, p->data_parallel);
    const cJSON *mem = cJSON_GetObjectItemCaseSensitive(plan, "mem_limit_bytes");
    if (cJSON_IsNumber(mem) && isfinite(mem->valuedouble) && mem->valuedouble > 0)
        p->mem_limit_bytes = mem->valuedouble;
    const cJSON *flash = cJSON_GetObjectItemCaseSensitive(plan, "flash_attention");
    if (cJSON_IsBool(flash))
        p->flash_attention = cJSON_IsTrue(flash);
    const cJSON *loss = cJSON_GetObjectItemCaseSensitive(plan, "loss");
    p->fused_loss = cJSON_IsString(loss) && !strcmp(loss->valuestring, "fused");

    int S = s->n_stages;
    p->n_stages = S;
    p->layers = malloc(sizeof *p->layers * (size_t)S);
    p->recompute = calloc((size_t)S, sizeof *p->recompute);
    if (!p->layers || !p->recompute)
        return zb_fail(err, "out of memory");
    if (get_ints(plan, "layers_per_stage", S, p->model.n_layers, p->layers, err) != 0)
        return -1;
    long sum = 0;
    for (int i = 0; i < S; i++)
        sum += p->layers[i];
    if (sum != p->model.n_layers)
        return zb_fail(err, "the plan's layers_per_stage sums to %ld but model %s has %d layers",
                       sum, p->model.name, p->model.n_layers);
    int had = 0;
    if (cJSON_GetObjectItemCaseSensitive(plan, "recompute_stages")) {
        if (get_ints(plan, "recompute_stages", S, 1, p->recompute, err) != 0)
            return -1;
        had = 1;
    } else if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(plan, "recompute"))) {
        /* plans written before per-stage recompute: every stage */
        for (int i = 0; i < S; i++)
            p->recompute[i] = COST_RC_FULL;
        had = 1;
    }
    const cJSON *levels = cJSON_GetObjectItemCaseSensitive(plan, "recompute_levels");
    if (levels && get_levels(levels, had, p, err) != 0)
        return -1;
    /* The layout: plans before it are pipeline x data parallel, ZeRO-1. */
    layout_default(&p->layout);
    p->layout.pp = p->pipeline_parallel;
    p->layout.dp = p->data_parallel;
    p->layout.chunks = s->n_devices > 0 && S % s->n_devices == 0 ? S / s->n_devices : 1;
    const cJSON *lay = cJSON_GetObjectItemCaseSensitive(plan, "layout");
    zb_err lerr = { { 0 } };
    if (lay && layout_from_json(lay, &p->layout, &lerr) < 0)
        return zb_fail(err, "the plan's %s", lerr.msg);
    if (p->layout.pp != p->pipeline_parallel || p->layout.dp != p->data_parallel)
        return zb_fail(err, "the plan's layout (pp %d, dp %d) is not its pipeline_parallel %d x "
                       "data_parallel %d", p->layout.pp, p->layout.dp, p->pipeline_parallel,
                       p->data_parallel);
    if (layout_check(&p->layout, &p->model, 0, &lerr) < 0)
        return zb_fail(err, "the plan's %s", lerr.msg);
    return 0;
}

int plan_read(const sched_t *s, zb_plan *p, zb_err *err)
{
    memset(p, 0, sizeof *p);
    const cJSON *plan = s->meta ? cJSON_GetObjectItemCaseSensitive(s->meta, "plan") : NULL;
    if (!plan)
        return 0;
    if (!cJSON_IsObject(plan))
        return zb_fail(err, "the file's \"plan\" is not an object");
    if (read_fields(s, plan, p, err) != 0) {
        plan_free(p);
        memset(p, 0, sizeof *p);
        return -1;
    }
    return 1;
}

int plan_uniform_recompute(const zb_plan *p, int *level)
{
    int found = -1;
    for (int i = 0; i < p->n_stages; i++) {
        if (p->layers[i] == 0)
            continue;
        if (found < 0)
            found = p->recompute[i];
        else if (p->recompute[i] != found)
            return 0;
    }
    *level = found < 0 ? COST_RC_NONE : found;
    return 1;
}

/* A memory limit as search's --mem reads it: whole gigabytes as "40G",
 * else whole megabytes, else bytes. */
static void mem_flag(double bytes, char *buf, size_t cap)
{
    if (fmod(bytes, 1e9) == 0)
        snprintf(buf, cap, "%.0fG", bytes / 1e9);
    else if (fmod(bytes, 1e6) == 0)
        snprintf(buf, cap, "%.0fM", bytes / 1e6);
    else
        snprintf(buf, cap, "%.0f", bytes);
}

void plan_search_command(const zb_plan *p, plan_target t, char *buf, size_t cap)
{
    char mem[32] = "SIZE";
    if (p->mem_limit_bytes > 0)
        mem_flag(p->mem_limit_bytes, mem, sizeof mem);
    int n = snprintf(buf, cap, "zbsched search --mem %s", mem);
    if (n >= 0 && (size_t)n < cap && p->model.name[0])
        n += snprintf(buf + n, cap - (size_t)n, " --model %s", p->model.name);
    if (n >= 0 && (size_t)n < cap && p->gpu[0])
        n += snprintf(buf + n, cap - (size_t)n, " --gpu %s", p->gpu);
    if (n >= 0 && (size_t)n < cap)
        n += snprintf(buf + n, cap - (size_t)n, " --gpus %ld --global-batch %d", /* every rank of the layout */
                      p->layout.tp >= 1 ? layout_gpus(&p->layout)
                                        : (long)p->pipeline_parallel * p->data_parallel, p->global_batch);
    if (n >= 0 && (size_t)n < cap && !p->flash_attention)
        n += snprintf(buf + n, cap - (size_t)n, " --no-flash");
    if (n >= 0 && (size_t)n < cap && p->fused_loss)
        n += snprintf(buf + n, cap - (size_t)n, " --loss fused");
    if (n >= 0 && (size_t)n < cap)
        snprintf(buf + n, cap - (size_t)n, " --target %s", plan_target_name(t));
}
