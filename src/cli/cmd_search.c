/*
 * cmd_search.c: `zbsched search --mem SIZE [...]`, the fastest schedule that
 * fits a per-GPU memory limit (solver/search.h does the work; this file
 * parses flags, shows progress, prints the ranked table or JSON, and writes
 * the best schedule file).  Defaults are documented in docs/search.md.
 */
#include "src/cli/cli.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "solver/search.h"
#include "src/cli/progress.h"
#include "src/profile.h"
#include "src/sched_io.h"
#include "src/size.h"
#include "viz/viz.h"

#define DEFAULT_OUTPUT "best.json"
#define DEFAULT_ROWS 15

static void usage(FILE *out)
{
    fprintf(out,
        "usage: zbsched search --mem SIZE [options]\n"
        "\n"
        "Finds the fastest pipeline schedule whose peak memory (weights, optimizer,\n"
        "activations, runtime reserve) fits SIZE on every GPU, and writes it.\n"
        "\n"
        "  --mem SIZE            memory per GPU, e.g. 40G, 80GB, 141GiB (required;\n"
        "                        K/M/G/T = powers of 1000, KiB/MiB/GiB/TiB = of 1024)\n"
        "  --model M             preset or JSON file (default llama3-8b); presets:\n"
        "                        1.5B 6.2B 14.6B 28.3B llama3-8b llama3-70b\n"
        "                        intellect-1-10b tiny shakespeare-char\n"
        "  --gpu G               A100-80G, H100-80G (default), H200-141G, or a JSON file\n"
        "  --gpus N, --stages N  pipeline devices (default 8)\n"
        "  --global-batch N      sequences per iteration (default 64)\n"
        "  --profile FILE        measured per-op times/memory instead of the FLOP estimate\n"
        "  --recompute on|off|both\n"
        "                        activation recompute settings tried (default both)\n"
        "  --no-flash            assume attention scores are stored (no flash attention)\n"
        "  --split balanced|paper\n"
        "                        layers per stage: balance stage times counting the\n"
        "                        embedding and head (default), or the paper's rule\n"
        "  --zero1 N             shard optimizer state over N data-parallel replicas\n"
        "  --max-micro-batch N   largest micro-batch size tried (default 64)\n"
        "  --ilp                 also run the ILP on the best 3 configurations\n"
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

static const char *status_name(search_status s)
{
    return s == SEARCH_FIT ? "fit" : s == SEARCH_OOM ? "oom" : "skipped";
}

static void print_table(const search_options *o, const search_result *r, int rows, int verbose)
{
    printf("model %s, %s, %d GPUs, global batch %d, memory limit %.1f GB per GPU\n",
           o->model.name, o->gpu.name, o->n_devices, o->global_batch, o->mem_bytes / 1e9);
    if (r->n_fit > 0 && rows > 0)
        printf("%-4s %-18s %4s %5s %-3s %13s %10s %11s %7s %6s\n", "rank", "schedule", "b", "m", "rc",
               "peak GB (dev)", "iter ms", "tok/s/GPU", "bubble", "MFU");
    int shown = 0;
    for (int i = 0; i < r->n_fit && shown < rows; i++, shown++) {
        const search_candidate *c = &r->c[i];
        printf("%-4d %-18s %4d %5d %-3s %8.2f (%2d) %10.1f %11.0f %7.4f %5.1f%%\n", i + 1, c->label,
               c->micro_batch, c->n_micro, c->recompute ? "on" : "off", c->peak_bytes / 1e9,
               c->peak_device, c->iter_ms, c->tokens_per_s, c->bubble_rate, 100 * c->mfu);
    }
    if (r->n_fit > shown)
        printf("... %d more that fit (--top N shows more)\n", r->n_fit - shown);
    int n_oom = 0, n_skip = 0;
    for (int i = r->n_fit; i < r->n; i++)
        if (r->c[i].status == SEARCH_OOM)
            n_oom++;
        else
            n_skip++;
    printf("%d candidates fit, %d exceed the limit, %d could not be built%s\n", r->n_fit, n_oom, n_skip,
           verbose || !(n_oom + n_skip) ? "" : " (-v lists them)");
    if (!verbose)
        return;
    for (int i = r->n_fit; i < r->n; i++) {
        const search_candidate *c = &r->c[i];
        printf("  %-7s %-18s b=%-3d m=%-4d rc=%-3s %s\n", status_name(c->status), c->label, c->micro_batch,
               c->n_micro, c->recompute ? "on" : "off", c->note);
    }
}

static int print_json(const search_options *o, const search_result *r)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *list = cJSON_CreateArray();
    if (!root || !list) {
        cJSON_Delete(root);
        cJSON_Delete(list);
        return cli_error("out of memory");
    }
    cJSON_AddItemToObject(root, "candidates", list);
    cJSON_AddItemToObject(root, "model", model_to_json(&o->model));
    cJSON_AddItemToObject(root, "hardware", gpu_to_json(&o->gpu));
    cJSON_AddNumberToObject(root, "mem_limit_bytes", o->mem_bytes);
    cJSON_AddNumberToObject(root, "n_devices", o->n_devices);
    cJSON_AddNumberToObject(root, "global_batch", o->global_batch);
    cJSON_AddNumberToObject(root, "n_fit", r->n_fit);
    if (r->min_peak_index >= 0)
        cJSON_AddNumberToObject(root, "min_peak_bytes", r->min_peak_bytes);
    for (int i = 0; i < r->n; i++) {
        const search_candidate *c = &r->c[i];
        cJSON *j = cJSON_CreateObject();
        if (!j)
            break;
        cJSON_AddItemToArray(list, j);
        cJSON_AddStringToObject(j, "schedule", c->label);
        cJSON_AddStringToObject(j, "family", c->family);
        cJSON_AddStringToObject(j, "status", status_name(c->status));
        cJSON_AddNumberToObject(j, "chunks", c->chunks);
        cJSON_AddNumberToObject(j, "micro_batch", c->micro_batch);
        cJSON_AddNumberToObject(j, "n_micro", c->n_micro);
        cJSON_AddBoolToObject(j, "recompute", c->recompute);
        if (c->status != SEARCH_SKIPPED) {
            cJSON_AddNumberToObject(j, "peak_bytes", c->peak_bytes);
            cJSON_AddNumberToObject(j, "peak_device", c->peak_device);
            cJSON_AddNumberToObject(j, "static_bytes", c->static_bytes);
            cJSON_AddNumberToObject(j, "iteration_ms", c->iter_ms);
            cJSON_AddNumberToObject(j, "cost_ms", c->cost_ms);
            cJSON_AddNumberToObject(j, "bubble_rate", c->bubble_rate);
            cJSON_AddNumberToObject(j, "tokens_per_s_per_gpu", c->tokens_per_s);
            cJSON_AddNumberToObject(j, "mfu", c->mfu);
        }
        if (c->note[0])
            cJSON_AddStringToObject(j, "note", c->note);
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text)
        return cli_error("out of memory");
    puts(text);
    free(text);
    return 0;
}

enum {
    OPT_MEM = 1000, OPT_MODEL, OPT_GPU, OPT_GPUS, OPT_GLOBAL_BATCH, OPT_PROFILE, OPT_RECOMPUTE,
    OPT_NO_FLASH, OPT_SPLIT, OPT_ZERO1, OPT_MAX_MB, OPT_ILP, OPT_ILP_TOP, OPT_ILP_TIME, OPT_SVG, OPT_JSON, OPT_TOP,
};

int cmd_search(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "mem", required_argument, NULL, OPT_MEM },
        { "model", required_argument, NULL, OPT_MODEL },
        { "gpu", required_argument, NULL, OPT_GPU },
        { "gpus", required_argument, NULL, OPT_GPUS },
        { "stages", required_argument, NULL, OPT_GPUS },
        { "global-batch", required_argument, NULL, OPT_GLOBAL_BATCH },
        { "profile", required_argument, NULL, OPT_PROFILE },
        { "recompute", required_argument, NULL, OPT_RECOMPUTE },
        { "no-flash", no_argument, NULL, OPT_NO_FLASH },
        { "split", required_argument, NULL, OPT_SPLIT },
        { "zero1", required_argument, NULL, OPT_ZERO1 },
        { "max-micro-batch", required_argument, NULL, OPT_MAX_MB },
        { "ilp", no_argument, NULL, OPT_ILP },
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
    search_options o;
    search_options_default(&o);
    const char *output = DEFAULT_OUTPUT, *svg = NULL, *profile_path = NULL;
    const char *model_path = NULL, *gpu_path = NULL; /* input files, kept for the output check */
    int have_mem = 0, json = 0, verbose = 0, gpus_seen = 0, quiet = 0;
    long rows = DEFAULT_ROWS, num;
    zb_err err = { { 0 } };
    zb_profile profile;

    optind = 1;
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, ":o:vqh", longopts, NULL)) != -1) {
        switch (ch) {
        case OPT_MEM: {
            uint64_t bytes;
            if (zb_size_parse(optarg, &bytes, &err) < 0)
                return cli_usage("search", "--mem: %s", err.msg);
            o.mem_bytes = (double)bytes;
            have_mem = 1;
            break;
        }
        case OPT_MODEL:
            model_path = optarg;
            if (model_load(optarg, &o.model, &err) < 0)
                return cli_usage("search", "--model: %s", err.msg);
            break;
        case OPT_GPU:
            gpu_path = optarg;
            if (gpu_load(optarg, &o.gpu, &err) < 0)
                return cli_usage("search", "--gpu: %s", err.msg);
            break;
        case OPT_GPUS:
            if (cli_parse_int("--gpus", optarg, 1, 1024, &num, &err) < 0)
                return cli_usage("search", "%s", err.msg);
            if (gpus_seen && num != o.n_devices)
                return cli_usage("search", "--gpus and --stages disagree (%d vs %ld)", o.n_devices, num);
            o.n_devices = (int)num;
            gpus_seen = 1;
            break;
        case OPT_GLOBAL_BATCH:
            if (cli_parse_int("--global-batch", optarg, 1, 1 << 24, &num, &err) < 0)
                return cli_usage("search", "%s", err.msg);
            o.global_batch = (int)num;
            break;
        case OPT_PROFILE:
            profile_path = optarg;
            break;
        case OPT_RECOMPUTE:
            if (!strcmp(optarg, "on"))
                o.recompute = 1;
            else if (!strcmp(optarg, "off"))
                o.recompute = 0;
            else if (!strcmp(optarg, "both"))
                o.recompute = -1;
            else
                return cli_usage("search", "--recompute: '%s' is not on, off or both", optarg);
            break;
        case OPT_NO_FLASH:
            o.flash_attention = 0;
            break;
        case OPT_SPLIT:
            if (!strcmp(optarg, "balanced"))
                o.split = COST_SPLIT_BALANCED;
            else if (!strcmp(optarg, "paper"))
                o.split = COST_SPLIT_PAPER;
            else
                return cli_usage("search", "--split: '%s' is not balanced or paper", optarg);
            break;
        case OPT_ZERO1:
            if (cli_parse_int("--zero1", optarg, 1, 1 << 20, &num, &err) < 0)
                return cli_usage("search", "%s", err.msg);
            o.zero1_dp = (int)num;
            break;
        case OPT_MAX_MB:
            if (cli_parse_int("--max-micro-batch", optarg, 1, 1 << 20, &num, &err) < 0)
                return cli_usage("search", "%s", err.msg);
            o.max_micro_batch = (int)num;
            break;
        case OPT_ILP:
            o.ilp = 1;
            break;
        case OPT_ILP_TOP:
            if (cli_parse_int("--ilp-top", optarg, 1, 64, &num, &err) < 0)
                return cli_usage("search", "%s", err.msg);
            o.ilp_top = (int)num;
            break;
        case OPT_ILP_TIME:
            if (cli_parse_double("--ilp-time", optarg, &o.ilp_time_limit, &err) < 0)
                return cli_usage("search", "%s", err.msg);
            if (o.ilp_time_limit <= 0 || o.ilp_time_limit > 86400)
                return cli_usage("search", "--ilp-time: %s is not in (0, 86400] seconds", optarg);
            break;
        case 'o':
            output = optarg;
            break;
        case OPT_SVG:
            svg = optarg;
            break;
        case OPT_JSON:
            json = 1;
            break;
        case OPT_TOP:
            if (cli_parse_int("--top", optarg, 0, 1 << 20, &rows, &err) < 0)
                return cli_usage("search", "%s", err.msg);
            break;
        case 'v':
            verbose = 1;
            break;
        case 'q':
            quiet = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case ':':
            return cli_usage("search", "%s needs a value", argv[optind - 1]);
        default:
            return cli_usage("search", "unknown option '%s' (see zbsched search --help)", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return cli_usage("search", "unexpected argument '%s'", argv[optind]);
    if (!have_mem)
        return cli_usage("search", "--mem SIZE is required (memory per GPU, e.g. --mem 40G)");
    if (json && output && !strcmp(output, "-"))
        return cli_usage("search", "--json and -o - both write to stdout; pick one");
    if (cli_check_output(output, model_path, gpu_path, profile_path) ||
        (svg && cli_check_output(svg, model_path, gpu_path, profile_path)))
        return 1;
    if (profile_path) {
        if (profile_load(profile_path, &profile, &err) < 0)
            return cli_fail(&err);
        o.profile = &profile;
    }

    cli_progress prog; /* live status line on a terminal (progress.h) */
    cli_progress_init(&prog, quiet);
    o.progress = cli_progress_search_count;
    o.progress_stage = cli_progress_search_stage;
    o.progress_ctx = &prog;
    solver_set_progress(cli_progress_solver, &prog);
    search_result r;
    int rc = search_run(&o, &r, &err);
    solver_set_progress(NULL, NULL);
    cli_progress_end(&prog);
    if (rc < 0)
        return cli_fail(&err);

    if (json)
        print_json(&o, &r);
    else if (strcmp(output, "-") != 0)
        print_table(&o, &r, (int)rows, verbose);

    int status = 0;
    if (r.n_fit == 0) {
        if (r.min_peak_index >= 0) {
            const search_candidate *c = &r.c[r.min_peak_index];
            cli_error("nothing fits in %.2f GB per GPU; the smallest peak is %.2f GB (%s, b=%d, recompute %s): "
                      "use --mem %.0fG or more, or more GPUs", o.mem_bytes / 1e9, r.min_peak_bytes / 1e9,
                      c->label, c->micro_batch, c->recompute ? "on" : "off", r.min_peak_bytes / 1e9 + 0.5);
        } else {
            cli_error("nothing fits: no candidate could be built (-v or --json says why)");
        }
        status = 1;
    } else {
        search_candidate *best = &r.c[0];
        if (search_annotate(&o, best, &err) < 0 || sched_save_file(best->sched, output, &err) < 0 ||
            (svg && viz_render_svg_file(best->sched, svg, &err) < 0)) {
            status = cli_fail(&err);
        } else if (!json && strcmp(output, "-") != 0) {
            printf("best: %s, b=%d, m=%d, recompute %s -> %s%s%s\n", best->label, best->micro_batch,
                   best->n_micro, best->recompute ? "on" : "off", output, svg ? ", " : "", svg ? svg : "");
        }
    }
    search_result_free(&r);
    return status;
}
