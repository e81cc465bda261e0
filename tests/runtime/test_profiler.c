/*
 * test_profiler.c: what runtime/profiler.h promises about its figures.
 *
 * The layer is timed as a stack of layers with two micro-batches in
 * flight, on one thread per CPU at once, and reported per layer.  The
 * times depend on the machine, but the memory figures must still be those
 * of ONE layer, exactly: the bytes a single-layer stage's saved state
 * holds after F and after B (llama_saved_bytes), which the planner's
 * memory model adds per layer.  For a model with a memory layer the stack
 * must stop before it (a memory layer's state differs).  The embedding's
 * and the head's figures are those of stages holding only them.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/llama.h"
#include "runtime/profiler.h"
#include "src/model.h"

/* Bytes held after F and after B by stage [l0, l1) (+ embedding/head) of
 * m at micro-batch 1. */
static void saved_bytes(const zb_model *m, int l0, int l1, int emb, int head, double *after_f,
                        double *after_b)
{
    zb_err err = { { 0 } };
    llama_stage st;
    ck_assert_msg(llama_stage_init(&st, m, l0, l1, emb, head, &err) == 0, "%s", err.msg);
    size_t np = llama_stage_num_params(&st), N = (size_t)m->seq_len, d = (size_t)m->d_model;
    float *params = malloc(sizeof(float) * (np ? np : 1)), *grads = calloc(np ? np : 1, sizeof(float));
    float *act = calloc(N * d, sizeof(float)), *out = malloc(sizeof(float) * N * d);
    float *dy = calloc(N * d, sizeof(float)), *dx = malloc(sizeof(float) * N * d);
    int32_t *tok = calloc(N, sizeof(int32_t));
    ck_assert(params && grads && act && out && dy && dx && tok);
    llama_stage_init_params(&st, params, 1);
    llama_saved *sv = llama_saved_new(&st, 1);
    ck_assert_ptr_nonnull(sv);
    float loss;
    ck_assert(llama_stage_forward(&st, params, emb ? tok : NULL, emb ? NULL : act, head ? tok : NULL,
                                  sv, head ? NULL : out, &loss, NULL, &err) == 0);
    *after_f = (double)llama_saved_bytes(sv);
    ck_assert(llama_stage_backward_b(&st, params, sv, 1.0f, head ? NULL : dy, emb ? NULL : dx,
                                     &err) == 0);
    *after_b = (double)llama_saved_bytes(sv);
    ck_assert(llama_stage_backward_w(&st, sv, grads, &err) == 0);
    llama_saved_free(sv);
    llama_stage_free(&st);
    free(params);
    free(grads);
    free(act);
    free(out);
    free(dy);
    free(dx);
    free(tok);
}

static void check_model(const char *name)
{
    zb_model m;
    zb_err err = { { 0 } };
    ck_assert_msg(model_load(name, &m, &err) == 0, "%s", err.msg);
    zb_profile p;
    ck_assert_msg(profiler_measure(&m, 1, 2, &p, &err) == 0, "%s", err.msg);
    double f, b;
    saved_bytes(&m, 0, 1, 0, 0, &f, &b); /* layer 0 is plain in both models */
    ck_assert_msg(p.layer.m_b == f && p.layer.m_w == b, "%s: layer %.0f/%.0f, one layer %.0f/%.0f",
                  name, p.layer.m_b, p.layer.m_w, f, b);
    saved_bytes(&m, 0, 0, 1, 0, &f, &b);
    ck_assert(p.embedding.m_b == f && p.embedding.m_w == b);
    saved_bytes(&m, 0, 0, 0, 1, &f, &b);
    ck_assert(p.head.m_b == f && p.head.m_w == b);
    ck_assert(p.layer.t_f > 0 && p.layer.t_b > 0 && p.layer.t_w > 0);
    ck_assert(p.embedding.t_w > 0 && p.head.t_f > 0 && p.head.t_b > 0 && p.head.t_w > 0);
    ck_assert_int_eq(p.micro_batch, 1);
}

START_TEST(layer_memory_is_one_layers_exactly)
{
    kernels_init_threads(1);
    check_model("tiny");
}
END_TEST

START_TEST(stack_stops_before_a_memory_layer)
{
    kernels_init_threads(1);
    check_model("tiny-mem"); /* memory layer at 2: the stack is layers 0-1 */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("profiler");
    TCase *tc = tcase_create("all");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, layer_memory_is_one_layers_exactly);
    tcase_add_test(tc, stack_stops_before_a_memory_layer);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
