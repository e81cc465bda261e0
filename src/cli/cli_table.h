/*
 * cli_table.h: tables whose columns are as wide as their widest cell, for
 * the human output of the commands (search's ranked table and its list of
 * dropped candidates).  A table is filled cell by cell, row after row, and
 * printed once: each column left- or right-aligned, two spaces between
 * columns, no trailing blanks.  A row may be shorter than the others (its
 * missing cells print as nothing).  Workload: tens to thousands of rows
 * of about a dozen short cells.
 */
#ifndef ZB_CLI_TABLE_H
#define ZB_CLI_TABLE_H

#include <stdio.h>

#define CLI_TABLE_MAX_COLS 16

typedef struct cli_table {
    int n_cols;                      /* columns, 1..CLI_TABLE_MAX_COLS */
    char align[CLI_TABLE_MAX_COLS];  /* 'l' or 'r' per column */
    int n_cells;                     /* cells added so far (row-major) */
    int cap;                         /* allocated length of cell */
    char **cell;                     /* [cap] owned strings */
    int oom;                         /* 1 once an allocation failed (cells are dropped) */
} cli_table;

/* Starts a table with one column per character of align ("lrr": a left-
 * and two right-aligned columns). */
void cli_table_init(cli_table *t, const char *align);

/* Appends one cell (printf-style) to the current row; the row ends after
 * n_cols cells. */
void cli_table_add(cli_table *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Ends the current row early (its remaining cells print as nothing). */
void cli_table_end_row(cli_table *t);

/* Prints the table to out, each line after indent spaces.  Returns 0, or
 * -1 when a cell could not be stored (out of memory; nothing printed). */
int cli_table_print(const cli_table *t, FILE *out, int indent);

/* Frees the cells. */
void cli_table_free(cli_table *t);

#endif
