/*
 * search_target.c: which training engine can run which plan
 * (`zbsched search --target`, search.h; docs/search.md "Targets").
 *
 * A plan is a schedule family with its placement, a recompute setting, a
 * layer split, a micro-batch and a data-parallel width.  The engines
 * differ in which of these they can express (../shared/reference/
 * engines.md has the options each one reads):
 *
 *   zbsched     this project's runtime: everything the search builds,
 *               vocabulary-parallel passes and per-stage recompute included.
 *   torch       torch.distributed.pipelining with the user's model code:
 *               any compute order through the CSV (the stage -> rank map
 *               comes from it, so V placements too); the layer split and
 *               per-stage recompute (checkpoint_wrapper, the whole layer or
 *               its MLP) are model code; no vocabulary passes.
 *   torchtitan  the CSV order (V placement under ZBVZeroBubble, the looped
 *               one otherwise, both of which the search's families use);
 *               the split through module_fqns_per_model_part; one
 *               activation-checkpointing policy for every stage, of which
 *               the cost model prices `none` and `full` (selective per-op
 *               and every-n-th-layer checkpointing are not priced yet:
 *               issue 27); no vocabulary passes.
 *   megatron    1F1B or interleaved 1F1B (looped placement); any split
 *               through --pipeline-model-parallel-layout; recompute only
 *               as one global setting: off, full, or selective over the
 *               mlp and layernorm modules (the cost model's MLP level);
 *               no vocabulary passes.
 *
 * Data parallelism is priced alike for all four: optimizer state sharded
 * over the replicas (ZeRO-1; Megatron's distributed optimizer), the
 * gradients reduce-scattered behind the last backward and the parameters
 * all-gathered behind the first forward.  For torchtitan that is its FSDP
 * as it runs under pipelining (parameters stay unsharded from the first
 * forward to the last backward, reshard_after_forward off): the
 * parameter and gradient shards FSDP keeps outside the step are not
 * counted as savings, so its memory is priced high by the fp32 master
 * copy's (dp-1)/dp share.
 *
 * How a step ends differs, and so does the time a target realises: zbsched
 * (post-validation) and torch (each rank's optimizer.step() after its own
 * schedule.step()) step each device when its own ops are done; torchtitan
 * and Megatron clip the gradient norm over the whole model first, so every
 * device waits for the last one (search_target_sync).
 */
#include "solver/search.h"

#include <stdio.h>
#include <string.h>

static const char *const target_names[SEARCH_N_TARGETS] = { "zbsched", "torch", "torchtitan", "megatron" };

const char *search_target_name(search_target t)
{
    return t >= 0 && t < SEARCH_N_TARGETS ? target_names[t] : "?";
}

int search_target_parse(const char *name, search_target *t, zb_err *err)
{
    for (int i = 0; i < SEARCH_N_TARGETS; i++)
        if (!strcmp(name, target_names[i])) {
            *t = (search_target)i;
            return 0;
        }
    return zb_fail(err, "'%s' is not zbsched, torch, torchtitan or megatron", name);
}

int search_target_sync(search_target t)
{
    return t == SEARCH_TARGET_TORCHTITAN || t == SEARCH_TARGET_MEGATRON;
}

/* Layouts (search.h): zbsched and torch run pipeline x data parallel with
 * ZeRO-1 and no offload; torchtitan TP (always with sequence parallel on
 * the norms), CP and FSDP, no offload; Megatron-LM TP with or without
 * --sequence-parallel, CP, ZeRO-1 (--use-distributed-optimizer), and
 * activation offload (--cpu-offloading) only without a pipeline and
 * without recompute. */
int search_layout_runs(const zb_layout *l, const search_candidate *c, search_target t, char *buf,
                       size_t len)
{
    const char *name = search_target_name(t);
    if (buf && len)
        buf[0] = 0;
    if (!layout_is_extended(l))
        return 1;
    switch (t) {
    case SEARCH_TARGET_ZBSCHED:
    case SEARCH_TARGET_TORCH:
        if (buf)
            snprintf(buf, len, "%s runs pipeline x data parallel with ZeRO-1 only (no tensor or context "
                     "parallelism, sharding or offload)", name);
        return 0;
    case SEARCH_TARGET_TORCHTITAN:
        if (l->offload > 0) {
            if (buf)
                snprintf(buf, len, "%s has no activation offload", name);
            return 0;
        }
        if (l->tp > 1 && !l->sp) {
            if (buf)
                snprintf(buf, len, "%s's tensor parallelism always shards the norms (sequence parallel)", name);
            return 0;
        }
        if (l->zero == LAYOUT_ZERO2) {
            if (buf)
                snprintf(buf, len, "%s shards with FSDP (ZeRO-3), not ZeRO-2", name);
            return 0;
        }
        return 1;
    case SEARCH_TARGET_MEGATRON:
        if (l->zero > LAYOUT_ZERO1) {
            if (buf)
                snprintf(buf, len, "%s shards optimizer state only (--use-distributed-optimizer), not "
                         "gradients or parameters", name);
            return 0;
        }
        if (l->offload > 0 && c && (c->pp > 1 || c->recompute)) {
            if (buf)
                snprintf(buf, len, "%s offloads activations (--cpu-offloading) only without a pipeline "
                         "and without recompute", name);
            return 0;
        }
        return 1;
    }
    return 0;
}

/* The recompute setting, as the engines' options see it. */
typedef enum rc_shape {
    RC_NONE,     /* no stage recomputes */
    RC_FULL_ALL, /* every stage recomputes whole layers */
    RC_MLP_ALL,  /* every stage recomputes its MLP blocks */
    RC_PARTIAL,  /* some stages (or devices) only, or a mix of levels */
} rc_shape;

static rc_shape rc_shape_of(const search_candidate *c)
{
    if (c->rc_stages > 0) {
        int all = c->n_stages > 0 ? c->n_stages : SEARCH_RC_ALL;
        if (c->rc_stages >= all && c->rc_mlp_stages >= all)
            return RC_MLP_ALL;
        if (c->rc_stages >= all && c->rc_mlp_stages == 0)
            return RC_FULL_ALL;
        return RC_PARTIAL;
    }
    if (c->rc_devices <= 0)
        return RC_NONE;
    return c->rc_devices >= c->pp ? RC_FULL_ALL : RC_PARTIAL;
}

/* Why a target cannot run a plan (REFUSE_NONE: it can). */
typedef enum refusal {
    REFUSE_NONE,
    REFUSE_VOCAB,       /* vocabulary-parallel passes */
    REFUSE_TT_RC,       /* torchtitan: not one policy (none, full) for every stage */
    REFUSE_MG_FAMILY,   /* megatron: not 1F1B or interleaved 1F1B */
    REFUSE_MG_RC,       /* megatron: recompute not global */
    REFUSE_LAYOUT,      /* the layout (tp, cp, sharding, offload): search_layout_runs says why */
} refusal;

static refusal refusal_of(const search_candidate *c, search_target t)
{
    if (!search_layout_runs(&c->layout, c, t, NULL, 0))
        return REFUSE_LAYOUT;
    if (t == SEARCH_TARGET_ZBSCHED)
        return REFUSE_NONE;
    if (c->vocab)
        return REFUSE_VOCAB;
    rc_shape rc = rc_shape_of(c);
    if (t == SEARCH_TARGET_TORCHTITAN && (rc == RC_PARTIAL || rc == RC_MLP_ALL))
        return REFUSE_TT_RC;
    if (t == SEARCH_TARGET_MEGATRON) {
        if (strcmp(c->family, "1f1b") != 0 && strcmp(c->family, "interleaved") != 0)
            return REFUSE_MG_FAMILY;
        if (rc == RC_PARTIAL)
            return REFUSE_MG_RC;
    }
    return REFUSE_NONE;
}

void search_target_refusal(const search_candidate *c, search_target t, char *buf, size_t len)
{
    static const char *const why[] = {
        [REFUSE_NONE] = "",
        [REFUSE_VOCAB] = "%s has no vocabulary-parallel passes",
        [REFUSE_TT_RC] = "%s applies one activation-checkpointing policy (none or full) to every stage",
        [REFUSE_MG_FAMILY] = "%s runs only 1F1B and interleaved 1F1B",
        [REFUSE_MG_RC] = "%s recomputes globally (off, full or selective mlp), not per stage",
        [REFUSE_LAYOUT] = "",
    };
    if (refusal_of(c, t) == REFUSE_LAYOUT) {
        search_layout_runs(&c->layout, c, t, buf, len);
        return;
    }
    snprintf(buf, len, why[refusal_of(c, t)], search_target_name(t));
}

unsigned search_target_mask(const search_candidate *c)
{
    unsigned m = 0;
    for (int t = 0; t < SEARCH_N_TARGETS; t++)
        if (refusal_of(c, (search_target)t) == REFUSE_NONE)
            m |= 1u << t;
    return m;
}

const char *search_rc_text(const search_candidate *c, char *buf, size_t len)
{
    rc_shape rc = rc_shape_of(c);
    if (rc == RC_MLP_ALL)
        return "mlp";
    if (c->rc_stages > 0 && rc == RC_FULL_ALL)
        return "on";
    if (c->rc_stages > 0 && c->rc_mlp_stages > 0) {
        snprintf(buf, len, "s0-%dm%d", c->rc_stages - 1, c->rc_stages - c->rc_mlp_stages);
        return buf;
    }
    if (c->rc_stages > 0) {
        snprintf(buf, len, "s0-%d", c->rc_stages - 1);
        return buf;
    }
    if (rc == RC_NONE)
        return "off";
    if (rc == RC_FULL_ALL)
        return "on";
    snprintf(buf, len, "0-%d", c->rc_devices - 1);
    return buf;
}

const char *search_device_noun(const zb_gpu *g, int n)
{
    if (g->cpu)
        return n == 1 ? "device" : "devices";
    return n == 1 ? "GPU" : "GPUs";
}
