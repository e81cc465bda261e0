/*
 * gen_vocab_flags.h: the vocabulary-parallel flags of `zbsched gen`
 * (--vocab, --vocab-variant, --ts, --tt, --tc0, --tc1, --ms) and what
 * they do to the generated schedule (gen_vocab_insert, schedules/gen.h;
 * docs/vocab-parallel.md).  Kept out of cmd_gen.c, which parses the rest
 * of gen's flags and writes the file.
 */
#ifndef ZB_CLI_GEN_VOCAB_FLAGS_H
#define ZB_CLI_GEN_VOCAB_FLAGS_H

#include <getopt.h>

#include "schedules/gen.h"

/* getopt_long values of the flags (below gen's own and the cost flags'). */
enum {
    GEN_OPT_VOCAB = 600, GEN_OPT_VOCAB_VARIANT, GEN_OPT_TS, GEN_OPT_TT, GEN_OPT_TC0, GEN_OPT_TC1, GEN_OPT_MS,
};

#define GEN_VOCAB_OPTIONS                                               \
    { "vocab", required_argument, NULL, GEN_OPT_VOCAB },                \
    { "vocab-variant", required_argument, NULL, GEN_OPT_VOCAB_VARIANT }, \
    { "ts", required_argument, NULL, GEN_OPT_TS },                      \
    { "tt", required_argument, NULL, GEN_OPT_TT },                      \
    { "tc0", required_argument, NULL, GEN_OPT_TC0 },                    \
    { "tc1", required_argument, NULL, GEN_OPT_TC1 },                    \
    { "ms", required_argument, NULL, GEN_OPT_MS }

/* --vocab and its costs, gathered before the schedule exists. */
typedef struct gen_vocab_args {
    int parallel;    /* --vocab parallel */
    sched_vocab v;   /* variant and costs for gen_vocab_insert */
} gen_vocab_args;

/* Handles one of the vocabulary options; returns 1 when c was one, 0 when
 * not, -1 on a bad value (err set). */
int gen_vocab_option(int c, const char *arg, gen_vocab_args *va, zb_err *err);

/* --vocab parallel: replaces *s (built by fn from gp; is_solver when fn
 * plans under a memory limit) with the schedule plus its passes.  Returns
 * 0, or -1 with err set (the passes do not fit the limit, or bad costs). */
int gen_vocab_apply(sched_t **s, gen_vocab_args *va, gen_fn fn, const gen_params *gp, int is_solver,
                    const char *kind, zb_err *err);

#endif
