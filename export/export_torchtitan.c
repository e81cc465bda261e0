/*
 * export_torchtitan.c: a plan as a torchtitan TOML job (export.h).
 *
 * Matched against torchtitan v0.2.2 (tag of 2026-02-20): the keys are the
 * fields of torchtitan/config/job_config.py's JobConfig sections, and their
 * meaning is what torchtitan/distributed/pipeline_parallel.py does with
 * them:
 *
 *   [parallelism] pipeline_parallel_schedule_csv   forces
 *       _PipelineScheduleRuntime and loads the CSV (compute-only); the
 *       schedule name then only decides which stages a rank builds:
 *       ZBVZeroBubble the V pairs (r, 2p-1-r), any other name (we write
 *       PipelineScheduleMulti) the looped r, r+p, ...
 *   module_fqns_per_model_part                     one list of module names
 *       per virtual stage, llama3's names: tok_embeddings, layers.N, norm,
 *       output
 *   pipeline_parallel_microbatch_size, [training] local_batch_size: the
 *       number of micro-batches is local / micro (build_pipeline_schedule)
 *   data_parallel_shard_degree                     FSDP over the replicas
 *   [activation_checkpoint] mode                   "none" or "full" (every
 *       transformer block checkpointed: what zbsched's full recompute
 *       level does per layer)
 *
 * torchtitan's own knobs that a plan says nothing about (optimizer, data,
 * steps) are left to its defaults or the user's base config.
 */
#include "export/export_internal.h"

#include "src/cost_model.h"

/* torchtitan's llama3 flavors (torchtitan/models/llama3/__init__.py,
 * v0.2.2), with the FFN size its ffn_dim_multiplier and multiple_of give. */
static const struct {
    const char *flavor;
    int n_layers, d_model, n_heads, n_kv_heads, d_ff;
} flavors[] = {
    { "8B", 32, 4096, 32, 8, 14336 },
    { "70B", 80, 8192, 64, 8, 28672 },
    { "405B", 126, 16384, 128, 8, 53248 },
};

const char *export_torchtitan_flavor(const zb_model *m)
{
    for (size_t i = 0; i < sizeof flavors / sizeof flavors[0]; i++)
        if (m->n_layers == flavors[i].n_layers && m->d_model == flavors[i].d_model &&
            m->n_heads == flavors[i].n_heads && m->n_kv_heads == flavors[i].n_kv_heads &&
            m->d_ff == flavors[i].d_ff && m->rope_theta == 500000)
            return flavors[i].flavor;
    return NULL;
}

/* A TOML basic string: quotes, backslashes and control bytes escaped. */
static void toml_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\')
            fprintf(f, "\\%c", *c);
        else if (*c < 0x20 || *c == 0x7f)
            fprintf(f, "\\u%04x", *c);
        else
            fputc(*c, f);
    }
    fputc('"', f);
}

/* A comment line's text: no line breaks. */
static void comment_text(FILE *f, const char *s)
{
    for (; *s; s++)
        fputc(*s == '\n' || *s == '\r' ? ' ' : *s, f);
}

char *export_torchtitan_text(const sched_t *s, const zb_plan *p, const char *source,
                             const char *csv_ref, zb_err *err)
{
    export_text_buf b;
    text_open(&b);
    FILE *f = b.f;
    if (!f)
        return text_take(&b, err);
    int level = COST_RC_NONE;
    plan_uniform_recompute(p, &level);
    int v_shape = export_placement_of(s) == EXPORT_PLACE_V && s->n_stages > s->n_devices;
    const char *flavor = export_torchtitan_flavor(&p->model);

    fputs("# torchtitan job (v0.2.x TOML) for the zbsched plan ", f);
    comment_text(f, source ? source : "-");
    fputs(", written by `zbsched export --format torchtitan`.\n# Plan: ", f);
    comment_text(f, p->schedule[0] ? p->schedule : s->name);
    fprintf(f, ", pp=%d x dp=%d, micro-batch %d, %d micro-batches, %d virtual stages.\n",
            p->pipeline_parallel, p->data_parallel, p->micro_batch, p->n_micro, s->n_stages);
    fputs("# Merge into your torchtitan config or pass with --job.config_file; "
          "the op order is the CSV below.\n\n", f);

    fputs("[job]\ndescription = ", f);
    char desc[160];
    snprintf(desc, sizeof desc, "zbsched plan %s", p->schedule[0] ? p->schedule : s->name);
    toml_string(f, desc);
    fputs("\n\n[model]\nname = \"llama3\"\n", f);
    if (flavor)
        fprintf(f, "flavor = \"%s\"\n", flavor);
    else
        fprintf(f, "# No llama3 flavor of torchtitan has this model's shape (%s: %d layers, dim "
                "%d, %d heads, %d KV heads, FFN %d, rope_theta %g): register one in "
                "torchtitan/models/llama3/__init__.py and name it here.\n# flavor = \"...\"\n",
                p->model.name, p->model.n_layers, p->model.d_model, p->model.n_heads,
                p->model.n_kv_heads, p->model.d_ff, p->model.rope_theta);

    fprintf(f, "\n[training]\n# per data-parallel replica: micro_batch %d x %d micro-batches\n"
            "local_batch_size = %d\nglobal_batch_size = %d\nseq_len = %d\n", p->micro_batch,
            p->n_micro, p->micro_batch * p->n_micro, p->global_batch, p->model.seq_len);

    fputs("\n[parallelism]\n", f);
    fprintf(f, "pipeline_parallel_degree = %d\n", p->pipeline_parallel);
    fprintf(f, "pipeline_parallel_schedule = \"%s\"\n",
            v_shape ? "ZBVZeroBubble" : "PipelineScheduleMulti");
    fputs("pipeline_parallel_schedule_csv = ", f);
    toml_string(f, csv_ref ? csv_ref : "");
    fprintf(f, "\npipeline_parallel_microbatch_size = %d\n", p->micro_batch);
    fputs("module_fqns_per_model_part = [\n", f);
    int layer = 0;
    for (int st = 0; st < s->n_stages; st++) {
        fputs("  [", f);
        int first = 1;
        if (st == 0) {
            fputs("\"tok_embeddings\"", f);
            first = 0;
        }
        for (int k = 0; k < p->layers[st]; k++, layer++) {
            fprintf(f, "%s\"layers.%d\"", first ? "" : ", ", layer);
            first = 0;
        }
        if (st == s->n_stages - 1)
            fprintf(f, "%s\"norm\", \"output\"", first ? "" : ", ");
        fprintf(f, "],  # stage %d on rank %d\n", st, s->stage_device[st]);
    }
    fputs("]\n", f);
    fprintf(f, "data_parallel_shard_degree = %d\ndata_parallel_replicate_degree = 1\n"
            "tensor_parallel_degree = %d\ncontext_parallel_degree = %d\n", p->data_parallel,
            p->layout.tp, p->layout.cp);

    fputs("\n[activation_checkpoint]\n", f);
    if (level == COST_RC_FULL)
        fputs("# every stage recomputes: each transformer block checkpointed\nmode = \"full\"\n", f);
    else
        fputs("mode = \"none\"\n", f);
    return text_take(&b, err);
}
