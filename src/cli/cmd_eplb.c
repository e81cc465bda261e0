/*
 * cmd_eplb.c: `zbsched eplb WEIGHTS --replicas R --groups G --nodes N
 * --gpus M [--policy auto|hierarchical|global] [--json] [-o FILE]
 * [--svg FILE [--svg-layer L]]`.
 *
 * Reads an expert-load matrix (layers x experts, JSON or CSV), places the
 * experts with DeepSeek's load balancer (solver/eplb.h) and reports each
 * layer's balance (max / mean load over GPUs and over nodes) before and
 * after.  The table goes to stdout; --json prints the whole placement
 * instead (phy2log, log2phy, logcnt, per-GPU and per-node loads, balances);
 * -o writes that same JSON document to a file.  --svg draws per-GPU load
 * before and after (viz/svg_eplb.h), by default for the layer that was
 * worst before.
 *
 * Every document is built in memory before anything is written, and files
 * go through zb_write_atomic, so bad input never leaves a partial file.
 * Both output paths are checked before the weights are read (outfile.h's
 * rules, and neither may be the weights file itself).  When the SVG cannot
 * be written after the -o file was (a full disk), the -o file is removed
 * if it is a plain file this command wrote, so a failed command leaves no
 * output; a FIFO, a device or a symlink given as -o is never unlinked (the
 * link would vanish, and `-o /dev/null` run as root would remove the
 * machine's /dev/null).
 * The JSON is printed with a plain buffer rather than cJSON: at DeepSeek-V3
 * scale log2phy alone is ~100,000 numbers, and cJSON's number printing
 * (print, then re-parse to check the round trip) would dominate the run.
 */
#include "src/cli/cli.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "solver/eplb.h"
#include "src/outfile.h"
#include "src/sched_io.h"
#include "viz/buf.h"
#include "viz/svg_eplb.h"

static void usage(FILE *out)
{
    fprintf(out,
        "usage: zbsched eplb WEIGHTS --replicas R --groups G --nodes N --gpus M\n"
        "                    [--policy auto|hierarchical|global] [--json] [-o FILE]\n"
        "                    [--svg FILE [--svg-layer L]]\n"
        "\n"
        "Places mixture-of-experts experts on GPUs with DeepSeek's expert-parallel\n"
        "load balancer (EPLB): hot experts get redundant replicas, and replicas are\n"
        "packed so that every GPU carries about the same load.\n"
        "\n"
        "WEIGHTS ('-' for stdin) holds the measured load of every expert, layers x\n"
        "experts: a JSON array of per-layer arrays, or CSV (one line per layer).\n"
        "\n"
        "  --replicas R   physical expert slots per layer: at least the number of\n"
        "                 experts, a multiple of M (R/M slots per GPU)\n"
        "  --groups G     expert groups (the experts' count must divide by G)\n"
        "  --nodes N      server nodes (at most M)\n"
        "  --gpus M       GPUs; a multiple of N for the hierarchical policy\n"
        "  --policy P     auto (default: hierarchical when N divides G, else global,\n"
        "                 as DeepSeek's reference), hierarchical (keeps each group\n"
        "                 inside one node) or global (ignores groups and nodes)\n"
        "  --json         print the whole placement as JSON instead of the table:\n"
        "                 phy2log, log2phy, logcnt, per-GPU and per-node loads and\n"
        "                 balances (max / mean) before and after\n"
        "  -o FILE        also write that JSON to FILE (atomically)\n"
        "  --svg FILE     draw per-GPU load before and after, grouped by node\n"
        "  --svg-layer L  the layer the bar chart shows (default: worst before)\n"
        "  -h, --help     this text\n"
        "\n"
        "'Before' is the plain layout without redundant experts: expert e on GPU\n"
        "e*M/E (rounded down); GPU g is on node g*N/M.  When the hierarchical policy\n"
        "leaves a worse node balance than the global one would, a note says so with\n"
        "both figures.  See docs/eplb.md.\n");
}

/* Writes v in decimal at p; returns the end.  printf per number made the
 * ~150,000 integers of a DeepSeek-V3 placement the bulk of the run. */
static char *put_int(char *p, int v)
{
    char tmp[12];
    int n = 0;
    unsigned u = v < 0 ? 0u - (unsigned)v : (unsigned)v;
    do
        tmp[n++] = (char)('0' + u % 10);
    while (u /= 10);
    if (v < 0)
        *p++ = '-';
    while (n)
        *p++ = tmp[--n];
    return p;
}

/* Appends an int row [a0,a1,...]. */
static void json_ints(viz_buf *b, const int *v, int n)
{
    char *text = malloc((size_t)n * 12 + 3), *p = text;
    if (!text) {
        b->oom = 1; /* viz_buf_take reports it */
        return;
    }
    *p++ = '[';
    for (int i = 0; i < n; i++) {
        if (i)
            *p++ = ',';
        p = put_int(p, v[i]);
    }
    *p++ = ']';
    *p = '\0';
    viz_buf_puts(b, text);
    free(text);
}

/* Appends a double row with enough digits to round-trip. */
static void json_doubles(viz_buf *b, const double *v, int n)
{
    viz_buf_puts(b, "[");
    for (int i = 0; i < n; i++)
        viz_buf_printf(b, i ? ",%.17g" : "%.17g", v[i]);
    viz_buf_puts(b, "]");
}

/* Appends "key":[[row],[row],...] for a rows x cols table. */
static void json_int_table(viz_buf *b, const char *key, const int *t, int rows, int cols)
{
    viz_buf_printf(b, ",\"%s\":[", key);
    for (int r = 0; r < rows; r++) {
        if (r)
            viz_buf_puts(b, ",");
        json_ints(b, t + (size_t)r * cols, cols);
    }
    viz_buf_puts(b, "]");
}

static void json_double_table(viz_buf *b, const char *key, const double *t, int rows, int cols)
{
    viz_buf_printf(b, ",\"%s\":[", key);
    for (int r = 0; r < rows; r++) {
        if (r)
            viz_buf_puts(b, ",");
        json_doubles(b, t + (size_t)r * cols, cols);
    }
    viz_buf_puts(b, "]");
}

/* Appends "key":[v0,v1,...]. */
static void json_double_row(viz_buf *b, const char *key, const double *v, int n)
{
    viz_buf_printf(b, ",\"%s\":", key);
    json_doubles(b, v, n);
}

/* Mean and maximum of n values. */
static void mean_max(const double *v, int n, double *mean, double *max)
{
    double sum = 0, m = v[0];
    for (int i = 0; i < n; i++) {
        sum += v[i];
        m = v[i] > m ? v[i] : m;
    }
    *mean = sum / n;
    *max = m;
}

static void json_summary(viz_buf *b, const char *key, const double *v, int n)
{
    double mean, max;
    mean_max(v, n, &mean, &max);
    viz_buf_printf(b, ",\"%s\":{\"mean\":%.17g,\"max\":%.17g}", key, mean, max);
}

/* The whole placement as one JSON document.  cmp is the global policy's
 * comparison when the hierarchical one ran, else NULL. */
static int build_json(const eplb_params *p, const eplb_result *r, const eplb_loads *ld,
                      const eplb_global_compare *cmp, char **doc, size_t *len, zb_err *err)
{
    int L = r->n_layers, E = r->n_experts;
    viz_buf b = { 0 };
    viz_buf_printf(&b, "{\"format\":\"zbsched-eplb\",\"version\":1,\"policy\":\"%s\","
                   "\"policy_requested\":\"%s\",\"fell_back\":%s,"
                   "\"layers\":%d,\"experts\":%d,\"replicas\":%d,\"groups\":%d,\"nodes\":%d,"
                   "\"gpus\":%d,\"max_replicas\":%d",
                   r->hierarchical ? "hierarchical" : "global", eplb_policy_name(p->policy),
                   r->fell_back ? "true" : "false", L, E, r->n_replicas, p->n_groups,
                   r->n_nodes, r->n_gpus, r->max_count);
    if (cmp)
        viz_buf_printf(&b, ",\"global_comparison\":{\"hierarchical_worse\":%s,\"layer\":%d,"
                       "\"node_balance\":%.17g,\"gpu_balance\":%.17g,\"global_layer\":%d,"
                       "\"global_node_balance\":%.17g,\"global_gpu_balance\":%.17g}",
                       cmp->worse ? "true" : "false", cmp->layer, cmp->node_balance,
                       cmp->gpu_balance, cmp->global_layer, cmp->global_node_balance,
                       cmp->global_gpu_balance);
    json_summary(&b, "balance_before_summary", ld->balance_before, L);
    json_summary(&b, "balance_after_summary", ld->balance_after, L);
    json_summary(&b, "node_balance_before_summary", ld->node_balance_before, L);
    json_summary(&b, "node_balance_after_summary", ld->node_balance_after, L);
    json_double_row(&b, "balance_before", ld->balance_before, L);
    json_double_row(&b, "balance_after", ld->balance_after, L);
    json_double_row(&b, "node_balance_before", ld->node_balance_before, L);
    json_double_row(&b, "node_balance_after", ld->node_balance_after, L);
    json_int_table(&b, "phy2log", r->phy2log, L, r->n_replicas);
    viz_buf_puts(&b, ",\"log2phy\":[");
    for (int l = 0; l < L; l++) {
        viz_buf_puts(&b, l ? ",[" : "[");
        for (int e = 0; e < E; e++) {
            if (e)
                viz_buf_puts(&b, ",");
            json_ints(&b, r->log2phy + ((size_t)l * E + e) * r->max_count, r->max_count);
        }
        viz_buf_puts(&b, "]");
    }
    viz_buf_puts(&b, "]");
    json_int_table(&b, "logcnt", r->logcnt, L, E);
    json_double_table(&b, "gpu_load_before", ld->gpu_before, L, ld->n_gpus);
    json_double_table(&b, "gpu_load_after", ld->gpu_after, L, ld->n_gpus);
    json_double_table(&b, "node_load_before", ld->node_before, L, ld->n_nodes);
    json_double_table(&b, "node_load_after", ld->node_after, L, ld->n_nodes);
    viz_buf_puts(&b, "}\n");
    return viz_buf_take(&b, doc, len, err);
}

/* "2 nodes x 4", or "3 nodes of 1-2" when the GPUs do not divide evenly
 * (GPU g on node floor(g N / M)). */
static void nodes_text(const eplb_result *r, char *buf, size_t len)
{
    int M = r->n_gpus, N = r->n_nodes;
    if (M % N == 0)
        snprintf(buf, len, "%d node%s x %d", N, N == 1 ? "" : "s", M / N);
    else
        snprintf(buf, len, "%d nodes of %d-%d", N, M / N, M / N + 1);
}

/* The policy that ran, and why when auto fell back (the reference's rule). */
static void policy_text(const eplb_params *p, const eplb_result *r, char *buf, size_t len)
{
    if (r->fell_back)
        snprintf(buf, len, "global (auto: %d groups do not divide into %d nodes, so the global "
                 "policy ran, as DeepSeek's reference falls back)", p->n_groups, p->n_nodes);
    else
        snprintf(buf, len, "%s", r->hierarchical ? "hierarchical" : "global");
}

static void print_table(const eplb_params *p, const eplb_result *r, const eplb_loads *ld,
                        const eplb_global_compare *cmp)
{
    int L = r->n_layers;
    char nodes[64], policy[200];
    nodes_text(r, nodes, sizeof nodes);
    policy_text(p, r, policy, sizeof policy);
    printf("eplb: %d layer%s x %d experts -> %d slots on %d GPUs (%s), %d group%s, policy %s\n",
           L, L == 1 ? "" : "s", r->n_experts, r->n_replicas, r->n_gpus, nodes, p->n_groups,
           p->n_groups == 1 ? "" : "s", policy);
    printf("balance = max / mean load; before = expert e on GPU e*M/E, no replicas\n");
    printf("%6s %12s %12s %12s %12s %9s\n", "layer", "GPU before", "GPU after", "node before",
           "node after", "replicas");
    for (int l = 0; l < L; l++) {
        int maxc = 1;
        for (int e = 0; e < r->n_experts; e++) {
            int c = r->logcnt[(size_t)l * r->n_experts + e];
            maxc = c > maxc ? c : maxc;
        }
        printf("%6d %12.4f %12.4f %12.4f %12.4f %9d\n", l, ld->balance_before[l],
               ld->balance_after[l], ld->node_balance_before[l], ld->node_balance_after[l], maxc);
    }
    double mb, xb, ma, xa, nmb, nxb, nma, nxa;
    mean_max(ld->balance_before, L, &mb, &xb);
    mean_max(ld->balance_after, L, &ma, &xa);
    mean_max(ld->node_balance_before, L, &nmb, &nxb);
    mean_max(ld->node_balance_after, L, &nma, &nxa);
    printf("GPU balance: mean %.4f -> %.4f, worst layer %.4f -> %.4f\n", mb, ma, xb, xa);
    printf("node balance: mean %.4f -> %.4f, worst layer %.4f -> %.4f\n", nmb, nma, nxb, nxa);
    if (cmp && cmp->worse)
        printf("note: the hierarchical policy keeps each group inside one node, which leaves "
               "layer %d a node balance of %.4f (worst GPU balance %.4f); --policy global "
               "spreads the groups over the nodes and gets %.4f at worst (layer %d; worst GPU "
               "balance %.4f), at the price of more traffic between nodes\n",
               cmp->layer, cmp->node_balance, cmp->gpu_balance, cmp->global_node_balance,
               cmp->global_layer, cmp->global_gpu_balance);
}

/* The first layer with the worst balance before. */
static int worst_layer(const eplb_loads *ld)
{
    int worst = 0;
    for (int l = 1; l < ld->n_layers; l++)
        if (ld->balance_before[l] > ld->balance_before[worst])
            worst = l;
    return worst;
}

int cmd_eplb(int argc, char **argv)
{
    enum { OPT_REPLICAS = 256, OPT_GROUPS, OPT_NODES, OPT_GPUS, OPT_POLICY, OPT_JSON, OPT_SVG,
           OPT_SVG_LAYER };
    static const struct option opts[] = {
        { "replicas", required_argument, NULL, OPT_REPLICAS },
        { "groups", required_argument, NULL, OPT_GROUPS },
        { "nodes", required_argument, NULL, OPT_NODES },
        { "gpus", required_argument, NULL, OPT_GPUS },
        { "policy", required_argument, NULL, OPT_POLICY },
        { "json", no_argument, NULL, OPT_JSON },
        { "output", required_argument, NULL, 'o' },
        { "svg", required_argument, NULL, OPT_SVG },
        { "svg-layer", required_argument, NULL, OPT_SVG_LAYER },
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    long replicas = 0, groups = 0, nodes = 0, gpus = 0, svg_layer = -1;
    int json = 0, c;
    const char *out_path = NULL, *svg_path = NULL;
    eplb_policy policy = EPLB_AUTO;
    zb_err err = { "" };
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":ho:", opts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case OPT_REPLICAS: bad = cli_parse_int("--replicas", optarg, 1, EPLB_MAX_REPLICAS, &replicas, &err); break;
        case OPT_GROUPS: bad = cli_parse_int("--groups", optarg, 1, EPLB_MAX_EXPERTS, &groups, &err); break;
        case OPT_NODES: bad = cli_parse_int("--nodes", optarg, 1, EPLB_MAX_REPLICAS, &nodes, &err); break;
        case OPT_GPUS: bad = cli_parse_int("--gpus", optarg, 1, EPLB_MAX_REPLICAS, &gpus, &err); break;
        case OPT_POLICY: bad = eplb_policy_parse(optarg, &policy, &err); break;
        case OPT_JSON: json = 1; break;
        case 'o': out_path = optarg; break;
        case OPT_SVG: svg_path = optarg; break;
        case OPT_SVG_LAYER: bad = cli_parse_int("--svg-layer", optarg, 0, EPLB_MAX_LAYERS - 1, &svg_layer, &err); break;
        case 'h': usage(stdout); return 0;
        case ':': return cli_usage("eplb", "%s needs a value", argv[optind - 1]);
        default: return cli_usage("eplb", "unknown option '%s' (see --help)", argv[optind - 1]);
        }
        if (bad)
            return cli_usage("eplb", "%s", err.msg);
    }
    if (optind >= argc)
        return cli_usage("eplb", "missing WEIGHTS (see --help)");
    if (optind + 1 < argc)
        return cli_usage("eplb", "unexpected argument '%s'", argv[optind + 1]);
    if (!replicas || !groups || !nodes || !gpus)
        return cli_usage("eplb", "--replicas, --groups, --nodes and --gpus are all required");
    if (svg_layer >= 0 && !svg_path)
        return cli_usage("eplb", "--svg-layer goes with --svg");
    const char *path = argv[optind];
    if (out_path && svg_path && outfile_same_target(out_path, svg_path))
        return cli_usage("eplb", "-o and --svg name the same file '%s'", out_path);
    if ((out_path && cli_check_output(out_path, path)) ||
        (svg_path && cli_check_output(svg_path, path)))
        return 1;

    char *text = NULL;
    size_t text_len = 0;
    if (zb_read_file(path, &text, &text_len, &err))
        return cli_fail(&err);
    double *weight = NULL;
    eplb_params p = { 0 };
    int rc = eplb_parse_weights(text, text_len, &weight, &p.n_layers, &p.n_experts, &err);
    free(text);
    if (rc)
        return cli_error("%s: %s", path, err.msg);
    p.n_replicas = (int)replicas;
    p.n_groups = (int)groups;
    p.n_nodes = (int)nodes;
    p.n_gpus = (int)gpus;
    p.policy = policy;

    eplb_result r = { 0 };
    eplb_loads ld = { 0 };
    eplb_global_compare cmp = { 0 };
    char *doc = NULL, *svg = NULL;
    size_t doc_len = 0, svg_len = 0;
    rc = 1;
    if (eplb_rebalance(weight, &p, &r, &err) || eplb_compute_loads(weight, &r, &ld, &err) ||
        (r.hierarchical && eplb_compare_global(weight, &p, &ld, &cmp, &err))) {
        rc = cli_fail(&err);
        goto out;
    }
    if (svg_layer >= p.n_layers) {
        rc = cli_usage("eplb", "--svg-layer: %ld is out of range (0..%d)", svg_layer, p.n_layers - 1);
        goto out;
    }
    if ((json || out_path) &&
        build_json(&p, &r, &ld, r.hierarchical ? &cmp : NULL, &doc, &doc_len, &err)) {
        rc = cli_fail(&err);
        goto out;
    }
    if (svg_path) {
        char subtitle[256];
        snprintf(subtitle, sizeof subtitle,
                 "%d layers x %d experts -> %d slots on %d GPUs in %d nodes, %d groups, %s policy%s",
                 p.n_layers, p.n_experts, p.n_replicas, p.n_gpus, p.n_nodes, p.n_groups,
                 r.hierarchical ? "hierarchical" : "global",
                 r.fell_back ? " (auto: the groups do not divide into the nodes)" : "");
        viz_eplb_input in = {
            .n_layers = ld.n_layers, .n_gpus = ld.n_gpus, .n_nodes = ld.n_nodes,
            .gpu_before = ld.gpu_before, .gpu_after = ld.gpu_after,
            .balance_before = ld.balance_before, .balance_after = ld.balance_after,
            .layer = svg_layer >= 0 ? (int)svg_layer : worst_layer(&ld), .subtitle = subtitle,
        };
        if (viz_svg_eplb(&in, &svg, &svg_len, &err)) {
            rc = cli_fail(&err);
            goto out;
        }
    }
    if (out_path && zb_write_atomic(out_path, doc, doc_len, &err)) {
        rc = cli_fail(&err);
        goto out;
    }
    if (svg_path && zb_write_atomic(svg_path, svg, svg_len, &err)) {
        /* All or nothing: a failed command leaves neither file, but only
         * a plain file is removed (lstat: a symlink is not followed). */
        struct stat st;
        if (out_path && strcmp(out_path, "-") && lstat(out_path, &st) == 0 && S_ISREG(st.st_mode))
            unlink(out_path);
        rc = cli_fail(&err);
        goto out;
    }
    if (json)
        fwrite(doc, 1, doc_len, stdout);
    else
        print_table(&p, &r, &ld, r.hierarchical ? &cmp : NULL);
    rc = 0; /* main's final flush reports stdout errors, with their cause */
out:
    free(doc);
    free(svg);
    eplb_loads_free(&ld);
    eplb_result_free(&r);
    free(weight);
    return rc;
}
