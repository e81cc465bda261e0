/*
 * cmd_export.c: `zbsched export FILE --format torch-csv [-o OUT]`.
 *
 * Writes a validated schedule in PyTorch pipelining's compute-only CSV
 * (src/torch_csv.h), which torch.distributed.pipelining's _load_csv and
 * torchtitan's --parallelism.pipeline_parallel_schedule_csv read.
 */
#include "src/cli/cli.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/sched_io.h"
#include "src/torch_csv.h"
#include "src/validate.h"

static void usage(FILE *out)
{
    fprintf(out,
        "usage: zbsched export FILE [--format torch-csv] [-o OUT]\n"
        "\n"
        "Writes the schedule FILE ('-' for stdin) as PyTorch pipelining CSV: one row\n"
        "per rank, actions <stage><type><mb> with F forward, I input-gradient\n"
        "backward (our B), W weight-gradient backward, B full backward (our BW).\n"
        "\n"
        "  -f, --format NAME   output format; only torch-csv (the default)\n"
        "  -o, --output OUT    file to write ('-' or none: stdout)\n"
        "  -h, --help          this text\n");
}

int cmd_export(int argc, char **argv)
{
    static const struct option opts[] = {
        { "format", required_argument, NULL, 'f' },
        { "output", required_argument, NULL, 'o' },
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    const char *format = "torch-csv", *out_path = NULL;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":f:o:h", opts, NULL)) != -1) {
        switch (c) {
        case 'f': format = optarg; break;
        case 'o': out_path = optarg; break;
        case 'h': usage(stdout); return 0;
        case ':': return cli_usage("export", "%s needs a value (see --help)", argv[optind - 1]);
        default: return cli_usage("export", "unknown option '%s' (see --help)", argv[optind - 1]);
        }
    }
    if (strcmp(format, "torch-csv"))
        return cli_usage("export", "unknown format '%s' (supported: torch-csv)", format);
    if (optind >= argc)
        return cli_usage("export", "missing FILE (see --help)");
    if (optind + 1 < argc)
        return cli_usage("export", "unexpected argument '%s'", argv[optind + 1]);
    const char *path = argv[optind];
    if (cli_check_output(out_path, path))
        return 1;
    zb_err err = { "" };
    sched_t *s = NULL;
    if (sched_load_file(path, &s, &err))
        return cli_fail(&err);
    int rc = 0;
    if (sched_validate(s, &err)) {
        rc = cli_error("%s: invalid schedule: %s", path, err.msg);
    } else if (torch_csv_check(s, &err)) {
        rc = cli_error("%s: %s", path, err.msg);
    } else {
        char *csv = torch_csv_write(s);
        if (!csv)
            rc = cli_error("out of memory");
        else if (zb_write_atomic(out_path, csv, strlen(csv), &err))
            rc = cli_fail(&err);
        free(csv);
    }
    sched_free(s);
    return rc;
}
