/*
 * layout.h: how one training job lays its GPUs out, as one value.
 *
 * Experts describe a large job by its parallel layout: tensor parallel t
 * (with or without sequence parallelism), pipeline depth p with v chunks
 * per device, data-parallel width d, context parallel c, how far the
 * data-parallel replicas shard their state (ZeRO-1, -2, or -3 = FSDP), and
 * what fraction of the saved activations go to host memory.  The cost
 * model prices a stage under a layout (cost_parts.h carries one in
 * cost_options), the search fills one per candidate (solver/search.h),
 * the plan file records it ("layout" in meta.plan, docs/search.md) and
 * the exporters turn it into an engine's flags or refuse it.  Keeping the
 * eight figures in one struct, with one check and one JSON form, means
 * every reader agrees on what a layout is and what it may not be.
 *
 * GPUs of a layout: t * c * p * d.  Tensor and context parallel groups
 * sit inside one node (their traffic is per layer); the pipeline and the
 * data-parallel replicas span nodes.
 *
 * Workload: a few thousand layouts per search; every call is O(1).
 */
#ifndef ZB_LAYOUT_H
#define ZB_LAYOUT_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "src/err.h"
#include "src/model.h"

/* Sharding levels of the data-parallel replicas (zb_layout.zero). */
enum {
    LAYOUT_ZERO1 = 1, /* optimizer state sharded (Megatron's distributed optimizer) */
    LAYOUT_ZERO2 = 2, /* and gradients (reduce-scatter instead of all-reduce) */
    LAYOUT_ZERO3 = 3, /* and parameters, gathered per layer as used (FSDP, torchtitan's FSDP2) */
};

typedef struct zb_layout {
    int tp;         /* tensor-parallel size t (1: none), a power of two within a node */
    int sp;         /* 1: sequence parallelism beside TP (norms and dropout sharded too) */
    int pp;         /* pipeline depth p (devices of one pipeline) */
    int chunks;     /* virtual stages per pipeline device (interleaving v) */
    int dp;         /* data-parallel width d */
    int cp;         /* context-parallel size c (1: none): the sequence split over c GPUs */
    int zero;       /* LAYOUT_ZERO1..3: what the data-parallel replicas shard */
    double offload; /* fraction 0..1 of each stage's saved activations kept in host memory */
} zb_layout;

/* The plain layout: t = c = 1, no SP, p = v = d = 1, ZeRO-1, no offload. */
void layout_default(zb_layout *l);

/* GPUs the layout takes: tp * cp * pp * dp. */
long layout_gpus(const zb_layout *l);

/* 1 when l differs from pipeline x data parallel with ZeRO-1 and no
 * offload (tp, cp > 1, zero > 1 or offload > 0), else 0. */
int layout_is_extended(const zb_layout *l);

/* Checks l for model m on GPUs with gpus_per_node per node: every size
 * >= 1, tp and cp powers of two with tp * cp <= gpus_per_node, tp
 * dividing the attention heads, the KV heads and d_ff, the sequence
 * dividing into 2 * cp chunks (load-balanced causal CP), sp only with
 * tp > 1, zero in 1..3, offload in [0, 1].  m may be NULL (shape checks
 * skipped).  Returns 0 or -1 with err naming the figure. */
int layout_check(const zb_layout *l, const zb_model *m, int gpus_per_node, zb_err *err);

/* "tp4+sp cp2 pp8 v2 dp2 zero3 off0.5" (parts equal to the default left
 * out, "pp1 dp1" at least) into buf; returns buf. */
const char *layout_text(const zb_layout *l, char *buf, size_t len);

/* The layout's JSON object: {"tensor_parallel", "sequence_parallel",
 * "pipeline_parallel", "chunks", "data_parallel", "context_parallel",
 * "zero", "offload"}; NULL when memory runs out. */
cJSON *layout_to_json(const zb_layout *l);

/* Reads layout_to_json's object; missing keys keep *l's values (call
 * layout_default first), unknown keys and out-of-range values are
 * refused.  Returns 0 or -1 with err naming the key. */
int layout_from_json(const cJSON *obj, zb_layout *l, zb_err *err);

/* Parses "1", "2" or "3" (also "fsdp" for 3) into a ZeRO level; -1 when
 * the text is none of them. */
int layout_parse_zero(const char *text);

#endif
