/*
 * test_export.c: a plan written for the engine that runs it
 * (export/export.h), on plans built here from the generators with the
 * meta a search writes (model, plan).
 *
 *   - the default format follows the plan's target, else what PyTorch can
 *     express, else the schedule file;
 *   - torchtitan: the schedule name from the placement, the CSV named,
 *     module lists covering every layer once in order with the embedding
 *     first and the head last, micro-batch, local and global batch, FSDP
 *     degree, activation checkpointing; the llama3 flavor only for its
 *     shape; refusals naming the limit and the search for torchtitan;
 *   - megatron: the layout string (one t per layer, | between stages, E
 *     first, L last), recompute, batch and optimizer flags; refusals;
 *   - pytorch: the sidecar's fields;
 *   - the paths an export writes, and the program end to end: both files,
 *     an output that is an input, stdout for two-file formats, the
 *     default export of a zbsched plan.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "export/export.h"
#include "export/export_internal.h"
#include "schedules/gen.h"
#include "src/cost_model.h"
#include "src/sched_io.h"
#include "tests/common/cli_run.h"

/* A generator's schedule for p devices and m micro-batches. */
static sched_t *make(gen_fn fn, int p, int m, int chunks)
{
    gen_params gp;
    gen_params_default(&gp);
    gp.stages = p;
    gp.microbatches = m;
    gp.chunks = chunks;
    sched_t *s = NULL;
    zb_err err = { { 0 } };
    ck_assert_msg(fn(&gp, &s, &err) == 0, "%s", err.msg);
    return s;
}

/* Adds what search writes: meta.model (a tiny-shaped model with the
 * layers the split sums to, or llama3-8b's shape) and meta.plan. */
static void add_plan(sched_t *s, const char *family, const int *layers, const char *const *levels,
                     int micro_batch, int dp, int zero1)
{
    int S = s->n_stages, L = 0;
    for (int i = 0; i < S; i++)
        L += layers[i];
    zb_model m;
    zb_err err = { { 0 } };
    ck_assert_int_eq(model_preset("tiny", &m, &err), 0);
    m.n_layers = L;
    m.micro_batch = micro_batch;
    if (!s->meta)
        s->meta = cJSON_CreateObject();
    cJSON_DeleteItemFromObject(s->meta, "model");
    cJSON_DeleteItemFromObject(s->meta, "plan");
    cJSON_AddItemToObject(s->meta, "model", model_to_json(&m));
    cJSON *p = cJSON_AddObjectToObject(s->meta, "plan");
    cJSON_AddStringToObject(p, "schedule", family);
    cJSON_AddStringToObject(p, "family", family);
    cJSON_AddNumberToObject(p, "micro_batch", micro_batch);
    cJSON_AddNumberToObject(p, "n_micro", s->n_micro);
    cJSON_AddNumberToObject(p, "global_batch", micro_batch * s->n_micro * dp);
    cJSON_AddNumberToObject(p, "pipeline_parallel", s->n_devices);
    cJSON_AddNumberToObject(p, "data_parallel", dp);
    cJSON_AddNumberToObject(p, "zero1_dp", zero1);
    cJSON_AddNumberToObject(p, "mem_limit_bytes", 40e9);
    cJSON *ls = cJSON_AddArrayToObject(p, "layers_per_stage");
    cJSON *rs = cJSON_AddArrayToObject(p, "recompute_stages");
    cJSON *rl = cJSON_AddArrayToObject(p, "recompute_levels");
    for (int i = 0; i < S; i++) {
        cJSON_AddItemToArray(ls, cJSON_CreateNumber(layers[i]));
        const char *lv = levels ? levels[i] : "none";
        cJSON_AddItemToArray(rs, cJSON_CreateBool(strcmp(lv, "none") != 0));
        cJSON_AddItemToArray(rl, cJSON_CreateString(lv));
    }
    cJSON *hw = cJSON_AddObjectToObject(s->meta, "hardware");
    cJSON_AddStringToObject(hw, "name", "H100-80G");
}

static void set_target(sched_t *s, const char *t)
{
    cJSON *p = cJSON_GetObjectItem(s->meta, "plan");
    cJSON_DeleteItemFromObject(p, "target");
    cJSON_AddStringToObject(p, "target", t);
}

static void read_plan(const sched_t *s, zb_plan *p)
{
    zb_err err = { { 0 } };
    ck_assert_msg(plan_read(s, p, &err) == 1, "%s", err.msg);
}

static void expect_refused(const sched_t *s, const zb_plan *p, export_format f, const char *frag)
{
    zb_err err = { { 0 } };
    ck_assert_msg(export_check(s, p, f, &err) == -1, "%s accepted", export_format_name(f));
    ck_assert_msg(strstr(err.msg, frag) != NULL, "'%s' not in '%s'", frag, err.msg);
    ck_assert_ptr_null(strchr(err.msg, '\n'));
}

static char *text_of(const sched_t *s, const zb_plan *p, export_format f)
{
    zb_err err = { { 0 } };
    ck_assert_msg(export_check(s, p, f, &err) == 0, "%s", err.msg);
    char *t = export_text(s, p, f, "plan.json", "job.csv", &err);
    ck_assert_msg(t != NULL, "%s", err.msg);
    return t;
}

static const int one_each[8] = { 1, 1, 1, 1, 1, 1, 1, 1 };

START_TEST(default_format)
{
    sched_t *s = make(gen_1f1b, 2, 4, 1);
    ck_assert_int_eq(export_default_format(s, NULL), EXPORT_TORCH_CSV);
    add_plan(s, "1f1b", (const int[]){ 2, 2 }, NULL, 1, 1, 1);
    zb_plan p;
    read_plan(s, &p);
    ck_assert_int_eq(p.target, PLAN_TARGET_ZBSCHED);
    ck_assert_int_eq(p.target_given, 0);
    ck_assert_int_eq(export_default_format(s, &p), EXPORT_TORCH_CSV);
    plan_free(&p);
    static const struct { const char *target; export_format f; } t[] = {
        { "zbsched", EXPORT_ZBSCHED }, { "torch", EXPORT_TORCH_CSV },
        { "torchtitan", EXPORT_TORCHTITAN }, { "megatron", EXPORT_MEGATRON },
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        set_target(s, t[i].target);
        read_plan(s, &p);
        ck_assert_int_eq(export_default_format(s, &p), t[i].f);
        plan_free(&p);
    }
    set_target(s, "jax");
    zb_err err = { { 0 } };
    ck_assert_int_eq(plan_read(s, &p, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "the plan's target is not"));
    cJSON_DeleteItemFromObject(cJSON_GetObjectItem(s->meta, "plan"), "target");
    /* a vocabulary-parallel plan without a target: only zbsched runs it */
    sched_set_vocab(s, SCHED_VOCAB_1, 1, 1, 0, 0, 0.1, 0);
    read_plan(s, &p);
    ck_assert_int_eq(export_default_format(s, &p), EXPORT_ZBSCHED);
    ck_assert_int_eq(export_check(s, &p, EXPORT_ZBSCHED, &err), 0);
    plan_free(&p);
    sched_free(s);
}
END_TEST

/* The output's name chooses the format when --format is absent. */
START_TEST(format_from_output_name)
{
    ck_assert_int_eq(export_format_for_path("best.csv"), EXPORT_TORCH_CSV);
    ck_assert_int_eq(export_format_for_path("dir/job.toml"), EXPORT_TORCHTITAN);
    ck_assert_int_eq(export_format_for_path("copy.json"), EXPORT_ZBSCHED);
    ck_assert_int_eq(export_format_for_path("args.txt"), -1);
    ck_assert_int_eq(export_format_for_path(".csv"), -1); /* a bare suffix names nothing */
    ck_assert_int_eq(export_format_for_path("-"), -1);
    ck_assert_int_eq(export_format_for_path(NULL), -1);
}
END_TEST

START_TEST(vocab_refused_by_every_engine)
{
    sched_t *s = make(gen_1f1b, 2, 4, 1);
    sched_set_vocab(s, SCHED_VOCAB_1, 1, 1, 0, 0, 0.1, 0);
    expect_refused(s, NULL, EXPORT_TORCH_CSV,
                   "PyTorch's pipelining CSV cannot express vocabulary parallelism");
    add_plan(s, "1f1b", (const int[]){ 2, 2 }, NULL, 1, 1, 1);
    zb_plan p;
    read_plan(s, &p);
    expect_refused(s, &p, EXPORT_TORCH_CSV, "plan for torch instead: zbsched search --mem 40G "
                   "--model tiny --gpu H100-80G --gpus 2 --global-batch 4 --target torch");
    expect_refused(s, &p, EXPORT_PYTORCH, "--target torch");
    expect_refused(s, &p, EXPORT_TORCHTITAN, "torchtitan cannot express vocabulary parallelism");
    expect_refused(s, &p, EXPORT_TORCHTITAN, "--target torchtitan");
    expect_refused(s, &p, EXPORT_MEGATRON, "Megatron-LM cannot express vocabulary parallelism");
    expect_refused(s, &p, EXPORT_MEGATRON, "--target megatron");
    plan_free(&p);
    sched_free(s);
}
END_TEST

/* The module lists of a TOML, in order, with every layer once. */
static void check_fqns(const char *toml, const int *layers, int S)
{
    const char *at = strstr(toml, "module_fqns_per_model_part = [\n");
    ck_assert_ptr_nonnull(at);
    at = strchr(at, '\n') + 1;
    int layer = 0;
    for (int st = 0; st < S; st++) {
        ck_assert_msg(strncmp(at, "  [", 3) == 0, "stage %d: %.40s", st, at);
        const char *end = strchr(at, '\n');
        char want[512];
        size_t n = (size_t)snprintf(want, sizeof want, "  [");
        int first = 1;
        if (st == 0) {
            n += (size_t)snprintf(want + n, sizeof want - n, "\"tok_embeddings\"");
            first = 0;
        }
        for (int k = 0; k < layers[st]; k++, first = 0)
            n += (size_t)snprintf(want + n, sizeof want - n, "%s\"layers.%d\"", first ? "" : ", ",
                                  layer++);
        if (st == S - 1)
            snprintf(want + n, sizeof want - n, "%s\"norm\", \"output\"", first ? "" : ", ");
        ck_assert_msg(strncmp(at, want, strlen(want)) == 0 && at[strlen(want)] == ']',
                      "stage %d: '%.*s', want '%s]'", st, (int)(end - at), at, want);
        at = end + 1;
    }
    ck_assert(strncmp(at, "]\n", 2) == 0);
}

START_TEST(torchtitan_job)
{
    sched_t *s = make(gen_interleaved, 4, 8, 2);
    static const char *const full[8] = { "full", "full", "full", "full",
                                         "full", "full", "full", "full" };
    const int layers[8] = { 2, 1, 1, 1, 1, 1, 1, 2 };
    add_plan(s, "interleaved", layers, full, 2, 3, 3);
    zb_plan p;
    read_plan(s, &p);
    char *t = text_of(s, &p, EXPORT_TORCHTITAN);
    ck_assert_ptr_nonnull(strstr(t, "pipeline_parallel_schedule = \"PipelineScheduleMulti\"\n"));
    ck_assert_ptr_nonnull(strstr(t, "pipeline_parallel_schedule_csv = \"job.csv\"\n"));
    ck_assert_ptr_nonnull(strstr(t, "pipeline_parallel_degree = 4\n"));
    ck_assert_ptr_nonnull(strstr(t, "pipeline_parallel_microbatch_size = 2\n"));
    ck_assert_ptr_nonnull(strstr(t, "local_batch_size = 16\n"));
    ck_assert_ptr_nonnull(strstr(t, "global_batch_size = 48\n"));
    ck_assert_ptr_nonnull(strstr(t, "seq_len = 64\n"));
    ck_assert_ptr_nonnull(strstr(t, "data_parallel_shard_degree = 3\n"));
    ck_assert_ptr_nonnull(strstr(t, "[activation_checkpoint]\n"));
    ck_assert_ptr_nonnull(strstr(t, "mode = \"full\"\n"));
    ck_assert_ptr_nonnull(strstr(t, "# flavor = "));
    check_fqns(t, layers, 8);
    free(t);
    plan_free(&p);
    sched_free(s);

    /* V placement: ZBVZeroBubble, no recompute; the light-ends split */
    s = make(gen_zb_v, 2, 4, 2);
    const int v[4] = { 0, 2, 2, 0 };
    add_plan(s, "zb-v", v, NULL, 1, 1, 1);
    read_plan(s, &p);
    t = text_of(s, &p, EXPORT_TORCHTITAN);
    ck_assert_ptr_nonnull(strstr(t, "pipeline_parallel_schedule = \"ZBVZeroBubble\"\n"));
    ck_assert_ptr_nonnull(strstr(t, "mode = \"none\"\n"));
    ck_assert_ptr_nonnull(strstr(t, "  [\"tok_embeddings\"],  # stage 0 on rank 0\n"));
    ck_assert_ptr_nonnull(strstr(t, "  [\"norm\", \"output\"],  # stage 3 on rank 0\n"));
    check_fqns(t, v, 4);
    free(t);
    plan_free(&p);
    sched_free(s);
}
END_TEST

START_TEST(torchtitan_refusals_and_flavor)
{
    sched_t *s = make(gen_interleaved, 4, 8, 2);
    static const char *const some[8] = { "full", "full", "none", "none",
                                         "none", "none", "none", "none" };
    add_plan(s, "interleaved", one_each, some, 1, 1, 1);
    zb_plan p;
    read_plan(s, &p);
    expect_refused(s, &p, EXPORT_TORCHTITAN, "torchtitan applies one activation-checkpoint "
                   "policy to every stage, and this plan recomputes per stage (stages 0-1 full, "
                   "2-7 none); plan for torchtitan instead: zbsched search");
    plan_free(&p);
    static const char *const mlp[8] = { "mlp", "mlp", "mlp", "mlp", "mlp", "mlp", "mlp", "mlp" };
    add_plan(s, "interleaved", one_each, mlp, 1, 1, 1);
    read_plan(s, &p);
    expect_refused(s, &p, EXPORT_TORCHTITAN, "no MLP-only level");
    plan_free(&p);
    add_plan(s, "interleaved", one_each, NULL, 1, 2, 4);
    read_plan(s, &p);
    expect_refused(s, &p, EXPORT_TORCHTITAN, "the plan shards it over 4 (search --zero1)");
    plan_free(&p);
    /* stages 0,1 on device 0 and 2,3 on device 1: neither looped nor V */
    sched_free(s);
    s = make(gen_1f1b, 2, 2, 1);
    sched_t *o = sched_new(2, 1, 4);
    o->stage_device[0] = o->stage_device[1] = 0;
    o->stage_device[2] = o->stage_device[3] = 1;
    int order[2][8][2] = { { { OP_F, 0 }, { OP_F, 1 }, { OP_BW, 1 }, { OP_BW, 0 } },
                           { { OP_F, 2 }, { OP_F, 3 }, { OP_BW, 3 }, { OP_BW, 2 } } };
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < 4; i++)
            ck_assert_int_eq(sched_push(o, d, (op_kind)order[d][i][0], order[d][i][1], 0), 0);
    add_plan(o, "custom", (const int[]){ 1, 1, 1, 1 }, NULL, 1, 1, 1);
    read_plan(o, &p);
    expect_refused(o, &p, EXPORT_TORCHTITAN, "places its 4 stages otherwise");
    expect_refused(o, &p, EXPORT_MEGATRON, "runs only 1F1B and interleaved 1F1B");
    plan_free(&p);
    sched_free(o);
    /* llama3-8b's shape is torchtitan's 8B */
    zb_model m;
    zb_err err = { { 0 } };
    ck_assert_int_eq(model_preset("llama3-8b", &m, &err), 0);
    ck_assert_str_eq(export_torchtitan_flavor(&m), "8B");
    m.n_layers = 30;
    ck_assert_ptr_null(export_torchtitan_flavor(&m));
    sched_free(s);
}
END_TEST

START_TEST(megatron_flags)
{
    sched_t *s = make(gen_1f1b, 2, 4, 1);
    static const char *const full[2] = { "full", "full" };
    add_plan(s, "1f1b", (const int[]){ 3, 2 }, full, 2, 4, 4);
    zb_plan p;
    read_plan(s, &p);
    char *t = text_of(s, &p, EXPORT_MEGATRON);
    ck_assert_ptr_nonnull(strstr(t, "--pipeline-model-parallel-size 2\n"));
    ck_assert_ptr_nonnull(strstr(t, "--pipeline-model-parallel-layout Ettt|ttL\n"));
    ck_assert_ptr_nonnull(strstr(t, "--micro-batch-size 2\n--global-batch-size 32\n"));
    ck_assert_ptr_nonnull(strstr(t, "--use-distributed-optimizer\n"));
    ck_assert_ptr_nonnull(strstr(t, "--recompute-granularity full\n--recompute-method uniform\n"
                                    "--recompute-num-layers 1\n"));
    ck_assert_ptr_nonnull(strstr(t, "--num-layers 5\n"));
    ck_assert_ptr_nonnull(strstr(t, "--swiglu\n"));
    ck_assert_ptr_nonnull(strstr(t, "--untie-embeddings-and-output-weights\n"));
    /* Megatron refuses these beside the layout */
    ck_assert_ptr_null(strstr(t, "--num-virtual-stages-per-pipeline-rank"));
    ck_assert_ptr_null(strstr(t, "#"));
    free(t);
    plan_free(&p);
    sched_free(s);

    s = make(gen_interleaved, 2, 4, 3);
    static const char *const mlp[6] = { "mlp", "mlp", "mlp", "mlp", "mlp", "mlp" };
    const int layers[6] = { 2, 1, 1, 1, 1, 2 };
    add_plan(s, "interleaved", layers, mlp, 1, 1, 1);
    read_plan(s, &p);
    t = text_of(s, &p, EXPORT_MEGATRON);
    const char *lay = strstr(t, "--pipeline-model-parallel-layout ");
    ck_assert_ptr_nonnull(lay);
    lay += strlen("--pipeline-model-parallel-layout ");
    int ts = 0, bars = 0;
    for (const char *c = lay; *c != '\n'; c++) {
        ts += *c == 't';
        bars += *c == '|';
    }
    ck_assert_int_eq(ts, 8);
    ck_assert_int_eq(bars, 5);
    ck_assert(lay[0] == 'E' && strncmp(strchr(lay, '\n') - 1, "L", 1) == 0);
    ck_assert_ptr_nonnull(strstr(t, "--recompute-granularity selective\n--recompute-modules mlp\n"));
    ck_assert_ptr_null(strstr(t, "--use-distributed-optimizer"));
    free(t);
    plan_free(&p);
    sched_free(s);
}
END_TEST

START_TEST(megatron_refusals)
{
    sched_t *s = make(gen_zb_h1, 2, 4, 1);
    add_plan(s, "zb-h1", (const int[]){ 2, 2 }, NULL, 1, 1, 1);
    zb_plan p;
    read_plan(s, &p);
    expect_refused(s, &p, EXPORT_MEGATRON, "Megatron-LM runs only 1F1B and interleaved 1F1B "
                   "(its own order, backward not split), and this plan is zb-h1; plan for "
                   "megatron instead: zbsched search");
    /* PyTorch runs any order */
    ck_assert_int_eq(export_check(s, &p, EXPORT_TORCH_CSV, NULL), 0);
    ck_assert_int_eq(export_check(s, &p, EXPORT_PYTORCH, NULL), 0);
    plan_free(&p);
    sched_free(s);
    s = make(gen_zb_v, 2, 4, 2);
    add_plan(s, "zb-v", (const int[]){ 1, 1, 1, 1 }, NULL, 1, 1, 1);
    read_plan(s, &p);
    expect_refused(s, &p, EXPORT_MEGATRON, "this plan is zb-v");
    plan_free(&p);
    sched_free(s);
    s = make(gen_1f1b, 2, 4, 1);
    static const char *const half[2] = { "full", "none" };
    add_plan(s, "1f1b", (const int[]){ 2, 2 }, half, 1, 1, 1);
    read_plan(s, &p);
    expect_refused(s, &p, EXPORT_MEGATRON, "recompute flags apply to every stage, and this plan "
                   "recomputes per stage (stages 0 full, 1 none)");
    plan_free(&p);
    /* stages holding no layer do not count for uniformity */
    add_plan(s, "1f1b", (const int[]){ 4, 0 }, half, 1, 1, 1);
    read_plan(s, &p);
    ck_assert_int_eq(export_check(s, &p, EXPORT_MEGATRON, NULL), 0);
    plan_free(&p);
    cJSON *m = cJSON_GetObjectItem(s->meta, "model");
    cJSON_ReplaceItemInObject(m, "rope_theta", cJSON_CreateNumber(10000.5));
    read_plan(s, &p);
    expect_refused(s, &p, EXPORT_MEGATRON, "--rotary-base takes a whole number");
    plan_free(&p);
    /* no plan: nothing to take the split from */
    expect_refused(s, NULL, EXPORT_MEGATRON, "the file has no plan");
    expect_refused(s, NULL, EXPORT_PYTORCH, "--format torch-csv writes the op order alone");
    sched_free(s);
}
END_TEST

START_TEST(pytorch_sidecar)
{
    sched_t *s = make(gen_zb_v, 2, 4, 2);
    static const char *const lv[4] = { "full", "mlp", "none", "none" };
    add_plan(s, "zb-v", (const int[]){ 1, 2, 2, 1 }, lv, 3, 1, 1);
    zb_plan p;
    read_plan(s, &p);
    char *t = text_of(s, &p, EXPORT_PYTORCH);
    cJSON *o = cJSON_Parse(t);
    ck_assert_ptr_nonnull(o);
    ck_assert_str_eq(cJSON_GetObjectItem(o, "format")->valuestring, "zbsched-pytorch-plan");
    ck_assert_str_eq(cJSON_GetObjectItem(o, "csv")->valuestring, "job.csv");
    ck_assert_int_eq(cJSON_GetObjectItem(o, "micro_batch")->valueint, 3);
    ck_assert_int_eq(cJSON_GetObjectItem(o, "n_micro")->valueint, 4);
    ck_assert_int_eq(cJSON_GetObjectItem(o, "pipeline_parallel")->valueint, 2);
    ck_assert_int_eq(cJSON_GetObjectItem(o, "data_parallel")->valueint, 1);
    const cJSON *pl = cJSON_GetObjectItem(o, "placement"), *fl = cJSON_GetObjectItem(o, "first_layer");
    const cJSON *rc = cJSON_GetObjectItem(o, "recompute");
    const int want_place[4] = { 0, 1, 1, 0 }, want_first[4] = { 0, 1, 3, 5 };
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(cJSON_GetArrayItem(pl, i)->valueint, want_place[i]);
        ck_assert_int_eq(cJSON_GetArrayItem(fl, i)->valueint, want_first[i]);
        ck_assert_str_eq(cJSON_GetArrayItem(rc, i)->valuestring, lv[i]);
    }
    ck_assert_int_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "model"), "n_layers")->valueint, 6);
    cJSON_Delete(o);
    free(t);
    /* what the bare CSV lacks, said in one line */
    char note[512];
    export_csv_note(&p, note, sizeof note);
    ck_assert_str_eq(note, "the CSV holds the op order only; the plan also needs layers_per_stage "
                     "[1,2,2,1], recompute on stages 0 full, 1 mlp, 2-3 none, micro-batch 3, 1 "
                     "data-parallel replica; --format pytorch writes them beside the CSV");
    plan_free(&p);
    sched_free(s);
}
END_TEST

START_TEST(paths)
{
    char *paths[EXPORT_MAX_FILES] = { 0 };
    int n;
    zb_err err = { { 0 } };
    ck_assert_int_eq(export_paths(EXPORT_TORCHTITAN, "out/job.toml", paths, &n, &err), 0);
    ck_assert_int_eq(n, 2);
    ck_assert_str_eq(paths[0], "out/job.toml");
    ck_assert_str_eq(paths[1], "out/job.csv");
    export_paths_free(paths, n);
    ck_assert_int_eq(export_paths(EXPORT_PYTORCH, "a.b/job", paths, &n, &err), 0);
    ck_assert_str_eq(paths[1], "a.b/job.csv");
    export_paths_free(paths, n);
    ck_assert_int_eq(export_paths(EXPORT_TORCHTITAN, "job.csv", paths, &n, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "give -o job.toml"));
    ck_assert_int_eq(export_paths(EXPORT_PYTORCH, "-", paths, &n, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "writes two files"));
    ck_assert_int_eq(export_paths(EXPORT_ZBSCHED, "best.csv", paths, &n, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "does not end in .json"));
    ck_assert_int_eq(export_paths(EXPORT_MEGATRON, NULL, paths, &n, &err), 0);
    ck_assert_int_eq(n, 1);
    ck_assert_ptr_null(paths[0]);
    export_paths_free(paths, n);
}
END_TEST

/* ---- the program ---- */

static char dir[128];
static char out[1 << 16], errb[1 << 14];

static int zb(const char *args)
{
    return cli_run(dir, NULL, args, out, sizeof out, errb, sizeof errb);
}

static void save(sched_t *s, const char *name)
{
    char p[256];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    zb_err err = { { 0 } };
    ck_assert_msg(sched_save_file(s, p, &err) == 0, "%s", err.msg);
}

static int exists(const char *name)
{
    char p[256];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

START_TEST(program)
{
    snprintf(dir, sizeof dir, "/tmp/zb_export_%d", (int)getpid());
    ck_assert_int_eq(mkdir(dir, 0777), 0);
    sched_t *s = make(gen_zb_v, 2, 4, 2);
    add_plan(s, "zb-v", (const int[]){ 1, 1, 1, 1 }, NULL, 1, 1, 1);
    set_target(s, "torchtitan");
    save(s, "plan.json");
    /* the plan's target is the default format */
    ck_assert_msg(zb("export plan.json -o job.toml") == 0, "%s", errb);
    ck_assert(exists("job.toml") && exists("job.csv"));
    ck_assert_ptr_nonnull(strstr(errb, "wrote job.toml and job.csv"));
    ck_assert_int_eq(zb("export plan.json --format pytorch -o side.json"), 0);
    ck_assert(exists("side.json") && exists("side.csv"));
    /* the CSV beside the output may not be an input */
    save(s, "t.csv");
    ck_assert_int_eq(zb("export t.csv --format torchtitan -o t.toml"), 1);
    cli_assert_one_line(errb, "is the input");
    ck_assert(!exists("t.toml"));
    ck_assert_int_eq(zb("export plan.json --format torchtitan -o -"), 1);
    cli_assert_one_line(errb, "writes two files");
    ck_assert_int_eq(zb("export plan.json --format megatron -o args.txt"), 1);
    cli_assert_one_line(errb, "this plan is zb-v; plan for megatron instead");
    ck_assert(!exists("args.txt"));
    ck_assert_int_eq(zb("export plan.json --format gguf"), 2);
    cli_assert_one_line(errb, "unknown format 'gguf'");
    /* torch-csv of a plan says what the CSV leaves out */
    ck_assert_int_eq(zb("export plan.json --format torch-csv -o p.csv"), 0);
    ck_assert_ptr_nonnull(strstr(errb, "the CSV holds the op order only"));
    /* a zbsched plan: its export is itself, to stdout or a .json name */
    sched_free(s);
    ck_assert_int_eq(zb("gen zb-v -p 2 -m 4 --vocab parallel -o v.json"), 0);
    char vp[256];
    snprintf(vp, sizeof vp, "%s/v.json", dir);
    zb_err err = { { 0 } };
    ck_assert_msg(sched_load_file(vp, &s, &err) == 0, "%s", err.msg);
    add_plan(s, "zb-v", (const int[]){ 1, 1, 1, 1 }, NULL, 1, 1, 1);
    save(s, "zb.json");
    ck_assert_msg(zb("export zb.json") == 0, "%s", errb);
    ck_assert_ptr_nonnull(strstr(out, "\"format\": \"zbsched-schedule\""));
    ck_assert_ptr_nonnull(strstr(errb, "which zbsched runs as it is: zbsched run zb.json"));
    /* a .csv name asks for the CSV, which cannot hold the passes */
    ck_assert_int_eq(zb("export zb.json -o zb.csv"), 1);
    cli_assert_one_line(errb, "cannot express vocabulary parallelism");
    cli_assert_one_line(errb, "--target torch");
    ck_assert(!exists("zb.csv"));
    /* a name that asks for no format gets the plan's own: the file itself */
    ck_assert_int_eq(zb("export zb.json -o zb.txt"), 1);
    cli_assert_one_line(errb, "is planned for zbsched's own runtime");
    cli_assert_one_line(errb, "--target torch");
    ck_assert(!exists("zb.txt"));
    ck_assert_int_eq(zb("export zb.json --format torch-csv -o zb.csv"), 1);
    cli_assert_one_line(errb, "PyTorch's pipelining CSV cannot express vocabulary parallelism");
    sched_free(s);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("export");
    TCase *tc = tcase_create("export");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, default_format);
    tcase_add_test(tc, format_from_output_name);
    tcase_add_test(tc, vocab_refused_by_every_engine);
    tcase_add_test(tc, torchtitan_job);
    tcase_add_test(tc, torchtitan_refusals_and_flavor);
    tcase_add_test(tc, megatron_flags);
    tcase_add_test(tc, megatron_refusals);
    tcase_add_test(tc, pytorch_sidecar);
    tcase_add_test(tc, paths);
    tcase_add_test(tc, program);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
