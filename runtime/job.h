/*
 * job.h: the one training loop, for every way of running a schedule.
 *
 * `zbsched run` trains in four ways: one process (runtime/trainer.h), K
 * islands under an outer optimizer in one process (runtime/outer/
 * islands.h) or over MPI (runtime/mpi/mpi_islands.h), and pipeline ranks,
 * one schedule device per process, over MPI or NCCL (job_ranks.h).  What
 * differs between them is how a step is taken and how the processes
 * agree on its outcome; what a run does around its steps must not
 * differ, so it lives here once:
 *
 *   - steps run in batches up to the next evaluation, checkpoint or end,
 *     each batch lasting about JOB_BATCH_SECONDS (the trainer's
 *     trainer_steps overlaps the steps of one batch; a batch is also the
 *     longest a stop request waits);
 *   - the divergence rules (below), checked after every step on numbers
 *     every process holds alike, so every process stops at the same step
 *     with the same line;
 *   - evaluations every eval_every steps and at the end;
 *   - checkpoints (runtime/ckpt_set.h) at every evaluation, every
 *     checkpoint_every steps, at the end and on a stop request, never
 *     from a state inside a skip streak or of a run that has diverged, so
 *     that the last checkpoint on disk is the last good one;
 *   - stop requests (SIGTERM, SIGINT: the caller's flag), agreed at a step
 *     boundary: the job finishes the step, writes its checkpoint and
 *     returns JOB_STOPPED on every process;
 *   - progress (a callback, on the one process that reports) and the
 *     numbers of the summary (job_result).
 *
 * Divergence: the run has gone wrong, and stops with JOB_DIVERGED, when
 *   1. a step's training loss (of any replica) or an evaluation's loss is
 *      not finite;
 *   2. max_skipped steps in a row (of any replica) were skipped by the
 *      optimizer because the gradient was not finite;
 *   3. more than half of this invocation's steps, and at least two, were
 *      skipped, checked whenever a checkpoint is due and at the end (a
 *      run that mostly did nothing never reports success);
 *   4. the training loss averaged over the last JOB_LOSS_WINDOW steps
 *      (fewer at the start) exceeds max_loss_factor times the loss of the
 *      invocation's first step.  The average keeps one noisy batch from
 *      firing it; the first step's loss is where this run started (about
 *      ln(vocabulary) for a fresh model).
 * max_skipped 0 turns off rules 2 and 3, max_loss_factor 0 rule 4.
 *
 * A way of running is a job_way: a context and the functions below.
 * Their returns: 0; -1 a failure of this process alone (err set; the
 * others may be waiting for it, so the caller ends the job); -2 a
 * failure every process met and agreed on (err set alike, or with the
 * failing rank named).
 *
 * The loop prints nothing: the caller's progress callback does.
 */
#ifndef ZB_RUNTIME_JOB_H
#define ZB_RUNTIME_JOB_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "runtime/job_comm.h"
#include "src/err.h"

#define JOB_BATCH_MAX 32         /* most steps one batch takes */
#define JOB_BATCH_SECONDS 1.0    /* the wall time a batch aims at */
#define JOB_LOSS_WINDOW 5        /* steps averaged by divergence rule 4 */
#define JOB_DEFAULT_MAX_SKIPPED 5
#define JOB_DEFAULT_LOSS_FACTOR 2.0

/* What one step did (the same on every process of the job). */
typedef struct job_step {
    double loss;        /* mean training loss of the step (over the replicas that trained) */
    double grad_norm;   /* global gradient norm before clipping (NAN where not known) */
    double lr;          /* learning rate of the step */
    double seconds;     /* wall seconds the step took */
    long tokens;        /* training tokens of the step, every replica's */
    int skipped;        /* 1 when the optimizer skipped it (of any replica) */
    int members;        /* replicas that trained (islands); 1 otherwise */
    int members_after;  /* replicas after this step's boundary (fewer when some left) */
    const int *member_id;                /* [members] replica ids, NULL: one, unnamed */
    const double *member_loss;           /* [members] each replica's loss */
    const unsigned char *member_skipped; /* [members] each replica's skip */
    int left;           /* 1 on a process whose replica left at this step's boundary */
    long outer_step;    /* islands: the count of outer steps after the one taken at
                         * this step's boundary (set by boundary), 0: none taken */
} job_step;

/* Counters a way reports for the metrics log (job_opts.log), taken after
 * each batch of steps. */
typedef struct job_counters {
    long rollbacks;               /* post-validation rollbacks of the whole job so far
                                   * (stage steps redone), -1 when not known */
    double static_bytes;          /* bytes this process's backend holds for its stages
                                   * (buffers, snapshots); NAN when not known */
    double peak_activation_bytes; /* the backend's high-water mark of saved activations;
                                   * NAN where it does not track it (the CPU) */
} job_counters;

typedef struct job_way {
    void *ctx;       /* passed to every function */
    int max_batch;   /* most steps one call of steps may take, 1..JOB_BATCH_MAX */
    /* Runs n consecutive steps (n <= max_batch) and fills out[0..n).
     * member arrays stay valid until the next call. */
    int (*steps)(void *ctx, int n, job_step *out, zb_err *err);
    /* After a step passed the divergence rules, before the next (with
     * max_batch 1): islands take their outer step, replicas leave (info's
     * members_after, left).  NULL: nothing. */
    int (*boundary)(void *ctx, job_step *info, zb_err *err);
    /* The validation loss of the current parameters, on every process;
     * NULL where the way cannot evaluate (GPU ranks). */
    int (*eval)(void *ctx, double *val_loss, zb_err *err);
    /* Writes a checkpoint into dir (ckpt_set.h), collectively; NULL:
     * this way writes none. */
    int (*save)(void *ctx, const char *dir, zb_err *err);
    /* After the last step, before the final evaluation (islands: the
     * outer step that synchronizes the replicas); NULL: nothing.  With a
     * finish, the final evaluation is not one of the listed evaluations
     * (it is of the synchronized model). */
    int (*finish)(void *ctx, zb_err *err);
    /* Steps taken so far, resumed ones counted. */
    long (*step_count)(void *ctx);
    /* Whether to stop: here is this process's request; *stop gets the
     * job's decision, alike everywhere.  NULL: any process's request
     * stops the job (job_comm_any over comm). */
    int (*stop_vote)(void *ctx, int here, int *stop, zb_err *err);
    /* The counters of the metrics log (job_counters), after a batch;
     * called on every process when job_opts.log_counters is set
     * (collective where the way needs it).  NULL: not known (null in
     * the log). */
    int (*counters)(void *ctx, job_counters *out, zb_err *err);
    /* 1 on the process that reports (progress, summary); NULL: rank 0. */
    int (*speaker)(void *ctx);
    const job_comm *comm; /* the processes of the job; NULL: one */
} job_way;

typedef enum job_status {
    JOB_DONE = 0,    /* every step ran, evaluated and checkpointed */
    JOB_DIVERGED,    /* a divergence rule fired (err: which, at which step), everywhere alike */
    JOB_STOPPED,     /* a stop request was honoured at a step boundary, everywhere alike */
    JOB_LEFT,        /* islands over MPI: this process's replica left the run */
    JOB_FAILED,      /* a failure every process agreed on (err) */
    JOB_FAILED_HERE, /* a failure of this process alone (err): end the job */
} job_status;

/* What the progress callback is told about. */
typedef enum job_event_kind {
    JOB_EV_STEP,       /* a step finished (info) */
    JOB_EV_EVAL,       /* an evaluation (val_loss) */
    JOB_EV_LEAVE,      /* replicas left at this step's boundary (info) */
    JOB_EV_CHECKPOINT, /* a checkpoint was written (written 1) or withheld (0) */
} job_event_kind;

typedef struct job_event {
    job_event_kind kind;  /* what happened */
    long step;            /* 1-based step it happened at */
    long steps;           /* the run's total, for "step i/N" */
    const job_step *info; /* STEP, LEAVE */
    double val_loss;      /* EVAL */
    int written;          /* CHECKPOINT */
    double eta_s;         /* STEP: seconds left to the invocation's last step, at
                           * the mean step time so far (evaluations not counted) */
    int synchronized;     /* EVAL: 1 for the final evaluation after the way's
                           * finish (the islands' synchronized model) */
} job_event;

typedef void (*job_progress)(void *ctx, const job_event *e);

typedef struct job_opts {
    long steps;             /* the run's total steps (--steps, resumed ones counted) */
    long stop_at;           /* last step of this invocation (--stop-at), <= steps */
    long eval_every;        /* evaluate every this many steps; 0: at the end only */
    long checkpoint_every;  /* checkpoint every this many steps too; 0: at evaluations */
    const char *ckpt_dir;   /* where to checkpoint (way->save); NULL: nowhere */
    long max_skipped;       /* divergence rule 2 (and 3); 0: off */
    double max_loss_factor; /* divergence rule 4; 0: off */
    const char *hint;       /* how to avoid divergence, for its message ("try a lower --lr") */
    volatile sig_atomic_t *stop; /* non-zero: a stop was requested (the signal), or NULL */
    job_progress progress;  /* NULL: no progress */
    void *progress_ctx;     /* passed to progress */
    FILE *log;              /* the metrics log (job_log.h): one JSON line per step and
                             * per evaluation, written by the speaker when not NULL */
    int log_counters;       /* 1 on every process when some process logs: the way's
                             * counters are taken after each batch (collective) */
} job_opts;

/* The numbers a summary reports. */
typedef struct job_result {
    long first_step;     /* steps the run had taken when it started (resume) */
    double *losses;      /* [n_losses] training loss of each step this invocation ran */
    long n_losses;       /* steps this invocation ran */
    long *eval_step;     /* [n_evals] 1-based step of each listed evaluation */
    double *eval_loss;   /* [n_evals] its validation loss */
    int n_evals;         /* listed evaluations */
    double val_loss;     /* the final validation loss, NAN when none */
    double train_s;      /* wall seconds inside the steps (evaluations, checkpoints excluded) */
    long tokens;         /* training tokens of this invocation */
    long skipped;        /* steps of this invocation the optimizer skipped */
    long checkpoint_step; /* step of the last checkpoint written, -1: none this invocation */
    int stop_signal;     /* JOB_STOPPED: the value of *stop (the signal) */
} job_result;

/* Fills o with the defaults: rules 2-4 on at their default thresholds,
 * no evaluation but the last, no checkpoints, no stop flag. */
void job_opts_default(job_opts *o);

/* Runs the job (collective where the way is): steps from way->step_count
 * to o->stop_at under the rules above.  Fills *res (free with
 * job_result_free; also after a failure, for the steps that ran) and
 * returns the outcome; err holds the line to print for JOB_DIVERGED,
 * JOB_FAILED and JOB_FAILED_HERE. */
job_status job_run(const job_way *way, const job_opts *o, job_result *res, zb_err *err);

/* Frees what job_run allocated in r (not r itself). */
void job_result_free(job_result *r);

#endif
