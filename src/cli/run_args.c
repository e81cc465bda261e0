/*
 * run_args.c: `zbsched run`'s flags (run_args.h).
 *
 * The flags fall into three groups, each parsed by its own function: the
 * run's own (steps, data, model, checkpoints, the divergence rules), the
 * islands' (--replicas and the outer optimizer), and the shared ones
 * (src/cli/cli_flags.h).  Then the combinations are checked, so that a
 * contradiction costs one usage line before any file is read.
 */
#include "src/cli/run_args.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/job.h"
#include "src/cli/cli.h"
#include "src/cli/cli_flags.h"
#include "src/cli/data_path.h"

void run_usage(FILE *out)
{
    fprintf(out,
        "usage: zbsched run FILE --steps N [options]\n"
        "\n"
        "Trains a Llama-style model by executing schedule FILE, one thread per device\n"
        "(or, with --device cuda, one CUDA stream or one GPU per device).\n"
        "\n"
        "  -n, --steps N          optimizer steps (total, counting resumed ones)\n"
        "      --data PATH        training text (default: $" CLI_DATA_ENV ", else\n"
        "                         ../shared/data/tinyshakespeare.txt beside the repository)\n"
        "      --model NAME|FILE  model preset (tiny, tiny-mem, shakespeare-char) or JSON file (default:\n"
        "                         the file's plan from `zbsched search`, else tiny)\n"
        "      --seed S           initialisation and data seed (default 1)\n"
        "      --batch-size B     sequences per micro-batch (default: the plan's, else the model's)\n"
        "      --lr X             peak learning rate (default 1e-3)\n"
        "      --clip X           global gradient-norm clip, 0 disables (default 1.0)\n"
        "      --sync-optimizer   synchronous clip instead of post-validation\n"
        "      --eval-every K     validation loss every K steps (default: at the end only)\n"
        "      --eval-windows N   validation windows per evaluation (default 64)\n"
        "      --checkpoint DIR   a checkpoint in DIR at every evaluation, on SIGTERM / SIGINT\n"
        "                         and at the end (one committed unit: weights, model and run\n"
        "                         records; under mpirun one part per rank; with --replicas\n"
        "                         every replica and the outer optimizer; DIR/lock keeps a\n"
        "                         second run out)\n"
        "      --checkpoint-every N  a checkpoint every N steps too\n"
        "      --resume           continue from the checkpoint in DIR (needs --checkpoint)\n"
        "      --stop-at N        stop after step N as if interrupted (continue with --resume)\n"
        "      --trace FILE       write the last step's measured op times as a schedule file\n"
        "      --log FILE         one JSON line per step (loss, lr, grad_norm, tokens_per_s,\n"
        "                         skipped, rollbacks, memory) and per evaluation, flushed as\n"
        "                         it happens ('-': stdout; appended to with --resume)\n"
        "      --json             print one JSON object (losses, val_loss, tokens_per_s) at the end\n"
        "      --threads N        kernel threads per device (default: cores / devices);\n"
        "                         results are the same bits at every N\n"
        "      --device cpu|cuda  where to train (default cpu); cuda: every schedule device\n"
        "                         is a stream on one GPU (same flags as the CPU but\n"
        "                         --threads), or under `zbsched launch` / mpirun one GPU\n"
        "                         per rank (NCCL; checkpoints in parts, any schedule; no\n"
        "                         --trace, --eval-*, --replicas, --sync-optimizer there,\n"
        "                         val_loss null)\n"
        "      --gpu N            with --device cuda in one process: the GPU (default 0)\n"
        "      --max-skipped N    diverged (exit 1) after N consecutive steps skipped for a\n"
        "                         gradient that is not finite, or when most steps were; 0 never\n"
        "                         (default %d)\n"
        "      --max-loss-factor X  diverged (exit 1) when the training loss over the last %d\n"
        "                         steps averages X times the first step's; 0 never (default %g)\n"
        "      --max-input SIZE   largest input file read, the --data text included\n"
        "                         (default 256MB; also ZBSCHED_MAX_INPUT=SIZE)\n"
        "  -q, --quiet            no progress lines on stderr\n"
        "  -h, --help             this text\n"
        "\n"
        "SIGTERM or SIGINT (Slurm's preemption, scancel, Ctrl-C): the step finishes, the\n"
        "checkpoint is written, exit 128+signal (143, 130); a second signal exits at once.\n"
        "\n"
        "Islands (docs/outer.md): K replicas, each running FILE on its own data stream:\n"
        "      --replicas K       train K replicas joined by an outer optimizer\n"
        "      --outer KIND       sync (data parallel), diloco, edit or a-edit (default diloco)\n"
        "      --inner-steps H    inner steps between outer steps (default 50)\n"
        "      --outer-lr X       outer Nesterov learning rate (default 0.7)\n"
        "      --outer-momentum X outer Nesterov momentum (default 0.9)\n"
        "      --allreduce W      fp32 or int8 (INTELLECT-1's codebook; default fp32)\n"
        "      --leave R:S        replica R leaves before step S (repeatable; in one\n"
        "                         process: what a SIGTERM to its ranks does under mpirun)\n"
        "      --sync-interval S  a-edit: seconds between outer steps, once the replicas\n"
        "                         did 100 steps in total since the last (default 600)\n"
        "      --zero1            with --outer sync: ZeRO-1, each replica keeps and steps\n"
        "                         1/K of the AdamW state (reduce-scatter, step, all-gather;\n"
        "                         the same losses); on by default for a plan whose zero1_dp\n"
        "                         is > 1\n"
        "      (--json then adds bytes_sent, outer_steps, replicas, zero1 and\n"
        "      optimizer_bytes_per_replica)\n"
        "\n"
        "Under mpirun / srun (docs/mpi.md): -np P runs one schedule device per rank;\n"
        "with --replicas K, -np K (a replica per rank) or K*P ranks (P per replica).\n",
        JOB_DEFAULT_MAX_SKIPPED, JOB_LOSS_WINDOW, JOB_DEFAULT_LOSS_FACTOR);
}

enum {
    O_DATA = 256, O_MODEL, O_SEED, O_JSON, O_CKPT, O_CKPT_EVERY, O_RESUME, O_TRACE, O_EVAL,
    O_EVALW, O_LR, O_BATCH, O_CLIP, O_SYNC, O_STOP, O_DEVICE, O_GPU, O_THREADS, O_MAX_INPUT,
    O_MAX_SKIPPED, O_LOSS_FACTOR, O_LOG,
    /* the islands' */
    O_REPLICAS, O_OUTER, O_INNER, O_OUTER_LR, O_OUTER_MOM, O_ALLREDUCE, O_INTERVAL, O_LEAVE,
    O_ZERO1,
};

static const struct option run_options[] = {
    { "steps", required_argument, NULL, 'n' },
    { "data", required_argument, NULL, O_DATA },
    { "model", required_argument, NULL, O_MODEL },
    { "seed", required_argument, NULL, O_SEED },
    { "json", no_argument, NULL, O_JSON },
    { "checkpoint", required_argument, NULL, O_CKPT },
    { "checkpoint-every", required_argument, NULL, O_CKPT_EVERY },
    { "resume", no_argument, NULL, O_RESUME },
    { "trace", required_argument, NULL, O_TRACE },
    { "log", required_argument, NULL, O_LOG },
    { "eval-every", required_argument, NULL, O_EVAL },
    { "eval-windows", required_argument, NULL, O_EVALW },
    { "lr", required_argument, NULL, O_LR },
    { "batch-size", required_argument, NULL, O_BATCH },
    { "clip", required_argument, NULL, O_CLIP },
    { "sync-optimizer", no_argument, NULL, O_SYNC },
    { "stop-at", required_argument, NULL, O_STOP },
    { "replicas", required_argument, NULL, O_REPLICAS },
    { "outer", required_argument, NULL, O_OUTER },
    { "inner-steps", required_argument, NULL, O_INNER },
    { "outer-lr", required_argument, NULL, O_OUTER_LR },
    { "outer-momentum", required_argument, NULL, O_OUTER_MOM },
    { "allreduce", required_argument, NULL, O_ALLREDUCE },
    { "sync-interval", required_argument, NULL, O_INTERVAL },
    { "device", required_argument, NULL, O_DEVICE },
    { "gpu", required_argument, NULL, O_GPU },
    { "threads", required_argument, NULL, O_THREADS },
    { "max-input", required_argument, NULL, O_MAX_INPUT },
    { "max-skipped", required_argument, NULL, O_MAX_SKIPPED },
    { "max-loss-factor", required_argument, NULL, O_LOSS_FACTOR },
    { "leave", required_argument, NULL, O_LEAVE },
    { "zero1", no_argument, NULL, O_ZERO1 },
    { "quiet", no_argument, NULL, 'q' },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
};

/* A double flag that must be positive (strict: > 0) or, with zero_ok, >= 0. */
static int positive(const char *flag, const char *text, int zero_ok, double *out, zb_err *err)
{
    if (cli_parse_double(flag, text, out, err) != 0)
        return -1;
    if (zero_ok ? !(*out >= 0) : !(*out > 0))
        return zb_fail(err, "%s: must be %s, got %s", flag, zero_ok ? ">= 0" : "positive", text);
    return 0;
}

/* --leave R:S, appended to a->leave in step order. */
static int parse_leave(const char *text, run_args *a, zb_err *err)
{
    int r, used = 0;
    long st;
    if (a->isl.n_events == RUN_MAX_LEAVES)
        return zb_fail(err, "--leave: at most %d", RUN_MAX_LEAVES);
    if (sscanf(text, "%d:%ld%n", &r, &st, &used) != 2 || text[used] != '\0' || r < 0 || st < 0)
        return zb_fail(err, "--leave: '%s' is not REPLICA:STEP", text);
    if (a->isl.n_events > 0 && a->leave[a->isl.n_events - 1].step > st)
        return zb_fail(err, "--leave: give the leaves in step order");
    a->leave[a->isl.n_events++] = (islands_event){ st, ISLANDS_LEAVE, r };
    a->isl.events = a->leave;
    return 0;
}

/* The islands' flags: 1 when c is one of them (parsed, *bad set), else 0. */
static int parse_islands_flag(int c, const char *text, run_args *a, int *bad, zb_err *err)
{
    outer_config *oc = &a->isl.outer;
    long k;
    double v;
    switch (c) {
    case O_REPLICAS:
        *bad = cli_parse_int("--replicas", text, 1, 1024, &k, err);
        a->isl.replicas = (int)k;
        return 1; /* not an outer flag: --replicas alone is the sync-free default */
    case O_OUTER: {
        int kind = outer_kind_parse(text);
        *bad = kind < 0 ? zb_fail(err, "--outer: '%s' is not sync, diloco, edit or a-edit", text) : 0;
        if (kind >= 0)
            oc->kind = (outer_kind)kind;
        break;
    }
    case O_INNER:
        *bad = cli_parse_int("--inner-steps", text, 1, 100000000, &k, err);
        oc->inner_steps = (int)k;
        break;
    case O_OUTER_LR:
        *bad = positive("--outer-lr", text, 0, &v, err);
        oc->outer_lr = (float)v;
        break;
    case O_OUTER_MOM:
        *bad = cli_parse_double("--outer-momentum", text, &v, err);
        if (!*bad && !(v >= 0 && v < 1))
            *bad = zb_fail(err, "--outer-momentum: must be in [0, 1), got %s", text);
        oc->outer_momentum = (float)v;
        break;
    case O_ALLREDUCE: {
        int w = outer_wire_parse(text);
        *bad = w < 0 ? zb_fail(err, "--allreduce: '%s' is not fp32 or int8", text) : 0;
        if (w >= 0)
            oc->wire = (outer_wire)w;
        break;
    }
    case O_INTERVAL:
        *bad = positive("--sync-interval", text, 0, &v, err);
        oc->aedit_interval_s = v;
        break;
    case O_LEAVE:
        *bad = parse_leave(text, a, err);
        break;
    case O_ZERO1:
        a->isl.zero1 = 1;
        break;
    default:
        return 0;
    }
    a->outer_flag = 1;
    return 1;
}

/* The run's own flags: 1 when c is one of them (parsed, *bad set), else 0. */
static int parse_run_flag(int c, const char *text, run_args *a, int *bad, zb_err *err)
{
    switch (c) {
    case 'n': *bad = cli_parse_int("--steps", text, 1, 100000000, &a->steps, err); break;
    case O_DATA: a->data = text; break;
    case O_MODEL: a->model = text; break;
    case O_SEED: *bad = cli_flag_seed(text, &a->seed, err); break;
    case O_JSON: a->json = 1; break;
    case O_CKPT: a->ckpt_dir = text; break;
    case O_CKPT_EVERY:
        *bad = cli_parse_int("--checkpoint-every", text, 1, 100000000, &a->ckpt_every, err);
        break;
    case O_RESUME: a->resume = 1; break;
    case O_TRACE: a->trace = text; break;
    case O_LOG: a->log = text; break;
    case O_EVAL:
        *bad = cli_parse_int("--eval-every", text, 1, 100000000, &a->eval_every, err);
        a->eval_flag = 1;
        break;
    case O_EVALW:
        *bad = cli_parse_int("--eval-windows", text, 1, 1000000, &a->eval_windows, err);
        a->eval_flag = 1;
        break;
    case O_DEVICE: *bad = cli_flag_device(text, &a->cuda, err); break;
    case O_GPU: *bad = cli_flag_gpu(text, &a->gpu, err); break;
    case O_THREADS: *bad = cli_parse_int("--threads", text, 1, 1024, &a->threads, err); break;
    case O_BATCH: *bad = cli_flag_batch(text, &a->batch, err); break;
    case O_LR: *bad = positive("--lr", text, 0, &a->lr, err); break;
    case O_CLIP: *bad = positive("--clip", text, 1, &a->clip, err); break;
    case O_SYNC: a->sync_opt = 1; break;
    case O_STOP: *bad = cli_parse_int("--stop-at", text, 1, 100000000, &a->stop_at, err); break;
    case O_MAX_SKIPPED:
        *bad = cli_parse_int("--max-skipped", text, 0, 100000000, &a->max_skipped, err);
        break;
    case O_LOSS_FACTOR: *bad = positive("--max-loss-factor", text, 1, &a->max_loss_factor, err); break;
    case O_MAX_INPUT: *bad = cli_flag_max_input(text, err); break;
    case 'q': a->quiet = 1; break;
    default: return 0;
    }
    return 1;
}

/* The combinations: -1 to go on, or 2 after the usage line. */
static int check_args(const char *prog, run_args *a)
{
    if (a->steps < 0)
        return cli_usage(prog, "missing --steps N");
    if (a->stop_at == 0 || a->stop_at > a->steps)
        a->stop_at = a->steps;
    if (a->resume && !a->ckpt_dir)
        return cli_usage(prog, "--resume needs --checkpoint DIR");
    if (a->ckpt_every && !a->ckpt_dir)
        return cli_usage(prog, "--checkpoint-every needs --checkpoint DIR");
    if (a->outer_flag && a->isl.replicas == 0)
        return cli_usage(prog, "the outer-optimizer flags need --replicas K");
    if (a->isl.zero1 && a->isl.outer.kind != OUTER_SYNC)
        return cli_usage(prog, "--zero1 shards data-parallel replicas: it needs --outer sync");
    if (a->isl.zero1 && a->isl.outer.wire != OUTER_WIRE_FP32)
        return cli_usage(prog, "--zero1 runs on --allreduce fp32 only");
    if (a->isl.replicas > 0 && a->trace)
        return cli_usage(prog, "--replicas does not support --trace");
    if (a->isl.replicas > 0 && (a->ckpt_dir || a->stop_at != a->steps) &&
        (a->isl.n_events > 0 || a->isl.outer.kind == OUTER_AEDIT))
        return cli_usage(prog, "--checkpoint and --stop-at with --replicas resume bit for bit, "
                         "which %s cannot", a->isl.n_events > 0 ? "--leave" : "--outer a-edit "
                         "(its wall clock)");
    if (a->log && a->json && !strcmp(a->log, "-"))
        return cli_usage(prog, "--log - and --json would both write to stdout; give --log a file");
    if (a->log && a->trace && !strcmp(a->log, a->trace) && strcmp(a->log, "-"))
        return cli_usage(prog, "--log and --trace name the same file '%s'", a->log);
    if (a->gpu >= 0 && !a->cuda)
        return cli_usage(prog, "--gpu N needs --device cuda");
    if (a->cuda && a->threads)
        return cli_usage(prog, "--threads is not supported with --device cuda (it sets CPU "
                         "kernel threads; on cuda every device is a stream)");
    return -1;
}

int run_parse_args(int argc, char **argv, run_args *a)
{
    *a = (run_args){ .data = cli_default_data(), .model = NULL, .steps = -1, .eval_windows = 64,
                     .seed = 1, .lr = 1e-3, .clip = 1.0, .gpu = -1,
                     .max_skipped = JOB_DEFAULT_MAX_SKIPPED,
                     .max_loss_factor = JOB_DEFAULT_LOSS_FACTOR };
    islands_opts_default(&a->isl);
    a->isl.replicas = 0; /* no --replicas: a single trainer */
    zb_err err = { { 0 } };
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":n:qh", run_options, NULL)) != -1) {
        int bad = 0;
        if (c == 'h') {
            run_usage(stdout);
            return 0;
        }
        if (c == ':')
            return cli_usage(argv[0], "%s needs a value (try --help)", argv[optind - 1]);
        if (!parse_run_flag(c, optarg, a, &bad, &err) &&
            !parse_islands_flag(c, optarg, a, &bad, &err))
            return cli_usage(argv[0], "unknown option '%s' (try --help)", argv[optind - 1]);
        if (bad)
            return cli_usage(argv[0], "%s", err.msg);
    }
    if (optind >= argc)
        return cli_usage(argv[0], "missing the schedule FILE (try --help)");
    if (optind + 1 < argc)
        return cli_usage(argv[0], "unexpected argument '%s'", argv[optind + 1]);
    a->file = argv[optind];
    return check_args(argv[0], a);
}
