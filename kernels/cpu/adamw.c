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

double adamw_sum_squares(const float *g, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)g[i] * g[i];
    return s;
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

void adamw_update(float *params, const float *grads, float *m, float *v,
                  size_t n, int t, float lr, float beta1, float beta2,
                  float eps, float wd, float grad_scale)
{
    assert(t >= 1);
    float bc1 = 1.0f - powf(beta1, (float)t);
    float bc2 = 1.0f - powf(beta2, (float)t);
    for (size_t i = 0; i < n; i++) {
        float g = grads[i] * grad_scale;
        m[i] = beta1 * m[i] + (1.0f - beta1) * g;
        v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
        float mhat = m[i] / bc1;
        float vhat = v[i] / bc2;
        params[i] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * params[i]);
    }
}

void adamw_step_stage(const llama_stage *st, const adamw_config *c,
                      float *params, const float *grads, float *m, float *v,
                      int t, float lr, float grad_scale)
{
    for (int i = 0; i < st->n_tensors; i++) {
        const llama_tensor *ten = &st->tensors[i];
        size_t o = ten->offset;
        adamw_update(params + o, grads + o, m + o, v + o, ten->count, t, lr,
                     c->beta1, c->beta2, c->eps,
                     ten->decay ? c->weight_decay : 0.0f, grad_scale);
    }
}
