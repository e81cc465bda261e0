/*
 * gen_vocab_flags.c: `zbsched gen --vocab parallel` and its cost flags
 * (gen_vocab_flags.h): the flags' checks, and the passes put into the
 * generated schedule, under its memory limit when it has one.
 */
#include "src/cli/gen_vocab_flags.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "src/cli/cli.h"
#include "src/sim.h"
#include "src/validate.h"

/* Handles one of the vocabulary options; returns 1 when c was one, 0 when
 * not, -1 on a bad value (err set). */
int gen_vocab_option(int c, const char *arg, gen_vocab_args *va, zb_err *err)
{
    double x;
    long n;
    switch (c) {
    case GEN_OPT_VOCAB:
        if (!strcmp(arg, "plain"))
            va->parallel = 0;
        else if (!strcmp(arg, "parallel"))
            va->parallel = 1;
        else
            return zb_fail(err, "--vocab: '%s' is not plain or parallel", arg);
        return 1;
    case GEN_OPT_VOCAB_VARIANT:
        if (cli_parse_int("--vocab-variant", arg, 1, 2, &n, err))
            return -1;
        va->v.variant = (int)n;
        return 1;
    case GEN_OPT_TS: case GEN_OPT_TT: case GEN_OPT_TC0: case GEN_OPT_TC1: case GEN_OPT_MS: {
        static const char *const names[] = { "--ts", "--tt", "--tc0", "--tc1", "--ms" };
        const char *name = names[c - GEN_OPT_TS];
        if (cli_parse_double(name, arg, &x, err))
            return -1;
        if (c != GEN_OPT_MS && x < 0)
            return zb_fail(err, "%s: %s must not be negative", name, arg);
        /* The magnitude rules of every cost flag (cli_costs.c, validate.h). */
        if (x != 0 && fabs(x) < SCHED_MIN_NONZERO)
            return zb_fail(err, "%s: %s is too small (use 0, or at least %g)", name, arg,
                           SCHED_MIN_NONZERO);
        if (fabs(x) > SCHED_MAX_TOTAL)
            return zb_fail(err, "%s: %s is too large (at most %g)", name, arg, SCHED_MAX_TOTAL);
        double *dst[] = { &va->v.t_s, &va->v.t_t, &va->v.t_c0, &va->v.t_c1, &va->v.d_s };
        *dst[c - GEN_OPT_TS] = x;
        return 1;
    }
    default:
        return 0;
    }
}

/* Inserts the vocabulary passes into base and checks the result against
 * limit ([p], or NULL for none).  Stores the result in *out; returns 0, 1
 * when the result does not fit (err says where; *out untouched), -1 on
 * other errors. */
static int vocab_insert_fits(const sched_t *base, const sched_vocab *v, const char *kind,
                             const double *limit, sched_t **out, zb_err *err)
{
    if (!limit) { /* no limit: the fastest placement */
        if (gen_vocab_insert(base, v, out, err) != 0)
            return zb_wrap(err, "%s: ", kind);
        return 0;
    }
    /* Under a limit: the fastest of the placements (lookahead, hold) that
     * fits, since each lookahead holds more micro-batches. */
    sched_t *best = NULL;
    double best_cost = INFINITY, least_over = INFINITY;
    int over_dev = 0;
    double over_peak = 0;
    for (int q = 0; q < 2 * (GEN_VOCAB_MAX_LOOKAHEAD + 1); q++) {
        sched_t *vs = NULL;
        if (gen_vocab_insert_with(base, v, q / 2, q % 2, &vs, err) != 0) {
            sched_free(best);
            return zb_wrap(err, "%s: ", kind);
        }
        sim_result r;
        if (sim_run(vs, &r, err) != 0) {
            sched_free(vs);
            sched_free(best);
            return -1;
        }
        double over = -INFINITY;
        int dev = 0;
        for (int d = 0; d < vs->n_devices; d++)
            if (r.dev[d].peak_mem - limit[d] > over) {
                over = r.dev[d].peak_mem - limit[d];
                dev = d;
            }
        if (over <= 1e-9 * fabs(limit[dev]) && r.cost < best_cost * (1 - 1e-9)) {
            sched_free(best);
            best = vs;
            best_cost = r.cost;
            vs = NULL;
        } else if (over > 1e-9 * fabs(limit[dev]) && over < least_over) {
            least_over = over;
            over_dev = dev;
            over_peak = r.dev[dev].peak_mem;
        }
        sched_free(vs);
        sim_result_free(&r);
    }
    if (!best) {
        zb_fail(err, "%s with --vocab parallel needs %.6g on device %d, over its memory "
                "limit %.6g (each S pass holds --ms until its T)",
                kind, over_peak, over_dev, limit[over_dev]);
        return 1;
    }
    *out = best;
    return 0;
}

/* --vocab parallel: replaces *s with the schedule plus its passes.  A
 * memory-limited solver (zb-auto, the V family, the ILP) plans for the
 * transformer stages only, so when the passes push a device over the limit
 * the solver runs again with the limit lowered by k * --ms (k = 1, 2, 3),
 * leaving room for k logits shards in flight; the file records the
 * original limit.  Handcrafted kinds have fixed orders and no retry. */
int gen_vocab_apply(sched_t **s, gen_vocab_args *va, gen_fn fn, const gen_params *gp,
                       int is_solver, const char *kind, zb_err *err)
{
    va->v.d_t = -va->v.d_s; /* T frees what S took */
    int p = (*s)->n_devices;
    /* The passes' totals, told per flag before any placement: every device
     * runs S and T for every micro-batch, and each micro-batch waits on its
     * barriers (the validator checks them again with the base costs). */
    double m = (*s)->n_micro;
    if (!((va->v.t_s + va->v.t_t) * p * m + (va->v.t_c0 + va->v.t_c1) * m <= SCHED_MAX_TOTAL))
        return zb_fail(err, "the vocabulary passes and barriers of %d devices x %.0f micro-batches "
                       "add up to more than %g: use smaller --ts/--tt/--tc0/--tc1", p, m,
                       SCHED_MAX_TOTAL);
    if (!(2 * fabs(va->v.d_s) * p * m <= SCHED_MAX_TOTAL))
        return zb_fail(err, "the vocabulary memory deltas of %d devices x %.0f micro-batches add "
                       "up to more than %g: use a smaller --ms", p, m, SCHED_MAX_TOTAL);
    double *limit = NULL;
    if ((*s)->mem_limit) {
        if (!(limit = malloc(sizeof *limit * (size_t)p)))
            return zb_fail(err, "out of memory");
        memcpy(limit, (*s)->mem_limit, sizeof *limit * (size_t)p);
    }
    sched_t *vs = NULL;
    int rc = vocab_insert_fits(*s, &va->v, kind, limit, &vs, err);
    zb_err first = *err;
    for (int k = 1; rc == 1 && is_solver && k <= 3 && va->v.d_s > 0; k++) {
        gen_params g2 = *gp;
        double *lower = malloc(sizeof *lower * (size_t)p);
        if (!lower) {
            rc = zb_fail(err, "out of memory");
            break;
        }
        for (int d = 0; d < p; d++)
            lower[d] = limit[d] - k * va->v.d_s;
        g2.mem_limit = lower;
        sched_t *base = NULL;
        zb_err e2 = { "" };
        if (fn(&g2, &base, &e2) == 0 && base->n_devices == p)
            rc = vocab_insert_fits(base, &va->v, kind, limit, &vs, &e2);
        sched_free(base);
        free(lower);
        if (rc < 0) { /* a failed lower retry is not the user's error */
            rc = 1;
            break;
        }
    }
    if (rc == 1)
        *err = first;
    if (rc == 0) {
        if (limit) { /* the limit the user (or the family) set */
            free(vs->mem_limit);
            vs->mem_limit = limit;
            limit = NULL;
        }
        sched_free(*s);
        *s = vs;
    }
    free(limit);
    return rc == 0 ? 0 : -1;
}

