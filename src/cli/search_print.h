/*
 * search_print.h: the human output of `zbsched search` (the header line,
 * the ranked table, the why block, the dropped candidates, the line on
 * the written plan and the nothing-fits line) and its JSON
 * (search_json.c).  The search itself and the content of the why block
 * are solver/search.h's; these only format.
 */
#ifndef ZB_CLI_SEARCH_PRINT_H
#define ZB_CLI_SEARCH_PRINT_H

#include "solver/search.h"

/* What the command knows beyond the options: how --mem was set. */
typedef struct search_print_ctx {
    int mem_default; /* 1: --mem was not given and the limit is the GPU's memory */
} search_print_ctx;

/* The header, the table of the first `rows` fits, the counts, the legend,
 * the why block and (verbose) every dropped candidate with its reason. */
void search_print_table(const search_options *o, const search_result *r, const search_print_ctx *x, int rows,
                        int verbose);

/* The "best: ..." line for the written plan best (annotated), with its
 * peak memory per device and where its memory layers went. */
void search_print_best(const search_options *o, const search_candidate *best, const char *output,
                       const char *svg);

/* The one line on stderr when nothing fits: the smallest simulated peak
 * and the --mem that fits it (and another target whose plan fits), or,
 * when every depth was left out for its static memory, what that alone
 * takes.  Returns 1 (the command's exit status). */
int search_print_nothing_fits(const search_options *o, const search_result *r);

/* For each of zbsched's paths (cpu, cuda, mpi) that cannot run the
 * winner r->c[0], one line on stdout: what the path lacks, and the best
 * plan it can run (solver/search_runs_on.h), or that none fits. */
void search_print_runs_on(const search_options *o, const search_result *r);

/* Every candidate, the baseline, the why figures and rows, each depth's
 * best and each target's best as one JSON document on stdout.  Returns 0,
 * or 1 after one line on stderr when memory runs out. */
int search_print_json(const search_options *o, const search_result *r);

#endif
