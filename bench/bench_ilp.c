/*
 * bench_ilp.c: solve time of solver_ilp (GLPK, warm-started with zb-auto)
 * over a grid of (p, m) at limits p/2 M_B (tight), p M_B and 2p M_B, with unit
 * costs and with the paper-like ratio (T_F, T_B, T_W, T_comm) = (5, 6, 4, 1).
 * Prints per case: seconds, proven optimal or not, ILP cost, heuristic cost,
 * bound, binaries.  argv[1] is the time limit per case (default 60 s);
 * argv[2] and argv[3], when given, keep only the cases with p <= argv[2]
 * and m <= argv[3] (the small cases the ILP should prove quickly).
 *
 *   build/bench/bench_ilp [time_limit_s [max_p max_m]]
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>

#include "solver/solver.h"

static double meta(const sched_t *s, const char *key)
{
    cJSON *o = cJSON_GetObjectItem(s->meta, "solver");
    cJSON *v = o ? cJSON_GetObjectItem(o, key) : NULL;
    if (cJSON_IsBool(v))
        return cJSON_IsTrue(v);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

int main(int argc, char **argv)
{
    double tl = argc > 1 ? atof(argv[1]) : 60;
    int max_p = argc > 3 ? atoi(argv[2]) : 1 << 30, max_m = argc > 3 ? atoi(argv[3]) : 1 << 30;
    static const int grid[][2] = { { 2, 4 }, { 2, 8 }, { 3, 6 }, { 4, 4 }, { 4, 8 }, { 4, 12 }, { 6, 12 }, { 8, 16 }, { 8, 32 } };
    static const double costs[][4] = { { 1, 1, 1, 0 }, { 5, 6, 4, 1 } };
    printf("%-3s %-3s %-5s %-9s %9s %-7s %8s %8s %8s %8s\n", "p", "m", "limit", "costs", "seconds", "optimal",
           "cost", "heur", "bound", "binaries");
    for (size_t g = 0; g < sizeof grid / sizeof grid[0]; g++) {
        for (int c = 0; c < 2; c++) {
            for (int k = 0; k <= 2; k++) {
                int p = grid[g][0], m = grid[g][1];
                if (p > max_p || m > max_m)
                    continue;
                double limit[8];
                for (int d = 0; d < p; d++) /* dF = 2: p/2, p, 2p micro-batches */
                    limit[d] = k == 0 ? 2.0 * (p / 2 > 0 ? p / 2 : 1) : 2.0 * k * p;
                gen_params gp = { .stages = p, .microbatches = m, .chunks = 1, .t_f = costs[c][0],
                                  .t_b = costs[c][1], .t_w = costs[c][2], .t_comm = costs[c][3],
                                  .m_f = 2, .m_b = -1, .m_w = -1, .mem_limit = limit, .time_limit = tl };
                sched_t *s = NULL;
                zb_err err = { { 0 } };
                if (solver_ilp(&gp, &s, &err) != 0) {
                    printf("%-3d %-3d error: %s\n", p, m, err.msg);
                    continue;
                }
                printf("%-3d %-3d %-5s %-9s %9.3f %-7s %8g %8g %8g %8g\n", p, m, k == 0 ? "p/2" : k == 1 ? "p" : "2p",
                       c ? "5,6,4,1" : "1,1,1,0", meta(s, "seconds"), meta(s, "optimal") == 1 ? "yes" : "no",
                       meta(s, "cost"), meta(s, "heuristic_cost"), meta(s, "bound"), meta(s, "binaries"));
                fflush(stdout);
                sched_free(s);
            }
        }
    }
    return 0;
}
