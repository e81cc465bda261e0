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

#include "src/cost_memory.h"
#include "src/cost_parts.h"
#include "src/model.h"
#include "src/profile.h"
#include "src/sched.h"


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

/* Fills stage[n_stages] for a pipeline of n_stages virtual stages.  When
 * the embedding is tied and first_last_same_device is 0 the last stage holds
 * its own copy of the matrix (as Megatron does).  Returns 0 or -1. */
int cost_stages(const zb_model *m, const zb_gpu *g, const cost_options *o, int n_stages,
                int first_last_same_device, cost_stage *stage, zb_err *err);

/* The runtime reserve per device under o: the measured profile's when it
 * has one, else o->reserve_bytes. */
double cost_reserve_bytes(const cost_options *o);

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

/* A lower bound of the largest static memory (cost_fill_sched's
 * mem_static, with or without vocabulary parallelism) over the devices of
 * any placement of model m on p devices under o, whatever its split,
 * recompute and micro-batch: the transformer layers' state (weights,
 * gradients, optimizer; ZeRO as o says) and p runtime reserves, spread
 * evenly over the p devices.  The embedding's and head's state (which
 * vocabulary parallelism may shard) and the transients are left out, so
 * that no placement holds less.  When it exceeds the memory limit,
 * nothing on p devices fits.  Stores it in *bytes; 0, or -1 with err. */
int cost_static_floor(const zb_model *m, const zb_gpu *g, const cost_options *o, int p, double *bytes,
                      zb_err *err);

/* Useful FLOPs (F+B+W, no recompute) of one micro-batch through the whole
 * model; MFU = m * this / (iteration time * devices * peak). */
double cost_model_flops(const zb_model *m, const cost_options *o);

/* Total parameter count of the model (tied embedding counted once):
 * param_count (src/param_count.h), the kernels' own count. */
double cost_param_count(const zb_model *m);

#endif
