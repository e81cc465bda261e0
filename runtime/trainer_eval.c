/*
 * trainer_eval.c: the validation loss (trainer.h, trainer_eval): forward
 * passes of fixed validation windows through every stage on the calling
 * thread, which borrows device 0's kernel team while the workers sleep.
 * Each stage's forward runs on its own device's stream, the activation
 * passing between devices with backend.h's fences.
 */
#include "runtime/trainer_impl.h"

#include <stdlib.h>

int trainer_eval(trainer *t, double *val_loss, zb_err *err)
{
    /* The workers are idle between steps: the calling thread borrows
     * device 0's team for the forward passes. */
    if (trainer_workers_start(t, err) != 0 || trainer_mirrors_push(t, err) != 0)
        return -1;
    kern_team *prev = kern_team_current();
    kern_team_bind(t->team[0]);
    zb_backend *be = t->be;
    int B = t->batch;
    int n_batches = (t->opts.eval_windows + B - 1) / B;
    int n_total = n_batches * B;
    size_t tok = (size_t)B * (size_t)t->seq;
    int32_t *x = malloc(sizeof *x * tok), *y = malloc(sizeof *y * tok);
    void *a = be->ops->act_new(be, t->act_floats), *b = be->ops->act_new(be, t->act_floats);
    int rc = 0;
    if (!x || !y || !a || !b)
        rc = zb_fail(err, "out of memory");
    /* A stage's forward runs on its own device (stream); the activation
     * passes between devices with the fences of backend.h. */
    for (int dv = 0; dv < t->n_devices && rc == 0 && be->ops->bind; dv++)
        rc = be->ops->bind(be, dv, err);
    double sum = 0;
    for (int k = 0; k < n_batches && rc == 0; k++) {
        data_val_batch(t->data, k * B, B, n_total, x, y);
        for (int s = 0; s < t->n_stages && rc == 0; s++) {
            stage_rt *r = &t->st[s];
            int last = s == t->n_stages - 1 && !t->ve; /* with vocab_exec: the head below */
            zb_bsaved *sv = NULL;
            float loss = 0;
            if ((rc = be->ops->saved_new(be, r->bs, B, 0, &sv, err)) != 0)
                break;
            if (be->ops->act_wait && ((s > 0 && be->ops->act_wait(be, r->device, a, err) != 0)
                                      || (!last && be->ops->act_wait(be, r->device, b, err) != 0)))
                rc = -1;
            if (rc == 0)
                rc = be->ops->forward(be, r->bs, sv, s == 0 ? x : NULL, s == 0 ? NULL : a,
                                      last ? y : NULL, last ? NULL : b, last ? &loss : NULL, err);
            /* both buffers' last use is now this stage's (the next stage
             * writes into the one read here) */
            if (rc == 0 && be->ops->act_issued
                && ((s > 0 && be->ops->act_issued(be, r->device, a, err) != 0)
                    || (!last && be->ops->act_issued(be, r->device, b, err) != 0)))
                rc = -1;
            /* the loss (and x, y before the next batch overwrites them) */
            if (rc == 0)
                rc = be->ops->sync(be, r->bs, err);
            be->ops->saved_free(be, sv);
            if (rc == 0 && t->ve && s == t->n_stages - 1) {
                /* the head over its shards, on the backend */
                double vl = 0;
                rc = vocab_exec_eval(t->ve, r->bs, r->norm_layout.n_params, b, y, B, &vl, err);
                loss = (float)vl;
                last = 1;
            }
            if (rc != 0) {
                zb_wrap(err, "evaluation, stage %d: ", s);
                break;
            }
            if (last)
                sum += loss;
            void *tmp = a;
            a = b;
            b = tmp;
        }
    }
    free(x);
    free(y);
    be->ops->act_free(be, a);
    be->ops->act_free(be, b);
    kern_team_bind(prev);
    if (rc != 0)
        return -1;
    *val_loss = sum / n_batches;
    return 0;
}
