/*
 * bench_calibration.c: the cost model against measured Megatron-LM runs
 * (issue 27, bench/README.md "Issue 27").
 *
 * Reads bench/calibration/megatron_runs.csv (Korthikanti et al. 2022
 * Table 3; Narayanan et al. 2021 Table 1), re-costs each row with its
 * layout fixed (tensor parallel t with or without sequence parallelism,
 * pipeline p with v chunks, data parallel d, full or selective recompute,
 * no flash attention and TP collectives not overlapped, as those runs had
 * neither) and prints predicted against
 * measured.  The iteration is Megatron's (interleaved) 1F1B on the cost
 * model's per-stage F, B and W times (src/cost_model.h):
 *     T = (m + (p - 1) / v) * (slowest device's F + B + W per micro-batch)
 *       + the data-parallel all-reduce of fp32 gradients, not overlapped
 * (Narayanan et al. 2021, section 2.2: the interleaved schedule's bubble
 * is (p - 1)/v of a micro-batch's time; their Megatron reduced gradients
 * after the backward).  Throughput is the papers' own FLOP count,
 * 96 B s l h^2 (1 + s/(6h) + V/(16 l h)), over T and the GPUs.
 *
 * With --fit it fits one A100 matmul efficiency (F and B; W keeps the
 * preset's W/F ratio) on the odd-numbered Narayanan rows by golden-section
 * search over the summed squared log error, and reports the error of every
 * row at the fitted value; without it, at the preset's.
 *
 * Usage: bench_calibration [CSV] [--fit] [--eff E]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/cost_model.h"

#define MAX_ROWS 64

typedef struct run_row {
    char source[32], name[32];
    int heads, hidden, layers, vocab, seq, tp, pp, gpus, batch, micro, chunks, selective, sp;
    double measured_s, measured_tflops; /* 0 when not published */
} run_row;

static int read_rows(const char *path, run_row *rows, int cap)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "bench_calibration: cannot open %s\n", path);
        return -1;
    }
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, f) && n < cap) {
        if (line[0] == '#' || line[0] == '\n')
            continue;
        run_row *r = &rows[n];
        memset(r, 0, sizeof *r);
        char rc[16], ms[32] = "", mt[32] = "";
        char *fld[17];
        int k = 0;
        for (char *p = strtok(line, ",\n"); p && k < 17; p = strtok(NULL, ",\n"))
            fld[k++] = p;
        /* strtok skips empty fields: the last two are optional, one is given */
        if (k < 16) {
            fprintf(stderr, "bench_calibration: a row has %d fields\n", k);
            fclose(f);
            return -1;
        }
        snprintf(r->source, sizeof r->source, "%s", fld[0]);
        snprintf(r->name, sizeof r->name, "%s", fld[1]);
        r->heads = atoi(fld[2]), r->hidden = atoi(fld[3]), r->layers = atoi(fld[4]);
        r->vocab = atoi(fld[5]), r->seq = atoi(fld[6]), r->tp = atoi(fld[7]), r->pp = atoi(fld[8]);
        r->gpus = atoi(fld[9]), r->batch = atoi(fld[10]), r->micro = atoi(fld[11]), r->chunks = atoi(fld[12]);
        snprintf(rc, sizeof rc, "%s", fld[13]);
        r->selective = !strcmp(rc, "selective");
        r->sp = atoi(fld[14]);
        if (!strncmp(r->source, "korthikanti", 11))
            snprintf(ms, sizeof ms, "%s", fld[15]);
        else
            snprintf(mt, sizeof mt, "%s", fld[15]);
        r->measured_s = atof(ms);
        r->measured_tflops = atof(mt);
        n++;
    }
    fclose(f);
    return n;
}

/* Predicted seconds per iteration of row r on gpu g; -1 on a cost error. */
static double predict(const run_row *r, const zb_gpu *g)
{
    zb_model m;
    model_preset("28.3B", &m, NULL); /* GPT-style: GeLU 4h MLP, tied embedding, learned positions */
    snprintf(m.name, sizeof m.name, "%s", r->name);
    m.n_heads = m.n_kv_heads = r->heads;
    m.d_model = r->hidden;
    m.d_ff = 4 * r->hidden;
    m.n_layers = r->layers;
    m.vocab = r->vocab;
    m.seq_len = r->seq;
    m.micro_batch = r->micro;
    int dp = r->gpus / (r->tp * r->pp), S = r->pp * r->chunks;
    cost_options o;
    cost_options_default(&o);
    o.flash_attention = 0;
    o.tp_comm_overlap = 0; /* these runs predate Megatron's --tp-comm-overlap */
    o.recompute = r->selective ? COST_RC_ATTN : COST_RC_FULL;
    o.layout.tp = r->tp;
    o.layout.sp = r->sp;
    o.layout.pp = r->pp;
    o.layout.dp = dp;
    o.layout.chunks = r->chunks;
    int per_node = gpu_per_node(g);
    o.devices_per_node = r->tp * dp >= per_node ? 1 : per_node / (r->tp * dp);
    int layers[4096];
    for (int i = 0; i < S; i++) /* Megatron's uniform split */
        layers[i] = r->layers / S + (i < r->layers % S);
    o.layers = layers;
    cost_stage st[4096];
    zb_err err = { { 0 } };
    if (cost_stages(&m, g, &o, S, r->pp == 1, st, &err) < 0) {
        fprintf(stderr, "bench_calibration: %s: %s\n", r->name, err.msg);
        return -1;
    }
    double dev_max = 0, params_max = 0;
    for (int d = 0; d < r->pp; d++) {
        double t = 0, params = 0;
        for (int c = 0; c < r->chunks; c++) {
            int i = c * r->pp + d; /* looped placement: stage i on device i mod p */
            double send = (i + 1 < S && r->pp > 1) ? cost_t_transfer(&m, g, &o, d, (d + 1) % r->pp) : 0;
            double back = (i > 0 && r->pp > 1) ? cost_t_transfer(&m, g, &o, d, (d + r->pp - 1) % r->pp) : 0;
            t += st[i].t_f + st[i].t_b + st[i].t_w + send + back;
            params += st[i].params;
        }
        dev_max = fmax(dev_max, t);
        params_max = fmax(params_max, params);
    }
    int micro = r->batch / (dp * r->micro);
    double T = (micro + (double)(r->pp - 1) / r->chunks) * dev_max;
    if (dp > 1) /* ring all-reduce of fp32 gradients over the nodes, after the backward */
        T += 2.0 * (dp - 1) / dp * 4 * params_max / gpu_inter_node_bw(g);
    return T;
}

static double paper_flops(const run_row *r)
{
    double B = r->batch, s = r->seq, l = r->layers, h = r->hidden, V = r->vocab;
    return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
}

/* Log error of row r's prediction (predicted over measured, time rows
 * inverted so that > 0 always means "predicted faster"); NAN on error. */
static double log_error(const run_row *r, const zb_gpu *g, double *pred, double *meas)
{
    double T = predict(r, g);
    if (!(T > 0))
        return NAN;
    if (r->measured_s > 0) {
        *pred = T;
        *meas = r->measured_s;
        return log(r->measured_s / T);
    }
    *pred = paper_flops(r) / (T * r->gpus) / 1e12;
    *meas = r->measured_tflops;
    return log(*pred / r->measured_tflops);
}

static void with_eff(zb_gpu *g, const zb_gpu *base, double eff)
{
    *g = *base;
    g->efficiency = eff;
    g->w_efficiency = gpu_w_efficiency(base) * eff / base->efficiency;
    if (g->w_efficiency > 1)
        g->w_efficiency = 1;
}

/* Summed squared log error over the fit rows (odd Narayanan rows). */
static double fit_loss(const run_row *rows, int n, const zb_gpu *base, double eff)
{
    zb_gpu g;
    with_eff(&g, base, eff);
    double sum = 0, p, q;
    int k = 0;
    for (int i = 0; i < n; i++)
        if (!strncmp(rows[i].source, "narayanan", 9) && k++ % 2 == 0) {
            double e = log_error(&rows[i], &g, &p, &q);
            sum += e * e;
        }
    return sum;
}

int main(int argc, char **argv)
{
    const char *path = "bench/calibration/megatron_runs.csv";
    int fit = 0;
    double eff = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--fit"))
            fit = 1;
        else if (!strcmp(argv[i], "--eff") && i + 1 < argc)
            eff = atof(argv[++i]);
        else
            path = argv[i];
    }
    static run_row rows[MAX_ROWS];
    int n = read_rows(path, rows, MAX_ROWS);
    if (n <= 0)
        return 1;
    zb_gpu base;
    gpu_preset("A100-80G", &base, NULL);
    if (eff <= 0)
        eff = base.efficiency;
    if (fit) { /* golden-section search on [0.3, 0.95] */
        double a = 0.3, b = 0.95, phi = (sqrt(5) - 1) / 2;
        double c = b - phi * (b - a), d = a + phi * (b - a);
        for (int it = 0; it < 60; it++) {
            if (fit_loss(rows, n, &base, c) < fit_loss(rows, n, &base, d))
                b = d;
            else
                a = c;
            c = b - phi * (b - a);
            d = a + phi * (b - a);
        }
        eff = (a + b) / 2;
    }
    zb_gpu g;
    with_eff(&g, &base, eff);
    printf("A100-80G F/B efficiency %.3f, W %.3f (%s)\n", g.efficiency, g.w_efficiency,
           fit ? "fitted on the odd Narayanan rows (marked fit)" : "as given");
    printf("%-15s %-14s %-22s %10s %10s %7s\n", "source", "row", "layout", "predicted", "measured", "error");
    int k = 0;
    double worst_held = 0;
    for (int i = 0; i < n; i++) {
        const run_row *r = &rows[i];
        double p = 0, q = 0;
        double e = log_error(r, &g, &p, &q);
        int fit_row = !strncmp(r->source, "narayanan", 9) && k++ % 2 == 0;
        char lay[64];
        snprintf(lay, sizeof lay, "tp%d%s pp%d v%d dp%d b%d", r->tp, r->sp ? "+sp" : "", r->pp, r->chunks,
                 r->gpus / (r->tp * r->pp), r->micro);
        double rel = r->measured_s > 0 ? p / q - 1 : p / q - 1;
        printf("%-15s %-14s %-22s %9.2f%s %9.2f%s %+6.1f%%%s\n", r->source, r->name, lay, p,
               r->measured_s > 0 ? "s" : "T", q, r->measured_s > 0 ? "s" : "T", 100 * rel,
               fit_row && fit ? " fit" : "");
        if (!(fit_row && fit) && isfinite(e))
            worst_held = fmax(worst_held, fabs(rel));
    }
    printf("largest error on rows not fitted: %.1f%% (T = TFLOP/s per GPU, s = seconds per iteration)\n",
           100 * worst_held);
    return 0;
}
