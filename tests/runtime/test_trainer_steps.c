/*
 * test_trainer_steps.c: trainer_steps (n steps with no barrier between
 * them, stage 0's next forwards run speculatively before validation) is
 * n calls of trainer_step, bit for bit:
 *
 *   - losses, validation loss, every parameter, the rollback and skip
 *     counters and the step count, for 1F1B, GPipe, ZB-H1, ZB-H2, ZB-V,
 *     interleaved, the scrambled-W order and one device, under three clip
 *     settings: off (speculation always right), nanoGPT's 1.0, and just
 *     below the first step's norm (rollbacks: the speculative forwards
 *     are dropped and redone);
 *   - steps whose gradient is NaN (a poisoned head: stage 0 still steps
 *     optimistically, then every stage rolls back and skips);
 *   - batches of different sizes in a row (3 + 1 + 2) equal 6 single steps;
 *   - the per-step records (loss, lr, skipped, seconds summing to the wall
 *     time), the trace of the batch's last step, and the fallback of the
 *     FIFO transport and the synchronous clip (plain steps);
 *   - that the batch did overlap: trainer_stats counts the steps begun
 *     without a barrier (all but the first of each batch) and the
 *     speculative forwards (one set per step followed by another in its
 *     batch when the clip is off, none redone), some redone under the
 *     clip just below the first norm, and none at all for the plain-step
 *     fallbacks; trainer_steps with its overlap switched off passes the
 *     bit-identity checks and fails these.
 */
#include <check.h>
#include <math.h>
#include <time.h>

#include "kernels/cpu/llama.h"
#include "runtime/transport.h"
#include "runtime/transport_factory.h"
#include "schedules/gen.h"
#include "src/validate.h"
#include "tests/common/trainer_fixture.h"

#define M 4
#define STEPS 6

static trainer_opts steps_opts(float clip)
{
    trainer_opts o;
    trainer_opts_default(&o);
    o.seed = 77;
    o.adamw.lr = 3e-3f;
    o.adamw.warmup_steps = 2;
    o.adamw.decay_steps = 20;
    o.adamw.grad_clip = clip;
    o.eval_windows = 4;
    return o;
}

static sched_t *generated(const char *kind, int p, int chunks)
{
    gen_params gp;
    gen_params_default(&gp);
    gp.stages = p;
    gp.microbatches = M;
    gp.chunks = chunks;
    sched_t *s = NULL;
    zb_err err = { { 0 } };
    ck_assert_msg(gen_lookup(kind)(&gp, &s, &err) == 0, "%s: %s", kind, err.msg);
    ck_assert_msg(sched_validate(s, &err) == 0, "%s: %s", kind, err.msg);
    return s;
}

/* The run's outcome after its steps, in fixture_run form. */
static fixture_run collect(trainer *t, int steps)
{
    fixture_run r;
    memset(&r, 0, sizeof r);
    r.steps = steps;
    zb_err err = { { 0 } };
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
    return r;
}

/* Poisons the last stage's final-norm gain so that every later gradient
 * is NaN (stage 0's partial norm stays finite, so it steps and speculates). */
static void poison(trainer *t)
{
    int last = trainer_stage_count(t) - 1;
    size_t n;
    float *p = trainer_stage_params(t, last, &n);
    const llama_tensor *gf = llama_stage_find(trainer_stage_layout(t, last), LLAMA_T_FINAL_NORM, -1);
    ck_assert_ptr_nonnull(gf);
    p[gf->offset] = NAN;
}

/* STEPS steps of s: single trainer_step calls, or trainer_steps in
 * batches of 3, 1 and 2; with poison_at >= 0 the head is poisoned before
 * that step (a batch boundary). */
static fixture_run train(const sched_t *s, const zb_data *d, const trainer_opts *o, int batched,
                         int poison_at, trainer_stats *stats)
{
    zb_model m = fixture_model();
    trainer *t = NULL;
    zb_err err = { { 0 } };
    ck_assert_msg(trainer_create(s, &m, d, o, &t, &err) == 0, "%s: %s", s->name, err.msg);
    double loss[STEPS];
    static const int sizes[] = { 3, 1, 2 };
    int done = 0;
    for (int b = 0; done < STEPS; b++) {
        int n = batched ? sizes[b] : 1;
        if (done == poison_at)
            poison(t);
        trainer_step_info info[STEPS];
        if (batched) {
            ck_assert_msg(trainer_steps(t, n, info, &err) == 0, "%s: %s", s->name, err.msg);
            for (int i = 0; i < n; i++)
                loss[done + i] = info[i].loss;
        } else {
            ck_assert_msg(trainer_step(t, &loss[done], &err) == 0, "%s: %s", s->name, err.msg);
        }
        done += n;
        ck_assert_int_eq(trainer_get_stats(t)->step, done);
    }
    fixture_run r = collect(t, STEPS);
    memcpy(r.loss, loss, sizeof loss);
    if (stats)
        *stats = *trainer_get_stats(t);
    trainer_free(t);
    return r;
}

/* The first step's global gradient norm (unclipped). */
static double first_norm(const sched_t *s, const zb_data *d)
{
    trainer_opts o = steps_opts(0);
    zb_model m = fixture_model();
    trainer *t;
    zb_err err = { { 0 } };
    double loss;
    ck_assert_int_eq(trainer_create(s, &m, d, &o, &t, &err), 0);
    ck_assert_int_eq(trainer_step(t, &loss, &err), 0);
    double norm = trainer_get_stats(t)->last_grad_norm;
    trainer_free(t);
    return norm;
}

/* kind with vocabulary-parallel passes of `variant` placed into it. */
static sched_t *with_vocab(const char *kind, int p, int chunks, int variant)
{
    sched_t *base = generated(kind, p, chunks), *s = NULL;
    sched_vocab v;
    memset(&v, 0, sizeof v);
    v.variant = variant;
    v.t_s = v.t_t = 0.5;
    v.d_s = 1;
    v.d_t = -1;
    zb_err err = { { 0 } };
    ck_assert_msg(gen_vocab_insert(base, &v, &s, &err) == 0, "%s: %s", kind, err.msg);
    sched_free(base);
    return s;
}

static sched_t *schedule(int k)
{
    switch (k) {
    case 7: return with_vocab("zb-v", 2, 2, SCHED_VOCAB_1); /* the last stage's pass order */
    case 8: return with_vocab("1f1b", 2, 1, SCHED_VOCAB_2);
    case 0: return generated("1f1b", 2, 1);
    case 1: return generated("gpipe", 2, 1);
    case 2: return generated("zb-h1", 2, 1);
    case 3: return generated("zb-h2", 2, 1);
    case 4: return generated("zb-v", 2, 2);
    case 5: return generated("interleaved", 2, 2);
    case 6: return fixture_scrambled_w(M);
    case 9: return fixture_single(M);
    default: abort();
    }
}
#define N_SCHEDULES 10

START_TEST(steps_equal_single_steps)
{
    zb_data *d = fixture_data(fixture_model().seq_len);
    long rollbacks = 0, redone = 0;
    for (int k = 0; k < N_SCHEDULES; k++) {
        sched_t *s = schedule(k);
        double norm = first_norm(s, d);
        ck_assert(norm > 0 && isfinite(norm));
        float clips[3] = { 0, 1.0f, (float)(norm * 0.98) };
        for (int c = 0; c < 3; c++) {
            trainer_opts o = steps_opts(clips[c]);
            trainer_stats sa, sb;
            fixture_run a = train(s, d, &o, 0, -1, &sa);
            fixture_run b = train(s, d, &o, 1, -1, &sb);
            char what[96];
            snprintf(what, sizeof what, "%s p=%d S=%d, clip %g", s->name, s->n_devices, s->n_stages,
                     clips[c]);
            fixture_assert_same(&a, &b, what);
            ck_assert_msg(a.rollbacks == b.rollbacks, "%s: rollbacks %ld vs %ld", what, a.rollbacks,
                          b.rollbacks);
            ck_assert_int_eq(a.skipped, b.skipped);
            /* each step with a rollback counted once, the same in a batch */
            ck_assert_msg(sa.rollback_steps == sb.rollback_steps, "%s: rollback steps %ld vs %ld",
                          what, sa.rollback_steps, sb.rollback_steps);
            ck_assert(sb.rollback_steps <= sb.step && sb.rollback_steps <= sb.rollbacks);
            ck_assert((sb.rollback_steps > 0) == (sb.rollbacks > 0));
            if (c == 0)
                ck_assert_int_eq(sb.rollback_steps, 0);
            /* the batches of 3, 1 and 2 ran without a barrier inside */
            ck_assert_msg(sb.overlapped_steps == 3, "%s: %ld overlapped steps", what,
                          sb.overlapped_steps);
            ck_assert_int_eq(sa.overlapped_steps + sa.spec_forwards + sa.spec_redone, 0);
            if (c == 0) /* nothing clips: stage 0 speculates before each of 3 next steps */
                ck_assert_msg(sb.spec_forwards > 0 && sb.spec_forwards % 3 == 0
                                  && sb.spec_redone == 0,
                              "%s: %ld speculative forwards, %ld redone", what, sb.spec_forwards,
                              sb.spec_redone);
            ck_assert(sb.spec_redone <= sb.spec_forwards);
            if (c == 2 && s->n_stages > 1) {
                rollbacks += b.rollbacks;
                redone += sb.spec_redone;
            }
            free(a.params);
            free(b.params);
        }
        sched_free(s);
    }
    ck_assert_int_ge(rollbacks, N_SCHEDULES - 1); /* stages rolled back */
    ck_assert_msg(redone > 0, "no speculative forward was redone"); /* the redo path ran */
    data_free(d);
}
END_TEST

START_TEST(nan_gradients_skip_in_a_batch)
{
    zb_data *d = fixture_data(fixture_model().seq_len);
    for (int k = 0; k < N_SCHEDULES; k++) {
        sched_t *s = schedule(k);
        trainer_opts o = steps_opts(1.0f);
        fixture_run a = train(s, d, &o, 0, 4, NULL); /* poisoned before the last batch (2 steps) */
        fixture_run b = train(s, d, &o, 1, 4, NULL);
        char what[96];
        snprintf(what, sizeof what, "%s, NaN gradients", s->name);
        ck_assert(isnan(b.loss[STEPS - 1]));
        ck_assert_int_eq(b.skipped, 2);
        ck_assert_int_eq(a.skipped, b.skipped);
        ck_assert_int_eq(a.rollbacks, b.rollbacks);
        for (int i = 0; i < STEPS; i++)
            ck_assert_msg(memcmp(&a.loss[i], &b.loss[i], sizeof(double)) == 0, "%s: step %d", what, i);
        ck_assert_uint_eq(a.n_params, b.n_params);
        ck_assert_msg(memcmp(a.params, b.params, sizeof(float) * a.n_params) == 0, "%s: params", what);
        free(a.params);
        free(b.params);
        sched_free(s);
    }
    data_free(d);
}
END_TEST

START_TEST(records_trace_and_fallbacks)
{
    zb_data *d = fixture_data(fixture_model().seq_len);
    sched_t *s = generated("zb-h2", 2, 1);
    zb_model m = fixture_model();
    zb_err err = { { 0 } };
    for (int variant = 0; variant < 3; variant++) {
        trainer_opts o = steps_opts(1.0f);
        o.record_times = 1;
        if (variant == 1)
            o.transport = ZB_TRANSPORT_FIFO;
        if (variant == 2)
            o.sync_optimizer = 1;
        trainer *t;
        ck_assert_msg(trainer_create(s, &m, d, &o, &t, &err) == 0, "%s", err.msg);
        trainer_step_info info[4];
        ck_assert_int_eq(trainer_steps(t, 0, info, &err), -1);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        ck_assert_msg(trainer_steps(t, 4, info, &err) == 0, "%s", err.msg);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double wall = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
        double sum = 0;
        for (int i = 0; i < 4; i++) {
            ck_assert(isfinite(info[i].loss) && info[i].seconds > 0 && !info[i].skipped);
            ck_assert(info[i].grad_norm > 0);
            ck_assert(fabs(info[i].lr - adamw_lr(&o.adamw, i)) < 1e-12);
            sum += info[i].seconds;
        }
        ck_assert_msg(sum <= wall + 1e-3 && sum > 0.5 * wall, "sum %g wall %g", sum, wall);
        const trainer_stats *st = trainer_get_stats(t);
        ck_assert_int_eq(st->step, 4);
        ck_assert(memcmp(&st->last_loss, &info[3].loss, sizeof(double)) == 0);
        sched_t *tr = NULL;
        ck_assert_msg(trainer_trace(t, &tr, &err) == 0, "%s", err.msg);
        double first = INFINITY;
        for (int dv = 0; dv < tr->n_devices; dv++)
            for (int k = 0; k < tr->dev[dv].n_ops; k++) {
                ck_assert(tr->dev[dv].end[k] >= tr->dev[dv].start[k]);
                first = fmin(first, tr->dev[dv].start[k]);
            }
        if (variant == 0)
            ck_assert(first == 0); /* counted from the last step's first op */
        /* the FIFO and synchronous variants are plain steps: no overlap */
        ck_assert_int_eq(st->overlapped_steps, variant == 0 ? 3 : 0);
        ck_assert_int_eq(st->spec_forwards > 0, variant == 0);
        ck_assert(tr->cost[0].t_f > 0 && tr->cost[1].t_b > 0);
        ck_assert_msg(sched_validate(tr, &err) == 0, "%s", err.msg);
        sched_free(tr);
        trainer_free(t);
    }
    sched_free(s);
    data_free(d);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("trainer_steps");
    TCase *tc = tcase_create("steps");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, steps_equal_single_steps);
    tcase_add_test(tc, nan_gradients_skip_in_a_batch);
    tcase_add_test(tc, records_trace_and_fallbacks);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
