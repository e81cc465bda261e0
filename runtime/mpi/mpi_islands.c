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

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/mpi/mpi_ring.h"

/* This rank's replica and the run's shared bookkeeping. */
typedef struct mpi_replica {
    trainer *t;             /* the replica's pipeline trainer */
    islands_seg_layout l;   /* segments (islands.c's layout) */
    float **params;         /* [l.n] segment pointers into the trainer's parameters */
    float **grads;          /* [l.n] the same into its gradients (sync) */
    size_t *seg_off;        /* [l.n] offset of each segment in global/mom/delta */
    size_t n_total;         /* floats over all segments */
    float *global;          /* [n_total] DiLoCo: last synchronized parameters */
    float *mom;             /* [n_total] DiLoCo: outer Nesterov momentum */
    float *delta;           /* [n_total] DiLoCo: pseudo-gradient, the ring's buffer */
    MPI_Comm cur;           /* the current membership (a duplicate, then split) */
    int *ids;               /* [size of cur] replica id (initial rank) of each rank of cur */
    int k;                  /* size of cur */
    int me;                 /* rank in cur */
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

static void replica_free(mpi_replica *p)
{
    trainer_free(p->t);
    islands_seg_layout_free(&p->l);
    free(p->params);
    free(p->grads);
    free(p->seg_off);
    free(p->global);
    free(p->mom);
    free(p->delta);
    free(p->ids);
    free(p->losses);
    if (p->cur != MPI_COMM_NULL)
        MPI_Comm_free(&p->cur);
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
 * one local replica).  A non-finite pseudo-gradient anywhere is agreed on
 * first, so every rank fails with the same error and nothing changed. */
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
            bad.id = p->ids[p->me];
            bad.seg = s;
        }
    }
    int rc = MPI_Allreduce(&bad, &worst, 1, MPI_2INT, MPI_MINLOC, p->cur);
    if (rc != MPI_SUCCESS)
        return mpi_failed(err, rc, "MPI_Allreduce of the finiteness check");
    if (worst.id != INT_MAX) {
        zb_fail(err, "outer: replica %d: pseudo-gradient of segment %d is not finite", worst.id,
                worst.seg);
        return -2; /* the same error on every rank */
    }
    for (int s = 0; s < p->l.n; s++) {
        size_t off = p->seg_off[s], len = p->l.len[s];
        if (mpi_allreduce_mean(cfg->wire, p->delta + off, len, (float)p->k, p->cur, &p->local, err))
            return -1;
        outer_nesterov(p->global + off, p->mom + off, p->delta + off, len, cfg->outer_lr,
                       cfg->outer_momentum);
        memcpy(p->params[s], p->global + off, len * sizeof(float));
    }
    return 0;
}

/* sync: every gradient segment replaced by its mean over the members. */
static int sync_grads(mpi_replica *p, const outer_config *cfg, zb_err *err)
{
    for (int s = 0; s < p->l.n; s++)
        if (mpi_allreduce_mean(cfg->wire, p->grads[s], p->l.len[s], (float)p->k, p->cur,
                               &p->local, err))
            return -1;
    return 0;
}

/* The membership check after a boundary: flags all-gathered, leavers
 * recorded, the survivors split off.  Sets *gone on a leaving rank. */
static int membership(mpi_replica *p, volatile sig_atomic_t *leave, long trained,
                      mpi_islands_result *res, int *gone, zb_err *err)
{
    int mine = leave && *leave ? 1 : 0;
    int flags[p->k];
    int rc = MPI_Allgather(&mine, 1, MPI_INT, flags, 1, MPI_INT, p->cur);
    if (rc != MPI_SUCCESS)
        return mpi_failed(err, rc, "MPI_Allgather of the leave flags");
    int leaving = 0;
    for (int i = 0; i < p->k; i++)
        leaving += flags[i];
    if (leaving == 0)
        return 0;
    if (leaving == p->k)
        flags[0] = 0; /* one replica must finish: the lowest rank stays */
    if (tally_bytes(p, res, err))
        return -1;
    MPI_Comm next;
    rc = MPI_Comm_split(p->cur, flags[p->me] ? MPI_UNDEFINED : 0, p->me, &next);
    if (rc != MPI_SUCCESS)
        return mpi_failed(err, rc, "MPI_Comm_split");
    int n = 0, me = -1;
    for (int i = 0; i < p->k; i++) {
        if (flags[i]) {
            res->left_at[p->ids[i]] = trained;
            continue;
        }
        if (i == p->me)
            me = n;
        p->ids[n++] = p->ids[i];
    }
    MPI_Comm_free(&p->cur);
    p->cur = next;
    if (flags[p->me] && me < 0) {
        *gone = 1;
        return 0;
    }
    p->k = n;
    p->me = me;
    return 0;
}

static int replica_init(mpi_replica *p, const sched_t *s, const zb_model *m, const zb_data *d,
                        const trainer_opts *base, const islands_opts *io, MPI_Comm comm,
                        zb_err *err)
{
    int rc = MPI_Comm_dup(comm, &p->cur);
    if (rc != MPI_SUCCESS)
        return mpi_failed(err, rc, "MPI_Comm_dup");
    MPI_Comm_size(p->cur, &p->k);
    MPI_Comm_rank(p->cur, &p->me);
    p->ids = malloc((size_t)p->k * sizeof *p->ids);
    p->losses = malloc((size_t)p->k * sizeof *p->losses);
    if (!p->ids || !p->losses)
        return zb_fail(err, "islands: out of memory");
    for (int i = 0; i < p->k; i++)
        p->ids[i] = i;
    trainer_opts opts = *base;
    opts.data_stream = (uint64_t)p->me;
    if (trainer_create(s, m, d, &opts, &p->t, err))
        return -1;
    if (islands_seg_layout_build(p->t, &p->l, err))
        return -1;
    p->params = malloc((size_t)p->l.n * sizeof *p->params);
    p->grads = malloc((size_t)p->l.n * sizeof *p->grads);
    p->seg_off = malloc((size_t)p->l.n * sizeof *p->seg_off);
    if (!p->params || !p->grads || !p->seg_off)
        return zb_fail(err, "islands: out of memory");
    islands_seg_pointers(p->t, &p->l, p->params);
    islands_seg_grad_pointers(p->t, &p->l, p->grads);
    for (int i = 0; i < p->l.n; i++) {
        p->seg_off[i] = p->n_total;
        p->n_total += p->l.len[i];
    }
    if (io->outer.kind == OUTER_DILOCO) {
        p->global = malloc(p->n_total * sizeof(float));
        p->mom = calloc(p->n_total, sizeof(float));
        p->delta = malloc(p->n_total * sizeof(float));
        if (!p->global || !p->mom || !p->delta)
            return zb_fail(err, "islands: out of memory for %zu parameters", p->n_total);
        /* Same seed on every rank: the replicas start identical, so each
         * one's own parameters are the global start (outer.c copies
         * replica 0's, the same bits). */
        for (int i = 0; i < p->l.n; i++)
            memcpy(p->global + p->seg_off[i], p->params[i], p->l.len[i] * sizeof(float));
    }
    return 0;
}

/* Evaluates on rank 0 of the members and shares the result (collective). */
static int eval_shared(mpi_replica *p, double *val, zb_err *err)
{
    int fail = 0;
    if (p->me == 0 && trainer_eval(p->t, val, err) != 0)
        fail = 1;
    double msg[2] = { *val, (double)fail };
    int rc = MPI_Bcast(msg, 2, MPI_DOUBLE, 0, p->cur);
    if (rc != MPI_SUCCESS)
        return mpi_failed(err, rc, "MPI_Bcast of the validation loss");
    if (msg[1] != 0.0) {
        if (p->me == 0)
            return -1; /* its own error; the others stop without a line of their own */
        zb_fail(err, "islands: the evaluation failed on replica %d", p->ids[0]);
        return -2;
    }
    *val = msg[0];
    return 0;
}

int mpi_islands_check(const islands_opts *io, MPI_Comm comm, zb_err *err)
{
    if (io->outer.kind != OUTER_DILOCO && io->outer.kind != OUTER_SYNC)
        return zb_fail(err, "islands: --outer %s does not run across processes yet (diloco or sync)",
                       outer_kind_name(io->outer.kind));
    if (io->n_events > 0)
        return zb_fail(err, "islands: scripted elastic events do not run across processes");
    if (io->steps < 1)
        return zb_fail(err, "islands: %ld steps (need at least 1)", io->steps);
    int world;
    MPI_Comm_size(comm, &world);
    if (io->replicas != world)
        return zb_fail(err, "islands: --replicas %d but %d MPI ranks (one replica per rank)",
                       io->replicas, world);
    return 0;
}

int mpi_islands_run(const sched_t *s, const zb_model *m, const zb_data *d,
                    const trainer_opts *base, const islands_opts *io, MPI_Comm comm,
                    volatile sig_atomic_t *leave, mpi_islands_progress progress, void *ctx,
                    mpi_islands_result *res, zb_err *err)
{
    memset(res, 0, sizeof *res);
    res->agreed_error = 1; /* option errors are the same on every rank */
    if (mpi_islands_check(io, comm, err))
        return -1;
    mpi_replica p;
    memset(&p, 0, sizeof p);
    p.cur = MPI_COMM_NULL;
    double t0 = now_s();
    res->agreed_error = 0;
    int rc = replica_init(&p, s, m, d, base, io, comm, err);
    int initial_k = p.k;
    res->initial_replicas = initial_k;
    if (rc == 0) {
        res->loss = malloc((size_t)io->steps * sizeof *res->loss);
        res->val_loss = malloc((size_t)io->steps * sizeof *res->val_loss);
        res->left_at = malloc((size_t)(initial_k > 0 ? initial_k : 1) * sizeof *res->left_at);
        if (!res->loss || !res->val_loss || !res->left_at)
            rc = zb_fail(err, "islands: out of memory for %ld steps", io->steps);
    }
    if (rc) {
        replica_free(&p);
        mpi_islands_result_free(res);
        return -1;
    }
    for (long i = 0; i < io->steps; i++)
        res->loss[i] = res->val_loss[i] = NAN;
    for (int i = 0; i < initial_k; i++)
        res->left_at[i] = -1;

    const int diloco = io->outer.kind == OUTER_DILOCO;
    long since_sync = 0, tokens_per_step = trainer_get_stats(p.t)->tokens_per_step;
    int gone = 0;
    long step;
    for (step = 0; step < io->steps && rc == 0 && !gone; step++) {
        double loss;
        rc = diloco ? trainer_step(p.t, &loss, err) : trainer_backward(p.t, &loss, err);
        if (rc)
            break;
        int e = MPI_Allgather(&loss, 1, MPI_DOUBLE, p.losses, 1, MPI_DOUBLE, p.cur);
        if (e != MPI_SUCCESS) {
            rc = mpi_failed(err, e, "MPI_Allgather of the losses");
            break;
        }
        double sum = 0.0;
        for (int i = 0; i < p.k; i++)
            sum += p.losses[i];
        res->loss[step] = sum / p.k;
        res->tokens += (long)p.k * tokens_per_step;
        int boundary = 0;
        if (diloco) {
            if (++since_sync >= io->outer.inner_steps) {
                if ((rc = diloco_step(&p, &io->outer, err)) != 0) {
                    res->agreed_error = rc == -2;
                    break;
                }
                res->outer_steps++;
                since_sync = 0;
                boundary = 1;
            }
        } else {
            if ((rc = sync_grads(&p, &io->outer, err)) != 0 || (rc = trainer_apply(p.t, err)) != 0)
                break;
            boundary = 1;
        }
        if (io->eval_every > 0 && (step + 1) % io->eval_every == 0 &&
            (rc = eval_shared(&p, &res->val_loss[step], err)) != 0)
            break;
        int k_before = p.k;
        if (boundary && step + 1 < io->steps &&
            (rc = membership(&p, leave, step + 1, res, &gone, err)) != 0)
            break;
        if (progress && !gone && p.me == 0)
            progress(ctx, step, res->loss[step], k_before);
    }
    res->steps = step;
    if (rc == 0 && gone) {
        res->left = 1;
        res->wall_s = now_s() - t0;
        replica_free(&p);
        return 0;
    }
    if (rc == 0 && diloco && since_sync > 0) { /* the synchronized model at the end */
        if ((rc = diloco_step(&p, &io->outer, err)) == 0)
            res->outer_steps++;
        res->agreed_error = rc == -2;
    }
    if (rc == 0)
        rc = eval_shared(&p, &res->final_val_loss, err);
    if (rc == 0)
        rc = tally_bytes(&p, res, err);
    res->final_replicas = p.k;
    res->speaker = p.me == 0;
    res->wall_s = now_s() - t0;
    replica_free(&p);
    if (rc) {
        res->agreed_error = rc == -2;
        mpi_islands_result_free(res);
        return -1;
    }
    return 0;
}
