/*
 * test_golden.c: the CPU kernels against the JAX goldens
 * (tools/golden/make_golden.py, an independent jax.numpy implementation
 * differentiated by jax.grad, computed in float64).
 *
 * For every golden configuration (plain MHA, GQA, MQA) it checks:
 *   - the whole model as one stage: logits, loss and every parameter
 *     gradient, tensor by tensor;
 *   - every layer as its own stage, fed the golden residual stream: its
 *     output activation, its input gradient dX (given the golden gradient
 *     of its output) and its weight gradients; likewise an embedding-only
 *     and a head-only stage, i.e. every stage boundary of any split.
 * Errors are relative to each tensor's largest magnitude; fp32 against a
 * float64 reference lands at 1e-7..1.2e-6 (KT_VERBOSE=1 prints them); the
 * bounds (1e-5, 3e-5) leave a decade of margin.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/llama.h"
#include "tests/kernels/kt_common.h"

static const char *const golden_files[] = {
    "mha_l2_d16.bin", "gqa_l2_d32.bin", "mqa_l1_d24.bin",
};

#define TOL_ACT 1e-5   /* activations, logits */
#define TOL_GRAD 3e-5  /* gradients */

static void load(int i, kt_golden *g)
{
    char why[512];
    ck_assert_msg(kt_golden_load(golden_files[i], g, why, sizeof why) == 0, "%s", why);
}

/* Checks every tensor of stage st (grads in its own layout) against the
 * golden whole-model gradient, found through the whole-model stage whole. */
static void check_grads(const char *file, const llama_stage *st, const float *grads,
                        const llama_stage *whole, const float *golden_grads)
{
    for (int t = 0; t < st->n_tensors; t++) {
        const llama_tensor *ten = llama_stage_tensor(st, t);
        const llama_tensor *ref = llama_stage_find(whole, ten->kind, ten->layer);
        ck_assert_ptr_nonnull(ref);
        ck_assert_uint_eq(ten->count, ref->count);
        double e = kt_rel_err(grads + ten->offset, golden_grads + ref->offset,
                              ten->count, 1e-6);
        if (getenv("KT_VERBOSE"))
            printf("%s: %-22s rel err %.2e\n", file, ten->name, e);
        ck_assert_msg(e < TOL_GRAD, "%s: grad %s rel err %.3g", file, ten->name, e);
    }
}

START_TEST(test_whole_model)
{
    kt_golden g;
    load(_i, &g);
    const zb_model *m = &g.model;
    int N = g.batch * m->seq_len;
    zb_err err = {{0}};
    llama_stage st;
    ck_assert_int_eq(llama_stage_init(&st, m, 0, m->n_layers, 1, 1, &err), 0);
    const kt_record *params = kt_find(&g, "params");
    ck_assert_uint_eq(params->count, llama_stage_num_params(&st));
    int32_t *tok = kt_ints(kt_find(&g, "tokens"));
    int32_t *tgt = kt_ints(kt_find(&g, "targets"));
    float *logits = malloc(sizeof(float) * (size_t)N * m->vocab);
    float *grads = calloc(st.n_params, sizeof(float));
    llama_saved *sv = llama_saved_new(&st, g.batch);
    float loss = 0;
    ck_assert_int_eq(llama_stage_forward(&st, params->data, tok, NULL, tgt, sv,
                                         NULL, &loss, logits, &err), 0);
    double want = kt_find(&g, "loss")->data[0];
    ck_assert_msg(fabs(loss - want) < 1e-5 * fabs(want), "%s: loss %.7f want %.7f",
                  golden_files[_i], loss, want);
    double e = kt_rel_err(logits, kt_find(&g, "logits")->data, (size_t)N * m->vocab, 1e-6);
    if (getenv("KT_VERBOSE"))
        printf("%s: loss %.7f (jax %.7f), logits rel err %.2e\n", golden_files[_i],
               loss, want, e);
    ck_assert_msg(e < TOL_ACT, "%s: logits rel err %.3g", golden_files[_i], e);
    ck_assert_int_eq(llama_stage_backward(&st, params->data, sv, 1.0f, NULL, NULL,
                                          grads, &err), 0);
    check_grads(golden_files[_i], &st, grads, &st, kt_find(&g, "grads")->data);
    /* a perturbed gradient must fail the same comparison: the check bites */
    const llama_tensor *wq = llama_stage_find(&st, LLAMA_T_WQ, 0);
    grads[wq->offset] += 0.01f;
    ck_assert(kt_rel_err(grads + wq->offset, kt_find(&g, "grads")->data + wq->offset,
                         wq->count, 1e-6) > TOL_GRAD);
    llama_saved_free(sv);
    free(logits);
    free(grads);
    free(tok);
    free(tgt);
    llama_stage_free(&st);
    kt_golden_free(&g);
}
END_TEST

/* Copies the slice of the whole-model buffer that stage st holds. */
static float *slice_params(const llama_stage *st, const llama_stage *whole,
                           const float *all)
{
    float *p = malloc(sizeof(float) * st->n_params);
    for (int t = 0; t < st->n_tensors; t++) {
        const llama_tensor *ten = llama_stage_tensor(st, t);
        const llama_tensor *ref = llama_stage_find(whole, ten->kind, ten->layer);
        memcpy(p + ten->offset, all + ref->offset, sizeof(float) * ten->count);
    }
    return p;
}

START_TEST(test_every_boundary)
{
    kt_golden g;
    load(_i, &g);
    const zb_model *m = &g.model;
    const char *file = golden_files[_i];
    int L = m->n_layers, N = g.batch * m->seq_len, d = m->d_model;
    size_t Nd = (size_t)N * d;
    zb_err err = {{0}};
    llama_stage whole;
    ck_assert_int_eq(llama_stage_init(&whole, m, 0, L, 1, 1, &err), 0);
    const float *all = kt_find(&g, "params")->data;
    const float *acts = kt_find(&g, "acts")->data;   /* [L+1, N, d] */
    const float *dacts = kt_find(&g, "dacts")->data; /* [L+1, N, d] */
    const float *ggrads = kt_find(&g, "grads")->data;
    ck_assert_uint_eq(kt_find(&g, "acts")->count, (L + 1) * Nd);
    int32_t *tok = kt_ints(kt_find(&g, "tokens"));
    int32_t *tgt = kt_ints(kt_find(&g, "targets"));
    float *out = malloc(sizeof(float) * Nd), *dx = malloc(sizeof(float) * Nd);

    /* embedding-only stage: output = acts[0]; W from dacts[0] */
    {
        llama_stage st;
        ck_assert_int_eq(llama_stage_init(&st, m, 0, 0, 1, 0, &err), 0);
        float *p = slice_params(&st, &whole, all);
        float *gr = calloc(st.n_params, sizeof(float));
        llama_saved *sv = llama_saved_new(&st, g.batch);
        ck_assert_int_eq(llama_stage_forward(&st, p, tok, NULL, NULL, sv, out,
                                             NULL, NULL, &err), 0);
        ck_assert_msg(kt_rel_err(out, acts, Nd, 1e-6) < TOL_ACT, "%s: embedding out", file);
        ck_assert_int_eq(llama_stage_backward(&st, p, sv, 0, dacts, NULL, gr, &err), 0);
        check_grads(file, &st, gr, &whole, ggrads);
        llama_saved_free(sv);
        free(p);
        free(gr);
        llama_stage_free(&st);
    }
    /* one stage per layer, fed the golden stream */
    for (int l = 0; l < L; l++) {
        llama_stage st;
        ck_assert_int_eq(llama_stage_init(&st, m, l, l + 1, 0, 0, &err), 0);
        float *p = slice_params(&st, &whole, all);
        float *gr = calloc(st.n_params, sizeof(float));
        llama_saved *sv = llama_saved_new(&st, g.batch);
        ck_assert_int_eq(llama_stage_forward(&st, p, NULL, acts + l * Nd, NULL, sv,
                                             out, NULL, NULL, &err), 0);
        double e = kt_rel_err(out, acts + (l + 1) * Nd, Nd, 1e-6);
        ck_assert_msg(e < TOL_ACT, "%s: layer %d output rel err %.3g", file, l, e);
        ck_assert_int_eq(llama_stage_backward_b(&st, p, sv, 0, dacts + (l + 1) * Nd,
                                                dx, &err), 0);
        e = kt_rel_err(dx, dacts + l * Nd, Nd, 1e-6);
        if (getenv("KT_VERBOSE"))
            printf("%s: layer %d dX rel err %.2e\n", file, l, e);
        ck_assert_msg(e < TOL_GRAD, "%s: layer %d dX rel err %.3g", file, l, e);
        ck_assert_int_eq(llama_stage_backward_w(&st, sv, gr, &err), 0);
        check_grads(file, &st, gr, &whole, ggrads);
        llama_saved_free(sv);
        free(p);
        free(gr);
        llama_stage_free(&st);
    }
    /* head-only stage: loss from acts[L], dX = dacts[L] */
    {
        llama_stage st;
        ck_assert_int_eq(llama_stage_init(&st, m, L, L, 0, 1, &err), 0);
        float *p = slice_params(&st, &whole, all);
        float *gr = calloc(st.n_params, sizeof(float));
        llama_saved *sv = llama_saved_new(&st, g.batch);
        float loss;
        ck_assert_int_eq(llama_stage_forward(&st, p, NULL, acts + L * Nd, tgt, sv,
                                             NULL, &loss, NULL, &err), 0);
        double want = kt_find(&g, "loss")->data[0];
        ck_assert_msg(fabs(loss - want) < 1e-5 * fabs(want), "%s: head loss", file);
        ck_assert_int_eq(llama_stage_backward_b(&st, p, sv, 1.0f, NULL, dx, &err), 0);
        double e = kt_rel_err(dx, dacts + L * Nd, Nd, 1e-6);
        ck_assert_msg(e < TOL_GRAD, "%s: head dX rel err %.3g", file, e);
        ck_assert_int_eq(llama_stage_backward_w(&st, sv, gr, &err), 0);
        check_grads(file, &st, gr, &whole, ggrads);
        llama_saved_free(sv);
        free(p);
        free(gr);
        llama_stage_free(&st);
    }
    free(out);
    free(dx);
    free(tok);
    free(tgt);
    llama_stage_free(&whole);
    kt_golden_free(&g);
}
END_TEST

int main(void)
{
    kernels_init_threads(1);
    Suite *s = suite_create("kernels_golden");
    TCase *tc = tcase_create("golden");
    tcase_set_timeout(tc, 60);
    int n = (int)(sizeof golden_files / sizeof golden_files[0]);
    tcase_add_loop_test(tc, test_whole_model, 0, n);
    tcase_add_loop_test(tc, test_every_boundary, 0, n);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
