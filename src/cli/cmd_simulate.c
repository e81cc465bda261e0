/*
 * cmd_simulate.c: `zbsched simulate FILE [--json] [--timeline]`.
 *
 * Loads and validates a schedule, simulates it (src/sim.h) and prints the
 * paper's figures: per device busy time, span and peak activation memory,
 * overall cost, makespan and bubble rate.  When the file carries measured
 * times (written by `run --trace`), the measured figures are printed next to
 * the predicted ones.  --json prints one object for scripts and tests.
 */
#include "src/cli/cli.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
        "               peak_memory, span, busy_per_device, devices, microbatches, ...\n"
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

static int print_json(const sched_t *s, const sim_result *r, const sim_result *meas, int timeline)
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

static void print_table(const sched_t *s, const sim_result *r, const sim_result *meas)
{
    printf("schedule %s: %d devices, %d micro-batches, %d stages, %ld ops (time in %s, memory in %s)\n",
           s->name[0] ? s->name : "(unnamed)", s->n_devices, s->n_micro, s->n_stages,
           sched_op_count(s), s->time_unit, s->mem_unit);
    printf("%6s %12s %12s %12s", "device", "busy", "span", "peak mem");
    if (s->mem_limit)
        printf(" %12s", "limit");
    if (meas)
        printf(" %14s %14s", "measured busy", "measured span");
    putchar('\n');
    for (int d = 0; d < s->n_devices; d++) {
        const sim_device *rd = &r->dev[d];
        printf("%6d %12.6g %12.6g %12.6g", d, rd->busy, rd->span, rd->peak_mem);
        if (s->mem_limit)
            printf(" %12.6g%s", s->mem_limit[d], rd->peak_mem > s->mem_limit[d] ? " OVER" : "");
        if (meas)
            printf(" %14.6g %14.6g", meas->dev[d].busy, meas->dev[d].span);
        putchar('\n');
    }
    printf("predicted: cost %.6g, makespan %.6g, bubble rate %.2f%%, peak memory %.6g (device %d)\n",
           r->cost, r->makespan, 100 * r->bubble_rate, r->peak_mem, r->peak_device);
    if (meas)
        printf("measured:  cost %.6g, makespan %.6g, bubble rate %.2f%%\n",
               meas->cost, meas->makespan, 100 * meas->bubble_rate);
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
    if (json)
        rc = print_json(s, &r, measured ? &meas : NULL, timeline);
    else
        print_table(s, &r, measured ? &meas : NULL);
out:
    sim_result_free(&r);
    sim_result_free(&meas);
    sched_free(s);
    return rc;
}
