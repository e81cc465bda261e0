/*
 * cmd_search.c: `zbsched search [--mem SIZE] [...]`, the fastest schedule
 * that fits a per-GPU memory limit on the engine that will run it
 * (solver/search.h does the work and says why; this file parses flags,
 * shows progress, hands the result to search_print.c and writes the best
 * schedule file).  Defaults are documented in docs/search.md.
 */
#include "src/cli/cli.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "solver/search.h"
#include "src/cli/cli_job.h"
#include "src/cli/progress.h"
#include "src/cli/search_print.h"
#include "src/outfile.h"
#include "src/profile.h"
#include "src/sched_io.h"
#include "src/size.h"
#include "viz/viz.h"

#define DEFAULT_OUTPUT "best.json"
#define DEFAULT_ROWS 15

static void usage(FILE *out)
{
    fprintf(out,
        "usage: zbsched search [--mem SIZE] [options]\n"
        "\n"
        "Finds the fastest pipeline schedule whose peak memory (weights, optimizer,\n"
        "activations, runtime reserve) fits SIZE on every GPU, among the plans the\n"
        "target engine can run, and writes it.\n"
        "\n"
        "  --mem SIZE            memory per GPU, e.g. 40G, 80GB, 141GiB (default: the\n"
        "                        GPU's memory; K/M/G/T = powers of 1000, KiB/MiB/GiB/TiB\n"
        "                        = of 1024)\n"
        "  --target T            zbsched (default), torch, torchtitan or megatron: the\n"
        "                        engine the plan is for; only what it runs is ranked\n"
        "  --model M             preset or JSON file (default llama3-8b); presets:\n"
        "                        1.5B 6.2B 14.6B 28.3B llama3-8b llama3-70b llama3-405b\n"
        "                        intellect-1-10b tiny tiny-mem shakespeare-char\n"
        "  --seq-len N           tokens per sequence (default: the model's)\n"
        "  --micro-batch N       try only this micro-batch size (default: search)\n"
        "  --gpu G               a preset (A100-80G, H100-80G (default), H200-141G, ...)\n"
        "                        or a JSON file\n"
        "  --gpus N              GPUs of the job (default 8): every pipeline depth p\n"
        "                        dividing N is tried, with N/p data-parallel replicas\n"
        "                        sharing optimizer state (ZeRO-1)\n"
        "  --stages N            fix the pipeline depth (N/p replicas when --gpus is larger)\n"
        "  --nodes N             nodes the GPUs span (default: GPUs / the GPU file's\n"
        "                        gpus_per_node); links across nodes use inter_node_bw\n"
        "  --loss plain|fused    loss kernel: logits kept (default) or fused linear\n"
        "                        cross-entropy in token chunks (Liger-Kernel)\n"
        "  --vocab auto|plain|parallel\n"
        "                        auto (default): rank plain plans (head on the last\n"
        "                        stage) and plans with the output layer and embedding\n"
        "                        split over the pipeline devices (Vocab-1/2,\n"
        "                        docs/vocab-parallel.md) together; plain or parallel:\n"
        "                        only that kind may win (zbsched only)\n"
        "  --global-batch N      sequences per iteration (default 64)\n"
        "  --profile FILE        measured per-op times/memory instead of the FLOP estimate\n"
        "  --recompute on|off|search\n"
        "                        activation recompute: everywhere, nowhere, or searched\n"
        "                        over off / the first k devices / all / the MLP level\n"
        "                        everywhere (default search)\n"
        "  --no-flash            assume attention scores are stored (no flash attention)\n"
        "  --split search|balanced|paper\n"
        "                        layers per stage: both rules and a local search that\n"
        "                        moves single layers (default), or one rule only\n"
        "  --zero1 N             shard optimizer state over N data-parallel replicas\n"
        "  --tp N, --cp N        tensor / context parallel size (a power of two within a\n"
        "                        node), or auto (default: 1, 2, 4, 8 and 1, 2 where the\n"
        "                        target runs them; zbsched and torch run 1 only)\n"
        "  --zero 1|2|3|fsdp|auto  what the replicas shard (default auto: 1 and 3)\n"
        "  --offload F|auto      fraction of saved activations kept in host memory\n"
        "                        (default auto: 0 and 0.5 where the target offloads)\n"
        "  --no-sp, --no-tp-overlap  TP without sequence parallelism / with its\n"
        "                        collectives exposed (default: SP and overlap on)\n"
        "  --max-micro-batch N   largest micro-batch size tried (default 64)\n"
        "  --ilp                 also run the ILP on the best 3 configurations\n"
        "  --exhaustive          build every candidate, also those bounds show cannot win\n"
        "  --ilp-top N           configurations the ILP refines (default 3)\n"
        "  --ilp-time S          seconds per ILP run (default 10)\n"
        "  -o, --output FILE     best schedule file (default " DEFAULT_OUTPUT "; '-' = stdout)\n"
        "  --svg FILE            also draw the best schedule as an SVG timeline\n"
        "  --json                print every candidate as JSON instead of the table\n"
        "  --top N               table rows (default %d)\n"
        "  -v, --verbose         also list dropped and skipped candidates, with reasons\n"
        "  -q, --quiet           no live status line on stderr (shown only on a terminal)\n"
        "  -h, --help            this text\n", DEFAULT_ROWS);
}

enum {
    OPT_GPUS = 1000, OPT_GLOBAL_BATCH, OPT_PROFILE, OPT_RECOMPUTE, OPT_NO_FLASH, OPT_SPLIT, OPT_STAGES,
    OPT_NODES, OPT_LOSS, OPT_ZERO1, OPT_MAX_MB, OPT_ILP, OPT_ILP_TOP, OPT_ILP_TIME, OPT_SVG, OPT_JSON, OPT_TOP,
    OPT_VOCAB, OPT_TARGET, OPT_LAYOUT, OPT_EXHAUSTIVE,
};

/* What the flags say beyond the search options. */
typedef struct search_cli {
    const char *output, *svg, *profile_path; /* files */
    int json, verbose, quiet, gpus_seen, stages_seen;
    const char *flag;                       /* the long option being parsed ("--tp") */
    long rows;                              /* --top */
} search_cli;

/* Picks value among the names (NULL-terminated); its index, or -1. */
static int pick(const char *value, const char *const *names)
{
    for (int i = 0; names[i]; i++)
        if (!strcmp(value, names[i]))
            return i;
    return -1;
}

/* One flag of search's own; 0, or 2 after a usage line. */
static int search_option(int ch, const char *arg, search_options *o, search_cli *x, zb_err *err)
{
    static const char *const losses[] = { "plain", "fused", NULL };
    static const char *const vocabs[] = { "plain", "auto", "parallel", NULL }; /* SEARCH_VOCAB_* order */
    static const char *const rcs[] = { "off", "on", "search", "both", NULL };
    static const char *const splits[] = { "paper", "balanced", "search", NULL };
    long num;
    int k;
    switch (ch) {
    case OPT_TARGET:
        if (search_target_parse(arg, &o->target, err) < 0)
            return cli_usage("search", "--target: %s", err->msg);
        return 0;
    case OPT_GPUS:
    case OPT_STAGES:
    case OPT_NODES:
    case OPT_GLOBAL_BATCH:
    case OPT_ZERO1:
    case OPT_MAX_MB:
    case OPT_ILP_TOP:
    case OPT_TOP: {
        static const struct { int ch; const char *flag; long lo, hi; } ranges[] = {
            { OPT_GPUS, "--gpus", 1, 65536 }, { OPT_STAGES, "--stages", 1, 1024 },
            { OPT_NODES, "--nodes", 1, 65536 }, { OPT_GLOBAL_BATCH, "--global-batch", 1, 1 << 24 },
            { OPT_ZERO1, "--zero1", 1, 1 << 20 }, { OPT_MAX_MB, "--max-micro-batch", 1, 1 << 20 },
            { OPT_ILP_TOP, "--ilp-top", 1, 64 }, { OPT_TOP, "--top", 0, 1 << 20 },
        };
        k = 0;
        while (ranges[k].ch != ch)
            k++;
        if (cli_parse_int(ranges[k].flag, arg, ranges[k].lo, ranges[k].hi, &num, err) < 0)
            return cli_usage("search", "%s", err->msg);
        switch (ch) {
        case OPT_GPUS: o->n_gpus = (int)num, x->gpus_seen = 1; break;
        case OPT_STAGES: o->n_devices = (int)num, x->stages_seen = 1; break;
        case OPT_NODES: o->nodes = (int)num; break;
        case OPT_GLOBAL_BATCH: o->global_batch = (int)num; break;
        case OPT_ZERO1: o->zero1_dp = (int)num; break;
        case OPT_MAX_MB: o->max_micro_batch = (int)num; break;
        case OPT_ILP_TOP: o->ilp_top = (int)num; break;
        default: x->rows = num; break;
        }
        return 0;
    }
    case OPT_LOSS:
        if ((k = pick(arg, losses)) < 0)
            return cli_usage("search", "--loss: '%s' is not plain or fused", arg);
        o->loss = k ? COST_LOSS_FUSED : COST_LOSS_PLAIN;
        return 0;
    case OPT_VOCAB:
        if ((k = pick(arg, vocabs)) < 0)
            return cli_usage("search", "--vocab: '%s' is not auto, plain or parallel", arg);
        o->vocab = k;
        return 0;
    case OPT_RECOMPUTE:
        if ((k = pick(arg, rcs)) < 0)
            return cli_usage("search", "--recompute: '%s' is not on, off or search", arg);
        o->recompute = k >= 2 ? -1 : k;
        return 0;
    case OPT_SPLIT:
        if ((k = pick(arg, splits)) < 0)
            return cli_usage("search", "--split: '%s' is not search, balanced or paper", arg);
        o->split = k == 0 ? COST_SPLIT_PAPER : COST_SPLIT_BALANCED;
        o->split_search = k == 2;
        return 0;
    case OPT_ILP_TIME:
        if (cli_parse_double("--ilp-time", arg, &o->ilp_time_limit, err) < 0)
            return cli_usage("search", "%s", err->msg);
        if (o->ilp_time_limit <= 0 || o->ilp_time_limit > 86400)
            return cli_usage("search", "--ilp-time: %s is not in (0, 86400] seconds", arg);
        return 0;
    case OPT_LAYOUT: /* the layout's own parser (solver/search_layout.c) */
        if (search_layout_flag(o, x->flag, arg, err) < 0)
            return cli_usage("search", "%s", err->msg);
        return 0;
    case OPT_NO_FLASH: o->flash_attention = 0; return 0;
    case OPT_ILP: o->ilp = 1; return 0;
    case OPT_EXHAUSTIVE: o->exhaustive = 1; return 0;
    case OPT_PROFILE: x->profile_path = arg; return 0;
    case 'o': x->output = arg; return 0;
    case OPT_SVG: x->svg = arg; return 0;
    case OPT_JSON: x->json = 1; return 0;
    case 'v': x->verbose = 1; return 0;
    case 'q': x->quiet = 1; return 0;
    default: return cli_usage("search", "unknown option (see zbsched search --help)");
    }
}

/* The flags into o, x and the job; 0, -1 after --help, or the usage exit. */
static int parse(int argc, char **argv, search_options *o, search_cli *x, cli_job *job)
{
    static const struct option longopts[] = {
        CLI_JOB_MODEL_OPTIONS,
        CLI_JOB_GPU_OPTIONS,
        { "target", required_argument, NULL, OPT_TARGET },
        { "gpus", required_argument, NULL, OPT_GPUS },
        { "stages", required_argument, NULL, OPT_STAGES },
        { "nodes", required_argument, NULL, OPT_NODES },
        { "loss", required_argument, NULL, OPT_LOSS },
        { "vocab", required_argument, NULL, OPT_VOCAB },
        { "global-batch", required_argument, NULL, OPT_GLOBAL_BATCH },
        { "profile", required_argument, NULL, OPT_PROFILE },
        { "recompute", required_argument, NULL, OPT_RECOMPUTE },
        { "no-flash", no_argument, NULL, OPT_NO_FLASH },
        { "split", required_argument, NULL, OPT_SPLIT },
        { "zero1", required_argument, NULL, OPT_ZERO1 },
        { "tp", required_argument, NULL, OPT_LAYOUT }, { "cp", required_argument, NULL, OPT_LAYOUT },
        { "zero", required_argument, NULL, OPT_LAYOUT }, { "offload", required_argument, NULL, OPT_LAYOUT },
        { "no-sp", no_argument, NULL, OPT_LAYOUT }, { "no-tp-overlap", no_argument, NULL, OPT_LAYOUT },
        { "max-micro-batch", required_argument, NULL, OPT_MAX_MB },
        { "ilp", no_argument, NULL, OPT_ILP },
        { "exhaustive", no_argument, NULL, OPT_EXHAUSTIVE },
        { "ilp-top", required_argument, NULL, OPT_ILP_TOP },
        { "ilp-time", required_argument, NULL, OPT_ILP_TIME },
        { "output", required_argument, NULL, 'o' },
        { "svg", required_argument, NULL, OPT_SVG },
        { "json", no_argument, NULL, OPT_JSON },
        { "top", required_argument, NULL, OPT_TOP },
        { "verbose", no_argument, NULL, 'v' },
        { "quiet", no_argument, NULL, 'q' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    zb_err err = { { 0 } };
    optind = 1;
    opterr = 0;
    int ch, rc, index = -1;
    char flag[32];
    while ((ch = getopt_long(argc, argv, ":o:vqh", longopts, &index)) != -1) {
        snprintf(flag, sizeof flag, "--%s", index >= 0 ? longopts[index].name : "");
        x->flag = flag;
        index = -1;
        if (ch == 'h') {
            usage(stdout);
            return -1;
        }
        if (ch == ':')
            return cli_usage("search", "%s needs a value", argv[optind - 1]);
        if (ch == '?')
            return cli_usage("search", "unknown option '%s' (see zbsched search --help)", argv[optind - 1]);
        if ((rc = cli_job_option(ch, optarg, job, &err)) < 0)
            return cli_usage("search", "%s", err.msg);
        if (rc == 0 && (rc = search_option(ch, optarg, o, x, &err)) != 0)
            return rc;
    }
    if (optind < argc)
        return cli_usage("search", "unexpected argument '%s'", argv[optind]);
    if (x->stages_seen && !x->gpus_seen)
        o->n_gpus = o->n_devices;
    if (x->stages_seen && o->n_gpus % o->n_devices != 0)
        return cli_usage("search", "--stages %d does not divide --gpus %d", o->n_devices, o->n_gpus);
    if (o->nodes > 0 && o->n_gpus % o->nodes != 0)
        return cli_usage("search", "--nodes %d does not divide --gpus %d", o->nodes, o->n_gpus);
    if (o->vocab == SEARCH_VOCAB_PARALLEL && o->target != SEARCH_TARGET_ZBSCHED)
        return cli_usage("search", "--vocab parallel: %s runs no vocabulary-parallel plans (only zbsched does)",
                         search_target_name(o->target));
    if (x->json && !strcmp(x->output, "-"))
        return cli_usage("search", "--json and -o - both write to stdout; pick one");
    if (cli_job_finish(job, &err) < 0)
        return cli_usage("search", "%s", err.msg);
    o->model = job->model;
    o->gpu = job->gpu;
    o->micro_batch_fixed = job->micro_batch > 0;
    /* The limit defaults to the whole device: every peak already counts
     * the runtime reserve (docs/cost-model.md). */
    o->mem_bytes = job->mem_seen ? job->mem_bytes : o->gpu.mem_bytes;
    return 0;
}

/* Runs the search with the live status line. */
static int run_search(const search_options *o, search_result *r, int quiet, zb_err *err)
{
    cli_progress prog; /* live status line on a terminal (progress.h) */
    cli_progress_init(&prog, quiet);
    search_options so = *o;
    so.progress = cli_progress_search_count;
    so.progress_stage = cli_progress_search_stage;
    so.progress_ctx = &prog;
    solver_set_progress(cli_progress_solver, &prog);
    int rc = search_run(&so, r, err);
    solver_set_progress(NULL, NULL);
    cli_progress_end(&prog);
    return rc;
}

int cmd_search(int argc, char **argv)
{
    search_options o;
    search_options_default(&o);
    /* Both kinds by default: the fastest plan wins, and the why block says
     * which kind it is and what the other kind's best took. */
    o.vocab = SEARCH_VOCAB_AUTO;
    search_layouts_searched(&o); /* each dimension the target runs, unless a flag fixes it */
    search_cli x = { .output = DEFAULT_OUTPUT, .rows = DEFAULT_ROWS };
    cli_job job;
    cli_job_init(&job, "llama3-8b", "H100-80G");
    zb_err err = { { 0 } };
    int rc = parse(argc, argv, &o, &x, &job);
    if (rc != 0)
        return rc < 0 ? 0 : rc;
    const char *model_in = job.model_seen ? job.model_arg : NULL, *gpu_in = job.gpu_seen ? job.gpu_arg : NULL;
    if (x.svg && outfile_same_target(x.output, x.svg))
        return cli_usage("search", "-o and --svg name the same file '%s'", x.svg);
    if (cli_check_output(x.output, model_in, gpu_in, x.profile_path) ||
        (x.svg && cli_check_output(x.svg, model_in, gpu_in, x.profile_path)))
        return 1;
    if (job.mem_seen && o.mem_bytes > o.gpu.mem_bytes) {
        char lim[32], have[32];
        zb_size_format(o.mem_bytes, lim, sizeof lim);
        zb_size_format(o.gpu.mem_bytes, have, sizeof have);
        fprintf(stderr, "zbsched search: warning: --mem %s is more than the %s's %s: the plan is sized for "
                "memory the %s does not have\n", lim, o.gpu.name, have, o.gpu.cpu ? "device" : "GPU");
    }
    zb_profile profile;
    if (x.profile_path) {
        if (profile_load(x.profile_path, &profile, &err) < 0)
            return cli_fail(&err);
        o.profile = &profile;
    }
    search_result r;
    if (run_search(&o, &r, x.quiet, &err) < 0)
        return cli_fail(&err);
    search_print_ctx ctx = { .mem_default = !job.mem_seen };
    if (x.json)
        search_print_json(&o, &r);
    else if (strcmp(x.output, "-") != 0)
        search_print_table(&o, &r, &ctx, (int)x.rows, x.verbose);
    int status = 0;
    if (r.n_fit == 0) {
        status = search_print_nothing_fits(&o, &r);
    } else {
        search_candidate *best = &r.c[0];
        if (search_annotate(&o, best, &err) < 0 || sched_save_file(best->sched, x.output, &err) < 0 ||
            (x.svg && viz_render_svg_file(best->sched, x.svg, &err) < 0))
            status = cli_fail(&err);
        else if (!x.json && strcmp(x.output, "-") != 0) {
            search_print_best(&o, best, x.output, x.svg);
            search_print_runs_on(&o, &r);
        }
    }
    search_result_free(&r);
    return status;
}
