/*
 * compare_note.h: the one line `zbsched render --compare` prints about a
 * prediction and its measurement.
 *
 * The picture shows shapes; the loop profile -> plan -> run -> check needs
 * numbers.  When one file is predicted and the other measured, the line
 * gives both iteration times (makespans: first op start to last op end),
 * their ratio, and, when both are known in bytes, the peak activation
 * memory predicted (simulated from the plan's memory deltas) against the
 * peak measured by the runtime (the trace's meta.measured, written by
 * `run --trace`), each on the device where it peaks.  When the
 * time units cannot share a scale (a prediction in abstract units from
 * `gen`), the line says so and how to get one: plan with measured costs.
 */
#ifndef ZB_CLI_COMPARE_NOTE_H
#define ZB_CLI_COMPARE_NOTE_H

#include <stdio.h>

#include "src/sched.h"

/* Prints the line for predicted file pred and measured file meas on out.
 * Returns 0, or -1 with err set when a file cannot be simulated. */
int compare_note_print(const sched_t *pred, const sched_t *meas, FILE *out, zb_err *err);

#endif
