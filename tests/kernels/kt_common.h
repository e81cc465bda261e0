/*
 * kt_common.h: helpers shared by the kernel tests: loading the JAX golden
 * files of tools/golden/make_golden.py (format described there), building a
 * zb_model from their config record, and comparing tensors.
 *
 * Header-only (static functions) so that every test stays one executable
 * built from one .c file.
 */
#ifndef ZB_TESTS_KT_COMMON_H
#define ZB_TESTS_KT_COMMON_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/model.h"

#define KT_MAX_RECORDS 16

/* One named tensor of a golden file. */
typedef struct kt_record {
    char name[33];  /* NUL-terminated record name */
    uint32_t count; /* floats */
    float *data;    /* owned */
} kt_record;

/* A loaded golden file. */
typedef struct kt_golden {
    int n;                           /* records */
    kt_record rec[KT_MAX_RECORDS];   /* in file order */
    zb_model model;                  /* from "config" */
    int batch;                       /* sequences B, from "config" */
} kt_golden;

__attribute__((unused)) static void kt_golden_free(kt_golden *g)
{
    for (int i = 0; i < g->n; i++)
        free(g->rec[i].data);
    g->n = 0;
}

/* Finds a record; NULL when absent. */
__attribute__((unused)) static const kt_record *kt_find(const kt_golden *g, const char *name)
{
    for (int i = 0; i < g->n; i++)
        if (strcmp(g->rec[i].name, name) == 0)
            return &g->rec[i];
    return NULL;
}

/* Loads $ZB_SOURCE_ROOT/tests/kernels/golden/<file>.  Returns 0, or -1
 * with a message in why. */
__attribute__((unused)) static int kt_golden_load(const char *file, kt_golden *g, char *why, size_t len)
{
    memset(g, 0, sizeof *g);
    const char *root = getenv("ZB_SOURCE_ROOT");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/kernels/golden/%s", root ? root : ".", file);
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(why, len, "%.400s: cannot open", path);
        return -1;
    }
    char magic[8];
    if (fread(magic, 1, 8, f) != 8 || memcmp(magic, "ZBGOLD01", 8) != 0) {
        snprintf(why, len, "%.400s: bad magic", path);
        fclose(f);
        return -1;
    }
    for (;;) {
        char name[32];
        uint32_t count;
        size_t got = fread(name, 1, 32, f);
        if (got == 0)
            break;
        if (got != 32 || fread(&count, 4, 1, f) != 1 || g->n == KT_MAX_RECORDS) {
            snprintf(why, len, "%.400s: truncated record", path);
            goto fail;
        }
        kt_record *r = &g->rec[g->n];
        memcpy(r->name, name, 32);
        r->name[32] = 0;
        r->count = count;
        r->data = malloc(sizeof(float) * (count ? count : 1));
        g->n++;
        if (!r->data || fread(r->data, 4, count, f) != count) {
            snprintf(why, len, "%.400s: truncated data of %s", path, r->name);
            goto fail;
        }
    }
    fclose(f);
    const kt_record *c = kt_find(g, "config");
    if (!c || c->count != 9) {
        snprintf(why, len, "%.400s: no config record", path);
        kt_golden_free(g);
        return -1;
    }
    zb_model *m = &g->model;
    snprintf(m->name, sizeof m->name, "%s", file);
    m->n_layers = (int)c->data[0];
    m->d_model = (int)c->data[1];
    m->n_heads = (int)c->data[2];
    m->n_kv_heads = (int)c->data[3];
    m->d_ff = (int)c->data[4];
    m->vocab = (int)c->data[5];
    m->seq_len = (int)c->data[6];
    g->batch = (int)c->data[7];
    m->micro_batch = g->batch;
    m->rope_theta = c->data[8];
    m->swiglu = 1;
    return 0;
fail:
    fclose(f);
    kt_golden_free(g);
    return -1;
}

/* Golden int tensor (stored as floats) as a fresh int32 array. */
__attribute__((unused)) static int32_t *kt_ints(const kt_record *r)
{
    int32_t *out = malloc(sizeof(int32_t) * r->count);
    for (uint32_t i = 0; out && i < r->count; i++)
        out[i] = (int32_t)lrintf(r->data[i]);
    return out;
}

/* max_i |got - want| / max(max_i |want|, floor): an error relative to the
 * tensor's scale, robust to individual near-zero entries. */
__attribute__((unused)) static double kt_rel_err(const float *got, const float *want, size_t n, double floor)
{
    double maxabs = floor, maxdiff = 0.0;
    for (size_t i = 0; i < n; i++) {
        double a = fabs((double)want[i]);
        if (a > maxabs)
            maxabs = a;
        double dd = fabs((double)got[i] - want[i]);
        if (!(dd <= maxdiff)) /* also catches NaN */
            maxdiff = isnan(dd) ? INFINITY : dd;
    }
    return maxdiff / maxabs;
}

/* A small model config for tests that do not use goldens. */
__attribute__((unused)) static zb_model kt_model(int L, int d, int nh, int nkv, int ff, int V, int T)
{
    zb_model m;
    memset(&m, 0, sizeof m);
    snprintf(m.name, sizeof m.name, "test");
    m.n_layers = L;
    m.d_model = d;
    m.n_heads = nh;
    m.n_kv_heads = nkv;
    m.d_ff = ff;
    m.vocab = V;
    m.seq_len = T;
    m.micro_batch = 2;
    m.swiglu = 1;
    m.rope_theta = 10000.0;
    return m;
}

#endif
