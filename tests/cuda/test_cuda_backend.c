/*
 * test_cuda_backend.c: every op of the CUDA backend against the CPU
 * backend, through the backend interface the executor uses
 * (runtime/backend.h), in the spirit of ggml's test-backend-ops: the same
 * inputs go to both backends, and each output is compared with the
 * normalised mean squared error against a bound sized for bf16
 * (tests/cuda/cuda_check.h).
 *
 * On the `tiny` preset, for four stage shapes (the whole model, the first
 * stage with the embedding, a middle one, the last with the head):
 *
 *   F          output activation or loss
 *   B          input gradient
 *   W          every weight-gradient tensor, into the stage's grads and,
 *              the path of a W run ahead of order, into a spare buffer
 *              added with grads_add
 *   norms      per-tensor sums of squares of the gradients
 *   AdamW      params, m and v after one step from the same gradients
 *   snapshot   restore gives back the exact params and moments
 *   mirrors    upload then download of each buffer is exact
 *
 * The CPU gets the bf16-rounded weights and inputs the GPU computes with.
 * Skips (exit 77) without a CUDA device.
 */
#include <string.h>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/llama.h"
#include "kernels/cuda/backend_cuda.h"
#include "kernels/cpu/backend_cpu.h"
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

/* The stage [l0, l1) on both backends with the same bf16-exact weights. */
static void test_stage(int l0, int l1, int emb, int head)
{
    char name[160], tag[64];
    snprintf(tag, sizeof tag, "[%d,%d)%s%s", l0, l1, emb ? "+emb" : "", head ? "+head" : "");
    zb_model m;
    CC_OK(model_preset("tiny", &m, err));
    int B = 2, N = B * m.seq_len;
    size_t A = (size_t)N * (size_t)m.d_model;
    llama_stage L;
    CC_OK(llama_stage_init(&L, &m, l0, l1, emb, head, err));
    size_t n = llama_stage_num_params(&L);
    zb_bstage *cs, *gs;
    CC_OK(cpu->ops->stage_new(cpu, &L, NULL, 0, &cs, err));
    CC_OK(gpu->ops->stage_new(gpu, &L, NULL, 0, &gs, err));
    float *cp = cpu->ops->host(cpu, cs, ZB_BUF_PARAMS);
    llama_stage_init_params(&L, cp, 11);
    for (size_t i = 0; i < n; i++)
        cp[i] = bf16_round(cp[i]);
    memcpy(gpu->ops->host(gpu, gs, ZB_BUF_PARAMS), cp, n * 4);
    CC_OK(gpu->ops->upload(gpu, gs, ZB_BUF_PARAMS, err));

    /* inputs: tokens, targets, an input activation and an output gradient */
    uint64_t s = 1234;
    int32_t *tok = malloc(sizeof *tok * N), *tgt = malloc(sizeof *tgt * N);
    for (int i = 0; i < N; i++) {
        tok[i] = (int32_t)((lcg(&s) >> 33) % (uint64_t)m.vocab);
        tgt[i] = (int32_t)((lcg(&s) >> 33) % (uint64_t)m.vocab);
    }
    float *x = malloc(A * 4), *dy = malloc(A * 4), *c_out = malloc(A * 4), *g_out = malloc(A * 4);
    for (size_t i = 0; i < A; i++) {
        x[i] = bf16_round((float)((double)(lcg(&s) >> 11) / 9007199254740992.0 * 2 - 1));
        dy[i] = bf16_round((float)((double)((lcg(&s) >> 7) & 0xffff) / 65536.0 - 0.5) * 1e-2f);
    }
    void *c_in = cpu->ops->act_new(cpu, A), *g_in = gpu->ops->act_new(gpu, A);
    void *c_o = cpu->ops->act_new(cpu, A), *g_o = gpu->ops->act_new(gpu, A);
    cc_true("activations allocated", c_in && g_in && c_o && g_o);
    CC_OK(cpu->ops->act_upload(cpu, c_in, x, A, err));
    CC_OK(gpu->ops->act_upload(gpu, g_in, x, A, err));

    /* F */
    zb_bsaved *csv, *gsv;
    CC_OK(cpu->ops->saved_new(cpu, cs, B, 0, &csv, err));
    CC_OK(gpu->ops->saved_new(gpu, gs, B, 0, &gsv, err));
    float closs = 0, gloss = 0;
    CC_OK(cpu->ops->forward(cpu, cs, csv, emb ? tok : NULL, emb ? NULL : c_in,
                            head ? tgt : NULL, head ? NULL : c_o, head ? &closs : NULL, err));
    CC_OK(gpu->ops->forward(gpu, gs, gsv, emb ? tok : NULL, emb ? NULL : g_in,
                            head ? tgt : NULL, head ? NULL : g_o, head ? &gloss : NULL, err));
    CC_OK(gpu->ops->sync(gpu, gs, err));
    if (head) {
        snprintf(name, sizeof name, "F %s loss %.5f vs %.5f", tag, gloss, closs);
        cc_expect(name, cc_nmse(&gloss, &closs, 1), 1e-5);
    } else {
        CC_OK(cpu->ops->act_download(cpu, c_o, c_out, A, err));
        CC_OK(gpu->ops->act_download(gpu, g_o, g_out, A, err));
        snprintf(name, sizeof name, "F %s output", tag);
        cc_expect(name, cc_nmse(g_out, c_out, A), 1e-4);
    }
    snprintf(name, sizeof name, "F %s saved bytes > 0", tag);
    cc_true(name, gpu->ops->saved_bytes(gpu, gsv) > 0);

    /* B: the output gradient goes in through the activation buffers */
    CC_OK(cpu->ops->act_upload(cpu, c_o, dy, A, err));
    CC_OK(gpu->ops->act_upload(gpu, g_o, dy, A, err));
    CC_OK(cpu->ops->backward_b(cpu, cs, csv, 0.5f, head ? NULL : c_o, emb ? NULL : c_in, err));
    CC_OK(gpu->ops->backward_b(gpu, gs, gsv, 0.5f, head ? NULL : g_o, emb ? NULL : g_in, err));
    if (!emb) {
        CC_OK(cpu->ops->act_download(cpu, c_in, c_out, A, err));
        CC_OK(gpu->ops->act_download(gpu, g_in, g_out, A, err));
        snprintf(name, sizeof name, "B %s input gradient", tag);
        cc_expect(name, cc_nmse(g_out, c_out, A), 1e-3);
    }

    /* W, on the GPU into a spare buffer then added (the out-of-order path) */
    zb_bgrads *spare = gpu->ops->grads_new(gpu, gs);
    cc_true("spare gradient buffer", spare != NULL);
    CC_OK(cpu->ops->backward_w(cpu, cs, csv, NULL, err));
    CC_OK(gpu->ops->grads_zero(gpu, gs, NULL, err));
    CC_OK(gpu->ops->backward_w(gpu, gs, gsv, spare, err));
    CC_OK(gpu->ops->grads_add(gpu, gs, spare, err));
    snprintf(name, sizeof name, "W %s empties the saved state", tag);
    cc_true(name, gpu->ops->saved_bytes(gpu, gsv) == 0);
    CC_OK(gpu->ops->download(gpu, gs, ZB_BUF_GRADS, err));
    const float *cg = cpu->ops->host(cpu, cs, ZB_BUF_GRADS);
    const float *gg = gpu->ops->host(gpu, gs, ZB_BUF_GRADS);
    for (int t = 0; t < L.n_tensors; t++) {
        const llama_tensor *ten = &L.tensors[t];
        snprintf(name, sizeof name, "W %s %s", tag, ten->name);
        cc_expect(name, cc_nmse(gg + ten->offset, cg + ten->offset, ten->count), 2e-3);
    }

    /* norms: per-tensor sums of squares of the GPU's own gradients, against
     * the CPU backend's op on the same (downloaded) values, so that only the
     * op is compared: both sum fp32 squares in double */
    double *cn = calloc((size_t)L.n_tensors + 1, sizeof *cn);
    double *gn = calloc((size_t)L.n_tensors + 1, sizeof *gn);
    float *saved_cg = malloc(n * 4);
    float *cgw = cpu->ops->host(cpu, cs, ZB_BUF_GRADS);
    memcpy(saved_cg, cgw, n * 4);
    memcpy(cgw, gg, n * 4);
    CC_OK(cpu->ops->grad_sumsq(cpu, cs, cn, err));
    memcpy(cgw, saved_cg, n * 4);
    free(saved_cg);
    CC_OK(gpu->ops->grad_sumsq(gpu, gs, gn, err));
    double worst = 0;
    for (int t = 0; t < L.n_tensors; t++) {
        double rel = cn[t] > 0 ? fabs(gn[t] - cn[t]) / cn[t] : fabs(gn[t]);
        worst = rel > worst ? rel : worst;
    }
    snprintf(name, sizeof name, "grad norms %s (worst rel %.1e)", tag, worst);
    cc_true(name, worst < 1e-9);

    /* AdamW from the same (the CPU's) gradients */
    memcpy(gpu->ops->host(gpu, gs, ZB_BUF_GRADS), cg, n * 4);
    CC_OK(gpu->ops->upload(gpu, gs, ZB_BUF_GRADS, err));
    adamw_config ac;
    adamw_config_default(&ac);
    CC_OK(gpu->ops->snapshot(gpu, gs, err));
    for (int step = 1; step <= 2; step++) {
        CC_OK(cpu->ops->adamw(cpu, cs, &ac, step, 1e-3f, 0.7f, err));
        CC_OK(gpu->ops->adamw(gpu, gs, &ac, step, 1e-3f, 0.7f, err));
    }
    static const zb_bbuf bufs[3] = { ZB_BUF_PARAMS, ZB_BUF_ADAM_M, ZB_BUF_ADAM_V };
    static const char *bname[3] = { "params", "m", "v" };
    for (int k = 0; k < 3; k++) {
        CC_OK(gpu->ops->download(gpu, gs, bufs[k], err));
        snprintf(name, sizeof name, "AdamW %s %s", tag, bname[k]);
        cc_expect(name, cc_nmse(gpu->ops->host(gpu, gs, bufs[k]),
                                cpu->ops->host(cpu, cs, bufs[k]), n), 1e-8);
    }
    /* snapshot / restore: exactly the weights before the two steps */
    CC_OK(gpu->ops->restore(gpu, gs, err));
    CC_OK(gpu->ops->download(gpu, gs, ZB_BUF_PARAMS, err));
    snprintf(name, sizeof name, "restore %s gives back the snapshot", tag);
    /* the CPU's params moved: compare with a fresh bf16 copy of the init */
    float *init = malloc(n * 4);
    llama_stage_init_params(&L, init, 11);
    for (size_t i = 0; i < n; i++)
        init[i] = bf16_round(init[i]);
    cc_true(name, memcmp(gpu->ops->host(gpu, gs, ZB_BUF_PARAMS), init, n * 4) == 0);

    /* mirrors: an upload then a download gives back the same bits */
    float *v = gpu->ops->host(gpu, gs, ZB_BUF_ADAM_V);
    for (size_t i = 0; i < n; i++)
        v[i] = (float)(lcg(&s) >> 40) * 1e-9f;
    memcpy(init, v, n * 4);
    CC_OK(gpu->ops->upload(gpu, gs, ZB_BUF_ADAM_V, err));
    memset(v, 0, n * 4);
    CC_OK(gpu->ops->download(gpu, gs, ZB_BUF_ADAM_V, err));
    snprintf(name, sizeof name, "mirror round trip %s", tag);
    cc_true(name, memcmp(v, init, n * 4) == 0);

    size_t sb = 0, pb = 0;
    CC_OK(gpu->ops->memory(gpu, &sb, &pb, err));
    snprintf(name, sizeof name, "memory %s: %zu static, %zu peak activation bytes", tag, sb, pb);
    cc_true(name, sb > 0 && pb > 0);

    gpu->ops->grads_free(gpu, spare);
    cpu->ops->saved_free(cpu, csv);
    gpu->ops->saved_free(gpu, gsv);
    cpu->ops->act_free(cpu, c_in);
    cpu->ops->act_free(cpu, c_o);
    gpu->ops->act_free(gpu, g_in);
    gpu->ops->act_free(gpu, g_o);
    cpu->ops->stage_free(cpu, cs);
    gpu->ops->stage_free(gpu, gs);
    llama_stage_free(&L);
    free(tok); free(tgt); free(x); free(dy); free(c_out); free(g_out); free(cn); free(gn);
    free(init);
}

int main(void)
{
    cc_require_device();
    kernels_init_threads(1);
    CC_OK(backend_cpu_create(1, &cpu, err));
    CC_OK(backend_cuda_create(0, 1, &gpu, err));
    CC_OK(gpu->ops->bind(gpu, 0, err));
    /* refusals name what is missing */
    {
        zb_model m;
        CC_OK(model_preset("tiny", &m, err));
        llama_stage L;
        CC_OK(llama_stage_init(&L, &m, 0, 1, 1, 0, err));
        zb_bstage *gs;
        zb_bsaved *sv = NULL;
        zb_err e = { { 0 } };
        CC_OK(gpu->ops->stage_new(gpu, &L, NULL, 0, &gs, err));
        /* (recompute levels themselves: tests/cuda/test_cuda_recompute.c) */
        cc_true("an unknown recompute level is refused with a reason",
                gpu->ops->saved_new(gpu, gs, 2, 3, &sv, &e) != 0 && strstr(e.msg, "recompute"));
        gpu->ops->stage_free(gpu, gs);
        llama_stage_free(&L);
    }
    test_stage(0, 4, 1, 1); /* the whole model */
    test_stage(0, 1, 1, 0); /* first stage */
    test_stage(1, 3, 0, 0); /* a middle stage */
    test_stage(3, 4, 0, 1); /* last stage */
    backend_free(gpu);
    backend_free(cpu);
    return cc_summary();
}
