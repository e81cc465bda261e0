/*
 * run_plan.h: what `zbsched run` trains when the schedule file carries a
 * plan.
 *
 * `zbsched search` writes, next to the schedule, the model it planned for
 * (meta "model"), the chosen micro-batch size and the layer split of the
 * virtual stages (meta "plan": micro_batch, layers_per_stage); its time
 * and memory predictions hold only for those (docs/cost-model.md).  `run`
 * therefore takes all three from the file unless told otherwise:
 *
 *   no --model          the plan's model, micro-batch and split, and
 *                       activation recompute on the stages the plan
 *                       recomputes (plan.recompute_stages);
 *   --model, same model the same (the flag is redundant);
 *   --model, another    that model with the even split and its own
 *                       micro-batch, with a warning that the file's
 *                       predictions do not apply: the way to try a plan's
 *                       schedule shape on a small model;
 *   --batch-size        refused when it contradicts the plan's micro-batch
 *                       for the plan's model (it would void the
 *                       predictions the split was chosen for); fine when
 *                       equal or when another model was given.
 *
 * A file without a plan (gen, import, or a trace) trains --model, default
 * `tiny`, as before.  Then, before any large allocation, run_plan_fits
 * checks that this machine can hold the model at all (runtime/footprint.h)
 * and otherwise says in one line what it needs against what is available,
 * and how to try the same schedule shape with a small model.
 *
 * This is CLI code: it prints its warnings and errors itself.
 */
#ifndef ZB_CLI_RUN_PLAN_H
#define ZB_CLI_RUN_PLAN_H

#include "src/model.h"
#include "src/sched.h"

#define RUN_DEFAULT_MODEL "tiny"

typedef struct run_setup {
    zb_model model;        /* what to train (micro_batch already the one to use) */
    int batch;             /* sequences per micro-batch (> 0) */
    int *layers_per_stage; /* [n_stages] the plan's split, owned; NULL: even split */
    int n_stages;          /* entries of layers_per_stage */
    int from_plan;         /* 1 when the file's plan chose model, batch and split */
    int *recompute_stages; /* [n_stages] COST_RC_* level of each stage (0 none, 1 full, 2 mlp), owned;
                            * NULL: no stage does */
    int data_parallel;     /* the plan's data-parallel degree (1: one pipeline) */
    int zero1_dp;          /* the plan's ZeRO-1 degree (plan.zero1_dp; 1: none) */
} run_setup;

/* Resolves the model, micro-batch and split for `run FILE` from the file's
 * plan and the flags (model_flag NULL and batch_flag 0 when not given), as
 * described above; prints warnings on stderr.  Returns 0 with *out filled
 * (free with run_setup_free), or the exit status after printing one line:
 * 2 for a flag contradicting the plan, 1 for a bad model or plan. */
int run_plan_resolve(const char *file, const sched_t *s, const char *model_flag, long batch_flag,
                     run_setup *out);

/* Checks that the CPU runtime can train setup's model as planned (a
 * Llama-style model: SwiGLU, untied head) and that this machine can hold
 * the trainer for it (the model's vocab already the data's).  Returns 0,
 * or 1 after printing one line: the memory needed against the memory available, and how to
 * try the schedule's shape with a small model. */
int run_plan_fits(const char *file, const sched_t *s, const run_setup *setup);

void run_setup_free(run_setup *setup);

#endif
