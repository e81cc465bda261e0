/*
 * test_job_rules.c: the job loop's rules (runtime/job.h) on scripted
 * steps, with no training underneath.
 *
 * Training cannot be steered into a given pattern of skipped steps and
 * losses, so the CLI tests (test_run_inputs.c, test_run_signals.c) see
 * the rules only where a real run happens to go.  Here a fake way of
 * running (a job_way) plays back a script: each step's loss and whether
 * the optimizer skipped it, the step after which a stop request arrives;
 * it records every save.  Each case pins one rule at its edge:
 *
 *   - rule 2 counts skips in a row: skips that alternate with good steps
 *     never fire it, two in a row fire it at the second;
 *   - rule 3: more than half of the invocation's steps skipped fails the
 *     run at its end, exactly half does not;
 *   - rule 1: an infinite loss and a NaN loss each stop the run at their
 *     step, naming which;
 *   - rule 4: the mean of the last JOB_LOSS_WINDOW losses against the
 *     first step's loss (not the second's), firing at the first step
 *     where the mean passes the factor;
 *   - checkpoints are withheld while a skip streak is open, and written
 *     again after a good step;
 *   - a stop request finishes the step, writes its checkpoint and returns
 *     JOB_STOPPED with the signal.
 */
#include <check.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/job.h"

#define MAX_STEPS 64

/* The scripted way's state. */
typedef struct script {
    double loss[MAX_STEPS];           /* each step's training loss */
    int skipped[MAX_STEPS];           /* 1: the optimizer skipped that step */
    long step;                        /* steps taken */
    int n_saves;                      /* save calls */
    long saved_at[MAX_STEPS];         /* the step of each save */
    long stop_after;                  /* raise *stop after this step (0: never) */
    volatile sig_atomic_t *stop;      /* the job's stop flag */
} script;

static int scripted_steps(void *ctx, int n, job_step *out, zb_err *err)
{
    script *sc = ctx;
    for (int i = 0; i < n; i++) {
        ck_assert_msg(sc->step < MAX_STEPS, "the job ran past the script");
        long k = sc->step++;
        out[i] = (job_step){ .loss = sc->loss[k], .grad_norm = NAN, .lr = 1e-3, .seconds = 0.01,
                             .tokens = 1, .skipped = sc->skipped[k], .members = 1,
                             .members_after = 1 };
        if (sc->stop_after && sc->step == sc->stop_after)
            *sc->stop = SIGTERM;
    }
    (void)err;
    return 0;
}

static int scripted_save(void *ctx, const char *dir, zb_err *err)
{
    script *sc = ctx;
    (void)dir;
    (void)err;
    sc->saved_at[sc->n_saves++] = sc->step;
    return 0;
}

static int scripted_eval(void *ctx, double *val, zb_err *err)
{
    (void)ctx;
    (void)err;
    *val = 1.0;
    return 0;
}

static long scripted_count(void *ctx)
{
    return ((script *)ctx)->step;
}

/* A script of n steps at loss 2.0, none skipped. */
static void script_init(script *sc, int n)
{
    memset(sc, 0, sizeof *sc);
    for (int i = 0; i < n; i++)
        sc->loss[i] = 2.0;
}

/* Runs the script for `steps` steps, one step per batch, with the default
 * rules but the thresholds given; returns the outcome and the message. */
static job_status run(script *sc, long steps, long max_skipped, double loss_factor,
                      long checkpoint_every, job_result *res, zb_err *err)
{
    static volatile sig_atomic_t stop;
    stop = 0;
    sc->stop = &stop;
    job_way w = { .ctx = sc, .max_batch = 1, .steps = scripted_steps, .eval = scripted_eval,
                  .save = scripted_save, .step_count = scripted_count };
    job_opts o;
    job_opts_default(&o);
    o.steps = o.stop_at = steps;
    o.max_skipped = max_skipped;
    o.max_loss_factor = loss_factor;
    o.checkpoint_every = checkpoint_every;
    o.ckpt_dir = "ck";
    o.stop = &stop;
    memset(err, 0, sizeof *err);
    return job_run(&w, &o, res, err);
}

START_TEST(streak_counts_skips_in_a_row)
{
    script sc;
    job_result res;
    zb_err err;
    /* skip, good, skip, good, ...: never two in a row, half of the steps */
    script_init(&sc, 10);
    for (int i = 0; i < 10; i += 2)
        sc.skipped[i] = 1;
    ck_assert_int_eq(run(&sc, 10, 2, 0, 0, &res, &err), JOB_DONE);
    ck_assert_int_eq(res.skipped, 5);
    job_result_free(&res);
    /* two in a row fire it at the second */
    script_init(&sc, 10);
    sc.skipped[3] = sc.skipped[4] = 1;
    ck_assert_int_eq(run(&sc, 10, 2, 0, 0, &res, &err), JOB_DIVERGED);
    ck_assert_msg(strstr(err.msg, "step 5: diverged: 2 steps in a row were skipped"), "%s", err.msg);
    ck_assert_int_eq(res.n_losses, 5);
    job_result_free(&res);
}
END_TEST

START_TEST(most_steps_skipped_fails_at_the_end)
{
    script sc;
    job_result res;
    zb_err err;
    /* 3 of 5, never two in a row: rule 2 is quiet, rule 3 fires at the end */
    script_init(&sc, 5);
    sc.skipped[0] = sc.skipped[2] = sc.skipped[4] = 1;
    ck_assert_int_eq(run(&sc, 5, 5, 0, 0, &res, &err), JOB_DIVERGED);
    ck_assert_msg(strstr(err.msg, "step 5: diverged: 3 of the run's 5 steps were skipped"), "%s",
                  err.msg);
    ck_assert_int_eq(sc.n_saves, 0); /* the diverged state is not saved */
    job_result_free(&res);
    /* exactly half (2 of 4) is not "most" */
    script_init(&sc, 4);
    sc.skipped[0] = sc.skipped[2] = 1;
    ck_assert_int_eq(run(&sc, 4, 5, 0, 0, &res, &err), JOB_DONE);
    ck_assert_int_eq(sc.n_saves, 1);
    job_result_free(&res);
}
END_TEST

START_TEST(non_finite_losses_stop_at_their_step)
{
    script sc;
    job_result res;
    zb_err err;
    script_init(&sc, 6);
    sc.loss[2] = INFINITY;
    ck_assert_int_eq(run(&sc, 6, 5, 0, 0, &res, &err), JOB_DIVERGED);
    ck_assert_msg(strstr(err.msg, "step 3: the training loss is infinite"), "%s", err.msg);
    job_result_free(&res);
    script_init(&sc, 6);
    sc.loss[3] = NAN;
    ck_assert_int_eq(run(&sc, 6, 5, 0, 0, &res, &err), JOB_DIVERGED);
    ck_assert_msg(strstr(err.msg, "step 4: the training loss is NaN"), "%s", err.msg);
    job_result_free(&res);
}
END_TEST

START_TEST(loss_rule_measures_from_the_first_step)
{
    script sc;
    job_result res;
    zb_err err;
    /* losses 4, 3, 3, then 9 from step 4 on.  Against the first step's 4
     * (8 at factor 2) the mean of the last five first passes 8 at step 8,
     * (9+9+9+9+9)/5 = 9; at step 7 it is (3+9+9+9+9)/5 = 7.8.  Measured
     * from the second step's 3 (6) it would fire at step 6: (3+3+9+9+9)/5
     * = 6.6. */
    script_init(&sc, 12);
    sc.loss[0] = 4;
    for (int i = 1; i < 12; i++)
        sc.loss[i] = i < 3 ? 3 : 9;
    ck_assert_int_eq(run(&sc, 12, 5, 2.0, 0, &res, &err), JOB_DIVERGED);
    ck_assert_msg(strstr(err.msg, "step 8: diverged: the training loss averaged 9 over the last 5 "
                                  "steps, more than 2 times the 4 of the run's first step"),
                  "%s", err.msg);
    job_result_free(&res);
    /* a loss that stays under the factor never fires it */
    script_init(&sc, 12);
    sc.loss[0] = 4;
    for (int i = 1; i < 12; i++)
        sc.loss[i] = 7.9;
    ck_assert_int_eq(run(&sc, 12, 5, 2.0, 0, &res, &err), JOB_DONE);
    job_result_free(&res);
}
END_TEST

START_TEST(checkpoints_wait_for_the_streak_to_end)
{
    script sc;
    job_result res;
    zb_err err;
    /* a checkpoint due after every step; never more than half skipped,
     * so rule 3 (checked at each) stays quiet */
    script_init(&sc, 8);
    sc.skipped[1] = 1;                 /* a streak of one: step 2 is withheld */
    sc.skipped[4] = sc.skipped[5] = 1; /* steps 5 and 6 too */
    ck_assert_int_eq(run(&sc, 8, 5, 0, 1, &res, &err), JOB_DONE);
    const long want[] = { 1, 3, 4, 7, 8 };
    ck_assert_int_eq(sc.n_saves, 5);
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(sc.saved_at[i], want[i]);
    ck_assert_int_eq(res.checkpoint_step, 8);
    job_result_free(&res);
}
END_TEST

START_TEST(a_stop_checkpoints_its_step)
{
    script sc;
    job_result res;
    zb_err err;
    script_init(&sc, 20);
    sc.stop_after = 3;
    ck_assert_int_eq(run(&sc, 20, 5, 0, 0, &res, &err), JOB_STOPPED);
    ck_assert_int_eq(res.stop_signal, SIGTERM);
    ck_assert_int_eq(res.n_losses, 3);
    ck_assert_int_eq(sc.n_saves, 1);
    ck_assert_int_eq(sc.saved_at[0], 3);
    ck_assert_int_eq(res.checkpoint_step, 3);
    job_result_free(&res);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("job_rules");
    TCase *tc = tcase_create("rules");
    tcase_add_test(tc, streak_counts_skips_in_a_row);
    tcase_add_test(tc, most_steps_skipped_fails_at_the_end);
    tcase_add_test(tc, non_finite_losses_stop_at_their_step);
    tcase_add_test(tc, loss_rule_measures_from_the_first_step);
    tcase_add_test(tc, checkpoints_wait_for_the_streak_to_end);
    tcase_add_test(tc, a_stop_checkpoints_its_step);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
