/*
 * mpi_zero1.c: ZeRO-1 across processes (see mpi_zero1.h).
 *
 * The norm's chain is sequential by design: the per-tensor sum of squares
 * is one sequence of additions in index order (four lanes, adamw_sum_
 * squares), and the pieces of a tensor live on K ranks, so the running
 * lanes visit the owners in chunk order.  It carries 4 doubles a tensor,
 * a few kilobytes for a stage, once per step: latency of K hops, no
 * bandwidth to speak of next to the gradient's reduce-scatter.
 */
#include "runtime/mpi/mpi_zero1.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/adamw_shard.h"
#include "runtime/mpi/mpi_ring.h"

static int failed(zb_err *err, int rc, const char *what)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    return zb_fail(err, "ZeRO-1: %s: %s", what, text);
}

/* The per-tensor sums of stage `stage`'s mean gradient into sq, on every
 * rank of ring (see the header).  acc: 4 * n_tensors doubles of scratch. */
static int stage_norm(trainer *t, const islands_seg_layout *l, int stage, MPI_Comm ring,
                      double *acc, double *sq, outer_ring_stats *stats, zb_err *err)
{
    int k, me;
    MPI_Comm_size(ring, &k);
    MPI_Comm_rank(ring, &me);
    int nt = trainer_stage_layout(t, stage)->n_tensors;
    int c = (me + 1) % k; /* the chunk this rank owns */
    memset(acc, 0, sizeof *acc * 4 * (size_t)nt);
    int rc;
    if (c > 0 && (rc = MPI_Recv(acc, 4 * nt, MPI_DOUBLE, outer_ring_owner(k, c - 1), 4, ring,
                                MPI_STATUS_IGNORE)) != MPI_SUCCESS)
        return failed(err, rc, "MPI_Recv of the norm's lanes");
    size_t n;
    zero1_feed_chunk(t, l, stage, k, c, trainer_stage_grads(t, stage, &n), acc);
    if (c < k - 1) {
        if ((rc = MPI_Send(acc, 4 * nt, MPI_DOUBLE, outer_ring_owner(k, c + 1), 4, ring)) != MPI_SUCCESS)
            return failed(err, rc, "MPI_Send of the norm's lanes");
    } else {
        for (int j = 0; j < nt; j++)
            sq[j] = adamw_sum_squares_finish(acc + 4 * (size_t)j);
    }
    int root = outer_ring_owner(k, k - 1);
    if ((rc = MPI_Bcast(sq, nt, MPI_DOUBLE, root, ring)) != MPI_SUCCESS)
        return failed(err, rc, "MPI_Bcast of the norms");
    /* this rank's share of zero1_count_norm_chain: one hop of lanes, and
     * the root the broadcast's k-1 copies */
    if (stats && k > 1) {
        if (c < k - 1) {
            stats->bytes_sent += 4 * sizeof(double) * (uint64_t)nt;
            stats->messages++;
        } else {
            stats->bytes_sent += (uint64_t)(k - 1) * sizeof(double) * (uint64_t)nt;
            stats->messages += (uint64_t)(k - 1);
        }
    }
    return 0;
}

int mpi_zero1_reduce(trainer *t, const islands_seg_layout *l, MPI_Comm ring,
                     outer_ring_stats *stats, zb_err *err)
{
    int k;
    MPI_Comm_size(ring, &k);
    for (int i = 0; i < l->n; i++) {
        size_t n;
        float *g = trainer_stage_grads(t, l->stage[i], &n) + l->off[i];
        if (mpi_reduce_scatter_mean(g, l->len[i], (float)k, ring, stats, err) != 0)
            return -1;
    }
    int most = 0;
    for (int s = 0; s < trainer_stage_count(t); s++)
        if (trainer_stage_layout(t, s)->n_tensors > most)
            most = trainer_stage_layout(t, s)->n_tensors;
    double *acc = malloc(sizeof *acc * 5 * (size_t)(most ? most : 1));
    if (!acc)
        return zb_fail(err, "ZeRO-1: out of memory");
    double *sq = acc + 4 * (size_t)most;
    int rc = 0;
    for (int s = 0; s < trainer_stage_count(t) && rc == 0; s++) {
        if (!zero1_layout_has_stage(l, s))
            continue;
        rc = stage_norm(t, l, s, ring, acc, sq, stats, err);
        if (rc == 0)
            trainer_set_stage_sumsq(t, s, sq);
    }
    free(acc);
    return rc;
}

int mpi_zero1_gather(trainer *t, const islands_seg_layout *l, MPI_Comm ring,
                     outer_ring_stats *stats, zb_err *err)
{
    for (int i = 0; i < l->n; i++) {
        size_t n;
        float *p = trainer_stage_params(t, l->stage[i], &n) + l->off[i];
        if (mpi_allgather_chunks(p, l->len[i], ring, stats, err) != 0)
            return -1;
    }
    return 0;
}
