/*
 * test_zero1.c: ZeRO-1 (runtime/outer/zero1.h) against the unsharded sync
 * mode, K pipeline trainers in process:
 *
 *   - the same step sequence on two sets of K replicas, one averaging its
 *     gradients with the ring all-reduce and stepping whole AdamW state,
 *     the other reduce-scattering, stepping its shard and all-gathering:
 *     parameters, losses, gradient norms and rollback counts are the same
 *     bits after every step, with a clip low enough that post-validation
 *     rolls stages back (the test checks that it did);
 *   - each sharded replica's m and v are exactly the unsharded m and v at
 *     its ranges, and hold 1/K of the floats (to a chunk's rounding);
 *   - the per-tensor norms fed chunk by chunk equal adamw_tensor_sum_squares
 *     of the whole buffer, bit for bit, for a tensor cut at any point;
 *   - a sharded trainer refuses to save its shard alone; with the whole
 *     moments assembled (zero1_ckpt_begin) its checkpoint resumes a
 *     sharded and an unsharded run, both on the bits of an uninterrupted
 *     run.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cpu/adamw_shard.h"
#include "runtime/outer/islands.h"
#include "runtime/outer/outer_ring.h"
#include "runtime/outer/zero1.h"
#include "runtime/trainer.h"
#include "tests/common/trainer_fixture.h"

#define K_MAX 4

static trainer_opts z_opts(uint64_t stream, float clip)
{
    trainer_opts o;
    trainer_opts_default(&o);
    o.seed = 5;
    o.data_stream = stream;
    o.batch_size = 2;
    o.eval_windows = 4;
    o.adamw.lr = 3e-3f;
    o.adamw.warmup_steps = 0;
    o.adamw.decay_steps = 100;
    o.adamw.grad_clip = clip;
    return o;
}

typedef struct replicas {
    int k;
    trainer *t[K_MAX];
    islands_seg_layout l;
} replicas;

static void replicas_init(replicas *x, const sched_t *s, const zb_data *d, int k, float clip,
                          int sharded)
{
    memset(x, 0, sizeof *x);
    x->k = k;
    zb_model m = fixture_model_shaped("zero1-test", 4, 2);
    zb_err err = { "" };
    for (int r = 0; r < k; r++) {
        trainer_opts o = z_opts((uint64_t)r, clip);
        ck_assert_msg(trainer_create(s, &m, d, &o, &x->t[r], &err) == 0, "%s", err.msg);
    }
    ck_assert_msg(islands_seg_layout_build(x->t[0], &x->l, &err) == 0, "%s", err.msg);
    if (sharded)
        for (int r = 0; r < k; r++)
            ck_assert_msg(zero1_shard_trainer(x->t[r], &x->l, k, r, &err) == 0, "%s", err.msg);
}

static void replicas_free(replicas *x)
{
    for (int r = 0; r < x->k; r++)
        trainer_free(x->t[r]);
    islands_seg_layout_free(&x->l);
}

/* One data-parallel step of every replica; returns the mean loss. */
static double replicas_step(replicas *x, int sharded)
{
    zb_err err = { "" };
    double mean = 0;
    for (int r = 0; r < x->k; r++) {
        double loss;
        ck_assert_msg(trainer_backward(x->t[r], &loss, &err) == 0, "%s", err.msg);
        mean += loss;
    }
    if (sharded) {
        ck_assert_msg(zero1_reduce(x->t, x->k, &x->l, NULL, &err) == 0, "%s", err.msg);
    } else {
        float *bufs[K_MAX];
        for (int i = 0; i < x->l.n; i++) {
            for (int r = 0; r < x->k; r++) {
                size_t n;
                bufs[r] = trainer_stage_grads(x->t[r], x->l.stage[i], &n) + x->l.off[i];
            }
            ck_assert(outer_allreduce(OUTER_WIRE_FP32, bufs, x->k, x->l.len[i], (float)x->k, NULL,
                                      &err) == 0);
        }
    }
    for (int r = 0; r < x->k; r++)
        ck_assert_msg(trainer_apply(x->t[r], &err) == 0, "%s", err.msg);
    if (sharded)
        zero1_gather(x->t, x->k, &x->l, NULL);
    return mean / x->k;
}

static void same_as_unsharded(int k)
{
    zb_data *d = fixture_data(32);
    sched_t *s = fixture_scrambled_w(2);
    replicas whole, shard;
    /* a clip the norm crosses: stage 0's optimistic step is rolled back */
    const float clip = 0.5f;
    replicas_init(&whole, s, d, k, clip, 0);
    replicas_init(&shard, s, d, k, clip, 1);
    for (int step = 0; step < 8; step++) {
        double a = replicas_step(&whole, 0), b = replicas_step(&shard, 1);
        ck_assert_msg(memcmp(&a, &b, sizeof a) == 0, "K=%d step %d: loss %.17g vs %.17g", k, step,
                      a, b);
        for (int r = 0; r < k; r++) {
            const trainer_stats *sa = trainer_get_stats(whole.t[r]), *sb = trainer_get_stats(shard.t[r]);
            ck_assert(memcmp(&sa->last_grad_norm, &sb->last_grad_norm, sizeof(double)) == 0);
            ck_assert_int_eq(sa->rollbacks, sb->rollbacks);
            for (int st = 0; st < trainer_stage_count(whole.t[r]); st++) {
                size_t n;
                const float *pa = trainer_stage_params(whole.t[r], st, &n);
                const float *pb = trainer_stage_params(shard.t[r], st, &n);
                ck_assert_msg(memcmp(pa, pb, n * sizeof *pa) == 0, "K=%d step %d replica %d "
                              "stage %d: parameters differ", k, step, r, st);
            }
        }
    }
    ck_assert_msg(trainer_get_stats(shard.t[0])->rollbacks > 0,
                  "the clip never rolled a stage back: the test proves nothing about rollback");
    /* each replica's moments are the unsharded ones at its ranges */
    size_t *lo = malloc(sizeof *lo * (size_t)shard.l.n), *len = malloc(sizeof *len * (size_t)shard.l.n);
    size_t total = 0, held = 0;
    for (int r = 0; r < k; r++)
        for (int st = 0; st < trainer_stage_count(shard.t[r]); st++) {
            size_t nw, ns;
            const float *mw = trainer_stage_adam_m(whole.t[r], st, &nw);
            const float *vw = trainer_stage_adam_v(whole.t[r], st, &nw);
            const float *ms = trainer_stage_adam_m(shard.t[r], st, &ns);
            const float *vs = trainer_stage_adam_v(shard.t[r], st, &ns);
            int n = zero1_ranges(&shard.l, st, k, r, lo, len);
            size_t at = 0;
            for (int i = 0; i < n; i++) {
                ck_assert(memcmp(mw + lo[i], ms + at, len[i] * sizeof *ms) == 0);
                ck_assert(memcmp(vw + lo[i], vs + at, len[i] * sizeof *vs) == 0);
                at += len[i];
            }
            ck_assert_uint_eq(at, ns);
            ck_assert_uint_eq(ns, trainer_stage_optimizer_floats(shard.t[r], st));
            if (r == 0)
                total += nw;
            held += ns;
        }
    /* together the replicas hold each moment once: 1/K each on average */
    ck_assert_uint_eq(held, total);
    size_t one = zero1_optimizer_bytes(shard.t[0], NULL), all = zero1_optimizer_bytes(whole.t[0], NULL);
    ck_assert_uint_eq(all, 2 * sizeof(float) * total);
    ck_assert_msg(one * (size_t)k <= all + 2 * sizeof(float) * (size_t)k * (size_t)shard.l.n &&
                  one * (size_t)k + 2 * sizeof(float) * (size_t)k * (size_t)shard.l.n >= all,
                  "replica 0 holds %zu of %zu optimizer bytes with K=%d", one, all, k);
    zb_err err = { "" };
    ck_assert(trainer_save(shard.t[0], "/nonexistent/zero1.ckpt", &err) != 0);
    ck_assert_msg(strstr(err.msg, "ZeRO-1") != NULL, "%s", err.msg);
    free(lo);
    free(len);
    replicas_free(&whole);
    replicas_free(&shard);
    sched_free(s);
    data_free(d);
}

START_TEST(zero1_k2_same_bits)
{
    same_as_unsharded(2);
}
END_TEST

START_TEST(zero1_k3_same_bits)
{
    same_as_unsharded(3);
}
END_TEST

/* Every replica's parameters of x and y are the same bits. */
static void assert_same_params(replicas *x, replicas *y, const char *what)
{
    for (int r = 0; r < x->k; r++)
        for (int st = 0; st < trainer_stage_count(x->t[r]); st++) {
            size_t n;
            const float *a = trainer_stage_params(x->t[r], st, &n);
            const float *b = trainer_stage_params(y->t[r], st, &n);
            ck_assert_msg(memcmp(a, b, n * sizeof *a) == 0, "%s: replica %d stage %d differs",
                          what, r, st);
        }
}

/* A checkpoint of sharded replicas holds the whole optimizer state: it
 * resumes a sharded and an unsharded run, both continuing with the bits
 * of a run never interrupted. */
START_TEST(zero1_checkpoint_resumes_either_way)
{
    enum { K = 2, HALF = 4 };
    zb_data *d = fixture_data(32);
    sched_t *s = fixture_scrambled_w(2);
    char dir[] = "/tmp/zb-zero1-XXXXXX";
    ck_assert(mkdtemp(dir) != NULL);
    char path[K][300];
    for (int r = 0; r < K; r++)
        snprintf(path[r], sizeof path[r], "%s/replica%d.ckpt", dir, r);
    zb_err err = { "" };
    replicas ref, a, b, c;
    replicas_init(&ref, s, d, K, 0.5f, 0);
    for (int i = 0; i < 2 * HALF; i++)
        replicas_step(&ref, 0);

    replicas_init(&a, s, d, K, 0.5f, 1);
    for (int i = 0; i < HALF; i++)
        replicas_step(&a, 1);
    zero1_ckpt ck;
    ck_assert_msg(zero1_ckpt_begin(a.t, K, &a.l, &ck, &err) == 0, "%s", err.msg);
    for (int r = 0; r < K; r++) /* each replica's file: its data stream, the whole moments */
        ck_assert_msg(trainer_save(a.t[r], path[r], &err) == 0, "%s", err.msg);
    zero1_ckpt_end(a.t, K, &a.l, &ck, 0);
    ck_assert(trainer_save(a.t[0], path[0], &err) != 0); /* the shard alone: refused */

    /* resumed sharded */
    replicas_init(&b, s, d, K, 0.5f, 1);
    ck_assert_msg(zero1_ckpt_begin(b.t, K, &b.l, &ck, &err) == 0, "%s", err.msg);
    for (int r = 0; r < K; r++)
        ck_assert_msg(trainer_load(b.t[r], path[r], &err) == 0, "%s", err.msg);
    zero1_ckpt_end(b.t, K, &b.l, &ck, 1);
    /* resumed unsharded */
    replicas_init(&c, s, d, K, 0.5f, 0);
    for (int r = 0; r < K; r++)
        ck_assert_msg(trainer_load(c.t[r], path[r], &err) == 0, "%s", err.msg);
    for (int i = 0; i < HALF; i++) {
        replicas_step(&a, 1);
        replicas_step(&b, 1);
        replicas_step(&c, 0);
    }
    assert_same_params(&ref, &a, "uninterrupted ZeRO-1");
    assert_same_params(&ref, &b, "resumed with ZeRO-1");
    assert_same_params(&ref, &c, "resumed without ZeRO-1");
    for (int r = 0; r < K; r++)
        unlink(path[r]);
    rmdir(dir);
    replicas_free(&ref);
    replicas_free(&a);
    replicas_free(&b);
    replicas_free(&c);
    sched_free(s);
    data_free(d);
}
END_TEST

/* adamw_sum_squares_feed in pieces = adamw_sum_squares whole, for every
 * cut of tensors whose lengths leave every tail size. */
START_TEST(norm_pieces_same_bits)
{
    float g[203];
    for (int i = 0; i < 203; i++)
        g[i] = (float)sin(0.37 * i) * (1.0f + (float)(i % 7));
    for (size_t n = 197; n <= 203; n++) {
        double whole = adamw_sum_squares(g, n);
        for (size_t cut1 = 0; cut1 <= n; cut1 += 13)
            for (size_t cut2 = cut1; cut2 <= n; cut2 += 29) {
                double acc[4] = { 0, 0, 0, 0 };
                adamw_sum_squares_feed(acc, g, 0, cut1, n);
                adamw_sum_squares_feed(acc, g + cut1, cut1, cut2, n);
                adamw_sum_squares_feed(acc, g + cut2, cut2, n, n);
                double pieces = adamw_sum_squares_finish(acc);
                ck_assert_msg(memcmp(&whole, &pieces, sizeof whole) == 0,
                              "n=%zu cuts %zu %zu: %.17g vs %.17g", n, cut1, cut2, whole, pieces);
            }
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("zero1");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, norm_pieces_same_bits);
    tcase_add_test(tc, zero1_k2_same_bits);
    tcase_add_test(tc, zero1_k3_same_bits);
    tcase_add_test(tc, zero1_checkpoint_resumes_either_way);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
