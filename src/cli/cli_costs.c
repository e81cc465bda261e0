/*
 * cli_costs.c: parsing of the shared cost and memory flags (cli_costs.h).
 */
#include "src/cli/cli_costs.h"

#include "src/cli/cli.h"

#include <math.h>

#include "src/validate.h"

int cli_cost_option(int c, const char *arg, gen_params *gp, zb_err *err)
{
    static const char *const names[] = { "--tf", "--tb", "--tw", "--tcomm", "--mf", "--mb", "--mw" };
    if (c < CLI_OPT_TF || c > CLI_OPT_MW)
        return 0;
    const char *flag = names[c - CLI_OPT_TF];
    double x;
    if (cli_parse_double(flag, arg, &x, err))
        return -1;
    /* Times are durations; memory deltas are signed by nature. */
    if (x < 0 && c <= CLI_OPT_TCOMM)
        return zb_fail(err, "%s: %s must not be negative", flag, arg);
    /* The schedule's magnitude rules (validate.h), told per flag. */
    if (x != 0 && fabs(x) < SCHED_MIN_NONZERO)
        return zb_fail(err, "%s: %s is too small (use 0, or at least %g)", flag, arg, SCHED_MIN_NONZERO);
    if (fabs(x) > SCHED_MAX_TOTAL)
        return zb_fail(err, "%s: %s is too large (at most %g)", flag, arg, SCHED_MAX_TOTAL);
    switch (c) {
    case CLI_OPT_TF: gp->t_f = x; break;
    case CLI_OPT_TB: gp->t_b = x; break;
    case CLI_OPT_TW: gp->t_w = x; break;
    case CLI_OPT_TCOMM: gp->t_comm = x; break;
    case CLI_OPT_MF: gp->m_f = x; break;
    case CLI_OPT_MB: gp->m_b = x; break;
    default: gp->m_w = x; break;
    }
    return 1;
}
