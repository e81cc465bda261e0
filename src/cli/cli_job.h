/*
 * cli_job.h: the job flags that `search` and `profile` share: the model
 * (--model, --seq-len, --micro-batch) and, for search, the hardware
 * (--gpu, --mem), so that both commands accept the same spellings,
 * ranges and messages.  (gen has none of them: its --mem-limit is in its
 * generators' memory units, and run reads its model from the plan.)
 *
 * Flags are collected while getopt runs and applied once at the end
 * (cli_job_finish), so their order does not matter: `--seq-len 4096
 * --model llama3-8b` sets the sequence length of the model named after it.
 */
#ifndef ZB_CLI_JOB_H
#define ZB_CLI_JOB_H

#include <getopt.h>

#include "src/model.h"

/* getopt_long values of the shared flags (below the commands' own). */
enum {
    CLI_OPT_MODEL = 900, CLI_OPT_SEQ_LEN, CLI_OPT_MICRO_BATCH, CLI_OPT_GPU, CLI_OPT_MEM,
};

/* The struct option entries of the model flags and of the hardware flags. */
#define CLI_JOB_MODEL_OPTIONS                                          \
    { "model", required_argument, NULL, CLI_OPT_MODEL },               \
    { "seq-len", required_argument, NULL, CLI_OPT_SEQ_LEN },           \
    { "micro-batch", required_argument, NULL, CLI_OPT_MICRO_BATCH }
#define CLI_JOB_GPU_OPTIONS                                            \
    { "gpu", required_argument, NULL, CLI_OPT_GPU },                   \
    { "mem", required_argument, NULL, CLI_OPT_MEM }

typedef struct cli_job {
    const char *model_arg; /* --model as given (a preset or a file), or the default */
    const char *gpu_arg;   /* --gpu as given, or the default */
    int model_seen;        /* 1 when --model was given (its argument is an input file to protect) */
    int gpu_seen;          /* 1 when --gpu was given */
    int mem_seen;          /* 1 when --mem was given */
    double mem_bytes;      /* --mem, bytes (0 until given) */
    long seq_len;          /* --seq-len, tokens; 0: the model's */
    long micro_batch;      /* --micro-batch, sequences; 0: the model's */
    zb_model model;        /* filled by cli_job_finish */
    zb_gpu gpu;            /* filled by cli_job_finish */
} cli_job;

/* Starts j with the defaults model_arg and gpu_arg (gpu_arg NULL: the
 * command takes no GPU). */
void cli_job_init(cli_job *j, const char *model_arg, const char *gpu_arg);

/* Takes getopt_long's result c with value arg when c is a shared flag.
 * Returns 1 when it was (and the value is valid), 0 when c is not a
 * shared flag, -1 with err set ("--mem: ...") for a bad value. */
int cli_job_option(int c, const char *arg, cli_job *j, zb_err *err);

/* Loads the model and the GPU and applies --seq-len and --micro-batch.
 * Returns 0, or -1 with err naming the flag ("--model: ..."). */
int cli_job_finish(cli_job *j, zb_err *err);

#endif
