/*
 * test_cuda_memory_stage.c: memory layers on the GPU stage
 * (kernels/cuda/gpu_stage.cu over memory_cuda.h's kernels) against the CPU
 * backend, through runtime/backend.h.
 *
 * On the `tiny-mem` preset (4 layers, layer 2 a product-key memory layer
 * in place of its SwiGLU MLP), one micro-batch runs F, B and W on the
 * CPU backend and on the CUDA backend for: the memory layer alone
 * ([2, 3)), a SwiGLU and the memory layer ([1, 3)) with and without
 * MLP-level recompute, and the whole model with the embedding and head.
 * Compared with the NMSE of tests/cuda/cuda_check.h, bounds sized for
 * bf16 storage and fp32 accumulation as in test_cuda_backend:
 *
 *   F   the output activation (1e-4) or the loss (1e-5)
 *   B   the input gradient (1e-3)
 *   W   every tensor, the memory's query, keys, values (sparse), gate
 *       and output projections included (2e-3)
 *   mlp recompute: the memory layer's slots stay (what F keeps drops by
 *       exactly the SwiGLU layer's MLP block), and B and W equal the GPU
 *       run without recompute (1e-10)
 *
 * The lookup picks the top-k slots per head: the bounds assume no near
 * tie of scores flips a chosen slot between bf16 and fp32 (unmeasured at
 * this seed until a GPU runs it; a failure confined to the memory tensors
 * points there first; test_cuda_memory checks the kernels alone).
 *
 * Skips (exit 77) without a CUDA device.
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
    snprintf(tag, sizeof tag, "[%d,%d)%s%s%s", l0, l1, emb ? "+emb" : "", head ? "+head" : "",
             rc == LLAMA_RC_MLP ? " mlp" : "");
    csp_case cs;
    csp_case_init(&cs, "tiny-mem", l0, l1, emb, head, 31, 5);
    const zb_model *mp = &cs.m;
    const llama_stage *L = &cs.L;
    int N = cs.N;
    size_t A = cs.A;
    csp_out c, g, g0;
    csp_out_init(&c, &cs);
    csp_out_init(&g, &cs);
    csp_out_init(&g0, &cs);
    csp_run(cpu, &cs, rc, &c);
    csp_run(gpu, &cs, rc, &g);
    csp_expect_f_and_b(tag, &cs, &g, &c);
    for (int t = 0; t < L->n_tensors; t++) {
        const llama_tensor *ten = &L->tensors[t];
        snprintf(name, sizeof name, "W %s %s", tag, ten->name);
        cc_expect(name, cc_nmse(g.grads + ten->offset, c.grads + ten->offset, ten->count), 2e-3);
    }
    snprintf(name, sizeof name, "W %s empties the saved state", tag);
    cc_true(name, g.after_w == 0);
    if (rc == LLAMA_RC_MLP) {
        csp_run(gpu, &cs, LLAMA_RC_NONE, &g0);
        int swiglu = 0;
        for (int l = l0; l < l1; l++)
            swiglu += !model_is_memory_layer(mp, l);
        size_t mlp_bytes = (size_t)swiglu * ((size_t)N * mp->d_model * 2 + 3 * (size_t)N * mp->d_ff * 2);
        snprintf(name, sizeof name, "F %s drops only the SwiGLU blocks (%zu of %zu bytes)", tag,
                 g.after_f, g0.after_f);
        cc_true(name, g0.after_f - g.after_f == mlp_bytes);
        double worst = csp_worst_grad_nmse(&cs, &g, &g0);
        snprintf(name, sizeof name, "W %s vs gpu without recompute (worst)", tag);
        cc_expect(name, worst, 1e-10);
        snprintf(name, sizeof name, "B %s vs gpu without recompute", tag);
        cc_expect(name, cc_nmse(g.dx, g0.dx, A), 1e-10);
    }
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
    test_stage(2, 3, 0, 0, LLAMA_RC_NONE); /* the memory layer alone */
    test_stage(1, 3, 0, 0, LLAMA_RC_NONE); /* a SwiGLU and the memory layer */
    test_stage(1, 3, 0, 0, LLAMA_RC_MLP);  /* the same at the MLP level */
    test_stage(0, 4, 1, 1, LLAMA_RC_NONE); /* the whole model */
    backend_free(gpu);
    backend_free(cpu);
    return cc_summary();
}
