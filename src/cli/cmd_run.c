/*
 * cmd_run.c: `zbsched run FILE --steps N [...]`, train a Llama-style model
 * by executing a schedule file for real.
 *
 * The command parses its flags (run_args.h), loads and checks what every
 * way of running needs, the same way on every rank (the schedule, the
 * model of the flags or of the file's plan, run_plan.h; the character
 * text of the model's context; the memory this machine must hold), fills
 * the trainer's options, and hands over to the driver of the way it runs
 * (run_ways.h): one process on the CPU or one GPU, islands, MPI ranks,
 * GPU ranks.  Every driver runs the one job loop (runtime/job.h), so the
 * rules of a run (divergence, checkpoints, evaluation, stop requests on
 * SIGTERM and SIGINT) are the same whichever way it runs.
 *
 * Learning-rate schedule: nanoGPT's (linear warmup then cosine to lr/10),
 * with warmup min(100, steps/10) and the cosine ending at --steps, so that
 * a short run still decays.
 *
 * `--device cuda` runs the same schedule on GPUs (docs/gpu.md): in one
 * process the same executor with the CUDA backend (every schedule device
 * a stream on one GPU, `--gpu N` picks the GPU); started by `zbsched
 * launch` or mpirun (ZB_WORLD_SIZE > 1), one GPU per rank (run_gpu.c).
 * The GPU code is the module zbsched_cuda.so (runtime/cuda_module.h),
 * loaded only for --device cuda; without it, or without a GPU, the
 * command fails with one line.
 */
#include "src/cli/cli.h"
#include "src/cli/cli_mpi.h"
#include "src/cli/run_args.h"
#include "src/cli/run_checks.h"
#include "src/cli/run_plan.h"
#include "src/cli/run_report.h"
#include "src/cli/run_ways.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "runtime/rank.h"
#include "src/plan.h"
#include "src/runs_on.h"
#include "src/sched_io.h"
#include "src/validate.h"

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

/* The trainer's options from the flags and the resolved setup. */
static void fill_opts(const run_args *a, const run_setup *setup, trainer_opts *o)
{
    trainer_opts_default(o);
    o->seed = (uint64_t)a->seed;
    o->batch_size = (int)a->batch;
    o->adamw.lr = (float)a->lr;
    o->adamw.min_lr = (float)(a->lr / 10);
    o->adamw.warmup_steps = (int)(a->steps / 10 < 100 ? a->steps / 10 : 100);
    o->adamw.decay_steps = (int)a->steps;
    o->adamw.grad_clip = (float)a->clip;
    o->sync_optimizer = a->sync_opt;
    o->eval_windows = (int)a->eval_windows;
    o->record_times = a->trace != NULL;
    o->layers_per_stage = setup->layers_per_stage;
    o->recompute_stages = setup->recompute_stages;
    o->threads = (int)a->threads;
}

/* The model, data and memory checks every way shares.  0, or the exit
 * status after one line. */
static int load_inputs(run_args *a, const sched_t *s, run_setup *setup,
                       zb_data **d)
{
    zb_err err = { { 0 } };
    int rc = run_plan_resolve(a->file, s, a->model, a->batch, setup);
    if (rc != 0)
        return rc;
    a->batch = setup->batch;
    if (!setup->from_plan || a->cuda) {
        /* A plan's model on the CPU is checked by run_plan_fits below, whose
         * refusal also says how to try the plan's shape on a small model.
         * A plan's model is read like a preset: its dtype describes the
         * hardware it was planned for, not what this device computes in. */
        zb_model preset;
        int from_file = a->model && model_preset(a->model, &preset, NULL) != 0;
        if (run_check_model(&setup->model, from_file, a->cuda, &err) != 0)
            return cli_fail(&err);
    }
    if (data_load_file(a->data, setup->model.seq_len, d, &err) != 0)
        return cli_fail(&err);
    setup->model.vocab = (*d)->vocab;
    if (!a->cuda && run_plan_fits(a->file, s, setup) != 0)
        return 1;
    if (!a->cuda) {
        /* Refuse before allocating what this machine cannot hold. */
        run_memory mem;
        run_estimate_memory(s, &setup->model, (*d)->n_tokens, a->isl.replicas,
                            setup->layers_per_stage, setup->recompute_stages, &mem);
        if (run_check_memory(&mem, run_memory_available(), &err) != 0)
            return cli_fail(&err);
        /* this process's kernel threads: its share of the devices (ranks
         * split them), each with its team */
        zb_rank_info rk = { .rank = 0, .world = 1 };
        zb_err ignored;
        int devices = s->n_devices * (a->isl.replicas > 1 ? (int)a->isl.replicas : 1);
        if (zb_rank_from_env(&rk, &ignored) == 1 && rk.world > 1)
            devices = devices > rk.world ? (devices + rk.world - 1) / rk.world : 1;
        int per = a->threads > 0 ? (int)a->threads : trainer_default_threads(devices);
        if (run_check_address_space(&mem, devices * per, &err) != 0)
            return cli_fail(&err);
    }
    /* the plan was priced with ZeRO-1 over its replicas: run it so */
    if (setup->zero1_dp > 1 && a->isl.replicas > 1 && a->isl.outer.kind == OUTER_SYNC)
        a->isl.zero1 = 1;
    if (setup->data_parallel > 1 && a->isl.replicas != setup->data_parallel)
        fprintf(stderr, "zbsched run: warning: %s's plan has %d data-parallel replicas of the "
                "pipeline; --replicas %d --outer sync trains them all\n", a->file,
                setup->data_parallel, setup->data_parallel);
    return 0;
}

/* 1 after one line on stderr when the path this run takes (cuda, mpi or
 * cpu) cannot run what the plan file uses (src/runs_on.h's table); 0
 * otherwise.  A malformed plan is left to run_plan's reading. */
static int refuse_path(const run_args *a, const sched_t *s, int mpi_ranks)
{
    zb_plan plan;
    zb_err ignored;
    int has = plan_read(s, &plan, &ignored);
    unsigned uses = runs_on_uses_of_file(s, has > 0 ? &plan : NULL);
    if (has > 0)
        plan_free(&plan);
    zb_path path = a->cuda ? ZB_PATH_CUDA : mpi_ranks ? ZB_PATH_MPI : ZB_PATH_CPU;
    char why[160];
    if (runs_on_can(uses, path, why, sizeof why))
        return 0;
    cli_error("%s: %s (a search plan's \"runs_on\" lists the paths that run it, and search "
              "names the best plan each path runs)", a->file, why);
    return 1;
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
    int rc = run_parse_args(argc, argv, &a);
    if (rc >= 0)
        return rc;
    zb_rank_info rk = { .rank = 0, .world = 1 };
    {
        zb_err rerr = { { 0 } };
        if (zb_rank_from_env(&rk, &rerr) < 0)
            return cli_fail(&rerr);
        if (a.cuda && saved_stderr >= 0) { /* the GPU ranks report for themselves */
            dup2(saved_stderr, 2);
            close(saved_stderr);
            saved_stderr = -1;
        }
    }
    /* CPU ranks of mpirun / srun: pipeline ranks or islands over MPI (cli_mpi.h) */
    int mpi_ranks = !a.cuda && rk.world > 1;
    zb_err mpi_err = { { 0 } };
    if (mpi_ranks && cli_mpi_load(&mpi_err) != 0) /* before any work; rank 0 says it */
        return saved_stderr >= 0 ? 1 : cli_fail(&mpi_err);
    if (mpi_ranks && a.isl.replicas > 0 && (a.ckpt_dir || a.stop_at != a.steps))
        return saved_stderr >= 0 ? 2
                                 : cli_usage(argv[0], "--checkpoint and --stop-at with --replicas "
                                             "run in one process; under mpirun the islands do "
                                             "not checkpoint yet");
    if (a.trace && cli_check_output(a.trace, a.file, a.data, a.model))
        return 1; /* before the training, not after it */
    if (a.log && cli_check_output(a.log, a.file, a.data, a.model))
        return 1;
    zb_err err = { { 0 } };
    sched_t *s = NULL;
    zb_data *d = NULL;
    run_setup setup = { 0 };
    rc = 1;
    if (sched_load_file(a.file, &s, &err) != 0 || sched_validate(s, &err) != 0) {
        if (s)
            zb_wrap(&err, "%s: ", a.file);
        cli_fail(&err);
        goto out;
    }
    if (refuse_path(&a, s, mpi_ranks)) /* before any data is read or the GPU touched */
        goto out;
    if ((rc = load_inputs(&a, s, &setup, &d)) != 0)
        goto out;
    if (a.cuda && rk.world > 1 && (rc = run_gpu_refused("run", &a)) >= 0)
        goto out; /* before any rank bootstraps */
    if ((rc = run_log_open(&a, rk.rank == 0)) != 0)
        goto out; /* after the inputs were checked: a refused run leaves the old log */
    rc = 1;
    zb_model m = setup.model;
    trainer_opts o;
    fill_opts(&a, &setup, &o);
    run_identity id = { .rope_theta = m.rope_theta, .batch_size = m.micro_batch,
                        .micro_batches = s->n_micro, .seed = a.seed, .data_hash = run_data_hash(d),
                        .data_bytes = d->n_tokens };
    if (mpi_ranks) {
        cli_mpi_run mr = { .a = &a, .identity = &id, .saved_stderr = saved_stderr };
        rc = cli_run_mpi(&mr, s, &m, d, &o); /* catches the stop signals after MPI_Init */
    } else if (a.cuda && rk.world > 1) {
        /* no notice across ranks: a launcher ending the job after one
         * rank's failure sends SIGTERM too, and the failure's line must
         * stay the only one */
        run_catch_stop_signals(1);
        rc = run_gpu_ranks(&a, s, &m, d, &o, &id);
    } else if (a.cuda && run_cuda_backend(&a, &o) != 0) {
        rc = 1;
    } else {
        run_catch_stop_signals(a.quiet);
        rc = a.isl.replicas > 0 ? run_islands(&a, s, &m, d, &o, &id) : run_local(&a, s, &m, d, &o, &id);
    }
out:
    rc = run_log_close(&a, rc);
    data_free(d);
    sched_free(s);
    run_setup_free(&setup);
    return rc;
}
