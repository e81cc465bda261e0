/*
 * trainer_step.c: the step entry points of trainer.h: trainer_step,
 * trainer_steps (a batch of steps without a barrier between them),
 * trainer_backward / trainer_apply (a step in two halves, for replicas
 * that average their gradients in between), and the synchronous clip that
 * opts.sync_optimizer selects.  Each draws or copies the micro-batches,
 * zeroes the gradients, posts one job to the workers (trainer_workers.c)
 * and turns what they recorded into the step's counters.
 */
#include "runtime/trainer_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/transport_factory.h"

/* The reference path: the full norm first, then every stage steps. */
static void synchronous_step(trainer *t)
{
    double full = 0;
    zb_err e;
    for (int s = 0; s < t->n_stages; s++)
        if (trainer_add_stage_norm(t, &t->st[s], &full, &e) != 0) {
            trainer_be_fail(t, &e);
            return;
        }
    t->full_sq = full;
    if (!isfinite(full))
        return;
    float scale = adamw_clip_scale(full, t->opts.adamw.grad_clip);
    for (int s = 0; s < t->n_stages; s++)
        if (trainer_stage_update(t, &t->st[s], scale, &e) != 0) {
            trainer_be_fail(t, &e);
            return;
        }
}

/* Starts a step: the micro-batches (drawn from the generator when x is
 * NULL, else copied from the caller's [m][B*T] tokens), zeroed gradients,
 * the step's learning rate and its clock. */
static void step_begin(trainer *t, const int32_t *x, const int32_t *y)
{
    size_t tok = (size_t)t->batch * (size_t)t->seq;
    if (x) {
        memcpy(t->x, x, sizeof *t->x * tok * (size_t)t->n_micro);
        memcpy(t->y, y, sizeof *t->y * tok * (size_t)t->n_micro);
    } else {
        for (int j = 0; j < t->n_micro; j++)
            data_train_batch(t->data, &t->rng, t->batch, t->x + tok * (size_t)j,
                             t->y + tok * (size_t)j);
    }
    for (int s = 0; s < t->n_stages; s++) {
        zb_err e;
        if (t->be->ops->grads_zero(t->be, t->st[s].bs, NULL, &e) != 0)
            trainer_be_fail(t, &e);
        t->st[s].next_w = 0;
        t->st[s].stepped = 0;
        t->st[s].x = t->x;
        t->st[s].y = t->y;
    }
    t->step_lr = adamw_lr(&t->opts.adamw, (int)t->stats.step);
    t->rollbacks_step = 0;
    t->full_sq = 0;
    for (int d = 0; d < t->n_devices; d++)
        t->act_peak[d] = 0;
    if (t->ve) {
        zb_err e;
        if (trainer_vocab_begin(t, t->y, 0, &e) != 0)
            trainer_be_fail(t, &e);
    }
    clock_gettime(CLOCK_MONOTONIC, &t->t0);
}

/* Ends a step whose optimizer work ran (or runs here, synchronous path):
 * counters and times. */
static void step_end(trainer *t, double loss)
{
    if (t->opts.sync_optimizer)
        synchronous_step(t);
    t->tr->ops->reset(t->tr);
    t->stats.step++;
    t->stats.last_loss = loss;
    t->stats.last_grad_norm = sqrt(t->full_sq);
    t->stats.last_step_s = ms_since(&t->t0) * 1e-3;
    t->stats.last_lr = t->step_lr;
    t->stats.rollbacks += t->rollbacks_step;
    t->stats.rollback_steps += t->rollbacks_step > 0;
    if (!isfinite(t->full_sq))
        t->stats.skipped_steps++;
    t->have_times = t->opts.record_times;
}

int trainer_step(trainer *t, double *loss, zb_err *err)
{
    if (t->pending)
        return zb_fail(err, "trainer_step: a backward is pending its trainer_apply");
    if (trainer_mirrors_push(t, err) != 0)
        return -1;
    step_begin(t, NULL, NULL);
    if (trainer_be_check(t, err) != 0)
        return -1;
    /* Ops and optimizer step in one set of workers: each device steps as
     * soon as its lane is done, the post-validation overlap of the paper.
     * The arithmetic is that of trainer_backward + trainer_apply. */
    if (trainer_run_workers(t, PHASE_OPS | PHASE_STEP, err) != 0)
        return -1;
    *loss = trainer_step_loss(t);
    step_end(t, *loss);
    trainer_mirrors_device_wrote(t, (1u << ZB_BUF_COUNT) - 1);
    return trainer_be_check(t, err);
}

/* Room in the batch buffers for n steps.  0, or -1 (memory; the old
 * buffers are kept). */
static int batch_reserve(trainer *t, int n)
{
    if (n <= t->b_cap)
        return 0;
    size_t tok = batch_tokens(t, n);
    int32_t *bx = realloc(t->bx, sizeof *bx * tok);
    if (bx)
        t->bx = bx;
    int32_t *by = realloc(t->by, sizeof *by * tok);
    if (by)
        t->by = by;
    double *bl = realloc(t->b_loss, sizeof *bl * (size_t)n);
    if (bl)
        t->b_loss = bl;
    double *bf = realloc(t->b_full_sq, sizeof *bf * (size_t)n);
    if (bf)
        t->b_full_sq = bf;
    double *be = realloc(t->b_end, sizeof *be * (size_t)n * (size_t)t->n_devices);
    if (be)
        t->b_end = be;
    unsigned char *br = realloc(t->b_rolled, (size_t)n);
    if (br)
        t->b_rolled = br;
    if (!bx || !by || !bl || !bf || !be || !br)
        return -1;
    t->b_cap = n;
    return 0;
}

/* Shifts the recorded op times (the batch's last step) so that they count
 * from that step's earliest op start, as trainer_trace promises. */
static void batch_trace_times(trainer *t)
{
    double first = INFINITY;
    for (int d = 0; d < t->n_devices; d++)
        for (int k = 0; k < t->sched->dev[d].n_ops; k++)
            first = fmin(first, t->op_start[d][k]);
    if (!isfinite(first))
        return;
    for (int d = 0; d < t->n_devices; d++)
        for (int k = 0; k < t->sched->dev[d].n_ops; k++) {
            t->op_start[d][k] -= first;
            t->op_end[d][k] -= first;
            t->op_mid[d][k] -= first;
        }
}

int trainer_steps(trainer *t, int n, trainer_step_info *info, zb_err *err)
{
    if (t->pending)
        return zb_fail(err, "trainer_steps: a backward is pending its trainer_apply");
    if (n < 1)
        return zb_fail(err, "trainer_steps: %d steps", n);
    /* vocabulary passes overlap too (trainer_run_batch begins each step's
     * on the last stage's device), except where stage 0 is the last stage:
     * its speculative forwards would hand over X before that */
    int overlap = n > 1 && trainer_may_speculate(t);
    if (!overlap) {
        /* Ordered links (FIFO, MPI) number a step's messages per link and
         * the synchronous clip has a barrier by definition: step by step. */
        for (int i = 0; i < n; i++) {
            double loss;
            if (trainer_step(t, &loss, err) != 0)
                return -1;
            if (info)
                info[i] = (trainer_step_info){ loss, t->stats.last_grad_norm, t->stats.last_lr,
                                               t->stats.last_step_s, !isfinite(t->full_sq) };
        }
        return 0;
    }
    if (batch_reserve(t, n) != 0)
        return zb_fail(err, "out of memory for %d steps' micro-batches", n);
    if (trainer_mirrors_push(t, err) != 0)
        return -1;
    size_t tok = (size_t)t->batch * (size_t)t->seq;
    for (int i = 0; i < n; i++) /* the draws of n single steps, in the same order */
        for (int j = 0; j < t->n_micro; j++) {
            size_t off = batch_tokens(t, i) + tok * (size_t)j;
            data_train_batch(t->data, &t->rng, t->batch, t->bx + off, t->by + off);
        }
    for (int s = 0; s < t->n_stages; s++) {
        zb_err e;
        if (t->be->ops->grads_zero(t->be, t->st[s].bs, NULL, &e) != 0)
            trainer_be_fail(t, &e);
        t->st[s].next_w = 0;
        t->st[s].stepped = 0;
    }
    if (trainer_be_check(t, err) != 0)
        return -1;
    if (t->ve && trainer_vocab_begin(t, t->by, 0, err) != 0) /* the first step's; then run_batch */
        return -1;
    t->b_n = n;
    t->b_step0 = t->stats.step;
    t->b_spec = t->b_redone = 0;
    t->step_lr = adamw_lr(&t->opts.adamw, (int)t->stats.step);
    t->rollbacks_step = 0;
    memset(t->b_rolled, 0, (size_t)n);
    t->full_sq = 0;
    for (int d = 0; d < t->n_devices; d++)
        t->act_peak[d] = 0;
    clock_gettime(CLOCK_MONOTONIC, &t->t0);
    int rc = trainer_run_workers(t, PHASE_BATCH, err);
    t->b_n = 0;
    if (rc != 0)
        return -1;
    t->tr->ops->reset(t->tr);
    double prev = 0;
    for (int i = 0; i < n; i++) {
        double end = 0;
        for (int d = 0; d < t->n_devices; d++)
            end = fmax(end, t->b_end[(size_t)i * (size_t)t->n_devices + (size_t)d]);
        trainer_step_info r = { t->b_loss[i], sqrt(t->b_full_sq[i]),
                                adamw_lr(&t->opts.adamw, (int)(t->b_step0 + i)),
                                (end - prev) * 1e-3, !isfinite(t->b_full_sq[i]) };
        prev = end;
        if (info)
            info[i] = r;
        t->stats.step++;
        t->stats.rollback_steps += t->b_rolled[i];
        t->stats.last_loss = r.loss;
        t->stats.last_grad_norm = r.grad_norm;
        t->stats.last_step_s = r.seconds;
        t->stats.last_lr = r.lr;
        t->stats.skipped_steps += r.skipped;
    }
    t->full_sq = t->b_full_sq[n - 1];
    t->stats.rollbacks += t->rollbacks_step;
    t->stats.overlapped_steps += n - 1;
    t->stats.spec_forwards += t->b_spec; /* the workers are joined: no race */
    t->stats.spec_redone += t->b_redone;
    if (t->opts.record_times)
        batch_trace_times(t);
    t->have_times = t->opts.record_times;
    trainer_mirrors_device_wrote(t, (1u << ZB_BUF_COUNT) - 1);
    return trainer_be_check(t, err);
}

static int backward(trainer *t, const int32_t *x, const int32_t *y, double *loss, zb_err *err)
{
    if (t->pending)
        return zb_fail(err, "trainer_backward: the previous backward was not applied");
    if (trainer_mirrors_push(t, err) != 0)
        return -1;
    step_begin(t, x, y);
    if (trainer_be_check(t, err) != 0)
        return -1;
    if (trainer_run_workers(t, PHASE_OPS, err) != 0)
        return -1;
    trainer_mirrors_device_wrote(t, 1u << ZB_BUF_GRADS);
    if (trainer_be_check(t, err) != 0)
        return -1;
    t->pending_loss = trainer_step_loss(t);
    t->pending = 1;
    *loss = t->pending_loss;
    return 0;
}

int trainer_backward(trainer *t, double *loss, zb_err *err)
{
    return backward(t, NULL, NULL, loss, err);
}

int trainer_backward_on(trainer *t, const int32_t *x, const int32_t *y, double *loss,
                        zb_err *err)
{
    return backward(t, x, y, loss, err);
}

int trainer_apply(trainer *t, zb_err *err)
{
    if (!t->pending)
        return zb_fail(err, "trainer_apply: no backward to apply");
    t->pending = 0;
    /* the caller may have replaced the gradients (an average of replicas) */
    if (trainer_mirrors_push(t, err) != 0)
        return -1;
    if (!t->opts.sync_optimizer && trainer_run_workers(t, PHASE_STEP, err) != 0)
        return -1;
    step_end(t, t->pending_loss);
    trainer_mirrors_device_wrote(t, (1u << ZB_BUF_COUNT) - 1);
    return trainer_be_check(t, err);
}

int trainer_pending(const trainer *t)
{
    return t->pending;
}
