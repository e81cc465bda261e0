/*
 * megatron.h: the cost model re-costing Megatron-LM's measured runs (issue
 * 27), shared by bench/bench_calibration.c, which prints the table, and
 * tests/solver/test_calibration.c, which holds every row within 10%.
 *
 * A row is one published run (bench/calibration/megatron_runs.csv:
 * Korthikanti et al. 2022 Table 3, Narayanan et al. 2021 Table 1) with its
 * layout fixed: tensor parallel t with or without sequence parallelism,
 * pipeline p with v chunks, data parallel d, full or selective recompute,
 * no flash attention and TP collectives not overlapped, as those runs had
 * neither.  The iteration is Megatron's (interleaved) 1F1B on the cost
 * model's per-stage F, B and W times (src/cost_model.h):
 *     T = (m + (p - 1) / v) * (slowest device's F + B + W per micro-batch)
 *       + the optimizer step on the fullest device (cost_t_optimizer_step)
 *       + the data-parallel all-reduce of fp32 gradients, not overlapped
 * (Narayanan et al. 2021, section 2.2: the interleaved schedule's bubble
 * is (p - 1)/v of a micro-batch's time; their Megatron reduced gradients
 * after the backward and then stepped).  Throughput is the papers' own
 * FLOP count, 96 B s l h^2 (1 + s/(6h) + V/(16 l h)), over T and the GPUs.
 *
 * Which rows fit the efficiency: the odd-numbered Narayanan rows (1.7B,
 * 7.5B, 39.1B, 145.6B, 529.6B); every other row is held out.
 */
#ifndef ZB_BENCH_CALIBRATION_MEGATRON_H
#define ZB_BENCH_CALIBRATION_MEGATRON_H

#include "src/model.h"

#define CALIB_MAX_ROWS 64 /* rows one CSV may hold */

/* One measured run. */
typedef struct calib_row {
    char source[32];        /* "korthikanti-t3" or "narayanan-t1" */
    char name[32];          /* the paper's label: "22B full", "1.7B" */
    int heads, hidden, layers, vocab, seq; /* the GPT model's shape */
    int tp, pp, gpus;       /* tensor and pipeline sizes; data parallel is gpus / (tp pp) */
    int batch, micro;       /* global batch and micro-batch, sequences */
    int chunks;             /* interleaved schedule's virtual stages per device */
    int selective;          /* 1: Korthikanti's selective recompute; 0: full */
    int sp;                 /* 1: sequence parallelism */
    double measured_s;      /* seconds per iteration, 0 when not published */
    double measured_tflops; /* TFLOP/s per GPU, 0 when not published */
    int fit;                /* 1: the efficiency is fitted on this row */
} calib_row;

/* Reads up to cap rows of the CSV at path into rows and marks the fit
 * rows.  Returns the count, or -1 with a message in err. */
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

/* g = base with F/B efficiency eff; W keeps base's measured W efficiency
 * (the zero-bubble paper's Table 9 T_W, which has no memory-bound term). */
void calib_with_eff(zb_gpu *g, const zb_gpu *base, double eff);

/* The F/B efficiency in [0.3, 0.95] that minimises the summed squared
 * log error over the fit rows (golden-section search). */
double calib_fit(const calib_row *rows, int n, const zb_gpu *base);

#endif
