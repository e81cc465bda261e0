/*
 * torch_csv.c: PyTorch pipelining's compute-only CSV (torch_csv.h).
 *
 * Export is a straight walk over the lanes.  Import is two passes: the
 * first scans every cell, checks its syntax, and collects the ops in a flat
 * array while finding the shape (rows, largest stage, largest micro-batch)
 * and which row holds each stage; the second allocates the schedule once
 * the shape is known and pushes the ops.  Cells are parsed by hand: PyTorch
 * matches actions with the regex (\d+)(F|I|B|W|...)(\d*), we accept the
 * same spelling for compute actions, with spaces and tabs around them and
 * empty cells (idle slots) skipped.  Line ends may be "\n" or "\r\n"
 * (Python's csv module writes the latter).
 *
 * Expected workload: files of up to a few hundred thousand actions, written
 * by PyTorch's _dump_csv, torchtitan users or by hand.
 */
#include "src/torch_csv.h"
#include "src/parse_uint.h"
#include "src/input.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bounds on what an import may ask for, matching the JSON loader's. */
#define CSV_MAX_ROWS 65536
#define CSV_MAX_STAGE (1 << 20)
#define CSV_MAX_MICRO (1 << 24)

/* The CSV letter of each op kind: our B is PyTorch's I (input gradient),
 * our fused BW is PyTorch's B (full backward). */
static const char kind_letter[OP_KIND_COUNT] = { 'F', 'I', 'W', 'B' };

char *torch_csv_write(const sched_t *s)
{
    size_t cap = 64, len = 0;
    for (int d = 0; d < s->n_devices; d++)
        cap += (size_t)s->dev[d].n_ops * 24 + 2;
    char *out = malloc(cap);
    if (!out)
        return NULL;
    for (int d = 0; d < s->n_devices; d++) {
        const sched_lane *l = &s->dev[d];
        for (int i = 0; i < l->n_ops; i++) {
            sched_op op = l->ops[i];
            len += (size_t)snprintf(out + len, cap - len, "%s%d%c%d", i ? "," : "",
                                    (int)op.stage, kind_letter[op.kind], (int)op.mb);
        }
        out[len++] = '\n';
    }
    out[len] = '\0';
    return out;
}

/* One action collected by the first pass. */
typedef struct csv_action {
    int row;     /* rank (device) */
    int stage;   /* virtual stage */
    int mb;      /* micro-batch */
    uint8_t kind; /* op_kind */
} csv_action;

static int is_comm_action(const char *p, size_t n)
{
    static const char *const names[] = { "UNSHARD", "RESHARD", "REDUCE_GRAD", "SEND_F",
                                         "RECV_F", "SEND_B", "RECV_B" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (n >= strlen(names[i]) && !memcmp(p, names[i], strlen(names[i])))
            return 1;
    return 0;
}

/* A cell quoted for an error message: at most 40 bytes, non-printable
 * bytes as \xHH so that a binary file echoes nothing raw to the terminal. */
typedef struct cell_text {
    char s[40 * 4 + 1]; /* escaped text, NUL-terminated */
} cell_text;

static const char *quote_cell(cell_text *q, const char *p, size_t n)
{
    return zb_escape_bytes(q->s, sizeof q->s, p, n > 40 ? 40 : n);
}

/* Parses one trimmed, non-empty cell [p, end). */
static int parse_cell(const char *p, const char *end, int row, int col, csv_action *a, zb_err *err)
{
    const char *cell = p;
    cell_text q;
    quote_cell(&q, cell, (size_t)(end - p));
    if (zb_parse_uint(&p, end, &a->stage))
        return zb_fail(err, "row %d, cell %d ('%s'): expected <stage><type><micro-batch>, e.g. 0F3",
                       row, col, q.s);
    if (p < end && is_comm_action(p, (size_t)(end - p)))
        return zb_fail(err, "row %d, cell %d ('%s'): communication actions are not supported "
                       "(compute-only CSV)", row, col, q.s);
    int kind = -1;
    if (p < end) {
        switch (*p) {
        case 'F': kind = OP_F; break;
        case 'I': kind = OP_B; break;
        case 'W': kind = OP_W; break;
        case 'B': kind = OP_BW; break;
        }
    }
    if (kind < 0)
        return zb_fail(err, "row %d, cell %d ('%s'): unknown action type (expected F, I, W or B)",
                       row, col, q.s);
    p++;
    if (zb_parse_uint(&p, end, &a->mb) || p != end)
        return zb_fail(err, "row %d, cell %d ('%s'): expected <stage><type><micro-batch>, e.g. 0F3",
                       row, col, q.s);
    if (a->stage >= CSV_MAX_STAGE || a->mb >= CSV_MAX_MICRO)
        return zb_fail(err, "row %d, cell %d ('%s'): stage or micro-batch too large",
                       row, col, q.s);
    a->kind = (uint8_t)kind;
    a->row = row;
    return 0;
}

/* Growable arrays of the first pass. */
typedef struct csv_scan {
    csv_action *acts; /* [n_acts] in file order */
    long n_acts;      /* actions collected */
    long cap_acts;    /* allocated length of acts */
    int *stage_row;   /* [cap_stages] row holding each stage, -1 when none yet */
    int cap_stages;   /* allocated length of stage_row */
    int max_stage;    /* largest stage index seen, -1 when none */
    int max_mb;       /* largest micro-batch seen, -1 when none */
} csv_scan;

static int scan_add(csv_scan *sc, const csv_action *a, int col, zb_err *err)
{
    if (sc->n_acts == sc->cap_acts) {
        long cap = sc->cap_acts ? sc->cap_acts * 2 : 1024;
        csv_action *n = realloc(sc->acts, sizeof *n * (size_t)cap);
        if (!n)
            return zb_fail(err, "out of memory reading the CSV");
        sc->acts = n;
        sc->cap_acts = cap;
    }
    if (a->stage >= sc->cap_stages) {
        int cap = sc->cap_stages ? sc->cap_stages : 64;
        while (cap <= a->stage)
            cap *= 2;
        int *n = realloc(sc->stage_row, sizeof *n * (size_t)cap);
        if (!n)
            return zb_fail(err, "out of memory reading the CSV");
        for (int i = sc->cap_stages; i < cap; i++)
            n[i] = -1;
        sc->stage_row = n;
        sc->cap_stages = cap;
    }
    int held = sc->stage_row[a->stage];
    if (held >= 0 && held != a->row)
        return zb_fail(err, "row %d, cell %d (%d%c%d): stage %d is already on row %d; "
                       "a stage must live on one rank", a->row, col, a->stage,
                       kind_letter[a->kind], a->mb, a->stage, held);
    sc->stage_row[a->stage] = a->row;
    sc->acts[sc->n_acts++] = *a;
    if (a->stage > sc->max_stage)
        sc->max_stage = a->stage;
    if (a->mb > sc->max_mb)
        sc->max_mb = a->mb;
    return 0;
}

static int scan_text(const char *text, size_t len, csv_scan *sc, int *n_rows, zb_err *err)
{
    const char *p = text, *end = text + len;
    int row = 0, last_busy = -1, idle = 0;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        const char *line_end = eol ? eol : end;
        if (line_end > p && line_end[-1] == '\r')
            line_end--;
        int col = 0;
        const char *c = p;
        for (;;) {
            const char *comma = memchr(c, ',', (size_t)(line_end - c));
            const char *cend = comma ? comma : line_end;
            const char *a = c, *b = cend;
            while (a < b && (*a == ' ' || *a == '\t'))
                a++;
            while (b > a && (b[-1] == ' ' || b[-1] == '\t'))
                b--;
            if (a < b) {
                csv_action act;
                if (row >= CSV_MAX_ROWS)
                    return zb_fail(err, "more than %d rows", CSV_MAX_ROWS);
                if (parse_cell(a, b, row, col, &act, err) || scan_add(sc, &act, col, err))
                    return -1;
                if (last_busy != row) {
                    idle += row - last_busy - 1; /* blank rows before this one */
                    last_busy = row;
                }
            }
            col++;
            if (!comma)
                break;
            c = comma + 1;
        }
        row++;
        if (!eol)
            break;
        p = eol + 1;
    }
    /* Blank rows after the last action are not ranks (editors and
     * scripts leave trailing newlines).  Blank rows between ranks are idle
     * ranks, but a file cannot have more of them than working ranks: that
     * is a mistake (or an attack asking for 65,536 devices), not a
     * pipeline. */
    if (idle > last_busy + 1 - idle)
        return zb_fail(err, "%d of the %d rows before the last action are blank (idle ranks); "
                       "at most half of the ranks may be idle", idle, last_busy + 1);
    *n_rows = last_busy + 1;
    return 0;
}

int torch_csv_read(const char *text, size_t len, int n_micro, sched_t **out, zb_err *err)
{
    csv_scan sc = { .max_stage = -1, .max_mb = -1 };
    int rows = 0, rc = -1;
    sched_t *s = NULL;
    if (scan_text(text, len, &sc, &rows, err))
        goto out;
    if (sc.n_acts == 0) {
        zb_fail(err, "no actions in the CSV (expected rows like 0F0,0F1,0B0,...)");
        goto out;
    }
    int m = sc.max_mb + 1;
    if (n_micro > 0) {
        if (n_micro < m) {
            zb_fail(err, "--microbatches %d, but the CSV uses micro-batch %d", n_micro, sc.max_mb);
            goto out;
        }
        m = n_micro;
    }
    int S = sc.max_stage + 1;
    for (int st = 0; st < S; st++)
        if (sc.stage_row[st] < 0) {
            zb_fail(err, "stage %d appears on no row (stages must be numbered 0..%d without gaps)",
                    st, S - 1);
            goto out;
        }
    s = sched_new(rows, m, S);
    if (!s) {
        zb_fail(err, "out of memory");
        goto out;
    }
    snprintf(s->name, sizeof s->name, "torch-csv");
    for (int st = 0; st < S; st++)
        s->stage_device[st] = sc.stage_row[st];
    for (long i = 0; i < sc.n_acts; i++) {
        const csv_action *a = &sc.acts[i];
        if (sched_push(s, a->row, (op_kind)a->kind, a->stage, a->mb)) {
            zb_fail(err, "out of memory");
            goto out;
        }
    }
    *out = s;
    s = NULL;
    rc = 0;
out:
    sched_free(s);
    free(sc.acts);
    free(sc.stage_row);
    return rc;
}
