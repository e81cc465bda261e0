/*
 * test_sync_dp.c: the sync mode as real data parallelism, K pipeline
 * trainers whose gradients are averaged every step by the ring all-reduce
 * (outer_sync_grads) between trainer_backward and trainer_apply:
 *
 *   - replicas start identical, see different data (their gradients
 *     differ before the all-reduce), hold bit-identical gradients after it
 *     and bit-identical parameters and AdamW moments after every step, in
 *     fp32 and int8;
 *   - the bytes counted are exactly the ring formula per stage segment;
 *   - with fp32, the averaged gradient of K replicas on batches of b
 *     sequences equals the gradient of one trainer on the K*b sequences
 *     concatenated (the arithmetic the former emulation ran) up to
 *     summation order: the weight gradients sum K*b*T rows in one matrix
 *     product there and K partial sums of b*T rows here, so they agree to
 *     a few fp32 ulps of the largest entry, not bit for bit.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/outer/outer.h"
#include "runtime/rng.h"
#include "runtime/trainer.h"
#include "tests/common/trainer_fixture.h"

#define K_MAX 4

static trainer_opts dp_opts(uint64_t stream, int batch)
{
    trainer_opts o;
    trainer_opts_default(&o);
    o.seed = 11;
    o.data_stream = stream;
    o.batch_size = batch;
    o.eval_windows = 4;
    o.adamw.lr = 3e-3f;
    o.adamw.warmup_steps = 0;
    o.adamw.decay_steps = 100;
    o.adamw.grad_clip = 1.0f;
    return o;
}

/* K trainers registered with a sync-mode outer object, one segment per
 * stage (whole parameter / gradient buffers). */
typedef struct dp {
    int k;
    trainer *t[K_MAX];
    outer_t *o;
    size_t seg_len[2];
} dp;

static void dp_init(dp *x, const sched_t *s, const zb_data *d, int k, outer_wire wire, int batch)
{
    memset(x, 0, sizeof *x);
    x->k = k;
    zb_model m = fixture_model_shaped("sync-dp-test", 2, batch);
    zb_err err = { "" };
    for (int r = 0; r < k; r++) {
        trainer_opts o = dp_opts((uint64_t)r, batch);
        ck_assert_msg(trainer_create(s, &m, d, &o, &x->t[r], &err) == 0, "%s", err.msg);
    }
    for (int st = 0; st < 2; st++)
        trainer_stage_params(x->t[0], st, &x->seg_len[st]);
    outer_config c;
    outer_config_default(&c, OUTER_SYNC);
    c.wire = wire;
    ck_assert_msg(outer_new(&c, 2, x->seg_len, &x->o, &err) == 0, "%s", err.msg);
    for (int r = 0; r < k; r++) {
        float *p[2], *g[2];
        size_t n;
        for (int st = 0; st < 2; st++) {
            p[st] = trainer_stage_params(x->t[r], st, &n);
            g[st] = trainer_stage_grads(x->t[r], st, &n);
        }
        ck_assert_int_eq(outer_add_replica(x->o, p, g, &err), r);
    }
}

static void dp_free(dp *x)
{
    for (int r = 0; r < x->k; r++)
        trainer_free(x->t[r]);
    outer_free(x->o);
}

/* 1 when the buffers got by `get` are bit-identical on every replica. */
static int all_same(dp *x, float *(*get)(trainer *, int, size_t *))
{
    for (int st = 0; st < 2; st++) {
        size_t n;
        const float *a = get(x->t[0], st, &n);
        for (int r = 1; r < x->k; r++) {
            const float *b = get(x->t[r], st, &n);
            if (memcmp(a, b, n * sizeof *a) != 0)
                return 0;
        }
    }
    return 1;
}

static void replicas_stay_identical(outer_wire wire)
{
    zb_data *d = fixture_data(32);
    sched_t *s = fixture_scrambled_w(2); /* m = 2: B and W in reverse order */
    dp x;
    dp_init(&x, s, d, 3, wire, 2);
    zb_err err = { "" };
    const int steps = 4;
    ck_assert(all_same(&x, trainer_stage_params));
    double first_loss = 0, last_loss = 0;
    for (int step = 0; step < steps; step++) {
        double mean = 0;
        for (int r = 0; r < x.k; r++) {
            double loss;
            ck_assert_msg(trainer_backward(x.t[r], &loss, &err) == 0, "%s", err.msg);
            mean += loss / x.k;
        }
        /* different data streams: different gradients, else the test
         * would prove nothing */
        ck_assert(!all_same(&x, trainer_stage_grads));
        ck_assert_msg(outer_sync_grads(x.o, &err) == 0, "%s", err.msg);
        ck_assert(all_same(&x, trainer_stage_grads));
        for (int r = 0; r < x.k; r++)
            ck_assert_msg(trainer_apply(x.t[r], &err) == 0, "%s", err.msg);
        ck_assert_msg(all_same(&x, trainer_stage_params), "%s: params differ after step %d",
                      outer_wire_name(wire), step);
        ck_assert(all_same(&x, trainer_stage_adam_m));
        ck_assert(all_same(&x, trainer_stage_adam_v));
        for (int r = 1; r < x.k; r++)
            ck_assert(memcmp(&trainer_get_stats(x.t[0])->last_grad_norm,
                             &trainer_get_stats(x.t[r])->last_grad_norm, sizeof(double)) == 0);
        if (step == 0)
            first_loss = mean;
        last_loss = mean;
    }
    ck_assert(isfinite(first_loss) && isfinite(last_loss));
    uint64_t per_step = outer_allreduce_bytes(wire, 3, x.seg_len[0]) +
                        outer_allreduce_bytes(wire, 3, x.seg_len[1]);
    ck_assert_uint_eq(outer_traffic(x.o)->bytes_sent, steps * per_step);
    ck_assert_uint_eq(outer_traffic(x.o)->reductions, 2u * steps);
    dp_free(&x);
    sched_free(s);
    data_free(d);
}

START_TEST(replicas_identical_after_every_step_fp32)
{
    replicas_stay_identical(OUTER_WIRE_FP32);
}
END_TEST

START_TEST(replicas_identical_after_every_step_int8)
{
    replicas_stay_identical(OUTER_WIRE_INT8);
}
END_TEST

START_TEST(fp32_average_equals_concatenated_batch)
{
    enum { K = 2, B = 2, M = 2, T = 32 };
    zb_data *d = fixture_data(T);
    sched_t *s = fixture_scrambled_w(2); /* m = 2: B and W in reverse order */
    dp x;
    dp_init(&x, s, d, K, OUTER_WIRE_FP32, B);
    zb_model big = fixture_model_shaped("sync-dp-test", 2, K * B);
    trainer_opts bo = dp_opts(0, K * B);
    trainer *e = NULL;
    zb_err err = { "" };
    ck_assert_msg(trainer_create(s, &big, d, &bo, &e, &err) == 0, "%s", err.msg);

    /* M micro-batches of K*B windows; replica r gets rows r*B..r*B+B-1 of
     * each, the emulation all of them. */
    size_t row = T, mb_big = (size_t)K * B * T, mb_small = (size_t)B * T;
    int32_t *X = malloc(sizeof *X * mb_big * M), *Y = malloc(sizeof *Y * mb_big * M);
    int32_t *xr = malloc(sizeof *xr * mb_small * M), *yr = malloc(sizeof *yr * mb_small * M);
    zb_rng rng;
    rng_seed(&rng, 77, 3);
    for (int j = 0; j < M; j++)
        data_train_batch(d, &rng, K * B, X + mb_big * j, Y + mb_big * j);
    double mean = 0;
    for (int r = 0; r < K; r++) {
        for (int j = 0; j < M; j++) {
            memcpy(xr + mb_small * j, X + mb_big * j + row * B * r, sizeof *X * mb_small);
            memcpy(yr + mb_small * j, Y + mb_big * j + row * B * r, sizeof *Y * mb_small);
        }
        double loss;
        ck_assert_msg(trainer_backward_on(x.t[r], xr, yr, &loss, &err) == 0, "%s", err.msg);
        mean += loss / K;
    }
    double eloss;
    ck_assert_msg(trainer_backward_on(e, X, Y, &eloss, &err) == 0, "%s", err.msg);
    ck_assert_msg(fabs(mean - eloss) <= 1e-6 * fabs(eloss), "loss %.9g vs %.9g", mean, eloss);

    ck_assert(!all_same(&x, trainer_stage_grads));
    ck_assert_msg(outer_sync_grads(x.o, &err) == 0, "%s", err.msg);
    double max_abs = 0, max_diff = 0;
    size_t differing = 0, total = 0;
    for (int st = 0; st < 2; st++) {
        size_t n;
        const float *a = trainer_stage_grads(x.t[0], st, &n);
        const float *b = trainer_stage_grads(e, st, &n);
        for (size_t i = 0; i < n; i++) {
            max_abs = fmax(max_abs, fabs(b[i]));
            max_diff = fmax(max_diff, fabs((double)a[i] - b[i]));
            differing += a[i] != b[i];
        }
        total += n;
    }
    fprintf(stderr, "note: averaged vs concatenated gradient: max |diff| %.3g, max |g| %.3g, "
                    "%zu of %zu entries differ\n", max_diff, max_abs, differing, total);
    ck_assert(max_abs > 0);
    ck_assert_msg(max_diff <= 1e-6 * max_abs, "max diff %.3g of max %.3g", max_diff, max_abs);

    for (int r = 0; r < K; r++)
        ck_assert_msg(trainer_apply(x.t[r], &err) == 0, "%s", err.msg);
    ck_assert_msg(trainer_apply(e, &err) == 0, "%s", err.msg);
    double na = trainer_get_stats(x.t[0])->last_grad_norm, nb = trainer_get_stats(e)->last_grad_norm;
    ck_assert_msg(fabs(na - nb) <= 1e-5 * nb, "norm %.9g vs %.9g", na, nb);
    ck_assert(all_same(&x, trainer_stage_params));

    free(X);
    free(Y);
    free(xr);
    free(yr);
    trainer_free(e);
    dp_free(&x);
    sched_free(s);
    data_free(d);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("outer_sync_dp");
    TCase *tc = tcase_create("sync");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, replicas_identical_after_every_step_fp32);
    tcase_add_test(tc, replicas_identical_after_every_step_int8);
    tcase_add_test(tc, fp32_average_equals_concatenated_batch);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
