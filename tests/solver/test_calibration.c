/*
 * test_calibration.c: the cost model against Megatron-LM's measured runs
 * (issue 27; bench/calibration/megatron.h re-costs them, bench/README.md
 * "Calibration against Megatron-LM's measured runs" prints the table).
 *
 * Three checks, each able to fail:
 * - every row of bench/calibration/megatron_runs.csv (Korthikanti et al.
 *   2022 Table 3's 22B and 175B in both settings, Narayanan et al. 2021
 *   Table 1's ten rows), priced at the A100-80G preset, is within 10% of
 *   its measured seconds or TFLOP/s; without the memory-bound term
 *   (src/cost_parts.c) the 22B and 1.7B rows leave that band, and without
 *   SP's backward gathers the 22B SP + selective row does;
 * - the preset's F/B efficiency is the one fitted on the fit rows (the
 *   issue asks that the presets keep the fitted figure);
 * - on H100 (bench/calibration/megatron_h100_runs.csv, the Megatron-LM
 *   README's Megatron-Core r0.8.0 weak-scaling table) every scored row,
 *   priced at the H100-80G preset, is within 10%, the preset's F/B is the
 *   fitted one and its W is F/B times A100's W over F/B; the former
 *   assumed 0.61 (or 0.5) puts the scored rows 20-40% too fast;
 * - one 22B layer's forward and backward in Korthikanti's Table 4's five
 *   settings (none, SP, full, selective, selective + SP) are each within
 *   5%: the per-layer physics (memory-bound work sharded by SP, the
 *   forward's collectives rerun by full recompute, SP's gathers in B)
 *   and not only the iteration sums.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench/calibration/megatron.h"
#include "src/cost_parts.h"

static calib_row rows[CALIB_MAX_ROWS];

/* Reads bench/calibration/<file> into rows; returns the count. */
static int load_file(const char *file)
{
    const char *root = getenv("ZB_SOURCE_ROOT");
    ck_assert_msg(root != NULL, "ZB_SOURCE_ROOT is not set (run through meson test)");
    char path[1024];
    snprintf(path, sizeof path, "%s/bench/calibration/%s", root, file);
    zb_err err = { { 0 } };
    int n = calib_read(path, rows, CALIB_MAX_ROWS, &err);
    ck_assert_msg(n > 0, "%s", err.msg);
    return n;
}

/* The A100 rows. */
static int load_rows(void)
{
    return load_file("megatron_runs.csv");
}

/* The GPU preset called name. */
static zb_gpu preset(const char *name)
{
    zb_gpu g;
    zb_err err = { { 0 } };
    ck_assert_msg(gpu_preset(name, &g, &err) == 0, "%s", err.msg);
    return g;
}

static zb_gpu a100(void)
{
    return preset("A100-80G");
}

START_TEST(rows_within_ten_percent)
{
    int n = load_rows(), korthikanti = 0, narayanan = 0, fit = 0;
    zb_gpu g = a100();
    for (int i = 0; i < n; i++) {
        double p = 0, q = 0, e = calib_error(&rows[i], &g, &p, &q);
        ck_assert_msg(isfinite(e), "%s %s: the cost model refused the row", rows[i].source, rows[i].name);
        ck_assert_msg(fabs(e) <= 0.10, "%s %s: predicted %.2f vs measured %.2f (%+.1f%%)", rows[i].source,
                      rows[i].name, p, q, 100 * e);
        korthikanti += rows[i].measured_s > 0;
        narayanan += rows[i].measured_tflops > 0;
        fit += rows[i].fit;
    }
    /* the 14 rows, five of them fitted */
    ck_assert_int_eq(korthikanti, 4);
    ck_assert_int_eq(narayanan, 10);
    ck_assert_int_eq(fit, 5);
}
END_TEST

START_TEST(preset_is_fitted)
{
    int n = load_rows();
    zb_gpu g = a100();
    double eff = calib_fit(rows, n, &g, 0);
    ck_assert_msg(fabs(eff - g.efficiency) < 0.005, "fitted F/B efficiency %.4f, preset %.3f", eff,
                  g.efficiency);
}
END_TEST

START_TEST(h100_rows_within_ten_percent)
{
    int n = load_file("megatron_h100_runs.csv"), scored = 0, fit = 0;
    zb_gpu g = preset("H100-80G");
    for (int i = 0; i < n; i++) {
        if (!rows[i].scored)
            continue;
        double p = 0, q = 0, e = calib_error(&rows[i], &g, &p, &q);
        ck_assert_msg(isfinite(e), "%s %s: the cost model refused the row", rows[i].source, rows[i].name);
        ck_assert_msg(fabs(e) <= 0.10, "%s %s: predicted %.2f vs measured %.2f (%+.1f%%)", rows[i].source,
                      rows[i].name, p, q, 100 * e);
        scored++;
        fit += rows[i].fit;
    }
    /* nine published rows; 7.1B, 16B and 32B scored, two of them fitted */
    ck_assert_int_eq(n, 9);
    ck_assert_int_eq(scored, 3);
    ck_assert_int_eq(fit, 2);
}
END_TEST

START_TEST(h100_preset_is_fitted)
{
    int n = load_file("megatron_h100_runs.csv");
    zb_gpu g = preset("H100-80G");
    double eff = calib_fit(rows, n, &g, CALIB_A100_W_RATIO);
    ck_assert_msg(fabs(eff - g.efficiency) < 0.005, "fitted F/B efficiency %.4f, preset %.3f", eff,
                  g.efficiency);
    ck_assert_msg(fabs(gpu_w_efficiency(&g) - eff * CALIB_A100_W_RATIO) < 0.005,
                  "preset W efficiency %.3f, fitted F/B times A100's ratio %.3f", gpu_w_efficiency(&g),
                  eff * CALIB_A100_W_RATIO);
}
END_TEST

START_TEST(korthikanti_table4_layer)
{
    const calib_layer_row *t4 = calib_korthikanti_table4;
    zb_gpu g = a100();
    for (int i = 0; i < CALIB_TABLE4_ROWS; i++) {
        double f, b;
        zb_err err = { { 0 } };
        ck_assert_msg(calib_22b_layer(&g, t4[i].sp, t4[i].rc, &f, &b, &err) == 0, "%s", err.msg);
        ck_assert_msg(fabs(f / t4[i].f_ms - 1) <= 0.05, "%s: forward %.2f ms vs %.1f", t4[i].name, f, t4[i].f_ms);
        ck_assert_msg(fabs(b / t4[i].b_ms - 1) <= 0.05, "%s: backward %.2f ms vs %.1f", t4[i].name, b, t4[i].b_ms);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("calibration");
    TCase *tc = tcase_create("megatron");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, rows_within_ten_percent);
    tcase_add_test(tc, preset_is_fitted);
    tcase_add_test(tc, korthikanti_table4_layer);
    tcase_add_test(tc, h100_rows_within_ten_percent);
    tcase_add_test(tc, h100_preset_is_fitted);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
