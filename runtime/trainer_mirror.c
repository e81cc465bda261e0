/*
 * trainer_mirror.c: the host mirrors of the backend's buffers
 * (backend.h) and the accessors that hand them out (trainer.h).
 *
 * After a step the device holds the newest params, m and v (and grads
 * after a backward); an accessor downloads a stale mirror and, since its
 * caller may write it, marks it newer than the device; the next step or
 * evaluation uploads it.  Nothing to do when the mirror is the buffer (the
 * CPU).  A download that fails outside a worker cannot return an error
 * through an accessor that returns a pointer, so it is latched
 * (trainer_be_fail) and reported by the next call that can fail.
 */
#include "runtime/trainer_impl.h"

#include <assert.h>

/* Records a backend failure of the calling thread (outside the workers),
 * reported by the next trainer_be_check. */
void trainer_be_fail(trainer *t, const zb_err *e)
{
    if (!t->be_failed) {
        t->be_failed = 1;
        t->be_err = *e;
    }
}

/* 0, or -1 with err naming the backend failure trainer_be_fail recorded. */
int trainer_be_check(const trainer *t, zb_err *err)
{
    if (t->be_failed)
        return zb_fail(err, "%s backend: %s", t->be->ops->name, t->be_err.msg);
    return 0;
}

/* Host mirrors (backend.h).  After a step the device holds the newest
 * params, m and v (and grads after a backward); an accessor downloads a
 * stale mirror and, since its caller may write it, marks it newer than the
 * device; the next step or evaluation uploads it.  Nothing to do when the
 * mirror is the buffer (the CPU). */
void trainer_mirrors_device_wrote(trainer *t, unsigned bits)
{
    if (!t->mirrored)
        return;
    for (int s = 0; s < t->n_stages; s++)
        t->st[s].dev_newer |= bits;
}

/* Stage s's mirror of `which`, downloaded when stale; a failed download
 * is recorded for trainer_be_check and the stale mirror returned. */
float *trainer_mirror_get(trainer *t, int s, zb_bbuf which, int for_write)
{
    stage_rt *r = &t->st[s];
    unsigned bit = 1u << which;
    if (t->mirrored && (r->dev_newer & bit)) {
        zb_err e;
        if (t->be->ops->download(t->be, r->bs, which, &e) != 0)
            trainer_be_fail(t, &e);
        else
            r->dev_newer &= ~bit;
    }
    if (t->mirrored && for_write)
        r->host_newer |= bit;
    return t->be->ops->host(t->be, r->bs, which);
}

/* Uploads every mirror written since the last step.  0 or -1 with err. */
int trainer_mirrors_push(trainer *t, zb_err *err)
{
    if (trainer_be_check(t, err) != 0)
        return -1;
    if (!t->mirrored)
        return 0;
    for (int s = 0; s < t->n_stages; s++) {
        stage_rt *r = &t->st[s];
        for (int k = 0; k < ZB_BUF_COUNT; k++)
            if (r->host_newer & (1u << k)) {
                if (t->be->ops->upload(t->be, r->bs, (zb_bbuf)k, err) != 0)
                    return zb_wrap(err, "%s backend, stage %d: ", t->be->ops->name, s);
                r->host_newer &= ~(1u << k);
            }
    }
    return 0;
}

float *trainer_stage_params(trainer *t, int stage, size_t *n)
{
    assert(stage >= 0 && stage < t->n_stages);
    *n = t->st[stage].n_params;
    return trainer_mirror_get(t, stage, ZB_BUF_PARAMS, 1);
}

float *trainer_stage_grads(trainer *t, int stage, size_t *n)
{
    assert(stage >= 0 && stage < t->n_stages);
    *n = t->st[stage].n_params;
    return trainer_mirror_get(t, stage, ZB_BUF_GRADS, 1);
}

float *trainer_stage_adam_m(trainer *t, int stage, size_t *n)
{
    assert(stage >= 0 && stage < t->n_stages);
    *n = t->st[stage].opt_floats ? t->st[stage].opt_floats : t->st[stage].n_params;
    return trainer_mirror_get(t, stage, ZB_BUF_ADAM_M, 1);
}

float *trainer_stage_adam_v(trainer *t, int stage, size_t *n)
{
    assert(stage >= 0 && stage < t->n_stages);
    *n = t->st[stage].opt_floats ? t->st[stage].opt_floats : t->st[stage].n_params;
    return trainer_mirror_get(t, stage, ZB_BUF_ADAM_V, 1);
}

int64_t *trainer_stage_adam_t(trainer *t, int stage)
{
    assert(stage >= 0 && stage < t->n_stages);
    return &t->st[stage].adam_t;
}

/* trainer.h's bits are the backend's buffer bits. */
_Static_assert(TRAINER_BUF_PARAMS == 1u << ZB_BUF_PARAMS && TRAINER_BUF_GRADS == 1u << ZB_BUF_GRADS
                   && TRAINER_BUF_ADAM_M == 1u << ZB_BUF_ADAM_M
                   && TRAINER_BUF_ADAM_V == 1u << ZB_BUF_ADAM_V,
               "TRAINER_BUF_* must match 1 << zb_bbuf");

int trainer_host_sync(trainer *t, unsigned bufs, zb_err *err)
{
    if (!t->mirrored)
        return 0;
    for (int s = 0; s < t->n_stages; s++)
        for (int k = 0; k < ZB_BUF_COUNT; k++)
            if (bufs & (1u << k))
                trainer_mirror_get(t, s, (zb_bbuf)k, 1);
    return trainer_be_check(t, err);
}
