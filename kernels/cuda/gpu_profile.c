/*
 * gpu_profile.c: gpu_profile_measure (gpu_profile.h).  Three throw-away
 * stages (one layer; embedding only; head only) built from the CPU layout
 * code, random weights and inputs, each op timed with CUDA events on the
 * stage's own stream.  The medians and byte counts go into a zb_profile.
 */
#include "kernels/cuda/gpu_profile.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "kernels/cpu/llama.h"
#include "kernels/cuda/gpu_stage.h"
#include "kernels/cuda/gpu_transport.h"
#include "kernels/cuda/zb_cuda.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Small deterministic generator for inputs (xorshift64*). */
static uint64_t next_u64(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}

/* Everything one measured part needs. */
typedef struct part_rig {
    llama_stage layout;  /* CPU description of the stage */
    gpu_stage *st;       /* device side */
    gpu_saved *sv;       /* one micro-batch's saved state */
    zb_bf16 *act_in;     /* [N,d] input when no embedding */
    zb_bf16 *act_out;    /* [N,d] output when no head */
    zb_bf16 *dy;         /* [N,d] incoming gradient when no head */
    zb_bf16 *dx;         /* [N,d] outgoing gradient when no embedding */
    int32_t *tokens;     /* host [N] */
} part_rig;

static void rig_free(part_rig *r)
{
    gpu_saved_free(r->sv);
    gpu_stage_free(r->st);
    zb_cuda_release(r->act_in);
    zb_cuda_release(r->act_out);
    zb_cuda_release(r->dy);
    zb_cuda_release(r->dx);
    free(r->tokens);
    llama_stage_free(&r->layout);
}

/* Fills n bf16 device values with uniform(-a, a). */
static int random_bf16(zb_cuda *c, zb_bf16 *dst, size_t n, float a, uint64_t *seed, zb_err *err)
{
    zb_bf16 *h = malloc(n * sizeof *h);
    if (!h)
        return zb_fail(err, "out of memory");
    for (size_t i = 0; i < n; i++)
        h[i] = zb_bf16_from_f32(a * (2.0f * (float)(next_u64(seed) >> 40) / 16777216.0f - 1.0f));
    int rc = zb_cuda_upload(c, dst, h, n * sizeof *h, err);
    if (rc == 0)
        rc = zb_cuda_sync(c, err);
    free(h);
    return rc;
}

static int rig_init(part_rig *r, zb_cuda *c, const zb_model *m, int batch, int l1, int emb,
                    int head, zb_err *err)
{
    memset(r, 0, sizeof *r);
    size_t N = (size_t)batch * m->seq_len, d = (size_t)m->d_model;
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    if (llama_stage_init(&r->layout, m, 0, l1, emb, head, err) != 0)
        return -1;
    size_t n = llama_stage_num_params(&r->layout);
    float *params = malloc(n * sizeof *params);
    r->tokens = malloc(N * sizeof *r->tokens);
    if (!params || !r->tokens) {
        free(params);
        return zb_fail(err, "out of memory for %zu parameters", n);
    }
    /* timing does not depend on the values: a cheap uniform fill (std
     * 0.02) instead of llama_stage_init_params' Box-Muller, which takes
     * tens of seconds for Llama-3's 128k x 4096 embedding and head */
    for (int t = 0; t < r->layout.n_tensors; t++) {
        const llama_tensor *ten = &r->layout.tensors[t];
        for (size_t i = 0; i < ten->count; i++)
            params[ten->offset + i] = ten->rows == 1 ? 1.0f
                : 0.0346f * (2.0f * (float)(next_u64(&seed) >> 40) / 16777216.0f - 1.0f);
    }
    for (size_t i = 0; i < N; i++)
        r->tokens[i] = (int32_t)(next_u64(&seed) % (uint64_t)m->vocab);
    int rc = gpu_stage_create(c, &r->layout, &r->st, err);
    if (rc == 0)
        rc = gpu_stage_upload(r->st, params, err);
    free(params);
    if (rc != 0)
        return -1;
    if (!(r->sv = gpu_saved_new(r->st, batch)))
        return zb_fail(err, "out of memory for the saved state");
    if (zb_cuda_alloc((void **)&r->act_in, N * d * 2, err) || zb_cuda_alloc((void **)&r->act_out, N * d * 2, err) ||
        zb_cuda_alloc((void **)&r->dy, N * d * 2, err) || zb_cuda_alloc((void **)&r->dx, N * d * 2, err) ||
        random_bf16(c, r->act_in, N * d, 1.0f, &seed, err) ||
        random_bf16(c, r->dy, N * d, 1e-3f, &seed, err))
        return -1;
    return 0;
}

/* Times F, B, W `reps` times after one warm-up; fills medians (seconds)
 * and the saved bytes after F and after B. */
static int time_part(part_rig *r, zb_cuda *c, int reps, profile_part *out, zb_err *err)
{
    const llama_stage *L = &r->layout;
    double *tf = calloc((size_t)reps, sizeof(double)), *tb = calloc((size_t)reps, sizeof(double));
    double *tw = calloc((size_t)reps, sizeof(double));
    zb_cuda_event *e0 = NULL, *e1 = NULL, *e2 = NULL, *e3 = NULL;
    int rc = -1;
    if (!tf || !tb || !tw) {
        zb_fail(err, "out of memory");
        goto out;
    }
    if (zb_cuda_event_new(&e0, err) || zb_cuda_event_new(&e1, err) ||
        zb_cuda_event_new(&e2, err) || zb_cuda_event_new(&e3, err))
        goto out;
    for (int it = -1; it < reps; it++) {
        if (zb_cuda_mark(c, e0, err) ||
            gpu_stage_forward(r->st, r->sv, L->has_embedding ? r->tokens : NULL,
                              L->has_embedding ? NULL : r->act_in,
                              L->has_head ? r->tokens : NULL, L->has_head ? NULL : r->act_out,
                              err) ||
            zb_cuda_mark(c, e1, err))
            goto out;
        size_t after_f = gpu_saved_bytes(r->sv);
        if (gpu_stage_backward_b(r->st, r->sv, 1.0f, L->has_head ? NULL : r->dy,
                                 L->has_embedding ? NULL : r->dx, err) ||
            zb_cuda_mark(c, e2, err))
            goto out;
        size_t after_b = gpu_saved_bytes(r->sv);
        if (gpu_stage_backward_w(r->st, r->sv, err) || zb_cuda_mark(c, e3, err))
            goto out;
        float ms_f, ms_b, ms_w;
        if (zb_cuda_elapsed(e0, e1, &ms_f, err) || zb_cuda_elapsed(e1, e2, &ms_b, err) ||
            zb_cuda_elapsed(e2, e3, &ms_w, err))
            goto out;
        if (it >= 0) {
            tf[it] = ms_f * 1e-3;
            tb[it] = ms_b * 1e-3;
            tw[it] = ms_w * 1e-3;
        }
        out->m_b = (double)after_f;
        out->m_w = (double)after_b;
    }
    qsort(tf, (size_t)reps, sizeof(double), cmp_double);
    qsort(tb, (size_t)reps, sizeof(double), cmp_double);
    qsort(tw, (size_t)reps, sizeof(double), cmp_double);
    out->t_f = tf[reps / 2];
    out->t_b = tb[reps / 2];
    out->t_w = tw[reps / 2];
    rc = 0;
out:
    zb_cuda_event_free(e0);
    zb_cuda_event_free(e1);
    zb_cuda_event_free(e2);
    zb_cuda_event_free(e3);
    free(tf);
    free(tb);
    free(tw);
    return rc;
}

/* Median time of a one-GPU stage-to-stage transfer of an activation. */
static int time_transfer(zb_cuda *a, zb_cuda *b, size_t bytes, int reps, double *out, zb_err *err)
{
    void *src = NULL, *dst = NULL;
    gpu_fence *f = NULL;
    zb_cuda_event *e0 = NULL, *e1 = NULL;
    double *t = calloc((size_t)reps, sizeof(double));
    int rc = -1;
    if (!t) {
        zb_fail(err, "out of memory");
        goto out;
    }
    if (zb_cuda_alloc(&src, bytes, err) || zb_cuda_alloc(&dst, bytes, err) ||
        gpu_fence_new(&f, err) || zb_cuda_event_new(&e0, err) || zb_cuda_event_new(&e1, err) ||
        zb_cuda_zero(a, src, bytes, err))
        goto out;
    for (int it = -1; it < reps; it++) {
        float ms;
        if (zb_cuda_mark(b, e0, err) || gpu_local_send(a, b, f, dst, src, bytes, err) ||
            zb_cuda_mark(b, e1, err) || zb_cuda_elapsed(e0, e1, &ms, err))
            goto out;
        if (it >= 0)
            t[it] = ms * 1e-3;
    }
    qsort(t, (size_t)reps, sizeof(double), cmp_double);
    *out = t[reps / 2];
    rc = 0;
out:
    zb_cuda_release(src);
    zb_cuda_release(dst);
    gpu_fence_free(f);
    zb_cuda_event_free(e0);
    zb_cuda_event_free(e1);
    free(t);
    return rc;
}

int gpu_profile_measure(const zb_model *m, int batch, int reps, int device, zb_profile *p,
                        zb_err *err)
{
    if (reps < 1)
        return zb_fail(err, "profile: reps must be at least 1, got %d", reps);
    if (batch <= 0)
        batch = m->micro_batch > 0 ? m->micro_batch : 1;
    zb_model one = *m;
    if (one.n_layers < 1)
        one.n_layers = 1;
    zb_cuda *c = NULL, *c2 = NULL;
    if (zb_cuda_create(device, &c, err) != 0 || zb_cuda_create(device, &c2, err) != 0) {
        zb_cuda_free(c);
        return -1;
    }
    profile_init(p);
    snprintf(p->model, sizeof p->model, "%s", m->name);
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, device) == cudaSuccess)
        snprintf(p->hardware, sizeof p->hardware, "%.31s", prop.name);
    p->micro_batch = batch;
    p->seq_len = m->seq_len;
    p->recompute = 0;
    int rc = 0;
    part_rig r;
    /* the three measured stages: layers [0, l1), embedding, head; and
     * where their figures go */
    struct { int l1, emb, head; profile_part *dst; } parts[3] = {
        { 1, 0, 0, &p->layer }, { 0, 1, 0, &p->embedding }, { 0, 0, 1, &p->head },
    };
    for (int i = 0; i < 3 && rc == 0; i++) {
        rc = rig_init(&r, c, &one, batch, parts[i].l1, parts[i].emb, parts[i].head, err);
        if (rc == 0)
            rc = time_part(&r, c, reps, parts[i].dst, err);
        if (rc == 0 && i == 0)
            p->static_bytes_per_layer = (double)gpu_stage_static_bytes(r.st);
        rig_free(&r);
    }
    if (rc == 0)
        rc = time_transfer(c, c2, (size_t)batch * m->seq_len * m->d_model * 2, reps, &p->t_comm,
                           err);
    zb_cuda_free(c2);
    zb_cuda_free(c);
    return rc;
}
