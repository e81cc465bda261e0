/*
 * test_param_count.c: the one parameter count (src/param_count.h) is the
 * kernels' layout (kernels/cpu/llama.h, llama_stage_init).
 *
 *   - every preset, split into 1 to 4 contiguous stages at every cut the
 *     kernels accept: param_stage equals llama_stage_num_params stage by
 *     stage, and the stages sum to param_count and cost_param_count;
 *   - memory layers: tiny-mem, two memory layers with and without a
 *     shared value table (a shared table on the stage of the first), and
 *     the norm-only head of vocabulary parallelism.
 */
#include <check.h>
#include <string.h>

#include "kernels/cpu/llama.h"
#include "src/cost_model.h"
#include "src/param_count.h"

/* Checks param_stage against llama_stage_init for stage [l0, l1); 1 when
 * the kernels accept the stage (0: a stage they refuse, not compared). */
static int stage_agrees(const zb_model *m, int l0, int l1, int emb, int head, double *sum)
{
    llama_stage st;
    zb_err err = { { 0 } };
    if (llama_stage_init(&st, m, l0, l1, emb, head, &err) != 0)
        return 0;
    double want = (double)llama_stage_num_params(&st);
    llama_stage_free(&st);
    ck_assert_msg(param_stage(m, l0, l1, emb, head) == want,
                  "%s [%d, %d) emb %d head %d: param_stage %.0f, kernels %.0f", m->name, l0, l1,
                  emb, head, param_stage(m, l0, l1, emb, head), want);
    *sum += want;
    return 1;
}

/* Every split of m into 1..4 stages (cuts c1 <= c2 <= c3), compared stage
 * by stage and in total; returns how many splits the kernels accepted. */
static int every_split_agrees(const zb_model *m)
{
    int L = m->n_layers, accepted = 0;
    for (int S = 1; S <= 4; S++) {
        int cut[5] = { 0 };
        cut[S] = L;
        /* enumerate nondecreasing cuts */
        int c[3] = { 0, 0, 0 };
        for (;;) {
            for (int i = 1; i < S; i++)
                cut[i] = c[i - 1];
            int ok = 1;
            for (int i = 1; i < S && ok; i++)
                ok = cut[i] >= cut[i - 1];
            double sum = 0;
            for (int i = 0; i < S && ok; i++)
                ok = stage_agrees(m, cut[i], cut[i + 1], i == 0, i == S - 1 ? LLAMA_HEAD_FULL : 0,
                                  &sum);
            if (ok) {
                ck_assert_msg(sum == param_count(m), "%s, %d stages: %.0f against %.0f", m->name,
                              S, sum, param_count(m));
                accepted++;
            }
            int k = 0; /* next combination of the S-1 cuts in [0, L] */
            while (k < S - 1 && ++c[k] > L)
                c[k++] = 0;
            if (k >= S - 1)
                break;
            if (L > 16 && (S > 2 || c[0] > 4))
                break; /* large presets: the first cuts are enough */
        }
    }
    return accepted;
}

START_TEST(presets_agree_with_the_kernels)
{
    char names[512];
    model_preset_names(names, sizeof names);
    int compared = 0;
    for (char *tok = strtok(names, ", "); tok; tok = strtok(NULL, ", ")) {
        zb_model m;
        zb_err err = { { 0 } };
        ck_assert_msg(model_preset(tok, &m, &err) == 0, "%s", err.msg);
        if (!m.swiglu || m.tied_embedding || m.rope_theta <= 0)
            continue; /* the kernels are Llama-style only */
        ck_assert_msg(cost_param_count(&m) == param_count(&m), "%s", tok);
        compared += every_split_agrees(&m) > 0;
    }
    ck_assert_int_ge(compared, 3);
}
END_TEST

START_TEST(memory_layers_agree_with_the_kernels)
{
    zb_model m;
    zb_err err = { { 0 } };
    ck_assert_int_eq(model_preset("tiny-mem", &m, &err), 0);
    ck_assert_int_eq(every_split_agrees(&m) > 0, 1);
    ck_assert_double_eq(param_count(&m), 500416);
    m.memory.n_layers = 2;
    m.memory.layers[0] = 1;
    m.memory.layers[1] = 3;
    for (int shared = 0; shared <= 1; shared++) {
        m.memory.shared_values = shared;
        /* shared: the kernels refuse a split that parts the table's layers */
        ck_assert_int_gt(every_split_agrees(&m), 0);
    }
    m.memory.shared_values = 0;
    double sum = 0; /* vocabulary parallelism's last stage: the norm only */
    ck_assert_int_eq(stage_agrees(&m, 2, 4, 0, LLAMA_HEAD_NORM_ONLY, &sum), 1);
    ck_assert_double_eq(param_stage(&m, 2, 4, 0, LLAMA_HEAD_FULL) - sum,
                        (double)m.d_model * m.vocab);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("param_count");
    TCase *tc = tcase_create("agree");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, presets_agree_with_the_kernels);
    tcase_add_test(tc, memory_layers_agree_with_the_kernels);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
