/*
 * cost_vocab.h: the cost model of vocabulary parallelism (docs/vocab-parallel.md).
 *
 * With vocabulary parallelism the output layer (final projection, softmax,
 * loss) and the input embedding are split by vocabulary over all p pipeline
 * devices.  This file prices one shard: the S and T passes' time, the
 * all-reduce barriers C0 and C1 over the pipeline's link, the memory the S
 * pass holds until its T (sharded logits, or with a fused loss only the
 * head input and three statistics per token), the shards' static memory,
 * and the embedding's two collectives.  cost_vocab_fill_sched turns a
 * schedule priced by cost_fill_sched (head on stage S-1, embedding on stage
 * 0) into its vocabulary-parallel version's costs.
 *
 * Kept apart from cost_model.c (which prices the transformer stages) so
 * that the two evolve separately; it reads that model only through
 * cost_model.h.  Units as there: seconds and bytes in cost_vocab, ms and
 * bytes written into a schedule.
 */
#ifndef ZB_COST_VOCAB_H
#define ZB_COST_VOCAB_H

#include "src/cost_model.h"

/* Achieved fraction of the ideal p-fold speed-up of the sharded output
 * layer that Yeung, Qi et al. measured on 8 GPUs (their Table 5 setting). */
#define COST_VOCAB_PAPER_SCALING 0.932

typedef struct cost_vocab_options {
    int variant;    /* 1: Vocab-1 (one barrier), 2: Vocab-2 (two barriers) */
    double scaling; /* achieved fraction of ideal shard speed-up, (0, 1]; default 1 */
    int whole_state; /* 1: the head's and embedding's weights, gradients and
                      * moments stay whole on the last stage and stage 0, as
                      * zbsched's runtime keeps them (only their compute is
                      * sharded: docs/vocab-parallel.md, "What is not done");
                      * 0 (default): v*h/p of each per device, the paper's */
} cost_vocab_options;

/* One shard's figures, per micro-batch. */
typedef struct cost_vocab {
    int shards;            /* p */
    double shard_vocab;    /* vocabulary entries per shard, ceil(V / p) */
    double s_flops;        /* matmul FLOPs of one S pass */
    double t_flops;        /* matmul FLOPs of one T pass */
    double t_s, t_t;       /* seconds of one S / T pass (FLOPs and memory traffic) */
    double c0_bytes;       /* bytes all-reduced by barrier C0 */
    double c1_bytes;       /* bytes all-reduced by barrier C1 (Vocab-2; else 0) */
    double t_c0, t_c1;     /* seconds of the barriers (ring all-reduce over p) */
    double t_bcast;        /* seconds to broadcast the head input from the last stage */
    double m_s;            /* bytes an S pass holds until its T frees them */
    double head_static;    /* bytes of static state (weights, grads, optimizer) of a head shard */
    double emb_static;     /* bytes of static state of an embedding shard */
    double t_emb_f;        /* seconds: all-reduce of the embedding output (forward) */
    double t_emb_b;        /* seconds: broadcast of its gradient to the shards (backward) */
} cost_vocab;

/* Defaults: Vocab-1, scaling 1 (ideal). */
void cost_vocab_options_default(cost_vocab_options *vo);

/* Seconds of a ring all-reduce of `bytes` over p devices on gpu g's
 * pipeline link (the inter-node link when o->devices_per_node splits the
 * p devices over nodes): 2(p-1)/p * bytes / bandwidth + 2(p-1) latencies;
 * 0 when p == 1. */
double cost_vocab_allreduce(const zb_gpu *g, const cost_options *o, int p, double bytes);

/* Prices one shard of model m on gpu g over p devices with o's loss kind
 * (COST_LOSS_FUSED: no logits held from S to T; T recomputes them).
 * Returns 0, or -1 with err set for a bad model, p < 1 or a bad option.
 * A profile in o is not used: profiles measure the whole head. */
int cost_vocab_parts(const zb_model *m, const zb_gpu *g, const cost_options *o, int p,
                     const cost_vocab_options *vo, cost_vocab *out, zb_err *err);

/* s was priced by cost_fill_sched(m, g, o, s) and has no vocabulary
 * passes yet.  Moves the head off stage S-1 (its time, activation memory
 * and static state) and the embedding's static state off stage 0, adds a
 * head and an embedding shard's static state to every device, charges the
 * head input's broadcast to stage S-1's F and the embedding's collectives
 * to stage 0's F and W, and sets s->vocab (ms, bytes).  The caller inserts
 * the passes (gen_vocab_insert).  Fills *out when not NULL.  Returns 0 or
 * -1 with err set. */
int cost_vocab_fill_sched(const zb_model *m, const zb_gpu *g, const cost_options *o,
                          const cost_vocab_options *vo, sched_t *s, cost_vocab *out, zb_err *err);

#endif
