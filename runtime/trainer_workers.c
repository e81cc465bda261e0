/*
 * trainer_workers.c: the executor's threads (trainer_impl.h).  One
 * persistent worker per device, started by the first step and stopped by
 * trainer_free, each bound to its device's kernel team; between jobs they
 * sleep on a condition variable.  A job is a set of PHASE_* bits:
 * trainer_backward runs the workers with only their ops (PHASE_OPS),
 * trainer_apply a second job with only the optimizer step (PHASE_STEP);
 * trainer_step runs both phases in one job, so that a device starts its
 * step as soon as its own lane is done; trainer_steps runs PHASE_BATCH.
 * The post-validation reads the gradient buffers when it runs, so after a
 * caller averaged them between the halves, the norm, clip and rollback
 * decisions are those of the averaged gradient.
 *
 * A worker that fails aborts the transport and the vocabulary executor so
 * that no other worker waits forever; trainer_run_workers then reports the
 * first-hand failure and returns the per-step buffers to their empty state.
 */
#include "runtime/trainer_impl.h"

#include <string.h>

/* One job of worker w: its lane's ops and/or its optimizer step. */
static void run_job(worker *w, int phases)
{
    trainer *t = w->t;
    if (t->opts.one_device && w->dev != t->opts.device)
        return; /* another process runs this device */
    int rc = 0;
    if (t->be->ops->bind)
        rc = t->be->ops->bind(t->be, w->dev, &w->err);
    if (rc == 0 && (phases & PHASE_BATCH))
        rc = trainer_run_batch(w);
    if (rc == 0 && (phases & PHASE_OPS)) {
        rc = trainer_run_ops(w, 0, t->sched->dev[w->dev].n_ops);
        if (rc == 0)
            rc = trainer_lane_sync(w);
        /* the head's gradient is whole once every device's T has run (and,
         * across processes, its columns have reached the last stage's
         * rank): before the optimizer, and before a gradient all-reduce
         * between trainer_backward and trainer_apply */
        if (rc == 0 && t->ve)
            rc = vocab_exec_finish(t->ve, w->dev, &w->err);
    }
    if (rc == 0 && (phases & PHASE_STEP) && !t->opts.sync_optimizer)
        rc = trainer_post_validated_step(t, w, -1, NULL);
    if (rc != 0) {
        w->failed = 1;
        t->tr->ops->abort(t->tr);
        if (t->ve)
            vocab_exec_abort(t->ve);
    }
}

/* A persistent worker: binds its device's team, then runs one job per
 * generation until told to stop. */
static void *worker_main(void *arg)
{
    worker *w = arg;
    trainer *t = w->t;
    kern_team_bind(t->team[w->dev]);
    unsigned long seen = 0;
    pthread_mutex_lock(&t->wmu);
    for (;;) {
        while (!t->wstop && t->wgen == seen)
            pthread_cond_wait(&t->wgo, &t->wmu);
        if (t->wstop)
            break;
        seen = t->wgen;
        int phases = t->wphases;
        pthread_mutex_unlock(&t->wmu);
        w->failed = 0;
        w->err.msg[0] = '\0';
        run_job(w, phases);
        pthread_mutex_lock(&t->wmu);
        if (--t->wpending == 0)
            pthread_cond_signal(&t->wdone);
    }
    pthread_mutex_unlock(&t->wmu);
    kern_team_bind(NULL);
    return NULL;
}

/* Starts the teams and the workers (first step only).  0, or -1 with err
 * set, leaving none running. */
int trainer_workers_start(trainer *t, zb_err *err)
{
    if (t->n_started == t->n_devices)
        return 0;
    for (int d = 0; d < t->n_devices; d++)
        if (!t->team[d] && kern_team_create(t->threads, &t->team[d]) != 0)
            return zb_fail(err, "cannot start %d kernel threads for device %d", t->threads, d);
    for (int d = 0; d < t->n_devices; d++) {
        t->w[d].t = t;
        t->w[d].dev = d;
        if (pthread_create(&t->tid[d], NULL, worker_main, &t->w[d]) != 0) {
            trainer_workers_stop(t);
            return zb_fail(err, "cannot start the worker thread of device %d", d);
        }
        t->n_started++;
    }
    return 0;
}

/* Stops and joins the workers that run; idempotent. */
void trainer_workers_stop(trainer *t)
{
    if (t->n_started == 0)
        return;
    pthread_mutex_lock(&t->wmu);
    t->wstop = 1;
    pthread_cond_broadcast(&t->wgo);
    pthread_mutex_unlock(&t->wmu);
    for (int d = 0; d < t->n_started; d++)
        pthread_join(t->tid[d], NULL);
    t->n_started = 0;
    t->wstop = 0;
}

/* Returns every per-micro-batch buffer to its empty state after a failed
 * step so the trainer can be freed (or stepped again) cleanly. */
void trainer_reset_step_state(trainer *t)
{
    t->tr->ops->reset(t->tr);
    if (t->ve)
        vocab_exec_reset(t->ve);
    for (int s = 0; s < t->n_stages; s++) {
        stage_rt *r = &t->st[s];
        for (int j = 0; j < t->n_micro; j++) {
            trainer_w_scratch_put(t, r, r->w_scratch[j]);
            r->w_scratch[j] = NULL;
            zb_backend *be = t->be;
            if (be->ops->saved_bytes(be, r->saved[j]) > 0) {
                zb_err e;
                be->ops->saved_free(be, r->saved[j]);
                r->saved[j] = NULL;
                if (be->ops->saved_new(be, r->bs, t->batch, r->recompute, &r->saved[j], &e) != 0)
                    trainer_be_fail(t, &e);
            }
        }
    }
}

/* Runs one job of every device's worker with the given PHASE_* bits and
 * waits for all of them.  Returns 0, or -1 with err set (the first-hand
 * failure) after resetting the per-step buffers. */
int trainer_run_workers(trainer *t, int phases, zb_err *err)
{
    if (trainer_workers_start(t, err) != 0) {
        trainer_reset_step_state(t);
        return -1;
    }
    pthread_mutex_lock(&t->wmu);
    t->wphases = phases;
    t->wpending = t->n_devices;
    t->wgen++;
    pthread_cond_broadcast(&t->wgo);
    while (t->wpending > 0)
        pthread_cond_wait(&t->wdone, &t->wmu);
    pthread_mutex_unlock(&t->wmu);
    /* Report the worker that failed first-hand, not the ones that only saw
     * the channel abort it caused. */
    worker *w = t->w;
    int failed = 0;
    for (int d = 0; d < t->n_devices && !failed; d++) {
        if (w[d].failed && strcmp(w[d].err.msg, "aborted") != 0) {
            zb_fail(err, "device %d: %s", d, w[d].err.msg);
            failed = 1;
        }
    }
    if (!failed)
        for (int d = 0; d < t->n_devices; d++)
            if (w[d].failed) {
                zb_fail(err, "device %d: %s", d, w[d].err.msg);
                failed = 1;
                break;
            }
    if (failed) {
        trainer_reset_step_state(t);
        return -1;
    }
    return 0;
}
