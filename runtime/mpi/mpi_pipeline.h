/*
 * mpi_pipeline.h: pipeline ranks, `mpirun -np P zbsched run FILE`: rank d
 * of the communicator runs schedule device d, and activations, gradients
 * and the post-validation norms move between ranks through
 * transport_mpi.h in the schedule-derived order.
 *
 * Each rank builds the same trainer (runtime/trainer.h: same seed, so the
 * same initial weights of every stage, and the same data windows), with
 * one_device set: only its own device's worker runs, and it runs that
 * lane's ops and the post-validated optimizer steps of that device's
 * stages.  The arithmetic of every op is the one-process run's, in the
 * same order, on the same inputs (a message carries the exact floats the
 * in-process pointer hand-off would), so losses and parameters are
 * bit-identical to `zbsched run FILE` in one process, for every generator
 * kind, V-shape and interleaved included.
 *
 * What is only known on some ranks is shared here:
 *   - the step's loss is computed where the last stage runs, and broadcast;
 *   - the parameters of a stage are current only on its own rank; before
 *     an evaluation every stage's parameters are broadcast from their
 *     owner, and rank 0 evaluates (trainer_eval), then broadcasts the
 *     validation loss.
 * The synchronous clip (--sync-optimizer) needs every stage's norm in one
 * place and is not offered here; post-validation passes the norms along
 * the pipeline as messages, which is what a multi-process run wants.
 *
 * Workload: P <= a few dozen ranks, tiny / shakespeare-char models.
 */
#ifndef ZB_MPI_PIPELINE_H
#define ZB_MPI_PIPELINE_H

#include <stdint.h>

#include <mpi.h>

#include "runtime/mpi/transport_mpi.h"
#include "runtime/trainer.h"

typedef struct mpi_pipeline mpi_pipeline;

/* Creates this rank's part of the pipeline over comm (its size must be
 * s->n_devices).  opts->sync_optimizer must be 0.  Collective only in that
 * every rank must call it.  0 and *out, or -1 with err. */
int mpi_pipeline_create(const sched_t *s, const zb_model *m, const zb_data *d,
                        const trainer_opts *opts, MPI_Comm comm, mpi_pipeline **out,
                        zb_err *err);

/* Frees p (NULL is fine). */
void mpi_pipeline_free(mpi_pipeline *p);

/* One training step on every rank; *loss is the step's mean loss on every
 * rank.  Collective.  0, or -1 with err set on the rank that failed (the
 * others may then block: the caller must abort the job). */
int mpi_pipeline_step(mpi_pipeline *p, double *loss, zb_err *err);

/* The two halves of a step (trainer_backward, trainer_apply) for the sync
 * islands: after the backward, *loss is the step's loss on every rank and
 * each rank's own stages hold their gradients.  Collective; errors as
 * mpi_pipeline_step. */
int mpi_pipeline_backward(mpi_pipeline *p, double *loss, zb_err *err);
int mpi_pipeline_apply(mpi_pipeline *p, zb_err *err);

/* The schedule device this rank runs. */
int mpi_pipeline_device(const mpi_pipeline *p);

/* Validation loss of the current parameters, on every rank (rank 0
 * evaluates after the stages' parameters are gathered).  Collective.
 * 0, or -1 with err set. */
int mpi_pipeline_eval(mpi_pipeline *p, double *val_loss, zb_err *err);

/* Checkpoints in directory dir through ckptset_save / ckptset_load
 * (runtime/ckpt_set.h; `zbsched run` itself goes through the job loop,
 * runtime/job_trainer.h, which adds the run record).  save: every rank
 * writes its own stages to its part file, and once every part is durable
 * rank 0 commits the manifest with the model record (the trainer's model
 * and the text's characters; no run record); a rank that dies before
 * that leaves the previous checkpoint as it was.  load: dir's checkpoint,
 * checked whole, this rank's own part when the set was written by as many
 * ranks, else every part (or an older layout's).  Collective; 0, or -1 on
 * every rank with err holding the first failing rank's message. */
int mpi_pipeline_save(mpi_pipeline *p, const char *dir, zb_err *err);
int mpi_pipeline_load(mpi_pipeline *p, const char *path, zb_err *err);

/* This rank's trainer (its own stages are current). */
trainer *mpi_pipeline_trainer(mpi_pipeline *p);

/* Sums over ranks (collective): bytes and messages sent over MPI so far,
 * and post-validation rollbacks. */
int mpi_pipeline_totals(mpi_pipeline *p, uint64_t *bytes, uint64_t *messages, long *rollbacks,
                        zb_err *err);

#endif
