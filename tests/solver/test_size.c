/*
 * test_size.c: the size parser (src/size.h) on every accepted form and on
 * the inputs it must refuse, plus the printer.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "src/numfmt.h"
#include "src/size.h"

static uint64_t parse_ok(const char *text)
{
    uint64_t v = 0;
    zb_err err = { { 0 } };
    int rc = zb_size_parse(text, &v, &err);
    ck_assert_msg(rc == 0, "'%s' refused: %s", text, err.msg);
    return v;
}

static void parse_bad(const char *text, const char *expect_in_msg)
{
    uint64_t v = 12345;
    zb_err err = { { 0 } };
    int rc = zb_size_parse(text, &v, &err);
    ck_assert_msg(rc == -1, "'%s' was accepted as %llu", text ? text : "(null)", (unsigned long long)v);
    ck_assert_msg(v == 12345, "'%s': output written on failure", text);
    ck_assert_msg(err.msg[0] != '\0', "'%s': no message", text);
    ck_assert_msg(strchr(err.msg, '\n') == NULL, "message must be one line");
    if (expect_in_msg)
        ck_assert_msg(strstr(err.msg, expect_in_msg), "'%s': message '%s' lacks '%s'", text, err.msg, expect_in_msg);
}

START_TEST(test_decimal_units)
{
    ck_assert_uint_eq(parse_ok("40G"), 40000000000ULL);
    ck_assert_uint_eq(parse_ok("40GB"), 40000000000ULL);
    ck_assert_uint_eq(parse_ok("40gb"), 40000000000ULL);
    ck_assert_uint_eq(parse_ok("40 GB"), 40000000000ULL);
    ck_assert_uint_eq(parse_ok("80000M"), 80000000000ULL);
    ck_assert_uint_eq(parse_ok("80000MB"), 80000000000ULL);
    ck_assert_uint_eq(parse_ok("1.5T"), 1500000000000ULL);
    ck_assert_uint_eq(parse_ok("1.5TB"), 1500000000000ULL);
    ck_assert_uint_eq(parse_ok("2K"), 2000ULL);
    ck_assert_uint_eq(parse_ok("2kB"), 2000ULL);
    ck_assert_uint_eq(parse_ok("1P"), 1000000000000000ULL);
    ck_assert_uint_eq(parse_ok("0.5G"), 500000000ULL);
    ck_assert_uint_eq(parse_ok(".5G"), 500000000ULL);
    ck_assert_uint_eq(parse_ok("40.G"), 40000000000ULL);
}
END_TEST

START_TEST(test_binary_units)
{
    ck_assert_uint_eq(parse_ok("40GiB"), 40ULL << 30);
    ck_assert_uint_eq(parse_ok("40Gi"), 40ULL << 30);
    ck_assert_uint_eq(parse_ok("512MiB"), 512ULL << 20);
    ck_assert_uint_eq(parse_ok("512mib"), 512ULL << 20);
    ck_assert_uint_eq(parse_ok("1KiB"), 1024ULL);
    ck_assert_uint_eq(parse_ok("2TiB"), 2ULL << 40);
    ck_assert_uint_eq(parse_ok("1.5GiB"), 3ULL << 29);
    ck_assert_uint_eq(parse_ok("0.25KiB"), 256ULL);
}
END_TEST

START_TEST(test_plain_bytes)
{
    ck_assert_uint_eq(parse_ok("1"), 1ULL);
    ck_assert_uint_eq(parse_ok("123456789"), 123456789ULL);
    ck_assert_uint_eq(parse_ok("4096B"), 4096ULL);
    ck_assert_uint_eq(parse_ok("9223372036854775807"), 9223372036854775807ULL);
}
END_TEST

START_TEST(test_rejects)
{
    parse_bad(NULL, "empty");
    parse_bad("", "empty");
    parse_bad("G", "not a size");
    parse_bad("abc", "not a size");
    parse_bad("-5G", "negative");
    parse_bad("+5G", "not a size");
    parse_bad("0", "positive");
    parse_bad("0G", "positive");
    parse_bad("0.0GiB", "positive");
    parse_bad("40X", "unknown unit");
    parse_bad("40GBs", "unknown unit");
    parse_bad("40  G", "unknown unit");
    parse_bad(" 40G", "not a size");
    parse_bad("40G ", "unknown unit");
    parse_bad("1e9", "unknown unit");
    parse_bad("0x10", "unknown unit");
    parse_bad("inf", "not a size");
    parse_bad("nan", "not a size");
    parse_bad(".", "no digits");
    parse_bad("1.5", "whole number of bytes");
    parse_bad("1.0001K", "whole number of bytes");
    parse_bad("9223372036854775808", "too large");
    parse_bad("99999999999999999999999", "too large");
    parse_bad("9300P", "too large");
    parse_bad("8388608TiB", "too large");
    parse_bad("1.0000000000000000000001G", "decimals");
}
END_TEST

START_TEST(test_format)
{
    char buf[32];
    zb_size_format(40e9, buf, sizeof buf);
    ck_assert_str_eq(buf, "40.00 GB");
    zb_size_format(512, buf, sizeof buf);
    ck_assert_str_eq(buf, "512 B");
    zb_size_format(1.5e12, buf, sizeof buf);
    ck_assert_str_eq(buf, "1.50 TB");
    zb_size_format(85899345920.0, buf, sizeof buf);
    ck_assert_str_eq(buf, "85.90 GB");
    /* A plan's peak as search, simulate and render print it (issue 29.4). */
    zb_size_format(39862853120.0, buf, sizeof buf);
    ck_assert_str_eq(buf, "39.86 GB");
    zb_size_format(39980000000.0, buf, sizeof buf); /* not "40.0 GB" under a 40 GB limit */
    ck_assert_str_eq(buf, "39.98 GB");
    /* Rounding up to 1000 moves up a unit. */
    zb_size_format(999.996e9, buf, sizeof buf);
    ck_assert_str_eq(buf, "1.00 TB");
    zb_size_format(999.6, buf, sizeof buf);
    ck_assert_str_eq(buf, "1.00 KB");
    zb_size_format(999.4, buf, sizeof buf);
    ck_assert_str_eq(buf, "999 B");
    zb_size_format(7360000, buf, sizeof buf);
    ck_assert_str_eq(buf, "7.36 MB");
}
END_TEST

/* Fixed notation for times and counts: never an exponent (issue 29.4:
 * "limit 9.96256e+08", "cost 1.155e+04 ms"). */
START_TEST(test_num_format)
{
    char buf[64];
    zb_num_format(8090.54116423896, 6, buf, sizeof buf);
    ck_assert_str_eq(buf, "8090.54");
    zb_num_format(11550.3, 4, buf, sizeof buf);
    ck_assert_str_eq(buf, "11550");
    zb_num_format(996256000.0, 6, buf, sizeof buf);
    ck_assert_str_eq(buf, "996256000");
    zb_num_format(17652875264.0, 6, buf, sizeof buf);
    ck_assert_str_eq(buf, "17652875264");
    zb_num_format(0.000123456, 6, buf, sizeof buf);
    ck_assert_str_eq(buf, "0.000123456");
    zb_num_format(2.5, 6, buf, sizeof buf);
    ck_assert_str_eq(buf, "2.5");
    zb_num_format(9.9999996, 6, buf, sizeof buf);
    ck_assert_str_eq(buf, "10");
    zb_num_format(0, 6, buf, sizeof buf);
    ck_assert_str_eq(buf, "0");
    zb_num_format(-1.5e-9, 3, buf, sizeof buf);
    ck_assert_str_eq(buf, "-0.0000000015");
    zb_num_format(-0.0, 3, buf, sizeof buf);
    ck_assert_str_eq(buf, "0");
    zb_num_format(1.0 / 0.0, 6, buf, sizeof buf);
    ck_assert_str_eq(buf, "inf");
    for (double v = 1e-9; v < 1e18; v *= 7.3) {
        zb_num_format(v, 6, buf, sizeof buf);
        ck_assert_msg(!strchr(buf, 'e'), "%g printed as %s", v, buf);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("size");
    TCase *tc = tcase_create("parse");
    tcase_add_test(tc, test_decimal_units);
    tcase_add_test(tc, test_binary_units);
    tcase_add_test(tc, test_num_format);
    tcase_add_test(tc, test_plain_bytes);
    tcase_add_test(tc, test_rejects);
    tcase_add_test(tc, test_format);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
