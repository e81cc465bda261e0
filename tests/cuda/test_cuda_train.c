/*
 * test_cuda_train.c: the GPU stage against the CPU stage (kernels/cpu/
 * llama.h) on the `tiny` preset, and the one executor (runtime/trainer.h)
 * on the CUDA backend against it on the CPU backend: same seed, same data,
 * 1F1B and ZB-H2 on two stages, post-validation and the synchronous clip;
 * losses must agree within bf16 tolerance over the first steps.  Also:
 * evaluation, a checkpoint written on the GPU and resumed on the CPU, and
 * the backend's memory report.  Skips (77) with no device.
 */
#include <string.h>
#include <unistd.h>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/llama.h"
#include "kernels/cuda/gpu_stage.h"
#include "kernels/cuda/backend_cuda.h"
#include "runtime/data.h"
#include "runtime/trainer.h"
#include "schedules/gen.h"
#include "src/model.h"
#include "src/validate.h"
#include "tests/cuda/cuda_check.h"

static zb_cuda *ctx;

/* One stage on both sides: F, B, W of a micro-batch; compare. */
static void test_stage(int l0, int l1, int emb, int head)
{
    char name[128];
    zb_model m;
    CC_OK(model_preset("tiny", &m, err));
    int B = 2, N = B * m.seq_len, d = m.d_model;
    llama_stage L;
    CC_OK(llama_stage_init(&L, &m, l0, l1, emb, head, err));
    size_t n = llama_stage_num_params(&L);
    float *params = malloc(n * 4), *grads = calloc(n, 4), *ggrads = malloc(n * 4);
    llama_stage_init_params(&L, params, 7);
    /* the GPU computes with bf16 weights: give the CPU the same values */
    for (size_t i = 0; i < n; i++)
        params[i] = zb_bf16_to_f32(zb_bf16_from_f32(params[i]));
    int32_t *tok = malloc(sizeof *tok * N), *tgt = malloc(sizeof *tgt * N);
    float *act = malloc((size_t)N * d * 4), *dy = malloc((size_t)N * d * 4);
    zb_bf16 *act16 = malloc((size_t)N * d * 2), *dy16 = malloc((size_t)N * d * 2);
    uint64_t s = 99;
    for (int i = 0; i < N; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        tok[i] = (int32_t)((s >> 33) % (uint64_t)m.vocab);
        tgt[i] = (int32_t)((s >> 40) % (uint64_t)m.vocab);
    }
    for (size_t i = 0; i < (size_t)N * d; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        act16[i] = zb_bf16_from_f32((float)((double)(s >> 11) / 9007199254740992.0 * 2 - 1));
        act[i] = zb_bf16_to_f32(act16[i]);
        dy16[i] = zb_bf16_from_f32((float)((double)((s >> 7) & 0xffff) / 65536.0 - 0.5) * 1e-2f);
        dy[i] = zb_bf16_to_f32(dy16[i]);
    }
    /* CPU */
    llama_saved *sv = llama_saved_new(&L, B);
    float *out = malloc((size_t)N * d * 4), *dx = malloc((size_t)N * d * 4), loss = 0;
    CC_OK(llama_stage_forward(&L, params, emb ? tok : NULL, emb ? NULL : act, head ? tgt : NULL,
                              sv, head ? NULL : out, head ? &loss : NULL, NULL, err));
    CC_OK(llama_stage_backward_b(&L, params, sv, 0.5f, head ? NULL : dy, emb ? NULL : dx, err));
    CC_OK(llama_stage_backward_w(&L, sv, grads, err));
    /* GPU */
    gpu_stage *gs;
    CC_OK(gpu_stage_create(ctx, &L, &gs, err));
    CC_OK(gpu_stage_upload(gs, params, err));
    gpu_saved *gsv = gpu_saved_new(gs, B);
    zb_bf16 *d_act = NULL, *d_dy = NULL, *d_out = NULL, *d_dx = NULL;
    size_t ab = (size_t)N * d * 2;
    CC_OK(zb_cuda_alloc((void **)&d_act, ab, err));
    CC_OK(zb_cuda_alloc((void **)&d_dy, ab, err));
    CC_OK(zb_cuda_alloc((void **)&d_out, ab, err));
    CC_OK(zb_cuda_alloc((void **)&d_dx, ab, err));
    CC_OK(zb_cuda_upload(ctx, d_act, act16, ab, err));
    CC_OK(zb_cuda_upload(ctx, d_dy, dy16, ab, err));
    CC_OK(gpu_stage_forward(gs, gsv, emb ? tok : NULL, emb ? NULL : d_act, head ? tgt : NULL,
                            head ? NULL : d_out, err));
    double gloss = 0;
    if (head)
        CC_OK(gpu_saved_loss(gsv, &gloss, err));
    size_t after_f = gpu_saved_bytes(gsv);
    CC_OK(gpu_stage_backward_b(gs, gsv, 0.5f, head ? NULL : d_dy, emb ? NULL : d_dx, err));
    size_t after_b = gpu_saved_bytes(gsv);
    CC_OK(gpu_stage_backward_w(gs, gsv, err));
    CC_OK(gpu_stage_download_grads(gs, ggrads, err));
    snprintf(name, sizeof name, "stage [%d,%d)%s%s saved bytes F > B > W = 0", l0, l1,
             emb ? "+emb" : "", head ? "+head" : "");
    cc_true(name, after_f > after_b && after_b > 0 && gpu_saved_bytes(gsv) == 0);
    if (head) {
        float a = (float)gloss;
        snprintf(name, sizeof name, "stage [%d,%d) loss %.5f vs CPU %.5f", l0, l1, gloss, loss);
        cc_expect(name, cc_nmse(&a, &loss, 1), 1e-5);
    } else {
        zb_bf16 *h = malloc(ab);
        float *f = malloc((size_t)N * d * 4);
        CC_OK(zb_cuda_download(ctx, h, d_out, ab, err));
        for (size_t i = 0; i < (size_t)N * d; i++)
            f[i] = zb_bf16_to_f32(h[i]);
        snprintf(name, sizeof name, "stage [%d,%d) F output", l0, l1);
        cc_expect(name, cc_nmse(f, out, (size_t)N * d), 1e-4);
        free(h);
        free(f);
    }
    if (!emb) {
        zb_bf16 *h = malloc(ab);
        float *f = malloc((size_t)N * d * 4);
        CC_OK(zb_cuda_download(ctx, h, d_dx, ab, err));
        for (size_t i = 0; i < (size_t)N * d; i++)
            f[i] = zb_bf16_to_f32(h[i]);
        snprintf(name, sizeof name, "stage [%d,%d) B input gradient", l0, l1);
        cc_expect(name, cc_nmse(f, dx, (size_t)N * d), 1e-3);
        free(h);
        free(f);
    }
    for (int t = 0; t < L.n_tensors; t++) {
        const llama_tensor *ten = &L.tensors[t];
        snprintf(name, sizeof name, "stage W grad %s", ten->name);
        cc_expect(name, cc_nmse(ggrads + ten->offset, grads + ten->offset, ten->count), 2e-3);
    }
    gpu_saved_free(gsv);
    gpu_stage_free(gs);
    zb_cuda_release(d_act); zb_cuda_release(d_dy); zb_cuda_release(d_out); zb_cuda_release(d_dx);
    llama_saved_free(sv);
    llama_stage_free(&L);
    free(params); free(grads); free(ggrads); free(tok); free(tgt); free(act); free(dy);
    free(act16); free(dy16); free(out); free(dx);
}

/* A deterministic text of ~40 distinct characters, long enough for the
 * loader's 90/10 split at context 64. */
static char *make_text(size_t len)
{
    char *t = malloc(len);
    uint64_t s = 12345;
    for (size_t i = 0; i < len; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        t[i] = (char)('a' + (int)((s >> 33) % 26));
        if (i % 7 == 6)
            t[i] = ' ';
        if (i % 41 == 40)
            t[i] = '\n';
    }
    return t;
}

#define STEPS 4

/* No warmup with a large rate, so that four steps visibly lower the loss;
 * sync: the synchronous clip (else post-validation). */
static int sync_opt;

static void test_opts(trainer_opts *o)
{
    trainer_opts_default(o);
    o->sync_optimizer = sync_opt;
    o->adamw.warmup_steps = 0;
    o->adamw.lr = 1e-2f;
    o->adamw.min_lr = 1e-3f;
}

static void run_cpu(const sched_t *s, const zb_model *m, const zb_data *d, double *loss)
{
    trainer_opts o;
    test_opts(&o);
    trainer *t;
    CC_OK(trainer_create(s, m, d, &o, &t, err));
    for (int i = 0; i < STEPS; i++)
        CC_OK(trainer_step(t, &loss[i], err));
    trainer_free(t);
}

/* trainer_opts.make_backend: the CUDA backend on GPU 0. */
static int make_gpu0(void *ctx, int n_devices, zb_backend **out, zb_err *err)
{
    (void)ctx;
    return backend_cuda_create(0, n_devices, out, err);
}

/* STEPS steps on the GPU, then the validation loss and a checkpoint of
 * the GPU trainer in ckpt (when not NULL). */
static void run_gpu(const sched_t *s, const zb_model *m, const zb_data *d, double *loss,
                    size_t *peak, double *val, const char *ckpt)
{
    trainer_opts o;
    test_opts(&o);
    o.make_backend = make_gpu0;
    o.threads = 1;
    trainer *t;
    CC_OK(trainer_create(s, m, d, &o, &t, err));
    for (int i = 0; i < STEPS; i++)
        CC_OK(trainer_step(t, &loss[i], err));
    CC_OK(trainer_eval(t, val, err));
    if (ckpt)
        CC_OK(trainer_save(t, ckpt, err));
    size_t st = 0;
    CC_OK(trainer_memory(t, &st, peak, err));
    trainer_free(t);
}

static void test_trainer(const char *kind)
{
    char name[128];
    zb_model m;
    CC_OK(model_preset("tiny", &m, err));
    size_t len = 40000;
    char *text = make_text(len);
    zb_data *d;
    CC_OK(data_from_text(text, len, m.seq_len, &d, err));
    gen_params gp;
    gen_params_default(&gp);
    gp.stages = 2;
    gp.microbatches = 4;
    sched_t *s;
    CC_OK(gen_lookup(kind)(&gp, &s, err));
    double lc[STEPS], lg[STEPS], gval = 0;
    size_t peak = 0;
    char ckpt[] = "/tmp/zb_cuda_train_ckpt_XXXXXX";
    int fd = mkstemp(ckpt);
    if (fd >= 0)
        close(fd);
    run_cpu(s, &m, d, lc);
    run_gpu(s, &m, d, lg, &peak, &gval, fd >= 0 ? ckpt : NULL);
    /* the GPU's checkpoint loads on the CPU backend and evaluates alike */
    {
        trainer_opts o;
        test_opts(&o);
        trainer *t;
        double cval = 0;
        CC_OK(trainer_create(s, &m, d, &o, &t, err));
        CC_OK(trainer_load(t, ckpt, err));
        CC_OK(trainer_eval(t, &cval, err));
        double rel = fabs(cval - gval) / fabs(cval);
        snprintf(name, sizeof name, "%s GPU checkpoint on the CPU: val %.5f vs GPU %.5f", kind,
                 cval, gval);
        cc_true(name, rel < 1e-2 && trainer_get_stats(t)->step == STEPS);
        trainer_free(t);
        unlink(ckpt);
    }
    for (int i = 0; i < STEPS; i++) {
        double rel = fabs(lg[i] - lc[i]) / fabs(lc[i]);
        snprintf(name, sizeof name, "%s step %d loss GPU %.5f CPU %.5f (rel %.1e)", kind, i + 1,
                 lg[i], lc[i], rel);
        cc_true(name, rel < 1e-2);
    }
    snprintf(name, sizeof name, "%s loss decreases on the GPU", kind);
    cc_true(name, lg[STEPS - 1] < lg[0]);
    snprintf(name, sizeof name, "%s activation pool peak %zu bytes > 0", kind, peak);
    cc_true(name, peak > 0);
    sched_free(s);
    data_free(d);
    free(text);
}

int main(void)
{
    cc_require_device();
    kernels_init_threads(1);
    CC_OK(zb_cuda_create(0, &ctx, err));
    test_stage(0, 4, 1, 1);   /* the whole model on one stage */
    test_stage(1, 3, 0, 0);   /* a middle stage */
    test_stage(0, 1, 1, 0);   /* first stage */
    test_stage(3, 4, 0, 1);   /* last stage */
    zb_cuda_free(ctx);
    sync_opt = 1;
    test_trainer("1f1b");
    test_trainer("zb-h2");
    sync_opt = 0; /* post-validation: snapshots and rollbacks on the device */
    test_trainer("zb-h2");
    return cc_summary();
}
