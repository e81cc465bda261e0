/*
 * run_checks.c: model support and the memory estimate of `run`
 * (run_checks.h).
 *
 * The activation figure follows the kernels' saved-state slots
 * (kernels/cpu/llama.c, slot_spec): per token and layer, what a forward
 * keeps (x, two norms and their rstd, attention output, residual, SwiGLU
 * output, q, k, v, the log-sum-exp per head, the gate and up
 * pre-activations) or what a B keeps for its W (the output gradients of
 * every matmul), whichever is larger; the head keeps its logits and their
 * gradient (2 V per token), the embedding the tokens and the input
 * gradient.  A device holds a stage's slots for a micro-batch from its F
 * until its W (or BW); walking each device's op list gives the busiest
 * moment exactly, whatever the schedule.  Everything is computed in
 * doubles so that absurd sizes cannot overflow.
 */
#include "src/cli/run_checks.h"

#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "runtime/footprint.h"
#include "runtime/split.h"
#include "src/size.h"

int run_check_model(const zb_model *m, int from_file, int cuda, zb_err *err)
{
    if (!m->swiglu)
        return zb_fail(err, "model '%s': swiglu 0 (a GPT-style MLP) is not implemented by the runtime, "
                       "whose kernels are SwiGLU only", m->name);
    if (m->tied_embedding)
        return zb_fail(err, "model '%s': tied_embedding 1 is not implemented by the runtime (the "
                       "embedding and the LM head live on different stages); set it to 0", m->name);
    if (m->rope_theta <= 0)
        return zb_fail(err, "model '%s': rope_theta 0 (learned positions) is not implemented by the "
                       "runtime, which uses RoPE", m->name);
    zb_dtype want = cuda ? ZB_BF16 : ZB_FP32;
    if (from_file && m->dtype != want)
        return zb_fail(err, "model '%s': dtype %s, but %s computes in %s only; set \"dtype\": \"%s\"",
                       m->name, zb_dtype_name(m->dtype), cuda ? "the CUDA backend" : "the CPU backend",
                       zb_dtype_name(want), zb_dtype_name(want));
    return 0;
}

/* Floats per token one layer keeps for a micro-batch in flight. */
static double layer_floats_per_token(const zb_model *m)
{
    double d = m->d_model, ff = m->d_ff, hd = (double)m->d_model / m->n_heads;
    double q = hd * m->n_heads, kv = hd * m->n_kv_heads;
    double after_f = 4 * d + 2 + q + ff /* kept for B and W */ + q + 2 * kv + m->n_heads + 2 * ff;
    double after_b = 4 * d + 2 + q + ff /* still kept for W */ + 4 * d + 2 * ff + q + 2 * kv;
    return after_f > after_b ? after_f : after_b;
}

/* Extra parameters of the product-key memory layers (kernels/cpu/llama.h):
 * each replaces w1, w3, w2 by a query projection, half-key tables, a
 * value table of n_keys^2 rows (one for all layers when shared), the
 * gate and the output projections.  The value table dominates and can
 * dwarf the rest of a small model. */
static double memory_layer_params(const zb_model *m)
{
    const zb_memory *mm = &m->memory;
    if (mm->n_layers <= 0)
        return 0;
    double d = m->d_model, per = d * mm->heads * mm->k_dim + (double)mm->heads * 2 * mm->n_keys * (mm->k_dim / 2) +
                                 2 * d * mm->value_dim;
    double values = (double)mm->n_keys * mm->n_keys * mm->value_dim;
    return mm->n_layers * (per - 3 * d * m->d_ff) + (mm->shared_values ? 1 : mm->n_layers) * values;
}

void run_estimate_memory(const sched_t *s, const zb_model *m, size_t n_tokens, int replicas,
                         run_memory *out)
{
    const double f = sizeof(float);
    double N = (double)m->micro_batch * m->seq_len; /* tokens per micro-batch */
    double d = m->d_model, V = m->vocab, ff = m->d_ff;
    double q = (d / m->n_heads) * m->n_heads;
    *out = (run_memory){ 0 };
    /* Parameters from the kernels' own tensor table (runtime/footprint.h),
     * memory layers included, so that the estimate cannot drift from what
     * trainer_create allocates.  A split the model cannot take leaves 0:
     * trainer_create refuses it before allocating anything. */
    double n_params, param_bytes;
    zb_err split_err;
    if (trainer_footprint(m, s->n_stages, NULL, &n_params, &param_bytes, &split_err) == 0)
        out->params = param_bytes;

    /* Bytes one micro-batch keeps on each stage, from its layers. */
    double *stage_bytes = calloc((size_t)s->n_stages, sizeof *stage_bytes);
    int *first = malloc(sizeof *first * (size_t)(s->n_stages + 1));
    zb_err ignored;
    if (stage_bytes && first && split_layers(m->n_layers, s->n_stages, first, &ignored) == 0) {
        double lf = layer_floats_per_token(m);
        for (int st = 0; st < s->n_stages; st++) {
            double floats = (first[st + 1] - first[st]) * lf;
            if (st == 0)
                floats += 1 + d; /* tokens, input gradient */
            if (st == s->n_stages - 1)
                floats += 3 * d + 3 + 2 * V; /* final norm, logits and their gradient */
            stage_bytes[st] = N * floats * f;
        }
        for (int dev = 0; dev < s->n_devices; dev++) {
            const sched_lane *l = &s->dev[dev];
            double now = 0, peak = 0;
            int count = 0, most = 0;
            for (int i = 0; i < l->n_ops; i++) {
                sched_op op = l->ops[i];
                if (op.kind == OP_F) {
                    now += stage_bytes[op.stage];
                    count++;
                } else if (op.kind == OP_W || op.kind == OP_BW) {
                    now -= stage_bytes[op.stage];
                    count--;
                }
                if (now > peak)
                    peak = now;
                if (count > most)
                    most = count;
            }
            /* The kernels' per-op scratch (normed input, attention, MLP). */
            out->activations += peak + N * (d + q + ff) * f;
            if (most > out->in_flight)
                out->in_flight = most;
        }
    } else {
        /* Sizes the trainer will refuse anyway (more stages than layers):
         * count every micro-batch on every layer. */
        out->activations = (double)s->n_micro * N * (m->n_layers * layer_floats_per_token(m) + 2 * V) * f;
        out->in_flight = s->n_micro;
    }
    free(stage_bytes);
    free(first);
    /* At worst every micro-batch's activation and gradient wait at every
     * stage boundary. */
    out->messages = 2.0 * s->n_micro * (s->n_stages - 1) * N * d * f;
    out->data = (double)n_tokens * (1 + sizeof(int32_t)) + 2.0 * s->n_micro * N * sizeof(int32_t);
    /* The slots above are what the kernels keep; their temporaries in B
     * and W and the allocator's overhead come on top: at batch 500 the
     * peak RSS was 11% above the sum (bench/README.md), hence 1.15. */
    out->total = 1.15 * ((out->params + out->activations + out->messages) * (replicas > 0 ? replicas : 1) +
                         out->data);
}

void run_estimate_profile(const zb_model *m, run_memory *out)
{
    const double f = sizeof(float);
    double N = (double)m->micro_batch * m->seq_len, d = m->d_model, V = m->vocab, ff = m->d_ff;
    double hd = d / m->n_heads, q = hd * m->n_heads, kv = hd * m->n_kv_heads;
    double n_params = V * d + (2 * d + d * q + 2 * d * kv + q * d + 3 * d * ff) + d + d * V;
    if (m->memory.n_layers > 0) /* the profiler measures a memory layer too */
        n_params += memory_layer_params(m) / m->memory.n_layers * 2;
    *out = (run_memory){ 0 };
    out->params = 7 * n_params * f;
    out->activations = N * (layer_floats_per_token(m) + 1 + d + 3 * d + 3 + 2 * V + d + q + ff) * f;
    out->messages = 2 * N * d * f;
    out->data = 2 * N * sizeof(int32_t);
    out->total = 1.15 * (out->params + out->activations + out->messages + out->data);
    out->in_flight = 1;
}

double run_physical_memory(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    if (pages <= 0 || page <= 0)
        return 0;
    return (double)pages * (double)page;
}

int run_check_memory(const run_memory *mem, double physical, zb_err *err)
{
    if (physical <= 0 || mem->total <= physical)
        return 0;
    char need[32], have[32], par[32], act[32];
    zb_size_format(mem->total, need, sizeof need);
    zb_size_format(physical, have, sizeof have);
    zb_size_format(mem->params, par, sizeof par);
    zb_size_format(mem->activations, act, sizeof act);
    return zb_fail(err, "the run needs about %s of memory (parameters and optimizer %s, activations %s "
                   "for up to %d micro-batches in flight per device), but this machine has %s: "
                   "use a smaller --batch-size, model or schedule", need, par, act, mem->in_flight, have);
}
