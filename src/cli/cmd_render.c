/*
 * cmd_render.c: `zbsched render FILE [-o OUT] [--format svg|trace|dag]
 * [--compare OTHER] [--from T] [--to T] [--micro-batches A-B]
 * [--devices A-B]`.
 *
 * Loads a schedule file (predicted, or measured by `run --trace`), renders
 * it with zb_viz (viz/viz.h) and writes the result atomically, so a failed
 * render never leaves a partial file.  All arguments are checked before any
 * file is read.  With --compare the two files are drawn one above the
 * other on one time scale; when exactly one carries measured times it goes
 * below as "measured" and the other above as "predicted".  The view flags
 * draw a part of a big plan (viz/view.h): a time window in the file's time
 * unit from its first op, micro-batches in colour (the rest grey, or left
 * out of a trace or graph), a range of devices; the graph's op limit then
 * applies to the part.
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
        "                      [--from T] [--to T] [--micro-batches A-B] [--devices A-B]\n"
        "\n"
        "Draws the schedule FILE ('-' for stdin) using its measured times when it\n"
        "has them (run --trace) and simulated times otherwise.\n"
        "\n"
        "  -o, --output OUT    write here (default '-': stdout); written atomically\n"
        "  -f, --format FMT    svg    timeline: a lane per device, ops coloured by kind\n"
        "                             and chunk, cost / bubble / peak memory in the\n"
        "                             title, memory per device below (default)\n"
        "                      trace  Chrome trace-event JSON for Perfetto or\n"
        "                             chrome://tracing (times in microseconds)\n"
        "                      dag    dependency graph laid out by Graphviz dot with\n"
        "                             the critical path in red (at most %d ops:\n"
        "                             the whole schedule's, or the view's)\n"
        "  --compare OTHER     svg only: draw FILE and the schedule OTHER one above\n"
        "                      the other on one time scale (predicted above measured)\n"
        "                      and print predicted against measured iteration time and\n"
        "                      peak activations in one line (on stderr when OUT is '-')\n"
        "  --from T, --to T    only the ops between these times, in the file's time\n"
        "                      unit (ms for plans) from its first op, as on the axis\n"
        "  --micro-batches A-B these micro-batches in colour with their numbers, the\n"
        "                      others grey (left out of a trace or graph); without\n"
        "                      --from/--to the picture spans these micro-batches\n"
        "  --devices A-B       only these devices (one number: one device)\n"
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
    enum { O_FROM = 256, O_TO, O_MB, O_DEV };
    static const struct option opts[] = {
        { "output", required_argument, NULL, 'o' },
        { "format", required_argument, NULL, 'f' },
        { "compare", required_argument, NULL, 'c' },
        { "from", required_argument, NULL, O_FROM },
        { "to", required_argument, NULL, O_TO },
        { "micro-batches", required_argument, NULL, O_MB },
        { "devices", required_argument, NULL, O_DEV },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    const char *out_path = "-", *compare = NULL, *fmt_name = "svg";
    viz_view view;
    viz_view_all(&view);
    zb_err perr = { 0 };
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":o:f:h", opts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case 'o': out_path = optarg; break;
        case 'f': fmt_name = optarg; break;
        case 'c': compare = optarg; break;
        case O_FROM:
            bad = cli_parse_double("--from", optarg, &view.from, &perr);
            if (!bad && !(view.from >= 0))
                bad = zb_fail(&perr, "--from is a time from the first op, >= 0");
            view.has_from = 1;
            break;
        case O_TO:
            bad = cli_parse_double("--to", optarg, &view.to, &perr);
            if (!bad && !(view.to > 0))
                bad = zb_fail(&perr, "--to is a time from the first op, > 0");
            view.has_to = 1;
            break;
        case O_MB:
            if ((bad = viz_view_parse_range(optarg, &view.mb_lo, &view.mb_hi, &perr)))
                zb_wrap(&perr, "--micro-batches: ");
            break;
        case O_DEV:
            if ((bad = viz_view_parse_range(optarg, &view.dev_lo, &view.dev_hi, &perr)))
                zb_wrap(&perr, "--devices: ");
            break;
        case 'h': usage(stdout); return 0;
        case ':': return cli_usage(argv[0], "%s needs a value (see --help)", argv[optind - 1]);
        default: return cli_usage(argv[0], "unknown option '%s' (see --help)", argv[optind - 1]);
        }
        if (bad)
            return cli_usage(argv[0], "%s", perr.msg);
    }
    if (view.has_from && view.has_to && !(view.from < view.to))
        return cli_usage(argv[0], "--from must be before --to");
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
                rc = viz_svg_compare_view(other, "predicted", s, "measured", &view, &doc, &len, &err);
            else if (!m_file && m_other)
                rc = viz_svg_compare_view(s, "predicted", other, "measured", &view, &doc, &len, &err);
            else
                rc = viz_svg_compare_view(s, in_path, other, compare, &view, &doc, &len, &err);
        } else {
            rc = viz_svg_timeline_view(s, &view, &doc, &len, &err);
        }
        break;
    case FMT_TRACE:
        rc = viz_trace_json_view(s, &view, &doc, &len, &err);
        break;
    case FMT_DAG:
    default:
        rc = viz_dag_svg_view(s, &view, &doc, &len, &err);
        break;
    }
    if (rc == 0)
        rc = zb_write_atomic(out_path, doc, len, &err);
    free(doc);
    sched_free(s);
    sched_free(other);
    return rc == 0 ? 0 : cli_fail(&err);
}
