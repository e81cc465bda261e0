/*
 * test_islands.c: K pipeline-trainer replicas under the outer optimizers,
 * end to end on tinyshakespeare with a narrow model: outer steps happen
 * every H inner steps, bytes match the ring formula, int8 sends about a
 * quarter, runs are deterministic, the sync baseline counts a gradient
 * all-reduce per step (K real replicas; K = 1 is a plain trainer bit for
 * bit), a replica leaving and one joining mid-run leave a
 * working model, training lowers the loss, and a diverged run stops at
 * the step where it diverged, naming the replica.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/outer/islands.h"
#include "tests/common/trainer_fixture.h"

typedef struct fixture {
    zb_model m;
    zb_data *d;
    sched_t *s;
    trainer_opts topts;
} fixture;

static void fixture_init(fixture *f)
{
    f->m = fixture_model_shaped("outer-test", 2, 2);
    f->d = fixture_data(f->m.seq_len);
    f->s = fixture_gpipe2();
    trainer_opts_default(&f->topts);
    f->topts.seed = 5;
    f->topts.eval_windows = 4;
    f->topts.adamw.lr = 3e-3f;
    f->topts.adamw.warmup_steps = 2;
    f->topts.adamw.decay_steps = 100;
}

static void fixture_free(fixture *f)
{
    sched_free(f->s);
    data_free(f->d);
}

static int run(fixture *f, outer_kind kind, outer_wire wire, int k, long steps, int h,
               const islands_event *ev, int n_ev, islands_result *res)
{
    islands_opts io;
    islands_opts_default(&io);
    io.replicas = k;
    io.steps = steps;
    outer_config_default(&io.outer, kind);
    io.outer.wire = wire;
    io.outer.inner_steps = h;
    io.outer.edit_warmup = 2;
    io.events = ev;
    io.n_events = n_ev;
    zb_err err = { "" };
    int rc = islands_run(f->s, &f->m, f->d, &f->topts, &io, res, &err);
    ck_assert_msg(rc == 0, "%s", err.msg);
    return rc;
}

/* Bytes of one all-reduce of every parameter segment of the model (the
 * segments are the layer groups: embedding, layer 0, layer 1, final norm
 * + head). */
static uint64_t model_allreduce_bytes(const fixture *f, outer_wire wire, int k)
{
    size_t d = (size_t)f->m.d_model, ff = (size_t)f->m.d_ff, v = (size_t)f->d->vocab;
    size_t kv = d / (size_t)f->m.n_heads * (size_t)f->m.n_kv_heads;
    size_t layer = d + d * d + 2 * d * kv + d * d + d + 3 * d * ff;
    return outer_allreduce_bytes(wire, k, v * d) + 2 * outer_allreduce_bytes(wire, k, layer) +
           outer_allreduce_bytes(wire, k, d + d * v);
}

START_TEST(diloco_syncs_every_h_and_counts_bytes)
{
    fixture f;
    fixture_init(&f);
    islands_result a, b, q;
    run(&f, OUTER_DILOCO, OUTER_WIRE_FP32, 3, 6, 2, NULL, 0, &a);
    ck_assert_int_eq(a.outer_steps, 3);
    ck_assert_int_eq(a.final_replicas, 3);
    ck_assert_uint_eq(a.bytes_sent, 3 * model_allreduce_bytes(&f, OUTER_WIRE_FP32, 3));
    ck_assert(isfinite(a.final_val_loss));
    for (long i = 0; i < a.steps; i++)
        ck_assert(isfinite(a.loss[i]));
    /* deterministic */
    run(&f, OUTER_DILOCO, OUTER_WIRE_FP32, 3, 6, 2, NULL, 0, &b);
    ck_assert(memcmp(a.loss, b.loss, 6 * sizeof(double)) == 0);
    ck_assert(a.final_val_loss == b.final_val_loss);
    /* int8: fewer bytes (a quarter of the payload, but this model's chunks
     * are only ~10^3 floats, so the 1 KiB tables weigh), similar result */
    run(&f, OUTER_DILOCO, OUTER_WIRE_INT8, 3, 6, 2, NULL, 0, &q);
    ck_assert_uint_eq(q.bytes_sent, 3 * model_allreduce_bytes(&f, OUTER_WIRE_INT8, 3));
    ck_assert(q.bytes_sent * 2 < a.bytes_sent);
    ck_assert_msg(fabs(q.final_val_loss - a.final_val_loss) < 0.05, "int8 %g fp32 %g",
                  q.final_val_loss, a.final_val_loss);
    /* a final outer step is taken for pending inner steps: 7 = 3*2 + 1 */
    islands_result c;
    run(&f, OUTER_DILOCO, OUTER_WIRE_FP32, 2, 7, 2, NULL, 0, &c);
    ck_assert_int_eq(c.outer_steps, 4);
    islands_result_free(&a);
    islands_result_free(&b);
    islands_result_free(&q);
    islands_result_free(&c);
    fixture_free(&f);
}
END_TEST

START_TEST(training_lowers_the_loss)
{
    fixture f;
    fixture_init(&f);
    islands_result r, e;
    run(&f, OUTER_DILOCO, OUTER_WIRE_INT8, 2, 24, 4, NULL, 0, &r);
    double first = (r.loss[0] + r.loss[1]) / 2, last = (r.loss[22] + r.loss[23]) / 2;
    ck_assert_msg(last < first - 0.3, "loss %g -> %g", first, last);
    ck_assert_msg(r.final_val_loss < log(65.0) - 0.3, "val %g", r.final_val_loss);
    run(&f, OUTER_EDIT, OUTER_WIRE_FP32, 2, 24, 4, NULL, 0, &e);
    ck_assert_msg(e.final_val_loss < log(65.0) - 0.3, "edit val %g", e.final_val_loss);
    ck_assert_int_eq(e.outer_steps, 6);
    islands_result_free(&r);
    islands_result_free(&e);
    fixture_free(&f);
}
END_TEST

START_TEST(sync_baseline_counts_gradient_allreduce)
{
    fixture f;
    fixture_init(&f);
    islands_result r;
    run(&f, OUTER_SYNC, OUTER_WIRE_FP32, 2, 4, 1, NULL, 0, &r);
    ck_assert_uint_eq(r.bytes_sent, 4 * model_allreduce_bytes(&f, OUTER_WIRE_FP32, 2));
    ck_assert_int_eq(r.outer_steps, 0);
    /* K replicas' worth of tokens per step */
    ck_assert_int_eq(r.tokens, 4L * 2 * 2 * 2 * f.m.seq_len);
    ck_assert(isfinite(r.final_val_loss));
    islands_result_free(&r);
    fixture_free(&f);
}
END_TEST

/* The sync mode runs K real trainers: with int8 the bytes are the int8
 * ring formula per step; with K = 1 it is a plain trainer, bit for bit
 * (an all-reduce over one replica divides by 1 and sends nothing). */
START_TEST(sync_runs_real_replicas)
{
    fixture f;
    fixture_init(&f);
    islands_result r;
    run(&f, OUTER_SYNC, OUTER_WIRE_INT8, 3, 3, 1, NULL, 0, &r);
    ck_assert_uint_eq(r.bytes_sent, 3 * model_allreduce_bytes(&f, OUTER_WIRE_INT8, 3));
    ck_assert_int_eq(r.tokens, 3L * 3 * 2 * 2 * f.m.seq_len);
    ck_assert_int_eq(r.final_replicas, 3);
    for (long i = 0; i < r.steps; i++)
        ck_assert(isfinite(r.loss[i]));
    ck_assert(isfinite(r.final_val_loss));
    islands_result_free(&r);

    islands_result one;
    run(&f, OUTER_SYNC, OUTER_WIRE_FP32, 1, 3, 1, NULL, 0, &one);
    ck_assert_uint_eq(one.bytes_sent, 0);
    trainer *t = NULL;
    zb_err err = { "" };
    ck_assert_msg(trainer_create(f.s, &f.m, f.d, &f.topts, &t, &err) == 0, "%s", err.msg);
    for (long i = 0; i < 3; i++) {
        double loss;
        ck_assert_msg(trainer_step(t, &loss, &err) == 0, "%s", err.msg);
        ck_assert_msg(memcmp(&loss, &one.loss[i], sizeof loss) == 0, "step %ld: %.9g vs %.9g",
                      i, loss, one.loss[i]);
    }
    double val;
    ck_assert_msg(trainer_eval(t, &val, &err) == 0, "%s", err.msg);
    ck_assert(memcmp(&val, &one.final_val_loss, sizeof val) == 0);
    trainer_free(t);
    islands_result_free(&one);
    fixture_free(&f);
}
END_TEST

START_TEST(elastic_replica_leaves_and_joins)
{
    fixture f;
    fixture_init(&f);
    const islands_event ev[2] = {
        { 3, ISLANDS_LEAVE, 1 }, /* replica 1 leaves mid-round */
        { 5, ISLANDS_JOIN, 0 },  /* a new replica joins after step 4's sync */
    };
    islands_result r;
    run(&f, OUTER_DILOCO, OUTER_WIRE_FP32, 3, 8, 2, ev, 2, &r);
    ck_assert_int_eq(r.final_replicas, 3);
    ck_assert_int_eq(r.outer_steps, 4);
    for (long i = 0; i < r.steps; i++)
        ck_assert(isfinite(r.loss[i]));
    ck_assert(isfinite(r.final_val_loss));
    /* tokens: steps 0-2 x3, 3-4 x2, 5 x2 (joiner waits), 6-7 x3 */
    long per = 2L * 2 * f.m.seq_len;
    ck_assert_int_eq(r.tokens, per * (3 * 3 + 2 * 2 + 2 + 2 * 3));
    islands_result_free(&r);

    /* an event naming an absent replica is an error, not a crash */
    const islands_event bad[1] = { { 1, ISLANDS_LEAVE, 7 } };
    islands_opts io;
    islands_opts_default(&io);
    io.replicas = 2;
    io.steps = 3;
    io.events = bad;
    io.n_events = 1;
    zb_err err = { "" };
    ck_assert_int_eq(islands_run(f.s, &f.m, f.d, &f.topts, &io, &r, &err), -1);
    ck_assert_msg(strstr(err.msg, "no replica 7") != NULL, "%s", err.msg);
    fixture_free(&f);
}
END_TEST

/* A huge learning rate: every outer optimizer stops at the first step
 * whose loss is not finite, long before the (absurdly many) steps asked
 * for, and names the step and the replica; a run that went on to the end
 * would time the test out.  (The skipped-steps rule is tested through
 * the CLI, tests/runtime/test_run_inputs.c: this narrow model goes
 * straight to a NaN loss.) */
START_TEST(diverged_run_stops_at_once)
{
    fixture f;
    fixture_init(&f);
    f.topts.adamw.lr = 1e30f;
    const outer_kind kinds[] = { OUTER_DILOCO, OUTER_AEDIT, OUTER_SYNC };
    for (int i = 0; i < 3; i++) {
        islands_opts io;
        islands_opts_default(&io);
        io.replicas = 2;
        io.steps = 1000000;
        outer_config_default(&io.outer, kinds[i]);
        io.max_skipped = 5;
        islands_result r;
        zb_err err = { "" };
        ck_assert_int_eq(islands_run(f.s, &f.m, f.d, &f.topts, &io, &r, &err), -1);
        ck_assert_msg(strncmp(err.msg, "step ", 5) == 0 &&
                      strstr(err.msg, ": replica 0: the training loss is NaN (diverged") != NULL,
                      "%s", err.msg);
        ck_assert_ptr_null(strchr(err.msg, '\n'));
        ck_assert_ptr_null(r.loss); /* freed on failure */
    }
    fixture_free(&f);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("outer_islands");
    TCase *tc = tcase_create("islands");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, diloco_syncs_every_h_and_counts_bytes);
    tcase_add_test(tc, training_lowers_the_loss);
    tcase_add_test(tc, sync_baseline_counts_gradient_allreduce);
    tcase_add_test(tc, sync_runs_real_replicas);
    tcase_add_test(tc, elastic_replica_leaves_and_joins);
    tcase_add_test(tc, diverged_run_stops_at_once);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
