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
    snprintf(tag, sizeof tag, "%s [%d,%d)%s%s", rc == LLAMA_RC_FULL ? "full" : "mlp", l0, l1,
             emb ? "+emb" : "", head ? "+head" : "");
    zb_model m;
    CC_OK(model_preset("tiny", &m, err));
    int B = 2, N = B * m.seq_len;
    size_t A = (size_t)N * (size_t)m.d_model;
    llama_stage L;
    CC_OK(llama_stage_init(&L, &m, l0, l1, emb, head, err));
    size_t n = llama_stage_num_params(&L);
    float *params = malloc(n * 4);
    llama_stage_init_params(&L, params, 17);
    for (size_t i = 0; i < n; i++)
        params[i] = bf16_round(params[i]); /* both backends compute with these */
    uint64_t s = 99;
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
    run_one(gpu, &L, params, B, LLAMA_RC_NONE, &in, &g0);

    if (head) {
        snprintf(name, sizeof name, "F %s loss %.5f vs %.5f", tag, g.loss, c.loss);
        cc_expect(name, cc_nmse(&g.loss, &c.loss, 1), 1e-5);
    } else {
        snprintf(name, sizeof name, "F %s output", tag);
        cc_expect(name, cc_nmse(g.out, c.out, A), 1e-4);
    }
    /* what F keeps */
    if (rc == LLAMA_RC_FULL) {
        size_t inputs_bytes = (emb ? (size_t)N * 4 : A * 2) + (head ? (size_t)N * 4 : 0);
        snprintf(name, sizeof name, "F %s keeps the inputs only (%zu of %zu bytes)", tag,
                 g.after_f, g0.after_f);
        cc_true(name, g.after_f == inputs_bytes);
    } else {
        size_t mlp_bytes = (size_t)(l1 - l0) * ((size_t)N * m.d_model * 2 +
                                                3 * (size_t)N * m.d_ff * 2);
        snprintf(name, sizeof name, "F %s drops the MLP blocks (%zu of %zu bytes)", tag,
                 g.after_f, g0.after_f);
        cc_true(name, g0.after_f - g.after_f == mlp_bytes);
    }
    if (!emb) {
        snprintf(name, sizeof name, "B %s input gradient vs cpu", tag);
        cc_expect(name, cc_nmse(g.dx, c.dx, A), 1e-3);
        snprintf(name, sizeof name, "B %s input gradient vs gpu without", tag);
        cc_expect(name, cc_nmse(g.dx, g0.dx, A), 1e-10);
    }
    double worst_cpu = 0, worst_gpu = 0;
    for (int t = 0; t < L.n_tensors; t++) {
        const llama_tensor *ten = &L.tensors[t];
        double e1 = cc_nmse(g.grads + ten->offset, c.grads + ten->offset, ten->count);
        double e2 = cc_nmse(g.grads + ten->offset, g0.grads + ten->offset, ten->count);
        worst_cpu = e1 > worst_cpu || !isfinite(e1) ? e1 : worst_cpu;
        worst_gpu = e2 > worst_gpu || !isfinite(e2) ? e2 : worst_gpu;
    }
    snprintf(name, sizeof name, "W %s every tensor vs cpu (worst)", tag);
    cc_expect(name, worst_cpu, 2e-3);
    snprintf(name, sizeof name, "W %s every tensor vs gpu without (worst)", tag);
    cc_expect(name, worst_gpu, 1e-10);
    snprintf(name, sizeof name, "W %s empties the saved state", tag);
    cc_true(name, g.after_w == 0);

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
