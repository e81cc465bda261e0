/*
 * run_args.h: the flags of `zbsched run`, parsed and checked against each
 * other, before anything is read or started.
 */
#ifndef ZB_CLI_RUN_ARGS_H
#define ZB_CLI_RUN_ARGS_H

#include <stdio.h>

#include "runtime/outer/islands.h"

#define RUN_MAX_LEAVES 64

/* Everything the command line sets. */
typedef struct run_args {
    const char *file;        /* schedule file */
    const char *data;        /* text file */
    const char *model;       /* --model preset or file, or NULL (run_plan.h decides) */
    const char *ckpt_dir;    /* --checkpoint, or NULL */
    const char *trace;       /* --trace, or NULL */
    const char *log;         /* --log: the metrics log's path ("-": stdout), or NULL */
    FILE *log_file;          /* the open --log on the process that writes it, else NULL
                              * (run_log_open) */
    long steps;              /* --steps */
    long stop_at;            /* --stop-at: last step of this invocation (steps when not given) */
    long eval_every;         /* 0: at the end only */
    long eval_windows;       /* --eval-windows */
    long ckpt_every;         /* --checkpoint-every (0: at evaluations and the end only) */
    long batch;              /* 0: the model's */
    long seed;               /* --seed */
    double lr;               /* --lr */
    double clip;             /* --clip */
    int sync_opt;            /* --sync-optimizer */
    int resume;              /* --resume */
    int json;                /* --json */
    int quiet;               /* --quiet */
    int cuda;                /* --device cuda */
    long gpu;                /* --gpu, or -1 when not given */
    long threads;            /* --threads: kernel threads per device (0: cores / devices) */
    long max_skipped;        /* --max-skipped: divergence rules 2-3 of runtime/job.h (0: off) */
    double max_loss_factor;  /* --max-loss-factor: divergence rule 4 (0: off) */
    int eval_flag;           /* 1 when --eval-every or --eval-windows was given */
    islands_opts isl;        /* --replicas and the outer-optimizer flags */
    islands_event leave[RUN_MAX_LEAVES]; /* --leave R:S, in the order given (isl.events) */
    int outer_flag;          /* 1 when an outer-optimizer flag was given */
} run_args;

/* Prints run's help text on out. */
void run_usage(FILE *out);

/* Parses argv into *a.  Returns -1 to go on, or the exit status after
 * printing (0 for --help, 2 for a usage error with its one line). */
int run_parse_args(int argc, char **argv, run_args *a);

#endif
