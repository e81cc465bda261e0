/*
 * mem_figures.c: per-device static, activation and total peak memory, and
 * the limit they are read against (mem_figures.h).
 *
 * Where the limit comes from: a plan written by `search` records the --mem
 * it was made under in its "plan" object (mem_limit_bytes, one figure for
 * every device, static included); a file may instead carry a per-device
 * activation limit (memory.limit), which, when static memory is known too,
 * is turned into a total by adding each device's static memory.  The plan's
 * figure wins: it is the one the user typed.
 */
#include "src/mem_figures.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/numfmt.h"
#include "src/size.h"

void mem_figures_free(mem_figures *f)
{
    free(f->static_mem);
    free(f->activations);
    free(f->total);
    free(f->limit);
    memset(f, 0, sizeof *f);
}

/* The plan's --mem (plan.mem_limit_bytes), or 0 when the file has none. */
static double plan_limit(const sched_t *s)
{
    const cJSON *plan = s->meta ? cJSON_GetObjectItemCaseSensitive(s->meta, "plan") : NULL;
    const cJSON *lim = plan ? cJSON_GetObjectItemCaseSensitive(plan, "mem_limit_bytes") : NULL;
    return cJSON_IsNumber(lim) && isfinite(lim->valuedouble) && lim->valuedouble > 0
               ? lim->valuedouble : 0;
}

int mem_figures_compute(const sched_t *s, const sim_result *r, mem_figures *f, zb_err *err)
{
    memset(f, 0, sizeof *f);
    int p = s->n_devices;
    f->n_devices = p;
    f->bytes = !strcmp(s->mem_unit, "bytes");
    f->has_static = s->mem_static != NULL;
    f->static_mem = calloc((size_t)p, sizeof(double));
    f->activations = calloc((size_t)p, sizeof(double));
    f->total = calloc((size_t)p, sizeof(double));
    double plan = f->bytes ? plan_limit(s) : 0;
    f->has_limit = plan > 0 || s->mem_limit != NULL;
    if (f->has_limit)
        f->limit = calloc((size_t)p, sizeof(double));
    if (!f->static_mem || !f->activations || !f->total || (f->has_limit && !f->limit)) {
        mem_figures_free(f);
        return zb_fail(err, "out of memory");
    }
    f->limit_is_total = plan > 0 || (s->mem_limit && f->has_static);
    for (int d = 0; d < p; d++) {
        f->static_mem[d] = f->has_static ? s->mem_static[d] : 0;
        f->activations[d] = r->dev[d].peak_mem;
        f->total[d] = f->static_mem[d] + f->activations[d];
        if (plan > 0)
            f->limit[d] = plan;
        else if (s->mem_limit)
            f->limit[d] = s->mem_limit[d] + (f->has_static ? f->static_mem[d] : 0);
        if (d == 0 || f->total[d] > f->peak) {
            f->peak = f->total[d];
            f->peak_device = d;
        }
    }
    return 0;
}

void mem_figures_format(const sched_t *s, double v, char *buf, size_t len)
{
    if (!strcmp(s->mem_unit, "bytes")) {
        zb_size_format(v, buf, len);
        return;
    }
    char num[64];
    zb_num_format(v, 6, num, sizeof num);
    snprintf(buf, len, "%s %s", num, s->mem_unit[0] ? s->mem_unit : "units");
}
