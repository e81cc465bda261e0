/*
 * test_backend.c: the executor goes through the backend interface
 * (runtime/backend.h) for all of its stage work.
 *
 * A wrapper backend forwards every op to the CPU backend and mb_counts it.
 * Two modes:
 *
 *   counting  the wrapper's host mirror is the CPU buffer, as on the CPU:
 *             the op mb_counts must be exactly what the schedule implies (F,
 *             B and W once per stage and micro-batch, one AdamW step and
 *             one norm per stage and step) and the results bit-identical
 *             to the plain CPU backend's, so no stage work bypasses it;
 *   mirrored  the wrapper keeps its own host copies and implements
 *             download / upload and the activation fences, like a GPU
 *             backend: results must still be bit-identical through
 *             steps, evaluation, writes into trainer_stage_params between
 *             steps, a checkpoint saved from the mirrored trainer and
 *             resumed on the plain CPU one, and the backward/apply halves
 *             with replaced gradients.  This is the host-mirror protocol
 *             the CUDA backend relies on, tested without a GPU.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/backend.h"
#include "schedules/gen.h"
#include "tests/common/mirror_backend.h"
#include "tests/common/trainer_fixture.h"

#define M 4
#define STEPS 3

static trainer_opts base_opts(void)
{
    trainer_opts o;
    trainer_opts_default(&o);
    o.seed = 4321;
    o.adamw.lr = 3e-3f;
    o.adamw.warmup_steps = 0;
    o.adamw.decay_steps = 100;
    o.adamw.grad_clip = 1.0f;
    o.eval_windows = 4;
    o.threads = 1;
    return o;
}

static void with_wrapper(trainer_opts *o, int mirrored)
{
    o->make_backend = mb_make_wrapper;
    o->make_backend_ctx = mirrored ? (void *)1 : NULL;
}

START_TEST(counting_backend_sees_every_op)
{
    zb_data *d = fixture_data(fixture_model().seq_len);
    sched_t *s = fixture_scrambled_w(M); /* S = 2, W out of order */
    trainer_opts o = base_opts();
    o.sync_optimizer = 1; /* one norm and one AdamW per stage and step, no rollback */
    fixture_run ref = fixture_train(s, d, &o, STEPS);
    memset(mb_counts, 0, sizeof mb_counts);
    with_wrapper(&o, 0);
    fixture_run got = fixture_train(s, d, &o, STEPS);
    fixture_assert_same(&ref, &got, "counting backend");
    int S = s->n_stages;
    ck_assert_int_eq(mb_counts[MB_C_STAGE], S);
    /* training F plus the evaluation's forwards (eval_windows / batch batches) */
    int B = fixture_model().micro_batch;
    long eval_f = (long)S * ((o.eval_windows + B - 1) / B);
    ck_assert_int_eq(mb_counts[MB_C_FWD], (long)S * M * STEPS + eval_f);
    ck_assert_int_eq(mb_counts[MB_C_B], (long)S * M * STEPS);
    ck_assert_int_eq(mb_counts[MB_C_W], (long)S * M * STEPS);
    ck_assert_int_eq(mb_counts[MB_C_ADAMW], (long)S * STEPS);
    ck_assert_int_eq(mb_counts[MB_C_SUMSQ], (long)S * STEPS);
    ck_assert_int_eq(mb_counts[MB_C_SNAP] + mb_counts[MB_C_RESTORE], 0);
    ck_assert_int_eq(mb_counts[MB_C_DOWN] + mb_counts[MB_C_UP] + mb_counts[MB_C_WAIT] + mb_counts[MB_C_ISSUED], 0);
    free(ref.params);
    free(got.params);
    sched_free(s);
    data_free(d);
}
END_TEST

START_TEST(post_validation_goes_through_the_backend)
{
    zb_data *d = fixture_data(fixture_model().seq_len);
    sched_t *s = fixture_gpipe2();
    trainer_opts o = base_opts();
    /* a clip threshold just under the first step's full norm: stage 0's
     * partial sum stays below it, so stage 0 steps and then rolls back */
    o.adamw.grad_clip = 0;
    zb_model m = fixture_model();
    zb_err err = { { 0 } };
    trainer *t = NULL;
    double loss;
    ck_assert(trainer_create(s, &m, d, &o, &t, &err) == 0);
    ck_assert(trainer_step(t, &loss, &err) == 0);
    o.adamw.grad_clip = (float)(trainer_get_stats(t)->last_grad_norm * 0.98);
    trainer_free(t);
    fixture_run ref = fixture_train(s, d, &o, STEPS);
    memset(mb_counts, 0, sizeof mb_counts);
    with_wrapper(&o, 0);
    fixture_run got = fixture_train(s, d, &o, STEPS);
    fixture_assert_same(&ref, &got, "post-validation through the backend");
    ck_assert_int_eq(got.rollbacks, ref.rollbacks);
    ck_assert_int_gt(got.rollbacks, 0);
    /* a plain step runs no speculative forwards, so every stage waits for
     * the full norm and steps once: the wrong optimistic action is counted
     * but nothing is undone (trainer_ops.c); the one snapshot is the
     * copy trainer_create reserves for stage 0's speculation */
    ck_assert_int_eq(mb_counts[MB_C_RESTORE], 0);
    ck_assert_int_eq(mb_counts[MB_C_SNAP], 1);
    ck_assert_int_eq(mb_counts[MB_C_ADAMW], (long)s->n_stages * STEPS);
    free(ref.params);
    free(got.params);
    sched_free(s);
    data_free(d);
}
END_TEST

START_TEST(mirrored_backend_is_bit_identical)
{
    zb_data *d = fixture_data(fixture_model().seq_len);
    trainer_opts o = base_opts();
    sched_t *cases[2] = { fixture_gpipe2(), fixture_scrambled_w(M) };
    for (int c = 0; c < 2; c++) {
        trainer_opts plain = o;
        fixture_run ref = fixture_train(cases[c], d, &plain, STEPS);
        memset(mb_counts, 0, sizeof mb_counts);
        with_wrapper(&plain, 1);
        fixture_run got = fixture_train(cases[c], d, &plain, STEPS);
        fixture_assert_same(&ref, &got, cases[c]->name);
        /* the initial upload, the final download, fences on every message */
        ck_assert_int_gt(mb_counts[MB_C_UP], 0);
        ck_assert_int_gt(mb_counts[MB_C_DOWN], 0);
        ck_assert_int_gt(mb_counts[MB_C_WAIT], 0);
        ck_assert_int_eq(mb_counts[MB_C_WAIT] > 0, mb_counts[MB_C_ISSUED] > 0);
        free(ref.params);
        free(got.params);
        sched_free(cases[c]);
    }
    data_free(d);
}
END_TEST

/* The vocabulary passes go through the backend interface (backend.h's
 * vocab_* ops), so a backend whose buffers are apart from the host runs
 * vocabulary-parallel schedules too: on the mirrored wrapper, Vocab-1 and
 * Vocab-2 plans of 1F1B train, evaluate and checkpoint the CPU's bits,
 * every S and T pass going through the wrapper. */
START_TEST(mirrored_backend_runs_vocabulary_passes)
{
    zb_data *d = fixture_data(fixture_model().seq_len);
    trainer_opts o = base_opts();
    gen_params gp;
    gen_params_default(&gp);
    gp.stages = 2;
    gp.microbatches = M;
    zb_err err = { { 0 } };
    sched_t *base = NULL;
    ck_assert_msg(gen_1f1b(&gp, &base, &err) == 0, "%s", err.msg);
    for (int variant = SCHED_VOCAB_1; variant <= SCHED_VOCAB_2; variant++) {
        sched_vocab v = { .variant = variant, .t_s = 0.5, .t_t = 0.5, .t_c0 = 0.1, .t_c1 = 0.1 };
        sched_t *s = NULL;
        ck_assert_msg(gen_vocab_insert(base, &v, &s, &err) == 0, "%s", err.msg);
        trainer_opts plain = o;
        fixture_run ref = fixture_train(s, d, &plain, STEPS);
        mb_vocab_passes = 0;
        with_wrapper(&plain, 1);
        fixture_run got = fixture_train(s, d, &plain, STEPS);
        fixture_assert_same(&ref, &got, s->name);
        /* S and T of each device and micro-batch, every step */
        ck_assert_int_eq(mb_vocab_passes, 2L * 2 * M * STEPS);
        free(ref.params);
        free(got.params);
        sched_free(s);
    }
    sched_free(base);
    data_free(d);
}
END_TEST

/* Steps t `steps` times, halving stage 0's params before each step
 * through trainer_stage_params (an outer optimizer's kind of write). */
static void step_with_writes(trainer *t, int steps, double *loss)
{
    zb_err err = { { 0 } };
    for (int i = 0; i < steps; i++) {
        size_t n;
        float *p = trainer_stage_params(t, 0, &n);
        for (size_t k = 0; k < n; k++)
            p[k] *= 0.5f;
        ck_assert_msg(trainer_step(t, &loss[i], &err) == 0, "%s", err.msg);
    }
}

START_TEST(mirrored_host_writes_and_checkpoints)
{
    zb_data *d = fixture_data(fixture_model().seq_len);
    zb_model m = fixture_model();
    sched_t *s = fixture_gpipe2();
    zb_err err = { { 0 } };
    trainer_opts plain = base_opts(), mir = base_opts();
    with_wrapper(&mir, 1);
    trainer *a = NULL, *b = NULL;
    ck_assert(trainer_create(s, &m, d, &plain, &a, &err) == 0);
    ck_assert(trainer_create(s, &m, d, &mir, &b, &err) == 0);
    double la[STEPS], lb[STEPS];
    step_with_writes(a, STEPS, la);
    step_with_writes(b, STEPS, lb);
    for (int i = 0; i < STEPS; i++)
        ck_assert_msg(memcmp(&la[i], &lb[i], sizeof la[i]) == 0, "step %d: %.9g vs %.9g", i,
                      la[i], lb[i]);
    /* a checkpoint of the mirrored trainer resumes on the plain one */
    char path[] = "/tmp/zb_test_backend_XXXXXX";
    int fd = mkstemp(path);
    ck_assert(fd >= 0);
    close(fd);
    ck_assert_msg(trainer_save(b, path, &err) == 0, "%s", err.msg);
    trainer *c = NULL;
    ck_assert(trainer_create(s, &m, d, &plain, &c, &err) == 0);
    ck_assert_msg(trainer_load(c, path, &err) == 0, "%s", err.msg);
    /* and one of the plain trainer into a fresh mirrored one */
    ck_assert_msg(trainer_save(a, path, &err) == 0, "%s", err.msg);
    trainer *e = NULL;
    ck_assert(trainer_create(s, &m, d, &mir, &e, &err) == 0);
    ck_assert_msg(trainer_load(e, path, &err) == 0, "%s", err.msg);
    unlink(path);
    double l1, l2, l3, l4;
    ck_assert(trainer_step(a, &l1, &err) == 0 && trainer_step(b, &l2, &err) == 0);
    ck_assert(trainer_step(c, &l3, &err) == 0 && trainer_step(e, &l4, &err) == 0);
    ck_assert(memcmp(&l1, &l2, sizeof l1) == 0 && memcmp(&l1, &l3, sizeof l1) == 0
              && memcmp(&l1, &l4, sizeof l1) == 0);
    double va, ve;
    ck_assert(trainer_eval(a, &va, &err) == 0 && trainer_eval(e, &ve, &err) == 0);
    ck_assert(memcmp(&va, &ve, sizeof va) == 0);
    /* the two halves with gradients replaced between them (data parallel) */
    double ga, gb;
    ck_assert(trainer_backward(a, &ga, &err) == 0 && trainer_backward(b, &gb, &err) == 0);
    for (int st = 0; st < trainer_stage_count(a); st++) {
        size_t n;
        float *g1 = trainer_stage_grads(a, st, &n), *g2 = trainer_stage_grads(b, st, &n);
        ck_assert(memcmp(g1, g2, sizeof(float) * n) == 0);
        for (size_t k = 0; k < n; k++)
            g1[k] = g2[k] = g1[k] * 0.25f;
    }
    ck_assert(trainer_apply(a, &err) == 0 && trainer_apply(b, &err) == 0);
    for (int st = 0; st < trainer_stage_count(a); st++) {
        size_t n;
        const float *p1 = trainer_stage_params(a, st, &n), *p2 = trainer_stage_params(b, st, &n);
        ck_assert(memcmp(p1, p2, sizeof(float) * n) == 0);
        const float *v1 = trainer_stage_adam_v(a, st, &n), *v2 = trainer_stage_adam_v(b, st, &n);
        ck_assert(memcmp(v1, v2, sizeof(float) * n) == 0);
    }
    size_t sb = 0, pb = 0;
    ck_assert(trainer_memory(b, &sb, &pb, &err) == 0);
    ck_assert_uint_gt(sb, 0);
    ck_assert_str_eq(trainer_backend_name(b), "mirrored");
    ck_assert_str_eq(trainer_backend_name(a), "cpu");
    trainer_free(a);
    trainer_free(b);
    trainer_free(c);
    trainer_free(e);
    sched_free(s);
    data_free(d);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("backend");
    TCase *tc = tcase_create("executor");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, counting_backend_sees_every_op);
    tcase_add_test(tc, post_validation_goes_through_the_backend);
    tcase_add_test(tc, mirrored_backend_is_bit_identical);
    tcase_add_test(tc, mirrored_host_writes_and_checkpoints);
    tcase_add_test(tc, mirrored_backend_runs_vocabulary_passes);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
