/*
 * cost_model.h: time and memory of every virtual stage of a pipeline, from
 * a model and a GPU (FLOP-based estimate) or from a measured profile.
 *
 * The model is the zero-bubble paper's Table 1, generalised to grouped-query
 * attention and SwiGLU, with the embedding and the LM head + loss charged to
 * the first and last stage (where users run out of memory), mixed-precision
 * AdamW state with optional ZeRO-1, and a fixed runtime reserve.  Every
 * formula and constant is derived, with its source, in docs/cost-model.md.
 *
 * Units: seconds and bytes in cost_stage; cost_fill_sched writes
 * milliseconds ("ms") and bytes ("bytes") into a schedule, the units the
 * zero-bubble paper's profiles use.  Workload: called a few hundred times
 * per `zbsched search`; each call is O(stages).
 */
#ifndef ZB_COST_MODEL_H
#define ZB_COST_MODEL_H

#include "src/model.h"
#include "src/profile.h"
#include "src/sched.h"

/* Runtime reserve per GPU: CUDA context, NCCL buffers, cuBLAS/attention
 * workspaces and allocator fragmentation (docs/cost-model.md). */
#define COST_RESERVE_BYTES 3e9

/* How layers are distributed over virtual stages (cost_split_layers). */
typedef enum cost_split {
    COST_SPLIT_PAPER = 0,    /* first and last stage one layer fewer (zero-bubble paper) */
    COST_SPLIT_BALANCED = 1, /* smallest largest stage time, embedding and head weighted by their time */
} cost_split;

/* How the LM head computes its loss (cost_options.loss). */
typedef enum cost_loss {
    COST_LOSS_PLAIN = 0, /* logits materialised (bf16), fp32 log-softmax kept for the backward */
    COST_LOSS_FUSED = 1, /* fused linear + cross-entropy in token chunks (Liger-Kernel): no logits kept */
} cost_loss;

/* Recompute levels (cost_options.recompute, recompute_stage[i], and a
 * plan's recompute_stages values). */
enum {
    COST_RC_NONE = 0, /* F keeps every activation B needs */
    COST_RC_FULL = 1, /* F keeps the layer input only; B reruns the whole layer's forward */
    COST_RC_MLP = 2,  /* F drops the MLP block's activations (pre-MLP norm output, gate, up,
                       * their SwiGLU product) and keeps the block input; B reruns the
                       * norm and the MLP's three matmuls (Megatron-core's selective
                       * recompute of the "mlp" and "layernorm" modules) */
};

typedef struct cost_options {
    int recompute;             /* COST_RC_*: per-layer activation recompute level of every stage */
    const unsigned char *recompute_stage; /* [n_stages] per-virtual-stage COST_RC_* level (overrides recompute), or NULL */
    const int *layers;         /* [n_stages] explicit layer split (sums to n_layers), or NULL: the split rule */
    cost_loss loss;            /* loss kernel; default COST_LOSS_PLAIN */
    int devices_per_node;      /* consecutive pipeline devices sharing a node's fast link; 0: all */
    cost_split split;          /* layer split; default COST_SPLIT_PAPER */
    int flash_attention;       /* 1: attention scores never stored (flash attention); default 1 */
    int zero1_dp;              /* data-parallel replicas sharing optimizer state (ZeRO-1); 1 = none */
    double reserve_bytes;      /* per-GPU runtime reserve; default COST_RESERVE_BYTES */
    const zb_profile *profile; /* measured figures that replace the estimate, or NULL; borrowed */
} cost_options;

/* One piece of a stage (a transformer layer, the embedding, the head), per
 * micro-batch. */
typedef struct cost_part {
    double f_flops, b_flops, w_flops; /* matmul FLOPs of F, B, W (B includes recompute when on) */
    double useful_flops;              /* F+B+W FLOPs without recompute (for MFU) */
    double t_f, t_b, t_w;             /* seconds */
    double m_b;                       /* bytes F leaves allocated until B */
    double m_w;                       /* bytes B leaves allocated until W */
    double transient;                 /* largest short-lived allocation inside one op, bytes */
    double params;                    /* parameters held */
    double hbm_f, hbm_b;              /* bytes of memory-bound traffic in F and B (loss, unfused softmax); timed at hbm_bw */
} cost_part;

/* One virtual stage. */
typedef struct cost_stage {
    int first_layer;       /* index of its first transformer layer */
    int n_layers;          /* transformer layers it runs (may be 0 on the first/last stage) */
    int has_embedding;     /* 1 on stage 0 */
    int has_head;          /* 1 on stage S-1 */
    double t_f, t_b, t_w;  /* seconds per micro-batch */
    double m_b, m_w;       /* bytes per micro-batch, as in cost_part */
    double transient;      /* bytes, largest of its parts */
    double params;         /* parameters it holds (a tied head counts its own copy) */
    double static_bytes;   /* params + grads + optimizer state, bytes */
    double useful_flops;   /* F+B+W FLOPs per micro-batch, no recompute */
} cost_stage;

/* Defaults: no recompute, the paper's split, flash attention on, no ZeRO,
 * COST_RESERVE_BYTES, no profile, plain loss, one node. */
void cost_options_default(cost_options *o);

/* Splits n_layers transformer layers over n_stages virtual stages in model
 * order: the embedding and the head each count as one layer's worth of work,
 * so the first and last stage get one layer fewer than the others (the
 * zero-bubble paper's split), remaining layers go to the earliest middle
 * stages.  Fills layers[n_stages].  Returns 0, or -1 when some middle stage
 * would get no layer (n_stages > n_layers + 2). */
int cost_layer_split(int n_layers, int n_stages, int *layers, zb_err *err);

/* Splits n_layers over n_stages so that the largest stage load is smallest,
 * where a stage's load is its layer count, plus w_first on stage 0 (the
 * embedding's time in layers) and w_last on stage S-1 (the head's).  Middle
 * stages get at least one layer; on ties layers go to later stages (early
 * stages keep more micro-batches in flight, so fewer layers there saves
 * memory).  Fills layers[n_stages]; returns 0, or -1 when
 * n_stages > n_layers + 2 or a weight is negative. */
int cost_layer_split_balanced(int n_layers, int n_stages, double w_first, double w_last,
                              int *layers, zb_err *err);

/* The split o->split selects for model m on gpu g: the paper's, or the
 * balanced one with the embedding's and head's F+B+W time measured in
 * layers (from the estimate or the profile).  Fills layers[n_stages]. */
int cost_split_layers(const zb_model *m, const zb_gpu *g, const cost_options *o, int n_stages,
                      int *layers, zb_err *err);

/* Per-micro-batch figures of one transformer layer, the embedding and the
 * head for model m on gpu g (FLOP estimate, or o->profile when set).
 * Returns 0, or -1 when the profile does not match the model (seq_len). */
int cost_parts(const zb_model *m, const zb_gpu *g, const cost_options *o,
               cost_part *layer, cost_part *embedding, cost_part *head, zb_err *err);

/* Bytes of static state (weights, gradients, optimizer) per parameter. */
double cost_bytes_per_param(const zb_model *m, const cost_options *o);

/* Seconds to send one activation (or its gradient) between stages over
 * the intra-node link (the profile's t_comm when it has one). */
double cost_t_comm(const zb_model *m, const zb_gpu *g, const cost_options *o);

/* Seconds one transfer between pipeline devices d1 != d2 occupies both:
 * latency + bytes / bandwidth of the intra- or inter-node link
 * (o->devices_per_node); 0 when d1 == d2. */
double cost_t_transfer(const zb_model *m, const zb_gpu *g, const cost_options *o, int d1, int d2);

/* Virtual stage i's recompute level under o (COST_RC_*; nonzero when it
 * recomputes at all). */
int cost_stage_recomputes(const cost_options *o, int i);

/* Fills stage[n_stages] for a pipeline of n_stages virtual stages.  When
 * the embedding is tied and first_last_same_device is 0 the last stage holds
 * its own copy of the matrix (as Megatron does).  Returns 0 or -1. */
int cost_stages(const zb_model *m, const zb_gpu *g, const cost_options *o, int n_stages,
                int first_last_same_device, cost_stage *stage, zb_err *err);

/* Sets s's per-stage costs (ms) and memory deltas (bytes: dF = m_b,
 * dB = m_w - m_b, dW = -m_w), and mem_static per device.  Transfers are
 * blocking (Megatron's P2P, the zero-bubble runtime): each F whose next
 * stage sits on another device, and each B whose previous stage does,
 * carries one cost_t_transfer, so interleaving pays per virtual-stage
 * boundary and the V turn pays nothing; t_comm is then 0 (the data has
 * arrived when the op ends).  Per device:
 * (bytes: static state of its stages + the largest transient + reserve),
 * for whatever placement s has (every stage must be placed).  Sets
 * time_unit "ms" and mem_unit "bytes".  Returns 0 or -1 with err set. */
int cost_fill_sched(const zb_model *m, const zb_gpu *g, const cost_options *o, sched_t *s, zb_err *err);

/* Useful FLOPs (F+B+W, no recompute) of one micro-batch through the whole
 * model; MFU = m * this / (iteration time * devices * peak). */
double cost_model_flops(const zb_model *m, const cost_options *o);

/* Total parameter count of the model (tied embedding counted once). */
double cost_param_count(const zb_model *m);

/* --- Memory layers (docs/memory-layers.md, docs/cost-model.md).  Kept in
 * cost_memory.c, apart from the layer estimate: a memory layer is costed as
 * a plain layer plus a delta that swaps its FFN for the memory block. --- */

/* The per-micro-batch difference between a memory layer and a plain layer
 * of m (FLOPs and times of F, B, W; M_B; M_W; parameters, without the value
 * table when it is shared), and the value table's parameters.  Times use
 * g's peak and efficiency even with a profile (the profile measures plain
 * layers only); the value rows' gathers are timed at g->hbm_bw when
 * set.  delta->transient is the change of the recompute transient. */
void cost_memory_delta(const zb_model *m, const zb_gpu *g, const cost_options *o,
                       cost_part *delta, double *value_table_params);

/* Useful FLOPs (F+B+W, no recompute) the memory layers change in one
 * micro-batch against the plain model (negative: they do less than the
 * FFNs they replace); 0 without memory layers.  For cost_model_flops. */
double cost_memory_flops_delta(const zb_model *m, const cost_options *o);

/* Parameters the memory layers add to cost_param_count's plain model (0
 * without memory layers). */
double cost_memory_param_delta(const zb_model *m);

/* Adds the memory layers of st's layer range to st, virtual stage number
 * `stage` (times, activations, parameters, static bytes; a shared value
 * table to the stage holding the first memory layer), under that stage's
 * recompute setting (cost_stage_recomputes).  No-op without memory layers. */
void cost_memory_stage_adjust(const zb_model *m, const zb_gpu *g, const cost_options *o,
                              int stage, cost_stage *st);

/* The split of a model with memory layers, by time and then memory: the
 * smallest largest stage time T* over contiguous splits (embedding time on
 * stage 0, head on S-1, middle stages at least one layer, a shared value
 * table's layers all on one stage), then among the splits whose largest
 * stage time is within COST_MEMORY_TIME_SLACK of T*, the one whose largest
 * static state (weights, gradients, optimizer) is smallest.  Fills
 * layers[n_stages]; returns 0 or -1 (too few layers, no split keeps a shared
 * table together, or the model too large for the O(S·L²) search). */
int cost_split_layers_memory(const zb_model *m, const zb_gpu *g, const cost_options *o,
                             int n_stages, int *layers, zb_err *err);

/* Slack on the largest stage time that cost_split_layers_memory may spend
 * to reduce the largest static state. */
#define COST_MEMORY_TIME_SLACK 0.05

#endif
