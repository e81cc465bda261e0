/*
 * bench_sim.c: how long validating, simulating, writing and loading a
 * schedule take as it grows, to show the cost is linear in ops and that a
 * p=64, m=1024 1F1B schedule (~200,000 ops) stays well under 100 ms.
 *
 * Builds 1F1B with split B/W (3 ops per stage and micro-batch) for p=64 and
 * m = 128..2048 with its own small builder, so it does not depend on the
 * generators.  Each figure is the best of several repetitions on one core
 * (wall clock, CLOCK_MONOTONIC; the last two columns are process CPU time,
 * which a busy shared machine inflates less).  Usage: bench_sim [REPS]
 * (default 5).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "src/sched_io.h"
#include "src/sim.h"
#include "src/validate.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* CPU time of this process: less inflated than wall time when the machine
 * is shared with other jobs. */
static double cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* 1F1B with split B/W: warm-up of p-1-d forwards, then F, B, W in turn. */
static sched_t *build_1f1b(int p, int m)
{
    sched_t *s = sched_new(p, m, p);
    if (!s)
        return NULL;
    sched_place_interleaved(s);
    for (int d = 0; d < p; d++) {
        int warm = p - 1 - d < m ? p - 1 - d : m, f = 0;
        for (; f < warm; f++)
            sched_push(s, d, OP_F, d, f);
        for (int b = 0; b < m; b++) {
            if (f < m)
                sched_push(s, d, OP_F, d, f++);
            sched_push(s, d, OP_B, d, b);
            sched_push(s, d, OP_W, d, b);
        }
    }
    return s;
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 5;
    if (reps < 1)
        reps = 1;
    const int p = 64, sizes[] = { 128, 256, 512, 1024, 2048 };
    printf("%6s %8s %10s %10s %12s %10s %10s %8s %12s %14s %10s\n", "m", "ops", "validate",
           "simulate", "valid+sim", "save", "load", "file MB", "ns/op (v+s)", "v+s CPU", "load CPU");
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        int m = sizes[k];
        sched_t *s = build_1f1b(p, m);
        if (!s) {
            fprintf(stderr, "out of memory\n");
            return 1;
        }
        long n = sched_op_count(s);
        double best_v = 1e30, best_s = 1e30, best_vs = 1e30, best_w = 1e30, best_l = 1e30;
        double cpu_vs = 1e30, cpu_l = 1e30;
        size_t bytes = 0;
        for (int r = 0; r < reps; r++) {
            zb_err err = { "" };
            sim_result res;
            double c0 = cpu_ms(), t0 = now_ms();
            if (sched_validate(s, &err)) {
                fprintf(stderr, "invalid: %s\n", err.msg);
                return 1;
            }
            double t1 = now_ms();
            if (sim_run(s, &res, &err)) {
                fprintf(stderr, "sim: %s\n", err.msg);
                return 1;
            }
            double t2 = now_ms(), c2 = cpu_ms();
            sim_result_free(&res);
            char *text = sched_to_string(s);
            double t3 = now_ms(), c3 = cpu_ms();
            sched_t *t = NULL;
            if (!text || sched_load_string(text, strlen(text), &t, &err)) {
                fprintf(stderr, "load: %s\n", err.msg);
                return 1;
            }
            double t4 = now_ms(), c4 = cpu_ms();
            cpu_vs = c2 - c0 < cpu_vs ? c2 - c0 : cpu_vs;
            cpu_l = c4 - c3 < cpu_l ? c4 - c3 : cpu_l;
            bytes = strlen(text);
            free(text);
            sched_free(t);
            best_v = t1 - t0 < best_v ? t1 - t0 : best_v;
            best_s = t2 - t1 < best_s ? t2 - t1 : best_s;
            best_vs = t2 - t0 < best_vs ? t2 - t0 : best_vs;
            best_w = t3 - t2 < best_w ? t3 - t2 : best_w;
            best_l = t4 - t3 < best_l ? t4 - t3 : best_l;
        }
        printf("%6d %8ld %8.2fms %8.2fms %10.2fms %8.2fms %8.2fms %8.2f %12.1f %12.2fms %8.2fms\n", m, n,
               best_v, best_s, best_vs, best_w, best_l, bytes / 1e6, best_vs * 1e6 / (double)n,
               cpu_vs, cpu_l);
        sched_free(s);
    }
    return 0;
}
