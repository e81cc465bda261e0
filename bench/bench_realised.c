/*
 * bench_realised.c: which figure does `zbsched run` realise per iteration,
 * the paper's cost (largest per-device span) that the search ranks by, or
 * the makespan (first op start to last op end over all devices)?
 *
 * Issue 10 ranks by the cost because the zero-bubble runtime lets each
 * device start its next iteration as soon as its own ops and optimizer
 * step are done (post-validation; the device of stage 0 runs the next
 * warm-up forwards before its step is validated).  trainer_steps does the
 * same (runtime/trainer.h); trainer_step ends every step with a barrier.
 * This bench measures both on p = 2:
 *
 *   1. profiles the model on this machine (runtime/profiler.h);
 *   2. generates 1F1B, ZB-H1, ZB-H2 and ZB-auto (unbounded memory) with
 *      the profiled stage-average costs, puts each stage's exact profiled
 *      cost on it (profiler_apply) and simulates it: cost and makespan.
 *      At p = 2 with m = 6, ZB-auto's order ends device 0 about one F
 *      before device 1 (cost < makespan, about 6%), while the others end
 *      both devices together (cost = makespan);
 *   3. trains each schedule in rounds, the schedules taking turns so that
 *      background load hits all alike: per round, `steps` steps in one
 *      trainer_steps call (overlapped) and `steps` trainer_step calls
 *      (barrier), each timed as a whole; the per-iteration figure is the
 *      median over rounds of wall / steps;
 *   4. prints, relative to 1F1B, the predicted cost and makespan and the
 *      two measured iterations.  The runtime realises the cost if the
 *      overlapped column follows the cost column for ZB-auto (below 1F1B's
 *      and ZB-H2's ratios by the cost's margin) while the barrier column
 *      follows the makespan.
 *
 * Usage: bench_realised [--model NAME|FILE] [--m M] [--steps N] [--rounds R]
 *                       [--threads T] [--clip X] [--batch B] [--data PATH]
 * Defaults: bench/runtime/wide.json (W about half of F, as in the paper),
 * m = 6, 8 steps, 7 rounds, 1 kernel thread per device, clip 0 (no
 * rollbacks; with a clip, speculation that a rollback voids is redone and
 * costs time), ../shared/data/tinyshakespeare.txt (run from the root).
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/data.h"
#include "runtime/profiler.h"
#include "runtime/trainer.h"
#include "schedules/gen.h"
#include "solver/solver.h"
#include "src/model.h"
#include "src/sim.h"
#include "src/validate.h"

#define N_KINDS 4

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int main(int argc, char **argv)
{
    const char *model_name = "bench/runtime/wide.json", *data_path = "../shared/data/tinyshakespeare.txt";
    int m = 6, steps = 8, rounds = 7, threads = 1, batch = 0, c;
    double clip = 0;
    static const struct option opts[] = {
        { "model", required_argument, NULL, 'M' }, { "m", required_argument, NULL, 'm' },
        { "steps", required_argument, NULL, 'n' }, { "rounds", required_argument, NULL, 'r' },
        { "threads", required_argument, NULL, 't' }, { "clip", required_argument, NULL, 'c' },
        { "data", required_argument, NULL, 'd' }, { "batch", required_argument, NULL, 'b' },
        { NULL, 0, NULL, 0 },
    };
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'M': model_name = optarg; break;
        case 'm': m = atoi(optarg); break;
        case 'n': steps = atoi(optarg); break;
        case 'r': rounds = atoi(optarg); break;
        case 't': threads = atoi(optarg); break;
        case 'c': clip = atof(optarg); break;
        case 'd': data_path = optarg; break;
        case 'b': batch = atoi(optarg); break;
        default:
            fprintf(stderr, "usage: bench_realised [--model NAME|FILE] [--m M] [--steps N] [--rounds R] "
                            "[--threads T] [--clip X] [--batch B] [--data PATH]\n");
            return 2;
        }
    }
    if (m < 1 || steps < 2 || rounds < 1 || threads < 1 || clip < 0) {
        fprintf(stderr, "bench_realised: --m, --rounds, --threads must be positive, --steps at least 2, "
                        "--clip not negative\n");
        return 2;
    }
    zb_err err = { { 0 } };
    zb_model model;
    zb_data *data = NULL;
    if (model_load(model_name, &model, &err) != 0 || data_load_file(data_path, model.seq_len, &data, &err) != 0) {
        fprintf(stderr, "bench_realised: %s\n", err.msg);
        return 1;
    }
    model.vocab = data->vocab;
    if (batch > 0)
        model.micro_batch = batch;
    zb_profile prof;
    if (profiler_measure(&model, model.micro_batch, 7, &prof, &err) != 0) {
        fprintf(stderr, "bench_realised: %s\n", err.msg);
        return 1;
    }
    int p = 2;
    double per = (double)model.n_layers / p;
    gen_params gp;
    gen_params_default(&gp);
    gp.stages = p;
    gp.microbatches = m;
    gp.t_f = per * prof.layer.t_f * 1e3;
    gp.t_b = per * prof.layer.t_b * 1e3;
    gp.t_w = per * prof.layer.t_w * 1e3;
    gp.t_comm = prof.t_comm * 1e3;
    double limit[2] = { 1e9, 1e9 }; /* zb-auto: memory is not what this measures */
    gp.mem_limit = limit;
    printf("model %s (%d layers, d=%d), micro-batch %d x %d, p=%d, m=%d, %d threads/device, clip %g; "
           "%d rounds of %d steps\n", model.name, model.n_layers, model.d_model, model.micro_batch,
           model.seq_len, p, m, threads, clip, rounds, steps);

    const char *kinds[N_KINDS] = { "1f1b", "zb-h1", "zb-h2", "zb-auto" };
    sched_t *s[N_KINDS] = { NULL };
    trainer *t[N_KINDS] = { NULL };
    double cost[N_KINDS], span[N_KINDS];
    trainer_opts o;
    trainer_opts_default(&o);
    o.adamw.warmup_steps = 0;
    o.adamw.grad_clip = (float)clip;
    o.threads = threads;
    o.record_times = 1;
    for (int k = 0; k < N_KINDS; k++) {
        sim_result r;
        memset(&r, 0, sizeof r);
        int rc = !strcmp(kinds[k], "zb-auto") ? solver_zb_auto(&gp, &s[k], &err)
                                              : gen_lookup(kinds[k])(&gp, &s[k], &err);
        if (rc != 0 || profiler_apply(&prof, &model, s[k], &err) != 0 || sched_validate(s[k], &err) != 0
            || sim_run(s[k], &r, &err) != 0 || trainer_create(s[k], &model, data, &o, &t[k], &err) != 0) {
            fprintf(stderr, "bench_realised: %s: %s\n", kinds[k], err.msg);
            return 1;
        }
        cost[k] = r.cost;
        span[k] = r.makespan;
        sim_result_free(&r);
        if (trainer_steps(t[k], 2, NULL, &err) != 0) { /* warm-up: pools, teams, pages */
            fprintf(stderr, "bench_realised: %s: %s\n", kinds[k], err.msg);
            return 1;
        }
    }
    /* [k][mode]: every per-iteration sample (ms).  Overlapped: one
     * trainer_steps call per round, its steps 1..n-1 (step 0 includes the
     * pipeline fill); barrier: n trainer_step calls.  On a loaded machine
     * interference only adds time, so the minimum over many samples is the
     * estimate least disturbed by it; the median is printed beside it. */
    int cap = rounds * steps;
    double *smp[N_KINDS][2];
    int n_smp[N_KINDS][2] = { { 0 } };
    for (int k = 0; k < N_KINDS; k++)
        for (int md = 0; md < 2; md++)
            if (!(smp[k][md] = calloc((size_t)cap, sizeof(double)))) {
                fprintf(stderr, "bench_realised: out of memory\n");
                return 1;
            }
    trainer_step_info *info = calloc((size_t)steps, sizeof *info);
    if (!info) {
        fprintf(stderr, "bench_realised: out of memory\n");
        return 1;
    }
    for (int i = 0; i < rounds; i++)
        for (int k = 0; k < N_KINDS; k++)
            for (int md = 0; md < 2; md++) {
                int rc = 0;
                if (md == 0) {
                    rc = trainer_steps(t[k], steps, info, &err);
                    for (int j = 1; j < steps && rc == 0; j++)
                        smp[k][md][n_smp[k][md]++] = info[j].seconds * 1e3;
                } else {
                    for (int j = 0; j < steps && rc == 0; j++) {
                        double loss;
                        rc = trainer_step(t[k], &loss, &err);
                        smp[k][md][n_smp[k][md]++] = trainer_get_stats(t[k])->last_step_s * 1e3;
                    }
                }
                if (rc != 0) {
                    fprintf(stderr, "bench_realised: %s: %s\n", kinds[k], err.msg);
                    return 1;
                }
            }
    const char *mode[2] = { "overlapped", "barrier" };
    double lo[N_KINDS][2];
    printf("\n%-8s %9s %9s %9s | %-10s %8s %9s %9s %9s %9s\n", "", "cost", "makespan", "mksp/cost", "mode",
           "samples", "min ms", "median ms", "min/cost", "min/mksp");
    for (int k = 0; k < N_KINDS; k++)
        for (int md = 0; md < 2; md++) {
            double med = median(smp[k][md], n_smp[k][md]); /* sorts */
            lo[k][md] = smp[k][md][0];
            printf("%-8s %9.2f %9.2f %9.3f | %-10s %8d %9.2f %9.2f %9.3f %9.3f\n", kinds[k], cost[k], span[k],
                   span[k] / cost[k], mode[md], n_smp[k][md], lo[k][md], med, lo[k][md] / cost[k],
                   lo[k][md] / span[k]);
        }
    printf("\nzb-auto / zb-h2: predicted cost %.3f, makespan %.3f; measured (min) overlapped %.3f, barrier %.3f\n",
           cost[3] / cost[2], span[3] / span[2], lo[3][0] / lo[2][0], lo[3][1] / lo[2][1]);
    for (int md = 0; md < 2; md++) {
        double rc[N_KINDS], rm[N_KINDS], c_lo = INFINITY, c_hi = 0, m_lo = INFINITY, m_hi = 0;
        for (int k = 0; k < N_KINDS; k++) {
            rc[k] = lo[k][md] / cost[k];
            rm[k] = lo[k][md] / span[k];
            c_lo = fmin(c_lo, rc[k]);
            c_hi = fmax(c_hi, rc[k]);
            m_lo = fmin(m_lo, rm[k]);
            m_hi = fmax(m_hi, rm[k]);
        }
        printf("%-10s: spread of min/cost over the schedules %.1f%%, of min/makespan %.1f%%\n", mode[md],
               100 * (c_hi / c_lo - 1), 100 * (m_hi / m_lo - 1));
    }
    free(info);
    for (int k = 0; k < N_KINDS; k++)
        for (int md = 0; md < 2; md++)
            free(smp[k][md]);
    for (int k = 0; k < N_KINDS; k++) {
        trainer_free(t[k]);
        sched_free(s[k]);
    }
    data_free(data);
    return 0;
}
