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

static zb_backend *cpu, *gpu;

static uint64_t lcg(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s;
}

static float bf16_round(float x)
{
    return zb_bf16_to_f32(zb_bf16_from_f32(x));
}

/* What one backend's F, B and W of one micro-batch gave. */
typedef struct run_out {
    float loss;         /* head stage */
    float *out;         /* [A] F output (no head) */
    float *dx;          /* [A] B input gradient (no embedding) */
    float *grads;       /* [n] W gradients */
    size_t after_f;     /* saved bytes after F */
    size_t after_w;     /* saved bytes after W (0) */
} run_out;

/* The micro-batch's inputs, the same for every run. */
typedef struct inputs {
    int32_t *tok, *tgt; /* [N] */
    float *x, *dy;      /* [A] */
} inputs;

/* F, B, W of one micro-batch of B sequences on backend be at level rc. */
static void run_one(zb_backend *be, const llama_stage *L, const float *params, int B, int rc,
                    const inputs *in, run_out *o)
{
    int emb = L->has_embedding, head = L->has_head;
    size_t A = (size_t)B * L->cfg.seq_len * (size_t)L->cfg.d_model;
    size_t n = llama_stage_num_params(L);
    zb_bstage *st;
    CC_OK(be->ops->stage_new(be, L, NULL, 0, &st, err));
    memcpy(be->ops->host(be, st, ZB_BUF_PARAMS), params, n * 4);
    if (be->ops->upload)
        CC_OK(be->ops->upload(be, st, ZB_BUF_PARAMS, err));
    CC_OK(be->ops->grads_zero(be, st, NULL, err));
    void *a_in = be->ops->act_new(be, A), *a_out = be->ops->act_new(be, A);
    if (!a_in || !a_out) {
        printf("out of memory for activations\n");
        exit(1);
    }
    CC_OK(be->ops->act_upload(be, a_in, in->x, A, err));
    zb_bsaved *sv;
    CC_OK(be->ops->saved_new(be, st, B, rc, &sv, err));
    CC_OK(be->ops->forward(be, st, sv, emb ? in->tok : NULL, emb ? NULL : a_in,
                           head ? in->tgt : NULL, head ? NULL : a_out, head ? &o->loss : NULL,
                           err));
    CC_OK(be->ops->sync(be, st, err));
    o->after_f = be->ops->saved_bytes(be, sv);
    if (!head)
        CC_OK(be->ops->act_download(be, a_out, o->out, A, err));
    CC_OK(be->ops->act_upload(be, a_out, in->dy, A, err));
    CC_OK(be->ops->backward_b(be, st, sv, 0.5f, head ? NULL : a_out, emb ? NULL : a_in, err));
    CC_OK(be->ops->backward_w(be, st, sv, NULL, err));
    CC_OK(be->ops->sync(be, st, err));
    o->after_w = be->ops->saved_bytes(be, sv);
    if (!emb)
        CC_OK(be->ops->act_download(be, a_in, o->dx, A, err));
    if (be->ops->download)
        CC_OK(be->ops->download(be, st, ZB_BUF_GRADS, err));
    memcpy(o->grads, be->ops->host(be, st, ZB_BUF_GRADS), n * 4);
    be->ops->saved_free(be, sv);
    be->ops->act_free(be, a_in);
    be->ops->act_free(be, a_out);
    be->ops->stage_free(be, st);
}

static void run_out_init(run_out *o, size_t A, size_t n)
{
    memset(o, 0, sizeof *o);
    o->out = calloc(A, 4);
    o->dx = calloc(A, 4);
    o->grads = calloc(n ? n : 1, 4);
    if (!o->out || !o->dx || !o->grads) {
        printf("out of host memory\n");
        exit(1);
    }
}

static void run_out_free(run_out *o)
{
    free(o->out);
    free(o->dx);
    free(o->grads);
}

static void test_stage(int l0, int l1, int emb, int head, int rc)
{
    char name[160], tag[80];
    snprintf(tag, sizeof tag, "[%d,%d)%s%s%s", l0, l1, emb ? "+emb" : "", head ? "+head" : "",
             rc == LLAMA_RC_MLP ? " mlp" : "");
    zb_model m;
    CC_OK(model_preset("tiny-mem", &m, err));
    int B = 2, N = B * m.seq_len;
    size_t A = (size_t)N * (size_t)m.d_model;
    llama_stage L;
    CC_OK(llama_stage_init(&L, &m, l0, l1, emb, head, err));
    size_t n = llama_stage_num_params(&L);
    float *params = malloc(n * 4);
    llama_stage_init_params(&L, params, 31);
    for (size_t i = 0; i < n; i++)
        params[i] = bf16_round(params[i]);
    uint64_t s = 5;
    inputs in = { malloc(sizeof(int32_t) * N), malloc(sizeof(int32_t) * N), malloc(A * 4),
                  malloc(A * 4) };
    for (int i = 0; i < N; i++) {
        in.tok[i] = (int32_t)((lcg(&s) >> 33) % (uint64_t)m.vocab);
        in.tgt[i] = (int32_t)((lcg(&s) >> 33) % (uint64_t)m.vocab);
    }
    for (size_t i = 0; i < A; i++) {
        in.x[i] = bf16_round((float)((double)(lcg(&s) >> 11) / 9007199254740992.0 * 2 - 1));
        in.dy[i] = bf16_round((float)((double)((lcg(&s) >> 7) & 0xffff) / 65536.0 - 0.5) * 1e-2f);
    }
    run_out c, g, g0;
    run_out_init(&c, A, n);
    run_out_init(&g, A, n);
    run_out_init(&g0, A, n);
    run_one(cpu, &L, params, B, rc, &in, &c);
    run_one(gpu, &L, params, B, rc, &in, &g);
    if (head) {
        snprintf(name, sizeof name, "F %s loss %.5f vs %.5f", tag, g.loss, c.loss);
        cc_expect(name, cc_nmse(&g.loss, &c.loss, 1), 1e-5);
    } else {
        snprintf(name, sizeof name, "F %s output", tag);
        cc_expect(name, cc_nmse(g.out, c.out, A), 1e-4);
    }
    if (!emb) {
        snprintf(name, sizeof name, "B %s input gradient", tag);
        cc_expect(name, cc_nmse(g.dx, c.dx, A), 1e-3);
    }
    for (int t = 0; t < L.n_tensors; t++) {
        const llama_tensor *ten = &L.tensors[t];
        snprintf(name, sizeof name, "W %s %s", tag, ten->name);
        cc_expect(name, cc_nmse(g.grads + ten->offset, c.grads + ten->offset, ten->count), 2e-3);
    }
    snprintf(name, sizeof name, "W %s empties the saved state", tag);
    cc_true(name, g.after_w == 0);
    if (rc == LLAMA_RC_MLP) {
        run_one(gpu, &L, params, B, LLAMA_RC_NONE, &in, &g0);
        int swiglu = 0;
        for (int l = l0; l < l1; l++)
            swiglu += !model_is_memory_layer(&m, l);
        size_t mlp_bytes = (size_t)swiglu * ((size_t)N * m.d_model * 2 + 3 * (size_t)N * m.d_ff * 2);
        snprintf(name, sizeof name, "F %s drops only the SwiGLU blocks (%zu of %zu bytes)", tag,
                 g.after_f, g0.after_f);
        cc_true(name, g0.after_f - g.after_f == mlp_bytes);
        double worst = 0;
        for (int t = 0; t < L.n_tensors; t++) {
            const llama_tensor *ten = &L.tensors[t];
            double e = cc_nmse(g.grads + ten->offset, g0.grads + ten->offset, ten->count);
            worst = e > worst || !isfinite(e) ? e : worst;
        }
        snprintf(name, sizeof name, "W %s vs gpu without recompute (worst)", tag);
        cc_expect(name, worst, 1e-10);
        snprintf(name, sizeof name, "B %s vs gpu without recompute", tag);
        cc_expect(name, cc_nmse(g.dx, g0.dx, A), 1e-10);
    }
    run_out_free(&c);
    run_out_free(&g);
    run_out_free(&g0);
    free(in.tok); free(in.tgt); free(in.x); free(in.dy);
    free(params);
    llama_stage_free(&L);
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
