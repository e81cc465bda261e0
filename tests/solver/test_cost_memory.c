/*
 * test_cost_memory.c: memory layers in the cost model (src/cost_memory.c)
 * and in `zbsched search`'s plan.
 *
 *   - parameters: cost_param_count of tiny-mem is the kernels' exact count
 *     (500416: tiny's 271040 less the FFN's 3·64·256, plus the 4096×64
 *     value table, the 2·2·64·16 keys and three 64×64 projections); a
 *     shared table is counted once;
 *   - FLOPs: the memory block's F of tiny-mem by hand, per token
 *     2·64·64 + 2·2·64·32 + 2·2·8·64 + 4·64·64 = 34816 against the FFN's
 *     2·64·256·3 = 98304;
 *   - the split: two adjacent heavy memory layers go to different stages
 *     (they would double one stage's static memory) at no cost in time,
 *     a plain model's split is untouched, and a shared table's layers stay
 *     on one stage or the split is refused;
 *   - `zbsched search --model FILE` with memory layers says in its plan
 *     where they went and why.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/cost_model.h"
#include "tests/common/cli_run.h"

static zb_model preset(const char *name)
{
    zb_model m;
    zb_err err = { { 0 } };
    ck_assert_msg(model_preset(name, &m, &err) == 0, "%s", err.msg);
    return m;
}

static zb_gpu h100(void)
{
    zb_gpu g;
    zb_err err = { { 0 } };
    ck_assert_int_eq(gpu_preset("H100-80G", &g, &err), 0);
    return g;
}

START_TEST(param_counts)
{
    zb_model tiny = preset("tiny"), mem = preset("tiny-mem");
    ck_assert_double_eq(cost_param_count(&tiny), 271040);
    ck_assert_double_eq(cost_param_count(&mem), 500416);
    /* two memory layers sharing one table: the table once */
    mem.memory.n_layers = 2;
    mem.memory.layers[0] = 1;
    mem.memory.layers[1] = 3;
    mem.memory.shared_values = 1;
    double per_layer = 64 * 64 + 2 * 2 * 64 * 16 + 2 * 64 * 64 - 3 * 64 * 256;
    ck_assert_double_eq(cost_param_count(&mem), 271040 + 2 * per_layer + 4096 * 64);
    mem.memory.shared_values = 0;
    ck_assert_double_eq(cost_param_count(&mem), 271040 + 2 * (per_layer + 4096 * 64));
}
END_TEST

START_TEST(flops_by_hand)
{
    zb_model m = preset("tiny-mem");
    zb_gpu g = h100();
    cost_options o;
    cost_options_default(&o);
    cost_part d;
    double values;
    cost_memory_delta(&m, &g, &o, &d, &values);
    double t = 64.0 * 4;
    ck_assert_double_eq_tol(d.f_flops, t * (34816 - 98304), 1e-6);
    ck_assert_double_eq(values, 4096.0 * 64);
    /* MFU's model FLOPs count the memory block, not the FFN it replaced */
    zb_model tiny = preset("tiny");
    ck_assert_double_eq_tol(cost_model_flops(&m, &o) - cost_model_flops(&tiny, &o),
                            d.useful_flops, 1e-3);
    ck_assert(cost_model_flops(&m, &o) < cost_model_flops(&tiny, &o));
    ck_assert(d.params > 0);                   /* the table outweighs the FFN */
    ck_assert(d.f_flops < 0 && d.w_flops < 0); /* with fewer FLOPs */
    /* the gathers are memory traffic: H·k rows of v fp32 per token */
    ck_assert_double_eq(d.hbm_f, t * 2 * 8 * 64 * 4);
    ck_assert(d.t_f > d.f_flops / (g.peak_flops * g.efficiency));
    /* a stage with the memory layer has the table's static bytes */
    cost_stage st[2];
    zb_err err = { { 0 } };
    o.split = COST_SPLIT_PAPER;
    ck_assert_int_eq(cost_stages(&m, &g, &o, 2, 0, st, &err), 0);
    cost_stage pl[2];
    ck_assert_int_eq(cost_stages(&tiny, &g, &o, 2, 0, pl, &err), 0);
    ck_assert_int_eq(st[1].first_layer, 2); /* paper split [2, 2]: layer 2 on stage 1 */
    ck_assert_double_eq(st[0].static_bytes, pl[0].static_bytes);
    ck_assert_double_eq_tol(st[1].static_bytes - pl[1].static_bytes,
                            d.params * cost_bytes_per_param(&m, &o), 1e-3);
}
END_TEST

/* llama3-8b with heavy memory layers at 8 and 9. */
static zb_model heavy(int shared)
{
    zb_model m = preset("llama3-8b");
    m.memory.n_layers = 2;
    m.memory.layers[0] = 8;
    m.memory.layers[1] = 9;
    m.memory.n_keys = 512;
    m.memory.topk = 32;
    m.memory.heads = 4;
    m.memory.k_dim = 512;
    m.memory.value_dim = 4096;
    m.memory.shared_values = shared;
    return m;
}

static int stage_of(const int *split, int S, int layer)
{
    int first = 0;
    for (int s = 0; s < S; s++) {
        if (layer < first + split[s])
            return s;
        first += split[s];
    }
    return -1;
}

START_TEST(split_by_time_then_memory)
{
    zb_gpu g = h100();
    cost_options o;
    cost_options_default(&o);
    o.split = COST_SPLIT_BALANCED;
    zb_err err = { { 0 } };
    int S = 8, split[8], plain_split[8];
    zb_model m = heavy(0);
    ck_assert_int_eq(cost_split_layers(&m, &g, &o, S, split, &err), 0);
    int sum = 0;
    for (int i = 0; i < S; i++)
        sum += split[i];
    ck_assert_int_eq(sum, 32);
    ck_assert_int_ne(stage_of(split, S, 8), stage_of(split, S, 9));
    /* no slower than the time-only optimum by more than the slack */
    cost_stage a[8], b[8];
    ck_assert_int_eq(cost_stages(&m, &g, &o, S, 0, a, &err), 0);
    double worst_time = 0, worst_static = 0;
    for (int i = 0; i < S; i++) {
        worst_time = fmax(worst_time, a[i].t_f + a[i].t_b + a[i].t_w);
        worst_static = fmax(worst_static, a[i].static_bytes);
    }
    /* putting both on one stage ([..,8,9,..] together) costs more memory */
    zb_model plain = preset("llama3-8b");
    ck_assert_int_eq(cost_split_layers(&plain, &g, &o, S, plain_split, &err), 0);
    ck_assert_int_eq(stage_of(plain_split, S, 8), stage_of(plain_split, S, 9));
    cost_options po = o;
    po.split = COST_SPLIT_PAPER; /* the count rule ignores memory layers */
    ck_assert_int_eq(cost_stages(&m, &g, &po, S, 0, b, &err), 0);
    int together = 0;
    double worst_static_b = 0;
    for (int i = 0; i < S; i++) {
        worst_static_b = fmax(worst_static_b, b[i].static_bytes);
        together |= b[i].first_layer <= 8 && b[i].first_layer + b[i].n_layers > 9;
    }
    ck_assert(together);
    ck_assert(worst_static < worst_static_b);
    /* shared table: both layers on one stage */
    zb_model sh = heavy(1);
    ck_assert_int_eq(cost_split_layers(&sh, &g, &o, S, split, &err), 0);
    ck_assert_int_eq(stage_of(split, S, 8), stage_of(split, S, 9));
    /* a shared table across layers 0 and 31 cannot be kept on one stage of 8 */
    sh.memory.layers[0] = 0;
    sh.memory.layers[1] = 31;
    ck_assert_int_eq(cost_split_layers(&sh, &g, &o, S, split, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "shared memory value table"));
    (void)worst_time;
}
END_TEST

START_TEST(search_plan_says_so)
{
    FILE *f = fopen("mem-model.json", "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "{\"base\": \"llama3-8b\", \"name\": \"mem8b\", \"memory\": {\"layers\": [8, 9], "
               "\"keys\": 262144, \"topk\": 32, \"heads\": 4, \"k_dim\": 512, "
               "\"value_dim\": 4096}}\n");
    fclose(f);
    static char out[1 << 16], err[4096];
    int rc = cli_run(NULL, NULL, "search --mem 80G --model mem-model.json --gpus 8 "
                     "--recompute off --max-micro-batch 1 --split balanced -o mem-best.json",
                     out, sizeof out, err, sizeof err);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_ptr_nonnull(strstr(out, "memory layers 8 -> stage"));
    ck_assert_ptr_nonnull(strstr(out, "balanced-time-then-memory split, placed by time and memory"));
    char *text = NULL;
    size_t len = 0;
    FILE *b = fopen("mem-best.json", "r");
    ck_assert_ptr_nonnull(b);
    text = calloc(1, 1 << 20);
    len = fread(text, 1, (1 << 20) - 1, b);
    fclose(b);
    ck_assert(len > 0);
    ck_assert_ptr_nonnull(strstr(text, "\"layer_placement\""));
    ck_assert_ptr_nonnull(strstr(text, "memory layers placed by time and memory"));
    ck_assert_ptr_nonnull(strstr(text, "\"memory_layer_stages\""));
    ck_assert_ptr_nonnull(strstr(text, "balanced-time-then-memory"));
    ck_assert_ptr_nonnull(strstr(text, "\"memory\""));
    free(text);
    remove("mem-best.json");
    /* the default split search starts from that split and says so */
    rc = cli_run(NULL, NULL, "search --mem 80G --model mem-model.json --gpus 8 "
                 "--recompute off --max-micro-batch 1 -o mem-best.json",
                 out, sizeof out, err, sizeof err);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_ptr_nonnull(strstr(out, "memory layers 8 -> stage"));
    ck_assert_ptr_nonnull(strstr(out, "placed by time and memory"));
    remove("mem-best.json");
    /* a bad memory block is one line and no output */
    f = fopen("mem-bad.json", "w");
    fprintf(f, "{\"base\": \"tiny\", \"memory\": {\"layers\": [1], \"keys\": 1000}}\n");
    fclose(f);
    rc = cli_run(NULL, NULL, "search --mem 80G --model mem-bad.json -o mem-bad-out.json", out,
                 sizeof out, err, sizeof err);
    ck_assert_int_ne(rc, 0);
    cli_assert_one_line(err, "perfect square");
    cli_assert_no_file("mem-bad-out.json");
    remove("mem-bad.json");
    remove("mem-model.json");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("solver_cost_memory");
    TCase *tc = tcase_create("memory");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, param_counts);
    tcase_add_test(tc, flops_by_hand);
    tcase_add_test(tc, split_by_time_then_memory);
    tcase_add_test(tc, search_plan_says_so);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
