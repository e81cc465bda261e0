/*
 * test_footprint.c: the runtime's one memory estimate (runtime/footprint.h)
 * is what the trainer holds.
 *
 *   - activations: the estimate's per-device peak after an op equals, to
 *     the byte, the peak the trainer measures (trainer_trace's
 *     device_peak_activation_bytes) for 1F1B, ZB-H1, ZB-V and interleaved
 *     schedules, per-stage recompute levels (full and mlp), memory layers,
 *     a plan's own uneven split, and Vocab-1 / Vocab-2 plans;
 *   - the peak inside B the check also uses is never below it;
 *   - parameters: the estimate's fixed bytes are the CPU backend's static
 *     bytes after a post-validated step (weights, gradients, moments and
 *     stage 0's post-validation copy; a vocabulary plan, which never
 *     speculates, holds less), for the even and the plan's split, and
 *     the memory ledger's parameters, gradients, optimizer and rollback
 *     state are footprint_devices's on every device;
 *   - `run`'s check honours the plan's split: run_estimate_memory of a
 *     split that puts every layer on one stage is not the even split's.
 */
#include <check.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu/llama.h"
#include "runtime/footprint.h"
#include "schedules/gen.h"
#include "src/cli/run_checks.h"
#include "tests/common/trainer_fixture.h"

/* One trainer step of s with record_times; the measured peaks into
 * measured[p] and the backend's static bytes into *static_bytes. */
static void measure(const sched_t *s, const zb_model *m, const int *split, const int *rc,
                    double *measured, double *static_bytes)
{
    zb_data *d = fixture_data(m->seq_len);
    trainer_opts o;
    trainer_opts_default(&o);
    o.record_times = 1;
    o.threads = 1;
    o.layers_per_stage = split;
    o.recompute_stages = rc;
    o.adamw.grad_clip = 0; /* every stage steps optimistically: every snapshot taken */
    trainer *t = NULL;
    zb_err err = { { 0 } };
    ck_assert_msg(trainer_create(s, m, d, &o, &t, &err) == 0, "%s: %s", s->name, err.msg);
    double loss;
    ck_assert_msg(trainer_step(t, &loss, &err) == 0, "%s: %s", s->name, err.msg);
    sched_t *tr = NULL;
    ck_assert_msg(trainer_trace(t, &tr, &err) == 0, "%s", err.msg);
    cJSON *peaks = cJSON_GetObjectItem(cJSON_GetObjectItem(tr->meta, "measured"),
                                       "device_peak_activation_bytes");
    ck_assert_int_eq(cJSON_GetArraySize(peaks), s->n_devices);
    for (int dev = 0; dev < s->n_devices; dev++)
        measured[dev] = cJSON_GetArrayItem(peaks, dev)->valuedouble;
    size_t st = 0, peak = 0;
    ck_assert(trainer_memory(t, &st, &peak, &err) == 0);
    *static_bytes = (double)st;
    /* the ledger's stage buffers, class by class, are footprint_devices's */
    trainer_mem_device md[16];
    ck_assert_msg(trainer_memory_ledger(t, md, &err) == 0, "%s", err.msg);
    for (int dev = 0; dev < s->n_devices; dev++)
        for (int c = MEM_PARAMETERS; c <= MEM_ROLLBACK; c++)
            ck_assert_msg(md[dev].predicted[c] == md[dev].measured[c],
                          "%s, device %d, %s: predicted %.0f, measured %.0f", s->name, dev,
                          mem_class_name((mem_class)c), md[dev].predicted[c],
                          md[dev].measured[c]);
    sched_free(tr);
    trainer_free(t);
    data_free(d);
}

/* The estimate against one measured step, device by device. */
static void agrees(const sched_t *s, const zb_model *m, const int *split, const int *rc)
{
    double measured[16], after[16], in_op[16], fixed;
    int in_flight = 0;
    zb_err err = { { 0 } };
    ck_assert_int_le(s->n_devices, 16);
    measure(s, m, split, rc, measured, &fixed);
    ck_assert_msg(footprint_activation_peaks(s, m, split, rc, after, in_op, &in_flight, &err) == 0,
                  "%s", err.msg);
    for (int dev = 0; dev < s->n_devices; dev++) {
        ck_assert_msg(after[dev] == measured[dev], "%s (%s), device %d: estimate %.0f, measured %.0f",
                      s->name, m->name, dev, after[dev], measured[dev]);
        ck_assert(in_op[dev] >= after[dev]);
    }
    ck_assert_int_ge(in_flight, 1);
    double params, bytes;
    ck_assert(trainer_footprint(m, s->n_stages, split, &params, &bytes, &err) == 0);
    /* vocabulary plans of two or more stages overlap their steps too, so
     * every plan here holds stage 0's copy, as trainer_footprint prices */
    ck_assert_int_ge(s->n_stages, 2);
    ck_assert_msg(bytes == fixed, "%s: fixed bytes %.0f, the backend holds %.0f", s->name, bytes,
                  fixed);
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

START_TEST(activations_match_the_trainer)
{
    zb_model m = fixture_model_shaped("fp-8", 8, 2);
    struct { gen_fn fn; int chunks; } kinds[] = {
        { gen_1f1b, 1 }, { gen_zb_h1, 1 }, { gen_zb_v, 2 }, { gen_interleaved, 2 },
    };
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        sched_t *s = make(kinds[k].fn, 2, 4, kinds[k].chunks);
        agrees(s, &m, NULL, NULL);
        sched_free(s);
    }
}
END_TEST

START_TEST(recompute_levels_and_a_plan_split)
{
    zb_model m = fixture_model_shaped("fp-6", 6, 2);
    sched_t *s = make(gen_zb_h1, 3, 4, 1);
    const int rc[3] = { LLAMA_RC_FULL, LLAMA_RC_MLP, LLAMA_RC_NONE };
    agrees(s, &m, NULL, rc);
    const int split[3] = { 1, 4, 1 };
    agrees(s, &m, split, rc);
    agrees(s, &m, split, NULL);
    sched_free(s);
}
END_TEST

START_TEST(memory_layers)
{
    zb_model m;
    zb_err err = { { 0 } };
    ck_assert_int_eq(model_preset("tiny-mem", &m, &err), 0);
    m.vocab = 65; /* the loader's */
    m.micro_batch = 1;
    sched_t *s = make(gen_1f1b, 2, 2, 1);
    const int rc[2] = { LLAMA_RC_MLP, LLAMA_RC_MLP };
    agrees(s, &m, NULL, NULL);
    agrees(s, &m, NULL, rc);
    sched_free(s);
}
END_TEST

START_TEST(vocabulary_plans)
{
    zb_model m = fixture_model_shaped("fp-4", 4, 2);
    sched_t *base = make(gen_1f1b, 2, 4, 1);
    for (int v = SCHED_VOCAB_1; v <= SCHED_VOCAB_2; v++) {
        sched_vocab sv = { .variant = v, .t_s = 0.5, .t_t = 0.5, .t_c0 = 0.1, .t_c1 = 0.1 };
        sched_t *s = NULL;
        zb_err err = { { 0 } };
        ck_assert_msg(gen_vocab_insert(base, &sv, &s, &err) == 0, "%s", err.msg);
        agrees(s, &m, NULL, NULL);
        sched_free(s);
    }
    sched_free(base);
}
END_TEST

START_TEST(run_check_honours_the_plan_split)
{
    zb_model m = fixture_model_shaped("fp-8", 8, 2);
    sched_t *s = make(gen_1f1b, 2, 4, 1);
    const int lopsided[2] = { 7, 1 };
    run_memory even, plan;
    run_estimate_memory(s, &m, 1000, 1, NULL, NULL, &even);
    run_estimate_memory(s, &m, 1000, 1, lopsided, NULL, &plan);
    ck_assert(even.total > 0 && plan.total > 0);
    /* stage 0 keeps up to p micro-batches of 7 layers instead of 4 */
    ck_assert_msg(plan.activations > even.activations, "plan %.0f, even %.0f", plan.activations,
                  even.activations);
    /* the same parameters, but post-validation copies stage 0's: 7 layers'
     * instead of 4 */
    ck_assert_msg(plan.params > even.params, "plan %.0f, even %.0f", plan.params, even.params);
    sched_free(s);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("footprint");
    TCase *tc = tcase_create("all");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, activations_match_the_trainer);
    tcase_add_test(tc, recompute_levels_and_a_plan_split);
    tcase_add_test(tc, memory_layers);
    tcase_add_test(tc, vocabulary_plans);
    tcase_add_test(tc, run_check_honours_the_plan_split);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
