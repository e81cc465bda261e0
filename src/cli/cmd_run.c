/*
 * cmd_run.c: `zbsched run FILE --data PATH --steps N [...]`, train a
 * Llama-style model on the CPU by executing a schedule file for real.
 *
 * The command wires the libraries together: load and validate the schedule,
 * load the model preset or file, build the character loader for the
 * model's context (the vocabulary comes from the text), create the trainer
 * (runtime/trainer.h), optionally resume from a checkpoint, then step,
 * printing progress on stderr and evaluating every K steps.  At the end it
 * prints a summary (or one JSON object with --json), writes the measured
 * trace of the last step with --trace, and the final checkpoint.
 *
 * Learning-rate schedule: nanoGPT's (linear warmup then cosine to lr/10),
 * with warmup min(100, steps/10) and the cosine ending at --steps, so that
 * a short run still decays.  A NaN or infinite loss stops the run with an
 * error (the step itself was skipped by the optimizer's NaN check).
 *
 * `--device cuda` runs the same schedule on GPUs instead (docs/gpu.md).
 * In one process it is the same executor with the CUDA backend
 * (runtime/backend.h; every schedule device a stream on one GPU, `--gpu N`
 * picks the GPU), so post-validation, evaluation, checkpoints, resume,
 * traces and --replicas work as on the CPU; only --threads (CPU kernel
 * threads) is refused.  Started by `zbsched launch` or mpirun
 * (ZB_WORLD_SIZE > 1 in the environment), each process is one rank
 * driving one schedule device on its own GPU, through the same executor
 * (trainer_opts.one_device) with the module's rank backend and NCCL
 * transport (run_cuda): post-validation, checkpoints in parts, resume,
 * --stop-at, V-shape and interleaved schedules; evaluation, traces,
 * --replicas and the synchronous clip are refused there with one line
 * (refuse_for_ranks), and --json reports val_loss as null.  The GPU code is the module
 * zbsched_cuda.so (runtime/cuda_module.h), loaded here only for --device
 * cuda; without it, or without a GPU, the command fails with one line.
 */
#include "src/cli/cli.h"
#include "src/cli/run_checks.h"
#include "src/cli/run_resume.h"
#include "src/cli/data_path.h"
#include "src/cli/run_plan.h"

#include <errno.h>
#include <getopt.h>
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "runtime/ckpt_set.h"
#include "runtime/trainer.h"
#include "runtime/generate.h"
#include "runtime/outer/islands.h"
#include "src/input.h"
#include "src/model.h"
#include "src/size.h"
#include "src/sched_io.h"
#include "src/validate.h"

#include "runtime/cuda_module.h"
#include "runtime/rank.h"
#include "src/cli/cli_mpi.h"

#define CHECKPOINT_NAME "checkpoint.bin"
/* consecutive skipped steps (gradient not finite) that mean divergence */
#define DEFAULT_MAX_SKIPPED 5
/* seconds a rank waits for the others during the NCCL bootstrap */
#define NCCL_BOOTSTRAP_TIMEOUT_S 120

static void usage(FILE *out)
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
        "      --checkpoint DIR   write DIR/" CHECKPOINT_NAME " at every evaluation and at the end\n"
        "                         (and DIR/model.json, for `zbsched generate`; under mpirun\n"
        "                         one part per rank and DIR/checkpoint.parts.json)\n"
        "      --resume           continue from the newest checkpoint in DIR (needs --checkpoint)\n"
        "      --stop-at N        stop after step N as if interrupted (continue with --resume)\n"
        "      --trace FILE       write the last step's measured op times as a schedule file\n"
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
        "      --max-skipped N    stop (exit 1) after N consecutive steps skipped for a\n"
        "                         gradient that is not finite; 0 never stops (default 5)\n"
        "      --max-input SIZE   largest input file read, the --data text included\n"
        "                         (default 256MB; also ZBSCHED_MAX_INPUT=SIZE)\n"

        "  -q, --quiet            no progress lines on stderr\n"
        "  -h, --help             this text\n"
        "\n"
        "Islands (docs/outer.md): K replicas, each running FILE on its own data stream:\n"
        "      --replicas K       train K replicas joined by an outer optimizer\n"
        "      --outer KIND       sync (data parallel), diloco, edit or a-edit (default diloco)\n"
        "      --inner-steps H    inner steps between outer steps (default 50)\n"
        "      --outer-lr X       outer Nesterov learning rate (default 0.7)\n"
        "      --outer-momentum X outer Nesterov momentum (default 0.9)\n"
        "      --allreduce W      fp32 or int8 (INTELLECT-1's codebook; default fp32)\n"
        "      --leave R:S        replica R leaves before step S (repeatable; in one\n"
        "                         process: what a SIGTERM does under mpirun)\n"
        "      --sync-interval S  a-edit: seconds between outer steps, once the replicas\n"
        "                         did 100 steps in total since the last (default 600)\n"
        "      (--json then adds bytes_sent, outer_steps and replicas)\n"
        "\n"
        "Under mpirun / srun (docs/mpi.md): -np P runs one schedule device per rank;\n"
        "with --replicas K, -np K (a replica per rank) or K*P ranks (P per replica).\n");
}

/* Everything the command line sets. */
typedef struct run_args {
    const char *file;        /* schedule file */
    const char *data;        /* text file */
    const char *model;       /* --model preset or file, or NULL (run_plan.h decides) */
    const char *ckpt_dir;    /* --checkpoint, or NULL */
    const char *trace;       /* --trace, or NULL */
    long steps;              /* --steps */
    long stop_at;            /* --stop-at: last step of this invocation (0: steps) */
    long eval_every;         /* 0: at the end only */
    long eval_windows;       /* --eval-windows */
    long batch;              /* 0: the model's */
    long seed;               /* --seed */
    double lr;               /* --lr */
    double clip;             /* --clip */
    int sync_opt;            /* --sync-optimizer */
    int resume;              /* --resume */
    int json;                /* --json */
    int quiet;               /* --quiet */
    int cuda;                /* --device cuda */
    long gpu;                /* --gpu, or -1 when not given */
    long threads;            /* --threads: kernel threads per device (0: cores / devices) */
    long max_skipped;        /* --max-skipped: consecutive skipped steps that stop the run (0: never) */
    int eval_flag;           /* 1 when --eval-every or --eval-windows was given */
    islands_opts isl;        /* --replicas and the outer-optimizer flags */
    islands_event leave[64]; /* --leave R:S, in the order given (isl.events) */
    int outer_flag;          /* 1 when an outer-optimizer flag was given */
} run_args;

static int parse_args(int argc, char **argv, run_args *a)
{
    enum { O_DATA = 256, O_MODEL, O_SEED, O_JSON, O_CKPT, O_RESUME, O_TRACE, O_EVAL,
           O_EVALW, O_LR, O_BATCH, O_CLIP, O_SYNC, O_STOP,
           O_REPLICAS, O_OUTER, O_INNER, O_OUTER_LR, O_OUTER_MOM, O_ALLREDUCE, O_INTERVAL,
           O_DEVICE, O_GPU, O_THREADS, O_MAX_INPUT, O_MAX_SKIPPED, O_LEAVE };
    static const struct option opts[] = {
        { "steps", required_argument, NULL, 'n' },
        { "data", required_argument, NULL, O_DATA },
        { "model", required_argument, NULL, O_MODEL },
        { "seed", required_argument, NULL, O_SEED },
        { "json", no_argument, NULL, O_JSON },
        { "checkpoint", required_argument, NULL, O_CKPT },
        { "resume", no_argument, NULL, O_RESUME },
        { "trace", required_argument, NULL, O_TRACE },
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
        { "leave", required_argument, NULL, O_LEAVE },
        { "quiet", no_argument, NULL, 'q' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    *a = (run_args){ .data = cli_default_data(), .model = NULL, .steps = -1, .eval_windows = 64,
                     .seed = 1, .lr = 1e-3, .clip = 1.0, .gpu = -1,
                     .max_skipped = DEFAULT_MAX_SKIPPED };
    islands_opts_default(&a->isl);
    a->isl.replicas = 0; /* no --replicas: a single trainer */
    zb_err err = { { 0 } };
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":n:qh", opts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case 'n': bad = cli_parse_int("--steps", optarg, 1, 100000000, &a->steps, &err); break;
        case O_DATA: a->data = optarg; break;
        case O_MODEL: a->model = optarg; break;
        case O_SEED: bad = cli_parse_int("--seed", optarg, 0, 0x7fffffffffffffffL, &a->seed, &err); break;
        case O_JSON: a->json = 1; break;
        case O_CKPT: a->ckpt_dir = optarg; break;
        case O_RESUME: a->resume = 1; break;
        case O_TRACE: a->trace = optarg; break;
        case O_EVAL:
            bad = cli_parse_int("--eval-every", optarg, 1, 100000000, &a->eval_every, &err);
            a->eval_flag = 1;
            break;
        case O_EVALW:
            bad = cli_parse_int("--eval-windows", optarg, 1, 1000000, &a->eval_windows, &err);
            a->eval_flag = 1;
            break;
        case O_DEVICE:
            if (strcmp(optarg, "cpu") == 0)
                a->cuda = 0;
            else if (strcmp(optarg, "cuda") == 0)
                a->cuda = 1;
            else
                bad = zb_fail(&err, "--device: '%s' is not cpu or cuda", optarg);
            break;
        case O_GPU: bad = cli_parse_int("--gpu", optarg, 0, 1023, &a->gpu, &err); break;
        case O_THREADS: bad = cli_parse_int("--threads", optarg, 1, 1024, &a->threads, &err); break;
        case O_LEAVE: {
            int r, used = 0;
            long st;
            if (a->isl.n_events == (int)(sizeof a->leave / sizeof a->leave[0]))
                bad = zb_fail(&err, "--leave: at most %d", (int)(sizeof a->leave / sizeof a->leave[0]));
            else if (sscanf(optarg, "%d:%ld%n", &r, &st, &used) != 2 || optarg[used] != '\0' ||
                     r < 0 || st < 0)
                bad = zb_fail(&err, "--leave: '%s' is not REPLICA:STEP", optarg);
            else if (a->isl.n_events > 0 && a->leave[a->isl.n_events - 1].step > st)
                bad = zb_fail(&err, "--leave: give the leaves in step order");
            else
                a->leave[a->isl.n_events++] = (islands_event){ st, ISLANDS_LEAVE, r };
            a->isl.events = a->leave;
            a->outer_flag = 1;
            break;
        }
        case O_BATCH: bad = cli_parse_int("--batch-size", optarg, 1, 65536, &a->batch, &err); break;
        case O_LR:
            bad = cli_parse_double("--lr", optarg, &a->lr, &err);
            if (!bad && a->lr <= 0)
                bad = zb_fail(&err, "--lr: must be positive, got %s", optarg);
            break;
        case O_CLIP:
            bad = cli_parse_double("--clip", optarg, &a->clip, &err);
            if (!bad && a->clip < 0)
                bad = zb_fail(&err, "--clip: must be >= 0, got %s", optarg);
            break;
        case O_SYNC: a->sync_opt = 1; break;
        case O_STOP: bad = cli_parse_int("--stop-at", optarg, 1, 100000000, &a->stop_at, &err); break;
        case O_REPLICAS: {
            long k;
            bad = cli_parse_int("--replicas", optarg, 1, 1024, &k, &err);
            a->isl.replicas = (int)k;
            break;
        }
        case O_OUTER: {
            int k = outer_kind_parse(optarg);
            if (k < 0)
                bad = zb_fail(&err, "--outer: '%s' is not sync, diloco, edit or a-edit", optarg);
            else
                a->isl.outer.kind = (outer_kind)k;
            a->outer_flag = 1;
            break;
        }
        case O_INNER: {
            long h;
            bad = cli_parse_int("--inner-steps", optarg, 1, 100000000, &h, &err);
            a->isl.outer.inner_steps = (int)h;
            a->outer_flag = 1;
            break;
        }
        case O_OUTER_LR: {
            double v;
            bad = cli_parse_double("--outer-lr", optarg, &v, &err);
            if (!bad && !(v > 0))
                bad = zb_fail(&err, "--outer-lr: must be positive, got %s", optarg);
            a->isl.outer.outer_lr = (float)v;
            a->outer_flag = 1;
            break;
        }
        case O_OUTER_MOM: {
            double v;
            bad = cli_parse_double("--outer-momentum", optarg, &v, &err);
            if (!bad && !(v >= 0 && v < 1))
                bad = zb_fail(&err, "--outer-momentum: must be in [0, 1), got %s", optarg);
            a->isl.outer.outer_momentum = (float)v;
            a->outer_flag = 1;
            break;
        }
        case O_ALLREDUCE: {
            int w = outer_wire_parse(optarg);
            if (w < 0)
                bad = zb_fail(&err, "--allreduce: '%s' is not fp32 or int8", optarg);
            else
                a->isl.outer.wire = (outer_wire)w;
            a->outer_flag = 1;
            break;
        }
        case O_INTERVAL: {
            double v;
            bad = cli_parse_double("--sync-interval", optarg, &v, &err);
            if (!bad && !(v > 0))
                bad = zb_fail(&err, "--sync-interval: must be positive, got %s", optarg);
            a->isl.outer.aedit_interval_s = v;
            a->outer_flag = 1;
            break;
        }
        case O_MAX_SKIPPED:
            bad = cli_parse_int("--max-skipped", optarg, 0, 100000000, &a->max_skipped, &err);
            break;
        case O_MAX_INPUT: {
            uint64_t bytes;
            if (zb_size_parse(optarg, &bytes, &err) < 0)
                bad = zb_wrap(&err, "--max-input: ");
            else
                zb_input_set_max(bytes);
            break;
        }
        case 'q': a->quiet = 1; break;
        case 'h': usage(stdout); return 0;
        case ':': return cli_usage(argv[0], "%s needs a value (try --help)", argv[optind - 1]);
        default: return cli_usage(argv[0], "unknown option '%s' (try --help)", argv[optind - 1]);
        }
        if (bad)
            return cli_usage(argv[0], "%s", err.msg);
    }
    if (optind >= argc)
        return cli_usage(argv[0], "missing the schedule FILE (try --help)");
    if (optind + 1 < argc)
        return cli_usage(argv[0], "unexpected argument '%s'", argv[optind + 1]);
    a->file = argv[optind];
    if (a->steps < 0)
        return cli_usage(argv[0], "missing --steps N");
    if (a->stop_at == 0 || a->stop_at > a->steps)
        a->stop_at = a->steps;
    if (a->resume && !a->ckpt_dir)
        return cli_usage(argv[0], "--resume needs --checkpoint DIR");
    if (a->outer_flag && a->isl.replicas == 0)
        return cli_usage(argv[0], "the outer-optimizer flags need --replicas K");
    if (a->isl.replicas > 0 && (a->ckpt_dir || a->trace || a->stop_at != a->steps))
        return cli_usage(argv[0], "--replicas does not support --checkpoint, --resume, --trace or --stop-at");
    if (a->gpu >= 0 && !a->cuda)
        return cli_usage(argv[0], "--gpu N needs --device cuda");
    if (a->cuda && a->threads)
        return cli_usage(argv[0], "--threads is not supported with --device cuda (it sets CPU "
                         "kernel threads; on cuda every device is a stream)");
    return -1; /* go on */
}

/* The flags GPU ranks (one schedule device per process, run_cuda) do not
 * support yet, refused with one line and the reason (usage error, 2)
 * before any rank bootstraps, or -1 to go on.  Checkpoints, resume,
 * --stop-at, V-shape and interleaved schedules are supported. */
static int refuse_for_ranks(const char *prog, const run_args *a)
{
    if (a->eval_flag)
        return cli_usage(prog, "%s is not supported with --device cuda across ranks (each rank "
                         "holds only its own stages on its GPU, and an evaluation through the "
                         "pipeline is not implemented)", a->eval_every ? "--eval-every"
                                                                       : "--eval-windows");
    if (a->trace)
        return cli_usage(prog, "--trace is not supported with --device cuda across ranks (a "
                         "rank measures only its own lane; as under mpirun)");
    if (a->isl.replicas > 0)
        return cli_usage(prog, "--replicas is not supported with --device cuda across ranks");
    if (a->threads)
        return cli_usage(prog, "--threads is not supported with --device cuda (it sets CPU "
                         "kernel threads)");
    if (a->sync_opt)
        return cli_usage(prog, "--sync-optimizer is not supported with --device cuda across ranks "
                         "(the synchronous clip gathers every stage's norm in one process; "
                         "post-validation passes the norms along the pipeline)");
    return -1; /* go on */
}

/* Creates dir when it does not exist; fails when it is not a directory. */
static int ensure_dir(const char *dir, zb_err *err)
{
    struct stat st;
    if (stat(dir, &st) == 0)
        return S_ISDIR(st.st_mode) ? 0 : zb_fail(err, "%s: not a directory", dir);
    if (mkdir(dir, 0777) != 0)
        return zb_fail(err, "%s: cannot create the checkpoint directory: %s", dir, strerror(errno));
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Most steps one trainer_steps call takes (bounds its token buffer). */
#define RUN_BATCH_MAX 32

/* What the run produced, for the summary. */
typedef struct run_result {
    long first_step;     /* step index the run started at (resume) */
    double *losses;      /* [steps - first_step] */
    int n_losses;        /* filled entries */
    cJSON *evals;        /* array of {step, val_loss} */
    double val_loss;     /* last validation loss */
    double train_s;      /* seconds inside trainer_steps */
    long tokens;         /* tokens trained in this run */
} run_result;

static int evaluate(trainer *t, run_result *res, long step, int quiet, zb_err *err)
{
    if (trainer_eval(t, &res->val_loss, err) != 0)
        return -1;
    cJSON *e = cJSON_CreateObject();
    cJSON_AddNumberToObject(e, "step", (double)step);
    cJSON_AddNumberToObject(e, "val_loss", res->val_loss);
    cJSON_AddItemToArray(res->evals, e);
    if (!quiet)
        fprintf(stderr, "step %ld: val loss %.4f\n", step, res->val_loss);
    return 0;
}

/* Divergence rule: a loss that is not finite stops the run at once; a
 * gradient that is not finite makes the optimizer skip the step (the
 * parameters stay as they were), which one bad batch may cause, but
 * --max-skipped consecutive skips mean the run diverged (a huge --lr sends
 * the loss to 1e13 while every later step is skipped).  Either way the run
 * exits 1 naming the step, and no checkpoint is written from a state
 * inside a skip streak, so the last one on disk is the last good one. */
static int train(trainer *t, const run_args *a, const char *ckpt_path, const run_identity *id,
                 run_result *res)
{
    zb_err err = { { 0 } };
    const trainer_stats *st = trainer_get_stats(t);
    res->first_step = st->step;
    long streak = 0; /* consecutive skipped steps so far */
    /* Steps run in batches up to the next evaluation or checkpoint
     * (trainer_steps: no barrier between them, so an iteration can last
     * the schedule's cost, not its makespan); the progress lines and the
     * divergence checks follow each batch, step by step. */
    trainer_step_info info[RUN_BATCH_MAX];
    int n_info = 0, next_info = 0;
    for (long step = st->step; step < a->stop_at; step++) {
        if (next_info == n_info) {
            long end = a->stop_at;
            if (a->eval_every > 0)
                end = (step / a->eval_every + 1) * a->eval_every;
            if (end > a->stop_at)
                end = a->stop_at;
            n_info = (int)(end - step < RUN_BATCH_MAX ? end - step : RUN_BATCH_MAX);
            next_info = 0;
            double t0 = now_s();
            if (trainer_steps(t, n_info, info, &err) != 0)
                return cli_error("step %ld: %s", step + 1, err.msg);
            res->train_s += now_s() - t0;
        }
        const trainer_step_info *in = &info[next_info++];
        double loss = in->loss;
        res->tokens += st->tokens_per_step;
        res->losses[res->n_losses++] = loss;
        if (!isfinite(loss))
            return cli_error("step %ld: the training loss is %s (diverged; try a lower --lr)%s",
                             step + 1, isnan(loss) ? "NaN" : "infinite",
                             ckpt_path ? "; the last checkpoint is kept" : "");
        streak = in->skipped ? streak + 1 : 0;
        if (a->max_skipped > 0 && streak >= a->max_skipped)
            return cli_error("step %ld: diverged: %ld steps in a row were skipped because the gradient "
                             "was not finite (loss %.4g; try a lower --lr, or raise --max-skipped)%s",
                             step + 1, streak, loss, ckpt_path ? "; the last checkpoint is kept" : "");
        if (!a->quiet)
            fprintf(stderr, "step %ld/%ld: loss %.4f  %.0f tok/s  lr %.2e\n", step + 1, a->steps,
                    loss, (double)st->tokens_per_step / in->seconds, in->lr);
        int last = step + 1 == a->stop_at;
        int eval_now = a->eval_every > 0 && (step + 1) % a->eval_every == 0;
        if (eval_now || last) {
            if (evaluate(t, res, step + 1, a->quiet, &err) != 0)
                return cli_fail(&err);
            if (!isfinite(res->val_loss))
                return cli_error("step %ld: the validation loss is not finite", step + 1);
            if (ckpt_path && streak == 0 &&
                (ckptset_save_single(t, a->ckpt_dir, &err) != 0 || run_identity_save(a->ckpt_dir, id, &err) != 0))
                return cli_fail(&err);
        }
    }
    return 0;
}

static void print_summary(const run_args *a, const sched_t *s, trainer *t, const run_result *res)
{
    const trainer_stats *st = trainer_get_stats(t);
    double tps = res->train_s > 0 ? (double)res->tokens / res->train_s : 0;
    if (!a->json) {
        printf("%s: %s, %d devices, %d stages, m=%d%s; %ld steps, final loss %.4f, val loss %.4f, "
               "%.0f tokens/s, %ld rollbacks\n",
               a->file, s->name[0] ? s->name : "schedule", s->n_devices, s->n_stages, s->n_micro,
               a->cuda ? " on cuda (one GPU)" : "", st->step,
               res->n_losses ? res->losses[res->n_losses - 1] : NAN, res->val_loss, tps,
               st->rollbacks);
        return;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "schedule", s->name);
    cJSON_AddStringToObject(o, "model", trainer_model(t)->name);
    cJSON_AddNumberToObject(o, "devices", s->n_devices);
    cJSON_AddNumberToObject(o, "stages", s->n_stages);
    cJSON_AddNumberToObject(o, "micro_batches", s->n_micro);
    cJSON_AddNumberToObject(o, "batch_size", trainer_model(t)->micro_batch);
    cJSON_AddNumberToObject(o, "parameters", (double)trainer_param_count(t));
    cJSON *split = cJSON_AddArrayToObject(o, "layers_per_stage"); /* the split trained */
    for (int i = 0; i < trainer_stage_count(t); i++)
        cJSON_AddItemToArray(split, cJSON_CreateNumber(trainer_stage_layout(t, i)->l1 -
                                                       trainer_stage_layout(t, i)->l0));
    cJSON_AddNumberToObject(o, "first_step", (double)res->first_step);
    cJSON_AddNumberToObject(o, "steps", (double)st->step);
    cJSON *l = cJSON_AddArrayToObject(o, "losses");
    for (int i = 0; i < res->n_losses; i++)
        cJSON_AddItemToArray(l, cJSON_CreateNumber(res->losses[i]));
    cJSON_AddItemToObject(o, "evals", cJSON_Duplicate(res->evals, 1));
    cJSON_AddNumberToObject(o, "val_loss", res->val_loss);
    cJSON_AddNumberToObject(o, "tokens_per_s", tps);
    cJSON_AddNumberToObject(o, "threads", trainer_threads(t));
    cJSON_AddStringToObject(o, "device", trainer_backend_name(t));
    size_t static_bytes = 0, peak_bytes = 0;
    zb_err merr = { { 0 } };
    if (a->cuda && trainer_memory(t, &static_bytes, &peak_bytes, &merr) == 0) {
        cJSON_AddNumberToObject(o, "gpu_static_bytes", (double)static_bytes);
        cJSON_AddNumberToObject(o, "gpu_peak_activation_bytes", (double)peak_bytes);
    }
    cJSON_AddNumberToObject(o, "train_seconds", res->train_s);
    cJSON_AddNumberToObject(o, "rollbacks", (double)st->rollbacks);
    cJSON_AddNumberToObject(o, "skipped_steps", (double)st->skipped_steps);
    char *text = cJSON_PrintUnformatted(o);
    if (text)
        printf("%s\n", text);
    free(text);
    cJSON_Delete(o);
}

/* `--replicas K`: K trainers of the schedule under an outer optimizer
 * (runtime/outer/islands.h); prints the summary or the JSON object. */
static int run_islands(run_args *a, const sched_t *s, const zb_model *m, const zb_data *d,
                       const trainer_opts *o)
{
    zb_err err = { { 0 } };
    islands_result r;
    a->isl.steps = a->steps;
    a->isl.eval_every = (int)a->eval_every;
    a->isl.max_skipped = a->max_skipped;
    if (!a->quiet)
        fprintf(stderr, "zbsched run: %d replicas of %s, outer %s, all-reduce %s, H=%d, %ld steps\n",
                a->isl.replicas, s->name[0] ? s->name : a->file, outer_kind_name(a->isl.outer.kind),
                outer_wire_name(a->isl.outer.wire), a->isl.outer.inner_steps, a->steps);
    if (islands_run(s, m, d, o, &a->isl, &r, &err) != 0) {
        zb_wrap(&err, "%s: ", a->file);
        return cli_fail(&err);
    }
    /* islands_run stops at the first step where a replica's loss is not
     * finite or --max-skipped of its steps in a row were skipped, and its
     * error names the step and the replica.  This check stays as a guard:
     * a step's mean is also NaN when no replica trained, which only
     * replica events cause (the command line has none). */
    for (long i = 0; i < r.steps; i++)
        if (!isfinite(r.loss[i])) {
            double bad = r.loss[i];
            islands_result_free(&r);
            return cli_error("%s: step %ld: the training loss is %s (diverged; try a lower --lr or --outer-lr)",
                             a->file, i + 1, isnan(bad) ? "NaN" : "infinite");
        }
    if (!isfinite(r.final_val_loss)) {
        islands_result_free(&r);
        return cli_error("%s: the validation loss is not finite (diverged; try a lower --lr or --outer-lr)", a->file);
    }
    if (!a->json) {
        printf("%s: %d replicas, outer %s, all-reduce %s; %ld steps, final loss %.4f, val loss %.4f, "
               "%ld outer steps, %llu bytes sent, %.1f s\n",
               a->file, a->isl.replicas, outer_kind_name(a->isl.outer.kind),
               outer_wire_name(a->isl.outer.wire), r.steps, r.loss[r.steps - 1], r.final_val_loss,
               r.outer_steps, (unsigned long long)r.bytes_sent, r.wall_s);
    } else {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "schedule", s->name);
        cJSON_AddStringToObject(j, "model", m->name);
        cJSON_AddNumberToObject(j, "replicas", a->isl.replicas);
        cJSON_AddStringToObject(j, "outer", outer_kind_name(a->isl.outer.kind));
        cJSON_AddStringToObject(j, "allreduce", outer_wire_name(a->isl.outer.wire));
        cJSON_AddNumberToObject(j, "inner_steps", a->isl.outer.inner_steps);
        cJSON_AddNumberToObject(j, "steps", (double)r.steps);
        cJSON *l = cJSON_AddArrayToObject(j, "losses");
        cJSON *ev = cJSON_AddArrayToObject(j, "evals");
        for (long i = 0; i < r.steps; i++) {
            cJSON_AddItemToArray(l, cJSON_CreateNumber(r.loss[i]));
            if (isfinite(r.val_loss[i])) {
                cJSON *e = cJSON_CreateObject();
                cJSON_AddNumberToObject(e, "step", (double)(i + 1));
                cJSON_AddNumberToObject(e, "val_loss", r.val_loss[i]);
                cJSON_AddItemToArray(ev, e);
            }
        }
        cJSON_AddNumberToObject(j, "val_loss", r.final_val_loss);
        cJSON_AddNumberToObject(j, "bytes_sent", (double)r.bytes_sent);
        cJSON_AddNumberToObject(j, "outer_steps", (double)r.outer_steps);
        cJSON_AddNumberToObject(j, "final_replicas", r.final_replicas);
        cJSON_AddNumberToObject(j, "tokens", (double)r.tokens);
        cJSON_AddNumberToObject(j, "train_seconds", r.wall_s);
        char *text = cJSON_PrintUnformatted(j);
        if (text)
            printf("%s\n", text);
        free(text);
        cJSON_Delete(j);
    }
    islands_result_free(&r);
    return 0;
}

/* The GPU ranks' agreement after a collective step: 0 when ok is 1 on
 * every rank, else -1 (err set on this rank: its own message, or that
 * another rank failed, which has then said why on its own stderr). */
static int gpu_agree(const zb_cuda_api *cu, struct gpu_comm *comm, int ok, zb_err *err)
{
    int all = ok;
    zb_err e = { { 0 } };
    if (cu->comm_min_int(comm, &all, &e) != 0) {
        *err = e;
        return -1;
    }
    if (all)
        return 0;
    if (ok)
        zb_fail(err, "another rank failed (its own line above says why)");
    return -1;
}

/* One rank's checkpoint: its stages into its part, then, once every part
 * is written, rank 0's manifest and run.json (runtime/ckpt_set.h, as the
 * MPI pipeline ranks write them).  Collective; 0 or -1 with err. */
static int gpu_save(const zb_cuda_api *cu, struct gpu_comm *comm, trainer *t, const sched_t *s,
                    const char *dir, const run_identity *id, int rank, zb_err *err)
{
    ckptset_manifest mf = { .step = trainer_get_stats(t)->step, .ranks = s->n_devices };
    if (rank == 0)
        ckptset_new_tag(mf.tag);
    if (cu->comm_bcast(comm, mf.tag, sizeof mf.tag, 0, err) != 0)
        return -1;
    unsigned char own[s->n_stages];
    for (int st = 0; st < s->n_stages; st++)
        own[st] = s->stage_device[st] == rank;
    char path[4096];
    int ok = ckptset_part_path(dir, mf.tag, rank, path, sizeof path, err) == 0 &&
             trainer_save_stages(t, path, own, err) == 0;
    if (gpu_agree(cu, comm, ok, err) != 0)
        return -1;
    ok = rank != 0 || (ckptset_manifest_write(dir, &mf, err) == 0 &&
                       run_identity_save(dir, id, err) == 0);
    if (gpu_agree(cu, comm, ok, err) != 0)
        return -1;
    ckptset_prune(dir, rank, mf.tag, rank == 0);
    return 0;
}

/* Prints the GPU ranks' summary line or JSON object (rank 0 only). */
static void print_ranks_summary(const run_args *a, const sched_t *s, const trainer *t,
                                int world, long first, const double *losses, long n_losses,
                                double train_s, long tokens, const zb_nccl_cfg *cfg,
                                size_t static_bytes, size_t peak_bytes)
{
    double tps = train_s > 0 ? (double)tokens / train_s : 0;
    double last = n_losses ? losses[n_losses - 1] : NAN;
    if (!a->json) {
        printf("%s: %s, %d devices on %d GPU ranks, %d stages, m=%d; %ld steps, final loss %.4f, "
               "%.0f tokens/s, rank 0 sent %llu bytes, GPU memory of rank 0 %.1f MB static + "
               "%.1f MB peak activations, %ld rollbacks on rank 0\n",
               a->file, s->name[0] ? s->name : "schedule", s->n_devices, world, s->n_stages,
               s->n_micro, first + n_losses, last, tps, (unsigned long long)cfg->bytes_sent,
               (double)static_bytes / 1e6, (double)peak_bytes / 1e6,
               trainer_get_stats(t)->rollbacks);
        return;
    }
    const zb_model *em = trainer_model(t);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "schedule", s->name);
    cJSON_AddStringToObject(o, "model", em->name);
    cJSON_AddStringToObject(o, "device", "cuda");
    cJSON_AddNullToObject(o, "gpu");
    cJSON_AddNumberToObject(o, "ranks", world);
    cJSON_AddStringToObject(o, "transport", "nccl");
    cJSON_AddNumberToObject(o, "devices", s->n_devices);
    cJSON_AddNumberToObject(o, "stages", s->n_stages);
    cJSON_AddNumberToObject(o, "micro_batches", s->n_micro);
    cJSON_AddNumberToObject(o, "batch_size", em->micro_batch);
    cJSON_AddNumberToObject(o, "parameters", (double)trainer_param_count(t));
    cJSON_AddNumberToObject(o, "first_step", (double)first);
    cJSON_AddNumberToObject(o, "steps", (double)(first + n_losses));
    cJSON *l = cJSON_AddArrayToObject(o, "losses");
    for (long i = 0; i < n_losses; i++)
        cJSON_AddItemToArray(l, cJSON_CreateNumber(losses[i]));
    cJSON_AddArrayToObject(o, "evals");
    cJSON_AddNullToObject(o, "val_loss"); /* refused across GPU ranks (refuse_for_ranks) */
    cJSON_AddNumberToObject(o, "tokens_per_s", tps);
    cJSON_AddNumberToObject(o, "train_seconds", train_s);
    /* rank 0's own figures: its GPU, its sends */
    cJSON_AddNumberToObject(o, "bytes_sent_rank0", (double)cfg->bytes_sent);
    cJSON_AddNumberToObject(o, "messages_rank0", (double)cfg->messages);
    cJSON_AddNumberToObject(o, "gpu_static_bytes", (double)static_bytes);
    cJSON_AddNumberToObject(o, "gpu_peak_activation_bytes", (double)peak_bytes);
    char *text = cJSON_PrintUnformatted(o);
    if (text)
        printf("%s\n", text);
    free(text);
    cJSON_Delete(o);
}

/* The module's backend for a GPU rank: its schedule device on its GPU. */
typedef struct rank_backend_ctx {
    const zb_cuda_api *cu; /* the loaded module's table */
    int gpu;               /* this rank's CUDA device (ZB_LOCAL_RANK) */
    int device;            /* its schedule device (= rank) */
} rank_backend_ctx;

static int make_rank_backend(void *ctx, int n_devices, zb_backend **out, zb_err *err)
{
    const rank_backend_ctx *c = ctx;
    return c->cu->backend_create_rank(c->gpu, n_devices, c->device, out, err);
}

/* `--device cuda` with ZB_WORLD_SIZE > 1 (`zbsched launch`, or mpirun /
 * srun): this process is rank r, running schedule device r on GPU
 * ZB_LOCAL_RANK through the one executor (trainer_opts.one_device) with
 * the module's rank backend (only this device's stages on the GPU) and
 * its NCCL transport (a communicator and a stream per link).  The loss
 * is broadcast from the last stage's rank; checkpoints are written in
 * parts (runtime/ckpt_set.h).  Returns the exit status, having printed
 * the error line itself. */
static int run_cuda(const run_args *a, const sched_t *s, zb_model *m, const zb_data *d,
                    const trainer_opts *o, const run_identity *id)
{
    zb_err err = { { 0 } };
    const zb_cuda_api *cu;
    if (cuda_module_load(&cu, &err) != 0)
        return cli_fail(&err);
    zb_rank_info rk;
    if (zb_rank_from_env(&rk, &err) != 1)
        return cli_error("internal error: GPU ranks without rank variables");
    if (a->gpu >= 0)
        return cli_usage("run", "--gpu is set by the launcher (ZB_LOCAL_RANK) in a run of %d ranks",
                         rk.world);
    /* Fail before the NCCL bootstrap, where a rank would otherwise wait
     * for peers that already gave up: a schedule that does not fit the
     * ranks (needs no GPU), no GPU, a missing GPU. */
    if (s->n_devices != rk.world)
        return cli_error("%s: the schedule has %d devices but the run has %d ranks (one GPU per "
                         "device: use `zbsched launch --gpus %d`)", a->file, s->n_devices, rk.world,
                         s->n_devices);
    int visible = cu->device_count();
    if (visible == 0)
        return cli_error("%s: no CUDA device (this rank's GPU is missing)", a->file);
    if (rk.local_rank >= visible)
        return cli_error("%s: CUDA device %d does not exist (%d visible); ZB_LOCAL_RANK is the GPU "
                         "index", a->file, rk.local_rank, visible);
    if (!cu->comm_create || !cu->backend_create_rank || !cu->transport_make || !cu->comm_bcast ||
        !cu->comm_min_int)
        return cli_error("%s: this CUDA module has no GPU ranks (no NCCL transport in its table)",
                         a->file);
    int rank = rk.rank, quiet = a->quiet || rank != 0;
    struct gpu_comm *comm = NULL;
    trainer *t = NULL;
    double *losses = NULL;
    int rc = 1;
    /* under mpirun / srun the NCCL id travels over MPI (cli_mpi.h);
     * otherwise zbsched launch's TCP rendezvous */
    int by_mpi = cli_mpi_nccl_comm(cu, &rk, &comm, &err);
    if (by_mpi < 0 ||
        (by_mpi == 0 && cu->comm_create(&rk, NCCL_BOOTSTRAP_TIMEOUT_S, &comm, &err) != 0)) {
        zb_wrap(&err, "rank %d of %d: ", rk.rank, rk.world);
        cli_fail(&err);
        goto out;
    }
    rank_backend_ctx bctx = { cu, rk.local_rank, rank };
    zb_nccl_cfg cfg = { .comm = comm, .gpu = rk.local_rank };
    int batch = o->batch_size > 0 ? o->batch_size : m->micro_batch;
    cfg.act_elems = (size_t)batch * (size_t)m->seq_len * (size_t)m->d_model;
    trainer_opts ro = *o;
    ro.one_device = 1;
    ro.device = rank;
    ro.make_backend = make_rank_backend;
    ro.make_backend_ctx = &bctx;
    ro.make_transport = cu->transport_make;
    ro.make_transport_ctx = &cfg;
    ro.threads = 1; /* the host thread only issues work to the GPU */
    /* collective: every rank splits a communicator per link */
    if (trainer_create(s, m, d, &ro, &t, &err) != 0) {
        zb_wrap(&err, "%s with model %s on rank %d of %d: ", a->file, m->name, rank, rk.world);
        cli_fail(&err);
        goto out;
    }
    const char *dir = a->ckpt_dir;
    if (dir) {
        /* rank 0 prepares DIR and checks run.json; every rank then loads */
        char note[256] = "";
        int same = 0, ok = 1;
        if (rank == 0) {
            char manifest[4096];
            snprintf(manifest, sizeof manifest, "%s/%s", dir, CKPTSET_MANIFEST);
            ok = ensure_dir(dir, &err) == 0;
            if (!ok)
                cli_fail(&err);
            else if (cli_check_output_list(manifest, (const char *const[]){ a->file, a->data,
                                                                            a->model }, 3))
                ok = 0;
            else if (a->resume &&
                     (same = run_identity_check(dir, id, note, sizeof note, &err)) < 0)
                ok = cli_fail(&err) == 0;
            else if (gen_write_model_file(dir, trainer_model(t), d->chars, d->vocab, &err) != 0)
                ok = cli_fail(&err) == 0;
        }
        if (gpu_agree(cu, comm, ok, &err) != 0)
            goto out; /* rank 0 said why */
        if (a->resume) {
            ok = ckptset_load(t, dir, rank, rk.world, NULL, &err) == 0;
            if (!ok)
                cli_error("rank %d of %d: %s", rank, rk.world, err.msg);
            if (gpu_agree(cu, comm, ok, &err) != 0)
                goto out;
        }
        if (same == 1 && !quiet)
            fprintf(stderr, "zbsched run: %s\n", note);
    }
    long first = trainer_get_stats(t)->step;
    if (first >= a->stop_at) {
        if (rank == 0)
            cli_error("the checkpoint is already at step %ld; nothing to do for --steps %ld", first,
                      a->stop_at);
        goto out;
    }
    const zb_model *em = trainer_model(t);
    if (!quiet)
        fprintf(stderr, "zbsched run: %s (%d devices, %d stages, m=%d) on cuda (one GPU per rank, "
                "%d ranks, NCCL), model %s: %d layers, d=%d, vocab %d, %zu parameters, batch %d x "
                "%d tokens%s\n", s->name[0] ? s->name : a->file, s->n_devices, s->n_stages,
                s->n_micro, rk.world, em->name, em->n_layers, em->d_model, em->vocab,
                trainer_param_count(t), em->micro_batch, em->seq_len,
                a->resume ? ", resumed" : "");
    long n_steps = a->stop_at - first;
    losses = calloc((size_t)n_steps, sizeof *losses);
    if (!losses) {
        cli_error("out of memory");
        goto out;
    }
    long tokens_per_step = trainer_get_stats(t)->tokens_per_step, tokens = 0;
    int root = s->stage_device[s->n_stages - 1]; /* where the loss is known */
    double train_s = 0;
    for (long i = 0; i < n_steps; i++) {
        long step = first + i;
        double l = 0;
        if (trainer_step(t, &l, &err) != 0 || cu->comm_bcast(comm, &l, sizeof l, root, &err) != 0) {
            /* the others wait in a receive for this rank: the launcher stops them */
            cli_error("rank %d of %d: step %ld: %s", rank, rk.world, step + 1, err.msg);
            goto out;
        }
        losses[i] = l;
        double dt = trainer_get_stats(t)->last_step_s;
        train_s += dt;
        tokens += tokens_per_step;
        if (!isfinite(l)) {
            if (rank == 0)
                cli_error("step %ld: the training loss is %s (diverged; try a lower --lr)",
                          step + 1, isnan(l) ? "NaN" : "infinite");
            goto out;
        }
        if (!quiet)
            fprintf(stderr, "step %ld/%ld: loss %.4f  %.0f tok/s\n", step + 1, a->steps, l,
                    dt > 0 ? (double)tokens_per_step / dt : 0.0);
    }
    if (dir && gpu_save(cu, comm, t, s, dir, id, rank, &err) != 0) {
        cli_error("rank %d of %d: checkpoint: %s", rank, rk.world, err.msg);
        goto out;
    }
    size_t static_bytes = 0, peak_bytes = 0;
    if (trainer_memory(t, &static_bytes, &peak_bytes, &err) != 0) {
        cli_fail(&err);
        goto out;
    }
    if (rank == 0)
        print_ranks_summary(a, s, t, rk.world, first, losses, n_steps, train_s, tokens, &cfg,
                            static_bytes, peak_bytes);
    rc = 0;
out:
    free(losses);
    trainer_free(t); /* the transport's per-link communicators go with it */
    if (comm)
        cu->comm_free(comm);
    cli_mpi_nccl_end();
    return rc;
}

/* The CUDA module and the GPU a one-process `--device cuda` run trains on. */
typedef struct cuda_backend_ctx {
    const zb_cuda_api *cu; /* the loaded module's table */
    int gpu;               /* CUDA device index (--gpu, default 0) */
} cuda_backend_ctx;

/* trainer_opts.make_backend for --device cuda: every schedule device a
 * stream on ctx's GPU (kernels/cuda/backend_cuda.h, inside the module). */
static int make_cuda_backend(void *ctx, int n_devices, zb_backend **out, zb_err *err)
{
    const cuda_backend_ctx *c = ctx;
    return c->cu->backend_create(c->gpu, n_devices, out, err);
}

/* Loads the module, checks the GPU and points o at the CUDA backend, so
 * that the rest of the command runs the one executor on it.  Returns 0, or
 * 1 after printing one line (no module, no GPU, no such GPU). */
static int cuda_backend_setup(const run_args *a, trainer_opts *o, cuda_backend_ctx *c)
{
    zb_err err = { { 0 } };
    if (cuda_module_load(&c->cu, &err) != 0)
        return cli_fail(&err);
    c->gpu = a->gpu >= 0 ? (int)a->gpu : 0;
    int visible = c->cu->device_count();
    if (visible == 0)
        return cli_error("%s: no CUDA device", a->file);
    if (c->gpu >= visible)
        return cli_error("%s: CUDA device %d does not exist (%d visible)", a->file, c->gpu,
                         visible);
    o->make_backend = make_cuda_backend;
    o->make_backend_ctx = c;
    o->threads = 1; /* the host threads only issue work to the GPU */
    return 0;
}

/* Under mpirun or srun with several ranks, every rank meets the same bad
 * input: only rank 0 says so.  Mutes stderr on the other ranks and returns
 * the saved descriptor (-1 when nothing was muted). */
static int mute_follower(void)
{
    zb_rank_info rk;
    zb_err ignored = { { 0 } };
    if (zb_rank_from_env(&rk, &ignored) != 1 || rk.world < 2 || rk.rank == 0)
        return -1;
    FILE *null = fopen("/dev/null", "w");
    if (!null)
        return -1;
    fflush(stderr);
    int saved = dup(2);
    if (saved >= 0)
        dup2(fileno(null), 2);
    fclose(null);
    return saved;
}

int cmd_run(int argc, char **argv)
{
    /* Saved activations are megabytes each, allocated by every F and freed
     * by every W: serve them from the heap instead of mmap'ing (and having
     * the kernel zero) fresh pages each time; this process is a trainer. */
    mallopt(M_MMAP_THRESHOLD, 256 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    run_args a;
    int saved_stderr = mute_follower();
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0)
        return rc;
    zb_rank_info rk = { .rank = 0, .world = 1 };
    {
        zb_err rerr = { { 0 } };
        int ranked = zb_rank_from_env(&rk, &rerr);
        if (ranked < 0)
            return cli_fail(&rerr);
        if (a.cuda && saved_stderr >= 0) { /* the GPU ranks report for themselves */
            dup2(saved_stderr, 2);
            close(saved_stderr);
            saved_stderr = -1;
        }
    }
    /* CPU ranks of mpirun / srun: the islands over MPI (cli_mpi.h) */
    int mpi_ranks = !a.cuda && rk.world > 1;
    if (mpi_ranks && !cli_mpi_available()) /* before any work; rank 0 says it */
        return saved_stderr >= 0 ? 1
                                 : cli_error("this zbsched was built without MPI (meson "
                                             "-Dmpi=enabled), so every rank would train the "
                                             "same job; run it without mpirun");
    if (a.trace && cli_check_output(a.trace, a.file, a.data, a.model))
        return 1; /* before the training, not after it */
    zb_err err = { { 0 } };
    sched_t *s = NULL;
    zb_data *d = NULL;
    trainer *t = NULL;
    char *ckpt_path = NULL;
    run_result res = { 0 };
    run_setup setup = { 0 };
    zb_model m;
    rc = 1;
    if (sched_load_file(a.file, &s, &err) != 0 || sched_validate(s, &err) != 0) {
        if (s)
            zb_wrap(&err, "%s: ", a.file);
        cli_fail(&err);
        goto out;
    }
    if (sched_has_vocab(s) && (a.cuda || mpi_ranks)) { /* before any data is read or the GPU touched */
        cli_error("%s: vocabulary-parallel passes (S, T) run on the CPU in one process only, "
                  "not %s; generate the schedule with --vocab plain", a.file,
                  a.cuda ? "on the GPU" : "over MPI ranks");
        goto out;
    }
    if ((rc = run_plan_resolve(a.file, s, a.model, a.batch, &setup)) != 0)
        goto out;
    rc = 1;
    m = setup.model;
    a.batch = setup.batch;
    if (!setup.from_plan || a.cuda) {
        /* A plan's model on the CPU is checked by run_plan_fits below, whose
         * refusal also says how to try the plan's shape on a small model.
         * A plan's model is read like a preset: its dtype describes the
         * hardware it was planned for, not what this device computes in. */
        zb_model preset;
        int from_file = a.model && model_preset(a.model, &preset, NULL) != 0;
        if (run_check_model(&m, from_file, a.cuda, &err) != 0) {
            cli_fail(&err);
            goto out;
        }
    }
    if (data_load_file(a.data, m.seq_len, &d, &err) != 0) {
        cli_fail(&err);
        goto out;
    }
    m.vocab = setup.model.vocab = d->vocab;
    if (!a.cuda && run_plan_fits(a.file, s, &setup) != 0)
        goto out;
    if (!a.cuda) {
        /* Refuse before allocating what this machine cannot hold. */
        run_memory mem;
        run_estimate_memory(s, &m, d->n_tokens, a.isl.replicas, setup.layers_per_stage,
                            setup.recompute_stages, &mem);
        if (run_check_memory(&mem, run_memory_available(), &err) != 0) {
            cli_fail(&err);
            goto out;
        }
    }
    if (setup.data_parallel > 1 && a.isl.replicas != setup.data_parallel)
        fprintf(stderr, "zbsched run: warning: %s's plan has %d data-parallel replicas of the "
                "pipeline; --replicas %d --outer sync trains them all\n", a.file,
                setup.data_parallel, setup.data_parallel);
    trainer_opts o;
    trainer_opts_default(&o);
    o.seed = (uint64_t)a.seed;
    o.batch_size = (int)a.batch;
    o.adamw.lr = (float)a.lr;
    o.adamw.min_lr = (float)(a.lr / 10);
    o.adamw.warmup_steps = (int)(a.steps / 10 < 100 ? a.steps / 10 : 100);
    o.adamw.decay_steps = (int)a.steps;
    o.adamw.grad_clip = (float)a.clip;
    o.sync_optimizer = a.sync_opt;
    o.eval_windows = (int)a.eval_windows;
    o.record_times = a.trace != NULL;
    o.layers_per_stage = setup.layers_per_stage;
    o.recompute_stages = setup.recompute_stages;
    o.threads = (int)a.threads;
    run_identity id = { .rope_theta = m.rope_theta, .batch_size = m.micro_batch,
                        .micro_batches = s->n_micro, .seed = a.seed, .data_hash = run_data_hash(d),
                        .data_bytes = d->n_tokens };
    if (mpi_ranks) {
        a.isl.steps = a.steps;
        a.isl.eval_every = (int)a.eval_every;
        cli_mpi_run mr = { .file = a.file, .isl = &a.isl, .json = a.json, .quiet = a.quiet,
                           .threads_given = a.threads > 0, .saved_stderr = saved_stderr,
                           .steps = a.steps, .eval_every = a.eval_every,
                           .refused = a.sync_opt ? "--sync-optimizer"
                                    : a.trace ? "--trace" : NULL,
                           .ckpt_dir = a.ckpt_dir, .resume = a.resume, .stop_at = a.stop_at,
                           .inputs = { a.file, a.data, a.model }, .identity = &id };
        rc = cli_run_mpi(&mr, s, &m, d, &o);
        goto out;
    }
    if (a.cuda && rk.world > 1) { /* GPU ranks: the one executor, one device per rank */
        if ((rc = refuse_for_ranks("run", &a)) >= 0)
            goto out;
        rc = run_cuda(&a, s, &m, d, &o, &id);
        goto out;
    }
    cuda_backend_ctx cuda_ctx;
    if (a.cuda && cuda_backend_setup(&a, &o, &cuda_ctx) != 0)
        goto out;
    if (a.isl.replicas > 0) {
        rc = run_islands(&a, s, &m, d, &o);
        goto out;
    }
    if (trainer_create(s, &m, d, &o, &t, &err) != 0) {
        zb_wrap(&err, "%s with model %s: ", a.file, m.name);
        cli_fail(&err);
        goto out;
    }
    if (a.ckpt_dir) {
        if (ensure_dir(a.ckpt_dir, &err) != 0) {
            cli_fail(&err);
            goto out;
        }
        size_t n = strlen(a.ckpt_dir) + sizeof CHECKPOINT_NAME + 2;
        ckpt_path = malloc(n);
        if (!ckpt_path) {
            cli_error("out of memory");
            goto out;
        }
        snprintf(ckpt_path, n, "%s/%s", a.ckpt_dir, CHECKPOINT_NAME);
        if (cli_check_output(ckpt_path, a.file, a.data, a.model))
            goto out; /* before the training, not at its first checkpoint */
        /* what `zbsched generate --checkpoint DIR` needs besides the weights */
        /* A resume of another run is refused before anything in DIR
         * changes (run_resume.h). */
        char note[256];
        int same = a.resume ? run_identity_check(a.ckpt_dir, &id, note, sizeof note, &err) : 0;
        if (same < 0) {
            cli_fail(&err);
            goto out;
        }
        if (gen_write_model_file(a.ckpt_dir, trainer_model(t), d->chars, d->vocab, &err) != 0) {
            cli_fail(&err);
            goto out;
        }
        if (a.resume) {
            if (ckptset_load(t, a.ckpt_dir, -1, 1, NULL, &err) != 0) {
                cli_fail(&err);
                goto out;
            }
            if (same == 1 && !a.quiet)
                fprintf(stderr, "zbsched run: %s\n", note);
        }
    }
    if (!a.quiet) {
        const zb_model *em = trainer_model(t);
        fprintf(stderr, "zbsched run: %s (%d devices, %d stages, m=%d), model %s: %d layers, d=%d, "
                "vocab %d, %zu parameters, batch %d x %d tokens, %d thread%s per device%s\n",
                s->name[0] ? s->name : a.file, s->n_devices, s->n_stages, s->n_micro, em->name,
                em->n_layers, em->d_model, em->vocab, trainer_param_count(t), em->micro_batch,
                em->seq_len, trainer_threads(t), trainer_threads(t) == 1 ? "" : "s",
                a.resume ? ", resumed" : "");
    }
    long start = trainer_get_stats(t)->step;
    if (start >= a.stop_at) {
        cli_error("the checkpoint is already at step %ld; nothing to do for --steps %ld", start, a.stop_at);
        goto out;
    }
    res.losses = calloc((size_t)(a.stop_at - start), sizeof *res.losses);
    res.evals = cJSON_CreateArray();
    if (!res.losses || !res.evals) {
        cli_error("out of memory");
        goto out;
    }
    if (train(t, &a, ckpt_path, &id, &res) != 0)
        goto out;
    if (a.trace) {
        sched_t *tr = NULL;
        if (trainer_trace(t, &tr, &err) != 0 || sched_save_file(tr, a.trace, &err) != 0) {
            sched_free(tr);
            cli_fail(&err);
            goto out;
        }
        sched_free(tr);
    }
    print_summary(&a, s, t, &res);
    rc = 0;
out:
    free(res.losses);
    cJSON_Delete(res.evals);
    free(ckpt_path);
    trainer_free(t);
    data_free(d);
    sched_free(s);
    run_setup_free(&setup);
    return rc;
}
