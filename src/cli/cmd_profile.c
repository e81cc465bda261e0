/*
 * cmd_profile.c: `zbsched profile --model M [--batch-size B] [--out FILE]`,
 * measure T_F, T_B, T_W, T_comm and the activation memory per op on this
 * machine with the CPU kernels and write the profile file that
 * `zbsched search --profile FILE` reads (src/profile.h).
 *
 * The measurement itself lives in runtime/profiler.h; this file parses
 * flags, prints a short table on stderr and writes the file atomically.
 * With `--device cuda [--gpu N]` the same profile is measured on a GPU by
 * kernels/cuda/gpu_profile.h (CUDA events, bf16 kernels) in the module
 * zbsched_cuda.so (runtime/cuda_module.h); without the module or a GPU the
 * command fails with one line.
 */
#include "src/cli/cli.h"
#include "src/cli/cli_flags.h"
#include "src/cli/cli_job.h"
#include "src/cli/run_checks.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kernels.h"
#include "runtime/data.h"
#include "runtime/profiler.h"
#include "src/model.h"
#include "src/profile.h"

#include "runtime/cuda_module.h"

static void usage(FILE *out)
{
    fprintf(out,
        "usage: zbsched profile [--model NAME|FILE] [--micro-batch B] [--seq-len N] [--out FILE]\n"
        "                       [--device cpu|cuda] [--gpu N]\n"
        "\n"
        "Measures F, B and W of one micro-batch per layer, through the embedding and\n"
        "the head (median of --reps runs, single-threaded BLAS as in `zbsched run`), the\n"
        "channel transfer time and the activation memory, and writes a profile file.\n"
        "On the CPU the layer is timed as a stack of up to 4 layers with 2 micro-batches\n"
        "in flight, on one thread per CPU at once, keeping the slowest thread's median.\n"
        "With --device cuda the same is measured on a GPU (CUDA events, bf16).\n"
        "\n"
        "      --model NAME|FILE  model preset or JSON file (default tiny)\n"
        "      --micro-batch B    sequences per micro-batch (default: the model's;\n"
        "                         --batch-size B is the same)\n"
        "      --seq-len N        tokens per sequence (default: the model's)\n"
        "      --data PATH        take the vocabulary size from this text, as `run` does\n"
        "      --reps N           timed repetitions per op (default 5)\n"
        "  -o, --out FILE         profile file to write ('-' or none: stdout)\n"
        "      --device cpu|cuda  where to measure (default cpu)\n"
        "      --gpu N            with --device cuda: the GPU (default 0)\n"
        "  -q, --quiet            no table on stderr\n"
        "  -h, --help             this text\n");
}

int cmd_profile(int argc, char **argv)
{
    enum { O_BATCH = 256, O_REPS, O_DATA, O_DEVICE, O_GPU };
    static const struct option opts[] = {
        CLI_JOB_MODEL_OPTIONS,
        { "batch-size", required_argument, NULL, O_BATCH },
        { "reps", required_argument, NULL, O_REPS },
        { "data", required_argument, NULL, O_DATA },
        { "out", required_argument, NULL, 'o' },
        { "device", required_argument, NULL, O_DEVICE },
        { "gpu", required_argument, NULL, O_GPU },
        { "quiet", no_argument, NULL, 'q' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    const char *out = "-", *data = NULL;
    long reps = 5, gpu = -1;
    int quiet = 0, cuda = 0, c;
    zb_err err = { { 0 } };
    cli_job job;
    cli_job_init(&job, "tiny", NULL);
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":o:qh", opts, NULL)) != -1) {
        int bad = cli_job_option(c, optarg, &job, &err);
        if (bad != 0) {
            if (bad < 0)
                return cli_usage(argv[0], "%s", err.msg);
            continue;
        }
        switch (c) {
        case O_BATCH: bad = cli_parse_int("--batch-size", optarg, 1, 65536, &job.micro_batch, &err); break;
        case O_REPS: bad = cli_parse_int("--reps", optarg, 1, 1000, &reps, &err); break;
        case O_DATA: data = optarg; break;
        case 'o': out = optarg; break;
        case O_DEVICE: bad = cli_flag_device(optarg, &cuda, &err); break;
        case O_GPU: bad = cli_flag_gpu(optarg, &gpu, &err); break;
        case 'q': quiet = 1; break;
        case 'h': usage(stdout); return 0;
        case ':': return cli_usage(argv[0], "%s needs a value (try --help)", argv[optind - 1]);
        default: return cli_usage(argv[0], "unknown option '%s' (try --help)", argv[optind - 1]);
        }
        if (bad)
            return cli_usage(argv[0], "%s", err.msg);
    }
    if (optind < argc)
        return cli_usage(argv[0], "unexpected argument '%s'", argv[optind]);
    if (gpu >= 0 && !cuda)
        return cli_usage(argv[0], "--gpu N needs --device cuda");
    if (cli_check_output(out, job.model_arg, data))
        return 1;
    const zb_cuda_api *cu = NULL;
    if (cuda && cuda_module_load_with_gpu(&cu, &err) != 0)
        return cli_fail(&err);
    zb_model preset;
    if (cli_job_finish(&job, &err) != 0 ||
        run_check_model(&job.model, model_preset(job.model_arg, &preset, NULL) != 0, cuda, &err) != 0)
        return cli_fail(&err);
    zb_model m = job.model;
    long batch = job.micro_batch;
    if (data) {
        zb_data *d = NULL;
        if (data_load_file(data, m.seq_len, &d, &err) != 0)
            return cli_fail(&err);
        m.vocab = d->vocab;
        data_free(d);
    }
    if (!cuda) {
        /* Refuse before allocating what this machine cannot hold. */
        run_memory mem;
        run_estimate_profile(&m, &mem);
        if (run_check_memory(&mem, run_memory_available(), &err) != 0 ||
            run_check_address_space(&mem, profiler_cpu_threads(), &err) != 0)
            return cli_fail(&err);
    }
    zb_profile p;
    int rc;
    if (cuda) {
        rc = cu->profile_measure(&m, (int)batch, (int)reps, gpu >= 0 ? (int)gpu : 0, &p, &err);
        if (rc != 0)
            zb_wrap(&err, "%s on GPU %ld: ", m.name, gpu >= 0 ? gpu : 0);
    } else
        rc = profiler_measure(&m, (int)batch, (int)reps, &p, &err);
    if (rc != 0)
        return cli_fail(&err);
    if (!quiet) {
        fprintf(stderr, "profile of %s on %s, micro-batch %d x %d tokens (ms; MB left after F / after B)\n",
                m.name, p.hardware, p.micro_batch, p.seq_len);
        const char *names[3] = { "layer", "embedding", "head" };
        const profile_part *parts[3] = { &p.layer, &p.embedding, &p.head };
        for (int i = 0; i < 3; i++)
            fprintf(stderr, "  %-9s  F %8.3f  B %8.3f  W %8.3f   M_B %8.3f  M_W %8.3f\n", names[i],
                    parts[i]->t_f * 1e3, parts[i]->t_b * 1e3, parts[i]->t_w * 1e3,
                    parts[i]->m_b / 1e6, parts[i]->m_w / 1e6);
        fprintf(stderr, "  transfer   %.4f ms\n", p.t_comm * 1e3);
        if (!cuda && kernels_blas_describe())
            fprintf(stderr, "  BLAS       %s\n", kernels_blas_describe());
    }
    if (profile_save(&p, out, &err) != 0)
        return cli_fail(&err);
    return 0;
}
