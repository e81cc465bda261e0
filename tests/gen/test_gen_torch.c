/*
 * test_gen_torch.c: zbsched's generators against the orders PyTorch itself
 * computes, at the (p, m) shapes of issue 10: (4, 8), (4, 16), (8, 16),
 * two chunks per device.
 *
 * The CSV files in tests/gen/torch/ were written by tools/torch/dump_orders.py from
 * torch.distributed.pipelining's own order code (torch 2.15), so these
 * tests are an independent check that needs no PyTorch at run time:
 *
 *   - interleaved-zb must give exactly PyTorch's ScheduleInterleavedZeroBubble
 *     order on every device, and so simulate to the same cost on unit costs
 *     (51, 99 and 103 units);
 *   - on unit costs it must beat PyTorch's ScheduleInterleaved1F1B, whose
 *     order may differ from Megatron's (our `interleaved`) in its warm-up.
 */
#include "schedules/gen.h"
#include "src/sim.h"
#include "src/torch_csv.h"
#include "src/validate.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Loads tests/gen/torch/NAME with unit costs (F = B = W = 1, fused BW = 2,
 * no transfer time), validated. */
static sched_t *load_torch(const char *name)
{
    const char *root = getenv("ZB_SOURCE_ROOT");
    ck_assert_msg(root != NULL, "ZB_SOURCE_ROOT is not set (run through meson test)");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/gen/torch/%s", root, name);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof text, f);
    fclose(f);
    ck_assert(n < sizeof text);
    sched_t *s = NULL;
    zb_err err = { "" };
    ck_assert_msg(torch_csv_read(text, n, 0, &s, &err) == 0, "%s: %s", name, err.msg);
    sched_set_costs(s, 1, 1, 1, 0);
    ck_assert_msg(sched_validate(s, &err) == 0, "%s: %s", name, err.msg);
    return s;
}

static double cost_of(const sched_t *s)
{
    sim_result r = { 0 };
    zb_err err = { "" };
    ck_assert_msg(sim_run(s, &r, &err) == 0, "%s", err.msg);
    double c = r.cost;
    sim_result_free(&r);
    return c;
}

static sched_t *ours(const char *kind, int p, int m)
{
    gen_params g;
    gen_params_default(&g);
    g.stages = p;
    g.microbatches = m;
    g.chunks = 2;
    sched_t *s = NULL;
    zb_err err = { "" };
    ck_assert_msg(gen_lookup(kind)(&g, &s, &err) == 0, "%s: %s", kind, err.msg);
    return s;
}

static const int shapes[][2] = { { 4, 8 }, { 4, 16 }, { 8, 16 } };

START_TEST(interleaved_zb_is_torchs_order)
{
    static const double want_cost[] = { 51, 99, 103 };
    for (int i = 0; i < 3; i++) {
        int p = shapes[i][0], m = shapes[i][1];
        char name[64];
        snprintf(name, sizeof name, "interleaved-zb-p%d-m%d.csv", p, m);
        sched_t *t = load_torch(name), *s = ours("interleaved-zb", p, m);
        ck_assert_int_eq(s->n_devices, t->n_devices);
        ck_assert_int_eq(s->n_stages, t->n_stages);
        for (int st = 0; st < s->n_stages; st++)
            ck_assert_int_eq(s->stage_device[st], t->stage_device[st]);
        for (int d = 0; d < p; d++) {
            ck_assert_int_eq(s->dev[d].n_ops, t->dev[d].n_ops);
            for (int k = 0; k < s->dev[d].n_ops; k++) {
                sched_op a = s->dev[d].ops[k], b = t->dev[d].ops[k];
                ck_assert_msg(a.kind == b.kind && a.stage == b.stage && a.mb == b.mb,
                              "%s device %d op %d: ours %s%d@%d, torch %s%d@%d", name, d, k,
                              op_kind_name(a.kind), (int)a.mb, (int)a.stage,
                              op_kind_name(b.kind), (int)b.mb, (int)b.stage);
            }
        }
        double cs = cost_of(s), ct = cost_of(t);
        ck_assert_double_le(cs, ct);
        ck_assert_double_eq(cs, want_cost[i]);
        sched_free(s);
        sched_free(t);
    }
}
END_TEST

START_TEST(interleaved_zb_beats_interleaved_1f1b)
{
    for (int i = 0; i < 3; i++) {
        int p = shapes[i][0], m = shapes[i][1];
        char name[64];
        snprintf(name, sizeof name, "interleaved-p%d-m%d.csv", p, m);
        sched_t *t = load_torch(name), *s = ours("interleaved-zb", p, m);
        sched_t *mg = ours("interleaved", p, m);
        double zb = cost_of(s), torch_1f1b = cost_of(t), megatron = cost_of(mg);
        ck_assert_msg(zb < torch_1f1b && zb < megatron, "p=%d m=%d: zb %g, torch 1F1B-I %g, "
                      "megatron 1F1B-I %g", p, m, zb, torch_1f1b, megatron);
        sched_free(s);
        sched_free(t);
        sched_free(mg);
    }
}
END_TEST

/* The memory-limited variant never exceeds its limit, returns PyTorch's
 * order when that fits, and refuses a limit nothing fits with the
 * smallest peak it could reach. */
START_TEST(interleaved_zb_memory_limit)
{
    gen_params g;
    gen_params_default(&g);
    g.stages = 4;
    g.microbatches = 8;
    g.chunks = 2;
    double limit[4];
    g.mem_limit = limit;
    double prev = 0;
    for (double lim = 16; lim >= 10; lim -= 2) {
        for (int d = 0; d < 4; d++)
            limit[d] = lim;
        sched_t *s = NULL;
        zb_err err = { "" };
        ck_assert_msg(gen_interleaved_zb(&g, &s, &err) == 0, "limit %g: %s", lim, err.msg);
        ck_assert_int_eq(sched_validate(s, &err), 0);
        sim_result r = { 0 };
        ck_assert_int_eq(sim_run(s, &r, &err), 0);
        ck_assert_double_le(r.peak_mem, lim);
        if (lim == 16)
            ck_assert_double_eq(r.cost, 51); /* PyTorch's order fits */
        ck_assert_double_ge(r.cost, prev);   /* less memory never buys time */
        prev = r.cost;
        sim_result_free(&r);
        sched_free(s);
    }
    for (int d = 0; d < 4; d++)
        limit[d] = 8;
    sched_t *s = NULL;
    zb_err err = { "" };
    ck_assert_int_eq(gen_interleaved_zb(&g, &s, &err), -1);
    ck_assert_ptr_null(s);
    ck_assert_msg(strstr(err.msg, "smallest peak this family reaches is 10"), "%s", err.msg);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("gen_torch");
    TCase *tc = tcase_create("gen_torch");
    tcase_add_test(tc, interleaved_zb_is_torchs_order);
    tcase_add_test(tc, interleaved_zb_beats_interleaved_1f1b);
    tcase_add_test(tc, interleaved_zb_memory_limit);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
