/*
 * test_cuda_adamw_split.c: the CUDA backend's split AdamW update, the
 * speculative step of post-validation that keeps no copy of m and v
 * (runtime/backend.h adamw_params, adamw_moments, adamw_undo over
 * kernels/cuda/gpu_stage.h's gpu_stage_adamw_params / _moments / _undo).
 *
 * On the GPU, bit for bit (memcmp, no tolerance), on three stage shapes of
 * `tiny` (embedding and layers, layers and head, the whole model), from
 * nonzero moments at step 3 with a gradient scale and weight decay:
 *
 *   halves     params-then-moments leaves master, the bf16 weights, m and
 *              v with the bits of one whole-step gpu_stage_adamw; after the
 *              params half alone, master and bf16 already have them and m
 *              and v are untouched
 *   undo       params then undo gives back master and the bf16 weights of
 *              before (and the bf16 weights are the host's round to nearest
 *              even of master), m and v untouched
 *   order      moments or undo without a pending params half fails, as do
 *              a second params half and a snapshot while one is pending;
 *              restore after a params half alone fails (no snapshot of m
 *              and v was made)
 *   memory     the first params half adds one fp32 copy (4 bytes a
 *              parameter) to the static bytes, later ones nothing
 *
 * Through the backend interface, against the CPU backend: the trainer's
 * two paths (a right guess: params then moments; a wrong one: params,
 * undo, then the whole step with a clip scale) on both backends from the
 * same bf16-exact weights, gradients and moments, params, m and v within
 * the existing AdamW bound of tests/cuda/test_cuda_backend.c (NMSE 1e-8);
 * the CUDA backend's split against its own whole step, bit for bit through
 * the mirrors; the static bytes it reports; and the pipeline-rank wrapper
 * (runtime/backend_rank.c) forwards the three ops.
 *
 * Skips (exit 77, "no CUDA device: skipped") without a CUDA device.
 */
#include <string.h>

#include "kernels/cpu/backend_cpu.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/llama.h"
#include "kernels/cuda/backend_cuda.h"
#include "kernels/cuda/gpu_stage.h"
#include "runtime/backend.h"
#include "src/model.h"
#include "tests/cuda/cuda_check.h"

static uint64_t lcg(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s;
}

/* Uniform in [-1, 1). */
static float uni(uint64_t *s)
{
    return (float)((double)(lcg(s) >> 11) / 9007199254740992.0 * 2 - 1);
}

static float bf16_round(float x)
{
    return zb_bf16_to_f32(zb_bf16_from_f32(x));
}

/* Host state of one stage: params, grads, m, v (n floats each). */
typedef struct state {
    size_t n;
    float *buf[4]; /* GPU_BUF_MASTER, _GRADS, _M, _V order */
} state;

/* Fresh bf16-exact params (the model's init), gradients of either sign,
 * m of either sign and v >= 0, as after some steps. */
static void state_init(state *h, const llama_stage *L, uint64_t seed)
{
    h->n = llama_stage_num_params(L);
    for (int k = 0; k < 4; k++) {
        h->buf[k] = malloc(h->n * 4);
        if (!h->buf[k]) {
            printf("out of memory\n");
            exit(1);
        }
    }
    llama_stage_init_params(L, h->buf[GPU_BUF_MASTER], 11);
    uint64_t s = seed;
    for (size_t i = 0; i < h->n; i++) {
        float g = uni(&s) * 1e-2f;
        h->buf[GPU_BUF_MASTER][i] = bf16_round(h->buf[GPU_BUF_MASTER][i]);
        h->buf[GPU_BUF_GRADS][i] = g;
        h->buf[GPU_BUF_M][i] = 0.5f * g + uni(&s) * 1e-3f;
        h->buf[GPU_BUF_V][i] = g * g + fabsf(uni(&s)) * 1e-6f;
    }
}

static void state_free(state *h)
{
    for (int k = 0; k < 4; k++)
        free(h->buf[k]);
}

/* Device bf16 weights of st into host w[n]. */
static void get_bf16(zb_cuda *c, gpu_stage *st, zb_bf16 *w, size_t n)
{
    CC_OK(zb_cuda_sync(c, err));
    CC_OK(zb_cuda_download(c, w, gpu_stage_weights(st), n * 2, err));
}

/* Device fp32 buffer `which` of st into host out[n]. */
static void get_f32(zb_cuda *c, gpu_stage *st, int which, float *out)
{
    CC_OK(zb_cuda_sync(c, err));
    CC_OK(gpu_stage_get(st, which, out, err));
}

/* A GPU stage holding h. */
static gpu_stage *stage_with(zb_cuda *c, const llama_stage *L, const state *h)
{
    gpu_stage *st;
    CC_OK(gpu_stage_create(c, L, &st, err));
    for (int k = 0; k < 4; k++)
        CC_OK(gpu_stage_set(st, k, h->buf[k], err));
    return st;
}

/* Part 1: gpu_stage's halves against its whole step, bit for bit. */
static void test_stage_bits(zb_cuda *c, int l0, int l1, int emb, int head)
{
    char name[160], tag[64];
    snprintf(tag, sizeof tag, "[%d,%d)%s%s", l0, l1, emb ? "+emb" : "", head ? "+head" : "");
    zb_model m;
    CC_OK(model_preset("tiny", &m, err));
    llama_stage L;
    CC_OK(llama_stage_init(&L, &m, l0, l1, emb, head, err));
    state h;
    state_init(&h, &L, 77u + (uint64_t)l0);
    size_t n = h.n;
    adamw_config ac;
    adamw_config_default(&ac);
    const int t = 3;
    const float lr = 1e-3f, scale = 0.7f;

    gpu_stage *whole = stage_with(c, &L, &h), *split = stage_with(c, &L, &h);
    size_t bytes0 = gpu_stage_static_bytes(split);
    CC_OK(gpu_stage_adamw(whole, &ac, t, lr, scale, err));
    CC_OK(gpu_stage_adamw_params(split, &ac, t, lr, scale, err));

    float *a = malloc(n * 4), *b = malloc(n * 4);
    zb_bf16 *wa = malloc(n * 2), *wb = malloc(n * 2);
    zb_err e = { { 0 } };

    /* after the params half alone */
    get_f32(c, whole, GPU_BUF_MASTER, a);
    get_f32(c, split, GPU_BUF_MASTER, b);
    snprintf(name, sizeof name, "params half %s: master = whole step's", tag);
    cc_true(name, memcmp(a, b, n * 4) == 0);
    size_t moved = 0;
    for (size_t i = 0; i < n; i++)
        moved += a[i] != h.buf[GPU_BUF_MASTER][i];
    snprintf(name, sizeof name, "params half %s: %zu of %zu weights moved", tag, moved, n);
    cc_true(name, moved > n / 2);
    get_bf16(c, whole, wa, n);
    get_bf16(c, split, wb, n);
    snprintf(name, sizeof name, "params half %s: bf16 = whole step's", tag);
    cc_true(name, memcmp(wa, wb, n * 2) == 0);
    for (int k = GPU_BUF_M; k <= GPU_BUF_V; k++) {
        get_f32(c, split, k, b);
        snprintf(name, sizeof name, "params half %s: %s untouched", tag, k == GPU_BUF_M ? "m" : "v");
        cc_true(name, memcmp(b, h.buf[k], n * 4) == 0);
    }
    snprintf(name, sizeof name, "params half %s: +4 bytes a parameter", tag);
    cc_true(name, gpu_stage_static_bytes(split) == bytes0 + 4 * n);
    cc_true("a second params half while one is pending fails",
            gpu_stage_adamw_params(split, &ac, t, lr, scale, &e) != 0 && strstr(e.msg, "speculative"));
    cc_true("a snapshot while a params half is pending fails",
            gpu_stage_snapshot(split, &e) != 0 && strstr(e.msg, "speculative"));
    cc_true("restore after a params half alone fails (no snapshot of m, v)",
            gpu_stage_restore(split, &e) != 0 && strstr(e.msg, "snapshot"));

    /* then the moments half: the whole step's bits everywhere */
    CC_OK(gpu_stage_adamw_moments(split, &ac, scale, err));
    static const char *bname[4] = { "master", "grads", "m", "v" };
    for (int k = 0; k < 4; k++) {
        get_f32(c, whole, k, a);
        get_f32(c, split, k, b);
        snprintf(name, sizeof name, "params then moments %s: %s = whole step's", tag, bname[k]);
        cc_true(name, memcmp(a, b, n * 4) == 0);
        if (k == GPU_BUF_M || k == GPU_BUF_V) {
            size_t changed = 0;
            for (size_t i = 0; i < n; i++)
                changed += b[i] != h.buf[k][i];
            snprintf(name, sizeof name, "moments half %s: %zu of %zu %s changed", tag, changed,
                     n, bname[k]);
            cc_true(name, changed > n / 2);
        }
    }
    get_bf16(c, whole, wa, n);
    get_bf16(c, split, wb, n);
    snprintf(name, sizeof name, "params then moments %s: bf16 = whole step's", tag);
    cc_true(name, memcmp(wa, wb, n * 2) == 0);
    cc_true("moments without a pending params half fails",
            gpu_stage_adamw_moments(split, &ac, scale, &e) != 0 && strstr(e.msg, "speculative"));
    cc_true("undo without a pending params half fails",
            gpu_stage_adamw_undo(split, &e) != 0 && strstr(e.msg, "speculative"));

    /* undo: params of step t+1, then back to exactly the bits of before */
    float *m0 = malloc(n * 4), *v0 = malloc(n * 4);
    get_f32(c, split, GPU_BUF_MASTER, a);
    get_f32(c, split, GPU_BUF_M, m0);
    get_f32(c, split, GPU_BUF_V, v0);
    get_bf16(c, split, wa, n);
    CC_OK(gpu_stage_adamw_params(split, &ac, t + 1, lr, scale, err));
    get_f32(c, split, GPU_BUF_MASTER, b);
    snprintf(name, sizeof name, "undo %s: the params half moved the weights", tag);
    cc_true(name, memcmp(a, b, n * 4) != 0);
    CC_OK(gpu_stage_adamw_undo(split, err));
    get_f32(c, split, GPU_BUF_MASTER, b);
    get_bf16(c, split, wb, n);
    snprintf(name, sizeof name, "undo %s: master back bit for bit", tag);
    cc_true(name, memcmp(a, b, n * 4) == 0);
    snprintf(name, sizeof name, "undo %s: bf16 back bit for bit", tag);
    cc_true(name, memcmp(wa, wb, n * 2) == 0);
    size_t off = 0;
    for (size_t i = 0; i < n; i++)
        off += wb[i] != zb_bf16_from_f32(b[i]);
    snprintf(name, sizeof name, "undo %s: bf16 = round(master) (%zu off)", tag, off);
    cc_true(name, off == 0);
    get_f32(c, split, GPU_BUF_M, b);
    snprintf(name, sizeof name, "undo %s: m untouched", tag);
    cc_true(name, memcmp(m0, b, n * 4) == 0);
    get_f32(c, split, GPU_BUF_V, b);
    snprintf(name, sizeof name, "undo %s: v untouched", tag);
    cc_true(name, memcmp(v0, b, n * 4) == 0);
    snprintf(name, sizeof name, "undo %s: the copy was allocated once", tag);
    cc_true(name, gpu_stage_static_bytes(split) == bytes0 + 4 * n);

    gpu_stage_free(whole);
    gpu_stage_free(split);
    llama_stage_free(&L);
    state_free(&h);
    free(a); free(b); free(wa); free(wb); free(m0); free(v0);
}

/* Puts h into a backend stage through its mirrors. */
static void backend_set(zb_backend *be, zb_bstage *st, const state *h)
{
    static const zb_bbuf bufs[4] = { ZB_BUF_PARAMS, ZB_BUF_GRADS, ZB_BUF_ADAM_M, ZB_BUF_ADAM_V };
    for (int k = 0; k < 4; k++) {
        memcpy(be->ops->host(be, st, bufs[k]), h->buf[k], h->n * 4);
        CC_OK(be->ops->upload(be, st, bufs[k], err));
    }
}

/* Part 2: through backend.h, the CUDA backend against the CPU backend and
 * against its own whole step. */
static void test_backend(zb_backend *cpu, zb_backend *gpu, int l0, int l1, int emb, int head)
{
    char name[160], tag[64];
    snprintf(tag, sizeof tag, "[%d,%d)%s%s", l0, l1, emb ? "+emb" : "", head ? "+head" : "");
    zb_model m;
    CC_OK(model_preset("tiny", &m, err));
    llama_stage L;
    CC_OK(llama_stage_init(&L, &m, l0, l1, emb, head, err));
    state h;
    state_init(&h, &L, 91u + (uint64_t)l0);
    size_t n = h.n;
    adamw_config ac;
    adamw_config_default(&ac);

    zb_bstage *cs, *gs, *gw;
    CC_OK(cpu->ops->stage_new(cpu, &L, NULL, 0, &cs, err));
    CC_OK(gpu->ops->stage_new(gpu, &L, NULL, 0, &gs, err));
    CC_OK(gpu->ops->stage_new(gpu, &L, NULL, 0, &gw, err));
    backend_set(cpu, cs, &h);
    backend_set(gpu, gs, &h);
    backend_set(gpu, gw, &h);

    size_t sb0 = 0, sb1 = 0, sb2 = 0, pk = 0;
    CC_OK(gpu->ops->memory(gpu, &sb0, &pk, err));
    /* step 1, a right guess: params then moments (gw: the whole step) */
    CC_OK(cpu->ops->adamw_params(cpu, cs, &ac, 1, 1e-3f, 1.0f, err));
    CC_OK(cpu->ops->adamw_moments(cpu, cs, &ac, 1.0f, err));
    CC_OK(gpu->ops->adamw_params(gpu, gs, &ac, 1, 1e-3f, 1.0f, err));
    CC_OK(gpu->ops->memory(gpu, &sb1, &pk, err));
    CC_OK(gpu->ops->adamw_moments(gpu, gs, &ac, 1.0f, err));
    CC_OK(gpu->ops->adamw(gpu, gw, &ac, 1, 1e-3f, 1.0f, err));
    /* step 2, a wrong guess: params, undo, then the whole step clipped */
    CC_OK(cpu->ops->adamw_params(cpu, cs, &ac, 2, 1e-3f, 1.0f, err));
    CC_OK(cpu->ops->adamw_undo(cpu, cs, err));
    CC_OK(cpu->ops->adamw(cpu, cs, &ac, 2, 1e-3f, 0.5f, err));
    CC_OK(gpu->ops->adamw_params(gpu, gs, &ac, 2, 1e-3f, 1.0f, err));
    CC_OK(gpu->ops->adamw_undo(gpu, gs, err));
    CC_OK(gpu->ops->adamw(gpu, gs, &ac, 2, 1e-3f, 0.5f, err));
    CC_OK(gpu->ops->adamw(gpu, gw, &ac, 2, 1e-3f, 0.5f, err));
    CC_OK(gpu->ops->memory(gpu, &sb2, &pk, err));

    snprintf(name, sizeof name, "backend %s: first adamw_params +%zu static bytes", tag,
             sb1 - sb0);
    cc_true(name, sb1 == sb0 + 4 * n);
    snprintf(name, sizeof name, "backend %s: no more after", tag);
    cc_true(name, sb2 == sb1);

    static const zb_bbuf bufs[3] = { ZB_BUF_PARAMS, ZB_BUF_ADAM_M, ZB_BUF_ADAM_V };
    static const char *bname[3] = { "params", "m", "v" };
    float *whole = malloc(n * 4);
    for (int k = 0; k < 3; k++) {
        CC_OK(gpu->ops->download(gpu, gw, bufs[k], err));
        memcpy(whole, gpu->ops->host(gpu, gw, bufs[k]), n * 4);
        CC_OK(gpu->ops->download(gpu, gs, bufs[k], err));
        const float *split = gpu->ops->host(gpu, gs, bufs[k]);
        snprintf(name, sizeof name, "backend %s: split = whole step, %s", tag, bname[k]);
        cc_true(name, memcmp(split, whole, n * 4) == 0);
        snprintf(name, sizeof name, "backend %s: split vs CPU split, %s", tag, bname[k]);
        cc_expect(name, cc_nmse(split, cpu->ops->host(cpu, cs, bufs[k]), n), 1e-8);
    }
    free(whole);
    cpu->ops->stage_free(cpu, cs);
    gpu->ops->stage_free(gpu, gs);
    gpu->ops->stage_free(gpu, gw);
    llama_stage_free(&L);
    state_free(&h);
}

/* Part 3: the pipeline-rank wrapper forwards the split update to its own
 * device's stage. */
static void test_rank(void)
{
    zb_backend *rk;
    CC_OK(backend_cuda_create_rank(0, 2, 0, &rk, err));
    cc_true("rank backend: adamw_params, adamw_moments, adamw_undo forwarded",
            rk->ops->adamw_params && rk->ops->adamw_moments && rk->ops->adamw_undo);
    zb_model m;
    CC_OK(model_preset("tiny", &m, err));
    llama_stage L;
    CC_OK(llama_stage_init(&L, &m, 0, 1, 1, 0, err));
    zb_bstage *st;
    CC_OK(rk->ops->stage_new(rk, &L, NULL, 0, &st, err));
    size_t n = llama_stage_num_params(&L);
    float *p = rk->ops->host(rk, st, ZB_BUF_PARAMS);
    llama_stage_init_params(&L, p, 5);
    for (size_t i = 0; i < n; i++)
        p[i] = bf16_round(p[i]);
    float *before = malloc(n * 4);
    memcpy(before, p, n * 4);
    CC_OK(rk->ops->upload(rk, st, ZB_BUF_PARAMS, err));
    adamw_config ac;
    adamw_config_default(&ac);
    CC_OK(rk->ops->adamw_params(rk, st, &ac, 1, 1e-2f, 1.0f, err));
    CC_OK(rk->ops->adamw_undo(rk, st, err));
    CC_OK(rk->ops->download(rk, st, ZB_BUF_PARAMS, err));
    cc_true("rank backend: params then undo gives the weights back",
            memcmp(rk->ops->host(rk, st, ZB_BUF_PARAMS), before, n * 4) == 0);
    free(before);
    rk->ops->stage_free(rk, st);
    llama_stage_free(&L);
    rk->ops->destroy(rk);
}

int main(void)
{
    cc_require_device();
    kernels_init_threads(1);
    zb_model m;
    CC_OK(model_preset("tiny", &m, err));
    int nl = m.n_layers;

    zb_cuda *c;
    CC_OK(zb_cuda_create(0, &c, err));
    test_stage_bits(c, 0, nl / 2, 1, 0);
    test_stage_bits(c, nl / 2, nl, 0, 1);
    test_stage_bits(c, 0, nl, 1, 1);
    zb_cuda_free(c);

    zb_backend *cpu, *gpu;
    CC_OK(backend_cpu_create(1, &cpu, err));
    CC_OK(backend_cuda_create(0, 1, &gpu, err));
    CC_OK(gpu->ops->bind(gpu, 0, err));
    cc_true("CUDA backend has adamw_params, adamw_moments, adamw_undo",
            gpu->ops->adamw_params && gpu->ops->adamw_moments && gpu->ops->adamw_undo);
    test_backend(cpu, gpu, 0, nl / 2, 1, 0);
    test_backend(cpu, gpu, nl / 2, nl, 0, 1);
    gpu->ops->destroy(gpu);
    cpu->ops->destroy(cpu);

    test_rank();
    return cc_summary();
}
