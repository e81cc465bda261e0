/*
 * test_mem_ledger.c: the memory ledger (src/mem_ledger.h) and "the plan
 * runs as priced" on the tiny model (docs/cost-model.md, "Buffer
 * classes").
 *
 *   - the ledger itself: live bytes, per-class peaks, the peak of the
 *     total (not the sum of the class peaks), release, reset, and per-device
 *     counters that several threads charge at once without losing a byte;
 *   - the trainer: after a few overlapped steps (so that stage 0 steps
 *     speculatively and post-validation holds its copy), every device's
 *     measured peak (the CPU backend's ledger) is within 2% of the
 *     runtime's prediction (footprint_devices), for 1F1B, ZB-H2, ZB-V and
 *     interleaved with 2 chunks, for per-stage recompute levels (full on
 *     one stage, mlp on another), and for tiny-mem (a memory layer).
 *     The classes are compared one by one too, so an error in one cannot
 *     hide behind another, and each device's saved-state pool must hold
 *     no more than its activation peak (one pool per device, however many
 *     stages it runs);
 *   - vocabulary-parallel plans (1F1B and ZB-V, Vocab-1 and Vocab-2): the
 *     same within 2% in total, and the vocabulary passes' classes
 *     (vocab_cells, comm_buffers, workspace) to the byte where no other
 *     thread's timing decides them: vocab_cells on the last stage's
 *     device (which sums the partials), workspace on every device, and
 *     comm on the others (0).  Two releases come from another worker: on
 *     another device a partial may go back before the walk's latest
 *     release (dx runs on the last stage's worker), so its vocab_cells
 *     lies between the prediction less one partial and the prediction;
 *     the head input X(j) goes back at the last T of j, which may be
 *     another device's after the last stage's own, so the last stage's
 *     comm_buffers lies between the prediction and one X more (it was
 *     the prediction in every run seen).  Between steps exactly the buffers kept for the run are
 *     charged (each shard's columns and dW, every cell's statistics, the
 *     scratch), nothing of a cell or a head input.  One plan runs a T
 *     ahead of micro-batch order (1F1B+Vocab-1 with the last stage's T
 *     of micro-batch 2 moved after that of 3), whose dW waits in a
 *     buffer of its own, which is charged and predicted too.
 */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "kernels/cpu/llama.h"
#include "kernels/cpu/vocab_shard.h"
#include "runtime/trainer.h"
#include "schedules/gen.h"
#include "src/mem_ledger.h"
#include "tests/common/trainer_fixture.h"

START_TEST(ledger_counts_live_and_peak)
{
    mem_ledger *l = mem_ledger_new(2);
    ck_assert_ptr_nonnull(l);
    ck_assert_int_eq(mem_ledger_devices(l), 2);
    mem_ledger_charge(l, 0, MEM_ACTIVATIONS, 100);
    mem_ledger_charge(l, 0, MEM_PARAMETERS, 10);
    mem_ledger_release(l, 0, MEM_ACTIVATIONS, 100);
    mem_ledger_charge(l, 0, MEM_GRADIENTS, 50);
    mem_ledger_charge(l, 1, MEM_OPTIMIZER, 7);
    ck_assert_uint_eq(mem_ledger_live(l, 0, MEM_ACTIVATIONS), 0);
    ck_assert_uint_eq(mem_ledger_peak(l, 0, MEM_ACTIVATIONS), 100);
    ck_assert_uint_eq(mem_ledger_peak(l, 0, MEM_GRADIENTS), 50);
    /* 110 at once, never 160: the total's peak is not the classes' sum */
    ck_assert_uint_eq(mem_ledger_total_peak(l, 0), 110);
    ck_assert_uint_eq(mem_ledger_total_peak(l, 1), 7);
    mem_ledger_reset_peaks(l);
    ck_assert_uint_eq(mem_ledger_peak(l, 0, MEM_ACTIVATIONS), 0);
    ck_assert_uint_eq(mem_ledger_total_peak(l, 0), 60);
    mem_ledger_charge(NULL, 0, MEM_PARAMETERS, 1); /* no ledger: nothing */
    ck_assert_str_eq(mem_class_name(MEM_ROLLBACK), "rollback_state");
    ck_assert_ptr_null(mem_ledger_new(0));
    mem_ledger_free(l);
}
END_TEST

/* One thread's share of ledger_threads: 10,000 charges and releases of
 * its own device, ending with 1,000 bytes of each class held. */
typedef struct charger {
    mem_ledger *l; /* shared */
    int dev;       /* the device it charges */
} charger;

static void *charge_loop(void *p)
{
    charger *c = p;
    for (int i = 0; i < 10000; i++) {
        mem_class k = (mem_class)(i % MEM_CLASSES);
        mem_ledger_charge(c->l, c->dev, k, 3);
        mem_ledger_release(c->l, c->dev, k, 2);
    }
    for (int k = 0; k < MEM_CLASSES; k++)
        mem_ledger_release(c->l, c->dev, (mem_class)k, 250); /* 1,250 each before */
    return NULL;
}

START_TEST(ledger_threads)
{
    enum { DEVS = 4, PER_DEV = 2 };
    mem_ledger *l = mem_ledger_new(DEVS);
    pthread_t th[DEVS * PER_DEV];
    charger c[DEVS * PER_DEV];
    for (int i = 0; i < DEVS * PER_DEV; i++) {
        c[i] = (charger){ l, i % DEVS };
        ck_assert_int_eq(pthread_create(&th[i], NULL, charge_loop, &c[i]), 0);
    }
    for (int i = 0; i < DEVS * PER_DEV; i++)
        pthread_join(th[i], NULL);
    for (int d = 0; d < DEVS; d++)
        for (int k = 0; k < MEM_CLASSES; k++)
            ck_assert_uint_eq(mem_ledger_live(l, d, (mem_class)k), PER_DEV * 1000);
    mem_ledger_free(l);
}
END_TEST

/* The tiny preset at the data's vocabulary. */
static zb_model tiny(const char *name, const zb_data *d)
{
    zb_model m;
    zb_err err = { { 0 } };
    ck_assert_msg(model_preset(name, &m, &err) == 0, "%s", err.msg);
    m.vocab = d->vocab;
    return m;
}

/* Trains s for 3 overlapped steps with a clip no step reaches (so stage 0
 * speculates before each next step), then holds every device's measured
 * peak to its prediction: within 2% in total, and each class exactly; and
 * its saved-state pool to at most pool_over times its activation peak. */
static void runs_as_priced(const sched_t *s, const char *model, const int *rc, double pool_over)
{
    zb_data *d = fixture_data(64);
    zb_model m = tiny(model, d);
    trainer_opts o;
    trainer_opts_default(&o);
    o.threads = 1;
    o.recompute_stages = rc;
    o.adamw.grad_clip = 1e6f;
    trainer *t = NULL;
    zb_err err = { { 0 } };
    ck_assert_msg(trainer_create(s, &m, d, &o, &t, &err) == 0, "%s: %s", s->name, err.msg);
    ck_assert_msg(trainer_steps(t, 3, NULL, &err) == 0, "%s: %s", s->name, err.msg);
    ck_assert_int_gt(trainer_get_stats(t)->spec_forwards, 0);
    trainer_mem_device md[8];
    ck_assert_int_le(s->n_devices, 8);
    ck_assert_msg(trainer_memory_ledger(t, md, &err) == 0, "%s", err.msg);
    for (int dev = 0; dev < s->n_devices; dev++) {
        double ratio = md[dev].measured_total / md[dev].predicted_total;
        ck_assert_msg(fabs(ratio - 1.0) <= 0.02, "%s (%s), device %d: measured %.0f, predicted %.0f",
                      s->name, model, dev, md[dev].measured_total, md[dev].predicted_total);
        for (int c = 0; c < MEM_CLASSES; c++)
            ck_assert_msg(md[dev].measured[c] == md[dev].predicted[c],
                          "%s (%s), device %d, %s: measured %.0f, predicted %.0f", s->name, model,
                          dev, mem_class_name((mem_class)c), md[dev].measured[c],
                          md[dev].predicted[c]);
        ck_assert(md[dev].measured[MEM_ACTIVATIONS] > 0);
        /* the device's one pool holds its busiest moment, also where it
         * runs two stages whose peaks come at different times; more (at
         * most pool_over times) where one buffer size peaks at another
         * moment than the total, as a memory layer's sizes do: the pool
         * reuses a buffer only for its own size */
        ck_assert_msg(md[dev].pool_bytes >= md[dev].measured[MEM_ACTIVATIONS]
                          && md[dev].pool_bytes <= pool_over * md[dev].measured[MEM_ACTIVATIONS],
                      "%s (%s), device %d: the pool holds %.0f, the peak in use is %.0f", s->name,
                      model, dev, md[dev].pool_bytes, md[dev].measured[MEM_ACTIVATIONS]);
    }
    /* post-validation's one copy: stage 0's parameters, on its device only */
    for (int dev = 0; dev < s->n_devices; dev++)
        ck_assert((md[dev].measured[MEM_ROLLBACK] > 0) == (dev == s->stage_device[0]));
    trainer_free(t);
    data_free(d);
}

static sched_t *make(gen_fn fn, int p, int m, int chunks)
{
    gen_params gp;
    gen_params_default(&gp);
    gp.stages = p;
    gp.microbatches = m;
    gp.chunks = chunks;
    sched_t *s = NULL;
    zb_err err = { { 0 } };
    ck_assert_msg(fn(&gp, &s, &err) == 0, "%s", err.msg);
    return s;
}

START_TEST(schedules_run_as_priced)
{
    struct { gen_fn fn; int chunks; } kinds[] = {
        { gen_1f1b, 1 }, { gen_zb_h2, 1 }, { gen_zb_v, 2 }, { gen_interleaved, 2 },
    };
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        sched_t *s = make(kinds[k].fn, 2, 4, kinds[k].chunks);
        runs_as_priced(s, "tiny", NULL, 1.0);
        sched_free(s);
    }
}
END_TEST

START_TEST(recompute_and_memory_layers_run_as_priced)
{
    sched_t *s = make(gen_1f1b, 2, 4, 1);
    const int levels[2] = { LLAMA_RC_FULL, LLAMA_RC_MLP };
    runs_as_priced(s, "tiny", levels, 1.01); /* +1 KB: full recompute's token copies */
    sched_free(s);
    s = make(gen_zb_v, 2, 4, 2);
    runs_as_priced(s, "tiny-mem", NULL, 1.10); /* measured 1.088 on device 1 */
    sched_free(s);
}
END_TEST

/* The bytes backend_cpu_vocab.c keeps charged on device dev between steps
 * for vocabulary plan s of model m, written out here from the buffers'
 * shapes (not asked of footprint.c, whose figures this checks):
 * vocab_cells the shard's columns and their dW ([d, v] each) and the m
 * cells' statistics (16 bytes a row); workspace Vocab-1's local softmax
 * [N, v] and T's lse [N], and on the last stage's device dx's lse [N] and
 * p rows of fp64 rescale weights. */
static void vocab_kept(const sched_t *s, const zb_model *m, int dev, double *cells, double *ws)
{
    double N = (double)m->micro_batch * m->seq_len, p = s->n_devices;
    double v = vshard_begin(dev + 1, s->n_devices, m->vocab) - vshard_begin(dev, s->n_devices, m->vocab);
    *cells = 2 * m->d_model * v * 4 + s->n_micro * N * 16;
    *ws = (s->vocab.variant == SCHED_VOCAB_1 ? N * v * 4 : 0) + N * 4;
    if (dev == s->stage_device[s->n_stages - 1])
        *ws += N * 4 + p * N * 8;
}

/* Trains vocabulary plan s for 3 steps of the tiny model and holds the
 * ledger to the prediction (this file's header says how closely). */
static void vocab_runs_as_priced(const sched_t *s)
{
    zb_data *d = fixture_data(64);
    zb_model m = tiny("tiny", d);
    trainer_opts o;
    trainer_opts_default(&o);
    o.threads = 1;
    trainer *t = NULL;
    zb_err err = { { 0 } };
    ck_assert_msg(trainer_create(s, &m, d, &o, &t, &err) == 0, "%s: %s", s->name, err.msg);
    ck_assert_msg(trainer_steps(t, 3, NULL, &err) == 0, "%s: %s", s->name, err.msg);
    trainer_mem_device md[8];
    ck_assert_int_le(s->n_devices, 8);
    ck_assert_msg(trainer_memory_ledger(t, md, &err) == 0, "%s", err.msg);
    const zb_model *tm = trainer_model(t);
    double partial = (double)tm->micro_batch * tm->seq_len * tm->d_model * 4;
    int last = s->stage_device[s->n_stages - 1];
    for (int dev = 0; dev < s->n_devices; dev++) {
        double ratio = md[dev].measured_total / md[dev].predicted_total;
        ck_assert_msg(fabs(ratio - 1.0) <= 0.02, "%s, device %d: measured %.0f, predicted %.0f",
                      s->name, dev, md[dev].measured_total, md[dev].predicted_total);
        for (int c = 0; c < MEM_CLASSES; c++) {
            double got = md[dev].measured[c], want = md[dev].predicted[c];
            if (c == MEM_VOCAB && dev != last)
                ck_assert_msg(got <= want && got >= want - partial,
                              "%s, device %d, vocab_cells: measured %.0f, predicted %.0f", s->name,
                              dev, got, want);
            else if (c == MEM_COMM && dev == last)
                ck_assert_msg(got >= want && got <= want + partial,
                              "%s, device %d, comm_buffers: measured %.0f, predicted %.0f", s->name,
                              dev, got, want);
            else
                ck_assert_msg(got == want, "%s, device %d, %s: measured %.0f, predicted %.0f",
                              s->name, dev, mem_class_name((mem_class)c), got, want);
        }
        ck_assert(md[dev].measured[MEM_VOCAB] > 0 && md[dev].measured[MEM_WORKSPACE] > 0);
        ck_assert((md[dev].measured[MEM_COMM] > 0) == (dev == last)); /* X: the last stage's */
    }
    /* between steps: what is kept for the run, and nothing else */
    for (int dev = 0; dev < s->n_devices; dev++) {
        double cells, ws;
        vocab_kept(s, tm, dev, &cells, &ws);
        ck_assert_msg(md[dev].live[MEM_VOCAB] == cells
                          && md[dev].live[MEM_WORKSPACE] == ws
                          && md[dev].live[MEM_COMM] == 0,
                      "%s, device %d between steps: vocab_cells %.0f (kept %.0f), workspace "
                      "%.0f (%.0f), comm %.0f", s->name, dev, md[dev].live[MEM_VOCAB],
                      cells, md[dev].live[MEM_WORKSPACE], ws,
                      md[dev].live[MEM_COMM]);
    }
    trainer_free(t);
    data_free(d);
}

START_TEST(vocabulary_plans_run_as_priced)
{
    gen_fn kinds[] = { gen_1f1b, gen_zb_v };
    for (int k = 0; k < 2; k++)
        for (int v = SCHED_VOCAB_1; v <= SCHED_VOCAB_2; v++) {
            sched_t *base = make(kinds[k], 2, 4, k == 1 ? 2 : 1), *s = NULL;
            /* `zbsched gen ... --vocab parallel`'s passes (cmd_gen.c) */
            sched_vocab sv = { .variant = v, .t_s = 0.5, .t_t = 0.5, .d_s = 1 };
            zb_err err = { { 0 } };
            ck_assert_msg(gen_vocab_insert(base, &sv, &s, &err) == 0, "%s", err.msg);
            vocab_runs_as_priced(s);
            if (k == 0 && v == SCHED_VOCAB_1) {
                /* the last stage's device (where every class must match
                 * to the byte) runs T of micro-batch 2 last, after T of
                 * 3, whose dW waits in a buffer of its own until its turn
                 * (the generated plans never run a T ahead; Vocab-1's dX
                 * needs no T, so B of 2 does not wait for it) */
                sched_lane *l = &s->dev[s->stage_device[s->n_stages - 1]];
                int t2 = -1;
                for (int i = 0; i < l->n_ops; i++)
                    t2 = l->ops[i].kind == OP_T && l->ops[i].mb == 2 ? i : t2;
                ck_assert(t2 >= 0 && l->ops[l->n_ops - 1].kind == OP_T
                          && l->ops[l->n_ops - 1].mb == 3);
                sched_op o = l->ops[t2];
                memmove(&l->ops[t2], &l->ops[t2 + 1], sizeof o * (size_t)(l->n_ops - 1 - t2));
                l->ops[l->n_ops - 1] = o;
                vocab_runs_as_priced(s);
            }
            sched_free(s);
            sched_free(base);
        }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("mem_ledger");
    TCase *tc = tcase_create("all");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, ledger_counts_live_and_peak);
    tcase_add_test(tc, ledger_threads);
    tcase_add_test(tc, schedules_run_as_priced);
    tcase_add_test(tc, recompute_and_memory_layers_run_as_priced);
    tcase_add_test(tc, vocabulary_plans_run_as_priced);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
