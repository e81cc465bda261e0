/*
 * run_report.h: what `zbsched run` prints about a job (runtime/job.h),
 * whichever way it ran: the progress lines, the stop requests it takes
 * from signals, the line for a job that did not finish, and the pieces
 * of the summary every way shares.
 */
#ifndef ZB_CLI_RUN_REPORT_H
#define ZB_CLI_RUN_REPORT_H

#include <signal.h>

#include <cjson/cJSON.h>

#include "runtime/job.h"
#include "runtime/job_trainer.h"
#include "src/cli/run_args.h"
#include "src/sched.h"

/* What the summary line says a rollback is: post-validation (docs/runtime.md)
 * lets every stage step before the global gradient norm is known and
 * redoes a stage's step when the norm says it had to be clipped; the
 * count is of stage steps redone, so a p-stage step can add up to p. */
#define RUN_ROLLBACKS_WORDS "stage steps redone by post-validation, as designed"

/* The one-process summary counts each step once: "R of N steps rolled
 * back" (steps in which post-validation undid an optimistic stage step,
 * so R <= N), then the stage steps redone.  printf arguments: R, N (the
 * steps this run trained), the stage steps. */
#define RUN_ROLLBACK_STEPS_WORDS \
    "%ld of %ld steps rolled back (post-validation found the gradient norm clipped or not " \
    "finite and redid the optimistic step, as designed; %ld stage steps redone)"

/* The stop flag: 0, or the first SIGTERM / SIGINT received. */
extern volatile sig_atomic_t run_stop_signal;

/* From now on SIGTERM and SIGINT ask the job to stop at its next step
 * boundary (run_stop_signal), which the handler acknowledges with one line
 * on stderr unless quiet; a second one ends the process at once, with the
 * signal's own status (the last checkpoint is whole: src/outfile.h).
 * quiet -1 keeps the last call's (installing again after MPI_Init). */
void run_catch_stop_signals(int quiet);

/* The progress callback of job_opts (ctx: the run_args): a line per step
 * and per evaluation on stderr, unless --quiet. */
void run_progress(void *ctx, const job_event *e);

/* Fills o from the flags: steps, evaluation, checkpoints, the divergence
 * rules, the stop flag and the progress lines (hint: how to avoid a
 * divergence, for its message). */
void run_job_opts(const run_args *a, const char *hint, job_opts *o);

/* The exit status of a job that ended as st, after printing its one line
 * where it has one (print 0: another rank prints it): 0 done, 1 diverged
 * or failed, 128 + the signal when stopped.  where names the file for
 * prefixed messages (islands), or NULL. */
int run_job_exit(const run_args *a, job_status st, const job_result *r, const zb_err *err,
                 int print, const char *where);

/* The summary fields every way shares, in this order: schedule, model,
 * devices, stages, micro_batches, batch_size, parameters. */
void run_json_head(cJSON *o, const sched_t *s, const char *model, int batch, double params);

/* first_step, steps, losses, evals, val_loss (null when none), tokens_per_s. */
void run_json_losses(cJSON *o, const job_result *r);

/* Prints o on stdout as one line and frees it (a failed stdout is
 * reported by main.c when the command ends).  0, or 1 out of memory. */
int run_json_print(cJSON *o);

/* tokens per second of r's training time (0 when none). */
double run_tokens_per_s(const job_result *r);

/* The checkpoint directory before the run: rank 0 (comm NULL: this
 * process) prepares and locks it (ckpt_set.h; the lock is held until the
 * process ends) and checks the run's files against it; every rank learns
 * the verdict.  *lock_fd gets the lock (-1 elsewhere).  0, or 1 after
 * rank 0 printed the line. */
int run_ckpt_begin(const run_args *a, const job_comm *comm, int *lock_fd);

/* --resume through job_trainer_resume, the one line of a refusal printed
 * by rank 0, the seed's note by the speaker unless --quiet.  0 or 1. */
int run_ckpt_resume(const run_args *a, job_trainer *jt, const run_identity *id,
                    const zb_data *d);

/* Opens --log FILE for the job loop's metrics lines (runtime/job_log.h)
 * when this process writes it (writer: rank 0, or the one process), into
 * a->log_file: "-" is stdout; a path follows src/outfile.h's rules for
 * what it may be (a FIFO or device written through, a symlink followed, a
 * directory refused), truncated for a new run and appended to with
 * --resume.  Lines go out one by one as the steps happen, so the file is
 * not replaced atomically: it holds the finished steps.  0, or 1 after
 * one line. */
int run_log_open(run_args *a, int writer);

/* Closes what run_log_open opened.  Returns rc, or 1 after one line when
 * the file could not be closed (the last lines lost) and rc was 0. */
int run_log_close(run_args *a, int rc);

#endif
