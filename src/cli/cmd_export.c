/*
 * cmd_export.c: `zbsched export FILE [--format F] [-o OUT]`.
 *
 * Parses the flags, loads and validates the schedule, reads its plan
 * (src/plan.h), and hands both to the exporter (export/export.h), which
 * decides whether the engine can express the plan and writes its files.
 * Then one note on stderr: what the CSV alone leaves out, or how the
 * written files are used.
 */
#include "src/cli/cli.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export/export.h"
#include "src/sched_io.h"
#include "src/validate.h"

static void usage(FILE *out)
{
    fprintf(out,
        "usage: zbsched export FILE [--format F] [-o OUT]\n"
        "\n"
        "Writes the plan in FILE ('-' for stdin) for the engine that will run it:\n"
        "  torch-csv    PyTorch pipelining's compute-only CSV: one row per rank, actions\n"
        "               <stage><type><mb> (F forward, I our B, W our W, B our BW)\n"
        "  pytorch      that CSV plus OUT, a JSON sidecar with the layer split,\n"
        "               per-stage recompute, micro-batch and widths (examples/pytorch)\n"
        "  torchtitan   OUT, a torchtitan TOML job (schedule, module_fqns_per_model_part,\n"
        "               batches, degrees, activation checkpointing), and the CSV it names\n"
        "  megatron     Megatron-LM flags, one per line (layout, recompute, batches)\n"
        "  zbsched      the schedule file itself: zbsched runs it as it is\n"
        "The CSV of pytorch and torchtitan goes beside OUT: -o job.toml writes job.csv.\n"
        "A plan an engine cannot run is refused, naming the search that plans for it.\n"
        "\n"
        "  -f, --format F      default: the plan's target (search --target); for a plan\n"
        "                      without one, torch-csv when PyTorch can run it, else\n"
        "                      zbsched; torch-csv for a file without a plan\n"
        "  -o, --output OUT    file to write ('-' or none: stdout, one-file formats)\n"
        "  -h, --help          this text\n");
}

/* The line that says what the written files do and lack. */
static void note(export_format f, const zb_plan *p, int has_plan, const char *in,
                 char *const *paths, int n)
{
    char buf[1024];
    const char *main = n && paths[0] ? paths[0] : NULL;
    char lay[96];
    switch (f) {
    case EXPORT_ZBSCHED:
        fprintf(stderr, "export: %s is zbsched's own plan, which zbsched runs as it is: "
                "zbsched run %s\n", in, main ? main : in);
        break;
    case EXPORT_TORCH_CSV:
        if (has_plan) {
            export_csv_note(p, buf, sizeof buf);
            fprintf(stderr, "export: %s\n", buf);
        }
        break;
    case EXPORT_TORCHTITAN:
        fprintf(stderr, "export: wrote %s and %s; torchtitan reads the CSV from the path in the "
                "TOML (relative to where it starts)\n", main, paths[1]);
        break;
    case EXPORT_PYTORCH:
        fprintf(stderr, "export: wrote %s and %s; python3 examples/pytorch/train_plan.py %s "
                "runs it\n", main, paths[1], main);
        break;
    case EXPORT_MEGATRON:
        if (!layout_is_extended(&p->layout))
            snprintf(lay, sizeof lay, "pp=%d x dp=%d", p->pipeline_parallel, p->data_parallel);
        fprintf(stderr, "export: Megatron-LM flags for %s: start %ld ranks "
                "(pretrain_gpt.py $(cat %s) ...)\n",
                layout_is_extended(&p->layout) ? layout_text(&p->layout, lay, sizeof lay) : lay,
                layout_gpus(&p->layout), main ? main : "args.txt");
        break;
    default:
        break;
    }
}

int cmd_export(int argc, char **argv)
{
    static const struct option opts[] = {
        { "format", required_argument, NULL, 'f' },
        { "output", required_argument, NULL, 'o' },
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    const char *format = NULL, *out_path = NULL;
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
    int fmt = format ? export_format_parse(format) : 0;
    if (fmt < 0)
        return cli_usage("export", "unknown format '%s' (supported: torch-csv, pytorch, "
                         "torchtitan, megatron, zbsched)", format);
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
    zb_plan plan;
    int has = 0, rc = 1, n = 0;
    char *paths[EXPORT_MAX_FILES] = { 0 };
    if (sched_validate(s, &err)) {
        cli_error("%s: invalid schedule: %s", path, err.msg);
        goto out;
    }
    if ((has = plan_read(s, &plan, &err)) < 0) {
        cli_error("%s: %s", path, err.msg);
        goto out;
    }
    const zb_plan *p = has ? &plan : NULL;
    if (!format) {
        fmt = export_format_for_path(out_path);
        if (fmt < 0)
            fmt = export_default_format(s, p);
    }
    if (export_check(s, p, (export_format)fmt, &err) != 0) {
        cli_error("%s: %s", path, err.msg);
        goto out;
    }
    if (export_paths((export_format)fmt, out_path, paths, &n, &err) != 0) {
        /* The default for a zbsched plan given a CSV's name: say why. */
        if (!format && fmt == EXPORT_ZBSCHED && p) {
            char cmd[320];
            plan_search_command(p, PLAN_TARGET_TORCH, cmd, sizeof cmd);
            cli_error("%s is planned for zbsched's own runtime (search's default target), which "
                      "runs the file as it is, so its export is the file itself and '%s' is not "
                      "a .json name; for PyTorch plan for torch: %s", path, out_path, cmd);
        } else {
            cli_fail(&err);
        }
        goto out;
    }
    for (int i = 1; i < n; i++)
        if (cli_check_output(paths[i], path, paths[0]))
            goto out;
    if (export_write(s, p, (export_format)fmt, path, out_path, &err) != 0) {
        cli_fail(&err);
        goto out;
    }
    note((export_format)fmt, p, has, path, paths, n);
    rc = 0;
out:
    export_paths_free(paths, n);
    if (has > 0)
        plan_free(&plan);
    sched_free(s);
    return rc;
}
