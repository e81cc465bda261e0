/*
 * test_cuda_vocab_backend.c: the vocabulary passes of the CUDA backend
 * (kernels/cuda/backend_cuda_vocab.c, backend.h's vocab_* ops) and the
 * GPU stage's final-norm-only head stage against the CPU backend, through
 * the interface the executor uses (runtime/vocab_exec.c's calls, in its
 * order, on one thread).
 *
 * On the `tiny` preset, p = 2 shards and m = 2 micro-batches of B = 2,
 * the head stage [3, 4) with its final-norm-only compute layout, for
 * Vocab-1 and Vocab-2, each backend runs: F of both micro-batches and
 * put_x; every S; every T, shard 0's out of micro-batch order (its second
 * micro-batch first: the weight gradient that waits for its turn); dx and
 * the stage's B and W; then vocab_eval.  Compared with the NMSE of
 * tests/cuda/cuda_check.h, bounds sized for bf16 storage and fp32
 * accumulation as in test_cuda_backend (the GPU's head input is the bf16
 * norm output, the CPU's the fp32 one):
 *
 *   F         the final norm's output                        1e-4
 *   loss      each micro-batch's loss from dx                1e-5
 *   dx        the head input's gradient (barrier C0 / C1)    1e-3
 *   B         the stage's input gradient                     1e-3
 *   W         every tensor of the stage's gradient, the LM
 *             head's columns (written by T) included          2e-3
 *   eval      vocab_eval's loss                              1e-5
 *   cells     vocab_cell_bytes is positive for each shard
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
#include "src/sched.h"
#include "tests/cuda/cuda_check.h"

enum { P = 2, M = 2, BATCH = 2 };

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

/* What one backend gave. */
typedef struct vout {
    float *f_out;    /* [A] F output (the final norm's) of micro-batch 0 */
    float loss[M];   /* dx's loss of each micro-batch */
    float *dx[M];    /* [A] the head input's gradient of each micro-batch */
    float *din;      /* [A] B's input gradient of micro-batch M-1 */
    float *grads;    /* [n] the stage's gradient after every W and T */
    double eval;     /* vocab_eval's loss on micro-batch 0's head input */
    size_t cell[P];  /* vocab_cell_bytes of each shard */
} vout;

static void *act(zb_backend *be, size_t n)
{
    void *a = be->ops->act_new(be, n);
    if (!a) {
        printf("out of memory for an activation\n");
        exit(1);
    }
    return a;
}

static void run_backend(zb_backend *be, const llama_stage *L, const llama_stage *Lc, int variant,
                        const float *params, const float *x, const int32_t *targets, vout *o)
{
    const zb_model *m = &L->cfg;
    int N = BATCH * m->seq_len, dev = P - 1;
    size_t A = (size_t)N * m->d_model, n = llama_stage_num_params(L);
    size_t head_offset = llama_stage_num_params(Lc);
    zb_bstage *st;
    CC_OK(be->ops->stage_new(be, L, Lc, dev, &st, err));
    memcpy(be->ops->host(be, st, ZB_BUF_PARAMS), params, n * 4);
    if (be->ops->upload)
        CC_OK(be->ops->upload(be, st, ZB_BUF_PARAMS, err));
    CC_OK(be->ops->grads_zero(be, st, NULL, err));
    zb_vocab_shape shape = { variant, P, M, BATCH, m->seq_len, m->d_model, m->vocab, -1 };
    zb_bvocab *v;
    CC_OK(be->ops->vocab_new(be, &shape, &v, err));
    CC_OK(be->ops->vocab_begin(be, v, st, head_offset, targets, err));
    void *in = act(be, A), *out[M], *dx[M], *din = act(be, A);
    zb_bsaved *sv[M];
    CC_OK(be->ops->act_upload(be, in, x, A, err));
    for (int j = 0; j < M; j++) {
        out[j] = act(be, A);
        dx[j] = act(be, A);
        CC_OK(be->ops->saved_new(be, st, BATCH, 0, &sv[j], err));
        CC_OK(be->ops->forward(be, st, sv[j], NULL, in, NULL, out[j], NULL, err));
        CC_OK(be->ops->vocab_put_x(be, v, dev, j, out[j], err));
    }
    for (int j = 0; j < M; j++)
        for (int k = 0; k < P; k++)
            CC_OK(be->ops->vocab_s(be, v, k, j, err));
    for (int k = 0; k < P; k++)
        for (int i = 0; i < M; i++) {
            int j = k == 0 ? M - 1 - i : i; /* shard 0 runs ahead of order */
            CC_OK(be->ops->vocab_t(be, v, k, j, err));
        }
    for (int j = 0; j < M; j++) {
        CC_OK(be->ops->vocab_dx(be, v, dev, j, 1.0f / M, dx[j], &o->loss[j], err));
        CC_OK(be->ops->backward_b(be, st, sv[j], 1.0f / M, dx[j], din, err));
        CC_OK(be->ops->backward_w(be, st, sv[j], NULL, err));
    }
    CC_OK(be->ops->sync(be, st, err));
    CC_OK(be->ops->act_download(be, out[0], o->f_out, A, err));
    for (int j = 0; j < M; j++)
        CC_OK(be->ops->act_download(be, dx[j], o->dx[j], A, err));
    CC_OK(be->ops->act_download(be, din, o->din, A, err));
    if (be->ops->download)
        CC_OK(be->ops->download(be, st, ZB_BUF_GRADS, err));
    memcpy(o->grads, be->ops->host(be, st, ZB_BUF_GRADS), n * 4);
    CC_OK(be->ops->vocab_eval(be, v, st, head_offset, out[0], targets, BATCH, &o->eval, err));
    for (int k = 0; k < P; k++)
        o->cell[k] = be->ops->vocab_cell_bytes(be, v, k);
    for (int j = 0; j < M; j++) {
        be->ops->saved_free(be, sv[j]);
        be->ops->act_free(be, out[j]);
        be->ops->act_free(be, dx[j]);
    }
    be->ops->act_free(be, in);
    be->ops->act_free(be, din);
    be->ops->vocab_free(be, v);
    be->ops->stage_free(be, st);
}

static void vout_init(vout *o, size_t A, size_t n)
{
    memset(o, 0, sizeof *o);
    o->f_out = calloc(A, 4);
    o->din = calloc(A, 4);
    o->grads = calloc(n, 4);
    for (int j = 0; j < M; j++)
        o->dx[j] = calloc(A, 4);
}

static void vout_free(vout *o)
{
    free(o->f_out);
    free(o->din);
    free(o->grads);
    for (int j = 0; j < M; j++)
        free(o->dx[j]);
}

static void test_variant(int variant)
{
    char name[160];
    const char *tag = variant == SCHED_VOCAB_1 ? "vocab-1" : "vocab-2";
    zb_model m;
    CC_OK(model_preset("tiny", &m, err));
    int N = BATCH * m.seq_len, l0 = m.n_layers - 1, l1 = m.n_layers;
    size_t A = (size_t)N * m.d_model;
    llama_stage L, Lc;
    CC_OK(llama_stage_init(&L, &m, l0, l1, 0, LLAMA_HEAD_FULL, err));
    CC_OK(llama_stage_init(&Lc, &m, l0, l1, 0, LLAMA_HEAD_NORM_ONLY, err));
    size_t n = llama_stage_num_params(&L);
    float *params = malloc(n * 4), *x = malloc(A * 4);
    int32_t *targets = malloc(sizeof(int32_t) * (size_t)M * N);
    llama_stage_init_params(&L, params, 23);
    for (size_t i = 0; i < n; i++)
        params[i] = bf16_round(params[i]);
    uint64_t s = 7;
    for (size_t i = 0; i < A; i++)
        x[i] = bf16_round((float)((double)(lcg(&s) >> 11) / 9007199254740992.0 * 2 - 1));
    for (int i = 0; i < M * N; i++)
        targets[i] = (int32_t)((lcg(&s) >> 33) % (uint64_t)m.vocab);
    vout c, g;
    vout_init(&c, A, n);
    vout_init(&g, A, n);
    run_backend(cpu, &L, &Lc, variant, params, x, targets, &c);
    run_backend(gpu, &L, &Lc, variant, params, x, targets, &g);

    snprintf(name, sizeof name, "%s F final-norm output", tag);
    cc_expect(name, cc_nmse(g.f_out, c.f_out, A), 1e-4);
    for (int j = 0; j < M; j++) {
        snprintf(name, sizeof name, "%s loss mb %d %.5f vs %.5f", tag, j, g.loss[j], c.loss[j]);
        cc_expect(name, cc_nmse(&g.loss[j], &c.loss[j], 1), 1e-5);
        snprintf(name, sizeof name, "%s dx mb %d", tag, j);
        cc_expect(name, cc_nmse(g.dx[j], c.dx[j], A), 1e-3);
    }
    snprintf(name, sizeof name, "%s B input gradient", tag);
    cc_expect(name, cc_nmse(g.din, c.din, A), 1e-3);
    for (int t = 0; t < L.n_tensors; t++) {
        const llama_tensor *ten = &L.tensors[t];
        snprintf(name, sizeof name, "%s W %s", tag, ten->name);
        cc_expect(name, cc_nmse(g.grads + ten->offset, c.grads + ten->offset, ten->count), 2e-3);
    }
    float ge = (float)g.eval, ce = (float)c.eval;
    snprintf(name, sizeof name, "%s eval loss %.5f vs %.5f", tag, ge, ce);
    cc_expect(name, cc_nmse(&ge, &ce, 1), 1e-5);
    for (int k = 0; k < P; k++) {
        snprintf(name, sizeof name, "%s cell bytes of shard %d: %zu", tag, k, g.cell[k]);
        cc_true(name, g.cell[k] > 0);
    }
    vout_free(&c);
    vout_free(&g);
    free(params);
    free(x);
    free(targets);
    llama_stage_free(&Lc);
    llama_stage_free(&L);
}

int main(void)
{
    cc_require_device();
    kernels_init_threads(1);
    CC_OK(backend_cpu_create(P, &cpu, err));
    CC_OK(backend_cuda_create(0, P, &gpu, err));
    for (int d = 0; d < P; d++)
        CC_OK(gpu->ops->bind(gpu, d, err));
    test_variant(SCHED_VOCAB_1);
    test_variant(SCHED_VOCAB_2);
    backend_free(gpu);
    backend_free(cpu);
    return cc_summary();
}
