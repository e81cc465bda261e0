/*
 * mpi_pipeline.c: one schedule device per rank (see mpi_pipeline.h).
 */
#include "runtime/mpi/mpi_pipeline.h"

#include "runtime/ckpt_set.h"
#include "runtime/mpi/mpi_job.h"
#include "runtime/mpi/vocab_link_mpi.h"

#include <stdlib.h>
#include <string.h>

struct mpi_pipeline {
    trainer *t;              /* this rank's trainer (one_device) */
    transport_mpi_cfg cfg;   /* its transport's communicator, sizes and counters */
    vocab_link_mpi_cfg vcfg; /* the vocabulary passes' carrier (vocabulary plans) */
    const sched_t *s;        /* the schedule (borrowed) */
    const zb_data *d;        /* the text (borrowed): its characters go in a checkpoint */
    int me;                  /* rank = device */
    long rollback_offset;    /* added to this rank's rollbacks in the totals: minus
                              * those a part read by every rank gave each */
};

static int mpi_failed(zb_err *err, int rc, const char *what)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    return zb_fail(err, "pipeline: %s: %s", what, text);
}

int mpi_pipeline_create(const sched_t *s, const zb_model *m, const zb_data *d,
                        const trainer_opts *opts, MPI_Comm comm, mpi_pipeline **out,
                        zb_err *err)
{
    if (opts->sync_optimizer)
        return zb_fail(err, "pipeline ranks need post-validation (the synchronous clip gathers "
                            "every stage's norm in one process)");
    int size;
    MPI_Comm_size(comm, &size);
    if (size != s->n_devices)
        return zb_fail(err, "the schedule has %d devices but the run has %d MPI ranks (one device "
                       "per rank: mpirun -np %d)", s->n_devices, size, s->n_devices);
    mpi_pipeline *p = calloc(1, sizeof *p);
    if (!p)
        return zb_fail(err, "out of memory");
    p->s = s;
    p->d = d;
    int rc = MPI_Comm_dup(comm, &p->cfg.comm);
    if (rc != MPI_SUCCESS) {
        free(p);
        return mpi_failed(err, rc, "MPI_Comm_dup");
    }
    MPI_Comm_rank(p->cfg.comm, &p->me);
    int batch = opts->batch_size > 0 ? opts->batch_size : m->micro_batch;
    p->cfg.act_floats = (size_t)batch * (size_t)m->seq_len * (size_t)m->d_model;
    trainer_opts o = *opts;
    o.make_transport = transport_mpi_make;
    o.make_transport_ctx = &p->cfg;
    o.one_device = 1;
    o.device = p->me;
    p->vcfg.comm = p->cfg.comm;
    p->vcfg.n_micro = s->n_micro;
    o.make_vocab_link = vocab_link_mpi_make;
    o.make_vocab_link_ctx = &p->vcfg;
    if (trainer_create(s, m, d, &o, &p->t, err) != 0) {
        MPI_Comm_free(&p->cfg.comm);
        free(p);
        return -1;
    }
    *out = p;
    return 0;
}

void mpi_pipeline_free(mpi_pipeline *p)
{
    if (!p)
        return;
    trainer_free(p->t);
    MPI_Comm_free(&p->cfg.comm);
    free(p);
}

trainer *mpi_pipeline_trainer(mpi_pipeline *p)
{
    return p->t;
}

int mpi_pipeline_step(mpi_pipeline *p, double *loss, zb_err *err)
{
    double l = 0;
    if (trainer_step(p->t, &l, err) != 0)
        return -1;
    /* the loss exists where the last stage ran */
    int root = p->s->stage_device[p->s->n_stages - 1];
    int rc = MPI_Bcast(&l, 1, MPI_DOUBLE, root, p->cfg.comm);
    if (rc != MPI_SUCCESS)
        return mpi_failed(err, rc, "MPI_Bcast of the loss");
    *loss = l;
    return 0;
}

int mpi_pipeline_backward(mpi_pipeline *p, double *loss, zb_err *err)
{
    double l = 0;
    if (trainer_backward(p->t, &l, err) != 0)
        return -1;
    int root = p->s->stage_device[p->s->n_stages - 1];
    int rc = MPI_Bcast(&l, 1, MPI_DOUBLE, root, p->cfg.comm);
    if (rc != MPI_SUCCESS)
        return mpi_failed(err, rc, "MPI_Bcast of the loss");
    *loss = l;
    return 0;
}

int mpi_pipeline_apply(mpi_pipeline *p, zb_err *err)
{
    return trainer_apply(p->t, err);
}

int mpi_pipeline_device(const mpi_pipeline *p)
{
    return p->me;
}

static int bcast_floats(float *x, size_t n, int root, MPI_Comm comm, zb_err *err)
{
    for (size_t done = 0; done < n;) {
        size_t part = n - done > 0x40000000u ? 0x40000000u : n - done;
        int rc = MPI_Bcast(x + done, (int)part, MPI_FLOAT, root, comm);
        if (rc != MPI_SUCCESS)
            return mpi_failed(err, rc, "MPI_Bcast of a stage's state");
        done += part;
    }
    return 0;
}

/* Every stage's current parameters from the rank that trains it, to
 * every rank (for an evaluation on rank 0). */
static int gather_params(mpi_pipeline *p, zb_err *err)
{
    for (int st = 0; st < p->s->n_stages; st++) {
        int root = p->s->stage_device[st];
        size_t n = 0;
        float *x = trainer_stage_params(p->t, st, &n);
        if (bcast_floats(x, n, root, p->cfg.comm, err))
            return -1;
    }
    return 0;
}

int mpi_pipeline_save(mpi_pipeline *p, const char *dir, zb_err *err)
{
    job_comm c;
    mpi_job_comm(&p->cfg.comm, &c);
    unsigned char own[p->s->n_stages];
    for (int st = 0; st < p->s->n_stages; st++)
        own[st] = p->s->stage_device[st] == p->me;
    cJSON *model = ckptset_model_record(trainer_model(p->t), p->d->chars, p->d->vocab);
    ckptset_records rec = { model, NULL };
    int rc = model ? 0 : zb_fail(err, "out of memory");
    if (job_comm_agree(&c, rc != 0, err) != 0) {
        cJSON_Delete(model);
        return -1;
    }
    rc = ckptset_save(p->t, dir, &rec, &c, own, err);
    cJSON_Delete(model);
    return rc;
}

int mpi_pipeline_load(mpi_pipeline *p, const char *dir, zb_err *err)
{
    job_comm c;
    mpi_job_comm(&p->cfg.comm, &c);
    ckptset_view v;
    int found = ckptset_open(dir, &v, err);
    int fail = found < 0 || (found == 0 && zb_fail(err, "%s holds no checkpoint", dir)) ||
               ckptset_load(p->t, &v, p->me, p->s->n_devices, &p->rollback_offset, err) != 0;
    ckptset_view_free(&v);
    return job_comm_agree(&c, fail, err) == 0 ? 0 : -1;
}

int mpi_pipeline_eval(mpi_pipeline *p, double *val_loss, zb_err *err)
{
    if (gather_params(p, err))
        return -1;
    double msg[2] = { 0, 0 };
    if (p->me == 0) {
        if (trainer_eval(p->t, &msg[0], err) != 0)
            msg[1] = 1;
    }
    int rc = MPI_Bcast(msg, 2, MPI_DOUBLE, 0, p->cfg.comm);
    if (rc != MPI_SUCCESS)
        return mpi_failed(err, rc, "MPI_Bcast of the validation loss");
    if (msg[1] != 0) {
        if (p->me != 0)
            zb_fail(err, "the evaluation failed on rank 0");
        return -1;
    }
    *val_loss = msg[0];
    return 0;
}

int mpi_pipeline_totals(mpi_pipeline *p, uint64_t *bytes, uint64_t *messages, long *rollbacks,
                        zb_err *err)
{
    unsigned long long mine[3] = { p->cfg.bytes_sent + p->vcfg.bytes_sent,
                                   p->cfg.messages + p->vcfg.messages,
                                   (unsigned long long)(trainer_get_stats(p->t)->rollbacks +
                                                        p->rollback_offset) };
    unsigned long long all[3];
    int rc = MPI_Allreduce(mine, all, 3, MPI_UNSIGNED_LONG_LONG, MPI_SUM, p->cfg.comm);
    if (rc != MPI_SUCCESS)
        return mpi_failed(err, rc, "MPI_Allreduce of the totals");
    *bytes = all[0];
    *messages = all[1];
    *rollbacks = (long)all[2];
    return 0;
}
