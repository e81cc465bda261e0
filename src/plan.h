/*
 * plan.h: the whole plan a `zbsched search` file carries, beside its op
 * order.
 *
 * A schedule file says which ops every device runs and in which order.
 * What an engine also needs to run it as planned is in the file's meta
 * (docs/search.md, "Output"): the model (meta "model"), the hardware (meta
 * "hardware") and the plan (meta "plan"): the micro-batch, the number of
 * micro-batches, the global batch, the pipeline and data-parallel widths,
 * the ZeRO-1 width, the layers of every virtual stage and which stages
 * recompute their activations and how.  plan_read gathers all of it into
 * one struct, so that every reader (the exporters of export/, and any
 * later one) reads the plan one way and refuses a malformed one with the
 * same words.
 *
 * The optional "target" names the engine the plan was searched for
 * (`search --target`: zbsched, torch, torchtitan, megatron).  A plan
 * without it was searched for zbsched's own runtime, the only target
 * there was before.
 *
 * A file without meta.plan (gen, import, a trace) has no plan: plan_read
 * says so and the caller falls back to what the schedule alone says.
 *
 * Workload: one read per command; S up to a few hundred stages.
 */
#ifndef ZB_PLAN_H
#define ZB_PLAN_H

#include "src/err.h"
#include "src/layout.h"
#include "src/model.h"
#include "src/sched.h"

/* The engines `search --target` plans for. */
typedef enum plan_target {
    PLAN_TARGET_ZBSCHED = 0,    /* zbsched's own runtime: everything it prices */
    PLAN_TARGET_TORCH = 1,      /* torch.distributed.pipelining with the user's model code */
    PLAN_TARGET_TORCHTITAN = 2, /* torchtitan's TOML job */
    PLAN_TARGET_MEGATRON = 3,   /* Megatron-LM's command line */
    PLAN_TARGET_COUNT
} plan_target;

/* What meta "plan", "model" and "hardware" say. */
typedef struct zb_plan {
    zb_model model;        /* meta.model (micro_batch is the plan's) */
    char gpu[32];          /* meta.hardware.name, "" when absent */
    plan_target target;    /* plan.target; ZBSCHED when absent */
    int target_given;      /* 1 when the file names its target */
    char schedule[64];     /* plan.schedule: the ranked label ("zb-v", "interleaved v=4 +vocab-1") */
    char family[32];       /* plan.family ("1f1b", "interleaved", "zb-v", ...), "" when absent */
    int micro_batch;       /* plan.micro_batch: sequences per micro-batch (>= 1) */
    int n_micro;           /* plan.n_micro, else the schedule's m */
    int global_batch;      /* plan.global_batch, else micro_batch * n_micro * data_parallel */
    int pipeline_parallel; /* plan.pipeline_parallel, else the schedule's devices */
    int data_parallel;     /* plan.data_parallel (1 when absent) */
    int zero1_dp;          /* plan.zero1_dp: replicas sharing optimizer state (1 when absent) */
    double mem_limit_bytes; /* plan.mem_limit_bytes, 0 when absent */
    int flash_attention;   /* plan.flash_attention (1 when absent) */
    int fused_loss;        /* 1 when plan.loss is "fused" (search --loss fused) */
    int n_stages;          /* S, the schedule's virtual stages */
    int *layers;           /* [S] plan.layers_per_stage, owned */
    int *recompute;        /* [S] COST_RC_* level of each stage (0 none, 1 full, 2 mlp, 3 attn), owned */
    zb_layout layout;      /* plan.layout: tp (+sp), cp, pp, chunks, dp, ZeRO level, offload;
                            * without it pipeline x data parallel with ZeRO-1 */
} zb_plan;

/* The target's name ("zbsched", "torch", "torchtitan", "megatron"). */
const char *plan_target_name(plan_target t);

/* Parses a target name; returns the target or -1. */
int plan_target_parse(const char *name);

/* Fills *p from s's meta.  Returns 1 when the file has a plan, 0 when it
 * has none (p zeroed), -1 with err naming the field when the plan is
 * malformed (p then holds nothing to free).  A plan's layers sum to its
 * model's layers; recompute_levels, where given, agree with
 * recompute_stages (docs/schedule-format.md). */
int plan_read(const sched_t *s, zb_plan *p, zb_err *err);

/* Frees what plan_read allocated; p may be zeroed. */
void plan_free(zb_plan *p);

/* 1 when every stage holding layers recomputes at the same level, and
 * that level in *level (COST_RC_*); 0 when stages differ.  Stages without
 * layers (the embedding or head alone) have nothing to recompute and do
 * not count. */
int plan_uniform_recompute(const zb_plan *p, int *level);

/* Writes into buf[cap] the `zbsched search` command that plans the same
 * job (model, GPU, GPUs, global batch, memory) for target t, e.g.
 * "zbsched search --mem 40G --model llama3-8b --gpu H100-80G --gpus 8
 * --global-batch 64 --target torch".  Flags the plan does not record are
 * left out. */
void plan_search_command(const zb_plan *p, plan_target t, char *buf, size_t cap);

#endif
