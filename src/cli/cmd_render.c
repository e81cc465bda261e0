/*
 * cmd_render.c: `zbsched render FILE [-o OUT] [--format svg|trace|dag]
 * [--compare OTHER]`.
 *
 * Loads a schedule file (predicted, or measured by `run --trace`), renders
 * it with zb_viz (viz/viz.h) and writes the result atomically, so a failed
 * render never leaves a partial file.  All arguments are checked before any
 * file is read.  With --compare the two files are drawn one above the
 * other on one time scale; when exactly one carries measured times it goes
 * below as "measured" and the other above as "predicted".
 */
#include "src/cli/cli.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/cli/compare_note.h"
#include "src/sched_io.h"
#include "viz/times.h"
#include "viz/viz.h"

static void usage(FILE *out)
{
    fprintf(out,
        "usage: zbsched render FILE [-o OUT] [--format svg|trace|dag] [--compare OTHER]\n"
        "\n"
        "Draws the schedule FILE ('-' for stdin) using its measured times when it\n"
        "has them (run --trace) and simulated times otherwise.\n"
        "\n"
        "  -o, --output OUT    write here (default '-': stdout); written atomically\n"
        "  -f, --format FMT    svg    timeline: a lane per device, ops coloured by kind\n"
        "                             and chunk, cost / bubble / peak memory in the\n"
        "                             title, activation memory per device below (default)\n"
        "                      trace  Chrome trace-event JSON for Perfetto or\n"
        "                             chrome://tracing (times in microseconds)\n"
        "                      dag    dependency graph laid out by Graphviz dot with\n"
        "                             the critical path in red (at most %d ops)\n"
        "  --compare OTHER     svg only: draw FILE and the schedule OTHER one above\n"
        "                      the other on one time scale (predicted above measured)\n"
        "                      and print predicted against measured iteration time and\n"
        "                      peak activations in one line (on stderr when OUT is '-')\n"
        "  -h, --help          this text\n", VIZ_DAG_MAX_OPS);
}

typedef enum render_format { FMT_SVG, FMT_TRACE, FMT_DAG } render_format;

/* Loads one input; prints the error and returns NULL on failure. */
static sched_t *load(const char *path)
{
    zb_err err = { 0 };
    sched_t *s = NULL;
    if (sched_load_file(path, &s, &err) != 0) {
        cli_fail(&err);
        return NULL;
    }
    return s;
}

int cmd_render(int argc, char **argv)
{
    static const struct option opts[] = {
        { "output", required_argument, NULL, 'o' },
        { "format", required_argument, NULL, 'f' },
        { "compare", required_argument, NULL, 'c' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    const char *out_path = "-", *compare = NULL, *fmt_name = "svg";
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":o:f:h", opts, NULL)) != -1) {
        switch (c) {
        case 'o': out_path = optarg; break;
        case 'f': fmt_name = optarg; break;
        case 'c': compare = optarg; break;
        case 'h': usage(stdout); return 0;
        case ':': return cli_usage(argv[0], "%s needs a value (see --help)", argv[optind - 1]);
        default: return cli_usage(argv[0], "unknown option '%s' (see --help)", argv[optind - 1]);
        }
    }
    render_format fmt;
    if (!strcmp(fmt_name, "svg"))
        fmt = FMT_SVG;
    else if (!strcmp(fmt_name, "trace"))
        fmt = FMT_TRACE;
    else if (!strcmp(fmt_name, "dag"))
        fmt = FMT_DAG;
    else
        return cli_usage(argv[0], "unknown format '%s' (svg, trace or dag)", fmt_name);
    if (optind >= argc)
        return cli_usage(argv[0], "missing the schedule FILE (see --help)");
    if (optind + 1 < argc)
        return cli_usage(argv[0], "one schedule FILE expected, got '%s' too", argv[optind + 1]);
    if (compare && fmt != FMT_SVG)
        return cli_usage(argv[0], "--compare draws SVG timelines; it cannot be used with --format %s",
                         fmt_name);
    if (!out_path[0])
        return cli_usage(argv[0], "--output needs a file name ('-' for stdout)");
    const char *in_path = argv[optind];
    if (compare && !strcmp(in_path, "-") && !strcmp(compare, "-"))
        return cli_usage(argv[0], "FILE and --compare cannot both be stdin");
    if (cli_check_output(out_path, in_path, compare))
        return 1;

    sched_t *s = load(in_path), *other = NULL;
    if (!s)
        return 1;
    if (compare && !(other = load(compare))) {
        sched_free(s);
        return 1;
    }
    zb_err err = { 0 };
    char *doc = NULL;
    size_t len = 0;
    int rc;
    switch (fmt) {
    case FMT_SVG:
        if (other) {
            /* Predicted above measured; otherwise the order given. */
            int m_file = viz_sched_is_measured(s), m_other = viz_sched_is_measured(other);
            if (m_file != m_other) /* the one line of numbers: stdout unless the SVG goes there */
                rc = compare_note_print(m_file ? other : s, m_file ? s : other,
                                        strcmp(out_path, "-") ? stdout : stderr, &err);
            else
                rc = 0;
            if (rc != 0)
                ;
            else if (m_file && !m_other)
                rc = viz_svg_compare(other, "predicted", s, "measured", &doc, &len, &err);
            else if (!m_file && m_other)
                rc = viz_svg_compare(s, "predicted", other, "measured", &doc, &len, &err);
            else
                rc = viz_svg_compare(s, in_path, other, compare, &doc, &len, &err);
        } else {
            rc = viz_svg_timeline(s, &doc, &len, &err);
        }
        break;
    case FMT_TRACE:
        rc = viz_trace_json(s, &doc, &len, &err);
        break;
    case FMT_DAG:
    default:
        rc = viz_dag_svg(s, &doc, &len, &err);
        break;
    }
    if (rc == 0)
        rc = zb_write_atomic(out_path, doc, len, &err);
    free(doc);
    sched_free(s);
    sched_free(other);
    return rc == 0 ? 0 : cli_fail(&err);
}
