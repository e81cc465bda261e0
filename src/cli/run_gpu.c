/*
 * run_gpu.c: `zbsched run --device cuda` across ranks (run_ways.h):
 * started by `zbsched launch` or mpirun (ZB_WORLD_SIZE > 1), each
 * process is rank r, running schedule device r on GPU ZB_LOCAL_RANK
 * through the one executor (trainer_opts.one_device) with the CUDA
 * module's rank backend and NCCL transport.  The job loop drives it like
 * every other way (runtime/job.h, job_trainer.h: the same rules,
 * checkpoints in parts, stop requests); the ranks agree through the
 * module's NCCL collectives (comm_bcast, comm_min_int) as a job_comm.
 * Evaluation, traces, --replicas and the synchronous clip are refused
 * here with one line (run_gpu_refused), and --json reports val_loss as
 * null.
 */
#include "src/cli/run_ways.h"

#include <math.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#include "runtime/ckpt_set.h"
#include "runtime/cuda_module.h"
#include "runtime/job_trainer.h"
#include "runtime/rank.h"
#include "src/cli/cli.h"
#include "src/cli/cli_mpi.h"
#include "src/cli/run_report.h"

/* seconds a rank waits for the others during the NCCL bootstrap */
#define NCCL_BOOTSTRAP_TIMEOUT_S 120

int run_gpu_refused(const char *prog, const run_args *a)
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

/* The NCCL communicator as the job's agreement (job_comm.h). */
typedef struct gpu_job_comm {
    const zb_cuda_api *cu;  /* the module */
    struct gpu_comm *comm;  /* the ranks' communicator */
} gpu_job_comm;

static int gpu_bcast(void *ctx, void *buf, size_t bytes, int root, zb_err *err)
{
    const gpu_job_comm *g = ctx;
    return g->cu->comm_bcast(g->comm, buf, bytes, root, err);
}

static int gpu_min_int(void *ctx, int *v, zb_err *err)
{
    const gpu_job_comm *g = ctx;
    return g->cu->comm_min_int(g->comm, v, err);
}

/* Prints the GPU ranks' summary line or JSON object (rank 0 only). */
static void print_summary(const run_args *a, const sched_t *s, const trainer *t, int world,
                          const job_result *r, const zb_nccl_cfg *cfg, size_t static_bytes,
                          size_t peak_bytes)
{
    double tps = run_tokens_per_s(r);
    double last = r->n_losses ? r->losses[r->n_losses - 1] : NAN;
    if (!a->json) {
        printf("%s: %s, %d devices on %d GPU ranks, %d stages, m=%d; %ld steps, final loss %.4f, "
               "%.0f tokens/s, rank 0 sent %llu bytes, GPU memory of rank 0 %.1f MB static + "
               "%.1f MB peak activations, %ld rollbacks on rank 0 (" RUN_ROLLBACKS_WORDS ")\n",
               a->file, s->name[0] ? s->name : "schedule", s->n_devices, world, s->n_stages,
               s->n_micro, r->first_step + r->n_losses, last, tps,
               (unsigned long long)cfg->bytes_sent, (double)static_bytes / 1e6,
               (double)peak_bytes / 1e6, trainer_get_stats(t)->rollbacks);
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
    run_json_losses(o, r); /* val_loss null: no evaluation across GPU ranks */
    cJSON_AddNumberToObject(o, "train_seconds", r->train_s);
    /* rank 0's own figures: its GPU, its sends */
    cJSON_AddNumberToObject(o, "bytes_sent_rank0", (double)cfg->bytes_sent);
    cJSON_AddNumberToObject(o, "messages_rank0", (double)cfg->messages);
    cJSON_AddNumberToObject(o, "gpu_static_bytes", (double)static_bytes);
    cJSON_AddNumberToObject(o, "gpu_peak_activation_bytes", (double)peak_bytes);
    run_json_print(o);
}

/* The checks that need no GPU and no peer, so that a bad run fails
 * before the bootstrap, where a rank would otherwise wait for peers that
 * already gave up.  0, or the exit status after one line. */
static int check_before_bootstrap(const run_args *a, const sched_t *s, const zb_cuda_api *cu,
                                  const zb_rank_info *rk)
{
    if (a->gpu >= 0)
        return cli_usage("run", "--gpu is set by the launcher (ZB_LOCAL_RANK) in a run of %d ranks",
                         rk->world);
    if (s->n_devices != rk->world)
        return cli_error("%s: the schedule has %d devices but the run has %d ranks (one GPU per "
                         "device: use `zbsched launch --gpus %d`)", a->file, s->n_devices,
                         rk->world, s->n_devices);
    int visible = cu->device_count();
    if (visible == 0)
        return cli_error("%s: no CUDA device (this rank's GPU is missing)", a->file);
    if (rk->local_rank >= visible)
        return cli_error("%s: CUDA device %d does not exist (%d visible); ZB_LOCAL_RANK is the GPU "
                         "index", a->file, rk->local_rank, visible);
    if (!cu->comm_create || !cu->backend_create_rank || !cu->transport_make || !cu->comm_bcast ||
        !cu->comm_min_int)
        return cli_error("%s: this CUDA module has no GPU ranks (no NCCL transport in its table)",
                         a->file);
    return 0;
}

int run_gpu_ranks(const run_args *a, const sched_t *s, zb_model *m, const zb_data *d,
                  const trainer_opts *o, const run_identity *id)
{
    zb_err err = { { 0 } };
    const zb_cuda_api *cu;
    if (cuda_module_load(&cu, &err) != 0)
        return cli_fail(&err);
    zb_rank_info rk;
    if (zb_rank_from_env(&rk, &err) != 1)
        return cli_error("internal error: GPU ranks without rank variables");
    int rc = check_before_bootstrap(a, s, cu, &rk);
    if (rc != 0)
        return rc;
    int rank = rk.rank, lock = -1;
    struct gpu_comm *comm = NULL;
    trainer *t = NULL;
    job_trainer jt = { 0 };
    job_result r = { 0 };
    cJSON *model_rec = NULL, *run_rec = NULL;
    rc = 1;
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
    gpu_job_comm gctx = { cu, comm };
    job_comm gc = { &gctx, rank, rk.world, gpu_bcast, gpu_min_int };
    model_rec = ckptset_model_record(trainer_model(t), d->chars, d->vocab);
    run_rec = run_record_to_json(id);
    ckptset_records rec = { model_rec, run_rec };
    int bad = !model_rec || !run_rec || job_trainer_init(&jt, t, s, &gc, &rec, 0, &err) != 0;
    if (bad)
        zb_fail(&err, "out of memory");
    if (job_comm_agree(&gc, bad, &err) != 0) {
        cli_error("rank %d of %d: %s", rank, rk.world, err.msg);
        goto out;
    }
    if (run_ckpt_begin(a, &gc, &lock) != 0 || run_ckpt_resume(a, &jt, id, d) != 0)
        goto out;
    const zb_model *em = trainer_model(t);
    if (!a->quiet && rank == 0)
        fprintf(stderr, "zbsched run: %s (%d devices, %d stages, m=%d) on cuda (one GPU per rank, "
                "%d ranks, NCCL), model %s: %d layers, d=%d, vocab %d, %zu parameters, batch %d x "
                "%d tokens%s\n", s->name[0] ? s->name : a->file, s->n_devices, s->n_stages,
                s->n_micro, rk.world, em->name, em->n_layers, em->d_model, em->vocab,
                trainer_param_count(t), em->micro_batch, em->seq_len,
                a->resume ? ", resumed" : "");
    job_way w;
    job_trainer_way(&jt, &w);
    job_opts jo;
    run_job_opts(a, "try a lower --lr", &jo);
    job_status st = job_run(&w, &jo, &r, &err);
    if (st == JOB_FAILED_HERE) {
        /* the others wait in a collective for this rank: the launcher stops them */
        cli_error("rank %d of %d: %s", rank, rk.world, err.msg);
        goto out;
    }
    if (st != JOB_DONE) {
        rc = run_job_exit(a, st, &r, &err, rank == 0, NULL);
        goto out;
    }
    size_t static_bytes = 0, peak_bytes = 0;
    if (trainer_memory(t, &static_bytes, &peak_bytes, &err) != 0) {
        cli_fail(&err);
        goto out;
    }
    if (rank == 0)
        print_summary(a, s, t, rk.world, &r, &cfg, static_bytes, peak_bytes);
    rc = 0;
out:
    job_result_free(&r);
    job_trainer_free(&jt);
    cJSON_Delete(model_rec);
    cJSON_Delete(run_rec);
    trainer_free(t); /* the transport's per-link communicators go with it */
    if (comm)
        cu->comm_free(comm);
    cli_mpi_nccl_end();
    ckptset_unlock(lock);
    return rc;
}
