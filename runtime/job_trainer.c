/*
 * job_trainer.c: one trainer as a way of running a job, in one process or
 * as one pipeline rank (job_trainer.h).
 */
#include "runtime/job_trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int job_trainer_init(job_trainer *jt, trainer *t, const sched_t *s, const job_comm *comm,
                     const ckptset_records *rec, int can_eval, zb_err *err)
{
    memset(jt, 0, sizeof *jt);
    jt->t = t;
    jt->s = s;
    jt->comm = comm;
    jt->can_eval = can_eval;
    if (rec)
        jt->rec = *rec;
    if (comm) {
        jt->own = malloc((size_t)s->n_stages);
        if (!jt->own)
            return zb_fail(err, "out of memory");
        for (int st = 0; st < s->n_stages; st++)
            jt->own[st] = s->stage_device[st] == comm->rank;
    }
    return 0;
}

void job_trainer_free(job_trainer *jt)
{
    free(jt->own);
    jt->own = NULL;
}

static long step_count(void *ctx)
{
    const job_trainer *jt = ctx;
    return trainer_get_stats(jt->t)->step;
}

static job_step from_info(const job_trainer *jt, const trainer_step_info *in)
{
    return (job_step){ .loss = in->loss, .grad_norm = in->grad_norm, .lr = in->lr,
                       .seconds = in->seconds,
                       .tokens = trainer_get_stats(jt->t)->tokens_per_step,
                       .skipped = in->skipped, .members = 1, .members_after = 1 };
}

/* One process: trainer_steps, no barrier between the batch's steps. */
static int local_steps(void *ctx, int n, job_step *out, zb_err *err)
{
    job_trainer *jt = ctx;
    if (trainer_steps(jt->t, n, jt->info, err) != 0)
        return -1;
    for (int i = 0; i < n; i++)
        out[i] = from_info(jt, &jt->info[i]);
    return 0;
}

/* A rank: one step, and its outcome from the rank of the last stage. */
static int rank_steps(void *ctx, int n, job_step *out, zb_err *err)
{
    job_trainer *jt = ctx;
    for (int i = 0; i < n; i++) {
        double loss = 0;
        if (trainer_step(jt->t, &loss, err) != 0)
            return -1;
        const trainer_stats *st = trainer_get_stats(jt->t);
        /* the loss exists where the last stage ran; the norm and the
         * verdict travelled back through every stage, but one source
         * keeps every rank's numbers the same bits */
        double msg[4] = { loss, st->last_grad_norm, st->last_lr,
                          isfinite(st->last_grad_norm) ? 0.0 : 1.0 };
        int root = jt->s->stage_device[jt->s->n_stages - 1];
        if (jt->comm->bcast(jt->comm->ctx, msg, sizeof msg, root, err) != 0)
            return -1;
        trainer_step_info in = { msg[0], msg[1], msg[2], st->last_step_s, msg[3] != 0 };
        out[i] = from_info(jt, &in);
    }
    return 0;
}

static int local_eval(void *ctx, double *val, zb_err *err)
{
    job_trainer *jt = ctx;
    return trainer_eval(jt->t, val, err) != 0 ? -1 : 0;
}

/* Every stage's parameters from its owner to every rank, then rank 0
 * evaluates and says the result (or that it failed). */
static int rank_eval(void *ctx, double *val, zb_err *err)
{
    job_trainer *jt = ctx;
    const job_comm *c = jt->comm;
    for (int st = 0; st < jt->s->n_stages; st++) {
        size_t n = 0;
        /* the accessor marks the host copy written: a backend with device
         * copies uploads what the broadcast put there before evaluating */
        float *x = trainer_stage_params(jt->t, st, &n);
        for (size_t done = 0; done < n;) {
            size_t part = n - done > ((size_t)1 << 28) ? (size_t)1 << 28 : n - done;
            if (c->bcast(c->ctx, x + done, part * sizeof *x, jt->s->stage_device[st], err) != 0)
                return -1;
            done += part;
        }
    }
    double msg[2] = { 0, 0 };
    zb_err mine = { { 0 } };
    if (c->rank == 0 && trainer_eval(jt->t, &msg[0], &mine) != 0)
        msg[1] = 1;
    if (c->bcast(c->ctx, msg, sizeof msg, 0, err) != 0)
        return -1;
    if (msg[1] != 0) {
        if (c->rank == 0)
            *err = mine;
        else
            zb_fail(err, "the evaluation failed on rank 0");
        return -2;
    }
    *val = msg[0];
    return 0;
}

static int save(void *ctx, const char *dir, zb_err *err)
{
    job_trainer *jt = ctx;
    if (ckptset_save(jt->t, dir, &jt->rec, jt->comm, jt->own, err) == 0)
        return 0;
    /* ranks agreed on the failure inside ckptset_save */
    return jt->comm ? -2 : -1;
}

/* The metrics log's counters: the job's rollbacks (summed over the ranks,
 * collective) and this process's backend memory. */
static int counters(void *ctx, job_counters *out, zb_err *err)
{
    job_trainer *jt = ctx;
    long rollbacks = 0;
    if (job_trainer_rollbacks(jt, &rollbacks, err) != 0)
        return -1;
    size_t static_bytes = 0, peak = 0;
    zb_err ignored = { { 0 } }; /* memory is a figure to show, not a reason to stop */
    int known = trainer_memory(jt->t, &static_bytes, &peak, &ignored) == 0;
    out->rollbacks = rollbacks;
    out->static_bytes = known ? (double)static_bytes : NAN;
    out->peak_activation_bytes = known && peak > 0 ? (double)peak : NAN;
    return 0;
}

void job_trainer_way(job_trainer *jt, job_way *w)
{
    memset(w, 0, sizeof *w);
    w->ctx = jt;
    w->comm = jt->comm;
    w->step_count = step_count;
    w->save = save;
    w->counters = counters;
    if (!jt->comm) {
        w->max_batch = JOB_BATCH_MAX;
        w->steps = local_steps;
        w->eval = jt->can_eval ? local_eval : NULL;
    } else {
        w->max_batch = 1;
        w->steps = rank_steps;
        w->eval = jt->can_eval ? rank_eval : NULL;
    }
}

int job_trainer_resume(job_trainer *jt, const char *dir, const run_identity *id,
                       const unsigned char *chars, int vocab, char *note, size_t cap, zb_err *err)
{
    ckptset_view v;
    note[0] = '\0';
    int same = 0, found = ckptset_open(dir, &v, err);
    int fail = found < 0;
    if (found == 0)
        fail = zb_fail(err, "%s holds no checkpoint to resume from", dir) != 0;
    if (!fail && v.run && (same = run_record_check(v.run, dir, id, note, cap, err)) < 0)
        fail = 1;
    if (!fail && ckptset_check_model(&v, trainer_model(jt->t), chars, vocab, err) != 0)
        fail = 1;
    if (!fail && ckptset_load(jt->t, &v, job_comm_rank(jt->comm), job_comm_world(jt->comm),
                              &jt->rollbacks_adjust, err) != 0)
        fail = 1;
    if (found > 0)
        ckptset_view_free(&v);
    int rc = job_comm_agree(jt->comm, fail, err);
    return rc != 0 ? -1 : same;
}

int job_trainer_rollbacks(job_trainer *jt, long *total, zb_err *err)
{
    int64_t r = trainer_get_stats(jt->t)->rollbacks + jt->rollbacks_adjust;
    if (job_comm_sum(jt->comm, &r, err) != 0)
        return -1;
    *total = (long)r;
    return 0;
}
