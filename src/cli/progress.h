/*
 * progress.h: the live one-line status of long commands on stderr.
 *
 * `gen ilp` and `search --ilp` run for seconds to minutes.  When stderr is
 * a terminal (and -q was not given) they keep one status line up to date:
 * carriage return, the text, erase-to-end-of-line; a final newline when
 * the work ends, so the last figures stay on screen.  Nothing goes to
 * stdout, and nothing at all when stderr is a file or a pipe, so logs and
 * scripts see exactly what they saw before.
 *
 * The libraries never print: the search calls its progress callbacks
 * (solver/search.h) and the ILP its solver_progress callback
 * (solver/progress.h); the functions here are those callbacks, and they
 * format and throttle.  Redraws are limited to 10 a second (GLPK calls
 * back thousands of times a second) and start only after half a second,
 * so quick commands print nothing.
 *
 * Lines:
 *   ilp: 2.1/4 s, incumbent 61, bound 57, gap 6.56%
 *   search 197/198 candidates; ilp 2/2 on b=1, recompute off: 0.5/2 s, incumbent 40316.4, bound 23877.5, gap 40.77%
 */
#ifndef ZB_CLI_PROGRESS_H
#define ZB_CLI_PROGRESS_H

#include <time.h>

#include "solver/progress.h"

typedef struct cli_progress {
    int on;                 /* 1: stderr is a terminal and not quiet */
    struct timespec start;  /* when the command's work began */
    double last_draw;       /* seconds after start of the last redraw, -1 none */
    int shown;              /* 1 while a status line is on screen without its newline */
    char what[128];         /* the leading part: "search 12/196 candidates; ilp on b=1, ..." */
} cli_progress;

/* Starts the clock; on only when stderr is a terminal and quiet is 0. */
void cli_progress_init(cli_progress *p, int quiet);

/* Sets the leading part of the line (printf format) and redraws when due. */
void cli_progress_what(cli_progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* solver_progress_fn for the ILP: ctx is a cli_progress. */
void cli_progress_solver(void *ctx, const solver_progress *sp);

/* search_options.progress: "search DONE/TOTAL candidates". */
void cli_progress_search_count(void *ctx, int done, int total);

/* search_options.progress_stage: what the search does now (the ILP's
 * configuration). */
void cli_progress_search_stage(void *ctx, const char *what);

/* Ends the line with a newline when one is on screen. */
void cli_progress_end(cli_progress *p);

#endif
