/*
 * cmd_import.c: `zbsched import CSV [cost and memory flags] [-o FILE]`.
 *
 * Reads a PyTorch pipelining compute-only CSV (src/torch_csv.h): devices
 * are its rows, stages and micro-batches come from the largest indices
 * (--microbatches may raise the latter), placement from which row lists
 * each stage.  A CSV carries no costs, so they come from the same flags as
 * `zbsched gen` (defaults: unit times, T_comm 0, dF=+2, dB=-1, dW=-1).  The
 * result is validated before it is written.
 */
#include "src/cli/cli.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schedules/gen.h"
#include "src/cli/cli_costs.h"
#include "src/sched_io.h"
#include "src/torch_csv.h"
#include "src/validate.h"

static void usage(FILE *out)
{
    fprintf(out,
        "usage: zbsched import CSV [options] [-o FILE]\n"
        "\n"
        "Reads a PyTorch pipelining compute-only CSV ('-' for stdin) and writes a\n"
        "zbsched schedule file.\n"
        "\n"
        "  -m, --microbatches M   micro-batches (default: largest index in the CSV + 1)\n"
        "      --tf X --tb X --tw X --tcomm X\n"
        "                         time of F, B (PyTorch I), W and one transfer\n"
        "                         (default 1, 1, 1, 0)\n"
        "      --mf X --mb X --mw X\n"
        "                         memory delta of F, B, W (default 2, -1, -1)\n"
        "      --name NAME        the schedule's name (default torch-csv)\n"
        "  -o, --output FILE      schedule file to write ('-' or none: stdout)\n"
        "  -h, --help             this text\n");
}

enum { OPT_NAME = 256 };

int cmd_import(int argc, char **argv)
{
    static const struct option opts[] = {
        { "microbatches", required_argument, NULL, 'm' },
        CLI_COST_OPTIONS,
        { "name", required_argument, NULL, OPT_NAME },
        { "output", required_argument, NULL, 'o' },
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    gen_params gp;
    gen_params_default(&gp);
    const char *out_path = NULL, *name = NULL;
    long n_micro = 0;
    zb_err err = { "" };
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":m:o:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm':
            if (cli_parse_int("--microbatches", optarg, 1, 1 << 24, &n_micro, &err))
                return cli_fail(&err);
            break;
        case OPT_NAME:
            if (strlen(optarg) >= sizeof(((sched_t *)0)->name))
                return cli_usage("import", "--name is longer than %zu characters",
                                 sizeof(((sched_t *)0)->name) - 1);
            name = optarg;
            break;
        case 'o': out_path = optarg; break;
        case 'h': usage(stdout); return 0;
        case ':': return cli_usage("import", "%s needs a value (see --help)", argv[optind - 1]);
        default: {
            int r = cli_cost_option(c, optarg, &gp, &err);
            if (r < 0)
                return cli_fail(&err);
            if (r == 0)
                return cli_usage("import", "unknown option '%s' (see --help)", argv[optind - 1]);
            break;
        }
        }
    }
    if (optind >= argc)
        return cli_usage("import", "missing CSV file (see --help)");
    if (optind + 1 < argc)
        return cli_usage("import", "unexpected argument '%s'", argv[optind + 1]);
    const char *path = argv[optind];
    if (cli_check_output(out_path, path))
        return 1;
    char *text;
    size_t len;
    if (zb_read_file(path, &text, &len, &err))
        return cli_fail(&err);
    sched_t *s = NULL;
    int rc = 0;
    torch_csv_stats st = { 0 };
    if (torch_csv_read_stats(text, len, (int)n_micro, &s, &st, &err)) {
        rc = cli_error("%s: %s", path, err.msg);
        goto out;
    }
    if (name)
        snprintf(s->name, sizeof s->name, "%s", name);
    sched_set_costs(s, gp.t_f, gp.t_b, gp.t_w, gp.t_comm);
    sched_set_mem(s, gp.m_f, gp.m_b, gp.m_w);
    if (sched_validate(s, &err)) {
        rc = cli_error("%s: invalid schedule: %s", path, err.msg);
        goto out;
    }
    if (sched_save_file(s, out_path, &err)) {
        rc = cli_fail(&err);
        goto out;
    }
    /* What the compute-only model left out, so that nobody wonders where
     * their SEND/RECV rows went. */
    if (st.dropped_comm)
        fprintf(stderr, "import: dropped %ld communication action%s (the runtime derives "
                "transfers from the compute order)\n", st.dropped_comm,
                st.dropped_comm == 1 ? "" : "s");
    if (st.overlaps_expanded)
        fprintf(stderr, "import: expanded %ld OVERLAP_F_B group%s into their sub-actions\n",
                st.overlaps_expanded, st.overlaps_expanded == 1 ? "" : "s");
out:
    free(text);
    sched_free(s);
    return rc;
}
