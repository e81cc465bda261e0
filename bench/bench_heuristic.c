/*
 * bench_heuristic.c: wall time of solver_zb_auto (all 8 knob settings,
 * schedule built) and of the V family on the zero-bubble paper's Table 9
 * profiles, up to p=32, m=256 (24,576 ops; the authors' Python heuristic
 * takes about 0.4 s there).  Each case runs `reps` times (argv[1], default
 * 50); the medians of wall time and of process CPU time are printed, in
 * milliseconds (CPU time is the steadier figure on a loaded machine).
 *
 *   build/bench/bench_heuristic [reps]
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "solver/solver.h"

static double clock_ms(clockid_t id)
{
    struct timespec t;
    clock_gettime(id, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef int (*solve_fn)(const gen_params *, sched_t **, zb_err *);

/* Median milliseconds of fn(gp) over reps runs on clock id; -1 on error. */
static double median_ms(solve_fn fn, const gen_params *gp, int reps, clockid_t id)
{
    double *t = malloc(sizeof(double) * (size_t)reps);
    if (!t)
        return -1;
    for (int r = 0; r < reps; r++) {
        sched_t *s = NULL;
        zb_err err = { { 0 } };
        double t0 = clock_ms(id);
        if (fn(gp, &s, &err) != 0) {
            fprintf(stderr, "bench_heuristic: %s\n", err.msg);
            free(t);
            return -1;
        }
        t[r] = clock_ms(id) - t0;
        sched_free(s);
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_double);
    double med = t[reps / 2];
    free(t);
    return med;
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 50;
    if (reps < 1)
        reps = 1;
    static const struct { int p, m; double f, b, w, c; int h, a; } rows[] = {
        { 8, 24, 18522, 18086, 9337, 601, 2304, 24 },
        { 16, 128, 11325, 11308, 8109, 378, 5120, 40 },
        { 32, 96, 10419, 10207, 7715, 408, 6144, 48 },
        { 32, 256, 10402, 10248, 7698, 460, 6144, 48 },
    };
    printf("%-4s %-4s %-5s %14s %14s %14s %14s\n", "p", "m", "limit", "zb-auto wall", "zb-auto cpu",
           "v-zb wall", "v-zb cpu");
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        for (int k = 1; k <= 2; k++) {
            double mf = 34.0 * rows[i].h + 5.0 * rows[i].a * 1024, mw = 32.0 * rows[i].h;
            double limit[32];
            for (int d = 0; d < rows[i].p; d++)
                limit[d] = k * rows[i].p * mf;
            gen_params gp = { .stages = rows[i].p, .microbatches = rows[i].m, .chunks = 1,
                              .t_f = rows[i].f, .t_b = rows[i].b, .t_w = rows[i].w, .t_comm = rows[i].c,
                              .m_f = mf, .m_b = mw - mf, .m_w = -mw, .mem_limit = limit };
            double za = median_ms(solver_zb_auto, &gp, reps, CLOCK_MONOTONIC);
            double zc = median_ms(solver_zb_auto, &gp, reps, CLOCK_PROCESS_CPUTIME_ID);
            double vz = -1, vc = -1;
            if (k == 1) { /* V family: per-chunk costs are half the device's */
                gen_params vp = gp;
                vp.chunks = 2;
                vp.t_f /= 2; vp.t_b /= 2; vp.t_w /= 2;
                vp.m_f /= 2; vp.m_b /= 2; vp.m_w /= 2;
                vp.mem_limit = NULL;
                vz = median_ms(solver_v_zb, &vp, reps < 5 ? reps : 5, CLOCK_MONOTONIC);
                vc = median_ms(solver_v_zb, &vp, reps < 5 ? reps : 5, CLOCK_PROCESS_CPUTIME_ID);
            }
            printf("%-4d %-4d %-5s %14.3f %14.3f %14.3f %14.3f\n", rows[i].p, rows[i].m, k == 1 ? "p" : "2p",
                   za, zc, vz, vc);
        }
    }
    return 0;
}
