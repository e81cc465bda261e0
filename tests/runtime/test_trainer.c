/*
 * test_trainer.c: the executor's promises, on a 4-layer model, m = 4:
 *
 *   - every schedule (hand-made ones, every handcrafted generator, zb-auto
 *     and the ILP) gives losses, validation loss and parameters
 *     bit-identical to the single-device run, step after step;
 *   - post-validation with a clip threshold that only the full norm
 *     exceeds rolls back and ends bit-identical to the synchronous clip;
 *   - a non-finite gradient skips the step on every stage;
 *   - resuming from a checkpoint gives the uninterrupted run's losses;
 *   - a schedule with more stages than layers, a deadlocking one and an
 *     incomplete one are refused.
 */
#include <check.h>
#include <math.h>
#include <unistd.h>

#include "schedules/gen.h"
#include "solver/solver.h"
#include "src/model.h"
#include "src/validate.h"
#include "tests/common/trainer_fixture.h"

#define M 4
#define STEPS 3

static trainer_opts fixture_opts(void)
{
    trainer_opts o;
    trainer_opts_default(&o);
    o.seed = 1234;
    o.adamw.lr = 3e-3f;
    o.adamw.warmup_steps = 0;
    o.adamw.decay_steps = 100;
    o.adamw.grad_clip = 1.0f;
    o.eval_windows = 4;
    return o;
}

/* Builds a generator schedule, or NULL (and a note) when the generator
 * cannot build this shape in this build. */
static sched_t *generated(const char *kind, int p, int chunks)
{
    gen_params gp;
    gen_params_default(&gp);
    gp.stages = p;
    gp.microbatches = M;
    gp.chunks = chunks;
    double limit[2] = { 2.0 * 2 * p, 2.0 * 2 * p };
    gp.mem_limit = limit;
    gp.time_limit = 5;
    sched_t *s = NULL;
    zb_err err = { { 0 } };
    int rc;
    if (!strcmp(kind, "zb-auto"))
        rc = solver_zb_auto(&gp, &s, &err);
    else if (!strcmp(kind, "ilp"))
        rc = solver_ilp(&gp, &s, &err);
    else
        rc = gen_lookup(kind)(&gp, &s, &err);
    if (rc != 0) {
        fprintf(stderr, "note: %s p=%d v=%d not tested here: %s\n", kind, p, chunks, err.msg);
        return NULL;
    }
    ck_assert_msg(sched_validate(s, &err) == 0, "%s: %s", kind, err.msg);
    return s;
}

START_TEST(every_schedule_matches_single_device)
{
    zb_data *d = fixture_data(fixture_model().seq_len);
    trainer_opts o = fixture_opts();
    sched_t *ref_s = fixture_single(M);
    fixture_run ref = fixture_train(ref_s, d, &o, STEPS);
    sched_free(ref_s);
    /* The loss must move, or equality would prove little. */
    ck_assert(isfinite(ref.loss[0]) && ref.loss[STEPS - 1] < ref.loss[0]);

    struct { const char *kind; int p, chunks; } cases[] = {
        { "gpipe", 2, 1 }, { "1f1b", 2, 1 }, { "interleaved", 2, 2 }, { "zb-h1", 2, 1 },
        { "zb-h2", 2, 1 }, { "zb-v", 2, 2 }, { "zb-auto", 2, 1 }, { "ilp", 2, 1 },
        { "1f1b", 4, 1 }, { "zb-h1", 4, 1 }, { "interleaved-zb", 2, 2 },
    };
    int tested = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sched_t *s = generated(cases[i].kind, cases[i].p, cases[i].chunks);
        if (!s)
            continue;
        fixture_run r = fixture_train(s, d, &o, STEPS);
        char what[64];
        snprintf(what, sizeof what, "%s p=%d S=%d", cases[i].kind, s->n_devices, s->n_stages);
        fixture_assert_same(&ref, &r, what);
        free(r.params);
        sched_free(s);
        tested++;
    }
    ck_assert_int_ge(tested, 6);
    sched_t *s = fixture_scrambled_w(M);
    fixture_run r = fixture_train(s, d, &o, STEPS);
    fixture_assert_same(&ref, &r, "scrambled W order");
    free(r.params);
    sched_free(s);
    free(ref.params);
    data_free(d);
}
END_TEST

/* The same promise on the real `tiny` preset (4 layers, width 64, context
 * 64; vocabulary from the text), for the V-shaped and the ZB-H2 orders. */
START_TEST(tiny_preset_matches_single_device)
{
    zb_model m;
    zb_err err = { { 0 } };
    ck_assert_msg(model_preset("tiny", &m, &err) == 0, "%s", err.msg);
    m.micro_batch = 2;
    zb_data *d = fixture_data(m.seq_len);
    trainer_opts o = fixture_opts();
    const char *kinds[] = { "single", "zb-v", "zb-h2" };
    double first_loss[3][2];
    float *params[3];
    size_t n_params = 0;
    for (int k = 0; k < 3; k++) {
        sched_t *s = k == 0 ? fixture_single(M) : generated(kinds[k], 2, k == 1 ? 2 : 1);
        ck_assert_ptr_nonnull(s);
        trainer *t;
        ck_assert_msg(trainer_create(s, &m, d, &o, &t, &err) == 0, "%s", err.msg);
        for (int i = 0; i < 2; i++)
            ck_assert_int_eq(trainer_step(t, &first_loss[k][i], &err), 0);
        n_params = trainer_param_count(t);
        params[k] = malloc(sizeof(float) * n_params);
        size_t off = 0;
        for (int st = 0; st < trainer_stage_count(t); st++) {
            size_t n;
            const float *p = trainer_stage_params(t, st, &n);
            memcpy(params[k] + off, p, sizeof(float) * n);
            off += n;
        }
        trainer_free(t);
        sched_free(s);
    }
    for (int k = 1; k < 3; k++) {
        ck_assert_mem_eq(first_loss[k], first_loss[0], sizeof first_loss[0]);
        ck_assert_msg(memcmp(params[k], params[0], sizeof(float) * n_params) == 0, "%s differs", kinds[k]);
    }
    for (int k = 0; k < 3; k++)
        free(params[k]);
    data_free(d);
}
END_TEST

START_TEST(post_validation_rollback_equals_synchronous_clip)
{
    zb_data *d = fixture_data(fixture_model().seq_len);
    trainer_opts o = fixture_opts();
    o.adamw.grad_clip = 0; /* measure the first step's norm unclipped */
    sched_t *s = generated("1f1b", 2, 1);
    ck_assert_ptr_nonnull(s);
    zb_model m = fixture_model();
    trainer *t;
    zb_err err;
    double loss;
    ck_assert_int_eq(trainer_create(s, &m, d, &o, &t, &err), 0);
    ck_assert_int_eq(trainer_step(t, &loss, &err), 0);
    double norm = trainer_get_stats(t)->last_grad_norm;
    trainer_free(t);
    ck_assert(norm > 0 && isfinite(norm));

    /* Slightly below the full norm: stage 0's partial norm passes, the
     * full one does not, so stage 0 steps optimistically and must roll
     * back on every step whose norm stays above the threshold. */
    o.adamw.grad_clip = (float)(norm * 0.98);
    o.sync_optimizer = 1;
    fixture_run sync = fixture_train(s, d, &o, STEPS);
    o.sync_optimizer = 0;
    fixture_run post = fixture_train(s, d, &o, STEPS);
    ck_assert_int_eq(sync.rollbacks, 0);
    ck_assert_int_ge(post.rollbacks, 1);
    fixture_assert_same(&sync, &post, "post-validation vs synchronous clip");

    /* A threshold no step reaches: nothing to roll back, same result. */
    o.adamw.grad_clip = (float)(norm * 100);
    fixture_run post2 = fixture_train(s, d, &o, STEPS);
    o.sync_optimizer = 1;
    fixture_run sync2 = fixture_train(s, d, &o, STEPS);
    ck_assert_int_eq(post2.rollbacks, 0);
    fixture_assert_same(&sync2, &post2, "no clipping");
    /* And clipping changed the outcome (the test can fail). */
    ck_assert(memcmp(sync.params, sync2.params, sizeof(float) * sync.n_params) != 0);
    free(sync.params);
    free(post.params);
    free(sync2.params);
    free(post2.params);
    sched_free(s);
    data_free(d);
}
END_TEST

START_TEST(non_finite_gradient_skips_and_restores)
{
    zb_data *d = fixture_data(fixture_model().seq_len);
    trainer_opts o = fixture_opts();
    sched_t *s = generated("1f1b", 2, 1);
    ck_assert_ptr_nonnull(s);
    zb_model m = fixture_model();
    trainer *t;
    zb_err err;
    double loss;
    ck_assert_int_eq(trainer_create(s, &m, d, &o, &t, &err), 0);
    ck_assert_int_eq(trainer_step(t, &loss, &err), 0);
    /* Poison the last stage's final-norm gain: the loss and every
     * gradient become NaN, so no stage may step. */
    size_t n0, n1;
    float *p0 = trainer_stage_params(t, 0, &n0);
    float *p1 = trainer_stage_params(t, 1, &n1);
    const llama_tensor *gf = llama_stage_find(trainer_stage_layout(t, 1), LLAMA_T_FINAL_NORM, -1);
    ck_assert_ptr_nonnull(gf);
    p1[gf->offset] = NAN;
    float *before0 = malloc(sizeof(float) * n0), *before1 = malloc(sizeof(float) * n1);
    memcpy(before0, p0, sizeof(float) * n0);
    memcpy(before1, p1, sizeof(float) * n1);
    ck_assert_int_eq(trainer_step(t, &loss, &err), 0);
    ck_assert(!isfinite(loss));
    ck_assert_int_eq(trainer_get_stats(t)->skipped_steps, 1);
    ck_assert(!isfinite(trainer_get_stats(t)->last_grad_norm));
    ck_assert_mem_eq(before0, p0, sizeof(float) * n0);
    ck_assert_mem_eq(before1, p1, sizeof(float) * n1);
    free(before0);
    free(before1);
    trainer_free(t);
    sched_free(s);
    data_free(d);
}
END_TEST

START_TEST(resume_from_checkpoint_equals_uninterrupted)
{
    zb_data *d = fixture_data(fixture_model().seq_len);
    trainer_opts o = fixture_opts();
    sched_t *s = generated("zb-h1", 2, 1);
    ck_assert_ptr_nonnull(s);
    fixture_run whole = fixture_train(s, d, &o, 4);

    char dir[] = "/tmp/zb_test_resume_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[128];
    snprintf(path, sizeof path, "%s/ckpt.bin", dir);
    zb_model m = fixture_model();
    trainer *t;
    zb_err err;
    double loss[4];
    ck_assert_int_eq(trainer_create(s, &m, d, &o, &t, &err), 0);
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(trainer_step(t, &loss[i], &err), 0);
    ck_assert_msg(trainer_save(t, path, &err) == 0, "%s", err.msg);
    trainer_free(t);

    /* A new trainer with another seed: everything must come from the file. */
    o.seed = 999;
    ck_assert_int_eq(trainer_create(s, &m, d, &o, &t, &err), 0);
    ck_assert_msg(trainer_load(t, path, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(trainer_get_stats(t)->step, 2);
    for (int i = 2; i < 4; i++)
        ck_assert_int_eq(trainer_step(t, &loss[i], &err), 0);
    for (int i = 0; i < 4; i++)
        ck_assert_msg(memcmp(&loss[i], &whole.loss[i], sizeof(double)) == 0,
                      "step %d: %.9g vs %.9g", i, loss[i], whole.loss[i]);
    size_t off = 0;
    for (int st = 0; st < trainer_stage_count(t); st++) {
        size_t n;
        float *p = trainer_stage_params(t, st, &n);
        ck_assert_mem_eq(p, whole.params + off, sizeof(float) * n);
        off += n;
    }

    /* A corrupt checkpoint is refused and leaves the trainer unchanged. */
    FILE *f = fopen(path, "r+b");
    fseek(f, 200, SEEK_SET);
    int c = fgetc(f);
    fseek(f, 200, SEEK_SET);
    fputc(c ^ 1, f);
    fclose(f);
    size_t n;
    float p0 = trainer_stage_params(t, 0, &n)[0];
    ck_assert_int_eq(trainer_load(t, path, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "corrupt"));
    ck_assert_float_eq(trainer_stage_params(t, 0, &n)[0], p0);
    ck_assert_int_eq(trainer_get_stats(t)->step, 4);
    trainer_free(t);

    /* A checkpoint of another split is refused. */
    ck_assert_int_eq(trainer_create(s, &m, d, &o, &t, &err), 0);
    ck_assert_int_eq(trainer_save(t, path, &err), 0);
    trainer_free(t);
    sched_t *one = fixture_single(M);
    ck_assert_int_eq(trainer_create(one, &m, d, &o, &t, &err), 0);
    ck_assert_int_eq(trainer_load(t, path, &err), -1);
    trainer_free(t);
    sched_free(one);

    unlink(path);
    rmdir(dir);
    free(whole.params);
    sched_free(s);
    data_free(d);
}
END_TEST

START_TEST(unfit_or_invalid_schedules_are_errors)
{
    zb_data *d = fixture_data(fixture_model().seq_len);
    trainer_opts o = fixture_opts();
    sched_t *s = generated("interleaved", 4, 2); /* S = 8 > 4 layers */
    ck_assert_ptr_nonnull(s);
    zb_model m = fixture_model();
    trainer *t = NULL;
    zb_err err = { { 0 } };
    ck_assert_int_eq(trainer_create(s, &m, d, &o, &t, &err), -1);
    ck_assert_ptr_null(t);
    ck_assert_ptr_nonnull(strstr(err.msg, "8 virtual stages"));
    sched_free(s);

    /* A deadlocking schedule is refused instead of hanging the workers:
     * stage 0 waits for B0 from stage 1 before it sends F0. */
    s = sched_new(2, 1, 2);
    sched_place_interleaved(s);
    sched_push(s, 0, OP_BW, 0, 0);
    sched_push(s, 0, OP_F, 0, 0);
    sched_push(s, 1, OP_F, 1, 0);
    sched_push(s, 1, OP_BW, 1, 0);
    ck_assert_int_eq(trainer_create(s, &m, d, &o, &t, &err), -1);
    ck_assert_ptr_null(t);
    ck_assert_ptr_nonnull(strstr(err.msg, "schedule: "));
    /* So is an incomplete one. */
    sched_free(s);
    s = sched_new(2, 2, 2);
    sched_place_interleaved(s);
    sched_push(s, 0, OP_F, 0, 0);
    sched_push(s, 1, OP_F, 1, 0);
    sched_push(s, 1, OP_BW, 1, 0);
    sched_push(s, 0, OP_BW, 0, 0);
    ck_assert_int_eq(trainer_create(s, &m, d, &o, &t, &err), -1);
    sched_free(s);
    data_free(d);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("runtime-trainer");
    TCase *tc = tcase_create("all");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, every_schedule_matches_single_device);
    tcase_add_test(tc, tiny_preset_matches_single_device);
    tcase_add_test(tc, post_validation_rollback_equals_synchronous_clip);
    tcase_add_test(tc, non_finite_gradient_skips_and_restores);
    tcase_add_test(tc, resume_from_checkpoint_equals_uninterrupted);
    tcase_add_test(tc, unfit_or_invalid_schedules_are_errors);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
