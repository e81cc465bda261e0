/*
 * run_plan.c: the model, micro-batch and layer split `zbsched run` trains,
 * from the file's plan and the flags (run_plan.h); and the check that the
 * machine can hold it.
 *
 * Why refuse some flags and only warn about others: a different --model is
 * a deliberate choice (trying a plan's schedule on a small model is the
 * advertised way to test a plan made for GPUs), so it is honoured and the
 * warning says the predictions are void.  A different --batch-size for the
 * plan's own model is more likely a leftover flag: the run would look like
 * the plan's and silently miss its predictions, so it is refused.
 */
#include "src/cli/run_plan.h"
#include "src/cli/run_checks.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "runtime/footprint.h"
#include "src/cli/cli.h"
#include "src/cost_model.h"

/* Same architecture: the fields that decide the layers, the split and the
 * costs (vocab and micro-batch are taken from elsewhere). */
static int same_model(const zb_model *a, const zb_model *b)
{
    return a->n_layers == b->n_layers && a->d_model == b->d_model && a->n_heads == b->n_heads &&
           a->n_kv_heads == b->n_kv_heads && a->d_ff == b->d_ff && a->seq_len == b->seq_len &&
           a->swiglu == b->swiglu && a->tied_embedding == b->tied_embedding;
}

/* What a file's plan says (meta "plan" and "model"). */
typedef struct plan_info {
    zb_model model;        /* meta.model */
    int micro_batch;       /* plan.micro_batch */
    int *split;            /* [S] plan.layers_per_stage, owned */
    int *recompute;        /* [S] plan.recompute_stages (or plan.recompute for all), owned */
    int any_recompute;     /* 1 when some stage recomputes */
    int data_parallel;     /* plan.data_parallel (1 when absent) */
    int zero1_dp;          /* plan.zero1_dp (1 when absent) */
} plan_info;

static void plan_info_free(plan_info *p)
{
    free(p->split);
    free(p->recompute);
    p->split = p->recompute = NULL;
}

/* Reads an array of S integers (bools count as 0/1) in [0, hi] into a new
 * array; -1 with err naming key when it is not that. */
static int read_ints(const cJSON *plan, const char *key, int S, int hi, int **out, zb_err *err)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(plan, key);
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != S)
        return zb_fail(err, "the plan's %s is missing or does not have %d entries (one per "
                       "virtual stage)", key, S);
    int *v = malloc(sizeof *v * (size_t)S);
    if (!v)
        return zb_fail(err, "out of memory");
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a) {
        if (cJSON_IsBool(e)) {
            v[i++] = cJSON_IsTrue(e);
            continue;
        }
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > hi ||
            e->valuedouble != floor(e->valuedouble)) {
            free(v);
            return zb_fail(err, "the plan's %s[%d] is out of range", key, i);
        }
        v[i++] = (int)e->valuedouble;
    }
    *out = v;
    return 0;
}

/* Reads plan.recompute_levels (S of "none", "full", "mlp") over
 * p->recompute: each must agree with recompute_stages where that is given
 * (it says whether a stage recomputes at all, all a file before the MLP
 * level could say).  -1 with err set when it is malformed. */
static int read_levels(const cJSON *levels, int S, plan_info *p, zb_err *err)
{
    static const char *const names[] = { [COST_RC_NONE] = "none", [COST_RC_FULL] = "full",
                                         [COST_RC_MLP] = "mlp" };
    if (!cJSON_IsArray(levels) || cJSON_GetArraySize(levels) != S)
        return zb_fail(err, "the plan's recompute_levels does not have %d entries (one per "
                       "virtual stage)", S);
    int had = p->recompute != NULL;
    if (!had && !(p->recompute = calloc((size_t)S, sizeof *p->recompute)))
        return zb_fail(err, "out of memory");
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, levels) {
        int level = -1;
        for (int k = 0; k < 3 && cJSON_IsString(e); k++)
            if (!strcmp(e->valuestring, names[k]))
                level = k;
        if (level < 0)
            return zb_fail(err, "the plan's recompute_levels[%d] is not \"none\", \"full\" or "
                           "\"mlp\"", i);
        if (had && (p->recompute[i] != 0) != (level != COST_RC_NONE))
            return zb_fail(err, "the plan's recompute_levels[%d] (\"%s\") contradicts "
                           "recompute_stages[%d]", i, names[level], i);
        p->recompute[i++] = level;
    }
    return 0;
}

/* Fills *p from s's meta.  Returns 1 when the file has a plan, 0 when not,
 * -1 with err set when the plan is malformed (p then holds nothing). */
static int read_plan(const sched_t *s, plan_info *p, zb_err *err)
{
    memset(p, 0, sizeof *p);
    const cJSON *plan = s->meta ? cJSON_GetObjectItemCaseSensitive(s->meta, "plan") : NULL;
    if (!cJSON_IsObject(plan))
        return 0;
    const cJSON *jm = cJSON_GetObjectItemCaseSensitive(s->meta, "model");
    if (!cJSON_IsObject(jm))
        return zb_fail(err, "the plan has no \"model\" object beside it");
    if (model_from_json(jm, &p->model, err) != 0)
        return zb_wrap(err, "the plan's model: ");
    const cJSON *mb = cJSON_GetObjectItemCaseSensitive(plan, "micro_batch");
    if (!cJSON_IsNumber(mb) || mb->valuedouble < 1 || mb->valuedouble > 65536 ||
        mb->valuedouble != floor(mb->valuedouble))
        return zb_fail(err, "the plan's micro_batch is missing or not a positive integer");
    p->micro_batch = (int)mb->valuedouble;
    const cJSON *dp = cJSON_GetObjectItemCaseSensitive(plan, "data_parallel");
    p->data_parallel = cJSON_IsNumber(dp) && dp->valuedouble >= 1 ? (int)dp->valuedouble : 1;
    const cJSON *z1 = cJSON_GetObjectItemCaseSensitive(plan, "zero1_dp");
    p->zero1_dp = cJSON_IsNumber(z1) && z1->valuedouble >= 1 && z1->valuedouble <= 1 << 30
                      ? (int)z1->valuedouble : 1;
    /* The runtime runs pipeline x data parallel with ZeRO-1 (issue 27). */
    zb_layout lay;
    layout_default(&lay);
    const cJSON *jl = cJSON_GetObjectItemCaseSensitive(plan, "layout");
    char text[96];
    if (jl && layout_from_json(jl, &lay, err) < 0)
        return zb_wrap(err, "the plan's ");
    if (layout_is_extended(&lay))
        return zb_fail(err, "the plan's layout is %s: zbsched run trains pipeline x data parallel "
                       "with ZeRO-1 only (export it for the engine it was searched for)",
                       layout_text(&lay, text, sizeof text));
    int S = s->n_stages;
    if (read_ints(plan, "layers_per_stage", S, p->model.n_layers, &p->split, err) != 0)
        return -1;
    int sum = 0;
    for (int i = 0; i < S; i++)
        sum += p->split[i];
    if (sum != p->model.n_layers) {
        plan_info_free(p);
        return zb_fail(err, "the plan's layers_per_stage sums to %d but model %s has %d layers",
                       sum, p->model.name, p->model.n_layers);
    }
    if (cJSON_GetObjectItemCaseSensitive(plan, "recompute_stages")) {
        if (read_ints(plan, "recompute_stages", S, 1, &p->recompute, err) != 0) {
            plan_info_free(p);
            return -1;
        }
    } else if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(plan, "recompute"))) {
        /* plans written before per-stage recompute: every stage */
        if (!(p->recompute = malloc(sizeof *p->recompute * (size_t)S))) {
            plan_info_free(p);
            return zb_fail(err, "out of memory");
        }
        for (int i = 0; i < S; i++)
            p->recompute[i] = 1;
    }
    const cJSON *levels = cJSON_GetObjectItemCaseSensitive(plan, "recompute_levels");
    if (levels && read_levels(levels, S, p, err) != 0) {
        plan_info_free(p);
        return -1;
    }
    for (int i = 0; p->recompute && i < S; i++)
        p->any_recompute |= p->recompute[i] != COST_RC_NONE;
    return 1;
}

int run_plan_resolve(const char *file, const sched_t *s, const char *model_flag, long batch_flag,
                     run_setup *out)
{
    memset(out, 0, sizeof *out);
    zb_err err = { { 0 } };
    plan_info pl;
    int has = read_plan(s, &pl, &err);
    if (has < 0) {
        zb_wrap(&err, "%s: ", file);
        return cli_fail(&err);
    }
    zb_model flag_model;
    if (model_flag && model_load(model_flag, &flag_model, &err) != 0) {
        plan_info_free(&pl);
        return cli_fail(&err);
    }
    if (has && (!model_flag || same_model(&flag_model, &pl.model))) {
        if (batch_flag > 0 && batch_flag != pl.micro_batch) {
            plan_info_free(&pl);
            return cli_usage("run", "--batch-size %ld contradicts %s's plan (micro-batch %d, "
                             "which its split and predictions assume); drop the flag, or re-plan "
                             "with `zbsched search`", batch_flag, file, pl.micro_batch);
        }
        out->model = model_flag ? flag_model : pl.model;
        out->model.micro_batch = pl.micro_batch;
        out->batch = pl.micro_batch;
        out->layers_per_stage = pl.split;
        out->recompute_stages = pl.any_recompute ? pl.recompute : NULL;
        if (!pl.any_recompute)
            free(pl.recompute);
        out->n_stages = s->n_stages;
        out->from_plan = 1;
        out->data_parallel = pl.data_parallel;
        out->zero1_dp = pl.zero1_dp;
        return 0;
    }
    if (has) {
        fprintf(stderr, "zbsched run: warning: %s was planned for model %s at micro-batch %d; "
                "training %s with an even layer split instead, so the file's predictions do not "
                "apply\n", file, pl.model.name, pl.micro_batch, flag_model.name);
        plan_info_free(&pl);
    }
    if (model_flag)
        out->model = flag_model;
    else if (model_load(RUN_DEFAULT_MODEL, &out->model, &err) != 0)
        return cli_fail(&err);
    if (batch_flag > 0)
        out->model.micro_batch = (int)batch_flag;
    out->batch = out->model.micro_batch;
    return 0;
}

/* The advice that ends the "cannot run it here" lines: a small Llama-style
 * model with a layer per virtual stage runs any schedule's shape. */
static void small_model_hint(char *buf, size_t cap, const char *file, const sched_t *s)
{
    int layers = s->n_stages > 4 ? s->n_stages : 4;
    snprintf(buf, cap, "to try this schedule's shape (%d stages on %d devices, m=%d) with a small "
             "model: echo '{\"base\": \"tiny\", \"n_layers\": %d}' > small.json && zbsched run %s "
             "--model small.json --steps 20", s->n_stages, s->n_devices, s->n_micro, layers, file);
}

int run_plan_fits(const char *file, const sched_t *s, const run_setup *setup)
{
    zb_err err = { { 0 } };
    char hint[512];
    small_model_hint(hint, sizeof hint, file, s);
    /* The CPU kernels (kernels/cpu/llama.h) are Llama-style only: a model
     * with a GPT-style MLP or a tied head would silently train something
     * else than what was planned.  run_check_model holds the rule; a plan's
     * model is read like a preset (its dtype names the planned hardware). */
    if (run_check_model(&setup->model, 0, 0, &err) != 0)
        return cli_error("%s: %s; the CPU runtime trains Llama-style models only; %s", file,
                         err.msg, hint);
    double params, need;
    if (trainer_footprint(&setup->model, s->n_stages, setup->layers_per_stage, &params, &need,
                          &err) != 0) {
        /* a split the model cannot take: the trainer says it in its words */
        return 0;
    }
    double avail = host_available_bytes();
    if (avail <= 0 || need < avail)
        return 0;
    return cli_error("%s: model %s (%.2f B parameters) needs at least %.1f GB of host memory "
                     "for its fp32 weights, gradients and optimizer state, but %.1f GB are "
                     "available; %s", file, setup->model.name, params / 1e9, need / 1e9,
                     avail / 1e9, hint);
}

void run_setup_free(run_setup *setup)
{
    free(setup->layers_per_stage);
    free(setup->recompute_stages);
    setup->layers_per_stage = setup->recompute_stages = NULL;
}
