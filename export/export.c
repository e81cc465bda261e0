/*
 * export.c: which engine can run which plan, the files an export writes,
 * and writing them (export.h).
 *
 * The checks are the engines' own rules, each one a refusal the engine
 * would otherwise make at start-up or, worse, a plan it would run
 * differently from how it was priced (a looped torchtitan job given a V
 * plan's CSV builds the wrong stages on every rank; Megatron handed a
 * zero-bubble order runs its own 1F1B instead).  Every refusal ends with
 * the search that plans the same job for that engine, so the user's next
 * command is in the message.
 */
#include "export/export_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "src/cost_model.h"
#include "src/outfile.h"
#include "src/sched_io.h"
#include "src/torch_csv.h"

static const char *const format_names[EXPORT_FORMAT_COUNT] = {
    [EXPORT_ZBSCHED] = "zbsched",     [EXPORT_TORCH_CSV] = "torch-csv",
    [EXPORT_PYTORCH] = "pytorch",     [EXPORT_TORCHTITAN] = "torchtitan",
    [EXPORT_MEGATRON] = "megatron",
};

const char *export_format_name(export_format f)
{
    return f >= 0 && f < EXPORT_FORMAT_COUNT ? format_names[f] : "?";
}

int export_format_parse(const char *name)
{
    for (int f = 0; f < EXPORT_FORMAT_COUNT; f++)
        if (!strcmp(name, format_names[f]))
            return f;
    return -1;
}

plan_target export_format_target(export_format f)
{
    switch (f) {
    case EXPORT_ZBSCHED: return PLAN_TARGET_ZBSCHED;
    case EXPORT_TORCHTITAN: return PLAN_TARGET_TORCHTITAN;
    case EXPORT_MEGATRON: return PLAN_TARGET_MEGATRON;
    default: return PLAN_TARGET_TORCH;
    }
}

export_format export_default_format(const sched_t *s, const zb_plan *p)
{
    if (!p)
        return EXPORT_TORCH_CSV;
    if (p->target_given) {
        switch (p->target) {
        case PLAN_TARGET_TORCH: return EXPORT_TORCH_CSV;
        case PLAN_TARGET_TORCHTITAN: return EXPORT_TORCHTITAN;
        case PLAN_TARGET_MEGATRON: return EXPORT_MEGATRON;
        default: return EXPORT_ZBSCHED;
        }
    }
    return sched_has_vocab(s) ? EXPORT_ZBSCHED : EXPORT_TORCH_CSV;
}

int export_format_for_path(const char *out_path)
{
    static const struct {
        const char *suffix;   /* how the name ends, case-sensitive as on disk */
        export_format format; /* what that name asks for */
    } by_suffix[] = { { ".csv", EXPORT_TORCH_CSV }, { ".toml", EXPORT_TORCHTITAN },
                      { ".json", EXPORT_ZBSCHED } };
    size_t n = out_path ? strlen(out_path) : 0;
    for (size_t i = 0; i < sizeof by_suffix / sizeof by_suffix[0]; i++) {
        size_t k = strlen(by_suffix[i].suffix);
        if (n > k && !strcmp(out_path + n - k, by_suffix[i].suffix))
            return by_suffix[i].format;
    }
    return -1;
}

export_placement export_placement_of(const sched_t *s)
{
    int p = s->n_devices, S = s->n_stages, looped = S % p == 0, v = S == 2 * p;
    for (int i = 0; i < S; i++) {
        looped &= s->stage_device[i] == i % p;
        v &= s->stage_device[i] == (i < p ? i : 2 * p - 1 - i);
    }
    return looped ? EXPORT_PLACE_LOOPED : v ? EXPORT_PLACE_V : EXPORT_PLACE_OTHER;
}

/* Fails with "<what>; <advice>": for a plan, the search that plans the
 * job for target t; for a bare schedule, alt (how to make one). */
static int refuse(zb_err *err, const zb_plan *p, plan_target t, const char *alt,
                  const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static int refuse(zb_err *err, const zb_plan *p, plan_target t, const char *alt,
                  const char *fmt, ...)
{
    char what[320], cmd[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (p) {
        plan_search_command(p, t, cmd, sizeof cmd);
        return zb_fail(err, "%s; plan for %s instead: %s", what, plan_target_name(t), cmd);
    }
    return zb_fail(err, "%s%s%s", what, alt ? "; " : "", alt ? alt : "");
}

static const char *level_name(int level)
{
    return level == COST_RC_FULL ? "full" : level == COST_RC_MLP ? "mlp" : "none";
}

/* "stages 0-3 full, 4-7 none" for a refusal. */
static void describe_recompute(const zb_plan *p, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < p->n_stages && n + 32 < cap;) {
        int j = i;
        while (j + 1 < p->n_stages && p->recompute[j + 1] == p->recompute[i])
            j++;
        n += (size_t)snprintf(buf + n, cap - n, "%s%d", n ? ", " : "stages ", i);
        if (j > i)
            n += (size_t)snprintf(buf + n, cap - n, "-%d", j);
        n += (size_t)snprintf(buf + n, cap - n, " %s", level_name(p->recompute[i]));
        i = j + 1;
    }
}

/* What every engine but zbsched needs: no vocabulary passes, and for the
 * plan-reading formats a plan at all. */
static int check_common(const sched_t *s, const zb_plan *p, export_format f, zb_err *err)
{
    plan_target t = export_format_target(f);
    if (sched_has_vocab(s)) {
        const char *engine = t == PLAN_TARGET_TORCHTITAN ? "torchtitan"
                             : t == PLAN_TARGET_MEGATRON ? "Megatron-LM"
                                                         : "PyTorch's pipelining CSV";
        if (!p && t == PLAN_TARGET_TORCH)
            return torch_csv_check(s, err); /* a bare schedule: generate it plain */
        return refuse(err, p, t, NULL, "%s cannot express vocabulary parallelism (S and T passes "
                      "and their all-reduce barriers)", engine);
    }
    if (!p && f != EXPORT_TORCH_CSV)
        return zb_fail(err, "the file has no plan (model, layers per stage, recompute, "
                       "micro-batch: what `zbsched search` writes), which --format %s needs; "
                       "--format torch-csv writes the op order alone",
                       export_format_name(f));
    return 0;
}

/* The architecture torchtitan's llama3 and Megatron's GPT model build. */
static int check_architecture(const zb_plan *p, plan_target t, const char *engine, zb_err *err)
{
    if (p->model.memory.n_layers > 0)
        return refuse(err, p, t, NULL, "%s has no product-key memory layers (model %s has %d)",
                      engine, p->model.name, p->model.memory.n_layers);
    if (t == PLAN_TARGET_TORCHTITAN && (!p->model.swiglu || p->model.tied_embedding))
        return refuse(err, p, t, NULL, "torchtitan's llama3 is SwiGLU with an untied head; model "
                      "%s is not", p->model.name);
    if (p->zero1_dp > p->data_parallel)
        return refuse(err, p, t, NULL, "%s shards optimizer state over the %d data-parallel "
                      "replicas only, and the plan shards it over %d (search --zero1)", engine,
                      p->data_parallel, p->zero1_dp);
    return 0;
}

static int check_torchtitan(const sched_t *s, const zb_plan *p, zb_err *err)
{
    plan_target t = PLAN_TARGET_TORCHTITAN;
    if (export_placement_of(s) == EXPORT_PLACE_OTHER)
        return refuse(err, p, t, NULL, "torchtitan builds stage s on rank s mod p "
                      "(PipelineScheduleMulti) or the V shape (ZBVZeroBubble) only, and this "
                      "plan places its %d stages otherwise", s->n_stages);
    int level;
    if (!plan_uniform_recompute(p, &level)) {
        char rc[200];
        describe_recompute(p, rc, sizeof rc);
        return refuse(err, p, t, NULL, "torchtitan applies one activation-checkpoint policy to "
                      "every stage, and this plan recomputes per stage (%s)", rc);
    }
    if (level == COST_RC_MLP || level == COST_RC_ATTN)
        return refuse(err, p, t, NULL, "torchtitan's activation checkpointing is full, per op "
                      "or every n-th layer; it has no %s level, which this plan uses",
                      level == COST_RC_MLP ? "MLP-only" : "attention-core");
    const zb_layout *l = &p->layout;
    if (l->offload > 0)
        return refuse(err, p, t, NULL, "torchtitan has no activation offload, and this plan keeps "
                      "%.0f%% of the saved activations in host memory", 100 * l->offload);
    if (l->tp > 1 && !l->sp)
        return refuse(err, p, t, NULL, "torchtitan's tensor parallelism always shards the norms "
                      "(sequence parallel), and this plan's tp %d does not", l->tp);
    if (l->zero == LAYOUT_ZERO2)
        return refuse(err, p, t, NULL, "torchtitan shards with FSDP (ZeRO-3), not ZeRO-2");
    return check_architecture(p, t, "torchtitan", err);
}

static int check_megatron(const sched_t *s, const zb_plan *p, zb_err *err)
{
    plan_target t = PLAN_TARGET_MEGATRON;
    const char *family = p->family[0] ? p->family : s->name;
    int split_backward = 0;
    for (int d = 0; d < s->n_devices && !split_backward; d++)
        for (int i = 0; i < s->dev[d].n_ops; i++)
            split_backward |= s->dev[d].ops[i].kind == OP_B || s->dev[d].ops[i].kind == OP_W;
    if (split_backward || (strcmp(family, "1f1b") && strcmp(family, "interleaved")))
        return refuse(err, p, t, NULL, "Megatron-LM runs only 1F1B and interleaved 1F1B (its own "
                      "order, backward not split), and this plan is %s",
                      p->schedule[0] ? p->schedule : family);
    if (export_placement_of(s) != EXPORT_PLACE_LOOPED)
        return refuse(err, p, t, NULL, "Megatron-LM places stage s on rank s mod p only, and "
                      "this plan places its %d stages otherwise", s->n_stages);
    if (s->n_stages > s->n_devices && s->n_micro % s->n_devices)
        return refuse(err, p, t, NULL, "Megatron-LM's interleaved schedule needs the %d "
                      "micro-batches to be a multiple of the %d pipeline ranks",
                      s->n_micro, s->n_devices);
    if (p->model.rope_theta != floor(p->model.rope_theta) || p->model.rope_theta < 1 ||
        p->model.rope_theta > 1e15)
        return refuse(err, p, t, NULL, "Megatron-LM's --rotary-base takes a whole number; model "
                      "%s has rope_theta %g", p->model.name, p->model.rope_theta);
    int level;
    if (!plan_uniform_recompute(p, &level)) {
        char rc[200];
        describe_recompute(p, rc, sizeof rc);
        return refuse(err, p, t, NULL, "Megatron-LM's recompute flags apply to every stage, and "
                      "this plan recomputes per stage (%s)", rc);
    }
    const zb_layout *l = &p->layout;
    if (l->zero > LAYOUT_ZERO1)
        return refuse(err, p, t, NULL, "Megatron-LM shards optimizer state only "
                      "(--use-distributed-optimizer), and this plan shards at ZeRO-%d", l->zero);
    if (l->offload > 0 && (l->pp > 1 || level != COST_RC_NONE))
        return refuse(err, p, t, NULL, "Megatron-LM offloads activations (--cpu-offloading) only "
                      "without a pipeline and without recompute");
    return check_architecture(p, t, "Megatron-LM", err);
}

int export_check(const sched_t *s, const zb_plan *p, export_format f, zb_err *err)
{
    if (f == EXPORT_ZBSCHED)
        return 0;
    if (check_common(s, p, f, err) != 0)
        return -1;
    if (f == EXPORT_TORCHTITAN)
        return check_torchtitan(s, p, err);
    if (f == EXPORT_MEGATRON)
        return check_megatron(s, p, err);
    if ((f == EXPORT_PYTORCH || f == EXPORT_TORCH_CSV) && p && layout_is_extended(&p->layout)) {
        char lay[96];
        return refuse(err, p, PLAN_TARGET_TORCH, NULL, "PyTorch's pipelining runs plain layers over "
                      "pipeline x data parallel, and this plan's layout is %s",
                      layout_text(&p->layout, lay, sizeof lay));
    }
    if (f == EXPORT_PYTORCH && p->model.memory.n_layers > 0)
        return refuse(err, p, PLAN_TARGET_TORCH, NULL, "examples/pytorch builds plain Llama "
                      "layers; model %s has %d product-key memory layers", p->model.name,
                      p->model.memory.n_layers);
    return 0;
}

/* Where the extension of path's last component starts, or its end. */
static size_t stem_len(const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *dot = strrchr(base, '.');
    return dot && dot != base ? (size_t)(dot - path) : strlen(path);
}

static int ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), k = strlen(tail);
    return n >= k && !strcmp(s + n - k, tail);
}

void export_paths_free(char *paths[EXPORT_MAX_FILES], int n)
{
    for (int i = 0; i < n; i++) {
        free(paths[i]);
        paths[i] = NULL;
    }
}

int export_paths(export_format f, const char *out, char *paths[EXPORT_MAX_FILES], int *n,
                 zb_err *err)
{
    int to_stdout = !out || !strcmp(out, "-");
    *n = 0;
    if (f == EXPORT_ZBSCHED && !to_stdout && !ends_with(out, ".json"))
        return zb_fail(err, "--format zbsched writes the schedule file itself (JSON), and '%s' "
                       "does not end in .json; for another engine pass --format", out);
    if (f != EXPORT_TORCHTITAN && f != EXPORT_PYTORCH) {
        if (!to_stdout && !(paths[0] = strdup(out)))
            return zb_fail(err, "out of memory");
        *n = 1;
        return 0;
    }
    if (to_stdout)
        return zb_fail(err, "--format %s writes two files (%s and the CSV beside it): give -o %s",
                       export_format_name(f), f == EXPORT_TORCHTITAN ? "the TOML" : "a JSON sidecar",
                       f == EXPORT_TORCHTITAN ? "job.toml" : "job.json");
    if (ends_with(out, ".csv"))
        return zb_fail(err, "'%s': --format %s writes the CSV beside its main output, under the "
                       "same name with .csv; give -o %s", out, export_format_name(f),
                       f == EXPORT_TORCHTITAN ? "job.toml" : "job.json");
    size_t k = stem_len(out);
    char *csv = malloc(k + 5);
    char *main = strdup(out);
    if (!csv || !main) {
        free(csv);
        free(main);
        return zb_fail(err, "out of memory");
    }
    memcpy(csv, out, k);
    memcpy(csv + k, ".csv", 5);
    paths[0] = main;
    paths[1] = csv;
    *n = 2;
    return 0;
}

void text_open(export_text_buf *b)
{
    b->data = NULL;
    b->len = 0;
    b->f = open_memstream(&b->data, &b->len);
}

char *text_take(export_text_buf *b, zb_err *err)
{
    if (!b->f) {
        zb_fail(err, "out of memory");
        return NULL;
    }
    int bad = ferror(b->f);
    if (fclose(b->f) != 0)
        bad = 1;
    b->f = NULL;
    if (bad || !b->data) {
        free(b->data);
        b->data = NULL;
        zb_fail(err, "out of memory writing the export");
        return NULL;
    }
    return b->data;
}

char *export_text(const sched_t *s, const zb_plan *p, export_format f, const char *source,
                  const char *csv_ref, zb_err *err)
{
    switch (f) {
    case EXPORT_ZBSCHED: {
        char *text = sched_to_string(s);
        if (!text)
            zb_fail(err, "out of memory");
        return text;
    }
    case EXPORT_TORCH_CSV: {
        char *csv = torch_csv_write(s);
        if (!csv)
            zb_fail(err, "out of memory");
        return csv;
    }
    case EXPORT_TORCHTITAN: return export_torchtitan_text(s, p, source, csv_ref, err);
    case EXPORT_MEGATRON: return export_megatron_text(s, p, source, err);
    case EXPORT_PYTORCH: return export_pytorch_text(s, p, source, csv_ref, err);
    default: break;
    }
    zb_fail(err, "unknown export format");
    return NULL;
}

/* The CSV's name as the main output refers to it: torchtitan opens the
 * path from its working directory, which is where the user typed -o;
 * the pytorch sidecar names it relative to itself. */
static const char *csv_ref_of(export_format f, const char *csv)
{
    if (f != EXPORT_PYTORCH)
        return csv;
    const char *base = strrchr(csv, '/');
    return base ? base + 1 : csv;
}

int export_write(const sched_t *s, const zb_plan *p, export_format f, const char *source,
                 const char *out, zb_err *err)
{
    if (export_check(s, p, f, err) != 0)
        return -1;
    char *paths[EXPORT_MAX_FILES] = { 0 };
    int n = 0;
    if (export_paths(f, out, paths, &n, err) != 0)
        return -1;
    int rc = -1;
    char *csv = NULL, *text = NULL;
    if (n == 2) {
        if (!(csv = torch_csv_write(s))) {
            zb_fail(err, "out of memory");
            goto out;
        }
        /* the CSV first: the file that names it never points at an old one */
        if (zb_write_atomic(paths[1], csv, strlen(csv), err) != 0)
            goto out;
    }
    text = export_text(s, p, f, source, n == 2 ? csv_ref_of(f, paths[1]) : NULL, err);
    if (!text || zb_write_atomic(n ? paths[0] : NULL, text, strlen(text), err) != 0)
        goto out;
    rc = 0;
out:
    free(csv);
    free(text);
    export_paths_free(paths, n);
    return rc;
}

void export_csv_note(const zb_plan *p, char *buf, size_t cap)
{
    buf[0] = '\0';
    if (!p)
        return;
    size_t n = (size_t)snprintf(buf, cap, "the CSV holds the op order only; the plan also needs "
                                "layers_per_stage [");
    for (int i = 0; i < p->n_stages && n + 16 < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%d", i ? "," : "", p->layers[i]);
    int any = 0;
    for (int i = 0; i < p->n_stages; i++)
        any |= p->recompute[i] != COST_RC_NONE;
    char rc[200] = "no stage";
    if (any)
        describe_recompute(p, rc, sizeof rc);
    if (n < cap)
        snprintf(buf + n, cap - n, "], recompute on %s, micro-batch %d, %d data-parallel "
                 "replica%s; --format pytorch writes them beside the CSV", rc, p->micro_batch,
                 p->data_parallel, p->data_parallel == 1 ? "" : "s");
}
