/*
 * test_split.c: the properties the pipeline runtime relies on.
 *
 *   - initial weights do not depend on how layers are split into stages;
 *   - a 3-stage pipeline over 3 micro-batches, with B and W deferred and
 *     interleaved as a zero-bubble schedule would run them, gives losses
 *     and gradients BIT-IDENTICAL to the single-stage run that does F, B, W
 *     of each micro-batch in turn;
 *   - W into per-micro-batch scratches + llama_grads_add in order equals
 *     W straight into the accumulator (the two options of the contract);
 *   - B followed later by W equals the fused llama_stage_backward;
 *   - llama_saved_bytes after F, after B and after W match the slot table;
 *   - two threads running stages concurrently (as the executor's workers
 *     do) get the same bits as one thread running them in turn;
 *   - bad input (tokens, call order, configs) fails with a message.
 */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/llama.h"
#include "tests/kernels/kt_common.h"

#define SEED 1234
#define M_MICRO 3
#define BATCH 2

static zb_model test_model(void)
{
    /* 4 layers, GQA, odd vocab, T=8 */
    return kt_model(4, 32, 4, 2, 64, 23, 8);
}

/* Deterministic token stream: micro-batch mb, position n. */
static void make_tokens(const zb_model *m, int mb, int32_t *tok, int32_t *tgt)
{
    int N = BATCH * m->seq_len;
    for (int n = 0; n < N; n++) {
        tok[n] = (int32_t)((n * 7 + mb * 13 + 3) % m->vocab);
        tgt[n] = (int32_t)((n * 5 + mb * 11 + 1) % m->vocab);
    }
}

START_TEST(test_init_split_independent)
{
    zb_model m = test_model();
    zb_err err = {{0}};
    llama_stage whole, a, b, c;
    ck_assert_int_eq(llama_stage_init(&whole, &m, 0, 4, 1, 1, &err), 0);
    ck_assert_int_eq(llama_stage_init(&a, &m, 0, 2, 1, 0, &err), 0);
    ck_assert_int_eq(llama_stage_init(&b, &m, 2, 3, 0, 0, &err), 0);
    ck_assert_int_eq(llama_stage_init(&c, &m, 3, 4, 0, 1, &err), 0);
    ck_assert_uint_eq(a.n_params + b.n_params + c.n_params, whole.n_params);
    float *pw = malloc(sizeof(float) * whole.n_params);
    float *pw2 = malloc(sizeof(float) * whole.n_params);
    llama_stage_init_params(&whole, pw, SEED);
    llama_stage_init_params(&whole, pw2, SEED + 1);
    ck_assert(memcmp(pw, pw2, sizeof(float) * whole.n_params) != 0);
    /* the concatenation of the stages' buffers is the whole buffer */
    size_t off = 0;
    const llama_stage *parts[3] = {&a, &b, &c};
    for (int s = 0; s < 3; s++) {
        float *p = malloc(sizeof(float) * parts[s]->n_params);
        llama_stage_init_params(parts[s], p, SEED);
        ck_assert(memcmp(p, pw + off, sizeof(float) * parts[s]->n_params) == 0);
        off += parts[s]->n_params;
        free(p);
    }
    /* sane statistics: gains are 1, matrices have std near 0.02 */
    const llama_tensor *g1 = llama_stage_find(&whole, LLAMA_T_ATTN_NORM, 2);
    ck_assert_float_eq(pw[g1->offset], 1.0f);
    const llama_tensor *w1 = llama_stage_find(&whole, LLAMA_T_W1, 1);
    double ss = 0, mean = 0;
    for (size_t i = 0; i < w1->count; i++) {
        mean += pw[w1->offset + i];
        ss += (double)pw[w1->offset + i] * pw[w1->offset + i];
    }
    mean /= w1->count;
    double sd = sqrt(ss / w1->count - mean * mean);
    ck_assert_msg(sd > 0.018 && sd < 0.022 && fabs(mean) < 0.002, "std %g mean %g", sd, mean);
    /* layout: tensors are contiguous, in the documented order */
    ck_assert_int_eq(whole.tensors[0].kind, LLAMA_T_EMBEDDING);
    ck_assert_int_eq(whole.tensors[whole.n_tensors - 1].kind, LLAMA_T_LM_HEAD);
    for (int t = 1; t < whole.n_tensors; t++)
        ck_assert_uint_eq(whole.tensors[t].offset,
                          whole.tensors[t - 1].offset + whole.tensors[t - 1].count);
    ck_assert_str_eq(llama_stage_find(&whole, LLAMA_T_WK, 3)->name, "layers.3.wk");
    ck_assert_ptr_null(llama_stage_find(&b, LLAMA_T_EMBEDDING, -1));
    free(pw);
    free(pw2);
    llama_stage_free(&whole);
    llama_stage_free(&a);
    llama_stage_free(&b);
    llama_stage_free(&c);
}
END_TEST

/* Reference: one stage, F, B, W of each micro-batch in turn. */
static void run_single(const zb_model *m, float *losses, float *grads)
{
    zb_err err = {{0}};
    llama_stage st;
    ck_assert_int_eq(llama_stage_init(&st, m, 0, m->n_layers, 1, 1, &err), 0);
    float *p = malloc(sizeof(float) * st.n_params);
    llama_stage_init_params(&st, p, SEED);
    llama_grads_zero(&st, grads);
    llama_saved *sv = llama_saved_new(&st, BATCH);
    int N = BATCH * m->seq_len;
    int32_t *tok = malloc(sizeof(int32_t) * N), *tgt = malloc(sizeof(int32_t) * N);
    for (int mb = 0; mb < M_MICRO; mb++) {
        make_tokens(m, mb, tok, tgt);
        ck_assert_int_eq(llama_stage_forward(&st, p, tok, NULL, tgt, sv, NULL,
                                             &losses[mb], NULL, &err), 0);
        ck_assert_int_eq(llama_stage_backward(&st, p, sv, 1.0f / M_MICRO, NULL,
                                              NULL, grads, &err), 0);
    }
    llama_saved_free(sv);
    free(tok);
    free(tgt);
    free(p);
    llama_stage_free(&st);
}

START_TEST(test_pipeline_bit_identical)
{
    zb_model m = test_model();
    zb_err err = {{0}};
    llama_stage whole;
    ck_assert_int_eq(llama_stage_init(&whole, &m, 0, 4, 1, 1, &err), 0);
    float ref_loss[M_MICRO];
    float *ref_grads = malloc(sizeof(float) * whole.n_params);
    run_single(&m, ref_loss, ref_grads);

    /* 3 stages: [0,1)+embedding, [1,3), [3,4)+head */
    int bounds[4] = {0, 1, 3, 4};
    llama_stage st[3];
    float *p[3], *g[3];
    llama_saved *sv[3][M_MICRO];
    for (int s = 0; s < 3; s++) {
        ck_assert_int_eq(llama_stage_init(&st[s], &m, bounds[s], bounds[s + 1],
                                          s == 0, s == 2, &err), 0);
        p[s] = malloc(sizeof(float) * st[s].n_params);
        g[s] = malloc(sizeof(float) * st[s].n_params);
        llama_stage_init_params(&st[s], p[s], SEED);
        llama_grads_zero(&st[s], g[s]);
        for (int mb = 0; mb < M_MICRO; mb++)
            sv[s][mb] = llama_saved_new(&st[s], BATCH);
    }
    int N = BATCH * m.seq_len;
    size_t Nd = (size_t)N * m.d_model;
    float *act[2][M_MICRO], *grad[2][M_MICRO];
    for (int s = 0; s < 2; s++)
        for (int mb = 0; mb < M_MICRO; mb++) {
            act[s][mb] = malloc(sizeof(float) * Nd);
            grad[s][mb] = malloc(sizeof(float) * Nd);
        }
    int32_t tok[M_MICRO][BATCH * 8], tgt[M_MICRO][BATCH * 8];
    float loss[M_MICRO];
    for (int mb = 0; mb < M_MICRO; mb++)
        make_tokens(&m, mb, tok[mb], tgt[mb]);

    /* all forwards, stage by stage */
    for (int mb = 0; mb < M_MICRO; mb++) {
        ck_assert_int_eq(llama_stage_forward(&st[0], p[0], tok[mb], NULL, NULL, sv[0][mb],
                                             act[0][mb], NULL, NULL, &err), 0);
        ck_assert_int_eq(llama_stage_forward(&st[1], p[1], NULL, act[0][mb], NULL, sv[1][mb],
                                             act[1][mb], NULL, NULL, &err), 0);
        ck_assert_int_eq(llama_stage_forward(&st[2], p[2], NULL, act[1][mb], tgt[mb], sv[2][mb],
                                             NULL, &loss[mb], NULL, &err), 0);
    }
    /* B's in micro-batch order; the last stage runs its W's as soon as it
     * can, the middle stage after every B (zero-bubble style), the first
     * stage uses per-micro-batch scratches added in order at the end */
    float *scratch[M_MICRO];
    for (int mb = 0; mb < M_MICRO; mb++) {
        ck_assert_int_eq(llama_stage_backward_b(&st[2], p[2], sv[2][mb], 1.0f / M_MICRO,
                                                NULL, grad[1][mb], &err), 0);
        ck_assert_int_eq(llama_stage_backward_w(&st[2], sv[2][mb], g[2], &err), 0);
        ck_assert_int_eq(llama_stage_backward_b(&st[1], p[1], sv[1][mb], 0, grad[1][mb],
                                                grad[0][mb], &err), 0);
        ck_assert_int_eq(llama_stage_backward_b(&st[0], p[0], sv[0][mb], 0, grad[0][mb],
                                                NULL, &err), 0);
    }
    for (int mb = 0; mb < M_MICRO; mb++) {
        ck_assert_int_eq(llama_stage_backward_w(&st[1], sv[1][mb], g[1], &err), 0);
        scratch[mb] = calloc(st[0].n_params, sizeof(float));
        ck_assert_int_eq(llama_stage_backward_w(&st[0], sv[0][mb], scratch[mb], &err), 0);
    }
    for (int mb = 0; mb < M_MICRO; mb++) {
        llama_grads_add(&st[0], g[0], scratch[mb]);
        free(scratch[mb]);
    }
    for (int mb = 0; mb < M_MICRO; mb++)
        ck_assert_msg(memcmp(&loss[mb], &ref_loss[mb], sizeof(float)) == 0,
                      "micro-batch %d loss %.9g vs %.9g", mb, loss[mb], ref_loss[mb]);
    size_t off = 0;
    for (int s = 0; s < 3; s++) {
        ck_assert_msg(memcmp(g[s], ref_grads + off, sizeof(float) * st[s].n_params) == 0,
                      "stage %d gradients differ from the single-stage run", s);
        off += st[s].n_params;
    }
    /* and the gradients are not trivially zero */
    double norm = 0;
    for (size_t i = 0; i < whole.n_params; i++)
        norm += (double)ref_grads[i] * ref_grads[i];
    ck_assert(norm > 1e-6);

    for (int s = 0; s < 3; s++) {
        for (int mb = 0; mb < M_MICRO; mb++) {
            ck_assert_uint_eq(llama_saved_bytes(sv[s][mb]), 0);
            llama_saved_free(sv[s][mb]);
        }
        free(p[s]);
        free(g[s]);
        llama_stage_free(&st[s]);
    }
    for (int s = 0; s < 2; s++)
        for (int mb = 0; mb < M_MICRO; mb++) {
            free(act[s][mb]);
            free(grad[s][mb]);
        }
    free(ref_grads);
    llama_stage_free(&whole);
}
END_TEST

START_TEST(test_saved_bytes)
{
    zb_model m = test_model();
    zb_err err = {{0}};
    llama_stage st;
    ck_assert_int_eq(llama_stage_init(&st, &m, 1, 3, 0, 0, &err), 0);
    float *p = malloc(sizeof(float) * st.n_params);
    float *gr = calloc(st.n_params, sizeof(float));
    llama_stage_init_params(&st, p, SEED);
    size_t N = BATCH * m.seq_len, d = m.d_model, ff = m.d_ff;
    size_t qd = st.q_dim, kvd = st.kv_dim, H = m.n_heads;
    /* per layer, in floats, from the slot table of llama.c */
    size_t keep = N * d + N + N * d + N * qd + N * d + N + N * d + N * ff;
    size_t fonly = N * qd + 2 * N * kvd + N * H + 2 * N * ff;
    size_t bkeep = N * d + 2 * N * ff + 2 * N * d + N * qd + 2 * N * kvd + N * d;
    float *x = malloc(sizeof(float) * N * d), *y = malloc(sizeof(float) * N * d);
    for (size_t i = 0; i < N * d; i++)
        x[i] = (float)((int)(i % 17) - 8) * 0.1f;
    llama_saved *sv = llama_saved_new(&st, BATCH);
    ck_assert_uint_eq(llama_saved_bytes(sv), 0);
    ck_assert_int_eq(llama_stage_forward(&st, p, NULL, x, NULL, sv, y, NULL, NULL, &err), 0);
    ck_assert_uint_eq(llama_saved_bytes(sv), 2 * 4 * (keep + fonly));
    ck_assert_int_eq(llama_stage_backward_b(&st, p, sv, 0, y, x, &err), 0);
    ck_assert_uint_eq(llama_saved_bytes(sv), 2 * 4 * (keep + bkeep));
    ck_assert_int_eq(llama_stage_backward_w(&st, sv, gr, &err), 0);
    ck_assert_uint_eq(llama_saved_bytes(sv), 0);
    /* reset drops a forward-only pass */
    ck_assert_int_eq(llama_stage_forward(&st, p, NULL, x, NULL, sv, y, NULL, NULL, &err), 0);
    llama_saved_reset(sv);
    ck_assert_uint_eq(llama_saved_bytes(sv), 0);
    llama_saved_free(sv);
    free(x);
    free(y);
    free(p);
    free(gr);
    llama_stage_free(&st);
}
END_TEST

START_TEST(test_deferred_equals_fused)
{
    /* one stage; micro-batch 0: fused backward; micro-batch 0 again on a
     * second object: B, then another micro-batch's F and B in between,
     * then W: the weight gradients must be the same bits */
    zb_model m = test_model();
    zb_err err = {{0}};
    llama_stage st;
    ck_assert_int_eq(llama_stage_init(&st, &m, 0, 2, 1, 0, &err), 0);
    float *p = malloc(sizeof(float) * st.n_params);
    llama_stage_init_params(&st, p, SEED);
    float *g1 = calloc(st.n_params, sizeof(float)), *g2 = calloc(st.n_params, sizeof(float));
    float *g3 = calloc(st.n_params, sizeof(float));
    size_t Nd = (size_t)BATCH * m.seq_len * m.d_model;
    float *y = malloc(sizeof(float) * Nd), *dy = malloc(sizeof(float) * Nd);
    for (size_t i = 0; i < Nd; i++)
        dy[i] = (float)((int)(i % 13) - 6) * 0.01f;
    int32_t tok[2][BATCH * 8], tgt[BATCH * 8];
    make_tokens(&m, 0, tok[0], tgt);
    make_tokens(&m, 1, tok[1], tgt);
    llama_saved *a = llama_saved_new(&st, BATCH), *b = llama_saved_new(&st, BATCH);
    ck_assert_int_eq(llama_stage_forward(&st, p, tok[0], NULL, NULL, a, y, NULL, NULL, &err), 0);
    ck_assert_int_eq(llama_stage_backward(&st, p, a, 0, dy, NULL, g1, &err), 0);

    ck_assert_int_eq(llama_stage_forward(&st, p, tok[0], NULL, NULL, a, y, NULL, NULL, &err), 0);
    ck_assert_int_eq(llama_stage_backward_b(&st, p, a, 0, dy, NULL, &err), 0);
    ck_assert_int_eq(llama_stage_forward(&st, p, tok[1], NULL, NULL, b, y, NULL, NULL, &err), 0);
    ck_assert_int_eq(llama_stage_backward_b(&st, p, b, 0, dy, NULL, &err), 0);
    ck_assert_int_eq(llama_stage_backward_w(&st, b, g3, &err), 0);
    ck_assert_int_eq(llama_stage_backward_w(&st, a, g2, &err), 0);
    ck_assert(memcmp(g1, g2, sizeof(float) * st.n_params) == 0);
    ck_assert(memcmp(g1, g3, sizeof(float) * st.n_params) != 0);
    llama_saved_free(a);
    llama_saved_free(b);
    free(p);
    free(g1);
    free(g2);
    free(g3);
    free(y);
    free(dy);
    llama_stage_free(&st);
}
END_TEST

/* Recompute keeps only the stage's inputs after F (full level), or all but
 * each layer's MLP block (MLP level: exactly the norm output, gate, up and
 * product fewer bytes), and gives B and W the same bits as a run that kept
 * every activation, on the three kinds of stage (embedding, middle, head);
 * an interleaved second micro-batch shows that B reruns its own
 * micro-batch's forward, not the last one run. */
START_TEST(test_recompute_bit_identical)
{
    zb_model m = test_model();
    zb_err err = {{0}};
    static const int spans[3][4] = { { 0, 2, 1, 0 }, { 2, 3, 0, 0 }, { 3, 4, 0, 1 } };
    for (int k = 0; k < 3; k++) {
        llama_stage st;
        ck_assert_int_eq(llama_stage_init(&st, &m, spans[k][0], spans[k][1], spans[k][2],
                                          spans[k][3], &err), 0);
        float *p = malloc(sizeof(float) * st.n_params);
        llama_stage_init_params(&st, p, SEED);
        size_t N = (size_t)BATCH * m.seq_len, Nd = N * m.d_model;
        float *g[3] = { calloc(st.n_params, sizeof(float)), calloc(st.n_params, sizeof(float)),
                        calloc(st.n_params, sizeof(float)) };
        float *x[2], *y = malloc(sizeof(float) * Nd), *dy = malloc(sizeof(float) * Nd);
        float *dx[2] = { malloc(sizeof(float) * Nd), malloc(sizeof(float) * Nd) };
        float *dx_ref[2] = { malloc(sizeof(float) * Nd), malloc(sizeof(float) * Nd) };
        int32_t tok[2][BATCH * 8], tgt[2][BATCH * 8];
        for (int mb = 0; mb < 2; mb++) {
            make_tokens(&m, mb, tok[mb], tgt[mb]);
            x[mb] = malloc(sizeof(float) * Nd);
            for (size_t i = 0; i < Nd; i++)
                x[mb][i] = (float)((int)((i + 5 * mb) % 17) - 8) * 0.1f;
        }
        for (size_t i = 0; i < Nd; i++)
            dy[i] = (float)((int)(i % 13) - 6) * 0.01f;
        float loss[3][2] = { { 0 } };
        size_t full_bytes = 0; /* one micro-batch's bytes after F without recompute */
        for (int rc = LLAMA_RC_NONE; rc <= LLAMA_RC_MLP; rc++) {
            llama_saved *a = llama_saved_new(&st, BATCH), *b = llama_saved_new(&st, BATCH);
            llama_saved_set_recompute(a, rc);
            llama_saved_set_recompute(b, rc);
            llama_saved *sv[2] = { a, b };
            for (int mb = 0; mb < 2; mb++) {
                ck_assert_int_eq(llama_stage_forward(&st, p, st.has_embedding ? tok[mb] : NULL,
                                                     st.has_embedding ? NULL : x[mb],
                                                     st.has_head ? tgt[mb] : NULL, sv[mb],
                                                     st.has_head ? NULL : y, &loss[rc][mb],
                                                     NULL, &err), 0);
                size_t want_in = st.has_embedding ? N * sizeof(int32_t) : Nd * sizeof(float);
                if (st.has_head)
                    want_in += N * sizeof(int32_t);
                /* MLP level: the norm output, gate, up and product of each layer */
                size_t mlp = (size_t)(spans[k][1] - spans[k][0]) *
                             (Nd + 3 * N * (size_t)m.d_ff) * sizeof(float);
                if (rc == LLAMA_RC_FULL)
                    ck_assert_uint_eq(llama_saved_bytes(sv[mb]), want_in);
                else if (rc == LLAMA_RC_MLP)
                    ck_assert_uint_eq(llama_saved_bytes(sv[mb]), full_bytes - mlp);
                else
                    ck_assert_uint_gt(full_bytes = llama_saved_bytes(sv[mb]), want_in);
            }
            for (int mb = 1; mb >= 0; mb--) /* the later micro-batch first */
                ck_assert_int_eq(llama_stage_backward_b(&st, p, sv[mb], 0.5f,
                                                        st.has_head ? NULL : dy,
                                                        st.has_embedding ? NULL : dx[mb], &err), 0);
            for (int mb = 0; mb < 2; mb++) {
                ck_assert_int_eq(llama_stage_backward_w(&st, sv[mb], g[rc], &err), 0);
                ck_assert_uint_eq(llama_saved_bytes(sv[mb]), 0);
            }
            for (int mb = 0; mb < 2 && !st.has_embedding; mb++) {
                if (rc == 0)
                    memcpy(dx_ref[mb], dx[mb], sizeof(float) * Nd);
                else
                    ck_assert(memcmp(dx_ref[mb], dx[mb], sizeof(float) * Nd) == 0);
            }
            llama_saved_free(a);
            llama_saved_free(b);
        }
        for (int rc = 1; rc < 3; rc++) {
            ck_assert(memcmp(g[0], g[rc], sizeof(float) * st.n_params) == 0);
            ck_assert(memcmp(loss[0], loss[rc], sizeof loss[0]) == 0);
        }
        for (int mb = 0; mb < 2; mb++) {
            free(x[mb]);
            free(dx[mb]);
            free(dx_ref[mb]);
        }
        for (int rc = 0; rc < 3; rc++)
            free(g[rc]);
        free(y);
        free(dy);
        free(p);
        llama_stage_free(&st);
    }
}
END_TEST

/* One worker's job: F+B+W of M_MICRO micro-batches on its own stage. */
typedef struct worker_job {
    const zb_model *m;  /* the model */
    int l0, l1;         /* its layers */
    float *grads;       /* out: accumulated gradients */
    float *dx;          /* out: dX of the last micro-batch [N,d] */
    int rc;             /* 0 when every call succeeded */
} worker_job;

static void *worker_run(void *arg)
{
    worker_job *j = arg;
    zb_err err = {{0}};
    llama_stage st;
    j->rc = llama_stage_init(&st, j->m, j->l0, j->l1, 0, 0, &err);
    if (j->rc)
        return NULL;
    float *p = malloc(sizeof(float) * st.n_params);
    llama_stage_init_params(&st, p, SEED);
    llama_grads_zero(&st, j->grads);
    size_t Nd = (size_t)BATCH * j->m->seq_len * j->m->d_model;
    float *x = malloc(sizeof(float) * Nd), *y = malloc(sizeof(float) * Nd);
    llama_saved *sv = llama_saved_new(&st, BATCH);
    for (int mb = 0; mb < M_MICRO && j->rc == 0; mb++) {
        for (size_t i = 0; i < Nd; i++)
            x[i] = (float)((int)((i * 31 + mb * 7) % 29) - 14) * 0.07f;
        j->rc |= llama_stage_forward(&st, p, NULL, x, NULL, sv, y, NULL, NULL, &err);
        j->rc |= llama_stage_backward(&st, p, sv, 0, y, j->dx, j->grads, &err);
    }
    llama_saved_free(sv);
    free(x);
    free(y);
    free(p);
    llama_stage_free(&st);
    return NULL;
}

START_TEST(test_threads_bit_identical)
{
    zb_model m = kt_model(4, 64, 4, 2, 128, 23, 32);
    size_t Nd = (size_t)BATCH * m.seq_len * m.d_model;
    llama_stage probe;
    zb_err err = {{0}};
    ck_assert_int_eq(llama_stage_init(&probe, &m, 0, 2, 0, 0, &err), 0);
    size_t np = probe.n_params;
    llama_stage_free(&probe);
    worker_job seq[2], par[2];
    for (int w = 0; w < 2; w++) {
        worker_job base = {&m, 2 * w, 2 * w + 2, NULL, NULL, -1};
        seq[w] = base;
        par[w] = base;
        seq[w].grads = malloc(sizeof(float) * np);
        par[w].grads = malloc(sizeof(float) * np);
        seq[w].dx = malloc(sizeof(float) * Nd);
        par[w].dx = malloc(sizeof(float) * Nd);
        worker_run(&seq[w]);
        ck_assert_int_eq(seq[w].rc, 0);
    }
    pthread_t th[2];
    for (int w = 0; w < 2; w++)
        ck_assert_int_eq(pthread_create(&th[w], NULL, worker_run, &par[w]), 0);
    for (int w = 0; w < 2; w++) {
        pthread_join(th[w], NULL);
        ck_assert_int_eq(par[w].rc, 0);
        ck_assert(memcmp(seq[w].grads, par[w].grads, sizeof(float) * np) == 0);
        ck_assert(memcmp(seq[w].dx, par[w].dx, sizeof(float) * Nd) == 0);
        free(seq[w].grads);
        free(par[w].grads);
        free(seq[w].dx);
        free(par[w].dx);
    }
}
END_TEST

START_TEST(test_errors)
{
    zb_model m = test_model();
    zb_err err = {{0}};
    llama_stage st;
    zb_model bad = m;
    bad.n_kv_heads = 3;
    ck_assert_int_eq(llama_stage_init(&st, &bad, 0, 1, 1, 1, &err), -1);
    ck_assert(strstr(err.msg, "n_kv_heads") != NULL);
    bad = m;
    bad.d_model = 30; /* heads 4 do not divide 30 */
    ck_assert_int_eq(llama_stage_init(&st, &bad, 0, 1, 1, 1, &err), -1);
    bad = m;
    bad.n_heads = 8; /* head_dim 4: fine */
    bad.n_kv_heads = 8;
    ck_assert_int_eq(llama_stage_init(&st, &bad, 0, 1, 1, 1, &err), 0);
    llama_stage_free(&st);
    ck_assert_int_eq(llama_stage_init(&st, &m, 3, 5, 0, 0, &err), -1);
    ck_assert_int_eq(llama_stage_init(&st, &m, 2, 2, 0, 0, &err), -1);

    ck_assert_int_eq(llama_stage_init(&st, &m, 0, 1, 1, 1, &err), 0);
    float *p = malloc(sizeof(float) * st.n_params), *g = calloc(st.n_params, sizeof(float));
    llama_stage_init_params(&st, p, SEED);
    llama_saved *sv = llama_saved_new(&st, BATCH);
    int32_t tok[BATCH * 8], tgt[BATCH * 8];
    make_tokens(&m, 0, tok, tgt);
    float loss;
    /* B or W before F */
    ck_assert_int_eq(llama_stage_backward_b(&st, p, sv, 1, NULL, NULL, &err), -1);
    ck_assert_int_eq(llama_stage_backward_w(&st, sv, g, &err), -1);
    tok[5] = m.vocab;
    ck_assert_int_eq(llama_stage_forward(&st, p, tok, NULL, tgt, sv, NULL, &loss, NULL, &err), -1);
    ck_assert(strstr(err.msg, "token") != NULL);
    ck_assert_uint_eq(llama_saved_bytes(sv), 0);
    tok[5] = 0;
    tgt[0] = -1;
    ck_assert_int_eq(llama_stage_forward(&st, p, tok, NULL, tgt, sv, NULL, &loss, NULL, &err), -1);
    ck_assert(strstr(err.msg, "target") != NULL);
    tgt[0] = 0;
    ck_assert_int_eq(llama_stage_forward(&st, p, tok, NULL, tgt, sv, NULL, &loss, NULL, &err), 0);
    /* F twice without B/W, W before B */
    ck_assert_int_eq(llama_stage_forward(&st, p, tok, NULL, tgt, sv, NULL, &loss, NULL, &err), -1);
    ck_assert_int_eq(llama_stage_backward_w(&st, sv, g, &err), -1);
    llama_saved_free(sv); /* frees a held forward state */
    free(p);
    free(g);
    llama_stage_free(&st);
}
END_TEST

int main(void)
{
    kernels_init_threads(1);
    if (kernels_threads() != 1) {
        fprintf(stderr, "OpenBLAS did not switch to one thread\n");
        return EXIT_FAILURE;
    }
    Suite *s = suite_create("kernels_split");
    TCase *tc = tcase_create("split");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_init_split_independent);
    tcase_add_test(tc, test_pipeline_bit_identical);
    tcase_add_test(tc, test_saved_bytes);
    tcase_add_test(tc, test_deferred_equals_fused);
    tcase_add_test(tc, test_recompute_bit_identical);
    tcase_add_test(tc, test_threads_bit_identical);
    tcase_add_test(tc, test_errors);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
