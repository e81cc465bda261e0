/*
 * test_cost_layout.c: the layout (src/layout.h) and what the cost model
 * charges for it (docs/cost-model.md, "Layouts").
 *
 * Activation memory per layer is checked against Korthikanti et al. 2022,
 * Table 2, literally: a GPT-style layer (4h GeLU MLP, dropout, no flash
 * attention, bf16) keeps sbh(34 + 5as/h) bytes; under tensor parallel t
 * sbh(10 + 24/t + 5as/(ht)); with sequence parallel sbh(34/t + 5as/(ht));
 * with selective (attention-core) recompute sbh(10 + 24/t), and with both
 * 34sbh/t.  The memory-bound bytes per token and the collectives B pays
 * (SP's gathers, full recompute's rerun) are checked to the formula
 * (issue 27's calibration).  The rest checks the direction and size of
 * each price: compute over t and c, ZeRO's bytes per parameter, offload
 * moving memory without time while PCIe keeps up, TP overlap, and that
 * the default layout changes nothing.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "src/cost_model.h"
#include "src/cost_parts.h"
#include "src/layout.h"

/* Korthikanti's 22B: 48 layers, h 6144, 64 heads, s 2048, GPT-style. */
static zb_model gpt22b(int b)
{
    zb_model m;
    ck_assert_int_eq(model_preset("28.3B", &m, NULL), 0);
    m.n_layers = 48;
    m.d_model = 6144;
    m.n_heads = m.n_kv_heads = 64;
    m.d_ff = 4 * 6144;
    m.seq_len = 2048;
    m.vocab = 51200;
    m.micro_batch = b;
    return m;
}

static cost_part layer_of(const zb_model *m, const zb_gpu *g, const cost_options *o)
{
    cost_part l, e, h;
    zb_err err = { { 0 } };
    ck_assert_msg(cost_parts(m, g, o, &l, &e, &h, &err) == 0, "%s", err.msg);
    return l;
}

static void opts(cost_options *o, int tp, int sp, int rc)
{
    cost_options_default(o);
    o->flash_attention = 0;
    o->layout.tp = tp;
    o->layout.sp = sp;
    o->recompute = rc;
}

START_TEST(test_korthikanti_table2)
{
    zb_model m = gpt22b(1);
    zb_gpu g;
    gpu_preset("A100-80G", &g, NULL);
    double s = m.seq_len, b = 1, h = m.d_model, a = m.n_heads, sbh = s * b * h;
    for (int t = 1; t <= 8; t *= 2) {
        cost_options o;
        opts(&o, t, 0, COST_RC_NONE);
        double want = t == 1 ? sbh * (34 + 5 * a * s / h) : sbh * (10 + 24.0 / t + 5 * a * s / (h * t));
        ck_assert_double_eq_tol(layer_of(&m, &g, &o).m_b, want, want * 1e-12);
        opts(&o, t, 0, COST_RC_ATTN);
        want = sbh * (10 + 24.0 / t);
        ck_assert_double_eq_tol(layer_of(&m, &g, &o).m_b, want, want * 1e-12);
        if (t == 1)
            continue;
        opts(&o, t, 1, COST_RC_NONE);
        want = sbh * (34.0 / t + 5 * a * s / (h * t));
        ck_assert_double_eq_tol(layer_of(&m, &g, &o).m_b, want, want * 1e-12);
        opts(&o, t, 1, COST_RC_ATTN);
        want = 34 * sbh / t;
        ck_assert_double_eq_tol(layer_of(&m, &g, &o).m_b, want, want * 1e-12);
        opts(&o, t, 0, COST_RC_FULL);
        ck_assert_double_eq_tol(layer_of(&m, &g, &o).m_b, 2 * sbh, 1);
    }
}
END_TEST

/* The memory-bound bytes of a GPT layer per token (docs/cost-model.md,
 * "Memory-bound work"), e = 2: F moves 22h (norms 2 x 4h, joins 2 x 7h)
 * over the replicas, plus the GeLU's 4f and the scores' 9as over the TP
 * ranks; B moves 34h (norms 2 x 6h, joins 2 x 11h), 6f and 11as.  Flash
 * attention keeps the scores on chip; recompute reruns its share. */
START_TEST(test_memory_bound_bytes)
{
    zb_model m = gpt22b(1);
    zb_gpu g;
    gpu_preset("A100-80G", &g, NULL);
    double s = m.seq_len, h = m.d_model, f = m.d_ff, a = m.n_heads, tok = s;
    for (int t = 1; t <= 8; t *= 2)
        for (int sp = 0; sp <= (t > 1); sp++) {
            double rep = sp ? t : 1;
            cost_options o;
            opts(&o, t, sp, COST_RC_NONE);
            cost_part l = layer_of(&m, &g, &o);
            double want_f = tok * (22 * h / rep + (4 * f + 9 * a * s) / t);
            double want_b = tok * (34 * h / rep + (6 * f + 11 * a * s) / t);
            ck_assert_double_eq_tol(l.hbm_f, want_f, want_f * 1e-12);
            ck_assert_double_eq_tol(l.hbm_b, want_b, want_b * 1e-12);
            opts(&o, t, sp, COST_RC_FULL);
            ck_assert_double_eq_tol(layer_of(&m, &g, &o).hbm_b, want_b + want_f, want_b * 1e-12);
            opts(&o, t, sp, COST_RC_ATTN);
            ck_assert_double_eq_tol(layer_of(&m, &g, &o).hbm_b, want_b + tok * 9 * a * s / t, want_b * 1e-12);
            opts(&o, t, sp, COST_RC_NONE);
            o.flash_attention = 1;
            l = layer_of(&m, &g, &o);
            ck_assert_double_eq_tol(l.hbm_f, tok * (22 * h / rep + 4 * f / t), want_f * 1e-12);
        }
    /* One GPU: F's time is its matmuls at the efficiency plus its bytes
     * at the HBM bandwidth, and a slower memory makes it slower. */
    cost_options o;
    opts(&o, 1, 0, COST_RC_NONE);
    cost_part l = layer_of(&m, &g, &o);
    ck_assert_double_eq_tol(l.t_f, l.f_flops / (g.peak_flops * g.efficiency) + l.hbm_f / g.hbm_bw, l.t_f * 1e-12);
    zb_gpu slow = g;
    slow.hbm_bw /= 2;
    ck_assert(layer_of(&m, &slow, &o).t_f > l.t_f);
    /* The optimizer step: 42 bytes a parameter (38 of them the state's,
     * sharded by ZeRO-1) at the HBM bandwidth. */
    ck_assert_double_eq_tol(cost_t_optimizer_step(&m, &g, &o, 1e9), 42e9 / g.hbm_bw, 1e-12);
    o.zero1_dp = 4;
    ck_assert_double_eq_tol(cost_t_optimizer_step(&m, &g, &o, 1e9), (38e9 / 4 + 4e9) / g.hbm_bw, 1e-12);
}
END_TEST

/* TP collectives, exposed: B's equal F's; under SP B adds two
 * all-gathers, half an all-reduce each (B's = 1.5 F's); full recompute
 * reruns F's in B (B's = 2 F's). */
START_TEST(test_tp_collectives_in_b)
{
    zb_model m = gpt22b(4);
    zb_gpu g;
    gpu_preset("A100-80G", &g, NULL);
    double rate = g.peak_flops * g.efficiency;
    struct { int sp, rc; double ratio; } rows[] = {
        { 0, COST_RC_NONE, 1 }, { 1, COST_RC_NONE, 1.5 }, { 0, COST_RC_FULL, 2 }, { 1, COST_RC_ATTN, 1.5 },
    };
    for (int i = 0; i < 4; i++) {
        cost_options o;
        opts(&o, 8, rows[i].sp, rows[i].rc);
        o.tp_comm_overlap = 0;
        cost_part l = layer_of(&m, &g, &o);
        double comm_f = l.t_f - l.f_flops / rate - l.hbm_f / g.hbm_bw;
        double comm_b = l.t_b - l.b_flops / rate - l.hbm_b / g.hbm_bw;
        ck_assert(comm_f > 0);
        ck_assert_double_eq_tol(comm_b, rows[i].ratio * comm_f, comm_f * 1e-9);
    }
}
END_TEST

START_TEST(test_compute_over_tp_and_cp)
{
    zb_model m;
    model_preset("llama3-70b", &m, NULL);
    zb_gpu g;
    gpu_preset("H100-80G", &g, NULL);
    cost_options o;
    cost_options_default(&o);
    cost_part one = layer_of(&m, &g, &o);
    o.layout.tp = 4;
    cost_part four = layer_of(&m, &g, &o);
    ck_assert_double_eq_tol(four.f_flops * 4, one.f_flops, one.f_flops * 1e-12);
    ck_assert_double_eq_tol(four.w_flops * 4, one.w_flops, one.w_flops * 1e-12);
    ck_assert(four.t_f >= one.t_f / 4);       /* the all-reduces cost something or hide */
    ck_assert(four.t_f < one.t_f / 4 * 1.5);  /* ...but not half a GEMM's worth on NVLink */
    o.tp_comm_overlap = 0;
    cost_part exposed = layer_of(&m, &g, &o);
    ck_assert(exposed.t_f > four.t_f);
    ck_assert(exposed.t_b > four.t_b);
    /* context parallel: half the tokens, half the activations */
    cost_options_default(&o);
    o.layout.cp = 2;
    cost_part cp = layer_of(&m, &g, &o);
    ck_assert_double_eq_tol(cp.m_b * 2, one.m_b, one.m_b * 1e-9);
    ck_assert_double_eq_tol(cp.w_flops * 2, one.w_flops, one.w_flops * 1e-12);
    ck_assert(cp.t_f >= one.t_f / 2);
    /* the whole model's FLOPs (MFU) do not depend on the layout */
    double whole = cost_model_flops(&m, &o);
    o.layout.tp = 8;
    ck_assert_double_eq_tol(cost_model_flops(&m, &o), whole, whole * 1e-12);
}
END_TEST

START_TEST(test_zero_levels)
{
    zb_model m;
    model_preset("llama3-8b", &m, NULL);
    cost_options o;
    cost_options_default(&o);
    o.zero1_dp = 8;
    ck_assert_double_eq_tol(cost_bytes_per_param(&m, &o), 2 + 4 + 12.0 / 8, 1e-12);
    o.layout.zero = LAYOUT_ZERO2;
    ck_assert_double_eq_tol(cost_bytes_per_param(&m, &o), 2 + 4.0 / 8 + 12.0 / 8, 1e-12);
    o.layout.zero = LAYOUT_ZERO3;
    ck_assert_double_eq_tol(cost_bytes_per_param(&m, &o), 18.0 / 8, 1e-12);
    /* ZeRO-3 gathers weights per layer: some transient, some time over 8 replicas */
    zb_gpu g;
    gpu_preset("H100-80G", &g, NULL);
    cost_part z3 = layer_of(&m, &g, &o);
    o.layout.zero = LAYOUT_ZERO1;
    cost_part z1 = layer_of(&m, &g, &o);
    ck_assert(z3.transient >= 2 * 2 * z1.params);
    ck_assert(z3.t_f >= z1.t_f && z3.t_w >= z1.t_w);
}
END_TEST

START_TEST(test_offload)
{
    zb_model m;
    model_preset("llama3-8b", &m, NULL);
    zb_gpu g;
    gpu_preset("H100-80G", &g, NULL);
    cost_options o;
    cost_options_default(&o);
    cost_part none = layer_of(&m, &g, &o);
    o.layout.offload = 0.5;
    cost_part half = layer_of(&m, &g, &o);
    ck_assert_double_eq_tol(half.m_b, none.m_b / 2, none.m_b * 1e-12);
    /* PCIe keeps up with one layer's F+B+W at 8k tokens: hidden */
    ck_assert_double_eq_tol(half.t_f, none.t_f, 1e-12);
    /* a slow host link shows */
    g.pcie_bw = 1e9;
    cost_part slow = layer_of(&m, &g, &o);
    double excess = 0.5 * none.m_b / 1e9 - (none.t_f + none.t_b + none.t_w);
    ck_assert(excess > 0);
    ck_assert_double_eq_tol(slow.t_f, none.t_f + excess, 1e-9);
    ck_assert(slow.t_b > none.t_b);
}
END_TEST

START_TEST(test_default_layout_is_today)
{
    zb_model m;
    model_preset("llama3-8b", &m, NULL);
    zb_gpu g;
    gpu_preset("H100-80G", &g, NULL);
    cost_options a, b;
    cost_options_default(&a);
    cost_options_default(&b);
    memset(&b.layout, 0, sizeof b.layout); /* a zeroed layout reads as the default */
    cost_stage sa[4], sb[4];
    ck_assert_int_eq(cost_stages(&m, &g, &a, 4, 0, sa, NULL), 0);
    ck_assert_int_eq(cost_stages(&m, &g, &b, 4, 0, sb, NULL), 0);
    ck_assert(memcmp(sa, sb, sizeof sa) == 0);
}
END_TEST

START_TEST(test_layout_struct)
{
    zb_layout l;
    layout_default(&l);
    ck_assert_int_eq(layout_gpus(&l), 1);
    ck_assert(!layout_is_extended(&l));
    zb_model m;
    model_preset("llama3-70b", &m, NULL);
    zb_err err = { { 0 } };
    l.tp = 4;
    l.sp = 1;
    l.cp = 2;
    l.pp = 8;
    l.chunks = 2;
    l.dp = 2;
    l.zero = 3;
    l.offload = 0.5;
    ck_assert_int_eq(layout_check(&l, &m, 8, &err), 0);
    ck_assert_int_eq(layout_gpus(&l), 128);
    char buf[64];
    ck_assert_str_eq(layout_text(&l, buf, sizeof buf), "tp4+sp cp2 pp8 v2 dp2 zero3 off0.5");
    cJSON *j = layout_to_json(&l);
    zb_layout back;
    layout_default(&back);
    ck_assert_int_eq(layout_from_json(j, &back, &err), 0);
    ck_assert(memcmp(&back, &l, sizeof l) == 0);
    cJSON_Delete(j);
    /* refusals: one clear line each */
    l.tp = 16;
    ck_assert_int_eq(layout_check(&l, &m, 8, &err), -1);
    ck_assert(strstr(err.msg, "exceed a node"));
    l.tp = 3;
    ck_assert_int_eq(layout_check(&l, &m, 8, &err), -1);
    l.tp = 1;
    ck_assert_int_eq(layout_check(&l, &m, 8, &err), -1); /* sp without tp */
    ck_assert(strstr(err.msg, "sequence parallelism"));
    l.sp = 0;
    l.tp = 16;
    l.cp = 1;
    ck_assert_int_eq(layout_check(&l, &m, 16, &err), -1); /* 16 does not divide 8 KV heads */
    ck_assert(strstr(err.msg, "KV heads"));
    l.tp = 1;
    l.zero = 4;
    ck_assert_int_eq(layout_check(&l, &m, 8, &err), -1);
    cJSON *bad = cJSON_Parse("{\"tensor_parallel\": 2, \"shards\": 3}");
    ck_assert_int_eq(layout_from_json(bad, &back, &err), -1);
    ck_assert(strstr(err.msg, "shards"));
    cJSON_Delete(bad);
    ck_assert_int_eq(layout_parse_zero("fsdp"), 3);
    ck_assert_int_eq(layout_parse_zero("4"), -1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cost_layout");
    TCase *tc = tcase_create("layout");
    tcase_add_test(tc, test_korthikanti_table2);
    tcase_add_test(tc, test_memory_bound_bytes);
    tcase_add_test(tc, test_tp_collectives_in_b);
    tcase_add_test(tc, test_compute_over_tp_and_cp);
    tcase_add_test(tc, test_zero_levels);
    tcase_add_test(tc, test_offload);
    tcase_add_test(tc, test_default_layout_is_today);
    tcase_add_test(tc, test_layout_struct);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
