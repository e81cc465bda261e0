/*
 * cli_table.c: column-sized tables for human output (cli_table.h).
 */
#include "src/cli/cli_table.h"

#include <assert.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

void cli_table_init(cli_table *t, const char *align)
{
    memset(t, 0, sizeof *t);
    t->n_cols = (int)strlen(align);
    assert(t->n_cols >= 1 && t->n_cols <= CLI_TABLE_MAX_COLS);
    memcpy(t->align, align, (size_t)t->n_cols);
}

static void push(cli_table *t, char *s)
{
    if (!s || t->oom) {
        free(s);
        t->oom = 1;
        return;
    }
    if (t->n_cells == t->cap) {
        int cap = t->cap ? 2 * t->cap : 64;
        char **c = realloc(t->cell, sizeof *c * (size_t)cap);
        if (!c) {
            free(s);
            t->oom = 1;
            return;
        }
        t->cell = c;
        t->cap = cap;
    }
    t->cell[t->n_cells++] = s;
}

void cli_table_add(cli_table *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s) {
        va_start(ap, fmt);
        vsnprintf(s, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    push(t, s);
}

void cli_table_end_row(cli_table *t)
{
    while (!t->oom && t->n_cells % t->n_cols != 0) {
        char *s = malloc(1);
        if (s)
            s[0] = '\0';
        push(t, s);
    }
}

int cli_table_print(const cli_table *t, FILE *out, int indent)
{
    if (t->oom)
        return -1;
    size_t width[CLI_TABLE_MAX_COLS] = { 0 };
    for (int i = 0; i < t->n_cells; i++) {
        size_t n = strlen(t->cell[i]);
        if (n > width[i % t->n_cols])
            width[i % t->n_cols] = n;
    }
    int rows = (t->n_cells + t->n_cols - 1) / t->n_cols;
    for (int r = 0; r < rows; r++) {
        /* The last non-empty cell of the row: nothing is padded after it. */
        int last = -1;
        for (int c = 0; c < t->n_cols && r * t->n_cols + c < t->n_cells; c++)
            if (t->cell[r * t->n_cols + c][0])
                last = c;
        fprintf(out, "%*s", indent, "");
        for (int c = 0; c <= last; c++) {
            const char *s = t->cell[r * t->n_cols + c];
            int w = (int)width[c];
            if (c > 0)
                fputs("  ", out);
            if (t->align[c] == 'r')
                fprintf(out, "%*s", w, s);
            else if (c == last)
                fputs(s, out);
            else
                fprintf(out, "%-*s", w, s);
        }
        fputc('\n', out);
    }
    return 0;
}

void cli_table_free(cli_table *t)
{
    for (int i = 0; i < t->n_cells; i++)
        free(t->cell[i]);
    free(t->cell);
    memset(t, 0, sizeof *t);
}
