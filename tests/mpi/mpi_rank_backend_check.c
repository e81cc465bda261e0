/*
 * mpi_rank_backend_check.c: pipeline ranks whose backend holds only the
 * rank's own stages (runtime/backend_rank.h, what a GPU rank uses over the
 * CUDA backend) against one process, run by tests/mpi/test_mpi_pipeline.sh
 * as `mpirun -np 2 mpi_rank_backend_check`.
 *
 * The wrapper goes over the CPU backend here, with the MPI transport, so
 * it runs without a GPU; what it checks is the executor's side of the
 * contract a GPU rank relies on: in one_device mode the executor never
 * runs an op on another device's stage (the wrapper fails such an op), a
 * step and a checkpoint in parts work with those stages held as host
 * mirrors only, and the results are the one-process run's bits.  A ZB-V
 * schedule (two stages per rank, the turn a link of a rank to itself).
 *
 *   1. both ranks: the one-process CPU trainer, 4 steps (the reference);
 *   2. pipeline ranks over the wrapper, 3 steps: the same loss bits, and
 *      each rank's own stages' parameters the reference's after step 3
 *      (checked by a 3-step reference run);
 *   3. a checkpoint in parts, loaded into fresh wrapped ranks: step 4 has
 *      the reference's loss bits.
 * Prints "ok: ..." or "FAIL: ..." on rank 0; exit status 0 or 1.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "kernels/cpu/backend_cpu.h"
#include "runtime/backend_rank.h"
#include "runtime/mpi/mpi_pipeline.h"
#include "schedules/gen.h"
#include "src/validate.h"
#include "tests/common/trainer_fixture.h"

#define STEPS 4

/* The CPU backend seen as rank *ctx's. */
static int make_rank_cpu(void *ctx, int n_devices, zb_backend **out, zb_err *err)
{
    zb_backend *cpu;
    if (backend_cpu_create(n_devices, &cpu, err) != 0)
        return -1;
    return backend_rank_wrap(cpu, *(const int *)ctx, out, err);
}

static int bad(int rank, const char *what, const zb_err *err)
{
    if (rank == 0)
        printf("FAIL: %s%s%s\n", what, err ? ": " : "", err ? err->msg : "");
    fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
}

int main(void)
{
    int provided, rank, world;
    MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    zb_err err = { { 0 } };
    if (world != 2)
        return bad(rank, "run with mpirun -np 2", NULL);
    gen_params gp;
    gen_params_default(&gp);
    gp.stages = 2;
    gp.microbatches = 4;
    gp.chunks = 2;
    sched_t *s = NULL;
    if (gen_lookup("zb-v")(&gp, &s, &err) != 0 || sched_validate(s, &err) != 0)
        return bad(rank, "zb-v", &err);
    char path[4096];
    const char *root = getenv("ZB_SOURCE_ROOT");
    snprintf(path, sizeof path, "%s/../shared/data/tinyshakespeare.txt", root ? root : ".");
    zb_data *d = NULL;
    if (data_load_file(path, 32, &d, &err) != 0)
        return bad(rank, "data", &err);
    zb_model m = fixture_model();
    trainer_opts o;
    trainer_opts_default(&o);
    o.seed = 11;
    o.threads = 1;
    /* 1. the reference, one process */
    trainer *ref = NULL, *ref3 = NULL;
    double want[STEPS];
    if (trainer_create(s, &m, d, &o, &ref, &err) != 0 || trainer_create(s, &m, d, &o, &ref3, &err))
        return bad(rank, "reference trainer", &err);
    for (int i = 0; i < STEPS; i++) {
        double l3;
        if (trainer_step(ref, &want[i], &err) != 0 || (i < 3 && trainer_step(ref3, &l3, &err)))
            return bad(rank, "reference step", &err);
    }
    /* 2. pipeline ranks over the wrapper */
    trainer_opts ro = o;
    ro.make_backend = make_rank_cpu;
    ro.make_backend_ctx = &rank;
    mpi_pipeline *p = NULL;
    if (mpi_pipeline_create(s, &m, d, &ro, MPI_COMM_WORLD, &p, &err) != 0)
        return bad(rank, "pipeline", &err);
    trainer *t = mpi_pipeline_trainer(p);
    if (strcmp(trainer_backend_name(t), "cpu/rank") != 0)
        return bad(rank, "the wrapper's name", NULL);
    for (int i = 0; i < 3; i++) {
        double l;
        if (mpi_pipeline_step(p, &l, &err) != 0)
            return bad(rank, "wrapped step", &err);
        if (memcmp(&l, &want[i], sizeof l) != 0) {
            char what[128];
            snprintf(what, sizeof what, "step %d: %.9g, one process %.9g", i + 1, l, want[i]);
            return bad(rank, what, NULL);
        }
    }
    int own = 0;
    for (int st = 0; st < s->n_stages; st++) {
        if (s->stage_device[st] != rank)
            continue;
        size_t n1, n2;
        const float *a = trainer_stage_params(t, st, &n1), *b = trainer_stage_params(ref3, st, &n2);
        if (n1 != n2 || memcmp(a, b, n1 * sizeof *a) != 0)
            return bad(rank, "own stage's parameters differ from one process's", NULL);
        own++;
    }
    if (own != 2)
        return bad(rank, "zb-v should give each rank two stages", NULL);
    /* 3. a checkpoint in parts, into fresh wrapped ranks */
    char dir[64] = "/tmp/zb_rank_backend_XXXXXX";
    if (rank == 0 && !mkdtemp(dir))
        return bad(rank, "mkdtemp", NULL);
    MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (mpi_pipeline_save(p, dir, &err) != 0)
        return bad(rank, "save", &err);
    mpi_pipeline_free(p);
    p = NULL;
    if (mpi_pipeline_create(s, &m, d, &ro, MPI_COMM_WORLD, &p, &err) != 0 ||
        mpi_pipeline_load(p, dir, &err) != 0)
        return bad(rank, "resume", &err);
    double l4;
    if (mpi_pipeline_step(p, &l4, &err) != 0)
        return bad(rank, "resumed step", &err);
    if (memcmp(&l4, &want[3], sizeof l4) != 0) {
        char what[128];
        snprintf(what, sizeof what, "resumed step 4: %.9g, one process %.9g", l4, want[3]);
        return bad(rank, what, NULL);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        char rm[128];
        snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
        if (system(rm) != 0)
            printf("note: could not remove %s\n", dir);
        printf("ok: zb-v on 2 ranks with only their own stages in the backend: %d steps and a "
               "resumed one bit-identical to one process\n", STEPS - 1);
    }
    mpi_pipeline_free(p);
    trainer_free(ref);
    trainer_free(ref3);
    data_free(d);
    sched_free(s);
    MPI_Finalize();
    return 0;
}
