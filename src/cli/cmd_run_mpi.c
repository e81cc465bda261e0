/*
 * cmd_run_mpi.c: `zbsched run` under mpirun or srun (docs/mpi.md):
 *   - `mpirun -np P zbsched run FILE`: pipeline ranks, one schedule device
 *     per rank (runtime/mpi/mpi_pipeline.h), driven by the job loop
 *     (runtime/job.h, job_trainer.h) with the ranks agreeing over MPI
 *     (runtime/mpi/mpi_job.h): the one-process rules, checkpoints in
 *     parts (runtime/ckpt_set.h), stop requests;
 *   - `mpirun -np K[*P] zbsched run FILE --replicas K`: the islands, a
 *     replica per rank or per P ranks (runtime/mpi/mpi_islands.h), the
 *     same job loop;
 *   - `--device cuda`: only the NCCL bootstrap, the unique id over
 *     MPI_Bcast (cli_mpi_nccl_comm).
 *
 * Start-up: MPI_Init_thread (SERIALIZED: a pipeline rank's worker thread
 * sends and receives while the main thread waits; never two at once),
 * errors returned rather than fatal, SIGTERM and SIGINT caught as stop
 * requests (src/cli/run_report.h; for the islands a request of some
 * replicas only is a leave), and kernel threads per device shared out
 * among the ranks on the node (MPI_Comm_split_type), so that ranks do not
 * each take every core.
 *
 * Output: only the speaker (rank 0, or of the final membership) prints the
 * header, progress and the summary.  Errors:
 *   - one every rank meets alike (options, divergence, run records, a
 *     checkpoint part a rank could not write or read, agreed on with its
 *     message) is printed once, by rank 0, and every rank exits 1 after
 *     MPI_Finalize;
 *   - one of this rank's own (memory, a trainer or transport failure) is
 *     printed as "rank R of N: ...", then MPI_Abort ends every rank of the
 *     job, which cannot otherwise leave a receive or collective that waits
 *     for this rank.
 * A rank whose replica leaves exits 0 silently after its last outer step.
 *
 * Built into zbsched_mpi.so, which the program loads only as an MPI rank
 * (mpi_module.h): the program itself links no MPI library.
 */
#include "src/cli/cli.h"
#include "src/cli/cli_mpi.h"
#include "src/cli/mpi_module.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <mpi.h>

#include "runtime/ckpt_set.h"
#include "runtime/job_trainer.h"
#include "runtime/mpi/mpi_islands.h"
#include "runtime/mpi/mpi_job.h"
#include "runtime/mpi/mpi_pipeline.h"
#include "src/cli/run_report.h"

/* Kernel threads per device: the node's cores shared among its ranks. */
static int threads_per_device(int devices)
{
    MPI_Comm node;
    int local = 1;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) ==
        MPI_SUCCESS) {
        MPI_Comm_size(node, &local);
        MPI_Comm_free(&node);
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    long t = cores / ((long)local * devices);
    return t < 1 ? 1 : (int)t;
}

/* A failure of this rank alone: one line naming it, then the whole job
 * ends (the other ranks may be waiting for this one in MPI). */
static int fail_rank(const run_args *a, int rank, int world, const zb_err *err)
{
    cli_error("rank %d of %d: %s: %s", rank, world, a->file, err->msg);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
}

static void print_pipeline(const run_args *a, const sched_t *s, trainer *t, int world,
                           const job_result *r, uint64_t bytes, uint64_t msgs, long rollbacks)
{
    double tps = run_tokens_per_s(r);
    double per_step = r->n_losses ? (double)bytes / (double)r->n_losses : 0;
    const zb_model *em = trainer_model(t);
    if (!a->json) {
        printf("%s: %s, %d devices on %d MPI ranks, %d stages, m=%d; %ld steps, final loss %.4f, "
               "val loss %.4f, %.0f tokens/s, %llu bytes sent (%.0f per step), %ld rollbacks (" RUN_ROLLBACKS_WORDS ")\n",
               a->file, s->name[0] ? s->name : "schedule", s->n_devices, world, s->n_stages,
               s->n_micro, r->first_step + r->n_losses, r->losses[r->n_losses - 1], r->val_loss,
               tps, (unsigned long long)bytes, per_step, rollbacks);
        return;
    }
    cJSON *j = cJSON_CreateObject();
    run_json_head(j, s, em->name, em->micro_batch, (double)trainer_param_count(t));
    run_json_losses(j, r);
    cJSON_AddNumberToObject(j, "threads", trainer_threads(t));
    cJSON_AddNumberToObject(j, "train_seconds", r->train_s);
    cJSON_AddNumberToObject(j, "rollbacks", (double)rollbacks);
    cJSON_AddStringToObject(j, "transport", "mpi");
    cJSON_AddNumberToObject(j, "ranks", world);
    cJSON_AddNumberToObject(j, "bytes_sent", (double)bytes);
    cJSON_AddNumberToObject(j, "bytes_per_step", per_step);
    cJSON_AddNumberToObject(j, "messages", (double)msgs);
    run_json_print(j);
}

/* Pipeline ranks: rank d runs schedule device d (mpi_pipeline.h). */
static int run_pipeline(const cli_mpi_run *mr, const sched_t *s, const zb_model *m,
                        const zb_data *d, trainer_opts *o, int rank, int world)
{
    const run_args *a = mr->a;
    zb_err err = { { 0 } };
    const char *refused = a->sync_opt ? "--sync-optimizer" : a->trace ? "--trace" : NULL;
    if (refused || world != s->n_devices) {
        if (rank == 0) {
            if (refused)
                cli_error("%s is not supported with pipeline ranks under mpirun", refused);
            else
                cli_error("%s: the schedule has %d devices but the run has %d MPI ranks (pipeline "
                          "ranks: mpirun -np %d; islands: --replicas %d)", a->file, s->n_devices,
                          world, s->n_devices, world);
        }
        MPI_Finalize();
        return refused ? 2 : 1;
    }
    MPI_Comm world_comm = MPI_COMM_WORLD;
    job_comm jc;
    mpi_job_comm(&world_comm, &jc);
    int lock = -1;
    if (run_ckpt_begin(a, &jc, &lock) != 0) {
        MPI_Finalize();
        return 1;
    }
    mpi_pipeline *p = NULL;
    if (mpi_pipeline_create(s, m, d, o, MPI_COMM_WORLD, &p, &err) != 0)
        return fail_rank(a, rank, world, &err);
    trainer *t = mpi_pipeline_trainer(p);
    const zb_model *em = trainer_model(t);
    cJSON *model_rec = ckptset_model_record(em, d->chars, d->vocab);
    cJSON *run_rec = run_record_to_json(mr->identity);
    ckptset_records rec = { model_rec, run_rec };
    job_trainer jt;
    if (!model_rec || !run_rec || job_trainer_init(&jt, t, s, &jc, &rec, 1, &err) != 0) {
        zb_fail(&err, "out of memory");
        return fail_rank(a, rank, world, &err);
    }
    int status = 1;
    job_result r = { 0 };
    if (run_ckpt_resume(a, &jt, mr->identity, d) != 0)
        goto out;
    if (rank == 0 && !a->quiet)
        fprintf(stderr, "zbsched run: %s (%d devices, %d stages, m=%d) on %d MPI ranks, model %s: "
                "%d layers, d=%d, vocab %d, %zu parameters, batch %d x %d tokens, %d thread%s "
                "per rank%s\n", s->name[0] ? s->name : a->file, s->n_devices, s->n_stages,
                s->n_micro, world, em->name, em->n_layers, em->d_model, em->vocab,
                trainer_param_count(t), em->micro_batch, em->seq_len, trainer_threads(t),
                trainer_threads(t) == 1 ? "" : "s", a->resume ? ", resumed" : "");
    job_way w;
    job_trainer_way(&jt, &w);
    job_opts jo;
    run_job_opts(a, "try a lower --lr", &jo);
    job_status st = job_run(&w, &jo, &r, &err);
    if (st == JOB_FAILED_HERE)
        return fail_rank(a, rank, world, &err);
    if (st != JOB_DONE) {
        status = run_job_exit(a, st, &r, &err, rank == 0, NULL);
        goto out;
    }
    uint64_t bytes = 0, msgs = 0;
    long unused = 0, rollbacks = 0;
    if (mpi_pipeline_totals(p, &bytes, &msgs, &unused, &err) != 0 ||
        job_trainer_rollbacks(&jt, &rollbacks, &err) != 0)
        return fail_rank(a, rank, world, &err);
    status = 0;
    if (rank == 0)
        print_pipeline(a, s, t, world, &r, bytes, msgs, rollbacks);
out:
    job_result_free(&r);
    job_trainer_free(&jt);
    cJSON_Delete(model_rec);
    cJSON_Delete(run_rec);
    mpi_pipeline_free(p);
    ckptset_unlock(lock);
    MPI_Finalize();
    return status;
}

static void print_islands(const run_args *a, const sched_t *s, const zb_model *m, int world,
                          const job_result *r, const mpi_islands_result *res)
{
    const islands_opts *isl = &a->isl;
    int left = res->initial_replicas - res->final_replicas;
    if (!a->json) {
        printf("%s: %d replicas on %d MPI ranks (%d finished, %d left), outer %s, all-reduce %s; "
               "%ld steps, final loss %.4f, val loss %.4f, %ld outer steps, %llu bytes sent, "
               "%.1f s\n", a->file, res->initial_replicas, world, res->final_replicas, left,
               outer_kind_name(isl->outer.kind), outer_wire_name(isl->outer.wire), r->n_losses,
               r->losses[r->n_losses - 1], r->val_loss, res->outer_steps,
               (unsigned long long)res->bytes_sent, res->wall_s);
        return;
    }
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "schedule", s->name);
    cJSON_AddStringToObject(j, "model", m->name);
    cJSON_AddNumberToObject(j, "replicas", res->initial_replicas);
    cJSON_AddStringToObject(j, "outer", outer_kind_name(isl->outer.kind));
    cJSON_AddStringToObject(j, "allreduce", outer_wire_name(isl->outer.wire));
    cJSON_AddNumberToObject(j, "inner_steps", isl->outer.inner_steps);
    cJSON_AddNumberToObject(j, "steps", (double)r->n_losses);
    cJSON *l = cJSON_AddArrayToObject(j, "losses");
    for (long i = 0; i < r->n_losses; i++)
        cJSON_AddItemToArray(l, cJSON_CreateNumber(r->losses[i]));
    cJSON *ev = cJSON_AddArrayToObject(j, "evals");
    for (int i = 0; i < r->n_evals; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "step", (double)r->eval_step[i]);
        cJSON_AddNumberToObject(e, "val_loss", r->eval_loss[i]);
        cJSON_AddItemToArray(ev, e);
    }
    cJSON_AddNumberToObject(j, "val_loss", r->val_loss);
    cJSON_AddNumberToObject(j, "bytes_sent", (double)res->bytes_sent);
    cJSON_AddNumberToObject(j, "outer_steps", (double)res->outer_steps);
    if (isl->outer.kind == OUTER_EDIT || isl->outer.kind == OUTER_AEDIT) {
        cJSON_AddNumberToObject(j, "eliminated", (double)res->eliminated);
        cJSON_AddNumberToObject(j, "skipped_segments", (double)res->skipped);
    }
    cJSON_AddNumberToObject(j, "final_replicas", res->final_replicas);
    cJSON_AddBoolToObject(j, "zero1", isl->zero1);
    cJSON_AddNumberToObject(j, "optimizer_bytes_per_replica", (double)res->optimizer_bytes);
    cJSON_AddNumberToObject(j, "tokens", (double)r->tokens);
    cJSON_AddNumberToObject(j, "train_seconds", res->wall_s);
    cJSON_AddStringToObject(j, "transport", "mpi");
    cJSON_AddNumberToObject(j, "ranks", world);
    cJSON *lv = cJSON_AddArrayToObject(j, "left");
    for (int i = 0; i < res->initial_replicas; i++)
        if (res->left_at[i] >= 0) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "replica", i);
            cJSON_AddNumberToObject(e, "after_step", (double)res->left_at[i]);
            cJSON_AddItemToArray(lv, e);
        }
    run_json_print(j);
}

/* Islands: a replica per rank or per P ranks (mpi_islands.h). */
static int run_islands_mpi(const cli_mpi_run *mr, const sched_t *s, const zb_model *m,
                           const zb_data *d, trainer_opts *o, int rank, int world)
{
    run_args *a = mr->a;
    islands_opts *isl = &a->isl;
    isl->steps = a->steps;
    isl->eval_every = (int)a->eval_every;
    zb_err err = { { 0 } };
    if (o->sync_optimizer && world > isl->replicas) {
        if (rank == 0)
            cli_error("%s: --sync-optimizer is not supported with pipeline ranks (post-validation "
                      "passes the norms between ranks)", a->file);
        MPI_Finalize();
        return 1;
    }
    mpi_islands *x = NULL;
    int rc = mpi_islands_create(s, m, d, o, isl, MPI_COMM_WORLD, &run_stop_signal, &x, &err);
    if (rc == -2) {
        if (rank == 0)
            cli_error("%s: %s", a->file, err.msg);
        MPI_Finalize();
        return 1;
    }
    if (rc != 0)
        return fail_rank(a, rank, world, &err);
    if (rank == 0 && !a->quiet)
        fprintf(stderr, "zbsched run: %d replicas of %s on %d MPI ranks, outer %s, all-reduce %s, "
                "H=%d, %ld steps\n", isl->replicas, s->name[0] ? s->name : a->file, world,
                outer_kind_name(isl->outer.kind), outer_wire_name(isl->outer.wire),
                isl->outer.inner_steps, isl->steps);
    job_way w;
    mpi_islands_way(x, &w);
    job_opts jo;
    run_job_opts(a, "try a lower --lr or --outer-lr", &jo);
    job_result r;
    job_status st = job_run(&w, &jo, &r, &err);
    if (st == JOB_FAILED_HERE)
        return fail_rank(a, rank, world, &err);
    int status = run_job_exit(a, st, &r, &err, w.speaker(x), a->file);
    mpi_islands_result res = { 0 };
    if (st == JOB_DONE) {
        if (mpi_islands_totals(x, &res, &err) != 0)
            return fail_rank(a, rank, world, &err);
        if (res.speaker) {
            print_islands(a, s, m, world, &r, &res);
            if (ferror(stdout))
                status = 1;
        }
    }
    mpi_islands_result_free(&res);
    job_result_free(&r);
    mpi_islands_free(x);
    MPI_Finalize();
    return status;
}

/* cli_run_mpi (cli_mpi.h). */
static int mpi_run(const cli_mpi_run *r, const sched_t *s, const zb_model *m, const zb_data *d,
                   trainer_opts *o)
{
    int provided;
    /* SERIALIZED: the pipeline's worker thread sends and receives while the
     * main thread waits; never two threads in MPI at once. */
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
        return cli_error("MPI_Init failed");
    if (provided < MPI_THREAD_SERIALIZED) {
        int rank0;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank0);
        if (rank0 == 0)
            cli_error("this MPI library does not allow MPI calls from the worker threads "
                      "(MPI_THREAD_SERIALIZED)");
        MPI_Finalize();
        return 1;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    /* From here on every line is printed by the one rank it concerns. */
    if (r->saved_stderr >= 0)
        dup2(r->saved_stderr, 2);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    const run_args *a = r->a;
    if (!a->threads)
        o->threads = threads_per_device(a->isl.replicas > 0 && a->isl.replicas == world
                                            ? s->n_devices : 1);
    /* after MPI_Init, which may install handlers of its own; no notice:
     * mpirun ending the job after one rank's failure sends SIGTERM too,
     * and the failure's line must stay the only one */
    run_catch_stop_signals(1);
    if (a->isl.replicas == 0)
        return run_pipeline(r, s, m, d, o, rank, world);
    return run_islands_mpi(r, s, m, d, o, rank, world);
}

/* 1 when cli_mpi_nccl_comm initialised MPI. */
static int nccl_mpi_started;

/* cli_mpi_nccl_comm (cli_mpi.h); the loader (cli_mpi_module.c) calls it
 * only under an MPI launch. */
static int mpi_nccl_comm(const zb_cuda_api *cu, const zb_rank_info *rk, struct gpu_comm **comm,
                         zb_err *err)
{
    if (!cu->nccl_unique_id || !cu->comm_create_from_id)
        return zb_fail(err, "the CUDA module cannot bootstrap NCCL from an id (rebuild it)");
    int provided;
    /* SERIALIZED: a module may carry the ranks' messages over MPI from
     * the worker thread (tests/mpi's stand-in does) */
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
        return zb_fail(err, "MPI_Init failed");
    nccl_mpi_started = 1;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    run_catch_stop_signals(-1); /* after MPI_Init, which may install handlers of its own */
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (rank != rk->rank || world != rk->world)
        return zb_fail(err, "MPI says rank %d of %d, the environment rank %d of %d", rank, world,
                       rk->rank, rk->world);
    /* byte 0: rank 0 failed; bytes 1..128: the id */
    unsigned char msg[1 + 128] = { 0 };
    zb_err mine = { { 0 } };
    if (rank == 0 && cu->nccl_unique_id(msg + 1, &mine) != 0)
        msg[0] = 1;
    if (MPI_Bcast(msg, (int)sizeof msg, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
        return zb_fail(err, "MPI_Bcast of the NCCL id failed");
    if (msg[0]) {
        if (rank == 0)
            *err = mine;
        else
            zb_fail(err, "rank 0 could not make the NCCL id");
        return -1;
    }
    return cu->comm_create_from_id(rk, msg + 1, comm, err) != 0 ? -1 : 1;
}

/* cli_mpi_nccl_end (cli_mpi.h). */
static void mpi_nccl_end(void)
{
    if (nccl_mpi_started)
        MPI_Finalize();
    nccl_mpi_started = 0;
}

/* The module's one exported symbol (mpi_module.h): its table. */
__attribute__((visibility("default"))) const zb_mpi_api *zbsched_mpi_module(void)
{
    static zb_mpi_api api = { ZB_MPI_API_VERSION, 0, mpi_run, mpi_nccl_comm, mpi_nccl_end };
    api.layout = zb_mpi_api_layout(); /* not a constant expression */
    return &api;
}
