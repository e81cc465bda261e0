/*
 * outer.h: outer optimizers around K replicas of a model (DiLoCo, EDiT,
 * A-EDiT) and plain data-parallel gradient averaging (the "sync" baseline),
 * over flat float buffers, with elastic replicas.
 *
 * Replicas train independently with their own inner optimizer (AdamW, owned
 * by whoever runs them: the pipeline trainer).  The outer object only sees
 * each replica's parameters as n_seg segments of fixed lengths (the same
 * layout on every replica: typically one segment per transformer layer, so
 * EDiT can synchronize layer by layer and the int8 quantizer gets one
 * scale per layer).  Every outer step, for every segment:
 *
 *   Delta_r = global_r - params_r                 (pseudo-gradient)
 *   DiLoCo:  Delta = mean over contributing r of Delta_r
 *   EDiT:    drop anomalous r (z-score of ||Delta_r||), weight the rest by
 *            softmax(-||Delta_r|| / T), Delta = sum w_r Delta_r, clip ||Delta||
 *   outer:   Nesterov SGD   mom = mu*mom + Delta;
 *                           global -= lr * (Delta + mu*mom)
 *   params_r = global_r
 *
 * The combination runs through the simulated ring all-reduce (outer_ring.h,
 * fp32 or int8) over the replicas present, and every replica keeps its own
 * copy of global and of the outer momentum (as each INTELLECT-1 node does),
 * applying the same update to bit-identical inputs: after a step all
 * replicas hold bit-identical parameters, and a replica that leaves takes
 * nothing with it.
 *
 * Elastic replicas: outer_add_replica before training defines the start
 * (the first replica's parameters become global; later ones are overwritten
 * with it).  Once training started, a joiner is overwritten with the current
 * global, sits in the ring for the next outer step with a zero pseudo-
 * gradient (not counted in the mean, given no EDiT weight) and should not
 * train until then (outer_replica_trains); this is INTELLECT-1's rule for
 * a node that arrives mid-round.  outer_remove_replica drops one at any
 * time; its unsynchronized inner steps are lost, nothing else.
 *
 * When to sync: DiLoCo and EDiT after H inner steps of the replica that has
 * done the most; A-EDiT after a wall-clock interval (injectable clock) once
 * the replicas did at least min_total_steps steps in total, with EDiT
 * weights blended with each replica's share of the steps.
 *
 * Workload: K <= 64 replicas, up to ~10^8 parameters each; memory is three
 * extra copies per replica (global, momentum, pseudo-gradient).  Not thread
 * safe: one thread drives it between inner steps.
 */
#ifndef ZB_OUTER_H
#define ZB_OUTER_H

#include <stddef.h>
#include <stdint.h>

#include "src/err.h"
#include "runtime/outer/outer_ring.h"

typedef enum outer_kind {
    OUTER_SYNC = 0,   /* data parallel: gradients averaged every step */
    OUTER_DILOCO = 1, /* DiLoCo: mean pseudo-gradient every H steps */
    OUTER_EDIT = 2,   /* EDiT: per-layer penalty, every H steps */
    OUTER_AEDIT = 3,  /* A-EDiT: EDiT on a wall-clock interval */
} outer_kind;

/* A clock in seconds; ctx is outer_config.clock_ctx. */
typedef double (*outer_clock_fn)(void *ctx);

typedef struct outer_config {
    outer_kind kind;          /* which outer optimizer */
    outer_wire wire;          /* all-reduce payload: fp32 or int8 */
    int inner_steps;          /* H: inner steps between syncs (DiLoCo, EDiT) */
    float outer_lr;           /* outer learning rate (DiLoCo: 0.7) */
    float outer_momentum;     /* Nesterov momentum (DiLoCo: 0.9) */
    double edit_temperature;  /* softmax temperature T of the EDiT weights (1) */
    double edit_clip;         /* phi: clip of the combined pseudo-gradient norm; <= 0 off (10) */
    double edit_alpha;        /* EWMA rate of the anomaly detector (0.02) */
    int edit_warmup;          /* syncs before anomalies are detected (100) */
    double edit_threshold;    /* base z-score threshold (3) */
    double aedit_interval_s;  /* A-EDiT: seconds between syncs (600) */
    long aedit_min_steps;     /* A-EDiT: fewest total steps since the last sync (100) */
    double aedit_step_weight; /* A-EDiT: r, blend of weights with step shares (0.5) */
    outer_clock_fn clock;     /* A-EDiT clock; NULL: CLOCK_MONOTONIC */
    void *clock_ctx;          /* passed to clock */
} outer_config;

/* What one outer step did. */
typedef struct outer_step_info {
    int ring_size;         /* replicas in the all-reduce */
    int contributors;      /* replicas whose pseudo-gradient could count */
    int eliminated;        /* EDiT: (replica, segment) pairs dropped as anomalous */
    int clipped;           /* EDiT: segments whose pseudo-gradient was clipped */
    int skipped_segments;  /* segments with no surviving contribution */
    double delta_norm;     /* norm of the pseudo-gradient applied (all segments) */
} outer_step_info;

typedef struct outer_t outer_t;

/* Fills c with the defaults above for kind (H = 50, fp32). */
void outer_config_default(outer_config *c, outer_kind kind);

/* "sync", "diloco", "edit", "a-edit". */
const char *outer_kind_name(outer_kind k);

/* Parses a name of outer_kind_name; returns the kind or -1. */
int outer_kind_parse(const char *text);

/* Creates an outer optimizer for replicas of n_seg segments of the given
 * lengths (copied).  Returns 0 and stores it in *out (caller frees with
 * outer_free), or -1 with err set when the configuration is invalid (H < 1,
 * lr or momentum out of range, ...) or memory runs out. */
int outer_new(const outer_config *cfg, int n_seg, const size_t *seg_len,
              outer_t **out, zb_err *err);

/* Frees o and its per-replica state (never the registered buffers). */
void outer_free(outer_t *o);

/* Registers a replica whose parameters live in params[0..n_seg) (each
 * seg_len[i] floats) and, for OUTER_SYNC, whose gradients live in
 * grads[0..n_seg) (NULL otherwise).  Both pointer arrays are copied; the
 * buffers stay the caller's and must live until outer_remove_replica or
 * outer_free.  See the header comment for what happens to the parameters.
 * Returns the replica id (>= 0, stable until it is removed), or -1 with err
 * set (memory, joining a running sync-mode run). */
int outer_add_replica(outer_t *o, float *const *params, float *const *grads, zb_err *err);

/* Removes replica id (its state is freed).  Returns 0, or -1 with err set
 * when id is not present or it is the last replica. */
int outer_remove_replica(outer_t *o, int id, zb_err *err);

/* Number of replicas present; fills ids[0..) (may be NULL) in id order. */
int outer_replicas(const outer_t *o, int *ids);

/* 1 when replica id should run inner steps now (0 for a joiner waiting for
 * the next outer step, or an absent id). */
int outer_replica_trains(const outer_t *o, int id);

/* Records that replica id took one inner step (drives H and A-EDiT). */
void outer_note_step(outer_t *o, int id);

/* Inner steps replica id took since the last outer step (0 if absent). */
long outer_steps_since_sync(const outer_t *o, int id);

/* 1 when an outer step is due (never for OUTER_SYNC).  For A-EDiT this
 * exchanges the step counters (counted in the traffic). */
int outer_should_sync(outer_t *o);

/* Runs one outer step (see the header).  Returns 0, or -1 with err set when
 * a DiLoCo pseudo-gradient is not finite (then nothing changed: every
 * replica's parameters, global and momentum are as before) or memory runs
 * out (state unspecified).  EDiT drops a non-finite replica as an anomaly
 * instead.  info may be NULL. */
int outer_step(outer_t *o, outer_step_info *info, zb_err *err);

/* OUTER_SYNC: replaces every replica's gradients by their mean over the
 * replicas, through the ring all-reduce.  Returns 0 or -1 with err set. */
int outer_sync_grads(outer_t *o, zb_err *err);

/* Traffic so far (all all-reduces and exchanges). */
const outer_ring_stats *outer_traffic(const outer_t *o);

/* Outer steps taken so far. */
long outer_step_count(const outer_t *o);

/* Replica id's copy of the global parameters of segment seg (NULL when
 * absent or in sync mode); read-only for callers. */
const float *outer_global(const outer_t *o, int id, int seg);

/* Replica id's outer momentum of segment seg (NULL when absent). */
const float *outer_momentum(const outer_t *o, int id, int seg);

/* One Nesterov step on n floats: mom = mu*mom + delta; x -= lr*(delta +
 * mu*mom).  Exposed for tests and for the CUDA twin. */
void outer_nesterov(float *x, float *mom, const float *delta, size_t n, float lr, float mu);

/* The outer optimizer's state for a checkpoint: everything but the
 * replicas' live parameters (their trainers' checkpoints hold those): the
 * counters, each replica slot's progress since the last outer step, each
 * present replica's global copy and momentum, and EDiT's anomaly
 * detectors.  A-EDiT's clock is not saved (wall time does not resume).
 * Stores a malloc'd buffer (caller frees) and its size; 0, or -1 with err
 * set (memory). */
int outer_state_save(const outer_t *o, void **buf, size_t *len, zb_err *err);

/* Restores what outer_state_save wrote into o, created with the same
 * configuration and segment layout and with the same replica ids
 * registered (their parameters already loaded).  Refuses (-1, err set, o
 * unchanged) a buffer of another kind, layout or set of replicas, or of
 * the wrong size; 0 otherwise. */
int outer_state_load(outer_t *o, const void *buf, size_t len, zb_err *err);

#endif
