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
 * What PyTorch writes beyond compute actions is accepted as its own reader
 * accepts it: communication and FSDP actions (SEND_F, RECV_B, UNSHARD,
 * REDUCE_GRAD, WAIT_..., with or without a micro-batch) are dropped and
 * counted, and ScheduleDualPipeV's "(a;b)OVERLAP_F_B" cells are expanded
 * into their sub-actions in order.
 *
 * Expected workload: files of up to a few hundred thousand actions, written
 * by PyTorch's _dump_csv, torchtitan users or by hand.
 */
#include "src/torch_csv.h"
#include "src/parse_uint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bounds on what an import may ask for, matching the JSON loader's. */
#define CSV_MAX_ROWS 65536
#define CSV_MAX_STAGE (1 << 20)
#define CSV_MAX_MICRO (1 << 24)

/* The CSV letter of each op kind: our B is PyTorch's I (input gradient),
 * our fused BW is PyTorch's B (full backward). */
static const char kind_letter[OP_PIPE_KIND_COUNT] = { 'F', 'I', 'W', 'B' };

int torch_csv_check(const sched_t *s, zb_err *err)
{
    if (sched_has_vocab(s))
        return zb_fail(err, "PyTorch's pipelining CSV cannot express vocabulary parallelism "
                       "(S and T passes and their all-reduce barriers); export the "
                       "--vocab plain schedule instead");
    return 0;
}

char *torch_csv_write(const sched_t *s)
{
    if (sched_has_vocab(s)) /* torch_csv_check refuses these */
        return NULL;
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
    int col;     /* cell of the row, for messages */
    int stage;   /* virtual stage */
    int mb;      /* micro-batch */
    uint8_t kind; /* op_kind */
} csv_action;

/* The action names PyTorch's reader accepts after the stage number
 * (_Action.from_str), other than the compute letters.  Import drops them:
 * PyTorch derives every transfer and FSDP step from the compute order
 * again (_add_send_recv, _add_unshard_reshard), and our runtime derives its
 * transfers the same way.  WAIT_ names are the asynchronous waits newer
 * runtimes write next to them. */
static const char *const comm_names[] = { "UNSHARD", "RESHARD", "REDUCE_GRAD", "SEND_F",
                                          "RECV_F", "SEND_B", "RECV_B" };

/* Length of the communication action name at [p, end), or 0 when there is
 * none.  The longest match wins, so "SEND_F" is not read as a prefix. */
static size_t comm_name_len(const char *p, const char *end)
{
    size_t n = (size_t)(end - p), best = 0;
    for (size_t i = 0; i < sizeof comm_names / sizeof comm_names[0]; i++) {
        size_t k = strlen(comm_names[i]);
        if (n >= k && !memcmp(p, comm_names[i], k) && k > best)
            best = k;
    }
    if (!best && n > 5 && !memcmp(p, "WAIT_", 5)) {
        size_t k = 5;
        while (k < n && ((p[k] >= 'A' && p[k] <= 'Z') || p[k] == '_'))
            k++;
        best = k;
    }
    return best;
}

/* Writes cell [p, end) into buf (size cap) for an error message, at most 40
 * characters, with bytes outside printable ASCII as \xHH so that a binary
 * file cannot put control sequences on the user's terminal. */
static const char *cell_text(const char *p, const char *end, char *buf, size_t cap)
{
    size_t o = 0;
    for (int shown = 0; p < end && shown < 40 && o + 5 < cap; p++, shown++) {
        unsigned char c = (unsigned char)*p;
        if (c >= 0x20 && c < 0x7f)
            buf[o++] = (char)c;
        else
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
    }
    if (p < end && o + 4 < cap) {
        memcpy(buf + o, "...", 3);
        o += 3;
    }
    buf[o] = '\0';
    return buf;
}

/* What a cell turned out to be. */
typedef enum cell_kind {
    CELL_COMPUTE = 0, /* one compute action, stored in *a */
    CELL_COMM = 1,    /* a communication action, dropped */
} cell_kind;

/* Parses one trimmed, non-empty action [p, end) that is not an OVERLAP
 * group.  Returns CELL_COMPUTE with *a filled, CELL_COMM, or -1 with err
 * naming the row, cell and action. */
static int parse_action(const char *p, const char *end, int row, int col, csv_action *a,
                        zb_err *err)
{
    const char *cell = p;
    char shown[200];
    if (zb_parse_uint(&p, end, &a->stage))
        return zb_fail(err, "row %d, cell %d ('%s'): expected <stage><type><micro-batch>, "
                       "e.g. 0F3", row, col, cell_text(cell, end, shown, sizeof shown));
    size_t comm = comm_name_len(p, end);
    if (comm) {
        /* PyTorch's reader takes an optional micro-batch after any name. */
        const char *q = p + comm;
        int mb;
        if (q < end && (zb_parse_uint(&q, end, &mb) || q != end))
            return zb_fail(err, "row %d, cell %d ('%s'): expected <stage><action>[micro-batch]",
                           row, col, cell_text(cell, end, shown, sizeof shown));
        return CELL_COMM;
    }
    int kind = -1;
    if (p < end) {
        switch (*p) {
        case 'F': kind = OP_F; break;
        case 'I': kind = OP_B; break;
        case 'W': kind = OP_W; break;
        case 'B': kind = OP_BW; break;
        }
    }
    if (kind < 0 || (p + 1 < end && !(p[1] >= '0' && p[1] <= '9'))) {
        const char *name_end = p;
        while (name_end < end && !(*name_end >= '0' && *name_end <= '9'))
            name_end++;
        char name[80];
        return zb_fail(err, "row %d, cell %d ('%s'): unknown action '%s' (expected F, I, W, B, "
                       "a communication action or (a;b)OVERLAP_F_B)", row, col,
                       cell_text(cell, end, shown, sizeof shown),
                       cell_text(p, name_end, name, sizeof name));
    }
    p++;
    if (p == end)
        return zb_fail(err, "row %d, cell %d ('%s'): a compute action needs its micro-batch, "
                       "e.g. 0F3", row, col, cell_text(cell, end, shown, sizeof shown));
    if (zb_parse_uint(&p, end, &a->mb) || p != end)
        return zb_fail(err, "row %d, cell %d ('%s'): expected <stage><type><micro-batch>, "
                       "e.g. 0F3", row, col, cell_text(cell, end, shown, sizeof shown));
    if (a->stage >= CSV_MAX_STAGE)
        return zb_fail(err, "row %d (rank %d), cell %d ('%s'): stage %d is outside 0..%d", row,
                       row, col, cell_text(cell, end, shown, sizeof shown), a->stage,
                       CSV_MAX_STAGE - 1);
    if (a->mb >= CSV_MAX_MICRO)
        return zb_fail(err, "row %d (rank %d), cell %d ('%s'): micro-batch %d is outside 0..%d",
                       row, row, col, cell_text(cell, end, shown, sizeof shown), a->mb,
                       CSV_MAX_MICRO - 1);
    a->kind = (uint8_t)kind;
    a->row = row;
    a->col = col;
    return CELL_COMPUTE;
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
    torch_csv_stats stats; /* what import dropped or expanded */
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
                       "a stage must live on one rank (stage s runs where its first action is)",
                       a->row, col, a->stage, kind_letter[a->kind], a->mb, a->stage, held);
    sc->stage_row[a->stage] = a->row;
    sc->acts[sc->n_acts++] = *a;
    if (a->stage > sc->max_stage)
        sc->max_stage = a->stage;
    if (a->mb > sc->max_mb)
        sc->max_mb = a->mb;
    return 0;
}

static void trim(const char **a, const char **b)
{
    while (*a < *b && (**a == ' ' || **a == '\t'))
        (*a)++;
    while (*b > *a && ((*b)[-1] == ' ' || (*b)[-1] == '\t'))
        (*b)--;
}

/* Parses one trimmed, non-empty cell [p, end) and adds its compute actions
 * to sc: one action, a dropped communication action, or an
 * "(a;b;...)OVERLAP_F_B" group (ScheduleDualPipeV's overlapped forward and
 * backward), whose sub-actions run in the order written, as PyTorch's
 * runtime performs them.  Returns 0 or -1 with err set. */
static int parse_cell(csv_scan *sc, const char *p, const char *end, int row, int col, zb_err *err)
{
    char shown[200];
    if (*p != '(') {
        csv_action a;
        int k = parse_action(p, end, row, col, &a, err);
        if (k < 0)
            return -1;
        if (k == CELL_COMM) {
            sc->stats.dropped_comm++;
            return 0;
        }
        return scan_add(sc, &a, col, err);
    }
    const char *close = memchr(p, ')', (size_t)(end - p));
    if (!close)
        return zb_fail(err, "row %d, cell %d ('%s'): '(' without ')'", row, col,
                       cell_text(p, end, shown, sizeof shown));
    if (memchr(p + 1, '(', (size_t)(close - p - 1)))
        return zb_fail(err, "row %d, cell %d ('%s'): nested groups are not supported",
                       row, col, cell_text(p, end, shown, sizeof shown));
    static const char overlap[] = "OVERLAP_F_B";
    if ((size_t)(end - close - 1) != sizeof overlap - 1 || memcmp(close + 1, overlap, sizeof overlap - 1)) {
        char name[80];
        return zb_fail(err, "row %d, cell %d ('%s'): unknown action '%s' after a group "
                       "(expected OVERLAP_F_B)", row, col, cell_text(p, end, shown, sizeof shown),
                       cell_text(close + 1, end, name, sizeof name));
    }
    int n = 0;
    for (const char *s = p + 1; s <= close;) {
        const char *semi = memchr(s, ';', (size_t)(close - s));
        const char *se = semi ? semi : close;
        const char *a = s, *b = se;
        trim(&a, &b);
        if (a < b) {
            if (parse_cell(sc, a, b, row, col, err))
                return -1;
            n++;
        }
        s = se + 1;
    }
    if (n == 0)
        return zb_fail(err, "row %d, cell %d ('%s'): empty OVERLAP_F_B group", row, col,
                       cell_text(p, end, shown, sizeof shown));
    sc->stats.overlaps_expanded++;
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
            trim(&a, &b);
            if (a < b) {
                /* The cap counts rows up to an action, so trailing blank
                 * lines never hit it. */
                if (row >= CSV_MAX_ROWS)
                    return zb_fail(err, "more than %d rows", CSV_MAX_ROWS);
                if (parse_cell(sc, a, b, row, col, err))
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

/* With m taken from the largest micro-batch, a stage without a forward
 * of some micro-batch in 0..m-1 is a CSV whose indices are off (torch's
 * own Schedule1F1B dump numbers its last rank's forwards 1..m): say so
 * naming the action that set m, rather than leaving it to validation,
 * which would name only the stage that lacks it.  Returns 1 with err set
 * when such a stage exists, 0 otherwise (also when the table would be too
 * large to be worth it; validation still catches the schedule). */
static int missing_forward(const csv_scan *sc, int S, int m, zb_err *err)
{
    if ((double)S * m > 1 << 26)
        return 0;
    unsigned char *seen = calloc((size_t)S * (size_t)m, 1);
    if (!seen)
        return 0;
    const csv_action *top = NULL;
    for (long i = 0; i < sc->n_acts; i++) {
        const csv_action *a = &sc->acts[i];
        if (a->kind == OP_F)
            seen[(size_t)a->stage * (size_t)m + (size_t)a->mb] = 1;
        if (!top && a->mb == m - 1)
            top = a;
    }
    int found = 0;
    for (int st = 0; st < S && !found; st++)
        for (int j = 0; j < m && !found; j++)
            if (!seen[(size_t)st * (size_t)m + (size_t)j]) {
                zb_fail(err, "stage %d (row %d, rank %d) has no forward of micro-batch %d; the "
                        "largest micro-batch, %d at row %d (rank %d), cell %d (%d%c%d), makes "
                        "the range 0..%d, which every stage must run (off by one?)", st,
                        sc->stage_row[st], sc->stage_row[st], j, m - 1, top->row, top->row,
                        top->col, top->stage, kind_letter[top->kind], top->mb, m - 1);
                found = 1;
            }
    free(seen);
    return found;
}

int torch_csv_read(const char *text, size_t len, int n_micro, sched_t **out, zb_err *err)
{
    return torch_csv_read_stats(text, len, n_micro, out, NULL, err);
}

int torch_csv_read_stats(const char *text, size_t len, int n_micro, sched_t **out,
                         torch_csv_stats *stats, zb_err *err)
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
            /* The first action in file order past the range: the one a
             * reader of the CSV would look for (torch's own dumps of a
             * single-stage schedule can be shifted by one micro-batch). */
            const csv_action *a = sc.acts;
            while (a->mb < n_micro)
                a++;
            zb_fail(err, "row %d (rank %d), cell %d (%d%c%d): micro-batch %d is outside "
                    "0..%d for --microbatches %d (the CSV's micro-batches reach %d)", a->row,
                    a->row, a->col, a->stage, kind_letter[a->kind], a->mb, a->mb, n_micro - 1,
                    n_micro, sc.max_mb);
            goto out;
        }
        m = n_micro;
    }
    int S = sc.max_stage + 1;
    for (int st = 0; st < S; st++)
        if (sc.stage_row[st] < 0) {
            zb_fail(err, "stage %d appears on no row (rank): the CSV's stages are 0..%d, and "
                    "each must be on one rank", st, S - 1);
            goto out;
        }
    if (n_micro <= 0 && missing_forward(&sc, S, m, err))
        goto out;
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
    if (stats)
        *stats = sc.stats;
    rc = 0;
out:
    sched_free(s);
    free(sc.acts);
    free(sc.stage_row);
    return rc;
}
