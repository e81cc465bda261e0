/*
 * eplb_weights.c: reading the expert-load matrix that `zbsched eplb` takes
 * (eplb_parse_weights in eplb.h).
 *
 * Loads come from whatever counted the tokens routed to each expert: a
 * Python script dumping a [layers, experts] tensor as JSON
 * (json.dumps(t.tolist())) or a spreadsheet-style CSV.  Both are small (a
 * DeepSeek-V3 matrix is 61 x 256 numbers, ~100 KB), so the whole text is
 * parsed in memory.  The first non-blank character picks the format: '['
 * (or '{', so that an object gets a JSON message) is JSON, anything else
 * CSV.
 *
 * Every problem is reported with its 0-based layer (row) and expert
 * (column), so a user can find the bad cell: a cell that is not a number,
 * a load that is negative or not finite (NaN, inf, or a JSON number too
 * large for a double), rows of different lengths, no rows at all.
 *
 * The JSON goes through the checks every zbsched JSON reader shares
 * (src/input.h): no NUL inside a string, no key twice in an object, and
 * nothing but blanks after the document (cJSON would stop at the end of
 * the array and silently ignore the rest).  A NUL byte anywhere in a CSV
 * is refused too, as strtod would stop at it and read "4\0junk" as 4, and
 * a cell quoted in a message has its non-printable bytes escaped, so a
 * binary file puts no raw bytes on the terminal.  The caller caps the
 * input's size (zb_read_capped).
 */
#include "solver/eplb.h"

#include "src/input.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Checks one load and names its cell on failure. */
static int check_load(double v, int row, int col, zb_err *err)
{
    if (!isfinite(v))
        return zb_fail(err, "layer %d, expert %d: load is not finite", row, col);
    if (v < 0)
        return zb_fail(err, "layer %d, expert %d: load %g is negative", row, col, v);
    return 0;
}

static int parse_json(const char *text, size_t len, double **weight, int *n_layers,
                      int *n_experts, zb_err *err)
{
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root)
        return zb_fail(err, "not valid JSON (expected an array of per-layer arrays of loads)");
    int rc = -1, rows = cJSON_GetArraySize(root), cols = 0;
    double *w = NULL;
    size_t at = (size_t)(end - text);
    while (at < len && isspace((unsigned char)text[at]))
        at++;
    if (at < len) {
        zb_fail(err, "not valid JSON: unexpected text after the array at byte %zu", at);
        goto out;
    }
    if (zb_json_check_strings(text, len, err) || zb_json_check_duplicates(root, err))
        goto out;
    if (!cJSON_IsArray(root) || rows == 0) {
        zb_fail(err, "expected a non-empty array of per-layer arrays of loads");
        goto out;
    }
    if (rows > EPLB_MAX_LAYERS) {
        zb_fail(err, "%d layers is more than the limit of %d", rows, EPLB_MAX_LAYERS);
        goto out;
    }
    cJSON *first = cJSON_GetArrayItem(root, 0);
    cols = cJSON_IsArray(first) ? cJSON_GetArraySize(first) : 0;
    if (cols == 0 || cols > EPLB_MAX_EXPERTS) {
        zb_fail(err, "layer 0: expected an array of 1..%d loads", EPLB_MAX_EXPERTS);
        goto out;
    }
    w = malloc((size_t)rows * cols * sizeof *w);
    if (!w) {
        zb_fail(err, "out of memory for %d x %d loads", rows, cols);
        goto out;
    }
    int r = 0;
    for (cJSON *row = root->child; row; row = row->next, r++) {
        if (!cJSON_IsArray(row)) {
            zb_fail(err, "layer %d: expected an array of loads", r);
            goto out;
        }
        int n = cJSON_GetArraySize(row);
        if (n != cols) {
            zb_fail(err, "layer %d: %d loads, but layer 0 has %d", r, n, cols);
            goto out;
        }
        int c = 0;
        for (cJSON *cell = row->child; cell; cell = cell->next, c++) {
            if (!cJSON_IsNumber(cell)) {
                zb_fail(err, "layer %d, expert %d: not a number", r, c);
                goto out;
            }
            if (check_load(cell->valuedouble, r, c, err))
                goto out;
            w[(size_t)r * cols + c] = cell->valuedouble;
        }
    }
    rc = 0;
out:
    cJSON_Delete(root);
    if (rc) {
        free(w);
        return -1;
    }
    *weight = w;
    *n_layers = rows;
    *n_experts = cols;
    return 0;
}

/* Whether [p, end) holds only blanks. */
static int blank(const char *p, const char *end)
{
    for (; p < end; p++)
        if (!isspace((unsigned char)*p))
            return 0;
    return 1;
}

/* Parses one CSV cell [p, end) (surrounding blanks allowed) as a number. */
static int parse_cell(const char *p, const char *end, int row, int col, double *out, zb_err *err)
{
    while (p < end && isspace((unsigned char)*p))
        p++;
    while (end > p && isspace((unsigned char)end[-1]))
        end--;
    char buf[64];
    size_t n = (size_t)(end - p);
    if (n == 0)
        return zb_fail(err, "layer %d, expert %d: empty cell", row, col);
    if (n >= sizeof buf)
        return zb_fail(err, "layer %d, expert %d: not a number", row, col);
    memcpy(buf, p, n);
    buf[n] = '\0';
    char *stop;
    errno = 0;
    double v = strtod(buf, &stop);
    if (*stop != '\0') {
        char shown[sizeof buf * 4];
        return zb_fail(err, "layer %d, expert %d: '%s' is not a number", row, col,
                       zb_escape_bytes(shown, sizeof shown, buf, n));
    }
    if (errno == ERANGE && fabs(v) > 1)
        return zb_fail(err, "layer %d, expert %d: load is not finite", row, col);
    if (check_load(v, row, col, err))
        return -1;
    *out = v;
    return 0;
}

static int parse_csv(const char *text, size_t len, double **weight, int *n_layers,
                     int *n_experts, zb_err *err)
{
    const char *end = text + len;
    int rows = 0, cols = 0;
    size_t cap = 0;
    double *w = NULL;
    const char *nul = memchr(text, '\0', len);
    if (nul) {
        int line = 1;
        for (const char *p = text; p < nul; p++)
            line += *p == '\n';
        return zb_fail(err, "line %d: a NUL byte (not a text file?)", line);
    }
    for (const char *line = text; line < end;) {
        const char *eol = memchr(line, '\n', (size_t)(end - line));
        if (!eol)
            eol = end;
        if (!blank(line, eol)) {
            if (rows >= EPLB_MAX_LAYERS) {
                free(w);
                return zb_fail(err, "more than the limit of %d layers", EPLB_MAX_LAYERS);
            }
            int c = 0;
            for (const char *cell = line;; c++) {
                const char *comma = memchr(cell, ',', (size_t)(eol - cell));
                const char *cell_end = comma ? comma : eol;
                if (rows > 0 && c >= cols) {
                    free(w);
                    return zb_fail(err, "layer %d: more loads than layer 0's %d", rows, cols);
                }
                if (c >= EPLB_MAX_EXPERTS) {
                    free(w);
                    return zb_fail(err, "layer %d: more than the limit of %d loads", rows,
                                   EPLB_MAX_EXPERTS);
                }
                size_t need = (size_t)rows * (rows ? cols : 0) + c + 1;
                if (need > cap) {
                    size_t ncap = cap ? cap * 2 : 256;
                    double *nw = realloc(w, ncap * sizeof *nw);
                    if (!nw) {
                        free(w);
                        return zb_fail(err, "out of memory reading the loads");
                    }
                    w = nw;
                    cap = ncap;
                }
                if (parse_cell(cell, cell_end, rows, c, &w[need - 1], err)) {
                    free(w);
                    return -1;
                }
                if (!comma)
                    break;
                cell = comma + 1;
            }
            if (rows == 0)
                cols = c + 1;
            else if (c + 1 != cols) {
                free(w);
                return zb_fail(err, "layer %d: %d loads, but layer 0 has %d", rows, c + 1, cols);
            }
            rows++;
        }
        line = eol + 1;
    }
    if (rows == 0) {
        free(w);
        return zb_fail(err, "no loads (expected one line of comma-separated loads per layer)");
    }
    *weight = w;
    *n_layers = rows;
    *n_experts = cols;
    return 0;
}

int eplb_parse_weights(const char *text, size_t len, double **weight, int *n_layers,
                       int *n_experts, zb_err *err)
{
    size_t i = 0;
    while (i < len && isspace((unsigned char)text[i]))
        i++;
    if (i == len)
        return zb_fail(err, "no loads: the input is empty");
    if (text[i] == '[' || text[i] == '{')
        return parse_json(text, len, weight, n_layers, n_experts, err);
    return parse_csv(text, len, weight, n_layers, n_experts, err);
}
