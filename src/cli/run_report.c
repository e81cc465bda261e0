/*
 * run_report.c: `zbsched run`'s lines about a job, its stop signals and
 * the summary's shared fields (run_report.h).
 *
 * Signals: the first SIGTERM or SIGINT only sets run_stop_signal, which
 * the job loop reads at its next step boundary (runtime/job.h), so the
 * step in flight finishes and the checkpoint is written before the
 * process exits with 128 + the signal: the status a shell, Slurm's
 * accounting and a requeue script read as "ended by that signal", which
 * is what happened; a status of 0 would claim a finished run.  The
 * handler then restores the default action, so a second signal ends the
 * process at once, as an impatient user or `scancel` a second time means
 * it; every file is written through src/outfile.h (a temporary renamed
 * over the target), so the last checkpoint stays whole either way.
 */
#include "src/cli/run_report.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/ckpt_set.h"
#include "src/cli/cli.h"
#include "src/outfile.h"

volatile sig_atomic_t run_stop_signal;

/* 1: the handler says nothing (--quiet). */
static volatile sig_atomic_t stop_quiet;

static void on_stop(int sig)
{
    int was = run_stop_signal;
    if (!was)
        run_stop_signal = sig;
    /* the next one is not caught: it ends the process */
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    if (!was && !stop_quiet) {
        static const char term[] = "zbsched: SIGTERM: stopping after this step (a second signal "
                                   "stops at once)\n";
        static const char intr[] = "zbsched: SIGINT: stopping after this step (a second signal "
                                   "stops at once)\n";
        ssize_t n = sig == SIGINT ? write(2, intr, sizeof intr - 1) : write(2, term, sizeof term - 1);
        (void)n; /* nothing to do about a full stderr inside a handler */
    }
}

void run_catch_stop_signals(int quiet)
{
    if (quiet >= 0)
        stop_quiet = quiet;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sa.sa_flags = SA_RESTART; /* an MPI or file call in flight just goes on */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
}

void run_progress(void *ctx, const job_event *e)
{
    const run_args *a = ctx;
    if (a->quiet)
        return;
    const job_step *in = e->info;
    switch (e->kind) {
    case JOB_EV_STEP: {
        char eta[32] = "";
        if (e->eta_s > 0 && isfinite(e->eta_s)) {
            long t = (long)(e->eta_s + 0.5);
            if (t >= 3600)
                snprintf(eta, sizeof eta, "  eta %ldh%02ldm", t / 3600, t / 60 % 60);
            else
                snprintf(eta, sizeof eta, "  eta %ldm%02lds", t / 60, t % 60);
        }
        fprintf(stderr, "step %ld/%ld: loss %.4f  %.0f tok/s  lr %.2e%s", e->step, e->steps,
                in->loss, in->seconds > 0 ? (double)in->tokens / in->seconds : 0.0, in->lr, eta);
        if (in->member_id)
            fprintf(stderr, " (%d replica%s%s)", in->members, in->members == 1 ? "" : "s",
                    in->outer_step > 0 ? ", then an outer step" : "");
        fputc('\n', stderr);
        break;
    }
    case JOB_EV_EVAL:
        fprintf(stderr, "step %ld: val loss %.4f%s\n", e->step, e->val_loss,
                e->synchronized ? " (the replicas synchronized)" : "");
        break;
    case JOB_EV_LEAVE: {
        int gone = in->members - in->members_after;
        fprintf(stderr, "step %ld: %d replica%s left (SIGTERM); %d continue%s\n", e->step, gone,
                gone == 1 ? "" : "s", in->members_after, in->members_after == 1 ? "s" : "");
        break;
    }
    case JOB_EV_CHECKPOINT:
        if (!e->written)
            fprintf(stderr, "step %ld: no checkpoint: the step is inside a skip streak (the last "
                    "checkpoint is kept)\n", e->step);
        break;
    }
}

void run_job_opts(const run_args *a, const char *hint, job_opts *o)
{
    job_opts_default(o);
    o->steps = a->steps;
    o->stop_at = a->stop_at;
    o->eval_every = a->eval_every;
    o->checkpoint_every = a->ckpt_every;
    o->ckpt_dir = a->ckpt_dir;
    o->max_skipped = a->max_skipped;
    o->max_loss_factor = a->max_loss_factor;
    o->hint = hint;
    o->stop = &run_stop_signal;
    o->progress = run_progress;
    o->progress_ctx = (void *)a;
    o->log = a->log_file;
    o->log_counters = a->log != NULL;
}

int run_log_open(run_args *a, int writer)
{
    a->log_file = NULL;
    if (!a->log || !writer)
        return 0;
    if (!strcmp(a->log, "-")) {
        a->log_file = stdout;
        return 0;
    }
    zb_err err = { { 0 } };
    outfile_kind kind;
    char *target = NULL;
    /* before the file is created: a log in the checkpoint directory under
     * one of its names would be a half checkpoint */
    if (a->ckpt_dir && ckptset_check_foreign(a->ckpt_dir, a->log, "--log file", &err) != 0)
        return cli_fail(&err);
    if (outfile_check(a->log, &kind, &target, &err) != 0)
        return cli_error("--log: %s", err.msg);
    a->log_file = fopen(target, a->resume ? "a" : "w");
    int e = errno;
    free(target);
    if (!a->log_file)
        return cli_error("--log: cannot open '%s': %s", a->log, strerror(e));
    return 0;
}

int run_log_close(run_args *a, int rc)
{
    if (!a->log_file || a->log_file == stdout)
        return rc;
    int failed = fclose(a->log_file) != 0;
    int e = errno;
    a->log_file = NULL;
    if (failed && rc == 0)
        return cli_error("--log: cannot finish '%s': %s", a->log, strerror(e));
    return rc;
}

static const char *signal_name(int sig)
{
    return sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "a signal";
}

int run_job_exit(const run_args *a, job_status st, const job_result *r, const zb_err *err,
                 int print, const char *where)
{
    switch (st) {
    case JOB_DONE:
    case JOB_LEFT:
        return 0;
    case JOB_STOPPED: {
        long at = r->first_step + r->n_losses;
        if (print) {
            char rest[600];
            if (a->isl.replicas > 0 && !a->ckpt_dir)
                snprintf(rest, sizeof rest, "nothing is saved without --checkpoint DIR (in one "
                         "process; the islands under mpirun write no checkpoints yet)");
            else if (!a->ckpt_dir)
                snprintf(rest, sizeof rest, "nothing is saved without --checkpoint DIR");
            else if (r->checkpoint_step == at)
                snprintf(rest, sizeof rest, "its checkpoint is in %s; continue with --resume",
                         a->ckpt_dir);
            else
                snprintf(rest, sizeof rest, "the step is inside a skip streak, so %s keeps %s",
                         a->ckpt_dir, r->checkpoint_step >= 0 || r->first_step > 0
                                          ? "the last checkpoint" : "no checkpoint of this run");
            cli_error("stopped by %s after step %ld of %ld; %s", signal_name(r->stop_signal), at,
                      a->steps, rest);
        }
        return 128 + r->stop_signal;
    }
    default:
        if (print) {
            if (where)
                cli_error("%s: %s", where, err->msg);
            else
                cli_fail(err);
        }
        return 1;
    }
}

void run_json_head(cJSON *o, const sched_t *s, const char *model, int batch, double params)
{
    cJSON_AddStringToObject(o, "schedule", s->name);
    cJSON_AddStringToObject(o, "model", model);
    cJSON_AddNumberToObject(o, "devices", s->n_devices);
    cJSON_AddNumberToObject(o, "stages", s->n_stages);
    cJSON_AddNumberToObject(o, "micro_batches", s->n_micro);
    cJSON_AddNumberToObject(o, "batch_size", batch);
    cJSON_AddNumberToObject(o, "parameters", params);
}

double run_tokens_per_s(const job_result *r)
{
    return r->train_s > 0 ? (double)r->tokens / r->train_s : 0;
}

void run_json_losses(cJSON *o, const job_result *r)
{
    cJSON_AddNumberToObject(o, "first_step", (double)r->first_step);
    cJSON_AddNumberToObject(o, "steps", (double)(r->first_step + r->n_losses));
    cJSON *l = cJSON_AddArrayToObject(o, "losses");
    for (long i = 0; i < r->n_losses; i++)
        cJSON_AddItemToArray(l, cJSON_CreateNumber(r->losses[i]));
    cJSON *ev = cJSON_AddArrayToObject(o, "evals");
    for (int i = 0; i < r->n_evals; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "step", (double)r->eval_step[i]);
        cJSON_AddNumberToObject(e, "val_loss", r->eval_loss[i]);
        cJSON_AddItemToArray(ev, e);
    }
    if (isnan(r->val_loss))
        cJSON_AddNullToObject(o, "val_loss");
    else
        cJSON_AddNumberToObject(o, "val_loss", r->val_loss);
    cJSON_AddNumberToObject(o, "tokens_per_s", run_tokens_per_s(r));
}

int run_json_print(cJSON *o)
{
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!text)
        return cli_error("out of memory");
    printf("%s\n", text); /* a failed stdout is main.c's to report, once */
    free(text);
    return 0;
}

int run_ckpt_begin(const run_args *a, const job_comm *comm, int *lock_fd)
{
    *lock_fd = -1;
    if (!a->ckpt_dir)
        return 0;
    zb_err err = { { 0 } };
    int fail = 0;
    if (job_comm_rank(comm) == 0) {
        const char *inputs[] = { a->file, a->data, a->model };
        const char *dir = a->ckpt_dir;
        fail = ckptset_check_foreign(dir, a->file, "schedule file", &err) != 0 ||
               ckptset_check_foreign(dir, a->data, "--data text", &err) != 0 ||
               ckptset_check_foreign(dir, a->model, "--model file", &err) != 0 ||
               ckptset_check_foreign(dir, a->trace, "--trace file", &err) != 0 ||
               ckptset_check_foreign(dir, a->log, "--log file", &err) != 0 ||
               ckptset_prepare(dir, inputs, 3, &err) != 0 ||
               ckptset_check_foreign(dir, a->trace, "--trace file", &err) != 0 ||
               (*lock_fd = ckptset_lock(dir, &err)) < 0;
    }
    int rc = job_comm_agree(comm, fail, &err);
    if (rc == 0)
        return 0;
    if (job_comm_rank(comm) == 0)
        cli_fail(&err);
    ckptset_unlock(*lock_fd);
    *lock_fd = -1;
    return 1;
}

int run_ckpt_resume(const run_args *a, job_trainer *jt, const run_identity *id,
                    const zb_data *d)
{
    if (!a->resume)
        return 0;
    zb_err err = { { 0 } };
    char note[256];
    int rc = job_trainer_resume(jt, a->ckpt_dir, id, d->chars, d->vocab, note, sizeof note, &err);
    int rank0 = job_comm_rank(jt->comm) == 0;
    if (rc < 0)
        return rank0 ? cli_fail(&err) : 1;
    if (rc == 1 && rank0 && !a->quiet)
        fprintf(stderr, "zbsched run: %s\n", note);
    return 0;
}
