/*
 * trainer_zero1.c: the trainer's hooks for ZeRO-1 (trainer.h), which
 * runtime/outer/zero1.h drives across data-parallel replicas.
 *
 * The executor's optimizer path stays as it is: the post-validated step
 * (trainer_ops.c) still passes the squared norm up and down the stages,
 * snapshots before its optimistic step and restores on a wrong guess.
 * Two things change under ZeRO-1, and both enter through this file:
 *
 *   - what the backend steps: opt_shard (backend.h) shrinks m and v to the
 *     replica's ranges, so adamw, snapshot and restore cover the shard
 *     only, 1/K of the optimizer bytes and of the rollback copy;
 *   - where the norm comes from: after a reduce-scatter the stage's
 *     gradient buffer holds the mean gradient only on the own shard, so
 *     the caller computes each tensor's sum of squares across the
 *     replicas in the unsharded order and hands it in; the stage's norm
 *     then takes it instead of calling grad_sumsq (trainer_add_stage_norm).
 *
 * The rest, the collectives, lives with the replicas (runtime/outer/).
 */
#include "runtime/trainer_impl.h"

#include <assert.h>
#include <string.h>

int trainer_shard_optimizer(trainer *t, int stage, const size_t *lo, const size_t *len, int n,
                            zb_err *err)
{
    if (stage < 0 || stage >= t->n_stages)
        return zb_fail(err, "ZeRO-1: no stage %d", stage);
    stage_rt *r = &t->st[stage];
    if (!t->be->ops->opt_shard)
        return zb_fail(err, "ZeRO-1: the %s backend cannot shard its optimizer state",
                       t->be->ops->name);
    if (r->adam_t != 0 || r->opt_floats != 0)
        return zb_fail(err, "ZeRO-1: stage %d already stepped or sharded", stage);
    if (t->be->ops->opt_shard(t->be, r->bs, lo, len, n, err) != 0)
        return zb_wrap(err, "ZeRO-1: stage %d: ", stage);
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += len[i];
    r->opt_floats = total;
    return 0;
}

size_t trainer_stage_optimizer_floats(const trainer *t, int stage)
{
    assert(stage >= 0 && stage < t->n_stages);
    const stage_rt *r = &t->st[stage];
    return r->opt_floats ? r->opt_floats : r->n_params;
}

void trainer_set_stage_sumsq(trainer *t, int stage, const double *sq)
{
    assert(stage >= 0 && stage < t->n_stages);
    stage_rt *r = &t->st[stage];
    memcpy(r->tensor_sq, sq, sizeof *sq * (size_t)r->layout.n_tensors);
    r->sq_given = 1;
}

int trainer_zero1_whole_state(const trainer *t, const char *what, zb_err *err)
{
    for (int s = 0; s < t->n_stages; s++)
        if (t->st[s].opt_floats && !t->st[s].ckpt_moment[0])
            return zb_fail(err, "cannot %s a checkpoint of a ZeRO-1 replica's trainer: it holds "
                           "1/K of the optimizer state (zero1_ckpt_begin gathers it)", what);
    return 0;
}

void trainer_zero1_checkpoint_moments(trainer *t, int stage, float *m, float *v)
{
    assert(stage >= 0 && stage < t->n_stages);
    assert((m == NULL) == (v == NULL));
    t->st[stage].ckpt_moment[0] = m;
    t->st[stage].ckpt_moment[1] = v;
}

float *trainer_zero1_ckpt_buffer(trainer *t, int s, zb_bbuf which, int load)
{
    stage_rt *r = &t->st[s];
    if ((which == ZB_BUF_ADAM_M || which == ZB_BUF_ADAM_V) && r->ckpt_moment[0])
        return r->ckpt_moment[which == ZB_BUF_ADAM_V];
    return load ? t->be->ops->host(t->be, r->bs, which) : trainer_mirror_get(t, s, which, 0);
}
