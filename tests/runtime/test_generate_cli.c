/*
 * test_generate_cli.c: `zbsched generate` as a user runs it, on a
 * checkpoint directory written by `zbsched run --model tiny-mem
 * --checkpoint DIR`: stdout is exactly the prompt plus N characters, the
 * same seed gives the same text, --json has text, tokens and tokens_per_s,
 * and stays valid JSON that loses nothing for any bytes the model emits,
 * greedy --no-cache prints the cached text, generation goes past the
 * context by cropping it (--max-context refuses instead), and bad input is
 * one line on stderr with nothing on stdout.
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

/* Past the context the conditioning is cropped and generation goes on
 * (issue 29.7's "done when": 6 + 100 characters from a model of context
 * 64); --max-context keeps the old refusal. */
START_TEST(past_the_context)
{
    ck_assert_msg(gen("--prompt 'ROMEO:' --tokens 100") == 0, "%s", err);
    ck_assert_uint_eq(strlen(out), 106);
    ck_assert(strncmp(out, "ROMEO:", 6) == 0);
    ck_assert_ptr_nonnull(strstr(err, "100 tokens"));
    ck_assert_ptr_nonnull(strstr(err, "context cropped to the last 64 tokens for 41 of them"));
    ck_assert_int_eq(gen("--prompt 'ROMEO:' --tokens 100 --json -q"), 0);
    cJSON *a = cJSON_Parse(out);
    ck_assert_ptr_nonnull(a);
    ck_assert_uint_eq(strlen(cJSON_GetObjectItem(a, "text")->valuestring), 106);
    ck_assert_int_eq((int)cJSON_GetObjectItem(a, "cropped_tokens")->valuedouble, 41);
    ck_assert_int_eq((int)cJSON_GetObjectItem(a, "context")->valuedouble, 64);
    cJSON_Delete(a);
    ck_assert_int_ne(gen("--prompt 'ROMEO:' --tokens 100 --max-context"), 0);
    cli_assert_one_line(err, "context of 64");
    ck_assert_ptr_nonnull(strstr(err, "ask for at most 58"));
    ck_assert_str_eq(out, "");
}
END_TEST

/* Decodes standard base64 (RFC 4648) into out; returns the length or -1. */
static long base64_decode(const char *in, unsigned char *out, size_t cap)
{
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t n = strlen(in), len = 0;
    if (n % 4)
        return -1;
    for (size_t i = 0; i < n; i += 4) {
        unsigned v = 0;
        int pad = 0;
        for (int k = 0; k < 4; k++) {
            const char *at = strchr(alphabet, in[i + k]);
            if (in[i + k] == '=')
                pad++;
            else if (!at || pad)
                return -1;
            v = v << 6 | (unsigned)(at ? at - alphabet : 0);
        }
        for (int k = 0; k < 3 - pad; k++) {
            if (len >= cap)
                return -1;
            out[len++] = (unsigned char)(v >> (16 - 8 * k));
        }
    }
    return (long)len;
}

/* Whether text[0..n) is valid UTF-8 (RFC 3629) with no raw byte below
 * 0x20 but the newlines JSON allows outside strings. */
static int valid_json_bytes(const unsigned char *t, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned c = t[i];
        size_t len = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3
                   : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
        if (len == 0 || i + len > n || (c < 0x20 && c != '\n'))
            return 0;
        for (size_t k = 1; k < len; k++)
            if ((t[i + k] & 0xc0) != 0x80)
                return 0;
        if ((c == 0xe0 && t[i + 1] < 0xa0) || (c == 0xed && t[i + 1] > 0x9f) ||
            (c == 0xf0 && t[i + 1] < 0x90) || (c == 0xf4 && t[i + 1] > 0x8f))
            return 0;
        i += len;
    }
    return 1;
}

/*
 * --json for any bytes the model can produce (issue 23.4): a model
 * trained on a text of NUL, 0x01, 0x7f, 0xff, '"', '\\', newlines, the
 * two bytes of "é" and the three of "€" can emit each of them alone,
 * half sequences included.  The prompt holds all of them (so the output
 * does whatever the sampling draws).  The document must be valid JSON in
 * valid UTF-8, "text" the bytes with NUL and control bytes escaped and
 * one U+FFFD per invalid subpart, "text_base64" exactly the bytes that
 * the streaming run with the same seed writes to stdout.
 */
START_TEST(json_any_bytes)
{
    char bdir[160], data[200], cmd[1024];
    snprintf(bdir, sizeof bdir, "%s_bytes", dir);
    snprintf(data, sizeof data, "%s_bytes.txt", dir);
    static const unsigned char alphabet[] = { 0x00, 0x01, 0x7f, 0xff, '"', '\\', '\n', 'a', 'b',
                                              0xc3, 0xa9, 0xe2, 0x82, 0xac };
    FILE *f = fopen(data, "wb");
    ck_assert_ptr_nonnull(f);
    unsigned long st = 7;
    for (int i = 0; i < 20000; i++) {
        st = st * 6364136223846793005UL + 1442695040888963407UL;
        fputc(alphabet[(st >> 33) % sizeof alphabet], f);
    }
    fclose(f);
    snprintf(cmd, sizeof cmd, "run %s.json --model tiny --steps 2 --batch-size 2 --eval-windows 2 "
             "--checkpoint %s -q --data %s", dir, bdir, data);
    ck_assert_msg(cli_run(NULL, NULL, cmd, out, sizeof out, err, sizeof err) == 0, "%s", err);
    static const unsigned char prompt[] = { 'a', 0xc3, 0xa9, 0x00, 0xff, 0xc3, 'b', 0x01, '"', '\\',
                                            0xe2, 0x82, 0xac, 0x7f, '\n', 0xe2, 0x82, 'a' };
    char ppath[200];
    snprintf(ppath, sizeof ppath, "%s/prompt.bin", bdir);
    ck_assert_ptr_nonnull(f = fopen(ppath, "wb"));
    fwrite(prompt, 1, sizeof prompt, f);
    fclose(f);

    /* What the streaming run writes, byte for byte (out holds NULs). */
    snprintf(cmd, sizeof cmd, "generate --checkpoint %s --prompt-file %s --tokens 60 "
             "--temperature 1.5 --seed 3 -q > %s/stream.bin", bdir, ppath, bdir);
    ck_assert_msg(cli_run(NULL, NULL, cmd, out, sizeof out, err, sizeof err) == 0, "%s", err);
    char spath[200];
    snprintf(spath, sizeof spath, "%s/stream.bin", bdir);
    unsigned char streamed[256];
    ck_assert_ptr_nonnull(f = fopen(spath, "rb"));
    size_t n_streamed = fread(streamed, 1, sizeof streamed, f);
    fclose(f);
    ck_assert_uint_eq(n_streamed, sizeof prompt + 60);

    snprintf(cmd, sizeof cmd, "generate --checkpoint %s --prompt-file %s --tokens 60 "
             "--temperature 1.5 --seed 3 -q --json", bdir, ppath);
    ck_assert_msg(cli_run(NULL, NULL, cmd, out, sizeof out, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(valid_json_bytes((const unsigned char *)out, strlen(out)), "not UTF-8: %s", out);
    cJSON *doc = cJSON_Parse(out);
    ck_assert_msg(doc != NULL, "not JSON: %s", out);
    unsigned char bytes[256];
    long n = base64_decode(cJSON_GetObjectItem(doc, "text_base64")->valuestring, bytes, sizeof bytes);
    ck_assert_int_eq(n, (long)n_streamed);
    ck_assert(memcmp(bytes, streamed, n_streamed) == 0);
    ck_assert(cJSON_IsFalse(cJSON_GetObjectItem(doc, "utf8")));
    ck_assert_int_eq((int)cJSON_GetObjectItem(doc, "bytes")->valuedouble, (int)n_streamed);
    ck_assert_int_eq((int)cJSON_GetObjectItem(doc, "prompt_bytes")->valuedouble, (int)sizeof prompt);
    /* The prompt's part of "text" as written: é kept, NUL escaped, 0xff
     * and the lone 0xc3 one U+FFFD each, 0x01, '"', '\\' escaped, € kept,
     * 0x7f escaped, the truncated e2 82 one U+FFFD (a maximal subpart). */
    static const char want[] = "\"text\":\"a\xc3\xa9\\u0000\xef\xbf\xbd\xef\xbf\xbd"
                               "b\\u0001\\\"\\\\\xe2\x82\xac\\u007f\\n\xef\xbf\xbd" "a";
    ck_assert_msg(strstr(out, want) != NULL, "%s", out);
    cJSON_Delete(doc);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", bdir, data);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

START_TEST(bad_input)
{
    ck_assert_int_ne(gen("--prompt 'KING:' --tokens 60 --max-context"), 0); /* 5 + 60 > 64 */
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
    tcase_add_test(tc, past_the_context);
    tcase_add_test(tc, json_any_bytes);
    tcase_add_test(tc, bad_input);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
