/*
 * bench_profile_fidelity.c: how far `zbsched run`'s ops are from what
 * `zbsched profile` measured for them, with the machine's own drift taken
 * out.
 *
 * The development VM's throughput for these small kernels drifts by up to
 * 1.8x over seconds (a neighbour on the host, not this process: a scalar
 * loop keeps its speed while a GEMM loop does not).  A profile taken at one
 * moment and a run at another then differ by the machine, not by the
 * model.  This bench pairs them instead: every round
 *
 *   1. profiles the model here (runtime/profiler.h, `reps` repetitions,
 *      a few tens of milliseconds);
 *   2. puts those costs on the plan's stages (its layer split) and
 *      simulates it: the predicted iteration, as `render --compare` takes
 *      it (first op start to last op end);
 *   3. right after, trains two steps of the plan and keeps the second's
 *      recorded op times (the first after the profile starts with the
 *      profile's data in the caches, which a long run does not);
 *
 * and prints, per device and op kind, the median over rounds of (median
 * measured op time / profiled op time), and the median of measured /
 * predicted iteration.  Rounds take well under a second, so both halves of
 * a round see the same machine state; a ratio that stays away from 1 is
 * the executor or the profile, not the neighbours.
 *
 * Usage: bench_profile_fidelity PLAN [--model NAME|FILE] [--batch B]
 *            [--rounds N] [--reps R] [--data PATH] [--verbose] [--trace FILE]
 * PLAN is a `zbsched search` output (its plan's layer split and
 * micro-batch are used) or any schedule file; defaults: model tiny,
 * batch = the plan's micro-batch (else the model's), 20 rounds, 10
 * repetitions, ../shared/data/tinyshakespeare.txt (run from the root).
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "runtime/data.h"
#include "runtime/profiler.h"
#include "runtime/trainer.h"
#include "src/model.h"
#include "src/sched_io.h"
#include "src/validate.h"
#include "viz/times.h"

enum { KINDS = 3 }; /* F, B, W (a fused BW is split at its B half) */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    if (n == 0)
        return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* An integer array member of the plan object of s's extras, or 0 when
 * absent; fills out[0..n). */
static int plan_ints(const sched_t *s, const char *key, int *out, int n)
{
    const cJSON *plan = s->meta ? cJSON_GetObjectItemCaseSensitive(s->meta, "plan") : NULL;
    const cJSON *a = plan ? cJSON_GetObjectItemCaseSensitive(plan, key) : NULL;
    if (cJSON_IsNumber(a) && n == 1) {
        out[0] = a->valueint;
        return 1;
    }
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != n)
        return 0;
    for (int i = 0; i < n; i++)
        out[i] = cJSON_GetArrayItem(a, i)->valueint;
    return 1;
}

/* Stage costs of s from profile p with `layers[i]` layers on stage i (ms). */
static void put_costs(sched_t *s, const zb_profile *p, const int *layers)
{
    for (int i = 0; i < s->n_stages; i++) {
        double n = layers[i];
        stage_cost *c = &s->cost[i];
        c->t_f = n * p->layer.t_f;
        c->t_b = n * p->layer.t_b;
        c->t_w = n * p->layer.t_w;
        if (i == 0) {
            c->t_f += p->embedding.t_f;
            c->t_b += p->embedding.t_b;
            c->t_w += p->embedding.t_w;
        }
        if (i == s->n_stages - 1) {
            c->t_f += p->head.t_f;
            c->t_b += p->head.t_b;
            c->t_w += p->head.t_w;
        }
        c->t_f *= 1e3;
        c->t_b *= 1e3;
        c->t_w *= 1e3;
    }
    s->t_comm = p->t_comm * 1e3;
    strcpy(s->time_unit, "ms");
}

/* First op start to last op end of s (measured or simulated), or NAN. */
static double span_ms(const sched_t *s)
{
    zb_err err = { { 0 } };
    viz_times vt;
    if (viz_times_compute(s, &vt, &err) != 0)
        return NAN;
    double v = vt.t1 - vt.t0;
    viz_times_free(&vt);
    return v;
}

int main(int argc, char **argv)
{
    const char *model_name = "tiny", *data_path = "../shared/data/tinyshakespeare.txt";
    const char *trace_path = NULL;
    int batch = 0, rounds = 20, reps = 10, verbose = 0, c;
    static const struct option opts[] = {
        { "model", required_argument, NULL, 'M' }, { "batch", required_argument, NULL, 'b' },
        { "rounds", required_argument, NULL, 'r' }, { "reps", required_argument, NULL, 'k' },
        { "data", required_argument, NULL, 'd' }, { "verbose", no_argument, NULL, 'v' },
        { "trace", required_argument, NULL, 't' },
        { NULL, 0, NULL, 0 },
    };
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'M': model_name = optarg; break;
        case 'b': batch = atoi(optarg); break;
        case 'r': rounds = atoi(optarg); break;
        case 'k': reps = atoi(optarg); break;
        case 'd': data_path = optarg; break;
        case 'v': verbose = 1; break;
        case 't': trace_path = optarg; break;
        default: optind = argc + 1; break;
        }
    }
    if (optind != argc - 1 || rounds < 1 || reps < 1 || batch < 0) {
        fprintf(stderr, "usage: bench_profile_fidelity PLAN [--model NAME|FILE] [--batch B] "
                        "[--rounds N] [--reps R] [--data PATH] [--verbose] [--trace FILE]\n");
        return 2;
    }
    zb_err err = { { 0 } };
    zb_model model;
    zb_data *data = NULL;
    sched_t *plan = NULL;
    if (sched_load_file(argv[optind], &plan, &err) != 0 || model_load(model_name, &model, &err) != 0
        || data_load_file(data_path, model.seq_len, &data, &err) != 0) {
        fprintf(stderr, "bench_profile_fidelity: %s\n", err.msg);
        return 1;
    }
    model.vocab = data->vocab;
    if (batch == 0 && !plan_ints(plan, "micro_batch", &batch, 1))
        batch = model.micro_batch;
    model.micro_batch = batch;
    int S = plan->n_stages, p = plan->n_devices;
    int *layers = malloc(sizeof(int) * (size_t)S);
    if (!layers || !plan_ints(plan, "layers_per_stage", layers, S)) {
        for (int i = 0; i < S && layers; i++) /* the runtime's even split */
            layers[i] = model.n_layers / S + (i < model.n_layers % S);
    }
    trainer_opts o;
    trainer_opts_default(&o);
    o.record_times = 1;
    o.eval_windows = 1;
    o.batch_size = batch;
    o.layers_per_stage = layers;
    trainer *t = NULL;
    if (trainer_create(plan, &model, data, &o, &t, &err) != 0) {
        fprintf(stderr, "bench_profile_fidelity: %s\n", err.msg);
        return 1;
    }
    /* ratio[round][dev][kind] and the iteration ratio per round */
    double *ratio = malloc(sizeof(double) * (size_t)rounds * (size_t)p * KINDS);
    double *iter = malloc(sizeof(double) * (size_t)rounds);
    double *pred_ms = malloc(sizeof(double) * (size_t)rounds);
    double *meas_ms = malloc(sizeof(double) * (size_t)rounds);
    double *buf = malloc(sizeof(double) * (size_t)(sched_op_count(plan) + rounds));
    if (!ratio || !iter || !buf || !pred_ms || !meas_ms) {
        fprintf(stderr, "bench_profile_fidelity: out of memory\n");
        return 1;
    }
    printf("plan %s: %s, %d devices, %d stages, m=%d; model %s, micro-batch %d; %d rounds of "
           "(profile with %d reps, one step)\n", argv[optind], plan->name, p, S, plan->n_micro,
           model.name, batch, rounds, reps);
    for (int r = -1; r < rounds; r++) { /* r = -1: warm-up */
        zb_profile prof;
        double loss;
        sched_t *trace = NULL;
        /* the first step after the profile finds its caches cold; the second
         * is the steady state that a run of many steps measures */
        if (profiler_measure(&model, batch, reps, &prof, &err) != 0 || trainer_step(t, &loss, &err) != 0
            || trainer_step(t, &loss, &err) != 0 || trainer_trace(t, &trace, &err) != 0) {
            fprintf(stderr, "bench_profile_fidelity: %s\n", err.msg);
            return 1;
        }
        if (r < 0) {
            sched_free(trace);
            continue;
        }
        sched_t *pred = sched_clone(plan);
        if (!pred) {
            fprintf(stderr, "bench_profile_fidelity: out of memory\n");
            return 1;
        }
        put_costs(pred, &prof, layers);
        pred_ms[r] = span_ms(pred);
        meas_ms[r] = span_ms(trace);
        iter[r] = meas_ms[r] / pred_ms[r];
        if (verbose)
            printf("round %d: layer F %.3f B %.3f W %.3f ms; predicted %.2f ms, measured %.2f ms, "
                   "ratio %.3f\n", r, prof.layer.t_f * 1e3, prof.layer.t_b * 1e3,
                   prof.layer.t_w * 1e3, pred_ms[r], meas_ms[r], iter[r]);
        for (int d = 0; d < p; d++)
            for (int k = 0; k < KINDS; k++) {
                int n = 0;
                const sched_lane *ln = &trace->dev[d];
                for (int i = 0; i < ln->n_ops; i++) {
                    sched_op op = ln->ops[i];
                    if (op.kind != k) /* BW ops (fused) are left out */
                        continue;
                    const stage_cost *pc = &pred->cost[op.stage];
                    double want = k == OP_F ? pc->t_f : k == OP_B ? pc->t_b : pc->t_w;
                    buf[n++] = (ln->end[i] - ln->start[i]) / want;
                }
                ratio[((size_t)r * p + d) * KINDS + k] = median(buf, n);
            }
        sched_free(pred);
        if (trace_path && r == rounds - 1 && sched_save_file(trace, trace_path, &err) != 0)
            fprintf(stderr, "bench_profile_fidelity: %s\n", err.msg);
        sched_free(trace);
    }
    const char *kn[KINDS] = { "F", "B", "W" };
    for (int d = 0; d < p; d++) {
        printf("device %d, median over rounds of measured/profiled op time:", d);
        for (int k = 0; k < KINDS; k++) {
            int n = 0;
            for (int r = 0; r < rounds; r++) {
                double v = ratio[((size_t)r * p + d) * KINDS + k];
                if (!isnan(v))
                    buf[n++] = v;
            }
            if (n)
                printf("  %s %.3f", kn[k], median(buf, n));
        }
        printf("\n");
    }
    double q[3];
    memcpy(buf, iter, sizeof(double) * (size_t)rounds);
    qsort(buf, (size_t)rounds, sizeof *buf, cmp_double);
    q[0] = buf[rounds / 4];
    q[1] = median(buf, rounds);
    q[2] = buf[(3 * rounds) / 4];
    double pm = median(pred_ms, rounds), mm = median(meas_ms, rounds);
    printf("iteration measured/predicted, paired per round: median %.3f (quartiles %.3f, %.3f); "
           "medians over rounds: predicted %.2f ms, measured %.2f ms\n", q[1], q[0], q[2], pm, mm);
    free(buf);
    free(iter);
    free(ratio);
    free(pred_ms);
    free(meas_ms);
    free(layers);
    trainer_free(t);
    sched_free(plan);
    data_free(data);
    return 0;
}
