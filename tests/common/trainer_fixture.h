/*
 * trainer_fixture.h: shared helpers of the trainer tests (tests/runtime and
 * tests/outer): a small model, the tinyshakespeare loader, schedules built
 * by hand, and a runner that trains for a few steps and returns losses and
 * the concatenated parameters for bit-exact comparison.  Header-only
 * (static inline functions, so a test that uses only some of them gets no
 * unused-function warning) so each test executable stays one file plus
 * this.
 */
#ifndef ZB_TESTS_COMMON_TRAINER_FIXTURE_H
#define ZB_TESTS_COMMON_TRAINER_FIXTURE_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/trainer.h"

#define FIX_MAX_STEPS 8

/* A model named `name` (under 64 bytes) with n_layers layers and
 * micro_batch sequences per micro-batch, otherwise the narrow shape shared
 * by every trainer test (d_model 32, 4 heads, 2 KV heads, d_ff 64, the
 * 65-character vocabulary, 32-token context, SwiGLU, fp32). */
static inline zb_model fixture_model_shaped(const char *name, int n_layers, int micro_batch)
{
    zb_model m;
    memset(&m, 0, sizeof m);
    strcpy(m.name, name);
    m.n_layers = n_layers;
    m.d_model = 32;
    m.n_heads = 4;
    m.n_kv_heads = 2;
    m.d_ff = 64;
    m.vocab = 65;
    m.seq_len = 32;
    m.micro_batch = micro_batch;
    m.swiglu = 1;
    m.rope_theta = 10000;
    m.dtype = ZB_FP32;
    return m;
}

/* A 4-layer model narrow enough that a step takes milliseconds. */
static inline zb_model fixture_model(void)
{
    return fixture_model_shaped("test-tiny", 4, 2);
}

/* Loads ../shared/data/tinyshakespeare.txt (from $ZB_SOURCE_ROOT, else
 * the current directory) with context ctx; fails the test if it cannot. */
static inline zb_data *fixture_data(int ctx)
{
    char path[4096];
    const char *root = getenv("ZB_SOURCE_ROOT");
    snprintf(path, sizeof path, "%s/../shared/data/tinyshakespeare.txt", root ? root : ".");
    zb_data *d = NULL;
    zb_err err = { { 0 } };
    ck_assert_msg(data_load_file(path, ctx, &d, &err) == 0, "%s", err.msg);
    return d;
}

/* p = 1, one stage, F and BW per micro-batch in order: the reference. */
static inline sched_t *fixture_single(int m)
{
    sched_t *s = sched_new(1, m, 1);
    s->stage_device[0] = 0;
    for (int j = 0; j < m; j++) {
        sched_push(s, 0, OP_F, 0, j);
        sched_push(s, 0, OP_BW, 0, j);
    }
    strcpy(s->name, "single");
    return s;
}

/* p = 2, S = 2, m = 2, GPipe order (both F, then both BW, per device).
 * Leaves the name empty. */
static inline sched_t *fixture_gpipe2(void)
{
    sched_t *s = sched_new(2, 2, 2);
    s->stage_device[0] = 0;
    s->stage_device[1] = 1;
    for (int d = 0; d < 2; d++) {
        for (int j = 0; j < 2; j++)
            sched_push(s, d, OP_F, d, j);
        for (int j = 0; j < 2; j++)
            sched_push(s, d, OP_BW, d, j);
    }
    return s;
}

/* p = 2, S = 2, all F then split B and W with W in scrambled micro-batch
 * order: exercises the out-of-order weight-gradient scratch. */
static inline sched_t *fixture_scrambled_w(int m)
{
    sched_t *s = sched_new(2, m, 2);
    s->stage_device[0] = 0;
    s->stage_device[1] = 1;
    for (int d = 0; d < 2; d++)
        for (int j = 0; j < m; j++)
            sched_push(s, d, OP_F, d, j);
    for (int d = 1; d >= 0; d--)
        for (int j = m - 1; j >= 0; j--)
            sched_push(s, d, OP_B, d, j);
    for (int d = 0; d < 2; d++)
        for (int k = 0; k < m; k++) /* odd micro-batches first, descending */
            sched_push(s, d, OP_W, d, k < m / 2 ? m - 1 - 2 * k : m - 2 - 2 * (k - m / 2));
    strcpy(s->name, "scrambled-w");
    return s;
}

typedef struct fixture_run {
    int steps;                        /* steps run */
    double loss[FIX_MAX_STEPS];       /* training loss per step */
    double val_loss;                  /* validation loss after the last step */
    float *params;                    /* all stages' params concatenated (caller frees) */
    size_t n_params;                  /* floats in params */
    long rollbacks;                   /* post-validation rollbacks */
    long skipped;                     /* skipped steps */
} fixture_run;

/* Trains `steps` steps of schedule s; fails the test on any error. */
static inline fixture_run fixture_train(const sched_t *s, const zb_data *d, const trainer_opts *o, int steps)
{
    zb_model m = fixture_model();
    trainer *t = NULL;
    zb_err err = { { 0 } };
    ck_assert_msg(trainer_create(s, &m, d, o, &t, &err) == 0, "%s: %s", s->name, err.msg);
    fixture_run r;
    memset(&r, 0, sizeof r);
    r.steps = steps;
    for (int i = 0; i < steps; i++)
        ck_assert_msg(trainer_step(t, &r.loss[i], &err) == 0, "%s: %s", s->name, err.msg);
    ck_assert_msg(trainer_eval(t, &r.val_loss, &err) == 0, "%s", err.msg);
    r.n_params = trainer_param_count(t);
    r.params = malloc(sizeof(float) * r.n_params);
    size_t off = 0;
    for (int st = 0; st < trainer_stage_count(t); st++) {
        size_t n;
        float *p = trainer_stage_params(t, st, &n);
        memcpy(r.params + off, p, sizeof(float) * n);
        off += n;
    }
    ck_assert_uint_eq(off, r.n_params);
    r.rollbacks = trainer_get_stats(t)->rollbacks;
    r.skipped = trainer_get_stats(t)->skipped_steps;
    trainer_free(t);
    return r;
}

/* Asserts bit-identical losses and parameters. */
static inline void fixture_assert_same(const fixture_run *a, const fixture_run *b, const char *what)
{
    ck_assert_int_eq(a->steps, b->steps);
    for (int i = 0; i < a->steps; i++)
        ck_assert_msg(memcmp(&a->loss[i], &b->loss[i], sizeof(double)) == 0,
                      "%s: step %d loss %.9g vs %.9g", what, i, a->loss[i], b->loss[i]);
    ck_assert_msg(memcmp(&a->val_loss, &b->val_loss, sizeof(double)) == 0,
                  "%s: val loss %.9g vs %.9g", what, a->val_loss, b->val_loss);
    ck_assert_uint_eq(a->n_params, b->n_params);
    size_t diff = 0;
    for (size_t i = 0; i < a->n_params; i++)
        diff += memcmp(&a->params[i], &b->params[i], sizeof(float)) != 0;
    ck_assert_msg(diff == 0, "%s: %zu of %zu parameters differ", what, diff, a->n_params);
}

#endif
