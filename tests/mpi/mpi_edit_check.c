/*
 * mpi_edit_check.c: EDiT's anomaly elimination across processes against
 * the in-process islands, run by tests/mpi/test_mpi_islands.sh as
 * `mpirun -np K mpi_edit_check`.
 *
 * The CLI cannot reach the elimination in a short run (the detector's
 * warm-up is 100 outer steps and has no flag), so this program calls
 * mpi_islands_run and islands_run directly with a warm-up of 1 and the
 * z-score threshold argv[1] (default 4), low enough that replicas are
 * dropped.  Rank 0 then
 * runs the same islands in one process and compares: the losses and the
 * validation loss bit for bit, the bytes sent and the eliminated count.
 * Prints one line "ok: ..." or "FAIL: ..." on rank 0; exit status 0 or 1
 * on every rank.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <mpi.h>

#include "runtime/mpi/mpi_islands.h"
#include "tests/common/trainer_fixture.h"

int main(int argc, char **argv)
{
    int provided, rank, world;
    MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    /* the fixture's helpers without ck_assert, which needs a Check runner */
    sched_t *s = fixture_gpipe2();
    zb_data *d = NULL;
    char path[4096];
    const char *root = getenv("ZB_SOURCE_ROOT"); /* as fixture_data */
    snprintf(path, sizeof path, "%s/../shared/data/tinyshakespeare.txt", root ? root : ".");
    zb_err derr = { { 0 } };
    if (data_load_file(path, 32, &d, &derr) != 0) {
        if (rank == 0)
            printf("FAIL: %s\n", derr.msg);
        MPI_Finalize();
        return 1;
    }
    zb_model m = fixture_model();
    trainer_opts o;
    trainer_opts_default(&o);
    o.seed = 3;
    o.threads = 1;
    o.eval_windows = 2;
    islands_opts io;
    islands_opts_default(&io);
    io.replicas = world;
    io.steps = 12;
    outer_config_default(&io.outer, OUTER_EDIT);
    io.outer.wire = OUTER_WIRE_INT8;
    io.outer.inner_steps = 2;
    io.outer.edit_warmup = 1;       /* judge from the second outer step on */
    /* the z-score threshold, argv[1]: with this model and seed, 0.05 drops
     * every replica of every judged segment (the skip path), 4 some
     * replicas of some segments (zero weights in the all-reduce) */
    io.outer.edit_threshold = argc > 1 ? atof(argv[1]) : 4.0;
    io.outer.edit_alpha = 0.5;
    zb_err err = { { 0 } };
    mpi_islands_result mr;
    int fail = mpi_islands_run(s, &m, d, &o, &io, MPI_COMM_WORLD, NULL, &mr, &err);
    int verdict = 0;
    if (rank == 0) {
        islands_result ir;
        zb_err e2 = { { 0 } };
        if (fail)
            printf("FAIL: mpi_islands_run: %s\n", err.msg), verdict = 1;
        else if (islands_run(s, &m, d, &o, &io, &ir, &e2) != 0)
            printf("FAIL: islands_run: %s\n", e2.msg), verdict = 1;
        else {
            int same = memcmp(mr.loss, ir.loss, (size_t)io.steps * sizeof *ir.loss) == 0 &&
                       memcmp(&mr.final_val_loss, &ir.final_val_loss, sizeof(double)) == 0 &&
                       mr.bytes_sent == ir.bytes_sent && mr.eliminated == ir.eliminated &&
                       mr.skipped == ir.skipped;
            if (!same || ir.eliminated == 0)
                verdict = 1;
            printf("%s: EDiT with elimination, K=%d: %ld (replica, segment) pairs dropped "
                   "(in process %ld), %ld segments skipped (%ld), val loss %.17g (%.17g), bytes "
                   "%llu (%llu)%s\n", verdict ? "FAIL" : "ok", world, mr.eliminated,
                   ir.eliminated, mr.skipped, ir.skipped,
                   mr.final_val_loss, ir.final_val_loss, (unsigned long long)mr.bytes_sent,
                   (unsigned long long)ir.bytes_sent,
                   same ? ", losses bit-identical" : ", DIFFERENT");
            islands_result_free(&ir);
        }
        fflush(stdout);
    } else if (fail) {
        verdict = 1;
    }
    MPI_Bcast(&verdict, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (!fail)
        mpi_islands_result_free(&mr);
    data_free(d);
    sched_free(s);
    MPI_Finalize();
    return verdict;
}
