/*
 * adamw.h: the optimizer step of the CPU runtime: AdamW (decoupled weight
 * decay, Loshchilov & Hutter) with global-norm gradient clipping and a
 * warmup + cosine learning-rate schedule, as in nanoGPT's train.py.
 *
 * A pipeline stage owns a contiguous param buffer, a grad buffer of the
 * same layout and its own m, v state (llama.h), so the step works on one
 * contiguous slice at a time.  Clipping needs the global gradient norm over
 * ALL stages; to keep it bit-identical for every schedule and split, each
 * stage reports adamw_sum_squares of its buffer (double, summed in buffer
 * order) and the caller adds the per-stage values in stage order, then
 * calls adamw_clip_scale once.  That total depends on how the model is
 * split into stages (a different grouping of the double sums) but not on
 * the schedule.  For a total that is also independent of the split, use
 * adamw_tensor_sum_squares: one double per tensor; concatenate the stages'
 * arrays in stage order and add them sequentially from 0.
 *
 * Which parameters decay follows nanoGPT: every 2-D tensor (all matrices,
 * including the embedding and the LM head) decays; 1-D tensors (RMSNorm
 * gains) do not.  llama_tensor.decay carries the flag.
 */
#ifndef ZB_KERNELS_ADAMW_H
#define ZB_KERNELS_ADAMW_H

#include <stddef.h>

#include "kernels/cpu/llama.h"

/* Hyper-parameters of a run (nanoGPT shakespeare-char defaults noted). */
typedef struct adamw_config {
    float lr;            /* peak learning rate (1e-3) */
    float min_lr;        /* floor of the cosine decay (1e-4) */
    int warmup_steps;    /* linear warmup length in steps (100) */
    int decay_steps;     /* step at which the cosine reaches min_lr (5000) */
    float beta1;         /* first-moment decay (0.9) */
    float beta2;         /* second-moment decay (0.99) */
    float eps;           /* denominator epsilon (1e-8) */
    float weight_decay;  /* decoupled decay coefficient (0.1) */
    float grad_clip;     /* max global grad norm; <= 0 disables (1.0) */
} adamw_config;

/* Fills *c with the nanoGPT shakespeare-char defaults listed above. */
void adamw_config_default(adamw_config *c);

/* Learning rate at 0-based step `step`: linear warmup lr·(step+1)/warmup
 * for step < warmup, cosine from lr to min_lr up to decay_steps, min_lr
 * after (nanoGPT get_lr). */
float adamw_lr(const adamw_config *c, int step);

/* Σ g[i]² in double, summed in index order (deterministic). */
double adamw_sum_squares(const float *g, size_t n);

/* Writes out[i] = adamw_sum_squares of tensor i of the stage
 * (st->n_tensors doubles), and returns their sum in order. */
double adamw_tensor_sum_squares(const llama_stage *st, const float *grads,
                                double *out);

/* The factor to multiply gradients by: min(1, max_norm / (sqrt(total_sq) +
 * 1e-6)) (PyTorch clip_grad_norm_), or 1 when max_norm <= 0. */
float adamw_clip_scale(double total_sq, float max_norm);

/* One AdamW update of n floats, in place, for 1-based step t:
 *   g = grad_scale · grads[i]
 *   m = β1·m + (1-β1)·g ;  v = β2·v + (1-β2)·g²
 *   p -= lr · ( m/(1-β1^t) / (sqrt(v/(1-β2^t)) + eps) + wd · p )
 * wd is the decay coefficient for this slice (0 for no decay).  Elementwise,
 * so deterministic regardless of slicing. */
void adamw_update(float *params, const float *grads, float *m, float *v,
                  size_t n, int t, float lr, float beta1, float beta2,
                  float eps, float wd, float grad_scale);

/* Applies adamw_update to every tensor of a stage with the decay flag of
 * llama_tensor (c->weight_decay or 0).  m and v are the stage's state
 * buffers (llama_stage_num_params floats each, zero before step 1). */
void adamw_step_stage(const llama_stage *st, const adamw_config *c,
                      float *params, const float *grads, float *m, float *v,
                      int t, float lr, float grad_scale);

/* The two halves of adamw_update, for post-validation without a copy of
 * the moments (docs/cost-model.md, "rollback state"): adamw_update_params
 * writes the params exactly as adamw_update would (the new m and v are
 * computed and used, not stored), and a later adamw_update_moments with
 * the same grads, beta1, beta2 and grad_scale writes m and v exactly as
 * adamw_update would have.  Params-then-moments gives adamw_update's bits;
 * so does params alone undone by restoring the params.  The moments do
 * not depend on t. */
void adamw_update_params(float *params, const float *grads, const float *m, const float *v,
                         size_t n, int t, float lr, float beta1, float beta2, float eps,
                         float wd, float grad_scale);
void adamw_update_moments(const float *grads, float *m, float *v, size_t n, float beta1,
                          float beta2, float grad_scale);

/* adamw_step_stage's two halves, as adamw_update_params / _moments. */
void adamw_step_stage_params(const llama_stage *st, const adamw_config *c, float *params,
                             const float *grads, const float *m, const float *v, int t,
                             float lr, float grad_scale);
void adamw_step_stage_moments(const llama_stage *st, const adamw_config *c, const float *grads,
                              float *m, float *v, float grad_scale);

#endif
