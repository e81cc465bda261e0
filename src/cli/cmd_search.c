/*
 * cmd_search.c: `zbsched search --mem SIZE [...]`, the fastest schedule that
 * fits a per-GPU memory limit (solver/search.h does the work; this file
 * parses flags, shows progress, prints the ranked table or JSON, and writes
 * the best schedule file).  Defaults are documented in docs/search.md.
 */
#include "src/cli/cli.h"

#include <getopt.h>
#include <math.h>
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
        "                        intellect-1-10b tiny tiny-mem shakespeare-char\n"
        "  --gpu G               A100-80G, H100-80G (default), H200-141G, or a JSON file\n"
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
        "                        only that kind may win\n"
        "  --global-batch N      sequences per iteration (default 64)\n"
        "  --profile FILE        measured per-op times/memory instead of the FLOP estimate\n"
        "  --recompute on|off|search\n"
        "                        activation recompute: everywhere, nowhere, or searched\n"
        "                        over off / the first k devices / all (default search)\n"
        "  --no-flash            assume attention scores are stored (no flash attention)\n"
        "  --split search|balanced|paper\n"
        "                        layers per stage: both rules and a local search that\n"
        "                        moves single layers (default), or one rule only\n"
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

/* "0-3" for the first k of p devices, "on", "off"; "s0-20" for the first
 * 21 virtual stages in model order. */
static const char *rc_text(const search_candidate *c, char *buf, size_t len)
{
    if (c->rc_stages > 0) {
        snprintf(buf, len, "s0-%d", c->rc_stages - 1);
        return buf;
    }
    if (c->rc_devices <= 0)
        return "off";
    if (c->rc_devices >= c->pp)
        return "on";
    snprintf(buf, len, "0-%d", c->rc_devices - 1);
    return buf;
}

/* The why block's account of vocabulary parallelism: the work bounds of
 * both layouts at the winner's depth, which kind won and the other kind's
 * best. */
static void print_why_vocab(const search_result *r, int vocab_mode)
{
    const search_candidate *w = &r->c[0];
    if (r->bound_plain_ms > 0)
        printf("  work bound, no recompute %8.1f ms  plain layout, pp=%d, b=%d: no schedule, split or recompute beats it\n",
               r->bound_plain_ms, w->pp, w->micro_batch);
    if (r->bound_vocab_ms > 0)
        printf("  with vocab parallelism   %8.1f ms  output layer and embedding split over the %d devices\n",
               r->bound_vocab_ms, w->pp);
    if (vocab_mode == SEARCH_VOCAB_PLAIN)
        return;
    const search_candidate *other = NULL;
    for (int i = 1; i < r->n_fit && !other; i++)
        if (!r->c[i].vocab != !w->vocab)
            other = &r->c[i];
    if (w->vocab)
        printf("  vocabulary parallelism   chosen (Vocab-%d): the head and embedding no longer load one device", w->vocab);
    else
        printf("  vocabulary parallelism   not chosen");
    if (other) {
        char rcb[24];
        printf("; the best %s plan, %s (pp=%d, recompute %s), takes %.1f ms (%.3fx the winner's time)",
               other->vocab ? "vocabulary-parallel" : "plain", other->label, other->pp, rc_text(other, rcb, sizeof rcb),
               other->time_ms, other->time_ms / w->time_ms);
    }
    else if (vocab_mode == SEARCH_VOCAB_AUTO && (w->vocab || r->vocab_pruned == 0))
        printf("; no %s plan fits", w->vocab ? "plain" : "vocabulary-parallel");
    else if (vocab_mode == SEARCH_VOCAB_AUTO)
        printf("; no vocabulary-parallel plan that fits was simulated");
    if (r->vocab_pruned > 0)
        printf("; %d vocabulary-parallel versions not simulated: their busiest device alone computes at least the best time",
               r->vocab_pruned);
    printf("\n");
}

static void print_why(const search_result *r, int vocab_mode)
{
    const search_candidate *w = &r->c[0];
    search_why y;
    search_explain(w, &y);
    printf("why: the winner takes %.1f ms per iteration (%s, pp=%d x dp=%d, b=%d).\n", y.time_ms, w->label, w->pp,
           w->dp, w->micro_batch);
    printf("  work bound      %10.1f ms  total compute / devices\n", y.work_bound_ms);
    printf("  imbalance bound %10.1f ms  busiest device's compute\n", y.imbalance_bound_ms);
    printf("  winner          %10.1f ms  schedule bubble %.1f%%, imbalance %.1f%%, total idle %.1f%%",
           y.time_ms, 100 * y.bubble_share, 100 * y.imbalance_share, 100 * y.idle_share);
    if (w->dp_ms > 0)
        printf(", of which data-parallel sync %.1f ms", w->dp_ms);
    printf("\n");
    if (r->baseline.status != SEARCH_SKIPPED && r->baseline.time_ms > 0)
        printf("  baseline        %10.1f ms  plain 1F1B, b=1, recompute everywhere, pp=%d: winner %.3fx faster%s\n",
               r->baseline.time_ms, r->baseline.pp, w->speedup,
               r->baseline.status == SEARCH_OOM ? " (the baseline itself does not fit)" : "");
    print_why_vocab(r, vocab_mode);
    /* Which pipeline depth wins: the best of each other depth, and for a
     * depth where nothing fits, its smallest peak. */
    int shown = 0;
    for (int i = 0; i < r->n; i++) {
        const search_candidate *c = &r->c[i];
        if (c->pp == w->pp || c->status == SEARCH_SKIPPED)
            continue;
        int first = 1;
        for (int k = 0; k < i && first; k++)
            first = r->c[k].status == SEARCH_SKIPPED || r->c[k].pp != c->pp;
        if (!first)
            continue;
        if (!shown++)
            printf("  other pipeline depths:\n");
        if (c->status == SEARCH_FIT)
            printf("    pp=%d x dp=%d: best %s %.1f ms (%.0f tok/s/GPU, %.0f ms exposed sync), %.3fx the winner's time\n",
                   c->pp, c->dp, c->label, c->time_ms, c->tokens_per_s, c->dp_ms, c->time_ms / w->time_ms);
        else /* OOM candidates sort by peak: this is the depth's smallest */
            printf("    pp=%d x dp=%d: nothing fits; the smallest peak is %.2f GB (%s, b=%d)\n", c->pp, c->dp,
                   c->peak_bytes / 1e9, c->label, c->micro_batch);
    }
}

/* v with `prec` decimals, or in %g form once it is too large for fixed
 * notation to stay short (a huge figure would otherwise print dozens or
 * hundreds of digits).  Returns buf. */
static const char *fixed_or_g(char *buf, size_t cap, double v, int prec)
{
    if (fabs(v) < 1e9)
        snprintf(buf, cap, "%.*f", prec, v);
    else
        snprintf(buf, cap, "%.4g", v);
    return buf;
}

static void print_table(const search_options *o, const search_result *r, int rows, int verbose)
{
    char f1[40], f2[40], f3[40], f4[40];
    printf("model %s, %s, %d GPUs, global batch %d, memory limit %s GB per GPU\n",
           o->model.name, o->gpu.name, o->n_gpus, o->global_batch, fixed_or_g(f1, sizeof f1, o->mem_bytes / 1e9, 1));
    if (r->n_fit > 0 && rows > 0)
        printf("%-4s %-20s %5s %4s %5s %-4s %13s %10s %10s %10s %6s %6s %6s\n", "rank", "schedule", "pp*dp", "b", "m",
               "rc", "peak GB (dev)", "time ms", "makespan", "tok/s/GPU", "bubble", "MFU", "speed");
    int shown = 0;
    for (int i = 0; i < r->n_fit && shown < rows; i++, shown++) {
        const search_candidate *c = &r->c[i];
        char rcb[16], ppdp[16], label[48];
        snprintf(ppdp, sizeof ppdp, "%dx%d", c->pp, c->dp);
        snprintf(label, sizeof label, "%s%s", c->label, c->split_tuned ? " *" : c->split == COST_SPLIT_PAPER ? " P" : "");
        printf("%-4d %-20s %5s %4d %5d %-4s %8s (%2d) %10s %10s %10s %6.4f %5.1f%% %5.3fx\n", i + 1, label,
               ppdp, c->micro_batch, c->n_micro, rc_text(c, rcb, sizeof rcb),
               fixed_or_g(f1, sizeof f1, c->peak_bytes / 1e9, 2), c->peak_device,
               fixed_or_g(f2, sizeof f2, c->time_ms, 1), fixed_or_g(f3, sizeof f3, c->iter_ms, 1),
               fixed_or_g(f4, sizeof f4, c->tokens_per_s, 0), c->bubble_rate, 100 * c->mfu, c->speedup);
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
    if (r->n_fit > 0 && rows > 0) {
        printf("time = largest per-device span (+ exposed data-parallel sync), what the runtime realises;\n"
               "makespan = first start to last end; P = paper split, * = split found by the local search\n");
        print_why(r, o->vocab);
    }
    if (!verbose)
        return;
    for (int i = r->n_fit; i < r->n; i++) {
        const search_candidate *c = &r->c[i];
        char rcb[16];
        printf("  %-7s %-18s pp=%-3d b=%-3d m=%-4d rc=%-4s %s\n", status_name(c->status), c->label, c->pp,
               c->micro_batch, c->n_micro, rc_text(c, rcb, sizeof rcb), c->note);
    }
}

/* One candidate as a JSON object (NULL when memory runs out). */
static cJSON *candidate_json(const search_candidate *c)
{
    cJSON *j = cJSON_CreateObject();
    if (!j)
        return NULL;
    cJSON_AddStringToObject(j, "schedule", c->label);
    cJSON_AddStringToObject(j, "family", c->family);
    cJSON_AddNumberToObject(j, "vocab", c->vocab); /* 0 plain, 1 or 2: Vocab-1/2 */
    cJSON_AddStringToObject(j, "status", status_name(c->status));
    cJSON_AddNumberToObject(j, "chunks", c->chunks);
    cJSON_AddNumberToObject(j, "pipeline_parallel", c->pp);
    cJSON_AddNumberToObject(j, "data_parallel", c->dp);
    cJSON_AddNumberToObject(j, "micro_batch", c->micro_batch);
    cJSON_AddNumberToObject(j, "n_micro", c->n_micro);
    cJSON_AddBoolToObject(j, "recompute", c->recompute);
    cJSON_AddNumberToObject(j, "recompute_devices", c->rc_devices);
    if (c->rc_stages > 0)
        cJSON_AddNumberToObject(j, "recompute_first_stages", c->rc_stages);
    cJSON_AddStringToObject(j, "split", c->split_tuned ? "searched" : c->split == COST_SPLIT_BALANCED ? "balanced" : "paper");
    if (c->layers) {
        cJSON *a = cJSON_AddArrayToObject(j, "layers_per_stage");
        for (int i = 0; a && i < c->n_stages; i++)
            cJSON_AddItemToArray(a, cJSON_CreateNumber(c->layers[i]));
    }
    if (c->status != SEARCH_SKIPPED) {
        cJSON_AddNumberToObject(j, "peak_bytes", c->peak_bytes);
        cJSON_AddNumberToObject(j, "peak_device", c->peak_device);
        cJSON_AddNumberToObject(j, "static_bytes", c->static_bytes);
        cJSON_AddNumberToObject(j, "time_ms", c->time_ms);
        cJSON_AddNumberToObject(j, "iteration_ms", c->iter_ms);
        cJSON_AddNumberToObject(j, "cost_ms", c->cost_ms);
        cJSON_AddNumberToObject(j, "dp_sync_ms", c->dp_ms);
        cJSON_AddNumberToObject(j, "bubble_rate", c->bubble_rate);
        cJSON_AddNumberToObject(j, "tokens_per_s_per_gpu", c->tokens_per_s);
        cJSON_AddNumberToObject(j, "mfu", c->mfu);
        cJSON_AddNumberToObject(j, "speedup", c->speedup);
    }
    if (c->note[0])
        cJSON_AddStringToObject(j, "note", c->note);
    return j;
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
    cJSON_AddNumberToObject(root, "n_gpus", o->n_gpus);
    if (o->n_devices > 0)
        cJSON_AddNumberToObject(root, "n_devices", o->n_devices);
    cJSON_AddNumberToObject(root, "global_batch", o->global_batch);
    cJSON_AddNumberToObject(root, "n_fit", r->n_fit);
    if (r->min_peak_index >= 0)
        cJSON_AddNumberToObject(root, "min_peak_bytes", r->min_peak_bytes);
    cJSON *base = candidate_json(&r->baseline);
    if (base)
        cJSON_AddItemToObject(root, "baseline", base);
    if (r->n_fit > 0) {
        search_why y;
        search_explain(&r->c[0], &y);
        cJSON *w = cJSON_AddObjectToObject(root, "why");
        if (w) {
            cJSON_AddNumberToObject(w, "work_bound_ms", y.work_bound_ms);
            cJSON_AddNumberToObject(w, "imbalance_bound_ms", y.imbalance_bound_ms);
            cJSON_AddNumberToObject(w, "winner_ms", y.time_ms);
            cJSON_AddNumberToObject(w, "bubble_share", y.bubble_share);
            cJSON_AddNumberToObject(w, "imbalance_share", y.imbalance_share);
            cJSON_AddNumberToObject(w, "idle_share", y.idle_share);
            cJSON_AddNumberToObject(w, "dp_sync_ms", r->c[0].dp_ms);
            cJSON_AddNumberToObject(w, "speedup", r->c[0].speedup);
            cJSON_AddNumberToObject(w, "work_bound_no_recompute_ms", r->bound_plain_ms);
            if (r->bound_vocab_ms > 0)
                cJSON_AddNumberToObject(w, "work_bound_vocab_parallel_ms", r->bound_vocab_ms);
            cJSON_AddStringToObject(w, "vocab", r->c[0].vocab ? "parallel" : "plain");
            cJSON_AddNumberToObject(w, "vocab_pruned", r->vocab_pruned);
        }
    }
    /* Per pipeline depth: its best fit (time) or its smallest peak. */
    cJSON *depths = cJSON_AddArrayToObject(root, "depths");
    for (int i = 0; depths && i < r->n; i++) {
        const search_candidate *c = &r->c[i];
        if (c->status == SEARCH_SKIPPED)
            continue;
        int first = 1;
        for (int k = 0; k < i && first; k++)
            first = r->c[k].status == SEARCH_SKIPPED || r->c[k].pp != c->pp;
        if (!first)
            continue;
        cJSON *d = cJSON_CreateObject();
        if (!d)
            break;
        cJSON_AddItemToArray(depths, d);
        cJSON_AddNumberToObject(d, "pipeline_parallel", c->pp);
        cJSON_AddNumberToObject(d, "data_parallel", c->dp);
        cJSON_AddBoolToObject(d, "fits", c->status == SEARCH_FIT);
        cJSON_AddStringToObject(d, "schedule", c->label);
        cJSON_AddNumberToObject(d, c->status == SEARCH_FIT ? "time_ms" : "min_peak_bytes",
                                c->status == SEARCH_FIT ? c->time_ms : c->peak_bytes);
        if (c->status == SEARCH_FIT)
            cJSON_AddNumberToObject(d, "tokens_per_s_per_gpu", c->tokens_per_s);
    }
    for (int i = 0; i < r->n; i++) {
        cJSON *j = candidate_json(&r->c[i]);
        if (!j)
            break;
        cJSON_AddItemToArray(list, j);
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
    OPT_NO_FLASH, OPT_SPLIT, OPT_STAGES, OPT_NODES, OPT_LOSS, OPT_ZERO1, OPT_MAX_MB, OPT_ILP, OPT_ILP_TOP, OPT_ILP_TIME, OPT_SVG, OPT_JSON, OPT_TOP,
    OPT_VOCAB = 1100,
};

/* One line on where the memory layers went, from the plan search_annotate
 * wrote (nothing for models without memory layers). */
static void print_memory_placement(const search_candidate *best)
{
    const cJSON *plan = best->sched->meta ? cJSON_GetObjectItem(best->sched->meta, "plan") : NULL;
    const cJSON *layers = plan ? cJSON_GetObjectItem(plan, "memory_layers") : NULL;
    const cJSON *stages = plan ? cJSON_GetObjectItem(plan, "memory_layer_stages") : NULL;
    if (!cJSON_IsArray(layers) || !cJSON_IsArray(stages))
        return;
    printf("memory layers");
    for (int i = 0; i < cJSON_GetArraySize(layers); i++)
        printf("%s %d -> stage %d", i ? "," : "", (int)cJSON_GetArrayItem(layers, i)->valuedouble,
               (int)cJSON_GetArrayItem(stages, i)->valuedouble);
    const cJSON *split = cJSON_GetObjectItem(plan, "split");
    printf(" (%s split%s: docs/memory-layers.md)\n",
           cJSON_IsString(split) ? split->valuestring : "?",
           cJSON_IsString(split) && strcmp(split->valuestring, "paper") != 0
               ? ", placed by time and memory" : "");
}

int cmd_search(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "mem", required_argument, NULL, OPT_MEM },
        { "model", required_argument, NULL, OPT_MODEL },
        { "gpu", required_argument, NULL, OPT_GPU },
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
    /* Both kinds by default: the fastest plan wins, and the why block says
     * which kind it is and what the other kind's best took. */
    o.vocab = SEARCH_VOCAB_AUTO;
    const char *output = DEFAULT_OUTPUT, *svg = NULL, *profile_path = NULL;
    const char *model_path = NULL, *gpu_path = NULL; /* input files, kept for the output check */
    int have_mem = 0, json = 0, verbose = 0, gpus_seen = 0, stages_seen = 0, quiet = 0;
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
            if (cli_parse_int("--gpus", optarg, 1, 65536, &num, &err) < 0)
                return cli_usage("search", "%s", err.msg);
            o.n_gpus = (int)num;
            gpus_seen = 1;
            break;
        case OPT_STAGES:
            if (cli_parse_int("--stages", optarg, 1, 1024, &num, &err) < 0)
                return cli_usage("search", "%s", err.msg);
            o.n_devices = (int)num;
            stages_seen = 1;
            break;
        case OPT_NODES:
            if (cli_parse_int("--nodes", optarg, 1, 65536, &num, &err) < 0)
                return cli_usage("search", "%s", err.msg);
            o.nodes = (int)num;
            break;
        case OPT_LOSS:
            if (!strcmp(optarg, "plain"))
                o.loss = COST_LOSS_PLAIN;
            else if (!strcmp(optarg, "fused"))
                o.loss = COST_LOSS_FUSED;
            else
                return cli_usage("search", "--loss: '%s' is not plain or fused", optarg);
            break;
        case OPT_VOCAB:
            if (!strcmp(optarg, "plain"))
                o.vocab = SEARCH_VOCAB_PLAIN;
            else if (!strcmp(optarg, "parallel"))
                o.vocab = SEARCH_VOCAB_PARALLEL;
            else if (!strcmp(optarg, "auto"))
                o.vocab = SEARCH_VOCAB_AUTO;
            else
                return cli_usage("search", "--vocab: '%s' is not auto, plain or parallel", optarg);
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
            else if (!strcmp(optarg, "search") || !strcmp(optarg, "both"))
                o.recompute = -1;
            else
                return cli_usage("search", "--recompute: '%s' is not on, off or search", optarg);
            break;
        case OPT_NO_FLASH:
            o.flash_attention = 0;
            break;
        case OPT_SPLIT:
            o.split_search = 0;
            if (!strcmp(optarg, "balanced"))
                o.split = COST_SPLIT_BALANCED;
            else if (!strcmp(optarg, "paper"))
                o.split = COST_SPLIT_PAPER;
            else if (!strcmp(optarg, "search"))
                o.split = COST_SPLIT_BALANCED, o.split_search = 1;
            else
                return cli_usage("search", "--split: '%s' is not search, balanced or paper", optarg);
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
    if (stages_seen && !gpus_seen)
        o.n_gpus = o.n_devices;
    if (stages_seen && o.n_gpus % o.n_devices != 0)
        return cli_usage("search", "--stages %d does not divide --gpus %d", o.n_devices, o.n_gpus);
    if (o.nodes > 0 && o.n_gpus % o.nodes != 0)
        return cli_usage("search", "--nodes %d does not divide --gpus %d", o.nodes, o.n_gpus);
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
            char f1[40], f2[40], f3[40];
            cli_error("nothing fits in %s GB per GPU; the smallest peak is %s GB (%s, b=%d, recompute %s): "
                      "use --mem %sG or more, or more GPUs", fixed_or_g(f1, sizeof f1, o.mem_bytes / 1e9, 2),
                      fixed_or_g(f2, sizeof f2, r.min_peak_bytes / 1e9, 2), c->label, c->micro_batch,
                      c->recompute ? "on" : "off", fixed_or_g(f3, sizeof f3, r.min_peak_bytes / 1e9 + 0.5, 0));
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
            char rcb[16];
            printf("best: %s, pp=%d x dp=%d, b=%d, m=%d, recompute %s -> %s%s%s\n", best->label, best->pp, best->dp,
                   best->micro_batch, best->n_micro, rc_text(best, rcb, sizeof rcb), output, svg ? ", " : "",
                   svg ? svg : "");
            print_memory_placement(best);
        }
    }
    search_result_free(&r);
    return status;
}
