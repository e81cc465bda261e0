/*
 * job.c: the training loop and its rules (job.h).
 *
 * One pass of the loop: choose the next batch (up to the next boundary:
 * an evaluation, a checkpoint, the end), run it through the way, then for
 * each of its steps record the loss and apply the divergence rules; at a
 * boundary evaluate, check, checkpoint; then agree on a stop request.
 * Every decision is a function of numbers every process holds alike (the
 * way's job_step, the evaluation's loss, the agreed vote), so every
 * process of a job takes the same branch at the same step without any
 * further message.
 *
 * The metrics log (job_log.h) is written where the progress is reported
 * (the speaker), one line per step after its boundary (so that an outer
 * step taken there is in it), the step that diverged included, and one
 * per evaluation.  A failed
 * write of the log is this process's failure.
 */
#include "runtime/job.h"

#include "runtime/job_log.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void job_opts_default(job_opts *o)
{
    memset(o, 0, sizeof *o);
    o->max_skipped = JOB_DEFAULT_MAX_SKIPPED;
    o->max_loss_factor = JOB_DEFAULT_LOSS_FACTOR;
    o->hint = "try a lower --lr";
}

void job_result_free(job_result *r)
{
    free(r->losses);
    free(r->eval_step);
    free(r->eval_loss);
    r->losses = NULL;
    r->eval_step = NULL;
    r->eval_loss = NULL;
}

/* The loop's own state beside the result. */
typedef struct job_state {
    const job_way *w;       /* the way of running */
    const job_opts *o;      /* the options */
    job_result *res;        /* what the summary reports */
    long *streak;           /* [n_streak] consecutive skips per replica id */
    int n_streak;           /* ids with a counter */
    double first_loss;      /* the invocation's first step's loss (rule 4) */
    double window[JOB_LOSS_WINDOW]; /* the last losses, a ring */
    int n_window;           /* filled entries of window */
    int eval_cap;           /* room in res->eval_step / eval_loss */
    int speaker;            /* 1 on the process that reports */
} job_state;

/* Tells the progress callback, on the speaker; synchronized marks the
 * final evaluation of the way's finished (synchronized) model. */
static void emit_event(const job_state *js, job_event_kind kind, long step, const job_step *info,
                       double val, int written, int synchronized)
{
    if (!js->speaker || !js->o->progress)
        return;
    const job_result *r = js->res;
    double eta = r->n_losses ? r->train_s / (double)r->n_losses * (double)(js->o->stop_at - step)
                             : NAN;
    job_event e = { kind, step, js->o->steps, info, val, written, eta, synchronized };
    js->o->progress(js->o->progress_ctx, &e);
}

static void emit(const job_state *js, job_event_kind kind, long step, const job_step *info,
                 double val, int written)
{
    emit_event(js, kind, step, info, val, written, 0);
}

/* "; the last checkpoint is kept (step K)" or "; no checkpoint was
 * written", when the run has a checkpoint directory. */
static const char *kept(const job_state *js, char *buf, size_t cap)
{
    buf[0] = '\0';
    if (!js->o->ckpt_dir)
        return buf;
    long at = js->res->checkpoint_step >= 0 ? js->res->checkpoint_step
              : js->res->first_step > 0     ? js->res->first_step
                                            : -1;
    if (at >= 0)
        snprintf(buf, cap, "; the last checkpoint is kept (step %ld)", at);
    else
        snprintf(buf, cap, "; no checkpoint was written");
    return buf;
}

/* The counter of replica id, grown on demand; NULL when memory runs out. */
static long *streak_of(job_state *js, int id)
{
    if (id >= js->n_streak) {
        int n = id + 8;
        long *s = realloc(js->streak, (size_t)n * sizeof *s);
        if (!s)
            return NULL;
        memset(s + js->n_streak, 0, (size_t)(n - js->n_streak) * sizeof *s);
        js->streak = s;
        js->n_streak = n;
    }
    return &js->streak[id];
}

/* 1 when no replica is inside a skip streak. */
static int no_streak(const job_state *js)
{
    for (int i = 0; i < js->n_streak; i++)
        if (js->streak[i] > 0)
            return 0;
    return 1;
}

/* Rules 1, 2 and 4 after step `step` (1-based).  0, 1 (diverged, err
 * set) or -1 (memory). */
static int check_step(job_state *js, long step, const job_step *in, zb_err *err)
{
    const job_opts *o = js->o;
    char k[96];
    int n = in->member_loss ? in->members : 1;
    for (int i = 0; i < n; i++) {
        double loss = in->member_loss ? in->member_loss[i] : in->loss;
        int skipped = in->member_skipped ? in->member_skipped[i] : in->skipped;
        int id = in->member_id ? in->member_id[i] : 0;
        char who[32] = "";
        if (in->member_id)
            snprintf(who, sizeof who, "replica %d: ", id);
        if (!isfinite(loss)) {
            zb_fail(err, "step %ld: %sthe training loss is %s (diverged; %s)%s", step, who,
                    isnan(loss) ? "NaN" : "infinite", o->hint, kept(js, k, sizeof k));
            return 1;
        }
        long *st = streak_of(js, id);
        if (!st)
            return zb_fail(err, "out of memory");
        *st = skipped ? *st + 1 : 0;
        if (o->max_skipped > 0 && *st >= o->max_skipped) {
            zb_fail(err, "step %ld: %sdiverged: %ld steps in a row were skipped because the "
                    "gradient was not finite (loss %.4g; %s, or raise --max-skipped)%s", step,
                    who, *st, loss, o->hint, kept(js, k, sizeof k));
            return 1;
        }
    }
    if (!isfinite(in->loss)) { /* the mean of no replica (all joining) */
        zb_fail(err, "step %ld: the training loss is %s (diverged; %s)%s", step,
                isnan(in->loss) ? "NaN" : "infinite", o->hint, kept(js, k, sizeof k));
        return 1;
    }
    if (js->res->n_losses == 1)
        js->first_loss = in->loss;
    js->window[(js->res->n_losses - 1) % JOB_LOSS_WINDOW] = in->loss;
    if (js->n_window < JOB_LOSS_WINDOW)
        js->n_window++;
    if (o->max_loss_factor > 0 && js->first_loss > 0) {
        double sum = 0;
        for (int i = 0; i < js->n_window; i++)
            sum += js->window[i];
        double mean = sum / js->n_window;
        if (mean > o->max_loss_factor * js->first_loss) {
            zb_fail(err, "step %ld: diverged: the training loss averaged %.4g over the last %d "
                    "step%s, more than %g times the %.4g of the run's first step (%s, or raise "
                    "--max-loss-factor)%s", step, mean, js->n_window, js->n_window == 1 ? "" : "s",
                    o->max_loss_factor, js->first_loss, o->hint, kept(js, k, sizeof k));
            return 1;
        }
    }
    return 0;
}

/* Rule 3, where a checkpoint is due and at the end.  0 or 1 (err set). */
static int check_skipped(const job_state *js, long step, zb_err *err)
{
    const job_result *r = js->res;
    if (js->o->max_skipped <= 0 || r->skipped < 2 || 2 * r->skipped <= r->n_losses)
        return 0;
    char k[96];
    zb_fail(err, "step %ld: diverged: %ld of the run's %ld steps were skipped because the "
            "gradient was not finite (%s, or raise --max-skipped)%s", step, r->skipped,
            r->n_losses, js->o->hint, kept(js, k, sizeof k));
    return 1;
}

/* An evaluation after step `step`: 0, 1 (diverged), or the way's -1/-2. */
static int evaluate(job_state *js, long step, int listed, zb_err *err)
{
    double v = NAN;
    int rc = js->w->eval(js->w->ctx, &v, err);
    if (rc != 0)
        return rc;
    job_result *r = js->res;
    if (listed) {
        if (r->n_evals == js->eval_cap) {
            int cap = js->eval_cap ? 2 * js->eval_cap : 16;
            long *s = realloc(r->eval_step, (size_t)cap * sizeof *s);
            if (s)
                r->eval_step = s;
            double *l = realloc(r->eval_loss, (size_t)cap * sizeof *l);
            if (l)
                r->eval_loss = l;
            if (!s || !l)
                return zb_fail(err, "out of memory");
            js->eval_cap = cap;
        }
        r->eval_step[r->n_evals] = step;
        r->eval_loss[r->n_evals] = v;
        r->n_evals++;
    }
    r->val_loss = v;
    if (!isfinite(v) && js->speaker && js->o->log)
        job_log_eval(js->o->log, step, v, !listed, err); /* the divergence's line wins */
    if (!isfinite(v)) {
        char k[96];
        zb_fail(err, "step %ld: the validation loss is not finite (diverged; %s)%s", step,
                js->o->hint, kept(js, k, sizeof k));
        return 1;
    }
    if (js->speaker && js->o->log && job_log_eval(js->o->log, step, v, !listed, err) != 0)
        return -1;
    emit_event(js, JOB_EV_EVAL, step, NULL, v, 0, !listed);
    return 0;
}

/* A checkpoint after step `step`, unless the state is inside a skip
 * streak.  0, 1 (rule 3 fired), or the way's -1/-2. */
static int checkpoint(job_state *js, long step, zb_err *err)
{
    if (check_skipped(js, step, err))
        return 1;
    if (!js->o->ckpt_dir || !js->w->save || js->res->checkpoint_step == step)
        return 0;
    if (!no_streak(js)) {
        emit(js, JOB_EV_CHECKPOINT, step, NULL, NAN, 0);
        return 0;
    }
    int rc = js->w->save(js->w->ctx, js->o->ckpt_dir, err);
    if (rc != 0)
        return rc;
    js->res->checkpoint_step = step;
    emit(js, JOB_EV_CHECKPOINT, step, NULL, NAN, 1);
    return 0;
}

/* A way's -1 / -2, or 1 from the rules, as the job's outcome. */
static job_status outcome(int rc)
{
    return rc == 1 ? JOB_DIVERGED : rc == -2 ? JOB_FAILED : JOB_FAILED_HERE;
}

static job_status run_loop(job_state *jsp, zb_err *err);

job_status job_run(const job_way *w, const job_opts *o, job_result *res, zb_err *err)
{
    memset(res, 0, sizeof *res);
    res->val_loss = NAN;
    res->checkpoint_step = -1;
    res->first_step = w->step_count(w->ctx);
    job_state js = { .w = w, .o = o, .res = res };
    js.speaker = w->speaker ? w->speaker(w->ctx) : job_comm_rank(w->comm) == 0;
    job_status st = run_loop(&js, err);
    free(js.streak);
    return st;
}

/* The loop itself (see the head of the file). */
static job_status run_loop(job_state *jsp, zb_err *err)
{
    const job_way *w = jsp->w;
    const job_opts *o = jsp->o;
    job_result *res = jsp->res;
    long n_steps = o->stop_at - res->first_step;
    if (n_steps < 1) {
        zb_fail(err, "the checkpoint is already at step %ld; nothing to do for --steps %ld",
                res->first_step, o->stop_at);
        return JOB_FAILED;
    }
    res->losses = malloc((size_t)n_steps * sizeof *res->losses);
    job_step info[JOB_BATCH_MAX];
    if (!res->losses) {
        zb_fail(err, "out of memory for %ld steps' losses", n_steps);
        return JOB_FAILED_HERE;
    }
    int max_batch = w->max_batch < 1 ? 1 : w->max_batch > JOB_BATCH_MAX ? JOB_BATCH_MAX
                                                                           : w->max_batch;
    double step_s = 0; /* the last batch's mean step time: sizes the next batch */
    long step = res->first_step; /* steps taken */
    int rc = 0;
    job_status st = JOB_DONE;
    while (step < o->stop_at) {
        long end = o->stop_at;
        if (o->eval_every > 0 && (step / o->eval_every + 1) * o->eval_every < end)
            end = (step / o->eval_every + 1) * o->eval_every;
        if (o->checkpoint_every > 0 && (step / o->checkpoint_every + 1) * o->checkpoint_every < end)
            end = (step / o->checkpoint_every + 1) * o->checkpoint_every;
        long n = end - step;
        if (n > max_batch)
            n = max_batch;
        if (max_batch > 1) {
            long timed = step_s > 0 ? (long)(JOB_BATCH_SECONDS / step_s) : 1;
            if (n > timed)
                n = timed < 1 ? 1 : timed;
        }
        if ((rc = w->steps(w->ctx, (int)n, info, err)) != 0)
            return rc == -2 ? JOB_FAILED : JOB_FAILED_HERE;
        job_counters counters = { -1, NAN, NAN }, *known = NULL;
        if (o->log_counters && w->counters) {
            if ((rc = w->counters(w->ctx, &counters, err)) != 0)
                return outcome(rc);
            known = &counters;
        }
        double batch_s = 0;
        for (long i = 0; i < n; i++) {
            job_step *in = &info[i];
            step++;
            batch_s += in->seconds;
            res->train_s += in->seconds;
            res->tokens += in->tokens;
            res->skipped += in->skipped != 0;
            res->losses[res->n_losses++] = in->loss;
            int log = jsp->speaker && o->log != NULL;
            if ((rc = check_step(jsp, step, in, err)) != 0) {
                zb_err ignored = { { 0 } }; /* the divergence's line wins */
                if (rc == 1 && log)
                    job_log_step(o->log, step, in, known, &ignored);
                return rc == 1 ? JOB_DIVERGED : JOB_FAILED_HERE;
            }
            if (w->boundary && (rc = w->boundary(w->ctx, &info[i], err)) != 0)
                return outcome(rc);
            if (log && job_log_step(o->log, step, in, known, err) != 0)
                return JOB_FAILED_HERE;
            if (!in->left)
                emit(jsp, JOB_EV_STEP, step, in, NAN, 0);
            if (in->left)
                return JOB_LEFT;
            if (in->members_after < in->members)
                emit(jsp, JOB_EV_LEAVE, step, in, NAN, 0);
        }
        step_s = batch_s / (double)n;
        int last = step == o->stop_at;
        int eval_now = o->eval_every > 0 && step % o->eval_every == 0;
        int ckpt_now = eval_now || last || (o->checkpoint_every > 0 && step % o->checkpoint_every == 0);
        /* the way's finish (the islands' final outer step) only at the
         * run's real end: an invocation that stops earlier (--stop-at)
         * checkpoints the state the run would go on from */
        int finishing = w->finish && step == o->steps;
        if (w->eval && (eval_now || (last && !finishing)) &&
            (rc = evaluate(jsp, step, 1, err)) != 0)
            return outcome(rc);
        if (finishing) {
            if ((rc = w->finish(w->ctx, err)) != 0)
                return outcome(rc);
            if (w->eval && (rc = evaluate(jsp, step, 0, err)) != 0)
                return outcome(rc);
        }
        if (ckpt_now && (rc = checkpoint(jsp, step, err)) != 0)
            return outcome(rc);
        if (o->stop) {
            int stop = 0, sig = 0;
            zb_err e = { { 0 } };
            if (w->stop_vote) {
                rc = w->stop_vote(w->ctx, *o->stop != 0, &stop, &e);
                sig = *o->stop ? (int)*o->stop : SIGTERM;
            } else {
                /* the lowest signal number any process got, so that all
                 * report the same one */
                sig = *o->stop ? (int)*o->stop : INT_MAX;
                rc = w->comm ? w->comm->min_int(w->comm->ctx, &sig, &e) : 0;
                stop = sig != INT_MAX;
            }
            if (rc != 0) {
                *err = e;
                return JOB_FAILED_HERE;
            }
            if (stop && !last) {
                /* finish as at the end: the checkpoint of this step */
                if ((rc = checkpoint(jsp, step, err)) != 0)
                    return outcome(rc);
                res->stop_signal = sig;
                st = JOB_STOPPED;
                break;
            }
        }
    }
    return st;
}
