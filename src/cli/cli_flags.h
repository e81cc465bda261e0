/*
 * cli_flags.h: flag values more than one command parses, parsed once.
 *
 * Each helper reads one flag's value the way every command that takes the
 * flag must (the same range, the same message), so that `run` and
 * `profile` cannot drift apart on what `--device` accepts.  They return 0,
 * or -1 with err naming the flag (the caller turns it into a usage line).
 */
#ifndef ZB_CLI_FLAGS_H
#define ZB_CLI_FLAGS_H

#include "src/err.h"

/* --device cpu|cuda: *cuda gets 0 or 1. */
int cli_flag_device(const char *text, int *cuda, zb_err *err);

/* --gpu N: a CUDA device index, 0..1023. */
int cli_flag_gpu(const char *text, long *gpu, zb_err *err);

/* --seed S: 0 .. 2^63-1. */
int cli_flag_seed(const char *text, long *seed, zb_err *err);

/* --batch-size B: sequences per micro-batch, 1..65536. */
int cli_flag_batch(const char *text, long *batch, zb_err *err);

/* --max-input SIZE (src/size.h: "256MB", "1G"): sets the largest input
 * file read (src/input.h) for the rest of the process. */
int cli_flag_max_input(const char *text, zb_err *err);

#endif
