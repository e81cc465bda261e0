/*
 * trainer_ops.c: what one device's worker does (trainer_impl.h): its
 * lane's ops, the activation pool they share, and the optimizer step with
 * post-validation, including the speculative forwards of trainer_steps.
 *
 * trainer_steps runs PHASE_BATCH: each worker loops over the batch's steps
 * (trainer_run_batch), with no barrier between them; the only shared state
 * a step changes (the learning rate) is written by stage 0's device after
 * stage 0's validation, which every stage update of the step precedes and
 * every one of the next step follows.  Speculation (the next step's
 * leading stage-0 forwards, between stage 0's optimistic step and its
 * validation) is in trainer_post_validated_step, see trainer.h.
 *
 * Post-validation in detail (per stage s, devices handle their stages in
 * increasing order on the way up and decreasing order on the way down, which
 * cannot deadlock because the chain follows the total stage order):
 *
 *   up     partial = partial(s-1) + Σ per-tensor squared norms of s, added
 *          one tensor at a time (the same additions the single-device run
 *          makes, so the full sum is bit-identical for every split);
 *          the optimistic action is a step when partial is finite and does
 *          not yet require clipping.  Only stage 0 acts on it, and only
 *          when the next step's leading forwards will run speculatively:
 *          it copies its parameters aside and writes the new ones
 *          (speculative_update), leaving m and v as they were.
 *   down   the full sum arrives from s+1 (stage S-1 has it already) and
 *          goes on to s-1.  The right action is: skip (not finite),
 *          clipped step (the clip scale is below 1) or unclipped step
 *          (stage_validate).  A stage that did not speculate just does it;
 *          stage 0 after a right speculation writes the step's m and v,
 *          after a wrong one puts its parameters back and does the right
 *          one.  A wrong optimistic action counts as a rollback either way.
 *
 * Why not the paper's in-place inverse (Algorithm 1: θ, then m and v,
 * then t-1): in fp32 it does not give the same bits back (AdamW's m and v
 * updates are many-to-one; tests/kernels/test_adamw.c counts the misses),
 * and the executor promises results bit-identical to the synchronous
 * clip.  So the only copy is the one thing speculation must change before
 * the norm is known: stage 0's parameters (docs/cost-model.md, "rollback
 * state"), 4 bytes a parameter of stage 0, where a copy of params, m and v
 * of every stage took 12 bytes a parameter of the model.  m and v need no
 * copy because the split update (adamw_update_params / _moments) writes
 * them only once the step is confirmed; a backend without it (CUDA)
 * copies params, m and v of stage 0.
 */
#include "runtime/trainer_impl.h"

#include <assert.h>
#include <math.h>

/* An activation- or gradient-sized buffer (act_floats elements of the
 * backend's type) from the trainer's pool, made by the backend only while
 * the pool has not yet reached the step's high-water mark; NULL when
 * memory runs out.  dev >= 0: the device that will write it, whose stream
 * then waits for the buffer's last use (backend.h's fences); -1 for the
 * transport, which only passes buffers on. */
static void *act_get(trainer *t, int dev)
{
    void *p = NULL;
    pthread_mutex_lock(&t->mu);
    if (t->act_pool_n > 0)
        p = t->act_pool[--t->act_pool_n];
    pthread_mutex_unlock(&t->mu);
    if (!p)
        return t->be->ops->act_new(t->be, t->act_floats);
    if (dev >= 0 && t->be->ops->act_wait) {
        zb_err ignored;
        if (t->be->ops->act_wait(t->be, dev, p, &ignored) != 0) {
            t->be->ops->act_free(t->be, p);
            return NULL;
        }
    }
    return p;
}

/* Returns a buffer of act_get to the pool (NULL is fine) after device dev
 * (-1: none) issued its last use; frees it when the pool is full. */
static void act_put(trainer *t, int dev, void *p)
{
    if (!p)
        return;
    if (dev >= 0 && t->be->ops->act_issued) {
        zb_err ignored; /* a failed record leaves an older fence: the next
                         * user waits on that one, and the step fails anyway */
        t->be->ops->act_issued(t->be, dev, p, &ignored);
    }
    pthread_mutex_lock(&t->mu);
    if (t->act_pool_n < t->act_pool_cap) {
        t->act_pool[t->act_pool_n++] = p;
        p = NULL;
    }
    pthread_mutex_unlock(&t->mu);
    if (p)
        t->be->ops->act_free(t->be, p);
}

/* The pool as the transport sees it (transport.h). */
void *trainer_pool_get(void *ctx)
{
    return act_get(ctx, -1);
}

void trainer_pool_put(void *ctx, void *buf)
{
    act_put(ctx, -1, buf);
}

/* Sends key (kind, stage, mb) through the trainer's transport; dev >= 0
 * with a buffer: the sending device, whose use of buf is marked issued. */
static int tr_send(trainer *t, int dev, int kind, int stage, int mb, void *buf, double val,
                   zb_err *err)
{
    if (buf && dev >= 0 && t->be->ops->act_issued
        && t->be->ops->act_issued(t->be, dev, buf, err) != 0) {
        act_put(t, -1, buf);
        return -1;
    }
    return t->tr->ops->send(t->tr, (zb_msg_key){ kind, stage, mb }, buf, val, err);
}

/* Receives key (kind, stage, mb); buf may be NULL for the norms.  dev >= 0
 * with a buffer: the receiving device, which waits for the sender's use. */
static int tr_recv(trainer *t, int dev, int kind, int stage, int mb, void **buf, double *val,
                   zb_err *err)
{
    if (t->tr->ops->recv(t->tr, (zb_msg_key){ kind, stage, mb }, buf, val, err) != 0)
        return -1;
    if (buf && *buf && dev >= 0 && t->be->ops->act_wait
        && t->be->ops->act_wait(t->be, dev, *buf, err) != 0) {
        act_put(t, -1, *buf);
        *buf = NULL;
        return -1;
    }
    return 0;
}

/* A zeroed weight-gradient scratch of stage r (only its device's worker,
 * or the main thread between steps, touches r's spares); NULL on failure. */
static zb_bgrads *w_scratch_get(trainer *t, stage_rt *r)
{
    if (r->n_w_free == 0)
        return t->be->ops->grads_new(t->be, r->bs);
    zb_bgrads *p = r->w_free[--r->n_w_free];
    zb_err ignored;
    if (t->be->ops->grads_zero(t->be, r->bs, p, &ignored) != 0) {
        t->be->ops->grads_free(t->be, p);
        return NULL;
    }
    return p;
}

/* Keeps a scratch of w_scratch_get for the next W that runs ahead. */
void trainer_w_scratch_put(trainer *t, stage_rt *r, zb_bgrads *p)
{
    if (!p)
        return;
    if (r->n_w_free < t->n_micro)
        r->w_free[r->n_w_free++] = p;
    else
        t->be->ops->grads_free(t->be, p);
}

/* Each op function receives its input first and then stamps *start (when
 * not NULL), so that a measured op starts when its compute starts, as in
 * the simulator, and time blocked in a receive shows up as a bubble; it
 * stamps *end before it sends its output, so that a consumer never appears
 * to start before its producer ended.  On a GPU backend the stamps are
 * when the op was issued, not when it ran. */
static void stamp(const trainer *t, double *start)
{
    if (start)
        *start = ms_since(&t->t0);
}

static int op_forward(trainer *t, int s, int j, double *start, double *end, zb_err *err)
{
    stage_rt *r = &t->st[s];
    zb_backend *be = t->be;
    size_t tok = (size_t)t->batch * (size_t)t->seq;
    int last = s == t->n_stages - 1 && !t->ve; /* with vocab_exec the head runs in S/T */
    void *in = NULL; /* the forward copies its input into the saved state */
    if (s > 0 && tr_recv(t, r->device, CHAN_ACT, s, j, &in, NULL, err) != 0)
        return -1;
    stamp(t, start);
    void *out = NULL;
    if (!last && !(out = act_get(t, r->device))) {
        act_put(t, r->device, in);
        return zb_fail(err, "out of memory for an activation");
    }
    /* the loss lands in mb_loss[j] by the time the lane syncs its stages */
    int rc = be->ops->forward(be, r->bs, r->saved[j], s == 0 ? r->x + tok * (size_t)j : NULL, in,
                              last ? r->y + tok * (size_t)j : NULL, out,
                              last ? &t->mb_loss[j] : NULL, err);
    act_put(t, r->device, in);
    if (rc != 0) {
        act_put(t, r->device, out);
        return zb_wrap(err, "F of stage %d, micro-batch %d: ", s, j);
    }
    stamp(t, end);
    if (t->ve && s == t->n_stages - 1) {
        rc = vocab_exec_put_x(t->ve, r->device, j, out, err); /* the head input's broadcast */
        act_put(t, r->device, out);
        if (rc != 0)
            return zb_wrap(err, "F of stage %d, micro-batch %d: ", s, j);
    } else if (!last && tr_send(t, r->device, CHAN_ACT, s + 1, j, out, 0, err) != 0)
        return -1;
    return 0;
}

/* B of (s, j).  With held != NULL (the B half of a fused BW) the input
 * gradient is handed back in *held instead of sent, so that the caller
 * sends it after W: a fused op's outputs exist only when it ends. */
static int op_backward_b(trainer *t, int s, int j, double *start, double *end, void **held,
                         zb_err *err)
{
    stage_rt *r = &t->st[s];
    zb_backend *be = t->be;
    void *dy = NULL;
    if (s < t->n_stages - 1) {
        if (tr_recv(t, r->device, CHAN_GRAD, s, j, &dy, NULL, err) != 0)
            return -1;
    } else if (t->ve) { /* the head input's gradient, after barrier C0 or C1 */
        if (!(dy = act_get(t, r->device)))
            return zb_fail(err, "out of memory for a gradient");
        if (vocab_exec_take_dx(t->ve, r->device, j, 1.0f / (float)t->n_micro, dy, &t->mb_loss[j],
                              err) != 0) {
            act_put(t, r->device, dy);
            return -1;
        }
    }
    stamp(t, start);
    void *dx = NULL;
    if (s > 0 && !(dx = act_get(t, r->device))) {
        act_put(t, r->device, dy);
        return zb_fail(err, "out of memory for a gradient");
    }
    int rc = be->ops->backward_b(be, r->bs, r->saved[j], 1.0f / (float)t->n_micro, dy, dx, err);
    act_put(t, r->device, dy);
    if (rc != 0) {
        act_put(t, r->device, dx);
        return zb_wrap(err, "B of stage %d, micro-batch %d: ", s, j);
    }
    stamp(t, end);
    if (held)
        *held = dx;
    else if (s > 0 && tr_send(t, r->device, CHAN_GRAD, s - 1, j, dx, 0, err) != 0)
        return -1;
    return 0;
}

/* W adds into grads only in micro-batch order (kernels/cpu/llama.h's
 * determinism contract); a W that runs ahead writes into a zeroed scratch
 * that is added when its turn comes. */
static int op_backward_w(trainer *t, int s, int j, zb_err *err)
{
    stage_rt *r = &t->st[s];
    zb_backend *be = t->be;
    if (j == r->next_w) {
        if (be->ops->backward_w(be, r->bs, r->saved[j], NULL, err) != 0)
            return zb_wrap(err, "W of stage %d, micro-batch %d: ", s, j);
        r->next_w++;
        while (r->next_w < t->n_micro && r->w_scratch[r->next_w]) {
            if (be->ops->grads_add(be, r->bs, r->w_scratch[r->next_w], err) != 0)
                return zb_wrap(err, "W of stage %d, micro-batch %d: ", s, r->next_w);
            trainer_w_scratch_put(t, r, r->w_scratch[r->next_w]);
            r->w_scratch[r->next_w] = NULL;
            r->next_w++;
        }
    } else {
        assert(j > r->next_w);
        zb_bgrads *scratch = w_scratch_get(t, r);
        if (!scratch)
            return zb_fail(err, "out of memory for a weight-gradient scratch");
        if (be->ops->backward_w(be, r->bs, r->saved[j], scratch, err) != 0) {
            trainer_w_scratch_put(t, r, scratch);
            return zb_wrap(err, "W of stage %d, micro-batch %d: ", s, j);
        }
        r->w_scratch[j] = scratch;
    }
    return 0;
}

/* Sum of squares of the stage's gradient added tensor by tensor onto
 * *partial, so that the running total is the same sequence of additions
 * however the model is split.  0 or -1 (backend failure). */
int trainer_add_stage_norm(trainer *t, stage_rt *r, double *partial, zb_err *err)
{
    if (r->sq_given) /* ZeRO-1: the replicas summed the reduced gradient's squares */
        r->sq_given = 0;
    else if (t->be->ops->grad_sumsq(t->be, r->bs, r->tensor_sq, err) != 0)
        return -1;
    for (int i = 0; i < r->layout.n_tensors; i++)
        *partial += r->tensor_sq[i];
    return 0;
}

/* 1 when a squared norm calls for clipping (the same test the synchronous
 * path applies through adamw_clip_scale). */
static int needs_clip(const trainer *t, double sq)
{
    return t->opts.adamw.grad_clip > 0 && adamw_clip_scale(sq, t->opts.adamw.grad_clip) < 1.0f;
}

int trainer_stage_update(trainer *t, stage_rt *r, float scale, zb_err *err)
{
    r->adam_t++;
    return t->be->ops->adamw(t->be, r->bs, &t->opts.adamw, (int)r->adam_t, (float)t->step_lr,
                             scale, err);
}

/* Stage 0's speculative step (unclipped, on the partial norm), so that
 * the next step's leading forwards can run on its parameters before the
 * full norm arrives.  On a backend with the split update (adamw_params,
 * adamw_moments) only the parameters are written, over a copy of the old
 * ones, and m and v wait for stage_validate; on another the whole step,
 * over a copy of params, m and v (backend.h's snapshot). */
static int speculative_update(trainer *t, stage_rt *r, zb_err *err)
{
    zb_backend *be = t->be;
    r->snap_t = r->adam_t;
    r->speculated = 1;
    if (!be->ops->adamw_params) {
        if (be->ops->snapshot(be, r->bs, err) != 0)
            return -1;
        return trainer_stage_update(t, r, 1.0f, err);
    }
    r->adam_t++;
    return be->ops->adamw_params(be, r->bs, &t->opts.adamw, (int)r->adam_t, (float)t->step_lr,
                                 1.0f, err);
}

/* The stage's optimizer step once the full squared norm `full` is known:
 * skip when it is not finite, else step with its clip scale at learning
 * rate lr.  A speculative step that was right gets its moments; one that
 * was wrong is undone first (the copied parameters back, adam_t back).
 * 0 or -1 (backend failure). */
static int stage_validate(trainer *t, stage_rt *r, double full, float lr, zb_err *err)
{
    zb_backend *be = t->be;
    int finite = isfinite(full), right = finite && !needs_clip(t, full);
    if (r->speculated) {
        r->speculated = 0;
        if (right)
            return be->ops->adamw_params
                       ? be->ops->adamw_moments(be, r->bs, &t->opts.adamw, 1.0f, err)
                       : 0;
        r->adam_t = r->snap_t;
        if ((be->ops->adamw_params ? be->ops->adamw_undo(be, r->bs, err)
                                   : be->ops->restore(be, r->bs, err))
            != 0)
            return -1;
    }
    if (!finite)
        return 0;
    r->adam_t++;
    return be->ops->adamw(be, r->bs, &t->opts.adamw, (int)r->adam_t, lr,
                          adamw_clip_scale(full, t->opts.adamw.grad_clip), err);
}

/* 1 when batch step i (trainer_steps; -1: a single step) is followed by
 * another whose leading stage-0 forwards may run speculatively. */
static int batch_spec(const trainer *t, int i)
{
    return i >= 0 && i + 1 < t->b_n && t->spec_len > 0;
}

/* The optimizer step of every stage of worker w's device, with
 * post-validation.  i is the step's index in a trainer_steps batch, or -1
 * for a single step.  In a batch, the device of stage 0 runs the next
 * step's leading stage-0 forwards right after stage 0's optimistic step
 * (*spec_ran = 1), and redoes them if the full norm rolls stage 0 back;
 * the device of stage 1 then drops the activations they sent before it
 * passes the norm down, so the redone ones find their keys free. */
int trainer_post_validated_step(trainer *t, worker *w, int i, int *spec_ran)
{
    int dev = w->dev;
    zb_err *err = &w->err;
    int S = t->n_stages;
    int spec_in = 0; /* stage 1 here, and stage 0 speculated (same test as its device's) */
    if (spec_ran)
        *spec_ran = 0;
    for (int s = 0; s < S; s++) {
        stage_rt *r = &t->st[s];
        if (r->device != dev)
            continue;
        double partial = 0;
        if (s > 0 && tr_recv(t, -1, CHAN_NORM_UP, s, 0, NULL, &partial, err) != 0)
            return -1;
        if (s == 1) /* stage 0's partial: it stepped, and so speculated, iff this passes */
            spec_in = batch_spec(t, i) && isfinite(partial) && !needs_clip(t, partial);
        if (trainer_add_stage_norm(t, r, &partial, err) != 0)
            return -1;
        /* the optimistic action; only stage 0 acts on it, and only when
         * it speculates (any other stage's update waits for the full norm,
         * as nothing reads its parameters before that) */
        r->stepped = isfinite(partial) && !needs_clip(t, partial);
        if (s == 0 && r->stepped && batch_spec(t, i) && speculative_update(t, r, err) != 0)
            return -1;
        if (s < S - 1) {
            if (tr_send(t, -1, CHAN_NORM_UP, s + 1, 0, NULL, partial, err) != 0)
                return -1;
        } else {
            t->full_sq = partial;
            if (i >= 0)
                t->b_full_sq[i] = partial;
        }
        if (s == 0 && r->stepped && batch_spec(t, i)) {
            /* Speculate: the next step's forwards that need no message,
             * on the optimistic parameters. */
            r->x = t->bx + batch_tokens(t, i + 1);
            r->y = t->by + batch_tokens(t, i + 1);
            if (t->opts.record_times)
                t->act_peak[dev] = 0;
            if (trainer_run_ops(w, 0, t->spec_len) != 0)
                return -1;
            *spec_ran = 1;
            t->b_spec += t->spec_len; /* only stage 0's worker counts */
        }
    }
    const sched_lane *lane0 = &t->sched->dev[t->st[0].device];
    for (int s = S - 1; s >= 0; s--) {
        stage_rt *r = &t->st[s];
        if (r->device != dev)
            continue;
        double full = 0;
        if (s == S - 1)
            full = t->full_sq; /* written by this same worker on the way up */
        else if (tr_recv(t, -1, CHAN_NORM_DOWN, s, 0, NULL, &full, err) != 0)
            return -1;
        int finite = isfinite(full), clip = finite && needs_clip(t, full);
        /* read before the norm goes down: stage 0's device writes the next
         * step's rate once its own validation is done */
        float lr = (float)t->step_lr;
        if (r->stepped && !(finite && !clip)) {
            /* the optimistic action was wrong (a speculated stage undoes it) */
            pthread_mutex_lock(&t->mu);
            t->rollbacks_step++;
            if (i >= 0)
                t->b_rolled[i] = 1;
            pthread_mutex_unlock(&t->mu);
        }
        int spec_wrong = !(finite && !clip); /* stage 0's speculation was on wrong parameters */
        if (s == 1 && spec_in && spec_wrong)
            for (int k = 0; k < t->spec_len; k++) {
                void *buf = NULL;
                if (tr_recv(t, dev, CHAN_ACT, 1, lane0->ops[k].mb, &buf, NULL, err) != 0)
                    return -1;
                act_put(t, dev, buf);
            }
        if (s > 0 && tr_send(t, -1, CHAN_NORM_DOWN, s - 1, 0, NULL, full, err) != 0)
            return -1;
        if (stage_validate(t, r, full, lr, err) != 0)
            return -1;
        if (s == 0 && spec_ran && *spec_ran && spec_wrong) {
            zb_backend *be = t->be;
            for (int k = 0; k < t->spec_len; k++) {
                int j = lane0->ops[k].mb;
                be->ops->saved_free(be, r->saved[j]);
                r->saved[j] = NULL;
                if (be->ops->saved_new(be, r->bs, t->batch, r->recompute, &r->saved[j], err) != 0)
                    return -1;
            }
            if (trainer_run_ops(w, 0, t->spec_len) != 0)
                return -1;
            t->b_redone += t->spec_len;
        }
    }
    return 0;
}

/* Updates device dev's activation peak with what its stages hold now.
 * Only dev's worker touches its stages' saved state, so no lock.  O(S m)
 * per op, negligible next to the op itself. */
static void note_activations(trainer *t, int dev)
{
    double held = 0;
    for (int s = 0; s < t->n_stages; s++)
        if (t->st[s].device == dev)
            for (int j = 0; j < t->n_micro; j++)
                held += (double)t->be->ops->saved_bytes(t->be, t->st[s].saved[j]);
    if (t->ve)
        held += vocab_exec_held_bytes(t->ve, dev);
    if (held > t->act_peak[dev])
        t->act_peak[dev] = held;
}

/* Ops [from, to) of worker w's lane.  0, or -1 with w->err set. */
int trainer_run_ops(worker *w, int from, int to)
{
    trainer *t = w->t;
    const sched_lane *lane = &t->sched->dev[w->dev];
    int rc = 0;
    for (int k = from; k < to && rc == 0; k++) {
        sched_op op = lane->ops[k];
        double *start = t->opts.record_times ? &t->op_start[w->dev][k] : NULL;
        double *end = t->opts.record_times ? &t->op_end[w->dev][k] : NULL;
        switch ((op_kind)op.kind) {
        case OP_F:
            rc = op_forward(t, op.stage, op.mb, start, end, &w->err);
            break;
        case OP_B:
            rc = op_backward_b(t, op.stage, op.mb, start, end, NULL, &w->err);
            break;
        case OP_W:
            stamp(t, start);
            rc = op_backward_w(t, op.stage, op.mb, &w->err);
            stamp(t, end);
            break;
        case OP_BW: {
            void *dx = NULL;
            double *mid = t->opts.record_times ? &t->op_mid[w->dev][k] : NULL;
            rc = op_backward_b(t, op.stage, op.mb, start, mid, &dx, &w->err);
            if (rc == 0)
                rc = op_backward_w(t, op.stage, op.mb, &w->err);
            stamp(t, end);
            if (rc == 0 && op.stage > 0)
                rc = tr_send(t, w->dev, CHAN_GRAD, op.stage - 1, op.mb, dx, 0, &w->err);
            else
                act_put(t, w->dev, dx);
            break;
        }
        case OP_S:
            rc = vocab_exec_s(t->ve, op.stage, op.mb, start, end, &w->err);
            break;
        case OP_T:
            rc = vocab_exec_t(t->ve, op.stage, op.mb, start, end, &w->err);
            break;
        }
        if (t->opts.record_times)
            note_activations(t, w->dev);
    }
    return rc;
}

/* The lane's deferred results (the losses of its F ops) before anyone
 * reads them; a no-op on the CPU.  0, or -1 with w->err set. */
int trainer_lane_sync(worker *w)
{
    trainer *t = w->t;
    for (int s = 0; s < t->n_stages; s++)
        if (t->st[s].device == w->dev && t->be->ops->sync(t->be, t->st[s].bs, &w->err) != 0)
            return -1;
    return 0;
}

/* Mean loss of the step's micro-batches, summed in micro-batch order. */
double trainer_step_loss(const trainer *t)
{
    double sum = 0;
    for (int j = 0; j < t->n_micro; j++)
        sum += t->mb_loss[j];
    return sum / t->n_micro;
}

int trainer_vocab_begin(trainer *t, const int32_t *y, int mid_batch, zb_err *err)
{
    stage_rt *r = &t->st[t->n_stages - 1];
    size_t head = r->norm_layout.n_params; /* the head follows the norm-only layout */
    return vocab_exec_begin(t->ve, r->bs, head, y, &t->t0, mid_batch, err);
}

/* Worker w's part of a trainer_steps batch: for each step, the rest of
 * its lane (the speculative forwards may have run already), the step's
 * loss where stage S-1 is, the post-validated optimizer step, then its
 * stages made ready for the next step.  No barrier: the device goes on
 * at once, its next step waiting only on its own messages.  Keys cannot
 * collide across steps: a device begins step i+1 after its own step i is
 * over, by which time every step-i message it sends has been taken (each
 * was needed for an op of step i that its own lane waited on). */
int trainer_run_batch(worker *w)
{
    trainer *t = w->t;
    int dev = w->dev, S = t->n_stages;
    const sched_lane *lane = &t->sched->dev[dev];
    int done = 0; /* ops of the current step already run speculatively */
    for (int i = 0; i < t->b_n; i++) {
        if (done == 0 && t->opts.record_times)
            t->act_peak[dev] = 0;
        for (int s = 0; s < S; s++)
            if (t->st[s].device == dev) {
                t->st[s].x = t->bx + batch_tokens(t, i);
                t->st[s].y = t->by + batch_tokens(t, i);
            }
        if (trainer_run_ops(w, done, lane->n_ops) != 0 || trainer_lane_sync(w) != 0)
            return -1;
        /* the head's gradient is whole once every T of the step has run */
        if (t->ve && vocab_exec_finish(t->ve, dev, &w->err) != 0)
            return -1;
        if (t->st[S - 1].device == dev)
            t->b_loss[i] = trainer_step_loss(t);
        int spec = 0;
        if (trainer_post_validated_step(t, w, i, &spec) != 0)
            return -1;
        for (int s = 0; s < S; s++)
            if (t->st[s].device == dev) {
                if (t->be->ops->grads_zero(t->be, t->st[s].bs, NULL, &w->err) != 0)
                    return -1;
                t->st[s].next_w = 0;
                t->st[s].stepped = 0;
            }
        /* The last stage's update is final when its post-validated step
         * returns (it has the full norm first), every S and T of step i
         * is over (vocab_exec_finish), and no S of step i+1 can start
         * before this device's next F hands over X: the vocabulary passes
         * of step i+1 begin here, with no barrier. */
        if (t->ve && t->st[S - 1].device == dev && i + 1 < t->b_n
            && trainer_vocab_begin(t, t->by + batch_tokens(t, i + 1), 1, &w->err) != 0)
            return -1;
        /* Stage 0's validation is the last of the step's down pass, so
         * every stage update of step i is behind us, and every one of step
         * i+1 comes after the up pass this device starts next. */
        if (t->st[0].device == dev)
            t->step_lr = adamw_lr(&t->opts.adamw, (int)(t->b_step0 + i + 1));
        t->b_end[(size_t)i * (size_t)t->n_devices + (size_t)dev] = ms_since(&t->t0);
        done = spec ? t->spec_len : 0;
    }
    return 0;
}
