/*
 * test_outer_step.c: DiLoCo's Nesterov outer step against values computed
 * by hand, bit-identical replicas after every outer step (fp32 and int8),
 * EDiT's weights, clipping and anomaly elimination, A-EDiT's clock-driven
 * sync with step weighting (fake clock), elastic leave/join, and the sync
 * baseline's gradient averaging.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/outer/outer.h"
#include "runtime/outer/outer_edit.h"

#define TOL 1e-6

/* A replica with one or two segments of its own memory. */
typedef struct fake_replica {
    float seg0[3];
    float seg1[2];
    float grad0[3];
    float grad1[2];
    float *params[2];
    float *grads[2];
} fake_replica;

static void fake_init(fake_replica *r)
{
    memset(r, 0, sizeof *r);
    r->params[0] = r->seg0;
    r->params[1] = r->seg1;
    r->grads[0] = r->grad0;
    r->grads[1] = r->grad1;
}

static outer_t *make_outer(outer_kind kind, outer_wire wire, int n_seg)
{
    outer_config c;
    outer_config_default(&c, kind);
    c.wire = wire;
    c.inner_steps = 2;
    const size_t lens[2] = { 3, 2 };
    outer_t *o = NULL;
    zb_err err = { "" };
    ck_assert_msg(outer_new(&c, n_seg, lens, &o, &err) == 0, "%s", err.msg);
    return o;
}

START_TEST(nesterov_by_hand)
{
    float x[2] = { 1, -1 }, m[2] = { 0, 0 }, d[2] = { 0.5f, 0.25f };
    outer_nesterov(x, m, d, 2, 0.7f, 0.9f);
    /* m = d; x -= 0.7 * (d + 0.9 d) = 1.33 d */
    ck_assert_double_eq_tol(m[0], 0.5, TOL);
    ck_assert_double_eq_tol(x[0], 1 - 1.33 * 0.5, TOL);
    ck_assert_double_eq_tol(x[1], -1 - 1.33 * 0.25, TOL);
    outer_nesterov(x, m, d, 2, 0.7f, 0.9f);
    /* m = 0.9*0.5 + 0.5 = 0.95; x -= 0.7*(0.5 + 0.9*0.95) = 0.9485 */
    ck_assert_double_eq_tol(m[0], 0.95, TOL);
    ck_assert_double_eq_tol(x[0], 1 - 0.665 - 0.9485, TOL);
}
END_TEST

/* Two replicas, one segment of 3, start [1,2,3].
 * step 1: p0 = [0.5,2,3.5], p1 = [0.9,1,3] -> Delta = [0.3,0.5,-0.25],
 *         global = start - 1.33 Delta = [0.601, 1.335, 3.3325]
 * step 2: both move by -[0.1,0,0] -> Delta = [0.1,0,0],
 *         mom = 0.9*[0.3,0.5,-0.25] + Delta = [0.37,0.45,-0.225],
 *         global -= 0.7*(Delta + 0.9 mom) = [0.2979, 1.0515, 3.47425] */
START_TEST(diloco_by_hand)
{
    outer_t *o = make_outer(OUTER_DILOCO, OUTER_WIRE_FP32, 1);
    fake_replica r[2];
    zb_err err = { "" };
    for (int i = 0; i < 2; i++) {
        fake_init(&r[i]);
        r[i].seg0[0] = 1; r[i].seg0[1] = 2; r[i].seg0[2] = 3;
        if (i == 1)
            r[i].seg0[0] = 42; /* overwritten with replica 0's start */
        ck_assert_int_eq(outer_add_replica(o, r[i].params, NULL, &err), i);
    }
    ck_assert(r[1].seg0[0] == 1.0f);
    ck_assert(!outer_should_sync(o));
    const float p0[3] = { 0.5f, 2, 3.5f }, p1[3] = { 0.9f, 1, 3 };
    memcpy(r[0].seg0, p0, sizeof p0);
    memcpy(r[1].seg0, p1, sizeof p1);
    for (int t = 0; t < 2; t++) {
        outer_note_step(o, 0);
        outer_note_step(o, 1);
    }
    ck_assert(outer_should_sync(o));
    outer_step_info info;
    ck_assert_msg(outer_step(o, &info, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(info.contributors, 2);
    const double want1[3] = { 0.601, 1.335, 3.3325 };
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            ck_assert_double_eq_tol(r[i].seg0[j], want1[j], TOL);
    ck_assert(!outer_should_sync(o));
    for (int i = 0; i < 2; i++)
        r[i].seg0[0] -= 0.1f;
    ck_assert(outer_step(o, &info, &err) == 0);
    const double want2[3] = { 0.2979, 1.0515, 3.47425 };
    const double mom2[3] = { 0.37, 0.45, -0.225 };
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++) {
            ck_assert_double_eq_tol(r[i].seg0[j], want2[j], 1e-5);
            ck_assert_double_eq_tol(outer_momentum(o, i, 0)[j], mom2[j], 1e-5);
        }
    ck_assert_int_eq(outer_step_count(o), 2);
    /* 2 ring all-reduces of 3 floats over K=2: 2*(2-1)*3*4 bytes each */
    ck_assert_uint_eq(outer_traffic(o)->bytes_sent, 2 * 24);
    outer_free(o);
}
END_TEST

/* Random drift on K replicas for several outer steps; after each, every
 * replica's params, global and momentum must be bit-identical. */
static void run_identical(outer_kind kind, outer_wire wire)
{
    enum { K = 4 };
    outer_t *o = make_outer(kind, wire, 2);
    fake_replica r[K];
    zb_err err = { "" };
    unsigned seed = 1;
    for (int i = 0; i < K; i++) {
        fake_init(&r[i]);
        for (int j = 0; j < 3; j++) r[i].seg0[j] = (float)j;
        ck_assert(outer_add_replica(o, r[i].params, NULL, &err) >= 0);
    }
    for (int step = 0; step < 6; step++) {
        for (int i = 0; i < K; i++) {
            for (int j = 0; j < 3; j++) r[i].seg0[j] += (float)(rand_r(&seed) % 1000) / 1000.0f - 0.5f;
            for (int j = 0; j < 2; j++) r[i].seg1[j] += (float)(rand_r(&seed) % 1000) / 3000.0f;
            outer_note_step(o, i);
        }
        outer_step_info info;
        ck_assert_msg(outer_step(o, &info, &err) == 0, "%s", err.msg);
        for (int i = 1; i < K; i++) {
            ck_assert(memcmp(r[i].seg0, r[0].seg0, sizeof r[0].seg0) == 0);
            ck_assert(memcmp(r[i].seg1, r[0].seg1, sizeof r[0].seg1) == 0);
            for (int s = 0; s < 2; s++) {
                size_t len = s ? 2 : 3;
                ck_assert(memcmp(outer_global(o, i, s), outer_global(o, 0, s), len * 4) == 0);
                ck_assert(memcmp(outer_momentum(o, i, s), outer_momentum(o, 0, s), len * 4) == 0);
                ck_assert(memcmp(outer_global(o, i, s), r[i].params[s], len * 4) == 0);
            }
        }
    }
    ck_assert(outer_traffic(o)->bytes_sent > 0);
    outer_free(o);
}

START_TEST(replicas_bit_identical)
{
    run_identical(OUTER_DILOCO, OUTER_WIRE_FP32);
    run_identical(OUTER_DILOCO, OUTER_WIRE_INT8);
    run_identical(OUTER_EDIT, OUTER_WIRE_FP32);
    run_identical(OUTER_EDIT, OUTER_WIRE_INT8);
}
END_TEST

START_TEST(edit_weights_and_clip_by_hand)
{
    const double norm[3] = { 1, 2, 3 };
    const int keep_all[3] = { 1, 1, 1 }, keep_two[3] = { 1, 0, 1 }, keep_none[3] = { 0, 0, 0 };
    double w[3];
    ck_assert_int_eq(outer_edit_weights(norm, keep_all, 3, 1.0, w), 3);
    double z = 1 + exp(-1) + exp(-2);
    ck_assert_double_eq_tol(w[0], 1 / z, 1e-12);
    ck_assert_double_eq_tol(w[1], exp(-1) / z, 1e-12);
    ck_assert_double_eq_tol(w[2], exp(-2) / z, 1e-12);
    ck_assert_int_eq(outer_edit_weights(norm, keep_two, 3, 2.0, w), 2);
    ck_assert(w[1] == 0.0);
    ck_assert_double_eq_tol(w[0], 1 / (1 + exp(-1)), 1e-12); /* T=2: (3-1)/2 */
    ck_assert_int_eq(outer_edit_weights(norm, keep_none, 3, 1.0, w), 0);
    ck_assert(w[0] == 0 && w[2] == 0);
    const double huge[2] = { 1e6, 1e6 + 1 };
    const int k2[2] = { 1, 1 };
    ck_assert_int_eq(outer_edit_weights(huge, k2, 2, 1.0, w), 2);
    ck_assert_double_eq_tol(w[0], 1 / (1 + exp(-1)), 1e-12); /* no overflow */
    ck_assert_double_eq_tol(outer_edit_clip_factor(20, 10), 10 / (20 + 1e-6), 1e-15);
    ck_assert(outer_edit_clip_factor(5, 10) == 1.0);
    ck_assert(outer_edit_clip_factor(1e9, 0) == 1.0);
}
END_TEST

/* Two replicas, one segment of 3, start 0, clip phi = 1, lr 0.7, mu 0.9.
 * Delta_0 = [3,0,0] (norm 3), Delta_1 = [0,4,0] (norm 4):
 * w = softmax(-3,-4) = [1/(1+e^-1), e^-1/(1+e^-1)],
 * Delta = [3 w0, 4 w1, 0], clipped to norm 1, global = -1.33 Delta. */
START_TEST(edit_step_by_hand)
{
    outer_config c;
    outer_config_default(&c, OUTER_EDIT);
    c.edit_clip = 1.0;
    const size_t len = 3;
    outer_t *o = NULL;
    zb_err err = { "" };
    ck_assert(outer_new(&c, 1, &len, &o, &err) == 0);
    fake_replica r[2];
    for (int i = 0; i < 2; i++) {
        fake_init(&r[i]);
        ck_assert(outer_add_replica(o, r[i].params, NULL, &err) == i);
    }
    r[0].seg0[0] = -3;
    r[1].seg0[1] = -4;
    outer_step_info info;
    ck_assert(outer_step(o, &info, &err) == 0);
    double w0 = 1 / (1 + exp(-1)), w1 = 1 - w0;
    double d0 = 3 * w0, d1 = 4 * w1, n = sqrt(d0 * d0 + d1 * d1), f = 1 / (n + 1e-6);
    ck_assert_int_eq(info.clipped, 1);
    ck_assert_double_eq_tol(info.delta_norm, 1.0, 1e-5);
    for (int i = 0; i < 2; i++) {
        ck_assert_double_eq_tol(r[i].seg0[0], -1.33 * d0 * f, 1e-5);
        ck_assert_double_eq_tol(r[i].seg0[1], -1.33 * d1 * f, 1e-5);
        ck_assert(r[i].seg0[2] == 0.0f);
    }
    outer_free(o);
}
END_TEST

START_TEST(zdetect_flags_a_spike_after_warmup)
{
    outer_zdetect d;
    ck_assert(outer_zdetect_init(&d, 5, 0.02, 3.0) == 0);
    /* a spike during warm-up is not flagged */
    ck_assert_int_eq(outer_zdetect_feed(&d, 1.0, NULL), 0);
    ck_assert_int_eq(outer_zdetect_feed(&d, 50.0, NULL), 0);
    outer_zdetect_free(&d);

    ck_assert(outer_zdetect_init(&d, 5, 0.02, 3.0) == 0);
    const double g[8] = { 1.0, 1.1, 0.9, 1.05, 0.95, 1.0, 1.02, 0.98 };
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(outer_zdetect_feed(&d, g[i], NULL), 0);
    double z;
    ck_assert_int_eq(outer_zdetect_feed(&d, 100.0, &z), 1);
    ck_assert(z > 3);
    /* one-sided: a sudden drop is not an anomaly */
    ck_assert_int_eq(outer_zdetect_feed(&d, 0.0, NULL), 0);
    outer_zdetect_free(&d);
}
END_TEST

/* EDiT on 3 replicas: after warm-up, replica 2's pseudo-gradient explodes
 * and is eliminated; the step equals the softmax average of the other two.
 * A NaN replica is eliminated too instead of poisoning the model. */
START_TEST(edit_eliminates_anomalous_replica)
{
    outer_config c;
    outer_config_default(&c, OUTER_EDIT);
    c.edit_warmup = 4;
    c.edit_clip = 0; /* off: check the weights alone */
    const size_t len = 3;
    outer_t *o = NULL;
    zb_err err = { "" };
    ck_assert(outer_new(&c, 1, &len, &o, &err) == 0);
    fake_replica r[3];
    for (int i = 0; i < 3; i++) {
        fake_init(&r[i]);
        ck_assert(outer_add_replica(o, r[i].params, NULL, &err) == i);
    }
    outer_step_info info;
    for (int t = 0; t < 8; t++) {
        for (int i = 0; i < 3; i++)
            r[i].seg0[i] -= 0.01f * (1.0f + 0.1f * (float)((t + i) % 3));
        ck_assert(outer_step(o, &info, &err) == 0);
        ck_assert_int_eq(info.eliminated, 0);
    }
    float before[3];
    memcpy(before, r[0].seg0, sizeof before);
    float mom[3];
    memcpy(mom, outer_momentum(o, 0, 0), sizeof mom);
    r[0].seg0[0] -= 0.0105f; /* both within their own history */
    r[1].seg0[1] -= 0.0115f;
    r[2].seg0[2] -= 100.0f;
    ck_assert(outer_step(o, &info, &err) == 0);
    ck_assert_int_eq(info.eliminated, 1);
    ck_assert_int_eq(info.skipped_segments, 0);
    double w0 = 1 / (1 + exp(-(0.0115 - 0.0105))), w1 = 1 - w0;
    double delta[3] = { 0.0105 * w0, 0.0115 * w1, 0 };
    for (int j = 0; j < 3; j++) {
        double m = 0.9 * mom[j] + delta[j];
        double want = before[j] - 0.7 * (delta[j] + 0.9 * m);
        for (int i = 0; i < 3; i++)
            ck_assert_double_eq_tol(r[i].seg0[j], want, 1e-5);
    }
    /* a NaN replica is dropped as well */
    r[1].seg0[0] = NAN;
    r[0].seg0[0] -= 0.011f;
    ck_assert(outer_step(o, &info, &err) == 0);
    ck_assert_int_eq(info.eliminated, 1);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            ck_assert(isfinite(r[i].seg0[j]));
    outer_free(o);
}
END_TEST

START_TEST(diloco_rejects_nan)
{
    outer_t *o = make_outer(OUTER_DILOCO, OUTER_WIRE_INT8, 2);
    fake_replica r[2];
    zb_err err = { "" };
    for (int i = 0; i < 2; i++) {
        fake_init(&r[i]);
        ck_assert(outer_add_replica(o, r[i].params, NULL, &err) == i);
    }
    r[0].seg0[0] = 0.5f;
    r[1].seg1[1] = INFINITY; /* segment 1: segment 0 must not move either */
    uint64_t bytes = outer_traffic(o)->bytes_sent;
    ck_assert_int_eq(outer_step(o, NULL, &err), -1);
    ck_assert_msg(strstr(err.msg, "replica 1") && strstr(err.msg, "segment 1") && strstr(err.msg, "not finite"), "%s", err.msg);
    /* rejected before anything moved or was sent */
    ck_assert(r[0].seg0[0] == 0.5f);
    ck_assert(outer_global(o, 0, 0)[0] == 0.0f);
    ck_assert(outer_momentum(o, 0, 0)[0] == 0.0f);
    ck_assert_uint_eq(outer_traffic(o)->bytes_sent, bytes);
    ck_assert_int_eq(outer_step_count(o), 0);
    outer_free(o);
}
END_TEST

typedef struct fake_clock {
    double now; /* seconds */
} fake_clock;

static double fake_now(void *ctx)
{
    return ((fake_clock *)ctx)->now;
}

/* A-EDiT: sync when the interval elapsed and enough steps were done; the
 * faster replica (more steps) gets a larger weight. */
START_TEST(aedit_time_based_sync)
{
    fake_clock clk = { 100.0 };
    outer_config c;
    outer_config_default(&c, OUTER_AEDIT);
    c.aedit_interval_s = 10.0;
    c.aedit_min_steps = 5;
    c.aedit_step_weight = 0.5;
    c.edit_clip = 0;
    c.clock = fake_now;
    c.clock_ctx = &clk;
    const size_t len = 3;
    outer_t *o = NULL;
    zb_err err = { "" };
    ck_assert(outer_new(&c, 1, &len, &o, &err) == 0);
    fake_replica r[2];
    for (int i = 0; i < 2; i++) {
        fake_init(&r[i]);
        ck_assert(outer_add_replica(o, r[i].params, NULL, &err) == i);
    }
    for (int t = 0; t < 100; t++)
        outer_note_step(o, 0); /* 100 steps, far more than H: irrelevant */
    clk.now = 109.9;
    ck_assert(!outer_should_sync(o));
    clk.now = 110.0;
    ck_assert(outer_should_sync(o));
    /* replica 0 fast (6 steps), replica 1 slow (2 steps) since last sync */
    ck_assert(outer_step(o, NULL, &err) == 0);
    clk.now = 115.0;
    for (int t = 0; t < 3; t++)
        outer_note_step(o, 0);
    outer_note_step(o, 1);
    clk.now = 125.0;
    ck_assert(!outer_should_sync(o)); /* 4 < 5 steps in total */
    for (int t = 0; t < 3; t++)
        outer_note_step(o, 0);
    outer_note_step(o, 1);
    ck_assert(outer_should_sync(o));
    r[0].seg0[0] = -1; /* equal norms: softmax weights 1/2 each */
    r[1].seg0[1] = -1;
    ck_assert(outer_step(o, NULL, &err) == 0);
    double w0 = 0.5 * 0.5 + 0.5 * 6.0 / 8.0, w1 = 0.5 * 0.5 + 0.5 * 2.0 / 8.0;
    ck_assert_double_eq_tol(r[0].seg0[0], -1.33 * w0, 1e-5);
    ck_assert_double_eq_tol(r[0].seg0[1], -1.33 * w1, 1e-5);
    clk.now = 130.0;
    for (int t = 0; t < 10; t++)
        outer_note_step(o, 1);
    ck_assert(!outer_should_sync(o)); /* only 5 s since the sync at 125 */
    outer_free(o);
}
END_TEST

/* Elastic: 3 replicas; one leaves mid-run, training continues from the
 * survivors' state; a joiner starts from global, does not train and adds
 * nothing to the next step, then is a full member. */
START_TEST(elastic_leave_and_join)
{
    outer_t *o = make_outer(OUTER_DILOCO, OUTER_WIRE_FP32, 2);
    fake_replica r[4];
    zb_err err = { "" };
    for (int i = 0; i < 3; i++) {
        fake_init(&r[i]);
        r[i].seg0[0] = 1;
        ck_assert(outer_add_replica(o, r[i].params, NULL, &err) == i);
    }
    for (int i = 0; i < 3; i++) {
        r[i].seg0[0] -= 0.3f * (float)(i + 1); /* mean Delta = 0.6 */
        outer_note_step(o, i);
    }
    ck_assert(outer_step(o, NULL, &err) == 0);
    double g1 = 1 - 1.33 * 0.6;
    ck_assert_double_eq_tol(r[2].seg0[0], g1, TOL);

    /* replica 0 leaves; the others carry global and momentum on */
    ck_assert(outer_remove_replica(o, 0, &err) == 0);
    ck_assert_int_eq(outer_remove_replica(o, 0, &err), -1);
    ck_assert_int_eq(outer_replicas(o, NULL), 2);
    r[1].seg0[0] -= 0.2f;
    r[2].seg0[0] -= 0.4f; /* mean 0.3 over the 2 left */
    ck_assert(outer_step(o, NULL, &err) == 0);
    double m2 = 0.9 * 0.6 + 0.3, g2 = g1 - 0.7 * (0.3 + 0.9 * m2);
    ck_assert_double_eq_tol(r[1].seg0[0], g2, TOL);
    ck_assert_double_eq_tol(r[2].seg0[0], g2, TOL);

    /* a joiner: starts from global, waits, contributes nothing */
    fake_init(&r[3]);
    r[3].seg0[0] = 77;
    int id = outer_add_replica(o, r[3].params, NULL, &err);
    ck_assert_int_eq(id, 3);
    ck_assert_double_eq_tol(r[3].seg0[0], g2, TOL);
    ck_assert(!outer_replica_trains(o, id));
    ck_assert(outer_replica_trains(o, 1));
    r[1].seg0[0] -= 0.1f;
    r[2].seg0[0] -= 0.3f; /* mean over the 2 contributors: 0.2, not 0.4/3 */
    outer_step_info info;
    ck_assert(outer_step(o, &info, &err) == 0);
    ck_assert_int_eq(info.ring_size, 3);
    ck_assert_int_eq(info.contributors, 2);
    double m3 = 0.9 * m2 + 0.2, g3 = g2 - 0.7 * (0.2 + 0.9 * m3);
    for (int i = 1; i < 4; i++)
        ck_assert_double_eq_tol(r[i].seg0[0], g3, 1e-5);
    ck_assert(memcmp(outer_momentum(o, 3, 0), outer_momentum(o, 1, 0), 12) == 0);
    ck_assert(outer_replica_trains(o, id));
    /* the last replica cannot leave */
    ck_assert(outer_remove_replica(o, 1, &err) == 0);
    ck_assert(outer_remove_replica(o, 2, &err) == 0);
    ck_assert_int_eq(outer_remove_replica(o, 3, &err), -1);
    ck_assert(strstr(err.msg, "last") != NULL);
    outer_free(o);
}
END_TEST

START_TEST(sync_averages_gradients)
{
    outer_t *o = make_outer(OUTER_SYNC, OUTER_WIRE_FP32, 2);
    fake_replica r[3];
    zb_err err = { "" };
    for (int i = 0; i < 3; i++) {
        fake_init(&r[i]);
        r[i].seg0[1] = (float)(10 * i); /* replaced by replica 0's params */
        ck_assert(outer_add_replica(o, r[i].params, r[i].grads, &err) == i);
        r[i].grad0[0] = (float)i;
        r[i].grad1[1] = (float)(3 * i);
    }
    ck_assert(r[2].seg0[1] == 0.0f);
    ck_assert(!outer_should_sync(o));
    ck_assert_int_eq(outer_step(o, NULL, &err), -1);
    ck_assert(outer_sync_grads(o, &err) == 0);
    for (int i = 0; i < 3; i++) {
        ck_assert_double_eq_tol(r[i].grad0[0], 1.0, TOL);
        ck_assert_double_eq_tol(r[i].grad1[1], 3.0, TOL);
    }
    ck_assert_uint_eq(outer_traffic(o)->bytes_sent,
                      outer_allreduce_bytes(OUTER_WIRE_FP32, 3, 3) + outer_allreduce_bytes(OUTER_WIRE_FP32, 3, 2));
    fake_replica late;
    fake_init(&late);
    ck_assert_int_eq(outer_add_replica(o, late.params, late.grads, &err), -1);
    outer_free(o);
}
END_TEST

START_TEST(config_validation)
{
    outer_config c;
    const size_t len = 4, zero = 0;
    outer_t *o = NULL;
    zb_err err = { "" };
    outer_config_default(&c, OUTER_DILOCO);
    c.inner_steps = 0;
    ck_assert_int_eq(outer_new(&c, 1, &len, &o, &err), -1);
    ck_assert(strstr(err.msg, "inner steps") != NULL);
    outer_config_default(&c, OUTER_DILOCO);
    c.outer_momentum = 1.0f;
    ck_assert_int_eq(outer_new(&c, 1, &len, &o, &err), -1);
    outer_config_default(&c, OUTER_EDIT);
    c.edit_temperature = 0;
    ck_assert_int_eq(outer_new(&c, 1, &len, &o, &err), -1);
    outer_config_default(&c, OUTER_DILOCO);
    ck_assert_int_eq(outer_new(&c, 1, &zero, &o, &err), -1);
    ck_assert_int_eq(outer_new(&c, 0, &len, &o, &err), -1);
    ck_assert(o == NULL);
    ck_assert_int_eq(outer_kind_parse("a-edit"), OUTER_AEDIT);
    ck_assert_int_eq(outer_kind_parse("adam"), -1);
    ck_assert_str_eq(outer_kind_name(OUTER_EDIT), "edit");
}
END_TEST

int main(void)
{
    Suite *su = suite_create("outer_step");
    TCase *tc = tcase_create("outer");
    tcase_add_test(tc, nesterov_by_hand);
    tcase_add_test(tc, diloco_by_hand);
    tcase_add_test(tc, replicas_bit_identical);
    tcase_add_test(tc, edit_weights_and_clip_by_hand);
    tcase_add_test(tc, edit_step_by_hand);
    tcase_add_test(tc, zdetect_flags_a_spike_after_warmup);
    tcase_add_test(tc, edit_eliminates_anomalous_replica);
    tcase_add_test(tc, diloco_rejects_nan);
    tcase_add_test(tc, aedit_time_based_sync);
    tcase_add_test(tc, elastic_leave_and_join);
    tcase_add_test(tc, sync_averages_gradients);
    tcase_add_test(tc, config_validation);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
