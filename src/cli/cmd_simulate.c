/*
 * cmd_simulate.c: `zbsched simulate FILE [--json] [--timeline]`.
 *
 * Loads and validates a schedule, simulates it (src/sim.h) and prints the
 * paper's figures: per device busy time, span and peak memory, overall
 * cost, makespan and bubble rate.  When the file carries measured times
 * (written by `run --trace`), the measured figures are printed next to the
 * predicted ones.  --json prints one object for scripts and tests.
 *
 * Memory is the one figure per device that search ranks plans by
 * (src/mem_figures.h): static + activation peak, in GB with its unit, its
 * two parts in their own labelled columns, read against the plan's limit.
 * Times and sizes are in fixed notation (src/numfmt.h), never "1.76e+10";
 * the JSON keeps exact numbers.  Columns are as wide as their content.
 */
#include "src/cli/cli.h"

#include <getopt.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/mem_figures.h"
#include "src/numfmt.h"
#include "src/sched_io.h"
#include "src/sim.h"
#include "src/validate.h"

static void usage(FILE *out)
{
    fprintf(out,
        "usage: zbsched simulate FILE [--json [--timeline]]\n"
        "\n"
        "Validates the schedule FILE ('-' for stdin) and simulates it: each op starts\n"
        "when its device is free and its inputs have arrived (T_comm across devices).\n"
        "\n"
        "  --json       print one JSON object: cost, makespan, bubble_rate, busy,\n"
        "               peak_memory (activations), static_memory, total_peak_memory,\n"
        "               span, busy_per_device, devices, microbatches, ...\n"
        "  --timeline   with --json, add every op's simulated start and end\n"
        "  -h, --help   this text\n");
}

/* Whether every non-empty lane carries measured times. */
static int has_measured(const sched_t *s)
{
    int any = 0;
    for (int d = 0; d < s->n_devices; d++) {
        if (s->dev[d].n_ops > 0 && !s->dev[d].start)
            return 0;
        any |= s->dev[d].n_ops > 0;
    }
    return any;
}

static cJSON *device_array(const sim_result *r, size_t off)
{
    cJSON *a = cJSON_CreateArray();
    for (int d = 0; a && d < r->n_devices; d++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(*(const double *)((const char *)&r->dev[d] + off)));
    return a;
}

/* The figures of one result as JSON members of obj. */
static void add_figures(cJSON *obj, const sim_result *r)
{
    cJSON_AddNumberToObject(obj, "cost", r->cost);
    cJSON_AddNumberToObject(obj, "makespan", r->makespan);
    cJSON_AddNumberToObject(obj, "bubble_rate", r->bubble_rate);
    cJSON_AddNumberToObject(obj, "busy", r->busy);
    cJSON_AddItemToObject(obj, "peak_memory", device_array(r, offsetof(sim_device, peak_mem)));
    cJSON_AddItemToObject(obj, "span", device_array(r, offsetof(sim_device, span)));
    cJSON_AddItemToObject(obj, "busy_per_device", device_array(r, offsetof(sim_device, busy)));
}

static int print_json(const sched_t *s, const sim_result *r, const sim_result *meas,
                      const mem_figures *mf, int timeline)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return cli_error("out of memory");
    cJSON_AddStringToObject(o, "name", s->name);
    cJSON_AddNumberToObject(o, "devices", s->n_devices);
    cJSON_AddNumberToObject(o, "microbatches", s->n_micro);
    cJSON_AddNumberToObject(o, "stages", s->n_stages);
    cJSON_AddNumberToObject(o, "ops", (double)sched_op_count(s));
    cJSON_AddStringToObject(o, "time_unit", s->time_unit);
    cJSON_AddStringToObject(o, "mem_unit", s->mem_unit);
    add_figures(o, r);
    cJSON_AddNumberToObject(o, "peak_memory_max", r->peak_mem);
    if (mf->has_static) {
        cJSON_AddItemToObject(o, "static_memory", cJSON_CreateDoubleArray(mf->static_mem, mf->n_devices));
        cJSON_AddItemToObject(o, "total_peak_memory", cJSON_CreateDoubleArray(mf->total, mf->n_devices));
        cJSON_AddNumberToObject(o, "total_peak_memory_max", mf->peak);
        cJSON_AddNumberToObject(o, "total_peak_device", mf->peak_device);
    }
    if (mf->has_limit && mf->limit_is_total)
        cJSON_AddItemToObject(o, "total_memory_limit", cJSON_CreateDoubleArray(mf->limit, mf->n_devices));
    if (s->mem_limit) {
        cJSON *lim = cJSON_CreateDoubleArray(s->mem_limit, s->n_devices);
        cJSON_AddItemToObject(o, "mem_limit", lim);
        int fits = 1;
        for (int d = 0; d < s->n_devices; d++)
            fits &= r->dev[d].peak_mem <= s->mem_limit[d];
        cJSON_AddBoolToObject(o, "fits_memory", fits);
    }
    if (meas) {
        cJSON *m = cJSON_CreateObject();
        if (m)
            add_figures(m, meas);
        cJSON_AddItemToObject(o, "measured", m);
    }
    if (timeline) {
        cJSON *tl = cJSON_CreateArray();
        for (int d = 0; tl && d < s->n_devices; d++) {
            cJSON *lane = cJSON_CreateArray();
            for (int i = 0; lane && i < s->dev[d].n_ops; i++) {
                sched_op op = s->dev[d].ops[i];
                char tok[48];
                snprintf(tok, sizeof tok, "%s%d@%d", op_kind_name((op_kind)op.kind), (int)op.mb, (int)op.stage);
                cJSON *e = cJSON_CreateObject();
                cJSON_AddStringToObject(e, "op", tok);
                cJSON_AddNumberToObject(e, "start", r->dev[d].start[i]);
                cJSON_AddNumberToObject(e, "end", r->dev[d].end[i]);
                cJSON_AddItemToArray(lane, e);
            }
            cJSON_AddItemToArray(tl, lane);
        }
        cJSON_AddItemToObject(o, "timeline", tl);
    }
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!text)
        return cli_error("out of memory");
    puts(text);
    free(text);
    return 0;
}

/* A table of strings whose columns are as wide as their widest cell:
 * numbers right-aligned, the first column too. */
#define SIM_MAX_COLS 10
#define SIM_CELL 48

typedef struct sim_table {
    int n_cols;                      /* columns in use */
    int n_rows;                      /* rows filled, the header included */
    int cap;                         /* rows allocated */
    char (*cell)[SIM_MAX_COLS][SIM_CELL]; /* [cap] rows of cells */
} sim_table;

static int table_row(sim_table *t)
{
    if (t->n_rows == t->cap) {
        int cap = t->cap ? 2 * t->cap : 16;
        void *p = realloc(t->cell, sizeof *t->cell * (size_t)cap);
        if (!p)
            return -1;
        t->cell = p;
        t->cap = cap;
    }
    memset(t->cell[t->n_rows], 0, sizeof *t->cell);
    return t->n_rows++;
}

static void table_print(const sim_table *t)
{
    int width[SIM_MAX_COLS] = { 0 };
    for (int r = 0; r < t->n_rows; r++)
        for (int c = 0; c < t->n_cols; c++) {
            int n = (int)strlen(t->cell[r][c]);
            width[c] = n > width[c] ? n : width[c];
        }
    for (int r = 0; r < t->n_rows; r++) {
        for (int c = 0; c < t->n_cols; c++)
            printf("%s%*s", c ? "  " : "", width[c], t->cell[r][c]);
        putchar('\n');
    }
}

/* A time in the file's unit, six significant digits, no exponent. */
static void fmt_time(char *buf, size_t len, double v)
{
    zb_num_format(v, 6, buf, len);
}

/* Fills column c of rows 1..p with the devices' values of one time
 * figure (sim_device field at off), lined up on one number of decimals. */
static int time_column(sim_table *t, int c, const sim_result *r, size_t off)
{
    int p = r->n_devices;
    double *v = calloc((size_t)p, sizeof(double));
    char *cells = malloc((size_t)p * SIM_CELL);
    if (!v || !cells) {
        free(v);
        free(cells);
        return -1;
    }
    for (int d = 0; d < p; d++)
        v[d] = *(const double *)((const char *)&r->dev[d] + off);
    zb_num_format_column(v, p, 6, cells, SIM_CELL);
    for (int d = 0; d < p; d++)
        memcpy(t->cell[1 + d][c], cells + (size_t)d * SIM_CELL, SIM_CELL);
    free(v);
    free(cells);
    return 0;
}

static int print_table(const sched_t *s, const sim_result *r, const sim_result *meas,
                       const mem_figures *mf)
{
    const char *tu = s->time_unit[0] ? s->time_unit : "units";
    if (mf->bytes)
        printf("schedule %s: %d devices, %d micro-batches, %d stages, %ld ops (time in %s)\n",
               s->name[0] ? s->name : "(unnamed)", s->n_devices, s->n_micro, s->n_stages,
               sched_op_count(s), tu);
    else
        printf("schedule %s: %d devices, %d micro-batches, %d stages, %ld ops (time in %s, "
               "memory in %s)\n", s->name[0] ? s->name : "(unnamed)", s->n_devices, s->n_micro,
               s->n_stages, sched_op_count(s), tu, s->mem_unit);
    sim_table t = { 0 };
    int h = table_row(&t);
    if (h < 0)
        return cli_error("out of memory");
    int c = 0;
    snprintf(t.cell[h][c++], SIM_CELL, "device");
    snprintf(t.cell[h][c++], SIM_CELL, "busy %s", tu);
    snprintf(t.cell[h][c++], SIM_CELL, "span %s", tu);
    if (mf->has_static) {
        snprintf(t.cell[h][c++], SIM_CELL, "static");
        snprintf(t.cell[h][c++], SIM_CELL, "activations");
        snprintf(t.cell[h][c++], SIM_CELL, "peak memory");
    } else {
        snprintf(t.cell[h][c++], SIM_CELL, "peak activations");
    }
    if (mf->has_limit)
        snprintf(t.cell[h][c++], SIM_CELL, "%s", mf->limit_is_total ? "limit" : "activation limit");
    if (meas) {
        snprintf(t.cell[h][c++], SIM_CELL, "measured busy");
        snprintf(t.cell[h][c++], SIM_CELL, "measured span");
    }
    t.n_cols = c;
    int over = 0;
    for (int d = 0; d < s->n_devices; d++) {
        int row = table_row(&t);
        if (row < 0) {
            free(t.cell);
            return cli_error("out of memory");
        }
        c = 0;
        snprintf(t.cell[row][c++], SIM_CELL, "%d", d);
        c += 2; /* busy and span: time_column below */
        if (mf->has_static)
            mem_figures_format(s, mf->static_mem[d], t.cell[row][c++], SIM_CELL);
        mem_figures_format(s, mf->activations[d], t.cell[row][c++], SIM_CELL);
        if (mf->has_static)
            mem_figures_format(s, mf->total[d], t.cell[row][c++], SIM_CELL);
        if (mf->has_limit) {
            char lim[SIM_CELL - 8];
            double used = mf->limit_is_total ? mf->total[d] : mf->activations[d];
            mem_figures_format(s, mf->limit[d], lim, sizeof lim);
            int is_over = used > mf->limit[d];
            over |= is_over;
            snprintf(t.cell[row][c++], SIM_CELL, "%s%s", lim, is_over ? " OVER" : "");
        }
    }
    int cm = t.n_cols - 2;
    if (time_column(&t, 1, r, offsetof(sim_device, busy)) ||
        time_column(&t, 2, r, offsetof(sim_device, span)) ||
        (meas && (time_column(&t, cm, meas, offsetof(sim_device, busy)) ||
                  time_column(&t, cm + 1, meas, offsetof(sim_device, span))))) {
        free(t.cell);
        return cli_error("out of memory");
    }
    table_print(&t);
    free(t.cell);
    char cost[32], mk[32], peak[48], st[48], act[48];
    fmt_time(cost, sizeof cost, r->cost);
    fmt_time(mk, sizeof mk, r->makespan);
    mem_figures_format(s, mf->peak, peak, sizeof peak);
    printf("predicted: cost %s %s, makespan %s %s, bubble rate %.2f%%, ", cost, tu, mk, tu,
           100 * r->bubble_rate);
    if (mf->has_static) {
        mem_figures_format(s, mf->static_mem[mf->peak_device], st, sizeof st);
        mem_figures_format(s, mf->activations[mf->peak_device], act, sizeof act);
        printf("peak memory %s on device %d (static %s + activations %s)\n", peak,
               mf->peak_device, st, act);
    } else {
        printf("peak activations %s on device %d\n", peak, mf->peak_device);
    }
    if (mf->has_limit)
        printf("memory: %s\n", over ? "OVER the limit on the devices marked"
                                    : mf->limit_is_total ? "every device fits its limit"
                                                         : "every device fits its activation limit");
    if (meas) {
        fmt_time(cost, sizeof cost, meas->cost);
        fmt_time(mk, sizeof mk, meas->makespan);
        printf("measured:  cost %s %s, makespan %s %s, bubble rate %.2f%%\n", cost, tu, mk, tu,
               100 * meas->bubble_rate);
    }
    return 0;
}

int cmd_simulate(int argc, char **argv)
{
    static const struct option opts[] = {
        { "json", no_argument, NULL, 'j' },
        { "timeline", no_argument, NULL, 't' },
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    int json = 0, timeline = 0, c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case 'j': json = 1; break;
        case 't': timeline = 1; break;
        case 'h': usage(stdout); return 0;
        default:
            return cli_usage("simulate", "unknown option '%s' (see --help)", argv[optind - 1]);
        }
    }
    if (optind >= argc)
        return cli_usage("simulate", "missing FILE (see --help)");
    if (optind + 1 < argc)
        return cli_usage("simulate", "unexpected argument '%s'", argv[optind + 1]);
    if (timeline && !json)
        return cli_usage("simulate", "--timeline goes with --json");
    const char *path = argv[optind];
    zb_err err = { "" };
    sched_t *s = NULL;
    if (sched_load_file(path, &s, &err))
        return cli_fail(&err);
    sim_result r = { 0 }, meas = { 0 };
    int rc = 0, measured = has_measured(s);
    if (sched_validate(s, &err)) {
        rc = cli_error("%s: invalid schedule: %s", path, err.msg);
        goto out;
    }
    if (sim_run(s, &r, &err) || (measured && sim_measured(s, &meas, &err))) {
        rc = cli_fail(&err);
        goto out;
    }
    mem_figures mf = { 0 };
    if (mem_figures_compute(s, &r, &mf, &err)) {
        rc = cli_fail(&err);
        goto out;
    }
    if (json)
        rc = print_json(s, &r, measured ? &meas : NULL, &mf, timeline);
    else
        rc = print_table(s, &r, measured ? &meas : NULL, &mf);
    mem_figures_free(&mf);
out:
    sim_result_free(&r);
    sim_result_free(&meas);
    sched_free(s);
    return rc;
}
