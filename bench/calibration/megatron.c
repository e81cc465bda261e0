/*
 * megatron.c: the cost model re-costing Megatron-LM's measured runs
 * (megatron.h has the iteration formula and which rows are fitted).
 *
 * Each row becomes a GPT model (the zero-bubble presets' shape: GeLU 4h
 * MLP, learned positions, dropout; the embedding tied for the papers'
 * runs, untied for Megatron-Core's, whose published sizes count two
 * V h matrices) and a cost_options with the run's layout, and
 * cost_stages prices its virtual stages.  The device time is the sum of
 * its chunks' F, B and W and the pipeline sends each chunk makes; the
 * iteration adds the interleaved bubble, the optimizer step and, for the
 * papers' runs, the data-parallel gradient all-reduce.  Nothing here is
 * tuned per row: the only free figure is the GPU's F/B efficiency,
 * fitted on the fit rows by calib_fit.
 */
#include "bench/calibration/megatron.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/cost_model.h"

#define CALIB_MAX_STAGES 4096 /* p * v of the largest row is 64 */

int calib_read(const char *path, calib_row *rows, int cap, zb_err *err)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return zb_fail(err, "cannot open %s", path);
    char line[512];
    int n = 0, fit_candidates = 0;
    while (fgets(line, sizeof line, f) && n < cap) {
        if (line[0] == '#' || line[0] == '\n')
            continue;
        calib_row *r = &rows[n];
        memset(r, 0, sizeof *r);
        char *fld[17];
        int k = 0;
        for (char *p = strtok(line, ",\n"); p && k < 17; p = strtok(NULL, ",\n"))
            fld[k++] = p;
        /* strtok skips empty fields: of the last two (seconds, TFLOP/s)
         * each row gives one, so a row has 16 */
        if (k != 16) {
            fclose(f);
            return zb_fail(err, "%s: a row has %d fields, not 16", path, k);
        }
        snprintf(r->source, sizeof r->source, "%s", fld[0]);
        snprintf(r->name, sizeof r->name, "%s", fld[1]);
        r->heads = atoi(fld[2]), r->hidden = atoi(fld[3]), r->layers = atoi(fld[4]);
        r->vocab = atoi(fld[5]), r->seq = atoi(fld[6]), r->tp = atoi(fld[7]), r->pp = atoi(fld[8]);
        r->gpus = atoi(fld[9]), r->batch = atoi(fld[10]), r->micro = atoi(fld[11]), r->chunks = atoi(fld[12]);
        r->recompute = !strcmp(fld[13], "selective") ? COST_RC_ATTN
                       : !strcmp(fld[13], "full")    ? COST_RC_FULL
                       : !strcmp(fld[13], "none")    ? COST_RC_NONE
                                                     : -1;
        r->sp = atoi(fld[14]);
        r->mcore = !strncmp(r->source, "mcore", 5);
        if (!strncmp(r->source, "korthikanti", 11))
            r->measured_s = atof(fld[15]); /* Table 3 publishes seconds */
        else
            r->measured_tflops = atof(fld[15]); /* the other tables publish TFLOP/s per GPU */
        /* Megatron-Core's rows are scored only where the cost model prices
         * everything that sets their time: with pp > 1 the README leaves
         * out the interleaving (v), which moves the bubble by up to
         * (p - 1)/m; with tp 1 the distributed optimizer's gradient
         * reduce-scatter is the whole model's, and the cost model has no
         * term for the exposed tail of Megatron-Core's overlapped DP
         * collectives (bench/README.md) */
        r->scored = !r->mcore || (r->pp == 1 && r->tp > 1);
        /* every other scored throughput row fits, the first included:
         * spread over the sizes, so held-out rows sit between fitted ones */
        r->fit = r->scored && r->measured_tflops > 0 && fit_candidates++ % 2 == 0;
        if (r->recompute < 0 || r->heads <= 0 || r->hidden <= 0 || r->layers <= 0 || r->tp <= 0 || r->pp <= 0 ||
            r->chunks <= 0 || r->micro <= 0 || r->gpus % (r->tp * r->pp) ||
            (long)r->pp * r->chunks > CALIB_MAX_STAGES || !(r->measured_s > 0 || r->measured_tflops > 0)) {
            fclose(f);
            return zb_fail(err, "%s: row %s is malformed", path, r->name);
        }
        n++;
    }
    fclose(f);
    return n;
}

double calib_predict(const calib_row *r, const zb_gpu *g, zb_err *err)
{
    zb_model m;
    if (model_preset("28.3B", &m, err) < 0) /* GPT-style: GeLU 4h MLP, tied embedding, learned positions */
        return -1;
    snprintf(m.name, sizeof m.name, "%s", r->name);
    m.n_heads = m.n_kv_heads = r->heads;
    m.d_model = r->hidden;
    m.d_ff = 4 * r->hidden;
    m.n_layers = r->layers;
    m.vocab = r->vocab;
    m.seq_len = r->seq;
    m.micro_batch = r->micro;
    m.tied_embedding = !r->mcore;
    int dp = r->gpus / (r->tp * r->pp), S = r->pp * r->chunks;
    cost_options o;
    cost_options_default(&o);
    /* the papers' runs predate flash attention and --tp-comm-overlap;
     * Megatron-Core's ran Transformer Engine (assumed fused attention)
     * with --tp-comm-overlap and the distributed optimizer (published) */
    o.flash_attention = r->mcore;
    o.tp_comm_overlap = r->mcore;
    o.zero1_dp = r->mcore ? dp : 1;
    o.recompute = r->recompute;
    o.layout.tp = r->tp;
    o.layout.sp = r->sp;
    o.layout.pp = r->pp;
    o.layout.dp = dp;
    o.layout.chunks = r->chunks;
    int per_node = gpu_per_node(g);
    o.devices_per_node = r->tp * dp >= per_node ? 1 : per_node / (r->tp * dp);
    static int layers[CALIB_MAX_STAGES];
    static cost_stage st[CALIB_MAX_STAGES];
    for (int i = 0; i < S; i++) /* Megatron's uniform split */
        layers[i] = r->layers / S + (i < r->layers % S);
    o.layers = layers;
    if (cost_stages(&m, g, &o, S, r->pp == 1, st, err) < 0)
        return -1;
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
    T += cost_t_optimizer_step(&m, g, &o, params_max); /* after the drain, on the fullest device */
    /* Megatron-Core overlaps the gradient reduce-scatter with the backward
     * and the parameter all-gather with the forward (published flags), so
     * no term; the papers' Megatron ran a ring all-reduce of fp32
     * gradients over the nodes after the backward */
    if (dp > 1 && !r->mcore)
        T += 2.0 * (dp - 1) / dp * 4 * params_max / gpu_inter_node_bw(g);
    return T;
}

int calib_22b_layer(const zb_gpu *g, int sp, int rc, double *f_ms, double *b_ms, zb_err *err)
{
    zb_model m;
    if (model_preset("28.3B", &m, err) < 0)
        return -1;
    m.n_heads = m.n_kv_heads = 64;
    m.d_model = 6144;
    m.d_ff = 4 * 6144;
    m.n_layers = 48;
    m.vocab = 51200;
    m.seq_len = 2048;
    m.micro_batch = 4;
    cost_options o;
    cost_options_default(&o);
    o.flash_attention = 0;
    o.tp_comm_overlap = 0;
    o.recompute = rc;
    o.layout.tp = 8;
    o.layout.sp = sp;
    cost_part layer, embedding, head;
    if (cost_parts(&m, g, &o, &layer, &embedding, &head, err) < 0)
        return -1;
    *f_ms = 1e3 * layer.t_f;
    *b_ms = 1e3 * (layer.t_b + layer.t_w);
    return 0;
}

/* FLOPs per iteration as the source counts them, to turn its TFLOP/s per
 * GPU back into seconds.  The papers' (Narayanan et al. 2021, equation 3)
 * count full recompute's second forward; Megatron-Core r0.8.0's
 * num_floating_point_operations (megatron/training/training.py) counts
 * model FLOPs only: 12 B s l h^2 ((2 + s/h) + 4 + V/(2 l h)) for
 * multi-head attention, kv_channels h/a and a 4h GeLU MLP. */
static double paper_flops(const calib_row *r)
{
    double B = r->batch, s = r->seq, l = r->layers, h = r->hidden, V = r->vocab;
    if (r->mcore)
        return 12 * B * s * l * h * h * (2 + s / h + 4 + V / (2 * l * h));
    return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
}

double calib_error(const calib_row *r, const zb_gpu *g, double *pred, double *meas)
{
    zb_err err = { { 0 } };
    double T = calib_predict(r, g, &err);
    if (!(T > 0))
        return NAN;
    if (r->measured_s > 0) {
        *pred = T;
        *meas = r->measured_s;
    } else {
        *pred = paper_flops(r) / (T * r->gpus) / 1e12;
        *meas = r->measured_tflops;
    }
    return *pred / *meas - 1;
}

void calib_with_eff(zb_gpu *g, const zb_gpu *base, double eff, double w_ratio)
{
    *g = *base;
    g->efficiency = eff;
    g->w_efficiency = w_ratio > 0 ? fmin(1, eff * w_ratio) : gpu_w_efficiency(base);
}

/* Summed squared log error over the fit rows at F/B efficiency eff. */
static double fit_loss(const calib_row *rows, int n, const zb_gpu *base, double eff, double w_ratio)
{
    zb_gpu g;
    calib_with_eff(&g, base, eff, w_ratio);
    double sum = 0, p, q;
    for (int i = 0; i < n; i++)
        if (rows[i].fit) {
            double e = log1p(calib_error(&rows[i], &g, &p, &q));
            sum += e * e;
        }
    return sum;
}

double calib_fit(const calib_row *rows, int n, const zb_gpu *base, double w_ratio)
{
    double a = 0.3, b = 0.95, phi = (sqrt(5) - 1) / 2;
    double c = b - phi * (b - a), d = a + phi * (b - a);
    for (int it = 0; it < 60; it++) {
        if (fit_loss(rows, n, base, c, w_ratio) < fit_loss(rows, n, base, d, w_ratio))
            b = d;
        else
            a = c;
        c = b - phi * (b - a);
        d = a + phi * (b - a);
    }
    return (a + b) / 2;
}

const calib_layer_row calib_korthikanti_table4[CALIB_TABLE4_ROWS] = {
    { "no recompute", 0, COST_RC_NONE, 7.7, 11.9 },
    { "sequence parallel", 1, COST_RC_NONE, 7.2, 11.8 },
    { "full recompute", 0, COST_RC_FULL, 7.7, 19.5 },
    { "selective", 0, COST_RC_ATTN, 7.7, 13.2 },
    { "selective + SP", 1, COST_RC_ATTN, 7.2, 13.1 },
};

