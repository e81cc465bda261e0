/*
 * export_megatron.c: a plan as Megatron-LM command-line flags (export.h).
 *
 * Checked against NVIDIA/Megatron-LM main of 2026-08-22 (core_v0.15.0rc7
 * + 2333; megatron/training/arguments.py and
 * megatron/core/transformer/pipeline_parallel_layer_layout.py):
 *
 *   --pipeline-model-parallel-layout   one string for all virtual stages
 *       in order, '|' between stages, 't' per decoder layer, 'E' the
 *       embedding (first), 'L' the loss (last); stage i runs on rank
 *       i mod pp as virtual stage i div pp, so the number of virtual
 *       stages per rank follows from the string.  Megatron refuses it
 *       together with --num-virtual-stages-per-pipeline-rank or
 *       --num-layers-per-virtual-pipeline-stage ("No more than one of the
 *       following arguments can be set at the same time"), so neither is
 *       written.  Written unrolled (no "(t|)*3"), so that no shell glob
 *       character appears and `$(cat args.txt)` passes it through as is.
 *   --recompute-granularity full, --recompute-method uniform,
 *       --recompute-num-layers 1   every layer checkpointed, what
 *       zbsched's full level does; --recompute-granularity selective
 *       --recompute-modules mlp for the MLP level
 *   --micro-batch-size, --global-batch-size; the data-parallel width is
 *       the world size over pp (tp = 1), said in the header
 *   --use-distributed-optimizer   ZeRO-1 over the data-parallel ranks
 *
 * and the Llama shape (RMSNorm, RoPE, SwiGLU, GQA, untied head, no bias).
 * One flag (and its value) per line, no comments, so that the file can be
 * spliced into a command line; what is not a flag goes to the caller's
 * note.
 */
#include "export/export_internal.h"

#include <math.h>

#include "src/cost_model.h"

char *export_megatron_text(const sched_t *s, const zb_plan *p, const char *source, zb_err *err)
{
    (void)source;
    const zb_model *m = &p->model;
    export_text_buf b;
    text_open(&b);
    FILE *f = b.f;
    if (!f)
        return text_take(&b, err);
    int level = COST_RC_NONE;
    plan_uniform_recompute(p, &level);

    fprintf(f, "--pipeline-model-parallel-size %d\n", s->n_devices);
    fputs("--pipeline-model-parallel-layout ", f);
    for (int st = 0; st < s->n_stages; st++) {
        if (st)
            fputc('|', f);
        if (st == 0)
            fputc('E', f);
        for (int k = 0; k < p->layers[st]; k++)
            fputc('t', f);
        if (st == s->n_stages - 1)
            fputc('L', f);
    }
    const zb_layout *l = &p->layout;
    fprintf(f, "\n--tensor-model-parallel-size %d\n", l->tp);
    if (l->sp)
        fputs("--sequence-parallel\n", f);
    if (l->cp > 1)
        fprintf(f, "--context-parallel-size %d\n", l->cp);
    if (l->offload > 0) /* whole layers: the fraction of the model's layers, at least one */
        fprintf(f, "--cpu-offloading\n--cpu-offloading-num-layers %d\n",
                (int)fmax(1, floor(l->offload * m->n_layers + 0.5)));
    fprintf(f, "--micro-batch-size %d\n--global-batch-size %d\n", p->micro_batch, p->global_batch);
    if (p->zero1_dp > 1)
        fputs("--use-distributed-optimizer\n", f);
    if (level == COST_RC_FULL)
        fputs("--recompute-granularity full\n--recompute-method uniform\n"
              "--recompute-num-layers 1\n", f);
    else if (level == COST_RC_MLP)
        fputs("--recompute-granularity selective\n--recompute-modules mlp\n", f);
    else if (level == COST_RC_ATTN)
        fputs("--recompute-granularity selective\n--recompute-modules core_attn\n", f);
    fprintf(f, "--num-layers %d\n--hidden-size %d\n--ffn-hidden-size %d\n"
            "--num-attention-heads %d\n", m->n_layers, m->d_model, m->d_ff, m->n_heads);
    if (m->n_kv_heads != m->n_heads)
        fprintf(f, "--group-query-attention\n--num-query-groups %d\n", m->n_kv_heads);
    fprintf(f, "--seq-length %d\n--max-position-embeddings %d\n", m->seq_len, m->seq_len);
    fprintf(f, "--position-embedding-type rope\n--rotary-base %.0f\n", m->rope_theta);
    fputs("--normalization RMSNorm\n--norm-epsilon 1e-5\n--disable-bias-linear\n", f);
    if (m->swiglu)
        fputs("--swiglu\n", f);
    if (!m->tied_embedding)
        fputs("--untie-embeddings-and-output-weights\n", f);
    return text_take(&b, err);
}
