/*
 * cmd_generate.c: `zbsched generate --checkpoint DIR [--prompt TEXT |
 * --prompt-file F] [--tokens N] [--temperature T] [--top-k K] [--top-p P]
 * [--seed S] [--json] [--no-cache]`, text from a model trained by
 * `zbsched run --checkpoint DIR`.
 *
 * The decoding lives in runtime/generate.h; this file parses flags, prints
 * the prompt and streams each new character to stdout as it comes (flushed,
 * so a pipe sees it at once), and ends with one summary line on stderr.
 * Past the model's context the conditioning is cropped to its last seq_len
 * tokens (nanoGPT's rule); --max-context refuses such a request instead.
 *
 * With --json nothing is streamed: one object is printed at the end
 * (runtime/generate_json.h, exact for any bytes the model emits).
 * docs/generate.md has the decoding recipe.  Bad input (no checkpoint, a prompt character the
 * model never saw, with --max-context more tokens than the context holds)
 * is one line on stderr and a non-zero exit before anything is printed.
 */
#include "src/cli/cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/generate.h"
#include "runtime/generate_json.h"
#include "src/sched_io.h"

static void usage(FILE *out)
{
    fprintf(out,
        "usage: zbsched generate --checkpoint DIR [--prompt TEXT | --prompt-file F]\n"
        "                        [--tokens N] [--temperature T] [--top-k K] [--top-p P]\n"
        "                        [--seed S] [--json] [--no-cache] [--max-context]\n"
        "\n"
        "Generates text with a model trained by `zbsched run --checkpoint DIR` (any\n"
        "schedule or split), one character at a time with a KV cache, and streams the\n"
        "prompt and the new characters to stdout.  Past the model's context (its\n"
        "seq_len) each character is drawn from the last seq_len characters, as nanoGPT\n"
        "does; that window is rerun for every character, which is slower\n"
        "(docs/generate.md).\n"
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
        "      --max-context      refuse prompt + N beyond the context instead of cropping\n"
        "      --json             print one object instead of streaming: \"text\" (U+FFFD for\n"
        "                         bytes that are not UTF-8), \"text_base64\" (the exact\n"
        "                         bytes), \"utf8\", \"tokens\", \"tokens_per_s\", ...\n"
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

/* Runs the checked request o on g after the prompt (prompt_len bytes;
 * none starts from "\n"): streams the prompt and each new token to stdout,
 * or with json prints the one object at the end, then (unless quiet) the
 * summary line on stderr.  Returns the exit status (0, or 1 after one
 * line on stderr). */
static int generate_and_print(gen_model *g, const char *prompt, size_t prompt_len,
                              const gen_opts *o, int json, int quiet)
{
    zb_err err = { { 0 } };
    int rc;
    const char *start = prompt_len > 0 ? prompt : "\n";
    size_t start_len = prompt_len > 0 ? prompt_len : 1;
    gen_text buf = { 0 };
    gen_result res;
    if (!json) {
        /* an empty prompt starts from "\n" (gen_run), which is printed too */
        int write_errno = 0;
        emit_stdout(&write_errno, start, start_len);
        rc = gen_run(g, prompt, prompt_len, o, emit_stdout, &write_errno, &res, &err);
        if (rc == 0 && write_errno)
            rc = zb_fail(&err, "cannot write to standard output: %s", strerror(write_errno));
        if (rc == 0 && isatty(STDOUT_FILENO))
            fputc('\n', stdout);
    } else {
        gen_emit_text(&buf, start, start_len);
        rc = gen_run(g, prompt, prompt_len, o, gen_emit_text, &buf, &res, &err);
        if (rc == 0 && buf.oom)
            rc = zb_fail(&err, "out of memory");
    }
    if (rc != 0) {
        free(buf.data);
        return cli_fail(&err);
    }
    if (json) {
        char *s = gen_result_json(&buf, start_len, &res, o, gen_model_config(g)->seq_len);
        if (!s) {
            free(buf.data);
            return cli_error("out of memory");
        }
        printf("%s\n", s);
        free(s);
    }
    if (!quiet) {
        char crop[128] = "";
        if (res.n_cropped > 0)
            snprintf(crop, sizeof crop, "; context cropped to the last %d tokens for %d of them",
                     gen_model_config(g)->seq_len, res.n_cropped);
        fprintf(stderr, "zbsched generate: %s (%zu parameters), %d tokens in %.3f s, %.1f tokens/s "
                "(%s%s)\n", gen_model_config(g)->name, gen_param_count(g), res.n_new, res.seconds,
                res.tokens_per_s, o->use_cache ? "KV cache" : "no cache", crop);
    }
    free(buf.data);
    return 0;
}

int cmd_generate(int argc, char **argv)
{
    enum { O_CKPT = 256, O_PROMPT, O_PROMPT_FILE, O_TEMP, O_TOPK, O_TOPP, O_SEED, O_JSON,
           O_NOCACHE, O_MAXCTX };
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
        { "max-context", no_argument, NULL, O_MAXCTX },
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
        case O_MAXCTX: o.max_context = 1; break;
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
    if (rc == 0)
        rc = gen_check_request(g, prompt_len, &o, &err);
    if (rc != 0) {
        gen_free(g);
        free(file_text);
        return cli_fail(&err);
    }
    rc = generate_and_print(g, prompt, prompt_len, &o, json, quiet);
    gen_free(g);
    free(file_text);
    return rc;
}
