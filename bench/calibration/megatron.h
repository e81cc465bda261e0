/*
 * megatron.h: the cost model re-costing Megatron-LM's measured runs (issue
 * 27), shared by bench/bench_calibration.c, which prints the table, and
 * tests/solver/test_calibration.c, which holds every row within 10%.
 *
 * A row is one published run with its layout fixed: tensor parallel t
 * with or without sequence parallelism, pipeline p with v chunks, data
 * parallel d, and a recompute level.  Two families, told apart by the
 * source column:
 * - A100 (bench/calibration/megatron_runs.csv: Korthikanti et al. 2022
 *   Table 3, Narayanan et al. 2021 Table 1): no flash attention, TP
 *   collectives not overlapped and the fp32 gradients all-reduced after
 *   the backward, as those runs did;
 * - H100 (bench/calibration/megatron_h100_runs.csv: the Megatron-LM
 *   README's Megatron-Core r0.8.0 weak-scaling table, source
 *   "mcore-..."): flash attention, --tp-comm-overlap, the distributed
 *   optimizer (ZeRO-1 over d) with its gradient reduce-scatter and
 *   parameter all-gather overlapped (--overlap-grad-reduce,
 *   --overlap-param-gather), so no data-parallel term; untied embedding.
 * The iteration is Megatron's (interleaved) 1F1B on the cost model's
 * per-stage F, B and W times (src/cost_model.h):
 *     T = (m + (p - 1) / v) * (slowest device's F + B + W per micro-batch)
 *       + the optimizer step on the fullest device (cost_t_optimizer_step)
 *       + A100 only: the data-parallel all-reduce of fp32 gradients
 * (Narayanan et al. 2021, section 2.2: the interleaved schedule's bubble
 * is (p - 1)/v of a micro-batch's time; their Megatron reduced gradients
 * after the backward and then stepped).  Throughput is each source's own
 * FLOP count over T and the GPUs: the papers' 96 B s l h^2 (1 + s/(6h) +
 * V/(16 l h)), which counts full recompute's second forward, and
 * Megatron-Core r0.8.0's num_floating_point_operations, 72 B s l h^2
 * (1 + s/(6h) + V/(12 l h)) for these shapes, which counts none.
 *
 * Which rows fit the efficiency: the odd-numbered scored rows of each
 * GPU's throughput table (A100: Narayanan's 1.7B, 7.5B, 39.1B, 145.6B,
 * 529.6B; H100: Megatron-Core's 7.1B and 32B, of the three scored rows
 * 7.1B, 16B and 32B); every other row is held out.  Every A100 row is
 * scored; of the H100 rows only those with pp 1 and tp > 1 (calib_row's
 * scored has why).
 */
#ifndef ZB_BENCH_CALIBRATION_MEGATRON_H
#define ZB_BENCH_CALIBRATION_MEGATRON_H

#include "src/model.h"

#define CALIB_MAX_ROWS 64 /* rows one CSV may hold */

/* One measured run. */
typedef struct calib_row {
    char source[32];        /* "korthikanti-t3", "narayanan-t1" or "mcore-r0.8-h100" */
    char name[32];          /* the paper's label: "22B full", "1.7B" */
    int heads, hidden, layers, vocab, seq; /* the GPT model's shape */
    int tp, pp, gpus;       /* tensor and pipeline sizes; data parallel is gpus / (tp pp) */
    int batch, micro;       /* global batch and micro-batch, sequences */
    int chunks;             /* interleaved schedule's virtual stages per device */
    int recompute;          /* COST_RC_NONE, COST_RC_ATTN (Korthikanti's selective) or COST_RC_FULL */
    int sp;                 /* 1: sequence parallelism */
    double measured_s;      /* seconds per iteration, 0 when not published */
    double measured_tflops; /* TFLOP/s per GPU, 0 when not published */
    int mcore;              /* 1: a Megatron-Core run (flash attention, TP and DP collectives
                             * overlapped, distributed optimizer, untied embedding, the
                             * MFU FLOP count); 0: the 2021-22 papers' Megatron-LM */
    int scored;             /* 1: held to the 10% bound; 0: reported only (a Megatron-Core row
                             * with pp > 1, whose interleaving is unpublished, or tp 1,
                             * whose exposed DP collectives are not priced) */
    int fit;                /* 1: the efficiency is fitted on this row */
} calib_row;

/* Reads up to cap rows of the CSV at path into rows and marks the fit
 * rows (the odd-numbered throughput rows of the file).  Returns the
 * count, or -1 with a message in err. */
int calib_read(const char *path, calib_row *rows, int cap, zb_err *err);

/* Seconds per iteration of row r on GPU g as the cost model prices it;
 * -1 with a message in err when the cost model refuses the layout. */
double calib_predict(const calib_row *r, const zb_gpu *g, zb_err *err);

/* Predicted and measured figures of row r in the unit the paper publishes
 * (seconds per iteration, or TFLOP/s per GPU) and their relative error,
 * predicted / measured - 1 in that unit (a time row below 0 and a
 * throughput row above 0 are predicted too fast).  Returns the error, or
 * NAN when the prediction failed. */
double calib_error(const calib_row *r, const zb_gpu *g, double *pred, double *meas);

/* One 22B layer's forward and backward (B + W) milliseconds as the cost
 * model prices them (b 4, s 2048, t 8, no flash attention, collectives
 * exposed) under sequence parallelism sp and recompute level rc
 * (COST_RC_*), for Korthikanti et al. 2022 Table 4's five settings.
 * Returns 0, or -1 with a message in err. */
int calib_22b_layer(const zb_gpu *g, int sp, int rc, double *f_ms, double *b_ms, zb_err *err);

/* Korthikanti et al. 2022 Table 4: one 22B layer's measured forward and
 * backward milliseconds in five settings, the reference calib_22b_layer
 * is compared with (bench_calibration prints it, test_calibration holds
 * it within 5%). */
typedef struct calib_layer_row {
    const char *name; /* the setting, as the paper names it */
    int sp;           /* 1: sequence parallelism */
    int rc;           /* recompute level (COST_RC_*) */
    double f_ms;      /* measured forward */
    double b_ms;      /* measured backward (B + W) */
} calib_layer_row;
#define CALIB_TABLE4_ROWS 5
extern const calib_layer_row calib_korthikanti_table4[CALIB_TABLE4_ROWS];

/* A100's measured W over F/B efficiency (0.78 / 0.672: the zero-bubble
 * paper's Table 9 T_W over the fitted F/B).  No H100 measurement splits
 * W from F and B, so the H100 fit moves W with F/B in this ratio rather
 * than leave W at an assumed figure while F/B is fitted: W's GEMMs have
 * B's shapes, and a W far faster than B would skew zero-bubble plans. */
#define CALIB_A100_W_RATIO (0.78 / 0.672)

/* g = base with F/B efficiency eff and W efficiency eff * w_ratio, or
 * base's W efficiency when w_ratio is 0 (A100's, measured on the
 * zero-bubble paper's Table 9 T_W, which has no memory-bound term). */
void calib_with_eff(zb_gpu *g, const zb_gpu *base, double eff, double w_ratio);

/* The F/B efficiency in [0.3, 0.95] that minimises the summed squared
 * log error over the fit rows (golden-section search), W set as
 * calib_with_eff sets it for w_ratio. */
double calib_fit(const calib_row *rows, int n, const zb_gpu *base, double w_ratio);

#endif
