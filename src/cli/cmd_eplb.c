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
 * The JSON document is the solver's (solver/eplb_json.c); this file
 * parses, calls and prints.
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
    eplb_mean_max(ld->balance_before, L, &mb, &xb);
    eplb_mean_max(ld->balance_after, L, &ma, &xa);
    eplb_mean_max(ld->node_balance_before, L, &nmb, &nxb);
    eplb_mean_max(ld->node_balance_after, L, &nma, &nxa);
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

/* The per-GPU load picture of layer svg_layer (-1: the worst before) of
 * placement r: a new SVG in *svg (caller frees).  0 or -1 with err. */
static int build_svg(const eplb_params *p, const eplb_result *r, const eplb_loads *ld,
                     long svg_layer, char **svg, size_t *svg_len, zb_err *err)
{
    char subtitle[256];
    snprintf(subtitle, sizeof subtitle,
             "%d layers x %d experts -> %d slots on %d GPUs in %d nodes, %d groups, %s policy%s",
             p->n_layers, p->n_experts, p->n_replicas, p->n_gpus, p->n_nodes, p->n_groups,
             r->hierarchical ? "hierarchical" : "global",
             r->fell_back ? " (auto: the groups do not divide into the nodes)" : "");
    viz_eplb_input in = {
        .n_layers = ld->n_layers, .n_gpus = ld->n_gpus, .n_nodes = ld->n_nodes,
        .gpu_before = ld->gpu_before, .gpu_after = ld->gpu_after,
        .balance_before = ld->balance_before, .balance_after = ld->balance_after,
        .layer = svg_layer >= 0 ? (int)svg_layer : worst_layer(ld), .subtitle = subtitle,
    };
    return viz_svg_eplb(&in, svg, svg_len, err) != 0 ? -1 : 0;
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
        eplb_placement_json(&p, &r, &ld, r.hierarchical ? &cmp : NULL, &doc, &doc_len, &err)) {
        rc = cli_fail(&err);
        goto out;
    }
    if (svg_path && build_svg(&p, &r, &ld, svg_layer, &svg, &svg_len, &err)) {
        rc = cli_fail(&err);
        goto out;
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
