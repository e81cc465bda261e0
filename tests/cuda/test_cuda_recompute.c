/*
 * test_cuda_recompute.c: recomputation on the CUDA backend (full and the
 * MLP level, gpu_stage.h's gpu_saved_set_recompute) against the CPU
 * backend at the same level, through runtime/backend.h's saved_new.
 *
 * For the `tiny` preset's first (embedding), middle and last (head)
 * stages and both levels, one micro-batch runs F, B and W on:
 *
 *   cpu-rc   the CPU backend at the level (bit-identical to no recompute
 *            on the CPU, llama.h's contract, so it is the reference)
 *   gpu-rc   the CUDA backend at the level
 *   gpu      the CUDA backend without recompute
 *
 * and checks, with the NMSE of tests/cuda/cuda_check.h:
 *
 *   F        gpu-rc's output or loss against cpu-rc's (bf16 storage, fp32
 *            accumulation: 1e-4 for an activation, 1e-5 for a loss, as
 *            test_cuda_backend)
 *   dropped  gpu-rc holds less after F than gpu: full keeps the inputs
 *            only (exactly the token and target slots, or the bf16 copy
 *            of act_in), mlp drops the four MLP block slots per layer
 *   B        the input gradient against cpu-rc's (1e-3), and against
 *            gpu's (1e-10: the rerun issues the same kernels on the same
 *            inputs, so only a nondeterministic kernel could move it)
 *   W        every weight-gradient tensor against cpu-rc's (2e-3) and
 *            against gpu's (1e-10), and W empties the saved state
 *
 * Skips (exit 77) without a CUDA device; compiled everywhere CUDA is.
 */
#include <string.h>

#include "kernels/cpu/backend_cpu.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/llama.h"
#include "kernels/cuda/backend_cuda.h"
#include "runtime/backend.h"
#include "src/model.h"
#include "tests/cuda/cuda_check.h"
#include "tests/cuda/cuda_stage_pass.h"

static zb_backend *cpu, *gpu;

static void test_stage(int l0, int l1, int emb, int head, int rc)
{
    char name[160], tag[80];
    snprintf(tag, sizeof tag, "%s [%d,%d)%s%s", rc == LLAMA_RC_FULL ? "full" : "mlp", l0, l1,
             emb ? "+emb" : "", head ? "+head" : "");
    csp_case cs;
    csp_case_init(&cs, "tiny", l0, l1, emb, head, 17, 99);
    const zb_model *mp = &cs.m;
    int N = cs.N;
    size_t A = cs.A;
    csp_out c, g, g0;
    csp_out_init(&c, &cs);
    csp_out_init(&g, &cs);
    csp_out_init(&g0, &cs);
    csp_run(cpu, &cs, rc, &c);
    csp_run(gpu, &cs, rc, &g);
    csp_run(gpu, &cs, LLAMA_RC_NONE, &g0);

    csp_expect_f_and_b(tag, &cs, &g, &c);
    /* what F keeps */
    if (rc == LLAMA_RC_FULL) {
        size_t inputs_bytes = (emb ? (size_t)N * 4 : A * 2) + (head ? (size_t)N * 4 : 0);
        snprintf(name, sizeof name, "F %s keeps the inputs only (%zu of %zu bytes)", tag,
                 g.after_f, g0.after_f);
        cc_true(name, g.after_f == inputs_bytes);
    } else {
        size_t mlp_bytes = (size_t)(l1 - l0) * ((size_t)N * mp->d_model * 2 +
                                                3 * (size_t)N * mp->d_ff * 2);
        snprintf(name, sizeof name, "F %s drops the MLP blocks (%zu of %zu bytes)", tag,
                 g.after_f, g0.after_f);
        cc_true(name, g0.after_f - g.after_f == mlp_bytes);
    }
    if (!emb) {
        snprintf(name, sizeof name, "B %s input gradient vs gpu without", tag);
        cc_expect(name, cc_nmse(g.dx, g0.dx, A), 1e-10);
    }
    double worst_cpu = csp_worst_grad_nmse(&cs, &g, &c);
    double worst_gpu = csp_worst_grad_nmse(&cs, &g, &g0);
    snprintf(name, sizeof name, "W %s every tensor vs cpu (worst)", tag);
    cc_expect(name, worst_cpu, 2e-3);
    snprintf(name, sizeof name, "W %s every tensor vs gpu without (worst)", tag);
    cc_expect(name, worst_gpu, 1e-10);
    snprintf(name, sizeof name, "W %s empties the saved state", tag);
    cc_true(name, g.after_w == 0);

    csp_out_free(&c);
    csp_out_free(&g);
    csp_out_free(&g0);
    csp_case_free(&cs);
}

int main(void)
{
    cc_require_device();
    kernels_init_threads(1);
    CC_OK(backend_cpu_create(1, &cpu, err));
    CC_OK(backend_cuda_create(0, 1, &gpu, err));
    CC_OK(gpu->ops->bind(gpu, 0, err));
    static const int levels[2] = { LLAMA_RC_FULL, LLAMA_RC_MLP };
    for (int k = 0; k < 2; k++) {
        test_stage(0, 2, 1, 0, levels[k]); /* first stage: tokens in */
        test_stage(1, 3, 0, 0, levels[k]); /* a middle stage: act_in copied */
        test_stage(2, 4, 0, 1, levels[k]); /* last stage: targets kept */
    }
    backend_free(gpu);
    backend_free(cpu);
    return cc_summary();
}
