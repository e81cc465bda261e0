/*
 * sched.h: the schedule model, the one data structure every part of zbsched
 * shares (generators and solvers write it, the validator, simulator and
 * renderers read it, the runtime executes it).
 *
 * A schedule is p devices, m micro-batches and S virtual stages (model chunks
 * numbered in model order: stage 0 holds the embedding, stage S-1 the head
 * and loss).  Each virtual stage lives on exactly one device; a device holds
 * one stage (plain pipelines), several interleaved ones (Megatron's
 * interleaved 1F1B) or a V pair (ZB-V: device d holds stages d and 2p-1-d).
 * Each device has an ordered list of ops; the order IS the schedule.
 *
 * Op kinds follow the zero-bubble paper: F (forward), B (backward for the
 * input gradient), W (backward for the weight gradient) and BW (B and W
 * fused, as classic 1F1B does).  For every stage and micro-batch a complete
 * schedule has one F and either one BW or one B followed later by one W.
 *
 * Costs (time per op) and memory deltas (activation memory an op adds or
 * frees) are per virtual stage, because real stages differ: the first holds
 * the embedding, the last the LM head and loss.  T_BW = T_B + T_W and
 * dBW = dB + dW.  Units are whatever the producer chose; the file records
 * them in time_unit / mem_unit for the humans who read it.
 *
 * Expected workload: up to a few hundred thousand ops (p=64, m=1024, 1F1B),
 * built once, read many times; ops are stored in flat arrays per device.
 */
#ifndef ZB_SCHED_H
#define ZB_SCHED_H

#include <assert.h>

#include <stdint.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "src/err.h"

typedef enum op_kind {
    OP_F = 0,  /* forward */
    OP_B = 1,  /* backward, input gradient only */
    OP_W = 2,  /* backward, weight gradient only */
    OP_BW = 3, /* backward, input and weight gradients fused */
    OP_S = 4,  /* vocabulary parallelism: S pass of one output-layer shard */
    OP_T = 5,  /* vocabulary parallelism: T pass of one output-layer shard */
} op_kind;

/* Kinds of the plain pipeline (F, B, W, BW): per stage and micro-batch. */
#define OP_PIPE_KIND_COUNT 4
/* Every kind, the vocabulary passes included. */
#define OP_KIND_COUNT 6

/* Whether k is one of the vocabulary passes (S, T).  Their sched_op.stage
 * holds the vocabulary shard, which is the device that runs it, not a
 * virtual stage (docs/vocab-parallel.md). */
#define OP_IS_VOCAB(k) ((k) == OP_S || (k) == OP_T)

typedef struct sched_op {
    uint8_t kind;  /* an op_kind */
    int32_t stage; /* virtual stage, 0..n_stages-1, in model order; for S and T
                    * the vocabulary shard 0..n_devices-1 (= its device) */
    int32_t mb;    /* micro-batch, 0..n_micro-1 */
} sched_op;

typedef struct stage_cost {
    double t_f, t_b, t_w; /* time of one F, B, W op on this stage */
    double d_f, d_b, d_w; /* activation memory delta of one F, B, W op */
} stage_cost;

/* Vocabulary parallelism (Yeung, Qi et al. 2024; docs/vocab-parallel.md).
 * When variant is not SCHED_VOCAB_NONE the output layer (head, softmax,
 * loss) is not part of stage S-1: it is split into p vocabulary shards,
 * shard d on device d, and each device runs one S and one T pass per
 * micro-batch.  The softmax's cross-shard reductions are all-reduce
 * barriers over all devices, run on a side stream (they hold no lane):
 *   Vocab-1: S(*,j) -> C0(j) -> T(*,j) and B(S-1,j);
 *   Vocab-2: S(*,j) -> C0(j) -> T(*,j) -> C1(j) -> B(S-1,j).
 * S(d,j) also waits for F(S-1,j)'s output, broadcast from its device. */
typedef enum sched_vocab_variant {
    SCHED_VOCAB_NONE = 0, /* head and loss inside stage S-1 (format version 1) */
    SCHED_VOCAB_1 = 1,    /* one barrier per micro-batch (input gradient fused into S) */
    SCHED_VOCAB_2 = 2,    /* two barriers per micro-batch (input gradient in T) */
} sched_vocab_variant;

typedef struct sched_vocab {
    int variant;       /* a sched_vocab_variant */
    double t_s, t_t;   /* time of one S / T pass of one shard */
    double d_s, d_t;   /* memory delta of one S / T pass (S keeps the shard's
                        * logits or their gradient until T frees them) */
    double t_c0, t_c1; /* duration of barrier C0 / C1 (all-reduce over all
                        * devices); t_c1 unused by Vocab-1 */
} sched_vocab;

typedef struct sched_lane {
    int n_ops;     /* ops in execution order on this device */
    int cap;       /* allocated length of ops (and start/end when present) */
    sched_op *ops; /* [cap] */
    double *start; /* [cap] measured start of each op, or NULL when not measured */
    double *end;   /* [cap] measured end of each op, or NULL when not measured */
} sched_lane;

typedef struct sched_t {
    char name[64];        /* generator kind or a free label, e.g. "zb-h1" */
    int n_devices;        /* p */
    int n_micro;          /* m */
    int n_stages;         /* S, virtual stages (p * chunks for regular layouts) */
    int *stage_device;    /* [n_stages] device that runs each virtual stage */
    stage_cost *cost;     /* [n_stages] per-stage op costs and memory deltas */
    double t_comm;        /* time to move one activation/gradient between devices */
    double *mem_limit;    /* [n_devices] activation memory limit, or NULL when none */
    double *mem_static;   /* [n_devices] static memory (params, optimizer), or NULL */
    char time_unit[16];   /* "units", "ms", "us", "s" */
    char mem_unit[16];    /* "units" or "bytes" */
    sched_vocab vocab;    /* vocabulary parallelism; variant NONE when off */
    sched_lane *dev;      /* [n_devices] ordered ops of each device */
    cJSON *meta;          /* owned object of preserved top-level extras ("solver",
                           * "model", "hardware", "predicted", ...), or NULL */
} sched_t;

/* Allocates an empty schedule with unit costs (T_F=T_B=T_W=1, T_comm=0),
 * the default memory deltas (dF=+2, dB=-1, dW=-1), no ops, and every stage
 * unplaced (stage_device = -1).  Returns NULL when a count is not positive
 * or memory runs out.  The caller owns the result (sched_free). */
sched_t *sched_new(int n_devices, int n_micro, int n_stages);

/* Frees s and everything it owns; NULL is fine. */
void sched_free(sched_t *s);

/* Returns a deep copy of s (ops, times, meta), or NULL when memory runs out. */
sched_t *sched_clone(const sched_t *s);

/* Doubles the room of lane l (sched_push's slow path).  Returns 0, or -1
 * when memory runs out (l still holds its ops, in the room it had). */
int sched_lane_grow(sched_lane *l);

/* Makes room in lane l for at least n ops at once, for a generator that
 * knows its lane's length: no doubling from 16 on the way.  Returns 0, or
 * -1 when memory runs out (l still holds its ops, in the room it had). */
int sched_lane_reserve(sched_lane *l, int n);

/* Appends an op to device dev's list.  Returns 0, or -1 when memory runs out.
 * Arguments are asserted to be in range: generators are trusted code; loaders
 * check user input before calling this.  Inline: the solvers and the
 * vocabulary placement append tens of millions of ops in one search, and
 * the call was most of the cost of each. */
static inline int sched_push(sched_t *s, int dev, op_kind kind, int stage, int mb)
{
    assert(dev >= 0 && dev < s->n_devices);
    assert(OP_IS_VOCAB(kind) || (stage >= 0 && stage < s->n_stages));
    assert(mb >= 0 && mb < s->n_micro);
    assert(kind >= OP_F && kind <= OP_T);
    assert(!OP_IS_VOCAB(kind) || stage == dev); /* shard d lives on device d */
    sched_lane *l = &s->dev[dev];
    if (l->n_ops == l->cap && sched_lane_grow(l) != 0)
        return -1;
    l->ops[l->n_ops] = (sched_op){ .kind = (uint8_t)kind, .stage = stage, .mb = mb };
    if (l->start)
        l->start[l->n_ops] = l->end[l->n_ops] = 0;
    l->n_ops++;
    return 0;
}

/* Places stages in order on devices: plain (stage s on device s % p: one
 * stage per device, or Megatron's interleaving when S = v*p) or V-shaped
 * (S = 2p: device d holds stages d and 2p-1-d). */
void sched_place_interleaved(sched_t *s);
void sched_place_v(sched_t *s);

/* Sets the same costs / memory deltas on every stage. */
void sched_set_costs(sched_t *s, double t_f, double t_b, double t_w, double t_comm);
void sched_set_mem(sched_t *s, double d_f, double d_b, double d_w);

/* Ensures lane `dev` carries measured start/end arrays (zeroed); returns
 * 0 or -1 when memory runs out. */
int sched_lane_alloc_times(sched_t *s, int dev);

/* Turns vocabulary parallelism on (variant 1 or 2) with these costs, or
 * off (SCHED_VOCAB_NONE, costs ignored).  Ops are not touched. */
void sched_set_vocab(sched_t *s, sched_vocab_variant variant, double t_s, double t_t,
                     double d_s, double d_t, double t_c0, double t_c1);

/* Whether s uses vocabulary parallelism (its variant is not NONE). */
int sched_has_vocab(const sched_t *s);

/* The later of two finite times.  fmax is a libm call at -O2 (its NaN
 * rule stops the compiler from using one instruction); the simulator and
 * the ASAP replay take it several times per op, and their times are
 * finite (sched_validate checks the costs). */
static inline double sched_later(double a, double b)
{
    return a > b ? a : b;
}

/* Time and memory delta of one op on its stage (BW = B + W; S and T from
 * s->vocab).  Inline: the simulator and the list schedulers call them for
 * every op of every candidate a search builds. */
static inline double sched_op_time(const sched_t *s, sched_op op)
{
    if (op.kind == OP_S)
        return s->vocab.t_s;
    if (op.kind == OP_T)
        return s->vocab.t_t;
    const stage_cost *c = &s->cost[op.stage];
    switch ((op_kind)op.kind) {
    case OP_F: return c->t_f;
    case OP_B: return c->t_b;
    case OP_W: return c->t_w;
    case OP_BW: return c->t_b + c->t_w;
    case OP_S:
    case OP_T: break; /* handled above */
    }
    assert(0 && "bad op kind");
    return 0;
}

static inline double sched_op_mem(const sched_t *s, sched_op op)
{
    if (op.kind == OP_S)
        return s->vocab.d_s;
    if (op.kind == OP_T)
        return s->vocab.d_t;
    const stage_cost *c = &s->cost[op.stage];
    switch ((op_kind)op.kind) {
    case OP_F: return c->d_f;
    case OP_B: return c->d_b;
    case OP_W: return c->d_w;
    case OP_BW: return c->d_b + c->d_w;
    case OP_S:
    case OP_T: break; /* handled above */
    }
    assert(0 && "bad op kind");
    return 0;
}

/* Device d's activation peak: the largest running sum of its ops' memory
 * deltas in lane order (>= 0), what sim_run reports as its peak_mem.  The
 * order alone fixes it, not the times, so a plan's memory is known before
 * it is simulated. */
double sched_lane_peak(const sched_t *s, int d);

/* Total ops over all devices. */
long sched_op_count(const sched_t *s);

/* "F", "B", "W", "BW", "S", "T". */
const char *op_kind_name(op_kind k);

/* Parses "F", "B", "W", "BW", "S", "T"; returns the kind or -1. */
int op_kind_parse(const char *str, size_t len);

/* The number of virtual stages on device dev. */
int sched_device_stage_count(const sched_t *s, int dev);

#endif
