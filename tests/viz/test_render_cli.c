/*
 * test_render_cli.c: `zbsched render` end to end.  Each format writes a
 * valid file; --compare puts predicted above measured; every bad input
 * (missing or broken file, unknown format or option, --compare with a
 * non-SVG format, an oversized DAG, an unwritable output) exits non-zero
 * with exactly one line on stderr and leaves no output file.
 */
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "src/sched_io.h"
#include "src/size.h"
#include "tests/common/cli_run.h"
#include "tests/viz/viz_fixtures.h"
#include "tests/viz/viz_testutil.h"

/* A temporary directory with a predicted, a measured and a big schedule. */
typedef struct cli_dir {
    char *dir;          /* the directory */
    char pred[512];     /* zb-h1 p=4 m=8, no times */
    char meas[512];     /* the same with measured times */
    char big[512];      /* zb-h1 p=8 m=128 (too big for the DAG) */
    char out[512];      /* where outputs go */
} cli_dir;

static void save(sched_t *s, const char *path)
{
    zb_err err = { 0 };
    ck_assert_msg(sched_save_file(s, path, &err) == 0, "%s", err.msg);
    sched_free(s);
}

static void setup_dir(cli_dir *c)
{
    c->dir = tu_tempdir();
    snprintf(c->pred, sizeof c->pred, "%s/pred.json", c->dir);
    snprintf(c->meas, sizeof c->meas, "%s/meas.json", c->dir);
    snprintf(c->big, sizeof c->big, "%s/big.json", c->dir);
    snprintf(c->out, sizeof c->out, "%s/out", c->dir);
    save(fixture_zb_h1(4, 8), c->pred);
    sched_t *m = fixture_zb_h1(4, 8);
    ck_assert_int_eq(fixture_add_times(m), 0);
    save(m, c->meas);
    save(fixture_zb_h1(8, 128), c->big);
}

static void teardown_dir(cli_dir *c)
{
    tu_rmdir(c->dir);
    free(c->dir);
}

/* Runs zbsched with printf-style arguments; returns the status. */
static int run(char **err_text, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int run(char **err_text, const char *fmt, ...)
{
    char args[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    return tu_zbsched(args, err_text);
}

START_TEST(each_format_writes_a_file)
{
    cli_dir c;
    setup_dir(&c);
    char *e;
    ck_assert_int_eq(run(&e, "render '%s' -o '%s'", c.pred, c.out), 0);
    ck_assert_str_eq(e, "");
    free(e);
    ck_assert(tu_xml_valid_file(c.out));
    char *svg = tu_read(c.out, NULL);
    ck_assert_int_eq(tu_count(svg, "class=\"op "), 96);
    free(svg);

    ck_assert_int_eq(run(&e, "render '%s' --format trace -o '%s'", c.meas, c.out), 0);
    free(e);
    char *text = tu_read(c.out, NULL);
    cJSON *doc = cJSON_Parse(text);
    ck_assert_ptr_nonnull(doc);
    int n_x = 0;
    const cJSON *ev;
    cJSON_ArrayForEach(ev, cJSON_GetObjectItemCaseSensitive(doc, "traceEvents"))
        n_x += !strcmp(cJSON_GetObjectItemCaseSensitive(ev, "ph")->valuestring, "X");
    ck_assert_int_eq(n_x, 96);
    cJSON_Delete(doc);
    free(text);

    ck_assert_int_eq(run(&e, "render '%s' -f dag -o '%s'", c.pred, c.out), 0);
    ck_assert_str_eq(e, ""); /* Graphviz stays quiet */
    free(e);
    ck_assert(tu_xml_valid_file(c.out));
    svg = tu_read(c.out, NULL);
    ck_assert_int_eq(tu_count(svg, "class=\"node\""), 96);
    free(svg);
    teardown_dir(&c);
}
END_TEST

START_TEST(compare_puts_prediction_above)
{
    cli_dir c;
    setup_dir(&c);
    char *e;
    /* The measured file first: it still goes below. */
    ck_assert_int_eq(run(&e, "render '%s' --compare '%s' -o '%s'", c.meas, c.pred, c.out), 0);
    free(e);
    ck_assert(tu_xml_valid_file(c.out));
    char *svg = tu_read(c.out, NULL);
    char *p = strstr(svg, "predicted: zb-h1"), *m = strstr(svg, "measured: zb-h1");
    ck_assert(p && m && p < m);
    ck_assert_int_eq(tu_count(svg, "class=\"op "), 192);
    free(svg);
    teardown_dir(&c);
}
END_TEST

/* Asserts a failed run: non-zero, one stderr line, no output file. */
static void expect_failure(int status, char *err_text, const char *out, const char *needle)
{
    ck_assert_int_ne(status, 0);
    cli_assert_one_line(err_text, needle);
    cli_assert_no_file(out);
    free(err_text);
}

START_TEST(bad_input_gives_one_line)
{
    cli_dir c;
    setup_dir(&c);
    char *e;
    int st = run(&e, "render '%s' --format png -o '%s'", c.pred, c.out);
    expect_failure(st, e, c.out, "png");
    st = run(&e, "render '%s/nope.json' -o '%s'", c.dir, c.out);
    expect_failure(st, e, c.out, "nope.json");
    st = run(&e, "render -o '%s'", c.out);
    expect_failure(st, e, c.out, NULL);
    st = run(&e, "render '%s' --bogus -o '%s'", c.pred, c.out);
    expect_failure(st, e, c.out, "--bogus");
    st = run(&e, "render '%s' -o", c.pred);
    expect_failure(st, e, c.out, NULL);
    st = run(&e, "render '%s' --format trace --compare '%s' -o '%s'", c.pred, c.meas, c.out);
    expect_failure(st, e, c.out, "--compare");
    st = run(&e, "render '%s' --format dag -o '%s'", c.big, c.out);
    expect_failure(st, e, c.out, "2000");
    st = run(&e, "render '%s' --compare '%s/nope.json' -o '%s'", c.pred, c.dir, c.out);
    expect_failure(st, e, c.out, "nope.json");
    char bad_out[600];
    snprintf(bad_out, sizeof bad_out, "%s/no-such-dir/out.svg", c.dir);
    st = run(&e, "render '%s' -o '%s'", c.pred, bad_out);
    expect_failure(st, e, bad_out, NULL);

    /* A broken document and an incomplete schedule. */
    char broken[600];
    snprintf(broken, sizeof broken, "%s/broken.json", c.dir);
    FILE *f = fopen(broken, "w");
    fputs("{\"format\": \"zbsched-schedule\", \"version\": 1, \"devices\": ", f);
    fclose(f);
    st = run(&e, "render '%s' -o '%s'", broken, c.out);
    expect_failure(st, e, c.out, NULL);
    sched_t *s = fixture_zb_h1(2, 2);
    s->dev[1].n_ops--;
    save(s, broken);
    st = run(&e, "render '%s' -f dag -o '%s'", broken, c.out);
    expect_failure(st, e, c.out, NULL);
    teardown_dir(&c);
}
END_TEST

/* The view flags (issue 29.6) on every format: a time window, a
 * micro-batch subset and devices, read as the picture's axis reads; the
 * graph of a window of a schedule too big to draw whole; bad values are
 * one line and leave no file. */
START_TEST(view_flags)
{
    cli_dir c;
    setup_dir(&c);
    char *e;
    int st = run(&e, "render '%s' --from 4 --to 12 -o '%s'", c.pred, c.out);
    ck_assert_msg(st == 0, "%s", e);
    free(e);
    char *svg = tu_read(c.out, NULL);
    ck_assert_ptr_nonnull(strstr(svg, "window 4\xe2\x80\x93" "12 units"));
    ck_assert_int_lt(tu_count(svg, "class=\"op "), 96);
    free(svg);
    st = run(&e, "render '%s' --micro-batches 0-1 --devices 2-3 -o '%s'", c.pred, c.out);
    ck_assert_msg(st == 0, "%s", e);
    free(e);
    svg = tu_read(c.out, NULL);
    ck_assert_int_eq(tu_count(svg, "class=\"op "), 2 * 2 * 3);
    ck_assert_int_eq(tu_count(svg, "class=\"lane\""), 2);
    free(svg);
    st = run(&e, "render '%s' --format trace --micro-batches 3 -o '%s'", c.pred, c.out);
    ck_assert_msg(st == 0, "%s", e);
    free(e);
    char *trace = tu_read(c.out, NULL);
    cJSON *doc = cJSON_Parse(trace);
    ck_assert_ptr_nonnull(doc);
    int x = 0;
    const cJSON *ev;
    cJSON_ArrayForEach(ev, cJSON_GetObjectItem(doc, "traceEvents"))
        if (!strcmp(cJSON_GetObjectItem(ev, "ph")->valuestring, "X")) {
            x++;
            ck_assert_int_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(ev, "args"), "mb")->valueint, 3);
        }
    ck_assert_int_eq(x, 4 * 3);
    cJSON_Delete(doc);
    free(trace);
    /* The graph of a window of the big schedule (3072 ops whole). */
    st = run(&e, "render '%s' --format dag --from 0 --to 10 -o '%s'", c.big, c.out);
    ck_assert_msg(st == 0, "%s", e);
    free(e);
    ck_assert(tu_xml_valid_file(c.out));
    unlink(c.out);
    st = run(&e, "render '%s' --from x -o '%s'", c.pred, c.out);
    expect_failure(st, e, c.out, "--from");
    st = run(&e, "render '%s' --from 12 --to 4 -o '%s'", c.pred, c.out);
    expect_failure(st, e, c.out, "--from must be before --to");
    st = run(&e, "render '%s' --to -3 -o '%s'", c.pred, c.out);
    expect_failure(st, e, c.out, "--to");
    st = run(&e, "render '%s' --from 500 -o '%s'", c.pred, c.out);
    expect_failure(st, e, c.out, "runs from 0 to 27 units");
    st = run(&e, "render '%s' --from 500 --to 600 -o '%s'", c.pred, c.out);
    expect_failure(st, e, c.out, "the window 500-600 units holds no op");
    st = run(&e, "render '%s' --micro-batches 7-2 -o '%s'", c.pred, c.out);
    expect_failure(st, e, c.out, "--micro-batches: '7-2' ends before it starts");
    st = run(&e, "render '%s' --micro-batches 9 -o '%s'", c.pred, c.out);
    expect_failure(st, e, c.out, "micro-batches 0-7");
    st = run(&e, "render '%s' --devices 1-x -o '%s'", c.pred, c.out);
    expect_failure(st, e, c.out, "--devices");
    st = run(&e, "render '%s' --devices 4 -o '%s'", c.pred, c.out);
    expect_failure(st, e, c.out, "devices 0-3");
    st = run(&e, "render '%s' --format dag --devices 0-6 -o '%s'", c.big, c.out);
    expect_failure(st, e, c.out, "narrow it with --from/--to, --micro-batches or --devices");
    teardown_dir(&c);
}
END_TEST

/* The device peaks a plan records (search writes predicted.device_peak_bytes,
 * static + activations) as zb_size_format prints them. */
static int plan_peaks(const char *path, char fmt[][32], int max, char *peak, size_t peak_len,
                      int *peak_device)
{
    char *text = tu_read(path, NULL);
    ck_assert_ptr_nonnull(text);
    cJSON *doc = cJSON_Parse(text);
    free(text);
    ck_assert_ptr_nonnull(doc);
    const cJSON *pred = cJSON_GetObjectItem(doc, "predicted");
    const cJSON *dev = cJSON_GetObjectItem(pred, "device_peak_bytes");
    int n = cJSON_GetArraySize(dev);
    ck_assert(n > 0 && n <= max);
    for (int d = 0; d < n; d++)
        zb_size_format(cJSON_GetArrayItem(dev, d)->valuedouble, fmt[d], 32);
    zb_size_format(cJSON_GetObjectItem(pred, "peak_bytes")->valuedouble, peak, peak_len);
    *peak_device = cJSON_GetObjectItem(pred, "peak_device")->valueint;
    cJSON_Delete(doc);
    return n;
}

/* One figure per quantity (issue 29.4): the peak memory a plan was made
 * with, per device and overall, is what simulate's table and render's
 * title and panels print, in GB with the unit; for the committed default
 * plan (search --mem 40G) that is 39.86 GB on device 5, and for a plan
 * made now by search, whatever it recorded. */
START_TEST(plan_figures_agree)
{
    cli_dir c;
    setup_dir(&c);
    char plans[2][600];
    snprintf(plans[0], sizeof plans[0], "%s/tests/viz/golden/llama3-8b-plan.json",
             getenv("ZB_SOURCE_ROOT"));
    snprintf(plans[1], sizeof plans[1], "%s/tiny-plan.json", c.dir);
    char *e;
    int st = run(&e, "search --model tiny --gpu '%s/tools/cpu-device.json' --gpus 2 --mem 4G -q -o '%s'",
                 getenv("ZB_SOURCE_ROOT"), plans[1]);
    ck_assert_msg(st == 0, "%s", e);
    free(e);
    for (int k = 0; k < 2; k++) {
        char dev[64][32], peak[32], want[160];
        int peak_device, n = plan_peaks(plans[k], dev, 64, peak, sizeof peak, &peak_device);
        if (k == 0) {
            ck_assert_str_eq(peak, "39.86 GB");
            ck_assert_int_eq(peak_device, 5);
        }
        /* simulate: the summary and every device's row. */
        char out[65536], errt[4096], line[800];
        snprintf(line, sizeof line, "simulate '%.700s'", plans[k]);
        ck_assert_int_eq(cli_run(NULL, NULL, line, out, sizeof out, errt, sizeof errt), 0);
        snprintf(want, sizeof want, "peak memory %s on device %d (static ", peak, peak_device);
        ck_assert_msg(strstr(out, want), "simulate does not say '%s':\n%s", want, out);
        for (int d = 0; d < n; d++)
            ck_assert_msg(strstr(out, dev[d]), "simulate lacks device %d's %s", d, dev[d]);
        ck_assert_ptr_null(strstr(out, "e+"));
        /* render: the title and every panel's peak. */
        st = run(&e, "render '%s' -o '%s'", plans[k], c.out);
        ck_assert_msg(st == 0, "%s", e);
        free(e);
        char *svg = tu_read(c.out, NULL);
        snprintf(want, sizeof want, "peak memory %s (device %d: static ", peak, peak_device);
        ck_assert_msg(strstr(svg, want), "the SVG does not say '%s'", want);
        for (int d = 0; d < n; d++) {
            snprintf(want, sizeof want, ">peak %.31s</text>", dev[d]);
            ck_assert_msg(strstr(svg, want), "the SVG lacks device %d's %s", d, want);
        }
        free(svg);
    }
    teardown_dir(&c);
}
END_TEST

START_TEST(help_succeeds)
{
    char *e;
    ck_assert_int_eq(tu_zbsched("render --help", &e), 0);
    ck_assert_str_eq(e, "");
    free(e);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("render_cli");
    TCase *tc = tcase_create("cli");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, each_format_writes_a_file);
    tcase_add_test(tc, compare_puts_prediction_above);
    tcase_add_test(tc, bad_input_gives_one_line);
    tcase_add_test(tc, view_flags);
    tcase_add_test(tc, plan_figures_agree);
    tcase_add_test(tc, help_succeeds);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
