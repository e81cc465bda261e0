/*
 * bench_calibration.c: the cost model against measured Megatron-LM runs
 * (issue 27, bench/README.md "Issue 27").
 *
 * Prints two tables, each row a measured run against the cost model's
 * prediction with the run's layout fixed (bench/calibration/megatron.h
 * has the iteration formula): bench/calibration/megatron_runs.csv
 * (Korthikanti et al. 2022 Table 3; Narayanan et al. 2021 Table 1) on the
 * A100-80G preset, followed by one 22B layer's forward and backward
 * against Korthikanti's Table 4; then bench/calibration/
 * megatron_h100_runs.csv (the Megatron-LM README's Megatron-Core r0.8.0
 * weak-scaling table) on the H100-80G preset.
 *
 * With --fit it fits each GPU's F/B matmul efficiency on that table's fit
 * rows (its odd-numbered throughput rows) and reports every row at the
 * fitted value; without it, at the preset's (which is the fitted value,
 * src/model.c).  W keeps the preset's W efficiency.  With a CSV and
 * --gpu it prints that one table on that preset; --eff E prices at E.
 *
 * Usage: bench_calibration [--fit] [--eff E] [CSV --gpu PRESET]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/calibration/megatron.h"
#include "src/cost_parts.h"

/* Prints the table of the CSV at path on GPU preset gpu_name at F/B
 * efficiency eff (the preset's when 0, the fit rows' best when fit), W
 * as calib_with_eff sets it for w_ratio, and Korthikanti's Table 4 layer
 * when table4.  Returns 0, or 1 with a message on stderr. */
static int report_at(const char *path, const char *gpu_name, int fit, double eff, int table4, double w_ratio)
{
    static calib_row rows[CALIB_MAX_ROWS];
    zb_err err = { { 0 } };
    int n = calib_read(path, rows, CALIB_MAX_ROWS, &err);
    if (n <= 0) {
        fprintf(stderr, "bench_calibration: %s\n", n < 0 ? err.msg : "no rows");
        return 1;
    }
    zb_gpu base;
    if (gpu_preset(gpu_name, &base, &err) < 0) {
        fprintf(stderr, "bench_calibration: %s\n", err.msg);
        return 1;
    }
    if (eff <= 0)
        eff = fit ? calib_fit(rows, n, &base, w_ratio) : base.efficiency;
    zb_gpu g;
    calib_with_eff(&g, &base, eff, w_ratio);
    printf("%s: %s F/B efficiency %.3f, W %.3f (%s), HBM %.3f TB/s\n", path, gpu_name, g.efficiency,
           g.w_efficiency, fit ? "fitted on the rows marked fit" : "as given", g.hbm_bw / 1e12);
    printf("%-15s %-12s %-22s %10s %10s %7s\n", "source", "row", "layout", "predicted", "measured", "error");
    double worst_held = 0, worst_fit = 0, worst_unscored = 0;
    for (int i = 0; i < n; i++) {
        const calib_row *r = &rows[i];
        double p = 0, q = 0, e = calib_error(r, &g, &p, &q);
        char lay[64];
        snprintf(lay, sizeof lay, "tp%d%s pp%d v%d dp%d b%d", r->tp, r->sp ? "+sp" : "", r->pp, r->chunks,
                 r->gpus / (r->tp * r->pp), r->micro);
        const char *unit = r->measured_s > 0 ? "s" : "T";
        printf("%-15s %-12s %-22s %9.2f%s %9.2f%s %+6.1f%% %s\n", r->source, r->name, lay, p, unit, q, unit,
               100 * e, r->fit ? "fit" : r->scored ? "held out" : "not scored");
        if (r->fit)
            worst_fit = fmax(worst_fit, fabs(e));
        else if (r->scored)
            worst_held = isfinite(e) ? fmax(worst_held, fabs(e)) : INFINITY;
        else
            worst_unscored = isfinite(e) ? fmax(worst_unscored, fabs(e)) : INFINITY;
    }
    printf("largest error: %.1f%% on the fit rows, %.1f%% on the held-out rows, %.1f%% on the rows not "
           "scored\n(T = TFLOP/s per GPU, s = seconds per iteration)\n",
           100 * worst_fit, 100 * worst_held, 100 * worst_unscored);
    if (!table4)
        return 0;

    /* Korthikanti et al. 2022 Table 4: one 22B layer, ms. */
    const calib_layer_row *t4 = calib_korthikanti_table4;
    printf("\n22B layer (Korthikanti Table 4)  forward pred/meas     backward (B+W) pred/meas    both\n");
    for (int i = 0; i < CALIB_TABLE4_ROWS; i++) {
        double f, b;
        if (calib_22b_layer(&g, t4[i].sp, t4[i].rc, &f, &b, &err) < 0) {
            fprintf(stderr, "bench_calibration: %s\n", err.msg);
            return 1;
        }
        printf("%-32s %5.2f / %4.1f %+5.1f%%   %5.2f / %4.1f %+5.1f%%   %+5.1f%%\n", t4[i].name, f, t4[i].f_ms,
               100 * (f / t4[i].f_ms - 1), b, t4[i].b_ms, 100 * (b / t4[i].b_ms - 1),
               100 * ((f + b) / (t4[i].f_ms + t4[i].b_ms) - 1));
    }
    return 0;
}

/* report_at with A100's W kept (measured) and any other GPU's W moved
 * with its F/B (megatron.h, CALIB_A100_W_RATIO). */
static int report(const char *path, const char *gpu_name, int fit, double eff, int table4)
{
    double w_ratio = strncmp(gpu_name, "A100", 4) ? CALIB_A100_W_RATIO : 0;
    return report_at(path, gpu_name, fit, eff, table4, w_ratio);
}

int main(int argc, char **argv)
{
    const char *path = NULL, *gpu_name = NULL;
    int fit = 0;
    double eff = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--fit"))
            fit = 1;
        else if (!strcmp(argv[i], "--eff") && i + 1 < argc)
            eff = atof(argv[++i]);
        else if (!strcmp(argv[i], "--gpu") && i + 1 < argc)
            gpu_name = argv[++i];
        else
            path = argv[i];
    }
    if (path || gpu_name)
        return report(path ? path : "bench/calibration/megatron_runs.csv", gpu_name ? gpu_name : "A100-80G",
                      fit, eff, 0);
    if (report("bench/calibration/megatron_runs.csv", "A100-80G", fit, eff, 1))
        return 1;
    printf("\n");
    return report("bench/calibration/megatron_h100_runs.csv", "H100-80G", fit, eff, 0);
}
