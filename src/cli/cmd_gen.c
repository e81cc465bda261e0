/*
 * cmd_gen.c: `zbsched gen KIND -p P -m M [...] [-o FILE]`, write a schedule.
 *
 * The handcrafted kinds (gpipe, 1f1b, interleaved, interleaved-zb, zb-h1,
 * zb-h2, zb-v) come from gen_lookup (schedules/gen.h); the memory-limited
 * ones (zb-auto,
 * v-min, v-half, v-zb, ilp) from solver/solver.h; zb-auto and ilp need
 * --mem-limit, the V family defaults to its published limits.
 * Every generated schedule is validated before it is written, so a
 * generator bug surfaces here as one error line instead of a broken file.
 */
#include "src/cli/cli.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schedules/gen.h"
#include "src/cli/cli_costs.h"
#include "src/cli/gen_vocab_flags.h"
#include "src/cli/progress.h"
#include "solver/solver.h"
#include "src/sched_io.h"
#include "src/validate.h"

/* A kind found by a solver rather than handcrafted. */
typedef struct solver_kind {
    const char *kind; /* as typed after `zbsched gen` */
    gen_fn fn;        /* the solver entry point */
    int chunks;       /* virtual stages per device it builds */
} solver_kind;

static const solver_kind solver_kinds[] = {
    { "zb-auto", solver_zb_auto, 1 },
    { "v-min", solver_v_min, 2 },
    { "v-half", solver_v_half, 2 },
    { "v-zb", solver_v_zb, 2 },
    { "ilp", solver_ilp, 1 },
};

static void usage(FILE *out)
{
    fprintf(out,
        "usage: zbsched gen KIND --stages P --microbatches M [options] [-o FILE]\n"
        "\n"
        "KIND: gpipe, 1f1b, interleaved, zb-h1, zb-h2, zb-v (handcrafted),\n"
        "      interleaved-zb (PyTorch's interleaved ZB-1p; with --mem-limit: the\n"
        "      fastest order of that family that fits),\n"
        "      zb-auto, ilp (need --mem-limit); v-min, v-half, v-zb (default limits p/3, p/2, p M_B)\n"
        "\n"
        "  -p, --stages P         pipeline devices (default 4)\n"
        "  -m, --microbatches M   micro-batches (default 8)\n"
        "      --chunks V         virtual stages per device (interleaved, interleaved-zb: default 2)\n"
        "      --tf X --tb X --tw X --tcomm X\n"
        "                         time of F, B, W and of one transfer (default 1, 1, 1, 0)\n"
        "      --mf X --mb X --mw X\n"
        "                         memory delta of F, B, W (default 2, -1, -1)\n"
        "      --mem-limit X[,X...]\n"
        "                         activation memory limit, one value or one per device,\n"
        "                         in the same units as --mf/--mb/--mw\n"
        "      --time-limit S     seconds for the ILP solver (default: its own)\n"
        "      --vocab plain|parallel\n"
        "                         parallel: the output layer split over all devices, S and T\n"
        "                         passes inserted into the KIND's order (format version 2;\n"
        "                         docs/vocab-parallel.md); default plain\n"
        "      --vocab-variant 1|2  Vocab-1 (one barrier per micro-batch, default) or Vocab-2\n"
        "      --ts X --tt X      time of one S / T pass of one shard (default 0.5, 0.5)\n"
        "      --tc0 X --tc1 X    time of barrier C0 / C1, the all-reduces (default 0, 0)\n"
        "      --ms X             memory S holds until T frees it (default 1)\n"
        "  -o, --output FILE      schedule file to write ('-' or none: stdout)\n"
        "  -q, --quiet            no live status line (ilp) on stderr\n"
        "  -h, --help             this text\n");
}

/* Parses "X" or "X,X,..." (p values) into a malloc'd array of p limits. */
static int parse_mem_limit(const char *text, int p, double **out, zb_err *err)
{
    double *a = calloc((size_t)p, sizeof *a);
    char *copy = strdup(text);
    int n = 0, rc = 0;
    if (!a || !copy) {
        rc = zb_fail(err, "out of memory");
        goto out;
    }
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (n == p) {
            rc = zb_fail(err, "--mem-limit: more values than devices (%d)", p);
            goto out;
        }
        if (cli_parse_double("--mem-limit", tok, &a[n], err)) {
            rc = -1;
            goto out;
        }
        if (a[n] <= 0 || a[n] > SCHED_MAX_TOTAL) {
            rc = zb_fail(err, "--mem-limit: %s must be positive and at most %g", tok, SCHED_MAX_TOTAL);
            goto out;
        }
        n++;
    }
    if (n == 1) {
        for (int i = 1; i < p; i++)
            a[i] = a[0];
    } else if (n != p) {
        rc = zb_fail(err, "--mem-limit: give one value or one per device (%d), got %d", p, n);
        goto out;
    }
out:
    free(copy);
    if (rc) {
        free(a);
        return -1;
    }
    *out = a;
    return 0;
}

enum {
    OPT_CHUNKS = 256, OPT_MEM_LIMIT, OPT_TIME_LIMIT,
};

/* Runs generator or solver fn (from_solver: one of solver_kinds) for kind
 * with the checked parameters gp, records gp's memory limit in the plan,
 * validates it, adds the vocabulary passes va asks for and writes the plan
 * to out_path (NULL or "-": stdout), with the ILP's progress line unless
 * quiet.  Returns the exit status (1 after one line on stderr). */
static int generate_and_save(const char *kind, gen_fn fn, int from_solver, gen_params *gp,
                             gen_vocab_args *va, const char *out_path, int quiet)
{
    zb_err err = { "" };
    sched_t *s = NULL;
    int rc = 0;
    cli_progress prog; /* the ILP's live status line (progress.h) */
    cli_progress_init(&prog, quiet);
    solver_set_progress(cli_progress_solver, &prog);
    cli_progress_what(&prog, "%s", kind);
    int gen_rc = fn(gp, &s, &err);
    solver_set_progress(NULL, NULL);
    cli_progress_end(&prog);
    if (gen_rc != 0) {
        rc = cli_fail(&err);
        goto out;
    }
    /* Record the limit the schedule was planned under, unless the solver
     * already did. */
    if (gp->mem_limit && !s->mem_limit && s->n_devices == gp->stages) {
        s->mem_limit = malloc(sizeof(double) * (size_t)s->n_devices);
        if (!s->mem_limit) {
            rc = cli_error("out of memory");
            goto out;
        }
        memcpy(s->mem_limit, gp->mem_limit, sizeof(double) * (size_t)s->n_devices);
    }
    if (sched_validate(s, &err) != 0) {
        rc = cli_error("%s produced an invalid schedule: %s", kind, err.msg);
        goto out;
    }
    if (va->parallel && gen_vocab_apply(&s, va, fn, gp, from_solver, kind, &err) != 0) {
        rc = cli_fail(&err);
        goto out;
    }
    if (sched_save_file(s, out_path, &err) != 0)
        rc = cli_fail(&err);
out:
    sched_free(s);
    return rc;
}

int cmd_gen(int argc, char **argv)
{
    static const struct option opts[] = {
        { "stages", required_argument, NULL, 'p' },
        { "microbatches", required_argument, NULL, 'm' },
        { "chunks", required_argument, NULL, OPT_CHUNKS },
        CLI_COST_OPTIONS,
        { "mem-limit", required_argument, NULL, OPT_MEM_LIMIT },
        { "time-limit", required_argument, NULL, OPT_TIME_LIMIT },
        GEN_VOCAB_OPTIONS,
        { "output", required_argument, NULL, 'o' },
        { "quiet", no_argument, NULL, 'q' },
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    gen_params gp;
    gen_params_default(&gp);
    const char *out_path = NULL, *mem_text = NULL;
    int chunks_given = 0, quiet = 0;
    gen_vocab_args va = { .parallel = 0,
                          .v = { .variant = SCHED_VOCAB_1, .t_s = 0.5, .t_t = 0.5, .d_s = 1 } };
    zb_err err = { "" };
    long v;
    double x;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":p:m:o:qh", opts, NULL)) != -1) {
        switch (c) {
        case 'p':
            if (cli_parse_int("--stages", optarg, 1, 65536, &v, &err))
                return cli_fail(&err);
            gp.stages = (int)v;
            break;
        case 'm':
            if (cli_parse_int("--microbatches", optarg, 1, 1 << 24, &v, &err))
                return cli_fail(&err);
            gp.microbatches = (int)v;
            break;
        case OPT_CHUNKS:
            if (cli_parse_int("--chunks", optarg, 1, 1024, &v, &err))
                return cli_fail(&err);
            gp.chunks = (int)v;
            chunks_given = 1;
            break;
        case OPT_TIME_LIMIT:
            if (cli_parse_double("--time-limit", optarg, &x, &err))
                return cli_fail(&err);
            if (x < 0)
                return cli_error("--time-limit: %s must not be negative", optarg);
            gp.time_limit = x;
            break;
        case OPT_MEM_LIMIT:
            mem_text = optarg;
            break;
        case 'o':
            out_path = optarg;
            break;
        case 'q':
            quiet = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case ':':
            return cli_usage("gen", "%s needs a value (see --help)", argv[optind - 1]);
        default: {
            int r = gen_vocab_option(c, optarg, &va, &err);
            if (r < 0)
                return cli_fail(&err);
            if (r > 0)
                break;
            r = cli_cost_option(c, optarg, &gp, &err);
            if (r < 0)
                return cli_fail(&err);
            if (r == 0)
                return cli_usage("gen", "unknown option '%s' (see --help)", argv[optind - 1]);
            break;
        }
        }
    }
    if (optind >= argc)
        return cli_usage("gen", "missing KIND (gpipe, 1f1b, interleaved, interleaved-zb, zb-h1, zb-h2, zb-v, "
                         "zb-auto, v-min, v-half, v-zb, ilp)");
    if (optind + 1 < argc)
        return cli_usage("gen", "unexpected argument '%s'", argv[optind + 1]);
    const char *kind = argv[optind];

    gen_fn fn = gen_lookup(kind);
    const solver_kind *sk = NULL;
    for (size_t i = 0; !fn && i < sizeof solver_kinds / sizeof solver_kinds[0]; i++)
        if (!strcmp(kind, solver_kinds[i].kind))
            sk = &solver_kinds[i];
    if (!fn && !sk)
        return cli_usage("gen", "unknown kind '%s' (gpipe, 1f1b, interleaved, interleaved-zb, "
                         "zb-h1, zb-h2, zb-v, zb-auto, v-min, v-half, v-zb, ilp)", kind);
    if (!chunks_given && (!strcmp(kind, "interleaved") || !strcmp(kind, "interleaved-zb") ||
                          !strcmp(kind, "zb-v")))
        gp.chunks = 2;
    if (sk) {
        fn = sk->fn;
        if (!chunks_given)
            gp.chunks = sk->chunks;
        /* The V family has published default limits (p/3, p/2, p micro-batches
         * of M_B); zb-auto and the ILP have none and need one. */
        if (!mem_text && strncmp(kind, "v-", 2) != 0)
            return cli_usage("gen", "%s needs --mem-limit (one value or one per device)", kind);
    }
    if (cli_check_output(out_path, NULL))
        return 1;
    if (mem_text && parse_mem_limit(mem_text, gp.stages, &gp.mem_limit, &err))
        return cli_fail(&err);
    /* Refuse flags whose totals would overflow before any generator or
     * solver computes with them. */
    if (sched_check_cost_totals(gp.t_f + gp.t_b + gp.t_w + 3 * gp.t_comm,
                                fabs(gp.m_f) + fabs(gp.m_b) + fabs(gp.m_w),
                                (double)gp.stages * gp.chunks * gp.microbatches, &err)) {
        free(gp.mem_limit);
        return cli_fail(&err);
    }

    int rc = generate_and_save(kind, fn, sk != NULL, &gp, &va, out_path, quiet);
    free(gp.mem_limit);
    return rc;
}
