/*
 * test_generate_cli.c: `zbsched generate` as a user runs it, on a
 * checkpoint directory written by `zbsched run --model tiny-mem
 * --checkpoint DIR`: stdout is exactly the prompt plus N characters, the
 * same seed gives the same text, --json has text, tokens and tokens_per_s,
 * greedy --no-cache prints the cached text, and bad input is one line on
 * stderr with nothing on stdout.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "tests/common/cli_run.h"

static char dir[128];
static char out[1 << 16], err[1 << 14];

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/zb_gencli_%d", (int)getpid());
    char cmd[512];
    snprintf(cmd, sizeof cmd, "gen 1f1b -p 2 -m 2 -o %s.json", dir);
    ck_assert_int_eq(cli_run(NULL, NULL, cmd, out, sizeof out, err, sizeof err), 0);
    snprintf(cmd, sizeof cmd, "run %s.json --model tiny-mem --steps 2 --batch-size 2 "
             "--eval-windows 2 --checkpoint %s -q --data \"$ZB_SOURCE_ROOT/../shared/data/"
             "tinyshakespeare.txt\"", dir, dir);
    ck_assert_msg(cli_run(NULL, NULL, cmd, out, sizeof out, err, sizeof err) == 0, "%s", err);
}

static void teardown(void)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s.json'", dir, dir);
    ck_assert_int_eq(system(cmd), 0);
}

static int gen(const char *args)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "generate --checkpoint %s %s", dir, args);
    return cli_run(NULL, NULL, cmd, out, sizeof out, err, sizeof err);
}

START_TEST(prompt_plus_exactly_n)
{
    ck_assert_msg(gen("--prompt 'KING:' --tokens 37 --seed 5") == 0, "%s", err);
    ck_assert_uint_eq(strlen(out), 5 + 37);
    ck_assert(strncmp(out, "KING:", 5) == 0);
    ck_assert_ptr_nonnull(strstr(err, "37 tokens"));
    char first[256];
    snprintf(first, sizeof first, "%s", out);
    ck_assert_int_eq(gen("--prompt 'KING:' --tokens 37 --seed 5 -q"), 0);
    ck_assert_str_eq(out, first);
    ck_assert_str_eq(err, "");
    ck_assert_int_eq(gen("--prompt 'KING:' --tokens 37 --seed 6 -q"), 0);
    ck_assert_str_ne(out, first);
    /* default prompt: a newline */
    ck_assert_int_eq(gen("-n 10 -q"), 0);
    ck_assert_uint_eq(strlen(out), 11);
    ck_assert_int_eq(out[0], '\n');
}
END_TEST

START_TEST(json_and_no_cache)
{
    ck_assert_msg(gen("--prompt 'ROMEO:' --tokens 30 --temperature 0 --json -q") == 0, "%s", err);
    cJSON *a = cJSON_Parse(out);
    ck_assert_ptr_nonnull(a);
    const cJSON *text = cJSON_GetObjectItem(a, "text");
    ck_assert(cJSON_IsString(text));
    ck_assert_uint_eq(strlen(text->valuestring), 6 + 30);
    ck_assert_int_eq((int)cJSON_GetObjectItem(a, "tokens")->valuedouble, 30);
    ck_assert(cJSON_GetObjectItem(a, "tokens_per_s")->valuedouble > 0);
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(a, "cache")));
    ck_assert_int_eq(gen("--prompt 'ROMEO:' --tokens 30 --temperature 0 --json -q --no-cache"), 0);
    cJSON *b = cJSON_Parse(out);
    ck_assert_ptr_nonnull(b);
    ck_assert_str_eq(cJSON_GetObjectItem(b, "text")->valuestring, text->valuestring);
    ck_assert(cJSON_IsFalse(cJSON_GetObjectItem(b, "cache")));
    cJSON_Delete(a);
    cJSON_Delete(b);
    /* a prompt file */
    char path[160];
    snprintf(path, sizeof path, "%s/prompt.txt", dir);
    FILE *f = fopen(path, "w");
    fputs("ROMEO:", f);
    fclose(f);
    char args[256];
    snprintf(args, sizeof args, "--prompt-file %s --tokens 30 --temperature 0 -q", path);
    ck_assert_int_eq(gen(args), 0);
    ck_assert_uint_eq(strlen(out), 36);
}
END_TEST

START_TEST(bad_input)
{
    ck_assert_int_ne(gen("--prompt 'KING:' --tokens 60"), 0); /* 5 + 60 > 64 */
    cli_assert_one_line(err, "context of 64");
    ck_assert_str_eq(out, "");
    ck_assert_int_ne(gen("--prompt 'K~' --tokens 3"), 0);
    cli_assert_one_line(err, "vocabulary");
    ck_assert_str_eq(out, "");
    ck_assert_int_ne(gen("--temperature -1"), 0);
    cli_assert_one_line(err, "--temperature");
    ck_assert_int_ne(gen("--top-p 0"), 0);
    cli_assert_one_line(err, "--top-p");
    ck_assert_int_ne(gen("--prompt a --prompt-file b"), 0);
    cli_assert_one_line(err, "exclude");
    ck_assert_int_ne(cli_run(NULL, NULL, "generate --checkpoint /nonexistent-zb", out, sizeof out,
                             err, sizeof err), 0);
    cli_assert_one_line(err, "model description");
    ck_assert_int_ne(cli_run(NULL, NULL, "generate", out, sizeof out, err, sizeof err), 0);
    cli_assert_one_line(err, "--checkpoint");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("runtime_generate_cli");
    TCase *tc = tcase_create("cli");
    tcase_set_timeout(tc, 120);
    tcase_add_unchecked_fixture(tc, setup, teardown);
    tcase_add_test(tc, prompt_plus_exactly_n);
    tcase_add_test(tc, json_and_no_cache);
    tcase_add_test(tc, bad_input);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
