/*
 * run_checks.c: model support and the memory checks of `run` and
 * `profile` (run_checks.h).  The estimates are the runtime's
 * (runtime/footprint.h for a run, runtime/profiler.h for a profile): this
 * file only compares them with the memory this machine has available and
 * says so in one line.
 */
#include "src/cli/run_checks.h"

#include "runtime/footprint.h"
#include "runtime/profiler.h"
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

void run_estimate_memory(const sched_t *s, const zb_model *m, size_t n_tokens, int replicas,
                         const int *layers_per_stage, const int *recompute_stages,
                         run_memory *out)
{
    /* The runtime's one estimate (runtime/footprint.h).  A split or model
     * it refuses leaves 0 but the data: trainer_create refuses it, in its
     * own words, before allocating anything. */
    footprint fp;
    zb_err ignored;
    *out = (run_memory){ 0 };
    if (footprint_estimate(s, m, layers_per_stage, recompute_stages, n_tokens, replicas, &fp,
                           &ignored) != 0)
        return;
    out->params = fp.param_bytes;
    out->activations = fp.activations;
    out->messages = fp.messages;
    out->data = fp.data;
    out->total = fp.total;
    out->in_flight = fp.in_flight;
}

void run_estimate_profile(const zb_model *m, run_memory *out)
{
    /* runtime/profiler.h's own estimate of what it allocates; a model it
     * cannot lay out leaves 0 (the profiler then refuses it itself) */
    double stage = 0, act = 0;
    zb_err ignored;
    *out = (run_memory){ 0 };
    if (profiler_footprint(m, m->micro_batch, profiler_cpu_threads(), &stage, &act, &ignored) != 0)
        return;
    out->params = stage;
    out->activations = act;
    out->total = FOOTPRINT_SLACK * (stage + act);
    out->in_flight = 1;
}

double run_memory_available(void)
{
    return host_available_bytes();
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

int run_check_address_space(const run_memory *mem, int threads, zb_err *err)
{
    double left = host_address_space_left();
    double per_thread = footprint_thread_address_space();
    double need = mem->total + (threads > 0 ? threads : 1) * per_thread;
    if (left < 0 || need <= left)
        return 0;
    char n[32], l[32], t[32];
    zb_size_format(need, n, sizeof n);
    zb_size_format(left, l, sizeof l);
    zb_size_format(per_thread, t, sizeof t);
    return zb_fail(err, "the address-space limit (ulimit -v) leaves %s, but this run maps about %s "
                   "(%d kernel thread%s of %s each: a BLAS buffer, a malloc arena and a stack; and "
                   "the model and activations); raise the limit",
                   l, n, threads, threads == 1 ? "" : "s", t);
}
