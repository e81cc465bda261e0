/*
 * cmd_run_mpi.c: `zbsched run` under mpirun or srun (docs/mpi.md):
 *   - `mpirun -np P zbsched run FILE`: pipeline ranks, one schedule device
 *     per rank (runtime/mpi/mpi_pipeline.h), with checkpoints in parts,
 *     one per rank (runtime/ckpt_set.h), and run.json's resume checks;
 *   - `mpirun -np K[*P] zbsched run FILE --replicas K`: the islands, a
 *     replica per rank or per P ranks (runtime/mpi/mpi_islands.h);
 *   - `--device cuda`: only the NCCL bootstrap, the unique id over
 *     MPI_Bcast (cli_mpi_nccl_comm).
 *
 * Start-up: MPI_Init_thread (SERIALIZED: a pipeline rank's worker thread
 * sends and receives while the main thread waits; never two at once),
 * errors returned rather than fatal, for the islands a SIGTERM handler
 * that only sets the leave flag, and kernel threads per device shared out
 * among the ranks on the node (MPI_Comm_split_type), so that ranks do not
 * each take every core.
 *
 * Output: only the speaker (rank 0, or of the final membership) prints the
 * header, progress and the summary.  Errors:
 *   - one every rank meets alike (options, a non-finite pseudo-gradient
 *     agreed on in the outer step, run.json's verdict, a checkpoint part
 *     a rank could not write or read, agreed on with its message) is
 *     printed once, by rank 0, and every rank exits 1 after MPI_Finalize;
 *   - one of this rank's own (memory, a trainer or transport failure) is
 *     printed as "rank R of N: ...", then MPI_Abort ends every rank of the
 *     job, which cannot otherwise leave a receive or collective that waits
 *     for this rank.
 * A rank whose replica leaves on SIGTERM exits 0 silently after its last
 * outer step.
 */
#include "src/cli/cli.h"
#include "src/cli/cli_mpi.h"

#include <errno.h>
#include <math.h>
#include <sys/stat.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <mpi.h>

#include "runtime/generate.h"
#include "runtime/mpi/mpi_islands.h"
#include "runtime/mpi/mpi_pipeline.h"

/* Set by SIGTERM: this replica leaves at the next outer-step boundary. */
static volatile sig_atomic_t leave_requested;

static void on_sigterm(int sig)
{
    (void)sig;
    leave_requested = 1;
}

typedef struct progress_ctx {
    long steps;    /* total steps, for "step i/N" */
    int quiet;     /* --quiet: no progress lines */
} progress_ctx;

static void print_progress(void *vctx, long step, double loss, int replicas, int after)
{
    const progress_ctx *c = vctx;
    if (c->quiet)
        return;
    fprintf(stderr, "step %ld/%ld: loss %.4f (%d replica%s)\n", step + 1, c->steps, loss,
            replicas, replicas == 1 ? "" : "s");
    if (after < replicas)
        fprintf(stderr, "step %ld: %d replica%s left (SIGTERM); %d continue%s\n", step + 1,
                replicas - after, replicas - after == 1 ? "" : "s", after, after == 1 ? "s" : "");
}

static void print_summary(const cli_mpi_run *r, const sched_t *s, const zb_model *m, int world,
                          const mpi_islands_result *res)
{
    const islands_opts *isl = r->isl;
    int left = res->initial_replicas - res->final_replicas;
    if (!r->json) {
        printf("%s: %d replicas on %d MPI ranks (%d finished, %d left), outer %s, all-reduce %s; "
               "%ld steps, final loss %.4f, val loss %.4f, %ld outer steps, %llu bytes sent, "
               "%.1f s\n",
               r->file, res->initial_replicas, world, res->final_replicas, left,
               outer_kind_name(isl->outer.kind), outer_wire_name(isl->outer.wire), res->steps,
               res->loss[res->steps - 1], res->final_val_loss, res->outer_steps,
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
    cJSON_AddNumberToObject(j, "steps", (double)res->steps);
    cJSON *l = cJSON_AddArrayToObject(j, "losses");
    cJSON *ev = cJSON_AddArrayToObject(j, "evals");
    for (long i = 0; i < res->steps; i++) {
        cJSON_AddItemToArray(l, cJSON_CreateNumber(res->loss[i]));
        if (isfinite(res->val_loss[i])) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "step", (double)(i + 1));
            cJSON_AddNumberToObject(e, "val_loss", res->val_loss[i]);
            cJSON_AddItemToArray(ev, e);
        }
    }
    cJSON_AddNumberToObject(j, "val_loss", res->final_val_loss);
    cJSON_AddNumberToObject(j, "bytes_sent", (double)res->bytes_sent);
    cJSON_AddNumberToObject(j, "outer_steps", (double)res->outer_steps);
    if (isl->outer.kind == OUTER_EDIT || isl->outer.kind == OUTER_AEDIT) {
        cJSON_AddNumberToObject(j, "eliminated", (double)res->eliminated);
        cJSON_AddNumberToObject(j, "skipped_segments", (double)res->skipped);
    }
    cJSON_AddNumberToObject(j, "final_replicas", res->final_replicas);
    cJSON_AddNumberToObject(j, "tokens", (double)res->tokens);
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
    char *text = cJSON_PrintUnformatted(j);
    if (text)
        printf("%s\n", text);
    free(text);
    cJSON_Delete(j);
}

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
static int fail_rank(const cli_mpi_run *r, int rank, int world, const zb_err *err)
{
    cli_error("rank %d of %d: %s: %s", rank, world, r->file, err->msg);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
}

int cli_mpi_available(void)
{
    return 1;
}

/* A failure every rank learnt of together (a checkpoint part or the
 * manifest that could not be written; err names the rank): rank 0 says
 * why, every rank exits 1. */
static int fail_together(mpi_pipeline *p, int rank, const zb_err *err)
{
    if (rank == 0)
        cli_fail(err);
    mpi_pipeline_free(p);
    MPI_Finalize();
    return 1;
}

/* The checkpoint (every rank its part, rank 0 the manifest) and then, by
 * rank 0, DIR/run.json, as the one-process run writes them.  Collective;
 * 0, or -1 on every rank with err set (rank 0's is the one to print). */
static int save_checkpoint(mpi_pipeline *p, const cli_mpi_run *r, int rank, zb_err *err)
{
    if (mpi_pipeline_save(p, r->ckpt_dir, err) != 0)
        return -1;
    int fail = rank == 0 && run_identity_save(r->ckpt_dir, r->identity, err) != 0;
    MPI_Bcast(&fail, 1, MPI_INT, 0, MPI_COMM_WORLD);
    return fail ? -1 : 0;
}

/* Pipeline ranks: rank d runs schedule device d (mpi_pipeline.h). */
static int run_pipeline(const cli_mpi_run *r, const sched_t *s, const zb_model *m,
                        const zb_data *d, trainer_opts *o, int rank, int world)
{
    zb_err err = { { 0 } };
    if (r->refused || world != s->n_devices) {
        if (rank == 0) {
            if (r->refused)
                cli_error("%s is not supported with pipeline ranks under mpirun", r->refused);
            else
                cli_error("%s: the schedule has %d devices but the run has %d MPI ranks (pipeline "
                          "ranks: mpirun -np %d; islands: --replicas %d)", r->file, s->n_devices,
                          world, s->n_devices, world);
        }
        MPI_Finalize();
        return r->refused ? 2 : 1;
    }
    mpi_pipeline *p = NULL;
    if (mpi_pipeline_create(s, m, d, o, MPI_COMM_WORLD, &p, &err) != 0)
        return fail_rank(r, rank, world, &err);
    trainer *t = mpi_pipeline_trainer(p);
    const zb_model *em = trainer_model(t);
    /* --checkpoint DIR: rank 0 makes the directory, checks the paths and,
     * for --resume, DIR/run.json against this run's settings (run_resume.h),
     * then writes model.json; the verdict is broadcast, so every rank goes
     * on or exits 1 alike, with rank 0's one line.  Then every rank loads
     * its part (mpi_pipeline_load). */
    const char *ckpt_dir = r->ckpt_dir;
    if (ckpt_dir) {
        char manifest[4096];
        int bad = 0, same = 0;
        char note[256] = "";
        if (rank == 0) {
            struct stat sb;
            snprintf(manifest, sizeof manifest, "%s/checkpoint.parts.json", ckpt_dir);
            if (stat(ckpt_dir, &sb) != 0 && mkdir(ckpt_dir, 0777) != 0 && errno != EEXIST)
                bad = cli_error("%s: cannot create the checkpoint directory: %s", ckpt_dir,
                                strerror(errno));
            else if (stat(ckpt_dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
                bad = cli_error("%s: not a directory", ckpt_dir);
            else if (cli_check_output_list(manifest, r->inputs, 3))
                bad = 1;
            else if (r->resume &&
                     (same = run_identity_check(ckpt_dir, r->identity, note, sizeof note, &err)) < 0)
                bad = cli_fail(&err);
            else if (gen_write_model_file(ckpt_dir, em, d->chars, d->vocab, &err) != 0)
                bad = cli_fail(&err);
        }
        MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD);
        if (bad) {
            mpi_pipeline_free(p);
            MPI_Finalize();
            return 1;
        }
        if (r->resume && mpi_pipeline_load(p, ckpt_dir, &err) != 0) {
            if (rank == 0)
                cli_fail(&err);
            mpi_pipeline_free(p);
            MPI_Finalize();
            return 1;
        }
        if (rank == 0 && same == 1 && !r->quiet)
            fprintf(stderr, "zbsched run: %s\n", note);
    }
    long first = trainer_get_stats(t)->step;
    if (first >= r->stop_at) {
        if (rank == 0)
            cli_error("the checkpoint is already at step %ld; nothing to do for --steps %ld", first,
                      r->stop_at);
        mpi_pipeline_free(p);
        MPI_Finalize();
        return 1;
    }
    if (rank == 0 && !r->quiet)
        fprintf(stderr, "zbsched run: %s (%d devices, %d stages, m=%d) on %d MPI ranks, model %s: "
                "%d layers, d=%d, vocab %d, %zu parameters, batch %d x %d tokens, %d thread%s "
                "per rank%s\n", s->name[0] ? s->name : r->file, s->n_devices, s->n_stages,
                s->n_micro, world, em->name, em->n_layers, em->d_model, em->vocab,
                trainer_param_count(t), em->micro_batch, em->seq_len, trainer_threads(t),
                trainer_threads(t) == 1 ? "" : "s", r->resume ? ", resumed" : "");
    long n_steps = r->stop_at - first;
    double *losses = calloc((size_t)n_steps, sizeof *losses);
    cJSON *evals = cJSON_CreateArray();
    if (!losses || !evals) {
        zb_fail(&err, "out of memory");
        return fail_rank(r, rank, world, &err);
    }
    long tokens_per_step = trainer_get_stats(t)->tokens_per_step;
    double train_s = 0;
    for (long i = 0; i < n_steps; i++) {
        long step = first + i;
        double t0 = MPI_Wtime();
        if (mpi_pipeline_step(p, &losses[i], &err) != 0)
            return fail_rank(r, rank, world, &err);
        double dt = MPI_Wtime() - t0;
        train_s += dt;
        if (!isfinite(losses[i])) {
            if (rank == 0)
                cli_error("step %ld: the training loss is %s (diverged; try a lower --lr)",
                          step + 1, isnan(losses[i]) ? "NaN" : "infinite");
            MPI_Finalize();
            return 1;
        }
        if (rank == 0 && !r->quiet)
            fprintf(stderr, "step %ld/%ld: loss %.4f  %.0f tok/s\n", step + 1, r->steps,
                    losses[i], dt > 0 ? (double)tokens_per_step / dt : 0.0);
        int last = step + 1 == r->stop_at;
        if (r->eval_every > 0 && (step + 1) % r->eval_every == 0 && !last) {
            double v;
            if (mpi_pipeline_eval(p, &v, &err) != 0)
                return fail_rank(r, rank, world, &err);
            if (rank == 0 && !r->quiet)
                fprintf(stderr, "step %ld: val loss %.4f\n", step + 1, v);
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "step", (double)(step + 1));
            cJSON_AddNumberToObject(e, "val_loss", v);
            cJSON_AddItemToArray(evals, e);
            if (ckpt_dir && save_checkpoint(p, r, rank, &err) != 0)
                return fail_together(p, rank, &err);
        }
    }
    double val;
    uint64_t bytes = 0, msgs = 0;
    long rollbacks = 0;
    if (mpi_pipeline_eval(p, &val, &err) != 0)
        return fail_rank(r, rank, world, &err);
    if (ckpt_dir && save_checkpoint(p, r, rank, &err) != 0)
        return fail_together(p, rank, &err);
    if (mpi_pipeline_totals(p, &bytes, &msgs, &rollbacks, &err) != 0)
        return fail_rank(r, rank, world, &err);
    {   /* the final evaluation is listed too, as in the one-process run */
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "step", (double)r->stop_at);
        cJSON_AddNumberToObject(e, "val_loss", val);
        cJSON_AddItemToArray(evals, e);
    }
    int status = 0;
    if (rank == 0) {
        double tps = train_s > 0 ? (double)(tokens_per_step * n_steps) / train_s : 0;
        if (!r->json) {
            printf("%s: %s, %d devices on %d MPI ranks, %d stages, m=%d; %ld steps, final loss "
                   "%.4f, val loss %.4f, %.0f tokens/s, %llu bytes sent (%.0f per step), %ld "
                   "rollbacks\n", r->file, s->name[0] ? s->name : "schedule", s->n_devices, world,
                   s->n_stages, s->n_micro, r->stop_at, losses[n_steps - 1], val, tps,
                   (unsigned long long)bytes, (double)bytes / (double)n_steps, rollbacks);
        } else {
            cJSON *j = cJSON_CreateObject();
            cJSON_AddStringToObject(j, "schedule", s->name);
            cJSON_AddStringToObject(j, "model", em->name);
            cJSON_AddNumberToObject(j, "devices", s->n_devices);
            cJSON_AddNumberToObject(j, "stages", s->n_stages);
            cJSON_AddNumberToObject(j, "micro_batches", s->n_micro);
            cJSON_AddNumberToObject(j, "batch_size", em->micro_batch);
            cJSON_AddNumberToObject(j, "parameters", (double)trainer_param_count(t));
            cJSON_AddNumberToObject(j, "first_step", (double)first);
            cJSON_AddNumberToObject(j, "steps", (double)r->stop_at);
            cJSON *l = cJSON_AddArrayToObject(j, "losses");
            for (long i = 0; i < n_steps; i++)
                cJSON_AddItemToArray(l, cJSON_CreateNumber(losses[i]));
            cJSON_AddItemToObject(j, "evals", evals);
            evals = NULL;
            cJSON_AddNumberToObject(j, "val_loss", val);
            cJSON_AddNumberToObject(j, "tokens_per_s", tps);
            cJSON_AddNumberToObject(j, "threads", trainer_threads(t));
            cJSON_AddNumberToObject(j, "train_seconds", train_s);
            cJSON_AddNumberToObject(j, "rollbacks", (double)rollbacks);
            cJSON_AddStringToObject(j, "transport", "mpi");
            cJSON_AddNumberToObject(j, "ranks", world);
            cJSON_AddNumberToObject(j, "bytes_sent", (double)bytes);
            cJSON_AddNumberToObject(j, "bytes_per_step", (double)bytes / (double)n_steps);
            cJSON_AddNumberToObject(j, "messages", (double)msgs);
            char *text = cJSON_PrintUnformatted(j);
            if (text)
                printf("%s\n", text);
            free(text);
            cJSON_Delete(j);
        }
        if (fflush(stdout) != 0 || ferror(stdout))
            status = cli_error("cannot write the summary to stdout");
    }
    cJSON_Delete(evals);
    free(losses);
    mpi_pipeline_free(p);
    MPI_Finalize();
    return status;
}

int cli_run_mpi(const cli_mpi_run *r, const sched_t *s, const zb_model *m, const zb_data *d,
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
    if (!r->threads_given)
        o->threads = threads_per_device(r->isl->replicas > 0 && r->isl->replicas == world
                                            ? s->n_devices : 1);
    if (r->isl->replicas == 0) /* SIGTERM keeps its default: the rank ends */
        return run_pipeline(r, s, m, d, o, rank, world);
    /* Islands: SIGTERM asks this rank's replica to leave at the next
     * outer-step boundary. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigterm;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);

    islands_opts *isl = r->isl;
    zb_err err = { { 0 } };
    if (mpi_islands_check(s, isl, MPI_COMM_WORLD, &err) != 0 ||
        (o->sync_optimizer && world > isl->replicas &&
         zb_fail(&err, "--sync-optimizer is not supported with pipeline ranks (post-validation "
                       "passes the norms between ranks)") != 0)) {
        if (rank == 0)
            cli_error("%s: %s", r->file, err.msg);
        MPI_Finalize();
        return 1;
    }
    if (rank == 0 && !r->quiet)
        fprintf(stderr, "zbsched run: %d replicas of %s on %d MPI ranks, outer %s, all-reduce %s, "
                "H=%d, %ld steps\n", isl->replicas, s->name[0] ? s->name : r->file, world,
                outer_kind_name(isl->outer.kind), outer_wire_name(isl->outer.wire),
                isl->outer.inner_steps, isl->steps);
    progress_ctx pc = { .steps = isl->steps, .quiet = r->quiet };
    mpi_islands_result res;
    int rc = mpi_islands_run(s, m, d, o, isl, MPI_COMM_WORLD, &leave_requested, print_progress,
                             &pc, &res, &err);
    if (rc != 0) {
        if (res.agreed_error) {
            if (rank == 0)
                cli_error("%s: %s", r->file, err.msg);
            MPI_Finalize();
            return 1;
        }
        return fail_rank(r, rank, world, &err); /* this rank's own failure */
    }
    int status = 0;
    if (!res.left) {
        if (!isfinite(res.final_val_loss)) {
            if (res.speaker)
                cli_error("%s: the validation loss is not finite (diverged; try a lower --lr or "
                          "--outer-lr)", r->file);
            status = 1;
        } else if (res.speaker) {
            print_summary(r, s, m, world, &res);
            if (fflush(stdout) != 0 || ferror(stdout))
                status = cli_error("cannot write the summary to stdout");
        }
    }
    mpi_islands_result_free(&res);
    MPI_Finalize();
    return status;
}

/* 1 when cli_mpi_nccl_comm initialised MPI. */
static int nccl_mpi_started;

/* An MPI launcher's variables, and not zbsched launch's. */
static int mpi_launched(void)
{
    if (getenv("ZB_RANK"))
        return 0;
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

int cli_mpi_nccl_comm(const zb_cuda_api *cu, const zb_rank_info *rk, struct gpu_comm **comm,
                      zb_err *err)
{
    if (!mpi_launched())
        return 0;
    if (!cu->nccl_unique_id || !cu->comm_create_from_id)
        return zb_fail(err, "the CUDA module cannot bootstrap NCCL from an id (rebuild it)");
    int provided;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        return zb_fail(err, "MPI_Init failed");
    nccl_mpi_started = 1;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
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

void cli_mpi_nccl_end(void)
{
    if (nccl_mpi_started)
        MPI_Finalize();
    nccl_mpi_started = 0;
}
