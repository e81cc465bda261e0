/*
 * test_inputs.c: hostile inputs to the schedule commands (issue 14, the
 * input half).  Every case runs the built program as a user would, in a
 * temporary directory, and checks the project's rule for bad input: a
 * non-zero exit, exactly one line on stderr, no output file, and never a
 * hang (each run is wrapped in `timeout`, so a regression that loops shows
 * up as exit 124 instead of a stuck suite).
 *
 * Covered: costs whose totals overflow (gen flags, import flags, loaded
 * files; simulate, render SVG, --compare and trace), the same for the
 * vocabulary-parallel passes and barriers (version 2), the ILP's size cap and
 * time limit, input size caps, and the small parser defects (NUL inside a
 * JSON string, raw bytes from a binary CSV, blank CSV lines, booleans and
 * duplicate keys in model/GPU files, out-of-range GPU efficiency, the
 * peak_flops message).
 */
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tests/common/cli_run.h"

static char tmpdir[] = "/tmp/zb_inputs_XXXXXX";
static char out_text[1 << 16]; /* stdout of the last run */
static char err_text[8192];    /* stderr of the last run */

static void setup(void)
{
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void teardown(void)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    ck_assert_int_eq(system(cmd), 0);
    strcpy(tmpdir, "/tmp/zb_inputs_XXXXXX");
}

/* Runs `timeout 60 zbsched ARGS` in the temporary directory, ARGS built
 * from fmt; returns the exit status. */
static int zb(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int zb(const char *fmt, ...)
{
    char args[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    return cli_run(tmpdir, "timeout 60", args, out_text, sizeof out_text, err_text, sizeof err_text);
}

/* Runs a shell line in the temporary directory (fixture set-up). */
static void sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void sh(const char *fmt, ...)
{
    char line[2048], cmd[2600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "cd '%s' && %s", tmpdir, line);
    ck_assert_msg(system(cmd) == 0, "fixture command failed: %s", line);
}

static const char *tmp(const char *name)
{
    static char bufs[4][512];
    static int next;
    char *b = bufs[next++ % 4];
    snprintf(b, 512, "%s/%s", tmpdir, name);
    return b;
}

/* The last run failed cleanly: exit 1 or 2 (not a timeout or signal), one
 * line on stderr containing frag, and nothing at out (when given). */
#define EXPECT_CLEAN_FAILURE(rc, frag, out)                                                  \
    do {                                                                                     \
        ck_assert_msg((rc) == 1 || (rc) == 2, "exit %d, stderr: %s", (rc), err_text);       \
        cli_assert_one_line(err_text, (frag));                                               \
        cli_assert_no_file((out) ? tmp(out) : NULL);                                         \
    } while (0)

/* A valid 1F1B schedule with F's cost replaced by `f` (text as written). */
static void write_sched_with_f(const char *name, const char *f)
{
    ck_assert_int_eq(zb("gen 1f1b -p 2 -m 2 -o base.json"), 0);
    sh("sed 's/\"F\": 1,/\"F\": %s,/' base.json > %s && grep -q '\"F\": %s,' %s", f, name, f, name);
}

/* ------------------------------------------------------- 14.2 magnitudes */

START_TEST(gen_flags_whose_totals_overflow)
{
    int rc = zb("gen 1f1b -p 2 -m 2 --tf 1e308 -o s.json");
    EXPECT_CLEAN_FAILURE(rc, "--tf: 1e308 is too large", "s.json");
    /* Each flag within bounds, their total over the ops not. */
    rc = zb("gen 1f1b -p 2 -m 2 --tf 1e30 --tb 1e30 -o s.json");
    EXPECT_CLEAN_FAILURE(rc, "add up to more than", "s.json");
    rc = zb("gen 1f1b -p 2 -m 2 --mf 1e308 -o s.json");
    EXPECT_CLEAN_FAILURE(rc, "--mf", "s.json");
    rc = zb("gen 1f1b -p 2 -m 2 --tcomm 1e-40 -o s.json");
    EXPECT_CLEAN_FAILURE(rc, "--tcomm: 1e-40 is too small", "s.json");
    rc = zb("gen 1f1b -p 2 -m 2 --tw 1e31 -o s.json");
    EXPECT_CLEAN_FAILURE(rc, "--tw: 1e31 is too large", "s.json");
    rc = zb("gen zb-auto -p 2 -m 2 --mem-limit 1e308 -o s.json");
    EXPECT_CLEAN_FAILURE(rc, "--mem-limit", "s.json");
    /* Large but bounded values still work, and every figure stays finite. */
    ck_assert_int_eq(zb("gen 1f1b -p 2 -m 2 --tf 1e29 -o s.json"), 0);
    ck_assert_int_eq(zb("simulate s.json"), 0);
    ck_assert_ptr_null(strstr(out_text, "inf"));
    ck_assert_ptr_null(strstr(out_text, "nan"));
}
END_TEST

START_TEST(import_flags_whose_totals_overflow)
{
    ck_assert_int_eq(zb("gen 1f1b -p 2 -m 2 -o s.json"), 0);
    ck_assert_int_eq(zb("export s.json -o s.csv"), 0);
    int rc = zb("import s.csv --tb 1e308 -o t.json");
    EXPECT_CLEAN_FAILURE(rc, "--tb", "t.json");
}
END_TEST

START_TEST(loaded_costs_whose_totals_overflow)
{
    write_sched_with_f("huge.json", "1e308");
    int rc = zb("simulate huge.json");
    EXPECT_CLEAN_FAILURE(rc, "costs.F of stage 0", NULL);
    ck_assert_ptr_null(strstr(out_text, "inf"));
    rc = zb("render huge.json -o h.svg");
    EXPECT_CLEAN_FAILURE(rc, "costs.F", "h.svg");
    rc = zb("render huge.json --format trace -o h.trace");
    EXPECT_CLEAN_FAILURE(rc, "costs.F", "h.trace");
    ck_assert_int_eq(zb("gen 1f1b -p 2 -m 2 -o ok.json"), 0);
    rc = zb("render ok.json --compare huge.json -o c.svg");
    EXPECT_CLEAN_FAILURE(rc, "costs.F", "c.svg");
    /* Each value within bounds, but the sum over the ops is not. */
    write_sched_with_f("sum.json", "9e29");
    sh("sed -i 's/\"B\": 1,/\"B\": 9e29,/' sum.json");
    rc = zb("simulate --json sum.json");
    EXPECT_CLEAN_FAILURE(rc, "add up to", NULL);
    /* Measured times (a trace) so close together that the pixel scale
     * would be infinite: the SVG used to fill with inf and nan. */
    ck_assert_int_eq(zb("gen 1f1b -p 2 -m 1 -o one.json"), 0);
    sh("sed 's/^  \\]$/  ],\\n  \"times\": [[[0, 1e-320], [1e-320, 2e-320]], [[0, 1e-320], [1e-320, 2e-320]]]/' "
       "one.json > tr.json && grep -q 'times' tr.json");
    rc = zb("render tr.json -o tr.svg");
    EXPECT_CLEAN_FAILURE(rc, "measured time", "tr.svg");
    /* A value so small that the renderer's pixel scale would overflow. */
    write_sched_with_f("tiny.json", "1e-320");
    rc = zb("render tiny.json -o t.svg");
    EXPECT_CLEAN_FAILURE(rc, "at least", "t.svg");
}
END_TEST

/* Vocabulary parallelism (format version 2): the S/T pass times, their
 * memory and the barrier times are costs like F/B/W, in flags and files.
 * The fixture is zb-h1 with passes, whose vocab object reads
 * {"variant": 1, "S": 0.5, "T": 0.5, "C0": 0, "memory": {"S": 1, "T": -1}}. */
static void write_vocab_with(const char *name, const char *from, const char *to)
{
    /* C1 is Vocab-2's barrier (Vocab-1 ignores it): that one edits a Vocab-2 file. */
    ck_assert_int_eq(zb("gen zb-h1 -p 2 -m 4 --vocab parallel --vocab-variant %d -o vbase.json",
                        strstr(from, "C1") ? 2 : 1), 0);
    sh("sed '/\"vocab\"/s/%s/%s/' vbase.json > %s && ! cmp -s vbase.json %s", from, to, name, name);
}

START_TEST(vocab_costs_are_checked_like_costs)
{
    int rc = zb("gen zb-h1 -p 2 -m 4 --vocab parallel --ts 1e300 -o s.json");
    EXPECT_CLEAN_FAILURE(rc, "--ts: 1e300 is too large", "s.json");
    rc = zb("gen zb-h1 -p 2 -m 4 --vocab parallel --tt 1e-300 -o s.json");
    EXPECT_CLEAN_FAILURE(rc, "--tt: 1e-300 is too small", "s.json");
    rc = zb("gen zb-h1 -p 2 -m 4 --vocab parallel --tc0 1e31 -o s.json");
    EXPECT_CLEAN_FAILURE(rc, "--tc0: 1e31 is too large", "s.json");
    rc = zb("gen zb-h1 -p 2 -m 4 --vocab parallel --vocab-variant 2 --tc1 1e-40 -o s.json");
    EXPECT_CLEAN_FAILURE(rc, "--tc1: 1e-40 is too small", "s.json");
    rc = zb("gen zb-h1 -p 2 -m 4 --vocab parallel --ms -1e300 -o s.json");
    EXPECT_CLEAN_FAILURE(rc, "--ms: -1e300 is too large", "s.json");
    /* Each flag within bounds, the barriers of 64 micro-batches not. */
    rc = zb("gen zb-h1 -p 2 -m 64 --vocab parallel --tc0 1e29 -o s.json");
    EXPECT_CLEAN_FAILURE(rc, "use smaller --ts/--tt/--tc0/--tc1", "s.json");
    rc = zb("gen zb-h1 -p 2 -m 64 --vocab parallel --ms 1e29 -o s.json");
    EXPECT_CLEAN_FAILURE(rc, "use a smaller --ms", "s.json");

    /* The same values in a file: refused on load by every command. */
    write_vocab_with("c0.json", "\"C0\": 0,", "\"C0\": 1e300,");
    rc = zb("simulate c0.json");
    EXPECT_CLEAN_FAILURE(rc, "vocab.C0 is 1e+300, above the limit", NULL);
    rc = zb("render c0.json -o c0.svg");
    EXPECT_CLEAN_FAILURE(rc, "vocab.C0", "c0.svg");
    write_vocab_with("c1.json", "\"C1\": 0", "\"C1\": 1e-300");
    rc = zb("simulate c1.json");
    EXPECT_CLEAN_FAILURE(rc, "vocab.C1 is 1e-300: a nonzero value must be at least", NULL);
    write_vocab_with("ts.json", "\"S\": 0.5,", "\"S\": 1e-300,");
    rc = zb("render ts.json --format trace -o ts.trace");
    EXPECT_CLEAN_FAILURE(rc, "vocab.S is 1e-300", "ts.trace");
    write_vocab_with("tt.json", "\"T\": 0.5,", "\"T\": 2e30,");
    rc = zb("simulate --json tt.json");
    EXPECT_CLEAN_FAILURE(rc, "vocab.T is 2e+30, above the limit", NULL);
    write_vocab_with("ms.json", "\"S\": 1,", "\"S\": 1e-300,");
    rc = zb("simulate ms.json");
    EXPECT_CLEAN_FAILURE(rc, "vocab.memory.S is 1e-300", NULL);
    /* Each barrier within bounds, their sum over the micro-batches not. */
    write_vocab_with("sum.json", "\"C0\": 0,", "\"C0\": 9e29,");
    rc = zb("simulate sum.json");
    EXPECT_CLEAN_FAILURE(rc, "add up to", NULL);
    /* Large but bounded barriers still work, every figure finite. */
    write_vocab_with("ok.json", "\"C0\": 0,", "\"C0\": 1e20,");
    ck_assert_int_eq(zb("simulate ok.json"), 0);
    ck_assert_ptr_null(strstr(out_text, "inf"));
    ck_assert_ptr_null(strstr(out_text, "nan"));
}
END_TEST

/* ------------------------------------------------------ 14.4 input caps */

START_TEST(endless_and_oversized_inputs)
{
    /* /dev/zero never ends: refused at the cap instead of read forever. */
    int rc = zb("simulate /dev/zero");
    EXPECT_CLEAN_FAILURE(rc, "larger than the input limit", NULL);
    rc = cli_run(tmpdir, "timeout 60 env ZBSCHED_MAX_INPUT=1K", "import /dev/zero -o t.json",
                 out_text, sizeof out_text, err_text, sizeof err_text);
    EXPECT_CLEAN_FAILURE(rc, "1.00 KB", "t.json");
    /* A regular file over the cap is refused before it is read. */
    ck_assert_int_eq(zb("gen 1f1b -p 4 -m 64 -o big.json"), 0);
    rc = cli_run(tmpdir, "timeout 60 env ZBSCHED_MAX_INPUT=1K", "simulate big.json",
                 out_text, sizeof out_text, err_text, sizeof err_text);
    EXPECT_CLEAN_FAILURE(rc, "ZBSCHED_MAX_INPUT", NULL);
    rc = cli_run(tmpdir, "timeout 60 env ZBSCHED_MAX_INPUT=lots", "simulate big.json",
                 out_text, sizeof out_text, err_text, sizeof err_text);
    EXPECT_CLEAN_FAILURE(rc, "ZBSCHED_MAX_INPUT", NULL);
    /* Raising the cap lets it through. */
    rc = cli_run(tmpdir, "timeout 60 env ZBSCHED_MAX_INPUT=1G", "simulate big.json",
                 out_text, sizeof out_text, err_text, sizeof err_text);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
    /* A model file that never ends. */
    rc = zb("search --mem 40G --model /dev/zero");
    EXPECT_CLEAN_FAILURE(rc, "larger than the input limit", NULL);
}
END_TEST

START_TEST(run_data_without_end)
{
    ck_assert_int_eq(zb("gen zb-h1 -p 2 -m 2 -o s.json"), 0);
    int rc = zb("run s.json --steps 1 --data /dev/zero --max-input 1M -q");
    EXPECT_CLEAN_FAILURE(rc, "1.00 MB", NULL);
    rc = zb("run s.json --steps 1 --data /dev/zero");
    EXPECT_CLEAN_FAILURE(rc, "larger than the input limit", NULL);
    rc = zb("run s.json --steps 1 --max-input 12parsecs");
    EXPECT_CLEAN_FAILURE(rc, "--max-input", NULL);
}
END_TEST

/* ------------------------------------------------ 14.9 smaller defects */

START_TEST(nul_inside_json_strings)
{
    ck_assert_int_eq(zb("gen 1f1b -p 2 -m 2 -o base.json"), 0);
    sh("sed 's/\"name\": \"1f1b\"/\"name\": \"1f\\\\u0000b\"/' base.json > esc.json && grep -q 'u0000' esc.json");
    int rc = zb("simulate esc.json");
    EXPECT_CLEAN_FAILURE(rc, "NUL", NULL);
    /* A raw NUL byte inside a string. */
    sh("sed 's/\"name\": \"1f1b\"/\"name\": \"1f\\x00b\"/' base.json > raw.json && "
       "test $(wc -c < raw.json) -eq $(wc -c < base.json)");
    rc = zb("render raw.json -o r.svg");
    EXPECT_CLEAN_FAILURE(rc, "NUL", "r.svg");
    sh("printf '{\"base\": \"tiny\", \"name\": \"a\\\\u0000b\"}' > m.json");
    rc = zb("search --mem 40G --gpus 4 --model m.json");
    EXPECT_CLEAN_FAILURE(rc, "NUL", NULL);
}
END_TEST

START_TEST(binary_csv_is_not_echoed)
{
    /* Bytes 0x01..0x1f, 0x7f and 0x80..0xff in a cell. */
    sh("printf '\\001\\002\\033[31m\\177\\200\\377,0F0\\n' > bin.csv");
    int rc = zb("import bin.csv -o t.json");
    EXPECT_CLEAN_FAILURE(rc, "\\x01\\x02\\x1b[31m\\x7f\\x80\\xff", "t.json");
    for (const unsigned char *p = (const unsigned char *)err_text; *p; p++)
        ck_assert_msg(*p == '\n' || (*p >= 0x20 && *p < 0x7f), "raw byte 0x%02x on stderr", *p);
    /* The same for an unknown preset named inside a model file. */
    sh("printf '{\"base\": \"\\\\u001b[31mtiny\"}' > esc.json && grep -q u001b esc.json");
    rc = zb("search --mem 40G --gpus 4 --model esc.json");
    EXPECT_CLEAN_FAILURE(rc, "\\x1b[31mtiny", NULL);
    /* The same for a bad op token in a schedule file. */
    ck_assert_int_eq(zb("gen 1f1b -p 2 -m 2 -o base.json"), 0);
    sh("sed 's/\"F0\", \"F1\"/\"\\\\u001b[31mF0\", \"F1\"/' base.json > tok.json && grep -q u001b tok.json");
    rc = zb("simulate tok.json");
    EXPECT_CLEAN_FAILURE(rc, "\\x1b[31mF0", NULL);
}
END_TEST

START_TEST(blank_csv_lines)
{
    ck_assert_int_eq(zb("gen 1f1b -p 2 -m 2 -o s.json"), 0);
    ck_assert_int_eq(zb("export s.json -o s.csv"), 0);
    /* 65,535 trailing blank lines are not 65,535 ranks. */
    sh("cp s.csv tail.csv && awk 'BEGIN { for (i = 0; i < 65535; i++) print \"\" }' >> tail.csv");
    ck_assert_int_eq(zb("import tail.csv -o t.json"), 0);
    ck_assert_int_eq(zb("simulate --json t.json"), 0);
    ck_assert_ptr_nonnull(strstr(out_text, "\"devices\":2"));
    /* Blank lines before the ranks: refused, not thousands of idle ranks. */
    sh("awk 'BEGIN { for (i = 0; i < 1000; i++) print \"\" }' > lead.csv && cat s.csv >> lead.csv");
    int rc = zb("import lead.csv -o u.json");
    EXPECT_CLEAN_FAILURE(rc, "idle", "u.json");
}
END_TEST

START_TEST(model_and_gpu_field_types)
{
    sh("printf '{\"base\": \"tiny\", \"n_layers\": true}' > bool.json");
    int rc = zb("search --mem 40G --gpus 4 --model bool.json");
    EXPECT_CLEAN_FAILURE(rc, "n_layers", NULL);
    sh("printf '{\"base\": \"tiny\", \"n_layers\": 2, \"n_layers\": 8}' > dup.json");
    rc = zb("search --mem 40G --gpus 4 --model dup.json");
    EXPECT_CLEAN_FAILURE(rc, "appears twice", NULL);
    sh("printf '{\"base\": \"A100-80G\", \"efficiency\": 0.5, \"efficiency\": 0.6}' > gdup.json");
    rc = zb("search --mem 40G --gpu gdup.json");
    EXPECT_CLEAN_FAILURE(rc, "appears twice", NULL);
    /* Nested duplicates in a schedule file (the top level was checked). */
    ck_assert_int_eq(zb("gen 1f1b -p 2 -m 2 -o base.json"), 0);
    sh("sed 's/\"costs\": {\"F\": 1,/\"costs\": {\"F\": 1, \"F\": 7,/' base.json > cdup.json && "
       "grep -q '\"F\": 7' cdup.json");
    rc = zb("simulate cdup.json");
    EXPECT_CLEAN_FAILURE(rc, "'costs.F' appears twice", NULL);
    /* true stays fine for the 0/1 switches. */
    sh("printf '{\"base\": \"tiny\", \"swiglu\": true}' > sw.json");
    ck_assert_int_eq(zb("search --mem 40G --gpus 4 --model sw.json -o best.json"), 0);
}
END_TEST

START_TEST(gpu_ranges)
{
    sh("printf '{\"base\": \"A100-80G\", \"efficiency\": 1e-300}' > eff.json");
    int rc = zb("search --mem 40G --gpu eff.json");
    EXPECT_CLEAN_FAILURE(rc, "\"efficiency\" is 1e-300", NULL);
    ck_assert_int_lt(strlen(err_text), 200);
    /* Each bad figure is named itself (peak_flops used to be blamed with two others). */
    sh("printf '{\"base\": \"A100-80G\", \"mem_bytes\": 0}' > mem.json");
    rc = zb("search --mem 40G --gpu mem.json");
    EXPECT_CLEAN_FAILURE(rc, "\"mem_bytes\" is 0", NULL);
    ck_assert_ptr_null(strstr(err_text, "peak_flops"));
    /* A tiny peak_flops used to be blamed on "embedding and head weights". */
    sh("printf '{\"base\": \"A100-80G\", \"peak_flops\": 1e-300}' > tiny.json");
    rc = zb("search --mem 40G --gpu tiny.json");
    EXPECT_CLEAN_FAILURE(rc, "\"peak_flops\" is 1e-300", NULL);
    ck_assert_ptr_null(strstr(err_text, "embedding"));
    sh("printf '{\"base\": \"A100-80G\", \"peak_flops\": 1e300}' > pf.json");
    rc = zb("search --mem 40G --gpu pf.json");
    EXPECT_CLEAN_FAILURE(rc, "\"peak_flops\" is 1e+300", NULL);
}
END_TEST

/* ------------------------------------------------------------ 14.3 ILP */

static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

START_TEST(ilp_refuses_sizes_it_cannot_handle)
{
    double t0 = wall_s();
    int rc = zb("gen ilp -p 64 -m 1024 --mem-limit 8 --time-limit 5 -o i.json");
    double took = wall_s() - t0;
    EXPECT_CLEAN_FAILURE(rc, "ILP too large", "i.json");
    ck_assert_ptr_nonnull(strstr(err_text, "binary variables"));
    ck_assert_msg(took < 5, "the refusal took %.1f s", took);
}
END_TEST

START_TEST(ilp_time_limit_covers_the_command)
{
    /* Under the size cap, but the analysis and the model building alone
     * took 4.3 s here before they watched the limit. */
    double t0 = wall_s();
    int rc = zb("gen ilp -p 32 -m 55 --mem-limit 32 --tf 5 --tb 6 --tw 4 --tcomm 1 --time-limit 0.5 -o i.json");
    double took = wall_s() - t0;
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
    ck_assert_msg(took < 2.5, "--time-limit 0.5 took %.2f s", took);
    ck_assert_int_eq(zb("simulate i.json"), 0);
    sh("grep -q '\"status\":\"time limit' i.json");
}
END_TEST

/* ------------------------------------------------------ 14.4 search size */

START_TEST(search_on_a_deep_model_is_bounded)
{
    /* 10,000 layers on 8 GPUs used to try interleaving up to v = 1,250
     * and reach 5.9 GB after 60 s. */
    sh("printf '{\"base\": \"tiny\", \"n_layers\": 10000}' > deep.json");
    double t0 = wall_s();
    int rc = zb("search --mem 40G --gpus 8 --stages 8 --model deep.json -o best.json");
    double took = wall_s() - t0;
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
    /* ~5 s plain on the loaded 2-core VM; generous for ASan. */
    ck_assert_msg(took < 45, "search took %.1f s", took);
    ck_assert_ptr_null(strstr(out_text, "interleaved v=9 "));
    /* A configuration whose schedules would have millions of ops is one
     * skipped candidate, not millions of ops in memory. */
    rc = zb("search --mem 40G --gpus 64 --stages 64 --model deep.json --global-batch 65536 --max-micro-batch 1 -v");
    ck_assert_int_eq(rc, 1);
    ck_assert_ptr_nonnull(strstr(out_text, "above the search's cap"));
}
END_TEST

int main(void)
{
    Suite *su = suite_create("inputs");
    TCase *tc = tcase_create("inputs");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, gen_flags_whose_totals_overflow);
    tcase_add_test(tc, import_flags_whose_totals_overflow);
    tcase_add_test(tc, loaded_costs_whose_totals_overflow);
    tcase_add_test(tc, vocab_costs_are_checked_like_costs);
    tcase_add_test(tc, endless_and_oversized_inputs);
    tcase_add_test(tc, run_data_without_end);
    tcase_add_test(tc, nul_inside_json_strings);
    tcase_add_test(tc, binary_csv_is_not_echoed);
    tcase_add_test(tc, blank_csv_lines);
    tcase_add_test(tc, model_and_gpu_field_types);
    tcase_add_test(tc, gpu_ranges);
    tcase_add_test(tc, ilp_refuses_sizes_it_cannot_handle);
    tcase_add_test(tc, ilp_time_limit_covers_the_command);
    tcase_add_test(tc, search_on_a_deep_model_is_bounded);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
