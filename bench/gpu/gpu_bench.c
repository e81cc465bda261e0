/*
 * gpu_bench.c: the measuring program of the GPU proof (bench/gpu/run.sh),
 * built as build/kernels/cuda/zb_gpu_bench when CUDA is enabled.
 *
 *   zb_gpu_bench gemm [M N K]            bf16 cuBLASLt GEMM rate of this card
 *                                        (default 8192³), median of 20 runs
 *   zb_gpu_bench layer MODEL [B [REPS]]  F, B, W of one layer, the embedding
 *                                        and the head (gpu_profile.h): times,
 *                                        TFLOP/s from the cost model's FLOP
 *                                        counts, activation bytes measured
 *                                        vs the cost model's M_B / M_W;
 *                                        writes the profile to $PROFILE_OUT
 *                                        when set
 *   zb_gpu_bench train KIND MODEL DATA STEPS [P M]
 *                                        KIND = 1f1b, zb-h2, ...: the one
 *                                        executor (runtime/trainer.h) on the
 *                                        CPU backend and on the CUDA backend
 *                                        (one GPU, a stream per device), on
 *                                        the same seed and data, losses side
 *                                        by side, GPU step time, GPU memory
 *                                        (static + pool peak) vs the cost
 *                                        model + simulator prediction
 *   zb_gpu_bench ranked KIND MODEL DATA STEPS [M]
 *                                        one rank of a multi-GPU run (rank
 *                                        variables as `zbsched launch` sets
 *                                        them, p = world size): the one
 *                                        executor on this rank's device
 *                                        (one_device, the rank backend,
 *                                        the NCCL transport); rank 0 prints
 *                                        CPU and GPU losses (needs >= 2
 *                                        GPUs: NCCL refuses two ranks on
 *                                        one GPU)
 *
 * MODEL is a preset name or a model JSON file (src/model.h).  Output is
 * plain "key value" lines so run.sh can grep them into summary.txt.
 * Exit status 0 on success, 1 on failure (one line on stderr), 77 when
 * there is no CUDA device.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kernels.h"
#include "kernels/cuda/gpu_profile.h"
#include "kernels/cuda/backend_cuda.h"
#include "kernels/cuda/nccl_transport.h"
#include "kernels/cuda/gpu_transport.h"
#include "kernels/cuda/zb_cuda.h"
#include "runtime/data.h"
#include "runtime/trainer.h"
#include "schedules/gen.h"
#include "src/cost_model.h"
#include "src/model.h"
#include "src/profile.h"
#include "src/sim.h"
#include "src/validate.h"

static int fail(const zb_err *err)
{
    fprintf(stderr, "zb_gpu_bench: %s\n", err->msg);
    return 1;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static int bench_gemm(int M, int N, int K)
{
    zb_err err = { { 0 } };
    zb_cuda *c = NULL;
    zb_bf16 *X = NULL, *W = NULL, *Y = NULL;
    zb_cuda_event *e0 = NULL, *e1 = NULL;
    float ms[20];
    int rc = 1;
    /* Y[M,N] = X[M,K]·W[K,N]; zero inputs would let nothing be skipped by
     * the hardware anyway, but use a pattern to stay honest */
    if (zb_cuda_create(0, &c, &err) || zb_cuda_alloc((void **)&X, (size_t)M * K * 2, &err) ||
        zb_cuda_alloc((void **)&W, (size_t)K * N * 2, &err) ||
        zb_cuda_alloc((void **)&Y, (size_t)M * N * 2, &err) || zb_cuda_event_new(&e0, &err) ||
        zb_cuda_event_new(&e1, &err))
        goto out;
    {
        size_t n = (size_t)M * K > (size_t)K * N ? (size_t)M * K : (size_t)K * N;
        float *h = malloc(n * 4);
        float *d = NULL;
        if (!h || zb_cuda_alloc((void **)&d, n * 4, &err)) {
            free(h);
            goto out;
        }
        for (size_t i = 0; i < n; i++)
            h[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
        int bad = zb_cuda_upload(c, d, h, n * 4, &err) ||
                  zb_cuda_f32_to_bf16(c, X, d, (size_t)M * K, &err) ||
                  zb_cuda_f32_to_bf16(c, W, d, (size_t)K * N, &err) || zb_cuda_sync(c, &err);
        free(h);
        zb_cuda_release(d);
        if (bad)
            goto out;
    }
    for (int it = -3; it < 20; it++) {
        float t;
        if (zb_cuda_mark(c, e0, &err) ||
            zb_cuda_matmul_forward(c, Y, X, W, NULL, M, K, N, &err) ||
            zb_cuda_mark(c, e1, &err) || zb_cuda_elapsed(e0, e1, &t, &err))
            goto out;
        if (it >= 0)
            ms[it] = t;
    }
    qsort(ms, 20, sizeof ms[0], cmp_float);
    double flops = 2.0 * M * N * K;
    printf("gemm_shape %dx%dx%d\n", M, N, K);
    printf("gemm_ms %.4f\n", ms[10]);
    printf("gemm_tflops %.1f\n", flops / (ms[10] * 1e-3) / 1e12);
    rc = 0;
out:
    if (rc)
        fail(&err);
    zb_cuda_event_free(e0);
    zb_cuda_event_free(e1);
    zb_cuda_release(X);
    zb_cuda_release(W);
    zb_cuda_release(Y);
    zb_cuda_free(c);
    return rc;
}

static void print_part(const char *name, const profile_part *p, const cost_part *c)
{
    printf("%s_t_f_ms %.4f\n%s_t_b_ms %.4f\n%s_t_w_ms %.4f\n", name, p->t_f * 1e3, name,
           p->t_b * 1e3, name, p->t_w * 1e3);
    if (p->t_f > 0)
        printf("%s_tflops_f %.1f\n", name, c->f_flops / p->t_f / 1e12);
    if (p->t_b > 0)
        printf("%s_tflops_b %.1f\n", name, c->b_flops / p->t_b / 1e12);
    if (p->t_w > 0)
        printf("%s_tflops_w %.1f\n", name, c->w_flops / p->t_w / 1e12);
    printf("%s_m_b_measured %.0f\n%s_m_b_predicted %.0f\n", name, p->m_b, name, c->m_b);
    printf("%s_m_w_measured %.0f\n%s_m_w_predicted %.0f\n", name, p->m_w, name, c->m_w);
}

static int bench_layer(const char *model, int batch, int reps)
{
    zb_err err = { { 0 } };
    zb_model m;
    zb_gpu g;
    if (model_load(model, &m, &err) || gpu_preset("H200-141G", &g, &err))
        return fail(&err);
    if (batch > 0)
        m.micro_batch = batch;
    if (!m.swiglu)
        fprintf(stderr, "zb_gpu_bench: note: %s is a 2-matrix MLP model; the GPU layer is "
                        "SwiGLU with its d_ff\n", m.name);
    zb_profile p;
    if (gpu_profile_measure(&m, m.micro_batch, reps, 0, &p, &err) != 0)
        return fail(&err);
    zb_model ms = m;
    ms.swiglu = 1; /* FLOPs of what actually ran */
    cost_options o;
    cost_options_default(&o);
    cost_part cl, ce, ch;
    if (cost_parts(&ms, &g, &o, &cl, &ce, &ch, &err) != 0)
        return fail(&err);
    printf("model %s d=%d heads=%d kv=%d ff=%d seq=%d batch=%d vocab=%d\n", m.name, m.d_model,
           m.n_heads, m.n_kv_heads, m.d_ff, m.seq_len, m.micro_batch, m.vocab);
    printf("device %s\n", p.hardware);
    print_part("layer", &p.layer, &cl);
    print_part("embedding", &p.embedding, &ce);
    print_part("head", &p.head, &ch);
    printf("layer_step_ms %.4f\n", (p.layer.t_f + p.layer.t_b + p.layer.t_w) * 1e3);
    printf("layer_tflops_step %.1f\n",
           (cl.f_flops + cl.b_flops + cl.w_flops) / (p.layer.t_f + p.layer.t_b + p.layer.t_w) /
               1e12);
    printf("t_comm_ms %.4f\n", p.t_comm * 1e3);
    printf("static_bytes_per_layer %.0f\n", p.static_bytes_per_layer);
    printf("static_bytes_per_layer_predicted %.0f\n", cl.params * cost_bytes_per_param(&ms, &o));
    const char *out = getenv("PROFILE_OUT");
    if (out && *out && profile_save(&p, out, &err) != 0)
        return fail(&err);
    return 0;
}

/* trainer_opts.make_backend: the CUDA backend on GPU 0. */
static int make_gpu0_backend(void *ctx, int n_devices, zb_backend **out, zb_err *err)
{
    (void)ctx;
    return backend_cuda_create(0, n_devices, out, err);
}

static int bench_train(const char *kind, const char *model, const char *data, int steps, int p,
                       int mb)
{
    zb_err err = { { 0 } };
    zb_model m;
    zb_gpu g;
    zb_data *d = NULL;
    sched_t *s = NULL;
    trainer *ct = NULL;
    trainer *gt = NULL;
    int rc = 1;
    gen_fn gen = gen_lookup(kind);
    if (!gen) {
        fprintf(stderr, "zb_gpu_bench: unknown schedule kind '%s'\n", kind);
        return 1;
    }
    if (model_load(model, &m, &err) || gpu_preset("H200-141G", &g, &err) ||
        data_load_file(data, m.seq_len, &d, &err))
        return fail(&err);
    gen_params gp;
    gen_params_default(&gp);
    gp.stages = p;
    gp.microbatches = mb;
    if (gen(&gp, &s, &err) != 0 || sched_validate(s, &err) != 0)
        goto out;
    trainer_opts o;
    trainer_opts_default(&o);
    o.sync_optimizer = 1;
    kernels_init_threads(1);
    trainer_opts og = o;
    og.make_backend = make_gpu0_backend;
    og.threads = 1;
    if (trainer_create(s, &m, d, &o, &ct, &err) != 0 ||
        trainer_create(s, &m, d, &og, &gt, &err) != 0)
        goto out;
    printf("train %s model %s p=%d m=%d\n", kind, m.name, p, mb);
    double worst = 0.0, gsum = 0.0;
    for (int i = 0; i < steps; i++) {
        double lc, lg;
        if (trainer_step(ct, &lc, &err) != 0 || trainer_step(gt, &lg, &err) != 0)
            goto out;
        double rel = fabs(lg - lc) / fabs(lc);
        worst = rel > worst ? rel : worst;
        if (i > 0)
            gsum += trainer_get_stats(gt)->last_step_s;
        printf("step %d loss_cpu %.6f loss_gpu %.6f rel %.2e cpu_s %.4f gpu_s %.4f\n", i + 1, lc,
               lg, rel, trainer_get_stats(ct)->last_step_s, trainer_get_stats(gt)->last_step_s);
    }
    printf("train_%s_worst_rel_loss_diff %.2e\n", kind, worst);
    if (steps > 1)
        printf("train_%s_gpu_step_ms %.3f\n", kind, gsum / (steps - 1) * 1e3);
    size_t st = 0, peak = 0;
    if (trainer_memory(gt, &st, &peak, &err) != 0)
        goto out;
    /* prediction: cost model per-stage deltas, simulator per-device peaks
     * (all devices share this one GPU, so their sum bounds the pool peak) */
    zb_model eff = m;
    eff.vocab = d->vocab;
    cost_options co;
    cost_options_default(&co);
    co.reserve_bytes = 0;
    sim_result r;
    if (cost_fill_sched(&eff, &g, &co, s, &err) != 0 || sim_run(s, &r, &err) != 0)
        goto out;
    double pred_act = 0, pred_static = 0;
    for (int i = 0; i < r.n_devices; i++)
        pred_act += r.dev[i].peak_mem;
    for (int i = 0; s->mem_static && i < s->n_devices; i++)
        pred_static += s->mem_static[i];
    sim_result_free(&r);
    printf("train_%s_static_bytes_measured %zu\n", kind, st);
    printf("train_%s_static_bytes_predicted %.0f\n", kind, pred_static);
    printf("train_%s_activation_peak_measured %zu\n", kind, peak);
    printf("train_%s_activation_peak_predicted_sum_of_devices %.0f\n", kind, pred_act);
    rc = 0;
out:
    if (rc)
        fail(&err);
    trainer_free(gt);
    trainer_free(ct);
    sched_free(s);
    data_free(d);
    return rc;
}

/* The rank backend of bench_ranked: ctx is the rank info. */
static int make_rank_backend(void *ctx, int n_devices, zb_backend **out, zb_err *err)
{
    const gpu_rank_info *rk = ctx;
    return backend_cuda_create_rank(rk->local_rank, n_devices, rk->rank, out, err);
}

/* One rank of a multi-GPU run (ZB_RANK / ZB_WORLD_SIZE / ZB_LOCAL_RANK,
 * world = p): the one executor on this rank's schedule device, as `zbsched
 * run --device cuda` under `zbsched launch` runs it; rank 0 also runs the
 * CPU trainer (all devices in one process) and prints both losses. */
static int bench_ranked(const char *kind, const char *model, const char *data, int steps, int mb)
{
    zb_err err = { { 0 } };
    gpu_rank_info rk;
    int have = gpu_rank_from_env(&rk, &err);
    if (have < 0)
        return fail(&err);
    zb_model m;
    zb_data *d = NULL;
    sched_t *s = NULL;
    trainer *ct = NULL, *gt = NULL;
    gpu_comm *comm = NULL;
    int rc = 1;
    gen_fn gen = gen_lookup(kind);
    if (!gen) {
        fprintf(stderr, "zb_gpu_bench: unknown schedule kind '%s'\n", kind);
        return 1;
    }
    if (model_load(model, &m, &err) || data_load_file(data, m.seq_len, &d, &err))
        return fail(&err);
    gen_params gp;
    gen_params_default(&gp);
    gp.stages = rk.world;
    gp.microbatches = mb;
    if (strcmp(kind, "zb-v") == 0 || strncmp(kind, "interleaved", 11) == 0)
        gp.chunks = 2; /* two stages per rank */
    trainer_opts o;
    trainer_opts_default(&o);
    kernels_init_threads(1);
    zb_nccl_cfg cfg = { .gpu = rk.local_rank };
    cfg.act_elems = (size_t)m.micro_batch * (size_t)m.seq_len * (size_t)m.d_model;
    trainer_opts go = o;
    go.one_device = 1;
    go.device = rk.rank;
    go.make_backend = make_rank_backend;
    go.make_backend_ctx = &rk;
    go.make_transport = nccl_transport_make;
    go.make_transport_ctx = &cfg;
    go.threads = 1;
    if (gen(&gp, &s, &err) != 0 || sched_validate(s, &err) != 0 ||
        gpu_comm_create(&rk, 60, &comm, &err) != 0)
        goto out;
    cfg.comm = comm;
    if (trainer_create(s, &m, d, &go, &gt, &err) != 0 ||
        (rk.rank == 0 && trainer_create(s, &m, d, &o, &ct, &err) != 0))
        goto out;
    int root = s->stage_device[s->n_stages - 1];
    for (int i = 0; i < steps; i++) {
        double lg = 0, lc = NAN;
        if (trainer_step(gt, &lg, &err) != 0 ||
            gpu_comm_bcast_host(comm, &lg, sizeof lg, root, &err) != 0 ||
            (ct && trainer_step(ct, &lc, &err) != 0))
            goto out;
        if (rk.rank == 0)
            printf("ranked %s world %d step %d loss_cpu %.6f loss_gpu %.6f rel %.2e gpu_s %.4f "
                   "bytes_sent_rank0 %llu\n", kind, rk.world, i + 1, lc, lg,
                   fabs(lg - lc) / fabs(lc), trainer_get_stats(gt)->last_step_s,
                   (unsigned long long)cfg.bytes_sent);
    }
    rc = 0;
out:
    if (rc)
        fprintf(stderr, "zb_gpu_bench: rank %d: %s\n", rk.rank, err.msg);
    trainer_free(gt);
    gpu_comm_free(comm);
    trainer_free(ct);
    sched_free(s);
    data_free(d);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: zb_gpu_bench gemm [M N K] | layer MODEL [B [REPS]] | "
                        "train KIND MODEL DATA STEPS [P M] | ranked KIND MODEL DATA STEPS [M]\n");
        return 2;
    }
    if (zb_cuda_device_count() == 0) {
        printf("no CUDA device: skipped\n");
        return 77;
    }
    if (strcmp(argv[1], "gemm") == 0)
        return bench_gemm(argc > 2 ? atoi(argv[2]) : 8192, argc > 3 ? atoi(argv[3]) : 8192,
                          argc > 4 ? atoi(argv[4]) : 8192);
    if (strcmp(argv[1], "layer") == 0 && argc >= 3)
        return bench_layer(argv[2], argc > 3 ? atoi(argv[3]) : 0, argc > 4 ? atoi(argv[4]) : 5);
    if (strcmp(argv[1], "train") == 0 && argc >= 6)
        return bench_train(argv[2], argv[3], argv[4], atoi(argv[5]), argc > 6 ? atoi(argv[6]) : 2,
                           argc > 7 ? atoi(argv[7]) : 4);
    if (strcmp(argv[1], "ranked") == 0 && argc >= 6)
        return bench_ranked(argv[2], argv[3], argv[4], atoi(argv[5]), argc > 6 ? atoi(argv[6]) : 4);
    fprintf(stderr, "zb_gpu_bench: bad arguments (run without any for usage)\n");
    return 2;
}
