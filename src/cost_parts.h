/*
 * cost_parts.h: the cost model's options and its pieces: the figures of one
 * transformer layer, the embedding and the head per micro-batch (FLOPs,
 * times, activation memory, parameters), from the FLOP estimate or a
 * measured profile, and the per-parameter and per-transfer costs they are
 * priced with.  The lowest layer of the cost model: cost_memory.h adds
 * memory layers to these parts and cost_model.h assembles stages and
 * schedules from both; neither is called from here.
 *
 * Every formula and constant is derived, with its source, in
 * docs/cost-model.md.  Units: seconds and bytes.
 */
#ifndef ZB_COST_PARTS_H
#define ZB_COST_PARTS_H

#include "src/layout.h"
#include "src/model.h"
#include "src/profile.h"
#include "src/sched.h"

/* Runtime reserve per GPU: CUDA context, NCCL buffers, cuBLAS/attention
 * workspaces and allocator fragmentation (docs/cost-model.md). */
#define COST_RESERVE_BYTES 3e9

/* Seconds per step of a ring collective inside the NVLink domain (TP, CP,
 * ZeRO-3 within a node): assumed, the order of NCCL's small-message
 * all-reduce latency over 8 GPUs divided by its 14 steps
 * (docs/cost-model.md, "Layouts"). */
#define COST_COLLECTIVE_STEP_LATENCY 5e-6

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
    COST_RC_ATTN = 3, /* F drops the attention core's internals (scores, softmax, its
                       * dropout) and keeps Q, K, V; B reruns QK^T, softmax and AV
                       * (Korthikanti et al. 2022's "selective" recompute, Megatron's
                       * --recompute-granularity selective, core_attn) */
};
#define COST_RC_LAST COST_RC_ATTN /* the highest level */

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
    zb_layout layout;          /* tensor/sequence/context parallel sizes, sharding level and
                                * offload fraction every stage is priced under (src/layout.h);
                                * its pp, chunks and dp are carried, not priced here (the
                                * sharding width is zero1_dp); a zeroed layout reads as the
                                * default one */
    int tp_comm_overlap;       /* 1 (default): TP collectives run under their GEMMs as Megatron's
                                * --tp-comm-overlap does; 0: every collective is exposed */
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
    double hbm_f, hbm_b;              /* bytes of memory-bound traffic in F and B (norms, residual joins,
                                       * activations, unfused softmax and dropout, loss); timed at hbm_bw */
} cost_part;

/* Defaults: no recompute, the paper's split, flash attention on, no ZeRO,
 * COST_RESERVE_BYTES, no profile, plain loss, one node, the plain layout
 * (layout_default) with TP overlap on. */
void cost_options_default(cost_options *o);


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


/* Seconds of one optimizer step over `params` parameters held by one GPU:
 * the mixed-precision AdamW step is memory-bound, so its bytes per
 * parameter over the HBM bandwidth (docs/cost-model.md, "Memory-bound
 * work"); ZeRO-1 and above shard the state's share over o->zero1_dp.
 * Not part of a schedule's makespan: it runs once per iteration, after
 * the pipeline drains; 0 when g has no HBM bandwidth. */
double cost_t_optimizer_step(const zb_model *m, const zb_gpu *g, const cost_options *o, double params);

/* The layout's sizes as the cost model reads them: tp, cp >= 1, sp only
 * with tp > 1, zero in 1..3, offload in [0, 1] (a zeroed layout is the
 * default one). */
int cost_tp(const cost_options *o);
int cost_cp(const cost_options *o);
int cost_sp(const cost_options *o);
int cost_zero(const cost_options *o);
double cost_offload(const cost_options *o);

/* Virtual stage i's recompute level under o (COST_RC_*; nonzero when it
 * recomputes at all). */
int cost_stage_recomputes(const cost_options *o, int i);

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

/* Useful FLOPs (F+B+W, no recompute) of one micro-batch through the plain
 * model: its layers as plain layers, and the head (cost_model_flops adds
 * the memory layers' difference). */
double cost_parts_flops(const zb_model *m, const cost_options *o);

#endif
