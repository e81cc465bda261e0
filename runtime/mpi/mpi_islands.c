/*
 * mpi_islands.c: one replica per rank, DiLoCo or sync, leaving on SIGTERM
 * (see mpi_islands.h).
 *
 * Every rank keeps the run's bookkeeping (per-step mean losses, evaluations,
 * tokens, who left when, bytes) identically, from collectives: each step's
 * losses are all-gathered, each evaluation is broadcast from the rank that
 * ran it.  So whichever rank ends as rank 0 of the final communicator can
 * print the summary, even when the original rank 0 left.
 *
 * Order of one inner step, as islands.c's run_outer: train, note, outer step
 * when due, evaluation when due; then, after an outer step, the membership
 * check (islands.c would apply a leave event at the start of the next step,
 * which is the same point).
 */
#include "runtime/mpi/mpi_islands.h"

#include <assert.h>

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/job.h"
#include "runtime/mpi/mpi_pipeline.h"
#include "runtime/mpi/mpi_ring.h"
#include "runtime/mpi/mpi_zero1.h"
#include "runtime/outer/outer_edit.h"

/* This rank's part of a replica and the run's shared bookkeeping. */
typedef struct mpi_replica {
    trainer *t;             /* the replica's trainer (P = 1), or this rank's stages of it */
    mpi_pipeline *pipe;     /* P > 1: this rank's device of the replica's pipeline, else NULL */
    int group;              /* replica id: the initial rank / P */
    islands_seg_layout l;   /* segments (islands.c's layout), this rank's stages only */
    float **params;         /* [l.n] segment pointers into the trainer's parameters */
    float **grads;          /* [l.n] the same into its gradients (sync) */
    size_t *seg_off;        /* [l.n] offset of each segment in global/mom/delta */
    size_t n_total;         /* floats over this rank's segments */
    float *global;          /* [n_total] DiLoCo: last synchronized parameters */
    float *mom;             /* [n_total] DiLoCo: outer Nesterov momentum */
    float *delta;           /* [n_total] DiLoCo: pseudo-gradient, the ring's buffer */
    MPI_Comm cur;           /* every rank of the current members (split on leaves) */
    MPI_Comm ring;          /* the corresponding ranks of the current replicas */
    MPI_Comm pipe_comm;     /* this replica's P ranks (P > 1), else MPI_COMM_NULL */
    int *ids;               /* [k] replica id of each rank of ring */
    int k;                  /* replicas present: size of ring */
    int me;                 /* rank in ring (replica order) */
    int cur_rank;           /* rank in cur (0: the speaker) */
    int per;                /* P: ranks per replica */
    int zero1;              /* ZeRO-1: this rank keeps its ring position's shard of m, v */
    outer_zdetect *det;     /* [l.n] EDiT: this replica's anomaly detector per segment, or NULL */
    double last_sync;       /* A-EDiT: clock of the last outer step (start: creation) */
    outer_ring_stats local; /* bytes this rank sent since the last tally */
    double *losses;         /* [initial K] scratch for the gathered losses */
} mpi_replica;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int mpi_failed(zb_err *err, int rc, const char *what)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    return zb_fail(err, "islands: %s: %s", what, text);
}

void mpi_islands_result_free(mpi_islands_result *r)
{
    free(r->loss);
    free(r->val_loss);
    free(r->left_at);
    r->loss = r->val_loss = NULL;
    r->left_at = NULL;
}

static void comm_free(MPI_Comm *c)
{
    if (*c != MPI_COMM_NULL)
        MPI_Comm_free(c);
    *c = MPI_COMM_NULL;
}

static void replica_free(mpi_replica *p)
{
    if (p->pipe)
        mpi_pipeline_free(p->pipe); /* owns p->t */
    else
        trainer_free(p->t);
    if (p->det) /* before the layout, which knows how many */
        for (int i = 0; i < p->l.n; i++)
            outer_zdetect_free(&p->det[i]);
    free(p->det);
    islands_seg_layout_free(&p->l);
    free(p->params);
    free(p->grads);
    free(p->seg_off);
    free(p->global);
    free(p->mom);
    free(p->delta);
    free(p->ids);
    free(p->losses);
    comm_free(&p->ring);
    comm_free(&p->pipe_comm);
    comm_free(&p->cur);
}

/* (Re)builds the ring of corresponding ranks over cur and its replica ids
 * (collective over cur). */
static int ring_build(mpi_replica *p, zb_err *err)
{
    comm_free(&p->ring);
    int pos = p->pipe ? mpi_pipeline_device(p->pipe) : 0;
    int rc = MPI_Comm_split(p->cur, pos, p->cur_rank, &p->ring);
    if (rc != MPI_SUCCESS)
        return mpi_failed(err, rc, "MPI_Comm_split of the ring");
    MPI_Comm_size(p->ring, &p->k);
    MPI_Comm_rank(p->ring, &p->me);
    rc = MPI_Allgather(&p->group, 1, MPI_INT, p->ids, 1, MPI_INT, p->ring);
    if (rc != MPI_SUCCESS)
        return mpi_failed(err, rc, "MPI_Allgather of the replica ids");
    return 0;
}

/* Adds every rank's bytes since the last tally to res (collective). */
static int tally_bytes(mpi_replica *p, mpi_islands_result *res, zb_err *err)
{
    unsigned long long mine = p->local.bytes_sent, all = 0;
    int rc = MPI_Allreduce(&mine, &all, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, p->cur);
    if (rc != MPI_SUCCESS)
        return mpi_failed(err, rc, "MPI_Allreduce of the byte counts");
    res->bytes_sent += all;
    p->local.bytes_sent = 0;
    return 0;
}

/* DiLoCo's outer step over the current members (outer.c's outer_step for
 * this rank's segments of one replica).  A non-finite pseudo-gradient
 * anywhere is agreed on first over every rank, so every rank fails with
 * the same error and nothing changed.  Returns 0, -2 (that agreed error)
 * or -1. */
static int diloco_step(mpi_replica *p, const outer_config *cfg, zb_err *err)
{
    struct { int id; int seg; } bad = { INT_MAX, 0 }, worst;
    for (int s = 0; s < p->l.n; s++) {
        size_t off = p->seg_off[s], len = p->l.len[s];
        const float *g = p->global + off, *x = p->params[s];
        float *dl = p->delta + off;
        double ss = 0.0;
        for (size_t j = 0; j < len; j++) {
            dl[j] = g[j] - x[j];
            ss += (double)dl[j] * (double)dl[j];
        }
        if (!isfinite(sqrt(ss)) && bad.id == INT_MAX) {
            bad.id = p->group;
            bad.seg = s;
        }
    }
    int rc = MPI_Allreduce(&bad, &worst, 1, MPI_2INT, MPI_MINLOC, p->cur);
    if (rc != MPI_SUCCESS)
        return mpi_failed(err, rc, "MPI_Allreduce of the finiteness check");
    if (worst.id != INT_MAX) {
        zb_fail(err, "outer: replica %d: a pseudo-gradient is not finite", worst.id);
        return -2;
    }
    for (int s = 0; s < p->l.n; s++) {
        size_t off = p->seg_off[s], len = p->l.len[s];
        if (mpi_allreduce_mean(cfg->wire, p->delta + off, len, (float)p->k, p->ring, &p->local, err))
            return -1;
        outer_nesterov(p->global + off, p->mom + off, p->delta + off, len, cfg->outer_lr,
                       cfg->outer_momentum);
        memcpy(p->params[s], p->global + off, len * sizeof(float));
    }
    return 0;
}

/* EDiT's / A-EDiT's outer step over the current members: outer.c's
 * outer_step for this rank's segments of one replica, with the exchanges
 * as collectives over the ring.  Per segment: this replica's
 * pseudo-gradient and norm; its own detector decides whether it is an
 * anomaly (every replica feeds only its own, as in outer.c); the (norm,
 * kept) pairs are all-gathered, so every rank computes the same softmax
 * weights (and A-EDiT's blend with the step shares: the replicas step in
 * lockstep, so each did since_sync steps); the weighted pseudo-gradients
 * are all-reduced with divisor 1; the clip factor comes from the result,
 * the same bits everywhere.  The norm exchange is counted as outer.c
 * counts it (one float per replica through the ring), by ring rank 0.
 * Adds to *eliminated and *skipped.  Returns 0 or -1. */
static int edit_step(mpi_replica *p, const outer_config *cfg, long since_sync, long *eliminated,
                     long *skipped, zb_err *err)
{
    int k = p->k;
    double pairs[2 * k], norm[k], w[k];
    int keep[k];
    for (int s = 0; s < p->l.n; s++) {
        size_t off = p->seg_off[s], len = p->l.len[s];
        const float *g = p->global + off, *x = p->params[s];
        float *dl = p->delta + off;
        for (size_t j = 0; j < len; j++)
            dl[j] = g[j] - x[j];
        double ss = 0.0;
        for (size_t j = 0; j < len; j++)
            ss += (double)dl[j] * (double)dl[j];
        double mine[2] = { sqrt(ss), 0.0 };
        if (isfinite(mine[0]) && !outer_zdetect_feed(&p->det[s], mine[0], NULL))
            mine[1] = 1.0;
        int rc = MPI_Allgather(mine, 2, MPI_DOUBLE, pairs, 2, MPI_DOUBLE, p->ring);
        if (rc != MPI_SUCCESS)
            return mpi_failed(err, rc, "MPI_Allgather of the EDiT norms");
        if (p->me == 0)
            outer_ring_count_allgather(&p->local, k, 1);
        long steps_kept = 0;
        for (int a = 0; a < k; a++) {
            norm[a] = pairs[2 * a];
            keep[a] = pairs[2 * a + 1] != 0.0;
            *eliminated += !keep[a];
            steps_kept += keep[a] ? since_sync : 0;
        }
        int kept = outer_edit_weights(norm, keep, k, cfg->edit_temperature, w);
        if (kept && cfg->kind == OUTER_AEDIT && steps_kept > 0) {
            double rr = cfg->aedit_step_weight;
            for (int a = 0; a < k; a++)
                if (keep[a])
                    w[a] = (1.0 - rr) * w[a] + rr * (double)since_sync / (double)steps_kept;
        }
        if (!kept) {
            (*skipped)++;
            memcpy(p->params[s], g, len * sizeof(float));
            continue;
        }
        if (w[p->me] == 0.0) {
            memset(dl, 0, len * sizeof(float)); /* also clears NaN */
        } else {
            float wf = (float)w[p->me];
            for (size_t j = 0; j < len; j++)
                dl[j] *= wf;
        }
        if (mpi_allreduce_mean(cfg->wire, dl, len, 1.0f, p->ring, &p->local, err))
            return -1;
        ss = 0.0;
        for (size_t j = 0; j < len; j++)
            ss += (double)dl[j] * (double)dl[j];
        double f = outer_edit_clip_factor(sqrt(ss), cfg->edit_clip);
        if (f < 1.0) {
            float ff = (float)f;
            for (size_t j = 0; j < len; j++)
                dl[j] *= ff;
        }
        outer_nesterov(p->global + off, p->mom + off, dl, len, cfg->outer_lr, cfg->outer_momentum);
        memcpy(p->params[s], p->global + off, len * sizeof(float));
    }
    return 0;
}

/* A-EDiT's "is an outer step due": the interval on the clock of rank 0 of
 * the current members (broadcast, so every rank decides alike), then the
 * total steps since the last sync against the minimum; the step-counter
 * exchange is counted as outer.c counts it.  Sets *due. */
static int aedit_due(mpi_replica *p, const outer_config *cfg, long since_sync, int *due,
                     zb_err *err)
{
    double now = cfg->clock ? cfg->clock(cfg->clock_ctx) : now_s();
    int up = now - p->last_sync >= cfg->aedit_interval_s;
    int rc = MPI_Bcast(&up, 1, MPI_INT, 0, p->cur);
    if (rc != MPI_SUCCESS)
        return mpi_failed(err, rc, "MPI_Bcast of the A-EDiT clock");
    *due = 0;
    if (!up)
        return 0;
    if (p->cur_rank == 0)
        outer_ring_count_allgather(&p->local, p->k, 1);
    long total = since_sync * p->k;
    *due = total >= cfg->aedit_min_steps && total > 0;
    return 0;
}

/* The outer step of the run's kind, counted in res.  Returns 0, -2 (an
 * agreed error) or -1. */
static int outer_sync(mpi_replica *p, const outer_config *cfg, long since_sync,
                      mpi_islands_result *res, zb_err *err)
{
    int rc = cfg->kind == OUTER_DILOCO
                 ? diloco_step(p, cfg, err)
                 : edit_step(p, cfg, since_sync, &res->eliminated, &res->skipped, err);
    if (rc == 0) {
        res->outer_steps++;
        p->last_sync = cfg->clock ? cfg->clock(cfg->clock_ctx) : now_s();
    }
    return rc;
}

/* sync: every gradient segment replaced by its mean over the replicas. */
static int sync_grads(mpi_replica *p, const outer_config *cfg, zb_err *err)
{
    for (int s = 0; s < p->l.n; s++)
        if (mpi_allreduce_mean(cfg->wire, p->grads[s], p->l.len[s], (float)p->k, p->ring,
                               &p->local, err))
            return -1;
    return 0;
}

/* The membership check after a boundary: flags all-gathered over every
 * rank, a replica leaves when any of its ranks was asked to, the
 * survivors split off and rebuild their rings.  Sets *gone on the ranks of
 * a leaving replica. */
static int membership(mpi_replica *p, volatile sig_atomic_t *leave, long trained, int initial_k,
                      mpi_islands_result *res, int *gone, zb_err *err)
{
    int n_cur;
    MPI_Comm_size(p->cur, &n_cur);
    int mine[2] = { leave && *leave ? 1 : 0, p->group };
    int all[2 * n_cur];
    int rc = MPI_Allgather(mine, 2, MPI_INT, all, 2, MPI_INT, p->cur);
    if (rc != MPI_SUCCESS)
        return mpi_failed(err, rc, "MPI_Allgather of the leave flags");
    int going[initial_k], present[initial_k];
    memset(going, 0, sizeof going);
    memset(present, 0, sizeof present);
    for (int i = 0; i < n_cur; i++) {
        present[all[2 * i + 1]] = 1;
        going[all[2 * i + 1]] |= all[2 * i];
    }
    int n_going = 0, n_present = 0;
    for (int g = 0; g < initial_k; g++) {
        n_present += present[g];
        n_going += present[g] && going[g];
    }
    /* nobody, or everybody: the whole job was asked to stop (scancel, a
     * time limit), which the job loop's stop vote does right after this
     * boundary, every replica alike, instead of leaving one alone */
    if (n_going == 0 || n_going == n_present)
        return 0;
    /* ZeRO-1: the leaver holds the only copy of its shard of the optimizer
     * state; every rank saw the same flags, so every rank stops alike */
    if (p->zero1)
        return zb_fail(err, "islands: a replica was asked to leave, but under ZeRO-1 its shard "
                       "of the optimizer state would leave with it; stop the whole job instead");
    if (tally_bytes(p, res, err))
        return -1;
    for (int g = 0; g < initial_k; g++)
        if (present[g] && going[g])
            res->left_at[g] = trained;
    MPI_Comm next;
    rc = MPI_Comm_split(p->cur, going[p->group] ? MPI_UNDEFINED : 0, p->cur_rank, &next);
    if (rc != MPI_SUCCESS)
        return mpi_failed(err, rc, "MPI_Comm_split");
    MPI_Comm_free(&p->cur);
    p->cur = next;
    if (going[p->group]) {
        *gone = 1;
        return 0;
    }
    MPI_Comm_rank(p->cur, &p->cur_rank);
    return ring_build(p, err);
}

static int replica_init(mpi_replica *p, const sched_t *s, const zb_model *m, const zb_data *d,
                        const trainer_opts *base, const islands_opts *io, MPI_Comm comm,
                        zb_err *err)
{
    int rc = MPI_Comm_dup(comm, &p->cur);
    if (rc != MPI_SUCCESS)
        return mpi_failed(err, rc, "MPI_Comm_dup");
    int world;
    MPI_Comm_size(p->cur, &world);
    MPI_Comm_rank(p->cur, &p->cur_rank);
    p->per = world / io->replicas;
    p->group = p->cur_rank / p->per;
    p->ids = malloc((size_t)io->replicas * sizeof *p->ids);
    p->losses = malloc((size_t)io->replicas * sizeof *p->losses);
    if (!p->ids || !p->losses)
        return zb_fail(err, "islands: out of memory");
    trainer_opts opts = *base;
    opts.data_stream = (uint64_t)p->group;
    if (p->per > 1) {
        rc = MPI_Comm_split(p->cur, p->group, p->cur_rank, &p->pipe_comm);
        if (rc != MPI_SUCCESS)
            return mpi_failed(err, rc, "MPI_Comm_split of the pipeline");
        if (mpi_pipeline_create(s, m, d, &opts, p->pipe_comm, &p->pipe, err))
            return -1;
        p->t = mpi_pipeline_trainer(p->pipe);
    } else if (trainer_create(s, m, d, &opts, &p->t, err)) {
        return -1;
    }
    if (ring_build(p, err))
        return -1;
    if (islands_seg_layout_build(p->t, &p->l, err))
        return -1;
    if (p->pipe) { /* keep this rank's stages' segments, in order */
        int dev = mpi_pipeline_device(p->pipe), n = 0;
        for (int i = 0; i < p->l.n; i++)
            if (s->stage_device[p->l.stage[i]] == dev) {
                p->l.stage[n] = p->l.stage[i];
                p->l.off[n] = p->l.off[i];
                p->l.len[n] = p->l.len[i];
                n++;
            }
        p->l.n = n;
    }
    p->zero1 = io->zero1;
    if (io->zero1 && zero1_shard_trainer(p->t, &p->l, p->k, p->me, err) != 0)
        return -1;
    size_t n_seg = (size_t)(p->l.n ? p->l.n : 1);
    p->params = malloc(n_seg * sizeof *p->params);
    p->grads = malloc(n_seg * sizeof *p->grads);
    p->seg_off = malloc(n_seg * sizeof *p->seg_off);
    if (!p->params || !p->grads || !p->seg_off)
        return zb_fail(err, "islands: out of memory");
    islands_seg_pointers(p->t, &p->l, p->params);
    islands_seg_grad_pointers(p->t, &p->l, p->grads);
    for (int i = 0; i < p->l.n; i++) {
        p->seg_off[i] = p->n_total;
        p->n_total += p->l.len[i];
    }
    if (io->outer.kind != OUTER_SYNC) {
        p->global = malloc((p->n_total ? p->n_total : 1) * sizeof(float));
        p->mom = calloc(p->n_total ? p->n_total : 1, sizeof(float));
        p->delta = malloc((p->n_total ? p->n_total : 1) * sizeof(float));
        if (!p->global || !p->mom || !p->delta)
            return zb_fail(err, "islands: out of memory for %zu parameters", p->n_total);
        /* Same seed on every rank: the replicas start identical, so each
         * one's own parameters are the global start (outer.c copies
         * replica 0's, the same bits). */
        if (io->outer.kind == OUTER_EDIT || io->outer.kind == OUTER_AEDIT) {
            p->det = calloc(n_seg, sizeof *p->det);
            if (!p->det)
                return zb_fail(err, "islands: out of memory");
            for (int i = 0; i < p->l.n; i++)
                if (outer_zdetect_init(&p->det[i], io->outer.edit_warmup, io->outer.edit_alpha,
                                       io->outer.edit_threshold) != 0)
                    return zb_fail(err, "islands: out of memory");
        }
        for (int i = 0; i < p->l.n; i++)
            memcpy(p->global + p->seg_off[i], p->params[i], p->l.len[i] * sizeof(float));
    }
    return 0;
}

/* Evaluates replica ids[0] (the lowest present, as islands.c does) and
 * shares the result with every rank (collective over cur).  Returns 0, -1
 * (this rank's failure) or -2 (another rank's, already reported there). */
static int eval_shared(mpi_replica *p, double *val, zb_err *err)
{
    int fail = 0;
    double v = 0;
    if (p->group == p->ids[0]) {
        if (p->pipe)
            fail = mpi_pipeline_eval(p->pipe, &v, err) != 0;
        else
            fail = trainer_eval(p->t, &v, err) != 0;
    }
    double msg[2] = { v, (double)fail };
    /* rank 0 of cur belongs to the lowest replica: it has the value */
    int rc = MPI_Bcast(msg, 2, MPI_DOUBLE, 0, p->cur);
    if (rc != MPI_SUCCESS)
        return mpi_failed(err, rc, "MPI_Bcast of the validation loss");
    if (msg[1] != 0.0) {
        if (fail)
            return -1;
        zb_fail(err, "islands: the evaluation failed on replica %d", p->ids[0]);
        return -2;
    }
    *val = msg[0];
    return 0;
}

int mpi_islands_check(const sched_t *s, const islands_opts *io, MPI_Comm comm, zb_err *err)
{
    if (io->n_events > 0)
        return zb_fail(err, "islands: scripted elastic events do not run across processes");
    if (io->steps < 1)
        return zb_fail(err, "islands: %ld steps (need at least 1)", io->steps);
    int world;
    MPI_Comm_size(comm, &world);
    if (io->replicas < 1 || world % io->replicas != 0)
        return zb_fail(err, "islands: --replicas %d does not divide the %d MPI ranks", io->replicas,
                       world);
    if (io->zero1 && io->outer.kind != OUTER_SYNC)
        return zb_fail(err, "islands: ZeRO-1 shards data-parallel replicas: it needs --outer sync");
    if (io->zero1 && io->outer.wire != OUTER_WIRE_FP32)
        return zb_fail(err, "islands: ZeRO-1 runs on the fp32 wire only");
    int per = world / io->replicas;
    if (per != 1 && per != s->n_devices)
        return zb_fail(err, "islands: %d MPI ranks for %d replicas is %d ranks each; a replica "
                       "runs in 1 rank or in %d (one per schedule device)", world, io->replicas,
                       per, s->n_devices);
    return 0;
}

/* The islands of one run over MPI, stepped by the job loop. */
struct mpi_islands {
    mpi_replica p;           /* this rank's part of its replica */
    mpi_islands_result res;  /* the run's bookkeeping (the counters the outer steps keep) */
    islands_opts io;         /* the run's options */
    volatile sig_atomic_t *leave; /* this process's SIGTERM / SIGINT flag, or NULL */
    long step;               /* inner steps taken */
    long since_sync;         /* inner steps since the last outer step */
    long tokens_per_step;    /* one replica's tokens per step */
    double t0;               /* the clock at creation */
    int gone;                /* 1 once this rank's replica left */
    double *pairs;           /* [2 K] scratch: every replica's (loss, skipped) */
    double *mloss;           /* [K] the step's losses, replica order */
    unsigned char *mskip;    /* [K] whether each replica skipped */
};

void mpi_islands_free(mpi_islands *x)
{
    if (!x)
        return;
    replica_free(&x->p);
    mpi_islands_result_free(&x->res);
    free(x->pairs);
    free(x->mloss);
    free(x->mskip);
    free(x);
}

int mpi_islands_create(const sched_t *s, const zb_model *m, const zb_data *d,
                       const trainer_opts *base, const islands_opts *io, MPI_Comm comm,
                       volatile sig_atomic_t *leave, mpi_islands **out, zb_err *err)
{
    if (mpi_islands_check(s, io, comm, err))
        return -2; /* the same answer on every rank */
    mpi_islands *x = calloc(1, sizeof *x);
    if (!x)
        return zb_fail(err, "islands: out of memory");
    x->p.cur = x->p.ring = x->p.pipe_comm = MPI_COMM_NULL;
    x->io = *io;
    x->leave = leave;
    x->t0 = now_s();
    const int k = io->replicas;
    x->res.initial_replicas = k;
    int rc = replica_init(&x->p, s, m, d, base, io, comm, err);
    if (rc == 0) {
        x->res.left_at = malloc((size_t)k * sizeof *x->res.left_at);
        x->pairs = malloc(2 * (size_t)k * sizeof *x->pairs);
        x->mloss = malloc((size_t)k * sizeof *x->mloss);
        x->mskip = malloc((size_t)k);
        if (!x->res.left_at || !x->pairs || !x->mloss || !x->mskip)
            rc = zb_fail(err, "islands: out of memory");
    }
    if (rc != 0) {
        mpi_islands_free(x);
        return -1;
    }
    for (int i = 0; i < k; i++)
        x->res.left_at[i] = -1;
    x->p.last_sync = io->outer.clock ? io->outer.clock(io->outer.clock_ctx) : now_s();
    x->tokens_per_step = trainer_get_stats(x->p.t)->tokens_per_step;
    *out = x;
    return 0;
}

/* One inner step of this rank's replica, then every replica's loss and
 * skip gathered over the ring (each rank holds them all, so the job's
 * rules decide alike everywhere); sync: the gradient average and the
 * optimizer step come first, since the skip is decided there. */
static int way_steps(void *ctx, int n, job_step *out, zb_err *err)
{
    mpi_islands *x = ctx;
    mpi_replica *p = &x->p;
    assert(n == 1);
    (void)n;
    const int outer = x->io.outer.kind != OUTER_SYNC;
    double t0 = now_s();
    memset(out, 0, sizeof *out);
    long before = trainer_get_stats(p->t)->skipped_steps;
    double loss;
    int rc;
    if (p->pipe)
        rc = outer ? mpi_pipeline_step(p->pipe, &loss, err) : mpi_pipeline_backward(p->pipe, &loss, err);
    else
        rc = outer ? trainer_step(p->t, &loss, err) : trainer_backward(p->t, &loss, err);
    if (rc == 0 && !outer) {
        rc = x->io.zero1 ? mpi_zero1_reduce(p->t, &p->l, p->ring, &p->local, err)
                         : sync_grads(p, &x->io.outer, err);
        if (rc == 0)
            rc = p->pipe ? mpi_pipeline_apply(p->pipe, err) : trainer_apply(p->t, err);
        if (rc == 0 && x->io.zero1)
            rc = mpi_zero1_gather(p->t, &p->l, p->ring, &p->local, err);
    }
    if (rc != 0)
        return -1;
    double mine[2] = { loss, trainer_get_stats(p->t)->skipped_steps > before ? 1.0 : 0.0 };
    int e = MPI_Allgather(mine, 2, MPI_DOUBLE, x->pairs, 2, MPI_DOUBLE, p->ring);
    if (e != MPI_SUCCESS)
        return mpi_failed(err, e, "MPI_Allgather of the losses");
    double sum = 0.0; /* replica order, from 0.0, as islands.c */
    for (int i = 0; i < p->k; i++) {
        x->mloss[i] = x->pairs[2 * i];
        x->mskip[i] = x->pairs[2 * i + 1] != 0.0;
        sum += x->mloss[i];
        out->skipped |= x->mskip[i];
    }
    x->step++;
    out->loss = sum / p->k;
    out->grad_norm = NAN;
    out->lr = trainer_get_stats(p->t)->last_lr;
    out->tokens = (long)p->k * x->tokens_per_step;
    out->members = out->members_after = p->k;
    out->member_id = p->ids;
    out->member_loss = x->mloss;
    out->member_skipped = x->mskip;
    out->seconds = now_s() - t0;
    return 0;
}

/* After a step passed the job's rules: the outer step when due, then at
 * an outer-step boundary the replicas asked to leave do (membership). */
static int way_boundary(void *ctx, job_step *info, zb_err *err)
{
    mpi_islands *x = ctx;
    mpi_replica *p = &x->p;
    int boundary = 1, rc = 0;
    if (x->io.outer.kind != OUTER_SYNC) {
        int due = 0;
        ++x->since_sync;
        if (x->io.outer.kind == OUTER_AEDIT)
            rc = aedit_due(p, &x->io.outer, x->since_sync, &due, err);
        else
            due = x->since_sync >= x->io.outer.inner_steps;
        if (rc == 0 && due)
            rc = outer_sync(p, &x->io.outer, x->since_sync, &x->res, err);
        if (rc != 0)
            return rc;
        boundary = due;
        if (due)
            x->since_sync = 0;
    }
    if (boundary && x->step < x->io.steps &&
        (rc = membership(p, x->leave, x->step, x->io.replicas, &x->res, &x->gone, err)) != 0)
        return rc;
    info->left = x->gone;
    info->members_after = x->gone ? info->members : p->k;
    return 0;
}

static int way_eval(void *ctx, double *val, zb_err *err)
{
    mpi_islands *x = ctx;
    return eval_shared(&x->p, val, err);
}

/* The synchronized model at the end, when inner steps are pending. */
static int way_finish(void *ctx, zb_err *err)
{
    mpi_islands *x = ctx;
    if (x->io.outer.kind == OUTER_SYNC || x->since_sync == 0)
        return 0;
    int rc = outer_sync(&x->p, &x->io.outer, x->since_sync, &x->res, err);
    if (rc == 0)
        x->since_sync = 0;
    return rc;
}

static long way_step_count(void *ctx)
{
    const mpi_islands *x = ctx;
    return x->step;
}

/* The job stops when every present rank asked to (the whole job was
 * signalled: scancel, a time limit); a request of some ranks only is a
 * leave, taken at the next outer-step boundary (membership). */
static int way_stop_vote(void *ctx, int here, int *stop, zb_err *err)
{
    mpi_islands *x = ctx;
    /* a replica asks when any of its ranks does, as membership counts it */
    int all = here;
    int rc = x->p.pipe_comm != MPI_COMM_NULL
                 ? MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MAX, x->p.pipe_comm)
                 : MPI_SUCCESS;
    if (rc == MPI_SUCCESS)
        rc = MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MIN, x->p.cur);
    if (rc != MPI_SUCCESS)
        return mpi_failed(err, rc, "MPI_Allreduce of the stop requests");
    *stop = all != 0;
    return 0;
}

static int way_speaker(void *ctx)
{
    const mpi_islands *x = ctx;
    return x->p.cur_rank == 0;
}

void mpi_islands_way(mpi_islands *x, job_way *w)
{
    memset(w, 0, sizeof *w);
    w->ctx = x;
    w->max_batch = 1;
    w->steps = way_steps;
    w->boundary = way_boundary;
    w->eval = way_eval;
    w->finish = way_finish;
    w->step_count = way_step_count;
    w->stop_vote = way_stop_vote;
    w->speaker = way_speaker;
}

int mpi_islands_totals(mpi_islands *x, mpi_islands_result *res, zb_err *err)
{
    mpi_replica *p = &x->p;
    memset(res, 0, sizeof *res);
    res->initial_replicas = x->res.initial_replicas;
    res->steps = x->step;
    res->left = x->gone;
    res->wall_s = now_s() - x->t0;
    res->left_at = malloc((size_t)res->initial_replicas * sizeof *res->left_at);
    if (!res->left_at)
        return zb_fail(err, "islands: out of memory");
    memcpy(res->left_at, x->res.left_at, (size_t)res->initial_replicas * sizeof *res->left_at);
    if (x->gone)
        return 0;
    if (tally_bytes(p, &x->res, err) != 0)
        return -1;
    res->bytes_sent = x->res.bytes_sent;
    res->outer_steps = x->res.outer_steps;
    res->eliminated = x->res.eliminated;
    res->skipped = x->res.skipped;
    if (x->io.outer.kind == OUTER_EDIT || x->io.outer.kind == OUTER_AEDIT) {
        /* every ring counted its own segments, on each of its ranks */
        long mine[2] = { p->me == 0 ? res->eliminated : 0, p->me == 0 ? res->skipped : 0 }, all[2];
        int e = MPI_Allreduce(mine, all, 2, MPI_LONG, MPI_SUM, p->cur);
        if (e != MPI_SUCCESS)
            return mpi_failed(err, e, "MPI_Allreduce of the EDiT counts");
        res->eliminated = all[0];
        res->skipped = all[1];
    }
    /* replica 0's AdamW bytes: the sum over its ranks' own stages */
    unsigned long long mine = 0, all = 0;
    if (p->group == p->ids[0]) {
        int n = trainer_stage_count(p->t);
        unsigned char own[n];
        for (int st = 0; st < n; st++)
            own[st] = zero1_layout_has_stage(&p->l, st);
        mine = zero1_optimizer_bytes(p->t, own);
    }
    int e = MPI_Allreduce(&mine, &all, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, p->cur);
    if (e != MPI_SUCCESS)
        return mpi_failed(err, e, "MPI_Allreduce of the optimizer bytes");
    res->optimizer_bytes = (size_t)all;
    res->final_replicas = p->k;
    res->speaker = p->cur_rank == 0;
    return 0;
}

int mpi_islands_run(const sched_t *s, const zb_model *m, const zb_data *d,
                    const trainer_opts *base, const islands_opts *io, MPI_Comm comm,
                    volatile sig_atomic_t *leave, mpi_islands_result *res, zb_err *err)
{
    memset(res, 0, sizeof *res);
    mpi_islands *x = NULL;
    int rc = mpi_islands_create(s, m, d, base, io, comm, leave, &x, err);
    if (rc != 0) {
        res->agreed_error = rc == -2;
        return -1;
    }
    job_way w;
    mpi_islands_way(x, &w);
    job_opts jo;
    job_opts_default(&jo);
    jo.steps = jo.stop_at = io->steps;
    jo.eval_every = io->eval_every;
    jo.max_skipped = io->max_skipped;
    jo.max_loss_factor = io->max_loss_factor;
    jo.hint = "try a lower --lr or --outer-lr";
    job_result jr;
    job_status st = job_run(&w, &jo, &jr, err);
    rc = st == JOB_DONE || st == JOB_LEFT ? 0 : -1;
    if (rc == 0 && mpi_islands_totals(x, res, err) != 0)
        rc = -1;
    if (rc == 0) {
        res->loss = malloc((size_t)io->steps * sizeof *res->loss);
        res->val_loss = malloc((size_t)io->steps * sizeof *res->val_loss);
        if (!res->loss || !res->val_loss)
            rc = zb_fail(err, "islands: out of memory for %ld steps", io->steps);
    }
    if (rc == 0) {
        for (long i = 0; i < io->steps; i++)
            res->loss[i] = res->val_loss[i] = NAN;
        for (long i = 0; i < jr.n_losses; i++)
            res->loss[i] = jr.losses[i];
        for (int e = 0; e < jr.n_evals; e++)
            res->val_loss[jr.eval_step[e] - 1] = jr.eval_loss[e];
        res->final_val_loss = jr.val_loss;
        res->tokens = jr.tokens;
    }
    res->agreed_error = st == JOB_DIVERGED || st == JOB_FAILED;
    job_result_free(&jr);
    mpi_islands_free(x);
    if (rc)
        mpi_islands_result_free(res);
    return rc;
}
