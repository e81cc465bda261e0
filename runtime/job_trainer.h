/*
 * job_trainer.h: the ways of running a job (job.h) that are one trainer
 * in this process: the whole schedule (one process, on any backend), or
 * one schedule device of it (pipeline ranks: trainer_opts.one_device,
 * over MPI or NCCL), the other devices being other processes.
 *
 *   one process   steps in batches through trainer_steps (no barrier
 *                 between the steps of a batch), evaluation with
 *                 trainer_eval, checkpoints of every stage (one part);
 *   ranks         one trainer_step per batch, whose loss, gradient norm,
 *                 learning rate and skip verdict exist where the last
 *                 stage runs and are broadcast from there, so that every
 *                 rank applies the job's rules to the same numbers;
 *                 evaluation (where the backend can run every stage:
 *                 the CPU) by broadcasting every stage's parameters from
 *                 its owner and evaluating on rank 0; checkpoints of this
 *                 rank's own stages, committed together (ckpt_set.h).
 *
 * The ranks' agreement goes through a job_comm (job_comm.h), so MPI and
 * NCCL ranks run the same code; only the communicator differs.
 */
#ifndef ZB_RUNTIME_JOB_TRAINER_H
#define ZB_RUNTIME_JOB_TRAINER_H

#include "runtime/ckpt_set.h"
#include "runtime/job.h"
#include "runtime/run_record.h"
#include "runtime/trainer.h"

typedef struct job_trainer {
    trainer *t;               /* borrowed; the caller frees it */
    const sched_t *s;         /* the schedule (which stages are whose, the loss's rank) */
    const job_comm *comm;     /* NULL: one process */
    ckptset_records rec;      /* what a checkpoint records (borrowed) */
    unsigned char *own;       /* [stages] 1 for this rank's stages (ranks), else NULL */
    int can_eval;             /* 1: evaluate (ranks: every stage can run on rank 0) */
    long rollbacks_adjust;    /* added to this rank's rollbacks in job_trainer_rollbacks */
    trainer_step_info info[JOB_BATCH_MAX]; /* one batch's records */
} job_trainer;

/* Sets jt up for trainer t of schedule s: comm NULL for one process,
 * else t must be a one_device trainer of rank comm->rank.  rec is what
 * checkpoints record (rec->model needed when the job checkpoints).  0 or
 * -1 with err (memory). */
int job_trainer_init(job_trainer *jt, trainer *t, const sched_t *s, const job_comm *comm,
                     const ckptset_records *rec, int can_eval, zb_err *err);

/* Frees what job_trainer_init allocated (not the trainer). */
void job_trainer_free(job_trainer *jt);

/* Fills *w with the way of running jt. */
void job_trainer_way(job_trainer *jt, job_way *w);

/* Resumes from dir's checkpoint (ckpt_set.h) into the trainer, after
 * every check: that there is one, its run record against id
 * (run_record.h), its model record against the trainer's model and the
 * text's characters chars[0..vocab), then the parts themselves (this
 * rank's, or every part).  Nothing in dir is written.  Collective for
 * ranks.  Returns 0, 1 with a note in note[cap] (only the seed differs),
 * or -1 on every rank with err (the first failing rank's message); the
 * trainer is unchanged on failure. */
int job_trainer_resume(job_trainer *jt, const char *dir, const run_identity *id,
                       const unsigned char *chars, int vocab, char *note, size_t cap, zb_err *err);

/* Post-validation rollbacks of the whole job (summed over the ranks,
 * collective for ranks, each stage's counted once).  0 or -1 with err. */
int job_trainer_rollbacks(job_trainer *jt, long *total, zb_err *err);

#endif
