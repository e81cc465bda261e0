/*
 * test_trainer_threads.c: --threads does not change a single bit.
 *
 * The executor gives each device a team of kernel threads (kernels/cpu/
 * team.h) that shares out GEMM row blocks and attention sequences.  On a
 * model wide enough that the GEMMs are really split (d = 128, 512 tokens
 * per micro-batch: two row blocks; 8 sequences), the single-device run
 * with 1 and with 3 threads and a 2-device 1F1B run with 2 threads per
 * device must give bit-identical losses, validation loss and parameters;
 * and the persistent workers must
 * survive a failed step (the trainer keeps working after an error).
 */
#include <check.h>
#include <string.h>

#include "schedules/gen.h"
#include "tests/common/trainer_fixture.h"

#define M 4
#define STEPS 2

/* 4 layers of width 128, context 64, 8 sequences per micro-batch. */
static zb_model wide_model(void)
{
    zb_model m = fixture_model_shaped("test-wide", 4, 8);
    m.d_model = 128;
    m.d_ff = 256;
    m.seq_len = 64;
    return m;
}

/* Trains STEPS steps of s with `threads` kernel threads per device. */
static fixture_run train(const sched_t *s, const zb_data *d, int threads)
{
    trainer_opts o;
    trainer_opts_default(&o);
    o.seed = 99;
    o.adamw.lr = 3e-3f;
    o.adamw.warmup_steps = 0;
    o.eval_windows = 4;
    o.threads = threads;
    zb_model m = wide_model();
    trainer *t = NULL;
    zb_err err = { { 0 } };
    ck_assert_msg(trainer_create(s, &m, d, &o, &t, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(trainer_threads(t), threads);
    fixture_run r;
    memset(&r, 0, sizeof r);
    r.steps = STEPS;
    for (int i = 0; i < STEPS; i++)
        ck_assert_msg(trainer_step(t, &r.loss[i], &err) == 0, "%s", err.msg);
    ck_assert_msg(trainer_eval(t, &r.val_loss, &err) == 0, "%s", err.msg);
    r.n_params = trainer_param_count(t);
    r.params = malloc(sizeof(float) * r.n_params);
    size_t off = 0;
    for (int st = 0; st < trainer_stage_count(t); st++) {
        size_t n;
        float *p = trainer_stage_params(t, st, &n);
        memcpy(r.params + off, p, sizeof(float) * n);
        off += n;
    }
    trainer_free(t);
    return r;
}

START_TEST(threads_do_not_change_results)
{
    zb_data *d = fixture_data(64);
    sched_t *single = fixture_single(M);
    gen_params gp;
    gen_params_default(&gp);
    gp.stages = 2;
    gp.microbatches = M;
    sched_t *pipe = NULL;
    zb_err err = { { 0 } };
    ck_assert_msg(gen_lookup("1f1b")(&gp, &pipe, &err) == 0, "%s", err.msg);
    fixture_run ref = train(single, d, 1);
    fixture_run r = train(single, d, 3);
    fixture_assert_same(&ref, &r, "single device, 3 threads");
    free(r.params);
    r = train(pipe, d, 2);
    fixture_assert_same(&ref, &r, "1f1b p=2, 2 threads per device");
    free(r.params);
    free(ref.params);
    sched_free(pipe);
    sched_free(single);
    data_free(d);
}
END_TEST

START_TEST(workers_survive_a_failed_step)
{
    zb_data *d = fixture_data(64);
    sched_t *s = fixture_gpipe2();
    strcpy(s->name, "gpipe2");
    trainer_opts o;
    trainer_opts_default(&o);
    o.threads = 2;
    o.eval_windows = 2;
    zb_model m = wide_model();
    trainer *t = NULL;
    zb_err err = { { 0 } };
    ck_assert_msg(trainer_create(s, &m, d, &o, &t, &err) == 0, "%s", err.msg);
    double loss;
    ck_assert_int_eq(trainer_step(t, &loss, &err), 0);
    /* a token out of the vocabulary fails F of stage 0 on its worker */
    size_t tok = (size_t)8 * 64 * 2;
    int32_t *x = calloc(tok, sizeof *x), *y = calloc(tok, sizeof *y);
    x[3] = 100000;
    ck_assert_int_eq(trainer_backward_on(t, x, y, &loss, &err), -1);
    ck_assert_msg(strstr(err.msg, "device 0") != NULL, "%s", err.msg);
    /* the same workers go on */
    for (int i = 0; i < 2; i++)
        ck_assert_msg(trainer_step(t, &loss, &err) == 0, "%s", err.msg);
    ck_assert(loss > 0 && loss < 10);
    free(x);
    free(y);
    trainer_free(t);
    sched_free(s);
    data_free(d);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("trainer_threads");
    TCase *tc = tcase_create("threads");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, threads_do_not_change_results);
    tcase_add_test(tc, workers_survive_a_failed_step);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
