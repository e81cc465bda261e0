/*
 * islands.h: K replicas of the pipeline trainer ("islands" of GPUs in
 * INTELLECT-1's sense), each executing the schedule on its own data
 * stream, joined by an outer optimizer (outer.h): DiLoCo, EDiT, A-EDiT, or
 * the synchronous data-parallel baseline.
 *
 * Every replica is a trainer (runtime/trainer.h) built with the same seed
 * (identical initial weights) and data stream = its replica number, so the
 * replicas see different batches.  Its parameters are handed to the outer
 * optimizer as one segment per layer group of every stage (embedding,
 * each transformer layer, final norm + head), so EDiT synchronizes layer
 * by layer and the int8 all-reduce gets one codebook per layer chunk.
 * Replicas step one after another in the calling thread (each trainer runs
 * its own device threads), which keeps the run deterministic.
 *
 * The sync baseline is real data parallelism: the K trainers each run
 * trainer_backward, outer_sync_grads averages their gradients through the
 * ring all-reduce (one per segment, fp32 or int8, the bytes actually sent
 * counted), and each runs trainer_apply on the mean.  The replicas stay
 * bit-identical, which is checked after every step.  With io->zero1 the
 * all-reduce is split around the optimizer step (zero1.h): reduce-scatter,
 * each replica steps its 1/K shard with its 1/K of the AdamW state, then
 * all-gather; the same bits.
 *
 * Elastic replicas: a list of events (at inner step t, replica r leaves, or
 * a new one joins) is applied between steps; a joiner gets a fresh trainer
 * on a new data stream, is given the global parameters and waits for the
 * next outer step (outer.h).
 *
 * Workload: `tiny` / `shakespeare-char` models, K <= 16, a few hundred to a
 * few thousand steps.
 */
#ifndef ZB_OUTER_ISLANDS_H
#define ZB_OUTER_ISLANDS_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "runtime/run_record.h"
#include "src/err.h"
#include "src/model.h"
#include "src/sched.h"
#include "runtime/data.h"
#include "runtime/trainer.h"
#include "runtime/outer/outer.h"

typedef enum islands_event_kind {
    ISLANDS_LEAVE = 0, /* replica `replica` leaves before step `step` */
    ISLANDS_JOIN = 1,  /* a new replica joins before step `step` */
} islands_event_kind;

typedef struct islands_event {
    long step;                /* applied before this 0-based inner step */
    islands_event_kind kind;  /* leave or join */
    int replica;              /* LEAVE: replica id (0..); JOIN: ignored */
} islands_event;

typedef struct islands_opts {
    int replicas;                /* K, initial replicas (>= 1) */
    long steps;                  /* N inner steps per replica */
    outer_config outer;          /* outer optimizer, all-reduce, H, lr, ... */
    int eval_every;              /* > 0: validation loss every this many steps */
    const islands_event *events; /* [n_events] sorted by step, or NULL */
    int n_events;                /* elastic events */
    long max_skipped;            /* > 0: a replica with this many consecutive
                                    steps skipped (gradient not finite) stops
                                    the run; 0: never */
    double max_loss_factor;      /* > 0: divergence rule 4 of runtime/job.h
                                    (islands_run); 0: off */
    int zero1;                   /* sync only: ZeRO-1 (zero1.h), each replica keeps
                                    and steps 1/K of the optimizer state */
} islands_opts;

typedef struct islands_result {
    long steps;            /* inner steps run */
    double *loss;          /* [steps] mean training loss of the replicas that trained */
    double *val_loss;      /* [steps] validation loss where evaluated, else NAN */
    double final_val_loss; /* validation loss of the final (synchronized) model */
    uint64_t bytes_sent;   /* all traffic between replicas, summed over links */
    long outer_steps;      /* outer synchronizations taken */
    long eliminated;       /* EDiT: (replica, layer) contributions dropped */
    long skipped;          /* EDiT: (outer step, layer) pairs left unchanged, all dropped */
    int final_replicas;    /* replicas present at the end */
    long tokens;           /* training tokens consumed by all replicas */
    double wall_s;         /* wall seconds of the run */
    size_t optimizer_bytes; /* AdamW m and v one replica holds (replica 0; with
                               ZeRO-1 about 1/K of the unsharded figure) */
} islands_result;

/* A replica's parameters as the outer optimizer sees them: one segment per
 * run of consecutive tensors of the same layer within each stage.  Shared
 * with the islands across processes (runtime/mpi/mpi_islands.h), which
 * must cut the parameters the same way to give the same bits. */
typedef struct islands_seg_layout {
    int n;          /* segments */
    int *stage;     /* [n] stage of each segment */
    size_t *off;    /* [n] first float within the stage's buffer */
    size_t *len;    /* [n] floats */
} islands_seg_layout;

/* Groups every stage's tensors of t (in layout order) into layer segments.
 * Returns 0, or -1 with err set (memory); free with islands_seg_layout_free. */
int islands_seg_layout_build(trainer *t, islands_seg_layout *l, zb_err *err);

/* Frees what islands_seg_layout_build allocated (l is zeroed). */
void islands_seg_layout_free(islands_seg_layout *l);

/* ptr[i] = where segment i of l lives in t's parameters (or gradients). */
void islands_seg_pointers(trainer *t, const islands_seg_layout *l, float **ptr);
void islands_seg_grad_pointers(trainer *t, const islands_seg_layout *l, float **ptr);

/* Fills o: K = 4, 200 steps, DiLoCo defaults (outer_config_default), no
 * intermediate evaluation, no events, no divergence rules. */
void islands_opts_default(islands_opts *o);

/* The islands of one run, stepped by the job loop (runtime/job.h). */
typedef struct islands islands;
struct job_way;

/* Creates the K replicas' trainers from (s, m, d, base) (base->data_stream
 * replaced per replica: replica r gets stream r, joiners the next ones)
 * and the outer optimizer.  s, m, d and io->events are borrowed and must
 * outlive *out.  Returns 0, or -1 with err set (invalid options, a
 * trainer failure). */
int islands_create(const sched_t *s, const zb_model *m, const zb_data *d,
                   const trainer_opts *base, const islands_opts *io, islands **out, zb_err *err);

/* Frees x and its trainers; NULL is fine. */
void islands_free(islands *x);

/* Fills *w with the way of running x (one process):
 *   steps     one inner step: the step's elastic events, then every
 *             replica that trains (sync: every replica's backward, the
 *             gradient all-reduce, every apply); each replica's loss and
 *             skip are the job's members, so the divergence rules name
 *             the replica;
 *   boundary  the outer step when it is due (sync: the check that the
 *             replicas are still bit-identical, which would be a bug);
 *   eval      the lowest present replica;
 *   finish    the final outer step when inner steps are pending, so that
 *             the final evaluation is of the synchronized model. */
void islands_way(islands *x, struct job_way *w);

struct zero1_ckpt;

/* Around a checkpoint of sync replicas under ZeRO-1 (zero1.h): begin
 * gathers the whole AdamW moments from the shards into every replica's
 * trainer, so that trainer_save / trainer_load of any replica writes or
 * reads the whole optimizer state (the file an unsharded run writes); end
 * splits what was loaded (loaded != 0) back into the shards and frees the
 * whole moments.  Without ZeRO-1 both do nothing.  begin: 0, or -1 with
 * err (memory). */
int islands_checkpoint_begin(islands *x, struct zero1_ckpt *c, zb_err *err);
void islands_checkpoint_end(islands *x, struct zero1_ckpt *c, int loaded);

/* x's outer figures into r: bytes_sent, outer_steps, eliminated,
 * skipped, final_replicas, optimizer_bytes (the other fields untouched). */
void islands_totals(const islands *x, islands_result *r);

/* Runs the islands for io->steps inner steps through the job loop
 * (islands_create, islands_way, job_run), then fills *res (free with
 * islands_result_free).  Returns 0, or -1 with err set (invalid options,
 * a trainer failure, a non-finite DiLoCo pseudo-gradient, an event naming
 * an absent replica, sync replicas that diverged, which would be a bug).
 *
 * Divergence stops the run at once, the rules of the single-trainer
 * `run` (runtime/job.h) with io->max_skipped and io->max_loss_factor: a
 * replica whose training loss is not finite, or whose last
 * io->max_skipped steps were all skipped, fails the call right after
 * that step with err naming the 1-based step, the replica id and why
 * ("step 2: replica 1: the training loss is NaN ..."); no later step or
 * outer sync runs.  An evaluation (io->eval_every) whose loss is not
 * finite stops it the same way ("step 4: the validation loss is not
 * finite ..."). */
int islands_run(const sched_t *s, const zb_model *m, const zb_data *d,
                const trainer_opts *base, const islands_opts *io,
                islands_result *res, zb_err *err);

/* Frees what islands_run allocated in r (not r itself). */
void islands_result_free(islands_result *r);

/* ---- checkpoints (islands_ckpt.c) ----
 *
 * An islands checkpoint is every replica's trainer checkpoint (weights,
 * AdamW moments, step, data generator: trainer_save), the outer
 * optimizer's state (outer_state_save: global copy, momentum, progress
 * since the last outer step, EDiT's detectors) and the islands' own
 * counters, committed together as ckpt_set.h commits the parts of one
 * checkpoint:
 *
 *   DIR/islands.TAG.replica-R.bin   replica R's trainer (trainer_save)
 *   DIR/islands.TAG.outer.bin       the islands' counters and the outer state
 *   DIR/islands.json                the manifest, the commit point: {"format":
 *                                   "zbsched-islands", "version": 1, "step",
 *                                   "tag", "replicas": [ids], "outer",
 *                                   "allreduce", "inner_steps", "outer_lr",
 *                                   "outer_momentum", "model": the model
 *                                   record, "run": the run record}
 *
 * Every part is written atomically (src/outfile.h) under a fresh TAG, then
 * the manifest is replaced atomically, then the parts of other tags are
 * deleted: a death before the manifest leaves the previous checkpoint
 * whole.  A resume restores every replica and the outer state, so that
 * the resumed run's losses are the uninterrupted run's, bit for bit
 * (tests/outer: the islands' checkpoint test).  Elastic events and
 * A-EDiT's wall clock are not resumable; the CLI refuses them with
 * --checkpoint. */

/* The islands' counters a checkpoint keeps. */
typedef struct islands_progress {
    long step;             /* inner steps taken */
    int ev;                /* next elastic event */
    uint64_t next_stream;  /* data stream of the next replica to join */
    long eliminated;       /* EDiT: (replica, layer) contributions dropped */
    long skipped_segments; /* EDiT: (outer step, layer) pairs left unchanged */
} islands_progress;

/* Writes x's checkpoint into dir; 0 or -1 with err set. */
typedef int (*islands_saver)(islands *x, const char *dir, void *ctx, zb_err *err);

/* Makes the way write checkpoints (job_way.save) through saver (NULL: no
 * checkpoints); islands_checkpoint sets islands_save's. */
void islands_set_saver(islands *x, islands_saver saver, void *ctx);

/* The records a checkpoint commits (borrowed): ckpt_set.h's model record
 * and run_record.h's run record. */
typedef struct islands_records {
    const cJSON *model; /* ckptset_model_record's object */
    const cJSON *run;   /* run_record_to_json's object */
} islands_records;

/* Makes x's way checkpoint with islands_save and rec, which must outlive
 * the run. */
void islands_checkpoint(islands *x, const islands_records *rec);

/* Replica id's trainer, NULL when absent; the outer optimizer; the
 * options; the counters (for islands_ckpt.c). */
trainer *islands_replica(islands *x, int id);
outer_t *islands_outer(islands *x);
const islands_opts *islands_options(const islands *x);
void islands_get_progress(const islands *x, islands_progress *p);
void islands_set_progress(islands *x, const islands_progress *p);

/* Writes x's checkpoint into dir (see above) with the records.  0, or -1
 * with err set (the previous checkpoint then stays the directory's). */
int islands_save(islands *x, const char *dir, const cJSON *model_rec, const cJSON *run_rec,
                 zb_err *err);

/* Whether dir holds an islands checkpoint (its manifest): 1, 0, or -1
 * with err set when it cannot be told. */
int islands_ckpt_exists(const char *dir, zb_err *err);

/* Resumes x, freshly created with the options of the run that wrote dir,
 * from dir's checkpoint: checks the manifest (its replicas, outer
 * optimizer and settings against x's, the run record against id,
 * run_record.h), then loads every replica and the outer state.  Returns
 * 0, 1 with a note in note[cap] (only the seed differs), or -1 with err
 * set (x is then unusable: the caller ends the run). */
int islands_resume(islands *x, const char *dir, const run_identity *id, char *note, size_t cap,
                   zb_err *err);

#endif
