/*
 * main.c: `zbsched COMMAND [ARGS]`, the dispatch table of the CLI.
 */
#include "src/cli/cli.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kernels.h"
#include "src/input.h"
#include "src/size.h"

typedef struct command {
    const char *name;                 /* as typed after `zbsched` */
    int (*fn)(int argc, char **argv); /* gets argv[0] = the command name */
    const char *summary;              /* one line for `zbsched help` */
} command;

static const command commands[] = {
    { "gen",      cmd_gen,      "generate a schedule file (gpipe, 1f1b, interleaved, zb-h1, zb-h2, zb-v, zb-auto, v-*, ilp)" },
    { "simulate", cmd_simulate, "validate and simulate a schedule file" },
    { "export",   cmd_export,   "write a schedule as PyTorch pipelining CSV" },
    { "import",   cmd_import,   "read a PyTorch pipelining CSV into a schedule file" },
    { "search",   cmd_search,   "find the fastest schedule that fits a per-GPU memory limit" },
    { "render",   cmd_render,   "draw a schedule: SVG timeline, Perfetto trace or Graphviz DAG" },
    { "run",      cmd_run,      "train a Llama-style model by executing a schedule file" },
    { "profile",  cmd_profile,  "measure per-op times and memory and write a profile file" },
    { "launch",   cmd_launch,   "start one process per local GPU for a multi-GPU run" },
    { "eplb",     cmd_eplb,     "place MoE experts on GPUs with DeepSeek's expert-parallel load balancer" },
    { "generate", cmd_generate, "generate text from a checkpoint of `run` (KV cache)" },
    { "checkpoint", cmd_checkpoint, "weights in and out: a run's first state, Hugging Face export and import" },
};

static void usage(FILE *out)
{
    fprintf(out, "usage: zbsched COMMAND [ARGS]   (zbsched COMMAND --help for its flags)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
}

/* The last word on standard output: whatever a command printed is still
 * in stdio's buffer, and an error writing it (a full disk, /dev/full, a
 * closed pipe end) shows only now.  Returns rc, or 1 after one line when
 * the command had succeeded but its output did not get out.  A stdout
 * closed from the start (EBADF) with nothing written is not an error. */
static int finish_stdout(int rc)
{
    int failed = ferror(stdout), e = errno;
    if (fflush(stdout) != 0) {
        failed = 1;
        e = errno;
    }
    if (fclose(stdout) != 0 && (failed || errno != EBADF)) {
        failed = 1;
        e = errno;
    }
    if (failed && rc == 0)
        return cli_error("cannot write to standard output: %s", strerror(e ? e : EIO));
    return rc;
}

static int dispatch(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "help") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("zbsched %s\n", ZBSCHED_VERSION);
        return 0;
    }
    /* The input size cap (src/input.h) for every command. */
    const char *max_input = getenv("ZBSCHED_MAX_INPUT");
    if (max_input && *max_input) {
        uint64_t bytes;
        zb_err err = { "" };
        if (zb_size_parse(max_input, &bytes, &err) < 0)
            return cli_error("ZBSCHED_MAX_INPUT: %s", err.msg);
        zb_input_set_max(bytes);
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) {
            /* BLAS is loaded on first use (kernels.h), so gen, simulate
             * and the rest never pay its start-up; the commands that
             * multiply matrices load it here, to fail with one line */
            zb_err err = { "" };
            if ((!strcmp(argv[1], "run") || !strcmp(argv[1], "profile") ||
                 !strcmp(argv[1], "generate")) && kernels_blas_load(&err) != 0)
                return cli_fail(&err);
            return commands[i].fn(argc - 1, argv + 1);
        }
    cli_error("unknown command '%s' (try 'zbsched help')", argv[1]);
    return 2;
}

int main(int argc, char **argv)
{
    /* Under `ulimit -f`, a write past the limit raises SIGXFSZ, whose
     * default action kills the process without a word, leaving whatever
     * it had created.  Ignored, the write fails with EFBIG instead, and
     * every writer's error path reports it in one line and removes its
     * temporary (src/outfile.h). */
    signal(SIGXFSZ, SIG_IGN);
    return finish_stdout(dispatch(argc, argv));
}
