/*
 * eplb_json.c: a placement of solver/eplb.h as one JSON document, and the
 * per-layer summaries (mean and worst) that the table and the document
 * share.
 *
 * The document is the one `zbsched eplb --json` prints and `-o` writes:
 * the shape and policy, the comparison with the global policy, each
 * layer's balances, phy2log, log2phy, logcnt and the per-GPU and per-node
 * loads.  It lives in the solver, beside the placement it describes, so
 * that the CLI only prints it.
 *
 * The document is written into a plain growable buffer rather than built
 * with cJSON: at DeepSeek-V3 scale log2phy alone is ~100,000 numbers, and
 * cJSON's number printing (print, then re-parse to check the round trip)
 * would dominate the run.  Integers are written by hand for the same
 * reason (printf per number was the bulk of the run); doubles with %.17g,
 * which round-trips.  The buffer is src/text_buf.h's, whose sticky
 * out-of-memory flag is checked once at the end (zb_buf_take).
 */
#include "solver/eplb.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/text_buf.h"

/* Appends an int row [a0,a1,...], each number written by hand. */
static void json_ints(zb_buf *b, const int *v, int n)
{
    if (zb_buf_reserve(b, (size_t)n * 12 + 3))
        return;
    char *p = b->data + b->len;
    *p++ = '[';
    for (int i = 0; i < n; i++) {
        if (i)
            *p++ = ',';
        char tmp[12];
        int k = 0;
        unsigned u = v[i] < 0 ? 0u - (unsigned)v[i] : (unsigned)v[i];
        do
            tmp[k++] = (char)('0' + u % 10);
        while (u /= 10);
        if (v[i] < 0)
            *p++ = '-';
        while (k)
            *p++ = tmp[--k];
    }
    *p++ = ']';
    *p = '\0';
    b->len = (size_t)(p - b->data);
}

/* Appends a double row with enough digits to round-trip. */
static void json_doubles(zb_buf *b, const double *v, int n)
{
    zb_buf_puts(b, "[");
    for (int i = 0; i < n; i++)
        zb_buf_printf(b, i ? ",%.17g" : "%.17g", v[i]);
    zb_buf_puts(b, "]");
}

/* Appends ,"key":[[row],[row],...] for a rows x cols table of ints. */
static void json_int_table(zb_buf *b, const char *key, const int *t, int rows, int cols)
{
    zb_buf_printf(b, ",\"%s\":[", key);
    for (int r = 0; r < rows; r++) {
        if (r)
            zb_buf_puts(b, ",");
        json_ints(b, t + (size_t)r * cols, cols);
    }
    zb_buf_puts(b, "]");
}

/* The same for a table of doubles. */
static void json_double_table(zb_buf *b, const char *key, const double *t, int rows, int cols)
{
    zb_buf_printf(b, ",\"%s\":[", key);
    for (int r = 0; r < rows; r++) {
        if (r)
            zb_buf_puts(b, ",");
        json_doubles(b, t + (size_t)r * cols, cols);
    }
    zb_buf_puts(b, "]");
}

/* Appends ,"key":[v0,v1,...]. */
static void json_double_row(zb_buf *b, const char *key, const double *v, int n)
{
    zb_buf_printf(b, ",\"%s\":", key);
    json_doubles(b, v, n);
}

void eplb_mean_max(const double *v, int n, double *mean, double *max)
{
    assert(n > 0);
    double sum = 0, m = v[0];
    for (int i = 0; i < n; i++) {
        sum += v[i];
        m = v[i] > m ? v[i] : m;
    }
    *mean = sum / n;
    *max = m;
}

/* Appends ,"key":{"mean":..,"max":..} over the n values. */
static void json_summary(zb_buf *b, const char *key, const double *v, int n)
{
    double mean, max;
    eplb_mean_max(v, n, &mean, &max);
    zb_buf_printf(b, ",\"%s\":{\"mean\":%.17g,\"max\":%.17g}", key, mean, max);
}

int eplb_placement_json(const eplb_params *p, const eplb_result *r, const eplb_loads *ld,
                        const eplb_global_compare *cmp, char **doc, size_t *len, zb_err *err)
{
    int L = r->n_layers, E = r->n_experts;
    zb_buf b = { 0 };
    zb_buf_printf(&b, "{\"format\":\"zbsched-eplb\",\"version\":1,\"policy\":\"%s\","
               "\"policy_requested\":\"%s\",\"fell_back\":%s,"
               "\"layers\":%d,\"experts\":%d,\"replicas\":%d,\"groups\":%d,\"nodes\":%d,"
               "\"gpus\":%d,\"max_replicas\":%d",
               r->hierarchical ? "hierarchical" : "global", eplb_policy_name(p->policy),
               r->fell_back ? "true" : "false", L, E, r->n_replicas, p->n_groups,
               r->n_nodes, r->n_gpus, r->max_count);
    if (cmp)
        zb_buf_printf(&b, ",\"global_comparison\":{\"hierarchical_worse\":%s,\"layer\":%d,"
                   "\"node_balance\":%.17g,\"gpu_balance\":%.17g,\"global_layer\":%d,"
                   "\"global_node_balance\":%.17g,\"global_gpu_balance\":%.17g}",
                   cmp->worse ? "true" : "false", cmp->layer, cmp->node_balance,
                   cmp->gpu_balance, cmp->global_layer, cmp->global_node_balance,
                   cmp->global_gpu_balance);
    json_summary(&b, "balance_before_summary", ld->balance_before, L);
    json_summary(&b, "balance_after_summary", ld->balance_after, L);
    json_summary(&b, "node_balance_before_summary", ld->node_balance_before, L);
    json_summary(&b, "node_balance_after_summary", ld->node_balance_after, L);
    json_double_row(&b, "balance_before", ld->balance_before, L);
    json_double_row(&b, "balance_after", ld->balance_after, L);
    json_double_row(&b, "node_balance_before", ld->node_balance_before, L);
    json_double_row(&b, "node_balance_after", ld->node_balance_after, L);
    json_int_table(&b, "phy2log", r->phy2log, L, r->n_replicas);
    zb_buf_puts(&b, ",\"log2phy\":[");
    for (int l = 0; l < L; l++) {
        zb_buf_puts(&b, l ? ",[" : "[");
        for (int e = 0; e < E; e++) {
            if (e)
                zb_buf_puts(&b, ",");
            json_ints(&b, r->log2phy + ((size_t)l * E + e) * r->max_count, r->max_count);
        }
        zb_buf_puts(&b, "]");
    }
    zb_buf_puts(&b, "]");
    json_int_table(&b, "logcnt", r->logcnt, L, E);
    json_double_table(&b, "gpu_load_before", ld->gpu_before, L, ld->n_gpus);
    json_double_table(&b, "gpu_load_after", ld->gpu_after, L, ld->n_gpus);
    json_double_table(&b, "node_load_before", ld->node_before, L, ld->n_nodes);
    json_double_table(&b, "node_load_after", ld->node_after, L, ld->n_nodes);
    zb_buf_puts(&b, "}\n");
    if (b.oom) {
        zb_buf_free(&b);
        *doc = NULL;
        *len = 0;
        return zb_fail(err, "out of memory writing the placement's JSON");
    }
    return zb_buf_take(&b, doc, len, err);
}
