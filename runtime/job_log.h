/*
 * job_log.h: the metrics log of a training job (`zbsched run --log FILE`),
 * one JSON object per line, written by the job loop (job.c) as each step
 * and each evaluation happens.
 *
 * The shape follows the logs that torchtitan's and nanoGPT's users feed to
 * plots and dashboards: a flat object per event, keyed by the step.  A step:
 *
 *   {"step":12,"loss":3.2071,"lr":0.0006,"grad_norm":1.37,
 *    "tokens_per_s":30511.2,"tokens":1024,"seconds":0.0336,"skipped":false,
 *    "rollbacks":7,"memory":{"static_bytes":4337664,"peak_activation_bytes":null}}
 *
 * islands add "replicas" (those that trained the step) and, on a step
 * after which the replicas took an outer step, "outer_step" (how many
 * outer steps there have been, that one included).  An evaluation:
 *
 *   {"step":100,"eval_loss":2.9813}
 *
 * and, after the islands' last outer step, the synchronized model's with
 * "synchronized":true.  Numbers are the shortest decimal that reads back to
 * the same double; what is not known (a loss that is not finite, a
 * counter the way does not keep) is null, so every line is valid JSON.
 * "rollbacks" is the job's running total (post-validation rollbacks: a
 * stage step redone after the global check, runtime/trainer.h) as of the
 * end of the batch the step ran in; the steps of one batch (up to
 * JOB_BATCH_MAX, about a second) show the same total.  "memory" is what
 * this process's backend reports (backend.h's memory op), or null.
 *
 * Each line is flushed as it is written, so `tail -f` and a crash see
 * every finished step.  A resumed run appends to the file (the caller
 * opens it so); a reader that meets a step twice (a run killed after its
 * last checkpoint, then resumed) keeps the later line.
 */
#ifndef ZB_RUNTIME_JOB_LOG_H
#define ZB_RUNTIME_JOB_LOG_H

#include <stdio.h>

#include "runtime/job.h"

/* Writes and flushes the line of step `step` (1-based): in as the way
 * reported it, c the counters after its batch (NULL: unknown).  Returns 0,
 * or -1 with err set when the write fails (a full disk, a closed pipe). */
int job_log_step(FILE *f, long step, const job_step *in, const job_counters *c, zb_err *err);

/* Writes and flushes the line of an evaluation after step `step`;
 * synchronized marks the islands' final evaluation of the synchronized
 * model.  0 or -1 with err set. */
int job_log_eval(FILE *f, long step, double eval_loss, int synchronized, zb_err *err);

#endif
