/*
 * test_trainer_split.c: a step taken in two halves, trainer_backward then
 * trainer_apply, is the same step as trainer_step:
 *
 *   - losses, validation loss, parameters and rollback counts are
 *     bit-identical to trainer_step's, with post-validation rolling back
 *     (clip threshold just below the norm) and with the synchronous clip,
 *     on a one-device and a two-device schedule;
 *   - trainer_apply steps on what the gradient buffers hold when it runs:
 *     the reported norm is the norm of the buffers as the caller left them
 *     (scaled by 1/2 here), and a NaN written into them skips the step;
 *   - the gradient is the mean over the micro-batches (M copies of one
 *     micro-batch give that micro-batch's gradient);
 *   - misuse (apply without backward, backward twice, step while a
 *     backward is pending) is refused with an error.
 */
#include <check.h>
#include <math.h>

#include "tests/common/trainer_fixture.h"

#define M 4
#define STEPS 3

static trainer_opts split_opts(void)
{
    trainer_opts o;
    trainer_opts_default(&o);
    o.seed = 99;
    o.adamw.lr = 3e-3f;
    o.adamw.warmup_steps = 0;
    o.adamw.decay_steps = 100;
    o.adamw.grad_clip = 0;
    o.eval_windows = 4;
    return o;
}

/* fixture_train with backward + apply instead of trainer_step. */
static fixture_run train_split(const sched_t *s, const zb_data *d, const trainer_opts *o,
                               int steps)
{
    zb_model m = fixture_model();
    trainer *t = NULL;
    zb_err err = { { 0 } };
    ck_assert_msg(trainer_create(s, &m, d, o, &t, &err) == 0, "%s", err.msg);
    fixture_run r;
    memset(&r, 0, sizeof r);
    r.steps = steps;
    for (int i = 0; i < steps; i++) {
        ck_assert_int_eq(trainer_pending(t), 0);
        ck_assert_msg(trainer_backward(t, &r.loss[i], &err) == 0, "%s", err.msg);
        ck_assert_int_eq(trainer_pending(t), 1);
        ck_assert_int_eq(trainer_get_stats(t)->step, i); /* counted by apply */
        ck_assert_msg(trainer_apply(t, &err) == 0, "%s", err.msg);
        ck_assert_int_eq(trainer_get_stats(t)->step, i + 1);
        ck_assert(memcmp(&trainer_get_stats(t)->last_loss, &r.loss[i], sizeof(double)) == 0);
    }
    ck_assert_msg(trainer_eval(t, &r.val_loss, &err) == 0, "%s", err.msg);
    r.n_params = trainer_param_count(t);
    r.params = malloc(sizeof(float) * r.n_params);
    size_t off = 0;
    for (int st = 0; st < trainer_stage_count(t); st++) {
        size_t n;
        const float *p = trainer_stage_params(t, st, &n);
        memcpy(r.params + off, p, sizeof(float) * n);
        off += n;
    }
    r.rollbacks = trainer_get_stats(t)->rollbacks;
    r.skipped = trainer_get_stats(t)->skipped_steps;
    trainer_free(t);
    return r;
}

/* Global gradient norm of the step whose gradients t holds, as the trainer
 * reports it after an unclipped single step. */
static double first_norm(const sched_t *s, const zb_data *d, const trainer_opts *o)
{
    zb_model m = fixture_model();
    trainer *t;
    zb_err err = { { 0 } };
    double loss;
    ck_assert_int_eq(trainer_create(s, &m, d, o, &t, &err), 0);
    ck_assert_int_eq(trainer_step(t, &loss, &err), 0);
    double norm = trainer_get_stats(t)->last_grad_norm;
    trainer_free(t);
    return norm;
}

START_TEST(split_step_equals_trainer_step)
{
    zb_data *d = fixture_data(fixture_model().seq_len);
    sched_t *scheds[2] = { fixture_single(M), fixture_scrambled_w(M) };
    for (int k = 0; k < 2; k++) {
        trainer_opts o = split_opts();
        double norm = first_norm(scheds[k], d, &o);
        ck_assert(norm > 0 && isfinite(norm));
        /* Below the full norm: the post-validated path rolls back. */
        o.adamw.grad_clip = (float)(norm * 0.98);
        for (int sync = 0; sync < 2; sync++) {
            o.sync_optimizer = sync;
            fixture_run a = fixture_train(scheds[k], d, &o, STEPS);
            fixture_run b = train_split(scheds[k], d, &o, STEPS);
            char what[96];
            snprintf(what, sizeof what, "%s, %s", scheds[k]->name,
                     sync ? "synchronous clip" : "post-validation");
            fixture_assert_same(&a, &b, what);
            ck_assert_int_eq(a.rollbacks, b.rollbacks);
            ck_assert_int_eq(a.skipped, b.skipped);
            if (!sync && scheds[k]->n_stages > 1)
                ck_assert_int_ge(b.rollbacks, 1); /* the rollback path ran */
            free(a.params);
            free(b.params);
        }
    }
    sched_free(scheds[0]);
    sched_free(scheds[1]);
    data_free(d);
}
END_TEST

/* Sum of squares of every stage's gradient buffer, in double. */
static double grads_sq(trainer *t)
{
    double sq = 0;
    for (int st = 0; st < trainer_stage_count(t); st++) {
        size_t n;
        const float *g = trainer_stage_grads(t, st, &n);
        for (size_t i = 0; i < n; i++)
            sq += (double)g[i] * g[i];
    }
    return sq;
}

START_TEST(apply_uses_the_buffers_as_left)
{
    zb_data *d = fixture_data(fixture_model().seq_len);
    sched_t *s = fixture_scrambled_w(M);
    trainer_opts o = split_opts();
    zb_model m = fixture_model();
    trainer *t;
    zb_err err = { { 0 } };
    double loss;
    ck_assert_int_eq(trainer_create(s, &m, d, &o, &t, &err), 0);

    /* Unchanged buffers: the reported norm is theirs. */
    ck_assert_int_eq(trainer_backward(t, &loss, &err), 0);
    double sq = grads_sq(t);
    ck_assert(sq > 0);
    ck_assert_int_eq(trainer_apply(t, &err), 0);
    double norm = trainer_get_stats(t)->last_grad_norm;
    ck_assert_msg(fabs(norm - sqrt(sq)) <= 1e-9 * norm, "%.12g vs %.12g", norm, sqrt(sq));

    /* Halved buffers: the optimizer sees the halved gradient. */
    ck_assert_int_eq(trainer_backward(t, &loss, &err), 0);
    double before = sqrt(grads_sq(t));
    for (int st = 0; st < trainer_stage_count(t); st++) {
        size_t n;
        float *g = trainer_stage_grads(t, st, &n);
        for (size_t i = 0; i < n; i++)
            g[i] *= 0.5f;
    }
    ck_assert_int_eq(trainer_apply(t, &err), 0);
    norm = trainer_get_stats(t)->last_grad_norm;
    ck_assert_msg(fabs(norm - 0.5 * before) <= 1e-9 * norm, "%.12g vs %.12g", norm, 0.5 * before);

    /* A NaN written into the last stage skips the step everywhere. */
    size_t n0, n1;
    float *p0 = trainer_stage_params(t, 0, &n0);
    float *keep = malloc(sizeof(float) * n0);
    memcpy(keep, p0, sizeof(float) * n0);
    ck_assert_int_eq(trainer_backward(t, &loss, &err), 0);
    float *g1 = trainer_stage_grads(t, 1, &n1);
    g1[n1 / 2] = NAN;
    ck_assert_int_eq(trainer_apply(t, &err), 0);
    ck_assert_int_eq(trainer_get_stats(t)->skipped_steps, 1);
    ck_assert(memcmp(keep, trainer_stage_params(t, 0, &n0), sizeof(float) * n0) == 0);
    free(keep);
    trainer_free(t);
    sched_free(s);
    data_free(d);
}
END_TEST

/* Concatenates every stage's gradient buffer of t (malloc'd, *n floats). */
static float *all_grads(trainer *t, size_t *n)
{
    float *g = malloc(sizeof(float) * trainer_param_count(t));
    ck_assert_ptr_nonnull(g);
    size_t off = 0;
    for (int st = 0; st < trainer_stage_count(t); st++) {
        size_t k;
        const float *src = trainer_stage_grads(t, st, &k);
        memcpy(g + off, src, sizeof(float) * k);
        off += k;
    }
    *n = off;
    return g;
}

/* The step's gradient is the mean over its micro-batches, not their sum:
 * M copies of one micro-batch give (up to rounding) the gradient of that
 * micro-batch alone, on one device and on a split two-device schedule. */
START_TEST(gradient_is_the_mean_over_micro_batches)
{
    zb_data *d = fixture_data(fixture_model().seq_len);
    zb_model m = fixture_model();
    size_t tok = (size_t)m.micro_batch * (size_t)m.seq_len;
    int32_t *x = malloc(sizeof *x * tok * M), *y = malloc(sizeof *y * tok * M);
    ck_assert(x && y);
    for (int j = 0; j < M; j++) {
        memcpy(x + j * tok, d->tokens + 1000, sizeof *x * tok);
        memcpy(y + j * tok, d->tokens + 1001, sizeof *y * tok);
    }
    trainer_opts o = split_opts();
    zb_err err = { { 0 } };
    double loss1, lossm;
    sched_t *one = fixture_single(1);
    trainer *t1;
    ck_assert_msg(trainer_create(one, &m, d, &o, &t1, &err) == 0, "%s", err.msg);
    ck_assert_msg(trainer_backward_on(t1, x, y, &loss1, &err) == 0, "%s", err.msg);
    size_t n1;
    float *g1 = all_grads(t1, &n1);
    double top = 0;
    for (size_t i = 0; i < n1; i++)
        top = fmax(top, fabs(g1[i]));
    ck_assert(top > 0);
    sched_t *many[2] = { fixture_single(M), fixture_scrambled_w(M) };
    for (int k = 0; k < 2; k++) {
        trainer *tm;
        ck_assert_msg(trainer_create(many[k], &m, d, &o, &tm, &err) == 0, "%s", err.msg);
        ck_assert_msg(trainer_backward_on(tm, x, y, &lossm, &err) == 0, "%s", err.msg);
        ck_assert_double_eq_tol(lossm, loss1, 1e-6);
        size_t nm;
        float *gm = all_grads(tm, &nm);
        ck_assert_uint_eq(nm, n1);
        for (size_t i = 0; i < n1; i++)
            ck_assert_msg(fabs(gm[i] - g1[i]) <= 1e-5 * top, "%s: gradient %zu is %g, one micro-batch gives %g",
                          many[k]->name, i, gm[i], g1[i]);
        free(gm);
        trainer_free(tm);
        sched_free(many[k]);
    }
    free(g1);
    trainer_free(t1);
    sched_free(one);
    free(x);
    free(y);
    data_free(d);
}
END_TEST

START_TEST(misuse_is_refused)
{
    zb_data *d = fixture_data(fixture_model().seq_len);
    sched_t *s = fixture_single(2);
    trainer_opts o = split_opts();
    zb_model m = fixture_model();
    trainer *t;
    zb_err err = { { 0 } };
    double loss;
    ck_assert_int_eq(trainer_create(s, &m, d, &o, &t, &err), 0);
    ck_assert_int_eq(trainer_apply(t, &err), -1);
    ck_assert_msg(strstr(err.msg, "no backward") != NULL, "%s", err.msg);
    ck_assert_int_eq(trainer_backward(t, &loss, &err), 0);
    ck_assert_int_eq(trainer_backward(t, &loss, &err), -1);
    ck_assert_int_eq(trainer_step(t, &loss, &err), -1);
    ck_assert_msg(strstr(err.msg, "pending") != NULL, "%s", err.msg);
    ck_assert_int_eq(trainer_get_stats(t)->step, 0);
    ck_assert_int_eq(trainer_apply(t, &err), 0);
    ck_assert_int_eq(trainer_step(t, &loss, &err), 0);
    ck_assert_int_eq(trainer_get_stats(t)->step, 2);
    trainer_free(t);
    sched_free(s);
    data_free(d);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("runtime_trainer_split");
    TCase *tc = tcase_create("split");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, split_step_equals_trainer_step);
    tcase_add_test(tc, apply_uses_the_buffers_as_left);
    tcase_add_test(tc, gradient_is_the_mean_over_micro_batches);
    tcase_add_test(tc, misuse_is_refused);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
