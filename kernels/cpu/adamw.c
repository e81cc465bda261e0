/*
 * adamw.c: AdamW, global-norm clipping and the warmup + cosine schedule
 * (adamw.h).  Elementwise updates over a stage's contiguous buffers; the
 * only reduction (sum of squares for clipping) runs in double in index
 * order so that it is reproducible.  Workload: ~10M floats per step for
 * shakespeare-char, memory-bound.
 */
#include "kernels/cpu/adamw.h"

#include <assert.h>
#include <math.h>

#include "kernels/cpu/team.h"
#include "kernels/cpu/vmath.h"

void adamw_config_default(adamw_config *c)
{
    c->lr = 1e-3f;
    c->min_lr = 1e-4f;
    c->warmup_steps = 100;
    c->decay_steps = 5000;
    c->beta1 = 0.9f;
    c->beta2 = 0.99f;
    c->eps = 1e-8f;
    c->weight_decay = 0.1f;
    c->grad_clip = 1.0f;
}

float adamw_lr(const adamw_config *c, int step)
{
    if (step < c->warmup_steps)
        return (float)((double)c->lr * (step + 1) / c->warmup_steps);
    if (step >= c->decay_steps)
        return c->min_lr;
    double span = (double)(c->decay_steps - c->warmup_steps);
    double ratio = span > 0 ? (step - c->warmup_steps) / span : 1.0;
    double coeff = 0.5 * (1.0 + cos(M_PI * ratio));
    return (float)(c->min_lr + coeff * ((double)c->lr - c->min_lr));
}

/* Four partial sums by index mod 4, added in a fixed order at the end:
 * the same bits for a given n on every run, and a quarter of the
 * dependency chain of one running sum. */
KERN_VECTOR double adamw_sum_squares(const float *restrict g, size_t n)
{
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += (double)g[i] * g[i];
        s1 += (double)g[i + 1] * g[i + 1];
        s2 += (double)g[i + 2] * g[i + 2];
        s3 += (double)g[i + 3] * g[i + 3];
    }
    for (; i < n; i++)
        s0 += (double)g[i] * g[i];
    return (s0 + s1) + (s2 + s3);
}

double adamw_tensor_sum_squares(const llama_stage *st, const float *grads,
                                double *out)
{
    double total = 0.0;
    for (int t = 0; t < st->n_tensors; t++) {
        double s = adamw_sum_squares(grads + st->tensors[t].offset,
                                     st->tensors[t].count);
        if (out)
            out[t] = s;
        total += s;
    }
    return total;
}

float adamw_clip_scale(double total_sq, float max_norm)
{
    if (max_norm <= 0)
        return 1.0f;
    double norm = sqrt(total_sq);
    double scale = (double)max_norm / (norm + 1e-6);
    return scale < 1.0 ? (float)scale : 1.0f;
}

/* The update of elements [lo, hi): elementwise, so vectorized or split
 * over threads it gives the same bits. */
KERN_VECTOR static void adamw_range(float *restrict params, const float *restrict grads,
                                    float *restrict m, float *restrict v, size_t lo, size_t hi,
                                    float lr, float beta1, float beta2, float eps, float wd,
                                    float grad_scale, float bc1, float bc2)
{
    for (size_t i = lo; i < hi; i++) {
        float g = grads[i] * grad_scale;
        float mi = beta1 * m[i] + (1.0f - beta1) * g;
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi / bc1;
        float vhat = vi / bc2;
        params[i] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * params[i]);
    }
}

/* adamw_range's parameter update alone: the same expressions, so the
 * same bits, with the new moments kept in registers and m, v left as they
 * were (adamw_update_params). */
KERN_VECTOR static void adamw_range_params(float *restrict params, const float *restrict grads,
                                           const float *restrict m, const float *restrict v,
                                           size_t lo, size_t hi, float lr, float beta1,
                                           float beta2, float eps, float wd, float grad_scale,
                                           float bc1, float bc2)
{
    for (size_t i = lo; i < hi; i++) {
        float g = grads[i] * grad_scale;
        float mi = beta1 * m[i] + (1.0f - beta1) * g;
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        float mhat = mi / bc1;
        float vhat = vi / bc2;
        params[i] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * params[i]);
    }
}

/* adamw_range's moment update alone (adamw_update_moments). */
KERN_VECTOR static void adamw_range_moments(const float *restrict grads, float *restrict m,
                                            float *restrict v, size_t lo, size_t hi, float beta1,
                                            float beta2, float grad_scale)
{
    for (size_t i = lo; i < hi; i++) {
        float g = grads[i] * grad_scale;
        m[i] = beta1 * m[i] + (1.0f - beta1) * g;
        v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
    }
}

/* Which buffers one adamw_job writes. */
typedef enum adamw_part {
    ADAMW_ALL,     /* params, m and v: adamw_range */
    ADAMW_PARAMS,  /* params alone: adamw_range_params */
    ADAMW_MOMENTS  /* m and v alone: adamw_range_moments */
} adamw_part;

/* One adamw_update (or one of its halves), shared out over the calling
 * thread's team in chunks of ADAMW_CHUNK elements. */
typedef struct adamw_job {
    float *params, *m, *v;       /* updated in place (as `part` says) */
    const float *grads;          /* read */
    size_t n;                    /* elements */
    float lr, beta1, beta2, eps, wd, grad_scale, bc1, bc2; /* as adamw_range's */
    adamw_part part;             /* which buffers to write */
} adamw_job;
enum { ADAMW_CHUNK = 32768 };

static void adamw_chunks(void *p, int lo, int hi)
{
    const adamw_job *j = p;
    size_t e0 = (size_t)lo * ADAMW_CHUNK, e1 = (size_t)hi * ADAMW_CHUNK;
    if (e1 > j->n)
        e1 = j->n;
    switch (j->part) {
    case ADAMW_ALL:
        adamw_range(j->params, j->grads, j->m, j->v, e0, e1, j->lr, j->beta1, j->beta2, j->eps,
                    j->wd, j->grad_scale, j->bc1, j->bc2);
        break;
    case ADAMW_PARAMS:
        adamw_range_params(j->params, j->grads, j->m, j->v, e0, e1, j->lr, j->beta1, j->beta2,
                           j->eps, j->wd, j->grad_scale, j->bc1, j->bc2);
        break;
    case ADAMW_MOMENTS:
        adamw_range_moments(j->grads, j->m, j->v, e0, e1, j->beta1, j->beta2, j->grad_scale);
        break;
    }
}

static void adamw_run(adamw_part part, float *params, const float *grads, float *m, float *v,
                      size_t n, int t, float lr, float beta1, float beta2, float eps, float wd,
                      float grad_scale)
{
    assert(t >= 1);
    adamw_job j = { params, m, v, grads, n, lr, beta1, beta2, eps, wd, grad_scale,
                    1.0f - powf(beta1, (float)t), 1.0f - powf(beta2, (float)t), part };
    kern_parallel((int)((n + ADAMW_CHUNK - 1) / ADAMW_CHUNK), 4, adamw_chunks, &j);
}

void adamw_update(float *params, const float *grads, float *m, float *v,
                  size_t n, int t, float lr, float beta1, float beta2,
                  float eps, float wd, float grad_scale)
{
    adamw_run(ADAMW_ALL, params, grads, m, v, n, t, lr, beta1, beta2, eps, wd, grad_scale);
}

void adamw_update_params(float *params, const float *grads, const float *m, const float *v,
                         size_t n, int t, float lr, float beta1, float beta2, float eps,
                         float wd, float grad_scale)
{
    /* m and v are only read in this part */
    adamw_run(ADAMW_PARAMS, params, grads, (float *)m, (float *)v, n, t, lr, beta1, beta2, eps,
              wd, grad_scale);
}

void adamw_update_moments(const float *grads, float *m, float *v, size_t n, float beta1,
                          float beta2, float grad_scale)
{
    adamw_run(ADAMW_MOMENTS, NULL, grads, m, v, n, 1, 0.0f, beta1, beta2, 0.0f, 0.0f,
              grad_scale);
}

/* adamw_step_stage and its two halves: one part over every tensor. */
static void adamw_stage_part(adamw_part part, const llama_stage *st, const adamw_config *c,
                             float *params, const float *grads, float *m, float *v, int t,
                             float lr, float grad_scale)
{
    for (int i = 0; i < st->n_tensors; i++) {
        const llama_tensor *ten = &st->tensors[i];
        size_t o = ten->offset;
        adamw_run(part, params ? params + o : NULL, grads + o, m + o, v + o, ten->count, t, lr,
                  c->beta1, c->beta2, c->eps, ten->decay ? c->weight_decay : 0.0f, grad_scale);
    }
}

void adamw_step_stage(const llama_stage *st, const adamw_config *c,
                      float *params, const float *grads, float *m, float *v,
                      int t, float lr, float grad_scale)
{
    adamw_stage_part(ADAMW_ALL, st, c, params, grads, m, v, t, lr, grad_scale);
}

void adamw_step_stage_params(const llama_stage *st, const adamw_config *c, float *params,
                             const float *grads, const float *m, const float *v, int t,
                             float lr, float grad_scale)
{
    adamw_stage_part(ADAMW_PARAMS, st, c, params, grads, (float *)m, (float *)v, t, lr,
                     grad_scale);
}

void adamw_step_stage_moments(const llama_stage *st, const adamw_config *c, const float *grads,
                              float *m, float *v, float grad_scale)
{
    adamw_stage_part(ADAMW_MOMENTS, st, c, NULL, grads, m, v, 1, 0.0f, grad_scale);
}
