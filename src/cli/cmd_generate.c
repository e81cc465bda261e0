/*
 * cmd_generate.c: `zbsched generate --checkpoint DIR [--prompt TEXT |
 * --prompt-file F] [--tokens N] [--temperature T] [--top-k K] [--top-p P]
 * [--seed S] [--json] [--no-cache]`, text from a model trained by
 * `zbsched run --checkpoint DIR`.
 *
 * The decoding lives in runtime/generate.h; this file parses flags, prints
 * the prompt and streams each new character to stdout as it comes (flushed,
 * so a pipe sees it at once), and ends with one summary line on stderr.
 * With --json nothing is streamed: one object {"text", "tokens",
 * "tokens_per_s", ...} is printed at the end, text being the prompt plus
 * the new characters.  Bad input (no checkpoint, a prompt character the
 * model never saw, more tokens than the context holds) is one line on
 * stderr and a non-zero exit before anything is printed.
 */
#include "src/cli/cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "runtime/generate.h"
#include "src/sched_io.h"

static void usage(FILE *out)
{
    fprintf(out,
        "usage: zbsched generate --checkpoint DIR [--prompt TEXT | --prompt-file F]\n"
        "                        [--tokens N] [--temperature T] [--top-k K] [--top-p P]\n"
        "                        [--seed S] [--json] [--no-cache]\n"
        "\n"
        "Generates text with a model trained by `zbsched run --checkpoint DIR` (any\n"
        "schedule or split), one character at a time with a KV cache, and streams the\n"
        "prompt and the new characters to stdout.  Generation stops at the model's\n"
        "context: prompt + N must fit in its seq_len (docs/generate.md).\n"
        "\n"
        "      --checkpoint DIR   the directory `run --checkpoint` wrote\n"
        "      --prompt TEXT      text to continue (default: a newline)\n"
        "      --prompt-file F    read the prompt from a file\n"
        "  -n, --tokens N         new characters (default 100)\n"
        "      --temperature T    0 = greedy; default 0.8\n"
        "      --top-k K          sample among the K most likely (default 0: all)\n"
        "      --top-p P          nucleus sampling, 0 < P <= 1 (default 1: off)\n"
        "      --seed S           sampling seed (default 1): same seed, same text\n"
        "      --no-cache         rerun the whole prefix for every token (checks the cache)\n"
        "      --json             print {\"text\", \"tokens\", \"tokens_per_s\"} instead of streaming\n"
        "  -q, --quiet            no summary line on stderr\n"
        "  -h, --help             this text\n");
}

/* Streams one token's bytes to stdout.  ctx is an int that keeps the
 * errno of the first failed write (0 while all went out): main's final
 * flush check would see only the stream's error flag, and by then errno
 * belongs to a later call (isatty), so the message would name the wrong
 * cause. */
static void emit_stdout(void *ctx, const char *bytes, size_t n)
{
    int *write_errno = ctx;
    if (*write_errno)
        return; /* nothing more gets out; the command fails at the end */
    if (fwrite(bytes, 1, n, stdout) != n || fflush(stdout) != 0)
        *write_errno = errno ? errno : EIO;
}

/* Collects the tokens' bytes for --json. */
typedef struct text_buf {
    char *data; /* NUL-terminated */
    size_t len; /* bytes before the NUL */
    size_t cap; /* allocated */
    int oom;    /* 1 when an append failed */
} text_buf;

static void emit_buffer(void *ctx, const char *bytes, size_t n)
{
    text_buf *b = ctx;
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = (b->cap ? b->cap * 2 : 256) + n;
        char *p = realloc(b->data, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->data = p;
        b->cap = cap;
    }
    memcpy(b->data + b->len, bytes, n);
    b->len += n;
    b->data[b->len] = '\0';
}

int cmd_generate(int argc, char **argv)
{
    enum { O_CKPT = 256, O_PROMPT, O_PROMPT_FILE, O_TEMP, O_TOPK, O_TOPP, O_SEED, O_JSON,
           O_NOCACHE };
    static const struct option opts[] = {
        { "checkpoint", required_argument, NULL, O_CKPT },
        { "prompt", required_argument, NULL, O_PROMPT },
        { "prompt-file", required_argument, NULL, O_PROMPT_FILE },
        { "tokens", required_argument, NULL, 'n' },
        { "temperature", required_argument, NULL, O_TEMP },
        { "top-k", required_argument, NULL, O_TOPK },
        { "top-p", required_argument, NULL, O_TOPP },
        { "seed", required_argument, NULL, O_SEED },
        { "json", no_argument, NULL, O_JSON },
        { "no-cache", no_argument, NULL, O_NOCACHE },
        { "quiet", no_argument, NULL, 'q' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    const char *dir = NULL, *prompt = NULL, *prompt_file = NULL;
    gen_opts o;
    gen_opts_default(&o);
    long tokens = o.n_tokens, topk = 0, seed = 1;
    double temp = o.temperature, topp = o.top_p;
    int json = 0, quiet = 0, c;
    zb_err err = { { 0 } };
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":n:qh", opts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case O_CKPT: dir = optarg; break;
        case O_PROMPT: prompt = optarg; break;
        case O_PROMPT_FILE: prompt_file = optarg; break;
        case 'n': bad = cli_parse_int("--tokens", optarg, 0, 1L << 24, &tokens, &err); break;
        case O_TEMP:
            bad = cli_parse_double("--temperature", optarg, &temp, &err);
            if (!bad && temp < 0)
                bad = zb_fail(&err, "--temperature must be >= 0");
            break;
        case O_TOPK: bad = cli_parse_int("--top-k", optarg, 0, 1L << 20, &topk, &err); break;
        case O_TOPP:
            bad = cli_parse_double("--top-p", optarg, &topp, &err);
            if (!bad && !(topp > 0 && topp <= 1))
                bad = zb_fail(&err, "--top-p must be in (0, 1]");
            break;
        case O_SEED: bad = cli_parse_int("--seed", optarg, 0, 0x7fffffffffffffffL, &seed, &err); break;
        case O_JSON: json = 1; break;
        case O_NOCACHE: o.use_cache = 0; break;
        case 'q': quiet = 1; break;
        case 'h': usage(stdout); return 0;
        case ':': return cli_usage(argv[0], "%s needs a value (try --help)", argv[optind - 1]);
        default: return cli_usage(argv[0], "unknown option '%s' (try --help)", argv[optind - 1]);
        }
        if (bad)
            return cli_usage(argv[0], "%s", err.msg);
    }
    if (optind < argc)
        return cli_usage(argv[0], "unexpected argument '%s'", argv[optind]);
    if (!dir)
        return cli_usage(argv[0], "--checkpoint DIR is required (try --help)");
    if (prompt && prompt_file)
        return cli_usage(argv[0], "--prompt and --prompt-file exclude each other");
    o.n_tokens = (int)tokens;
    o.temperature = temp;
    o.top_k = (int)topk;
    o.top_p = topp;
    o.seed = (uint64_t)seed;

    char *file_text = NULL;
    size_t prompt_len = prompt ? strlen(prompt) : 0;
    if (prompt_file) {
        if (zb_read_file(prompt_file, &file_text, &prompt_len, &err) != 0)
            return cli_fail(&err);
        prompt = file_text;
    }
    gen_model *g = NULL;
    if (gen_load(dir, &g, &err) != 0) {
        free(file_text);
        return cli_fail(&err);
    }
    /* everything the run could refuse is checked before the first byte */
    int32_t *probe = malloc(sizeof(int32_t) * (prompt_len ? prompt_len : 1));
    int rc = probe ? gen_encode(g, prompt ? prompt : "", prompt_len, probe, &err) : -1;
    free(probe);
    if (!probe)
        zb_fail(&err, "out of memory");
    if (rc != 0) {
        gen_free(g);
        free(file_text);
        return cli_fail(&err);
    }
    const char *start = prompt_len > 0 ? prompt : "\n";
    size_t start_len = prompt_len > 0 ? prompt_len : 1;
    text_buf buf = { 0 };
    gen_result res;
    if (!json) {
        /* an empty prompt starts from "\n" (gen_run), which is printed too */
        int write_errno = 0;
        if (o.n_tokens + start_len <= (size_t)gen_model_config(g)->seq_len)
            emit_stdout(&write_errno, start, start_len);
        rc = gen_run(g, prompt, prompt_len, &o, emit_stdout, &write_errno, &res, &err);
        if (rc == 0 && write_errno)
            rc = zb_fail(&err, "cannot write to standard output: %s", strerror(write_errno));
        if (rc == 0 && isatty(STDOUT_FILENO))
            fputc('\n', stdout);
    } else {
        emit_buffer(&buf, start, start_len);
        rc = gen_run(g, prompt, prompt_len, &o, emit_buffer, &buf, &res, &err);
        if (rc == 0 && buf.oom)
            rc = zb_fail(&err, "out of memory");
    }
    if (rc != 0) {
        free(buf.data);
        gen_free(g);
        free(file_text);
        return cli_fail(&err);
    }
    if (json) {
        cJSON *out = cJSON_CreateObject();
        char *s = NULL;
        if (out && cJSON_AddStringToObject(out, "text", buf.data) &&
            cJSON_AddNumberToObject(out, "tokens", res.n_new) &&
            cJSON_AddNumberToObject(out, "tokens_per_s", res.tokens_per_s) &&
            cJSON_AddNumberToObject(out, "seconds", res.seconds) &&
            cJSON_AddBoolToObject(out, "cache", o.use_cache) &&
            cJSON_AddNumberToObject(out, "seed", (double)o.seed) &&
            cJSON_AddNumberToObject(out, "temperature", o.temperature))
            s = cJSON_PrintUnformatted(out);
        cJSON_Delete(out);
        if (!s) {
            free(buf.data);
            gen_free(g);
            free(file_text);
            return cli_error("out of memory");
        }
        printf("%s\n", s);
        free(s);
    }
    if (!quiet)
        fprintf(stderr, "zbsched generate: %s (%zu parameters), %d tokens in %.3f s, %.1f tokens/s "
                "(%s)\n", gen_model_config(g)->name, gen_param_count(g), res.n_new, res.seconds,
                res.tokens_per_s, o.use_cache ? "KV cache" : "no cache");
    free(buf.data);
    gen_free(g);
    free(file_text);
    return 0;
}
