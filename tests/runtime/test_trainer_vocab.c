/*
 * test_trainer_vocab.c: the trainer on vocabulary-parallel schedules,
 * through the library (runtime/vocab_exec.h): T passes that run out of
 * micro-batch order add their gradients in order (same bits as in order);
 * recompute on the stage whose head moved out and the synchronous clip
 * (and the FIFO transport, two kernel threads per device) give the same
 * bits as post-validation without recompute; a last
 * stage with no layers (final norm only) trains; and the losses stay
 * within 1e-6 of the plain model.
 */
#include <check.h>
#include <math.h>
#include <string.h>

#include "runtime/transport.h"
#include "runtime/transport_factory.h"
#include "tests/common/trainer_fixture.h"

/* Two devices, one stage each, m = 2: both forwards, the S passes, the T
 * passes (device 0 in reverse micro-batch order when reverse_t), then
 * the fused backwards. */
static sched_t *two_device(int variant, int reverse_t)
{
    sched_t *s = sched_new(2, 2, 2);
    s->stage_device[0] = 0;
    s->stage_device[1] = 1;
    sched_set_vocab(s, variant, 0.5, 0.5, 1, -1, 0, 0);
    for (int d = 0; d < 2; d++) {
        for (int j = 0; j < 2; j++)
            sched_push(s, d, OP_F, d, j);
        for (int j = 0; j < 2; j++)
            sched_push(s, d, OP_S, d, j);
        for (int j = 0; j < 2; j++)
            sched_push(s, d, OP_T, d, reverse_t && d == 0 ? 1 - j : j);
    }
    for (int d = 1; d >= 0; d--)
        for (int j = 0; j < 2; j++)
            sched_push(s, d, OP_BW, d, j);
    strcpy(s->name, reverse_t ? "vocab-reversed-t" : "vocab-in-order");
    return s;
}

/* The same pipeline without vocabulary parallelism. */
static sched_t *two_device_plain(void)
{
    sched_t *s = sched_new(2, 2, 2);
    s->stage_device[0] = 0;
    s->stage_device[1] = 1;
    for (int d = 0; d < 2; d++)
        for (int j = 0; j < 2; j++)
            sched_push(s, d, OP_F, d, j);
    for (int d = 1; d >= 0; d--)
        for (int j = 0; j < 2; j++)
            sched_push(s, d, OP_BW, d, j);
    strcpy(s->name, "plain");
    return s;
}

static void assert_close(const fixture_run *a, const fixture_run *b, const char *what)
{
    for (int i = 0; i < a->steps; i++)
        ck_assert_msg(fabs(a->loss[i] - b->loss[i]) <= 1e-6 * fabs(b->loss[i]),
                      "%s: step %d loss %.17g vs %.17g", what, i, a->loss[i], b->loss[i]);
    ck_assert_msg(fabs(a->val_loss - b->val_loss) <= 1e-6 * fabs(b->val_loss),
                  "%s: val loss %.17g vs %.17g", what, a->val_loss, b->val_loss);
}

START_TEST(t_out_of_order_and_recompute)
{
    zb_data *d = fixture_data(32);
    trainer_opts o;
    trainer_opts_default(&o);
    o.threads = 1;
    for (int variant = 1; variant <= 2; variant++) {
        sched_t *in = two_device(variant, 0), *rev = two_device(variant, 1);
        fixture_run a = fixture_train(in, d, &o, 4);
        fixture_run b = fixture_train(rev, d, &o, 4);
        fixture_assert_same(&b, &a, "T out of order");
        static const int rc[2] = { 1, 1 };
        trainer_opts orc = o;
        orc.recompute_stages = rc;
        fixture_run c = fixture_train(in, d, &orc, 4);
        fixture_assert_same(&c, &a, "recompute");
        trainer_opts osync = o;
        osync.sync_optimizer = 1;
        fixture_run e = fixture_train(in, d, &osync, 4);
        fixture_assert_same(&e, &a, "synchronous optimizer");
        free(e.params);
        /* the untagged FIFO transport and two kernel threads per device */
        trainer_opts ofifo = o;
        ofifo.transport = ZB_TRANSPORT_FIFO;
        ofifo.threads = 2;
        fixture_run f = fixture_train(in, d, &ofifo, 4);
        fixture_assert_same(&f, &a, "FIFO transport, 2 threads");
        free(f.params);
        sched_t *pl = two_device_plain();
        fixture_run p = fixture_train(pl, d, &o, 4);
        assert_close(&a, &p, "vocab vs plain");
        /* the parameters too: the head is stored where the plain run keeps it */
        ck_assert_uint_eq(a.n_params, p.n_params);
        double worst = 0;
        for (size_t i = 0; i < a.n_params; i++)
            worst = fmax(worst, fabs((double)a.params[i] - p.params[i]));
        ck_assert_msg(worst < 1e-5, "parameters differ by up to %g", worst);
        free(a.params);
        free(b.params);
        free(c.params);
        free(p.params);
        sched_free(in);
        sched_free(rev);
        sched_free(pl);
    }
    data_free(d);
}
END_TEST

START_TEST(last_stage_without_layers)
{
    zb_data *d = fixture_data(32);
    trainer_opts o;
    trainer_opts_default(&o);
    o.threads = 1;
    static const int split[2] = { 4, 0 };
    o.layers_per_stage = split;
    sched_t *v = two_device(1, 0), *pl = two_device_plain();
    fixture_run a = fixture_train(v, d, &o, 3);
    fixture_run p = fixture_train(pl, d, &o, 3);
    assert_close(&a, &p, "norm-only last stage vs plain");
    free(a.params);
    free(p.params);
    sched_free(v);
    sched_free(pl);
    data_free(d);
}
END_TEST

START_TEST(refuses_pipeline_ranks)
{
    zb_data *d = fixture_data(32);
    trainer_opts o;
    trainer_opts_default(&o);
    o.one_device = 1;
    o.device = 0;
    sched_t *v = two_device(1, 0);
    zb_model m = fixture_model();
    trainer *t = NULL;
    zb_err err = { { 0 } };
    ck_assert_int_ne(trainer_create(v, &m, d, &o, &t, &err), 0);
    ck_assert_ptr_null(t);
    ck_assert_ptr_nonnull(strstr(err.msg, "one process"));
    sched_free(v);
    data_free(d);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("trainer_vocab");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, t_out_of_order_and_recompute);
    tcase_add_test(tc, last_stage_without_layers);
    tcase_add_test(tc, refuses_pipeline_ranks);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed == 0 ? 0 : 1;
}
