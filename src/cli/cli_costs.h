/*
 * cli_costs.h: the cost and memory flags that `gen` and `import` share
 * (--tf --tb --tw --tcomm --mf --mb --mw), so that both commands accept the
 * same spellings, defaults and checks.
 */
#ifndef ZB_CLI_COSTS_H
#define ZB_CLI_COSTS_H

#include "schedules/gen.h"

/* getopt_long values of the shared flags; commands number their own flags
 * below CLI_OPT_TF. */
enum {
    CLI_OPT_TF = 1000, CLI_OPT_TB, CLI_OPT_TW, CLI_OPT_TCOMM,
    CLI_OPT_MF, CLI_OPT_MB, CLI_OPT_MW,
};

/* The struct option entries of the shared flags, for a command's table. */
#define CLI_COST_OPTIONS                                  \
    { "tf", required_argument, NULL, CLI_OPT_TF },        \
    { "tb", required_argument, NULL, CLI_OPT_TB },        \
    { "tw", required_argument, NULL, CLI_OPT_TW },        \
    { "tcomm", required_argument, NULL, CLI_OPT_TCOMM },  \
    { "mf", required_argument, NULL, CLI_OPT_MF },        \
    { "mb", required_argument, NULL, CLI_OPT_MB },        \
    { "mw", required_argument, NULL, CLI_OPT_MW }

/* Applies getopt_long's result c with value arg to gp when c is one of the
 * shared flags.  Returns 1 when it was (and the value is valid: finite;
 * times not negative), 0 when c is not a shared flag, and -1 with err set
 * for a bad value. */
int cli_cost_option(int c, const char *arg, gen_params *gp, zb_err *err);

#endif
