/*
 * bench_ops.c: where a training step of the CPU kernels spends its time,
 * kernel by kernel, at one model's shape (issue 28).  Every kernel that a
 * layer's F, B and W call (kernels/cpu/ops.h), the head's, AdamW over the
 * whole model and the W accumulation are timed alone on buffers of the
 * real sizes, so that the table can be set beside PyTorch's profiler on the
 * same ops (bench/bench_torch.py --profile).
 *
 *   build/bench/bench_ops [--model tiny|shakespeare-char] [--batch B] [--reps R]
 *
 * Per kernel: the fastest of R repetitions in thread CPU time (on a shared
 * machine the one least slowed by other processes), its calls per training step (m = 1
 * micro-batch, every layer), the time per step that makes, and its rate:
 * GFLOP/s for products, GB/s of compulsory traffic (each operand read or
 * written once) for the passes that stream memory.  Two references come
 * first: one core's fp32 peak from /proc/cpuinfo (as bench_gemm) and the
 * memcpy bandwidth of a 64 MiB buffer.  The last lines are the totals of a
 * layer's F, B and W and of a step, and the whole stage F/B/W through
 * llama.h for comparison (the sum of the parts misses only glue).
 *
 * Single-threaded BLAS, one thread, as the runtime's determinism contract
 * runs it (kernels/cpu/kernels.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "kernels/cpu/adamw.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/llama.h"
#include "kernels/cpu/ops.h"

/* This thread's CPU time: on a shared machine the time other processes
 * hold the core is not counted (their share of caches and memory
 * bandwidth still is). */
static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* fp32 FLOP per cycle of one core from the cpuinfo flags (two FMA pipes,
 * as on Zen 2-4 and Intel cores) times the reported clock, in GFLOP/s. */
static double core_peak(char *how, size_t len)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    double mhz = 0;
    int avx2 = 0, fma = 0, avx512 = 0;
    char line[4096];
    while (f && fgets(line, sizeof line, f)) {
        if (mhz == 0 && strncmp(line, "cpu MHz", 7) == 0 && strchr(line, ':'))
            mhz = atof(strchr(line, ':') + 1);
        if (strncmp(line, "flags", 5) == 0) {
            avx2 = strstr(line, " avx2") != NULL;
            fma = strstr(line, " fma") != NULL;
            avx512 = strstr(line, " avx512f") != NULL;
        }
    }
    if (f)
        fclose(f);
    int lanes = avx512 ? 16 : avx2 ? 8 : 4, per_cycle = 2 * lanes * (fma ? 2 : 1);
    snprintf(how, len, "%.0f MHz x 2 pipes x %d lanes (%s)%s = %d FLOP/cycle", mhz, lanes,
             avx512 ? "AVX-512" : avx2 ? "AVX2" : "SSE", fma ? " x 2 (FMA)" : "", per_cycle);
    return mhz * 1e-3 * per_cycle;
}

/* Fills n floats with a fixed pattern in [-1, 1) times scale. */
static void fill(float *x, size_t n, unsigned salt, float scale)
{
    unsigned s = 2463534242u ^ salt;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 17, s ^= s << 5;
        x[i] = ((float)(s & 0xffff) / 32768.0f - 1.0f) * scale;
    }
}

static float *fbuf(size_t n, unsigned salt, float scale)
{
    float *p = malloc(sizeof(float) * (n ? n : 1));
    if (!p) {
        fprintf(stderr, "bench_ops: out of memory\n");
        exit(1);
    }
    fill(p, n, salt, scale);
    return p;
}

/* One timed kernel: a closure over the buffers of the case. */
typedef struct op_row {
    const char *name;   /* kernel and which of F/B/W calls it */
    char pass;          /* 'F', 'B', 'W' (per layer), 'H' (head), 'O' (optimizer) */
    int per_layer;      /* calls per layer per micro-batch (0: once per step) */
    double flop;        /* per call, 0 for passes timed by bytes */
    double bytes;       /* compulsory traffic per call */
    double best;        /* fastest repetition, seconds */
} op_row;

enum { MAX_ROWS = 64 };
static op_row rows[MAX_ROWS];
static int n_rows;
static int reps = 5;

#define TIME_OP(NAME, PASS, PER, FLOP, BYTES, STMT)                                   \
    do {                                                                               \
        op_row *r_ = &rows[n_rows++];                                                  \
        r_->name = NAME, r_->pass = PASS, r_->per_layer = PER, r_->flop = FLOP;         \
        r_->bytes = BYTES, r_->best = 1e30;                                             \
        STMT; /* warm-up: first-touch faults and scratch growth */                    \
        for (int k_ = 0; k_ < reps; k_++) {                                            \
            double t0_ = now();                                                        \
            STMT;                                                                      \
            double t_ = now() - t0_;                                                   \
            if (t_ < r_->best)                                                         \
                r_->best = t_;                                                         \
        }                                                                              \
    } while (0)

int main(int argc, char **argv)
{
    const char *model = "shakespeare-char";
    int batch = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc)
            model = argv[++i];
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc)
            batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_ops [--model NAME] [--batch B] [--reps R]\n");
            return 2;
        }
    }
    zb_model m;
    zb_err err = {{0}};
    if (model_preset(model, &m, &err) != 0) {
        fprintf(stderr, "bench_ops: %s\n", err.msg);
        return 2;
    }
    if (batch > 0)
        m.micro_batch = batch;
    if (reps < 1 || reps > 1000) {
        fprintf(stderr, "bench_ops: --reps must be 1..1000\n");
        return 2;
    }
    m.vocab = 65; /* tinyshakespeare's characters, as `run` trains */
    kernels_init_threads(1);
    const int B = m.micro_batch, T = m.seq_len, N = B * T, d = m.d_model, ff = m.d_ff;
    const int nh = m.n_heads, nkv = m.n_kv_heads, hd = d / nh, qd = nh * hd, kvd = nkv * hd;
    const int V = m.vocab, L = m.n_layers;
    const size_t Nd = (size_t)N * d, Nf = (size_t)N * ff, F4 = sizeof(float);

    char how[160];
    double peak = core_peak(how, sizeof how);
    size_t big = (size_t)16 << 20;
    float *src = fbuf(big, 1, 1), *dst = fbuf(big, 2, 1);
    double mc = 1e30;
    for (int k = 0; k < reps + 1; k++) {
        double t0 = now();
        memcpy(dst, src, big * F4);
        double t = now() - t0;
        mc = t < mc ? t : mc;
    }
    double bw = 2.0 * big * F4 / mc * 1e-9;
    free(src);
    free(dst);
    printf("bench_ops: %s, micro-batch %d x %d (N = %d), d=%d, heads %d/%d, d_ff=%d, V=%d, "
           "%d layers; fastest of %d\n", m.name, B, T, N, d, nh, nkv, ff, V, L, reps);
    printf("one core's peak %.1f GFLOP/s (%s); memcpy %.1f GB/s (read + write, 64 MiB)\n\n",
           peak, how, bw);

    float *x = fbuf(Nd, 3, 1), *g = fbuf(d, 4, 1), *y = fbuf(Nd, 5, 1), *rstd = fbuf(N, 6, 1);
    float *dy = fbuf(Nd, 7, 1e-2f), *dx = fbuf(Nd, 8, 1);
    float *wq = fbuf((size_t)d * qd, 9, 0.05f), *wff = fbuf((size_t)d * ff, 10, 0.05f);
    float *w2 = fbuf((size_t)ff * d, 11, 0.03f), *wh = fbuf((size_t)d * V, 12, 0.05f);
    float *q = fbuf((size_t)N * qd, 13, 1), *kk = fbuf((size_t)N * kvd, 14, 1);
    float *vv = fbuf((size_t)N * kvd, 15, 1), *att = fbuf((size_t)N * qd, 16, 1);
    float *lse = fbuf((size_t)B * nh * T, 17, 1);
    float *dq = fbuf((size_t)N * qd, 18, 1), *dk = fbuf((size_t)N * kvd, 19, 1);
    float *dv = fbuf((size_t)N * kvd, 20, 1), *datt = fbuf((size_t)N * qd, 21, 1e-2f);
    float *a = fbuf(Nf, 22, 2), *b = fbuf(Nf, 23, 1), *hs = fbuf(Nf, 24, 1);
    float *da = fbuf(Nf, 25, 1), *db = fbuf(Nf, 26, 1), *dhs = fbuf(Nf, 27, 1e-2f);
    float *dW = fbuf((size_t)d * ff, 28, 1);
    float *logits = fbuf((size_t)N * V, 29, 3), *dlogits = fbuf((size_t)N * V, 30, 1);
    float *hlse = fbuf(N, 31, 1), *emb = fbuf((size_t)V * d, 37, 0.02f);
    int32_t *tgt = malloc(sizeof(int32_t) * N);
    for (int n = 0; n < N; n++)
        tgt[n] = (n * 7) % V;
    /* q and k go through RoPE and the forward once so that lse is real */
    kern_attention_forward(att, lse, q, kk, vv, B, T, nh, nkv, hd);

    double qkv_f = 2.0 * N * d * qd; /* one of wq/wk/wv/wo with qd = kvd = d */
    double ffn_f = 2.0 * N * d * ff;
    /* causal attention as computed (full T×T products): F = Q·Kᵀ and P·V */
    double att_f = 2.0 * 2.0 * B * nh * (double)T * T * hd;

    /* ---- per layer, forward ---- */
    TIME_OP("rmsnorm forward", 'F', 2, 0, (2.0 * Nd + N) * F4,
            kern_rmsnorm_forward(y, rstd, x, g, N, d));
    TIME_OP("matmul fwd  d->d    (wq wk wv wo)", 'F', 4, qkv_f, 0,
            kern_matmul_forward(q, x, wq, N, d, qd));
    TIME_OP("rope (q and k)", 'F', 2, 0, 2.0 * N * qd * F4,
            kern_rope(q, N, T, nh, hd, m.rope_theta, 0));
    TIME_OP("attention forward", 'F', 1, att_f, 0,
            kern_attention_forward(att, lse, q, kk, vv, B, T, nh, nkv, hd));
    TIME_OP("residual add", 'F', 2, 0, 3.0 * Nd * F4,
            for (size_t j = 0; j < Nd; j++) y[j] = x[j] + y[j]);
    TIME_OP("matmul fwd  d->ff   (w1 w3)", 'F', 2, ffn_f, 0,
            kern_matmul_forward(a, x, wff, N, d, ff));
    TIME_OP("swiglu forward", 'F', 1, 0, 3.0 * Nf * F4, kern_swiglu_forward(hs, a, b, Nf));
    TIME_OP("matmul fwd  ff->d   (w2)", 'F', 1, ffn_f, 0,
            kern_matmul_forward(y, hs, w2, N, ff, d));

    /* ---- per layer, B ---- */
    TIME_OP("matmul B    d->ff   (w2: dY.W2t)", 'B', 1, ffn_f, 0,
            kern_matmul_backward_b(dhs, dy, w2, N, ff, d));
    TIME_OP("swiglu backward", 'B', 1, 0, 5.0 * Nf * F4,
            kern_swiglu_backward(da, db, dhs, a, b, Nf));
    TIME_OP("matmul B    ff->d   (w1 w3)", 'B', 2, ffn_f, 0,
            kern_matmul_backward_b(dx, da, wff, N, d, ff));
    TIME_OP("gradient add (dn2, dh, dn1 x2, dx)", 'B', 5, 0, 3.0 * Nd * F4,
            for (size_t j = 0; j < Nd; j++) dx[j] = dx[j] + y[j]);
    TIME_OP("rmsnorm backward B", 'B', 2, 0, (3.0 * Nd + N) * F4,
            kern_rmsnorm_backward_b(dx, dy, x, rstd, g, N, d));
    TIME_OP("matmul B    d->d    (wo wq wk wv)", 'B', 4, qkv_f, 0,
            kern_matmul_backward_b(datt, dy, wq, N, qd, d));
    TIME_OP("attention backward", 'B', 1, 2.5 * att_f, 0,
            kern_attention_backward(dq, dk, dv, datt, q, kk, vv, att, lse, B, T, nh, nkv, hd));
    TIME_OP("rope inverse (dq and dk)", 'B', 2, 0, 2.0 * N * qd * F4,
            kern_rope(dq, N, T, nh, hd, m.rope_theta, 1));

    /* ---- per layer, W ---- */
    TIME_OP("rmsnorm backward W", 'W', 2, 0, (2.0 * Nd + N) * F4,
            kern_rmsnorm_backward_w(g, dy, x, rstd, N, d));
    TIME_OP("matmul W    d x d   (wq wk wv wo)", 'W', 4, qkv_f, 0,
            kern_matmul_backward_w(wq, x, dy, N, d, qd));
    TIME_OP("matmul W    d x ff  (w1 w3 w2)", 'W', 3, ffn_f, 0,
            kern_matmul_backward_w(dW, x, da, N, d, ff));
    size_t lw = 4 * (size_t)d * qd + 3 * (size_t)d * ff + 2 * (size_t)d; /* a layer's weights */
    float *acc = fbuf(lw, 32, 1), *tmp = fbuf(lw, 33, 1);
    TIME_OP("gradient accumulate (a layer's weights)", 'W', 1, 0, 3.0 * lw * F4,
            for (size_t j = 0; j < lw; j++) acc[j] = acc[j] + tmp[j]);
    free(acc);
    free(tmp);

    /* ---- head, once per micro-batch ---- */
    TIME_OP("final rmsnorm forward", 'H', 0, 0, (2.0 * Nd + N) * F4,
            kern_rmsnorm_forward(y, rstd, x, g, N, d));
    TIME_OP("lm head fwd  d->V", 'H', 0, 2.0 * N * d * V, 0,
            kern_matmul_forward(logits, x, wh, N, d, V));
    TIME_OP("cross-entropy forward", 'H', 0, 0, (double)N * V * F4,
            kern_crossentropy_forward(hlse, logits, tgt, N, V));
    TIME_OP("cross-entropy backward", 'H', 0, 0, 2.0 * N * V * F4,
            kern_crossentropy_backward(dlogits, logits, hlse, tgt, 1.0f, N, V));
    TIME_OP("lm head B    dY.Ht", 'H', 0, 2.0 * N * d * V, 0,
            kern_matmul_backward_b(dx, dlogits, wh, N, d, V));
    TIME_OP("lm head W    Xt.dY", 'H', 0, 2.0 * N * d * V, 0,
            kern_matmul_backward_w(wh, x, dlogits, N, d, V));
    TIME_OP("embedding forward", 'H', 0, 0, 2.0 * Nd * F4,
            kern_embedding_forward(x, tgt, emb, N, d));

    /* ---- the optimizer over the whole model, once per step ---- */
    llama_stage st;
    if (llama_stage_init(&st, &m, 0, L, 1, 1, &err) != 0) {
        fprintf(stderr, "bench_ops: %s\n", err.msg);
        return 1;
    }
    size_t P = st.n_params;
    float *pp = fbuf(P, 34, 0.02f), *pg = fbuf(P, 35, 1e-3f);
    float *pm = calloc(P, F4), *pv = calloc(P, F4);
    adamw_config cfg;
    adamw_config_default(&cfg);
    int step = 1;
    TIME_OP("adamw step (all parameters)", 'O', 0, 0, 7.0 * P * F4,
            adamw_step_stage(&st, &cfg, pp, pg, pm, pv, step++, 1e-3f, 1.0f));
    TIME_OP("gradient sum of squares (clip)", 'O', 0, 0, 1.0 * P * F4,
            (void)adamw_tensor_sum_squares(&st, pg, NULL));
    TIME_OP("gradient zero", 'O', 0, 0, 1.0 * P * F4, llama_grads_zero(&st, pg));

    /* ---- the table ---- */
    double pass_sum[5] = { 0 };
    const char passes[] = "FBWHO";
    printf("%-42s %4s %6s %10s %12s %10s\n", "kernel", "pass", "calls", "ms/call", "ms/step",
           "rate");
    for (int i = 0; i < n_rows; i++) {
        op_row *r = &rows[i];
        int calls = r->per_layer ? r->per_layer * L : 1;
        double step_ms = r->best * calls * 1e3;
        pass_sum[strchr(passes, r->pass) - passes] += step_ms;
        char rate[48];
        if (r->flop > 0)
            snprintf(rate, sizeof rate, "%6.1f GFLOP/s (%3.0f%%)", r->flop / r->best * 1e-9,
                     100.0 * r->flop / r->best * 1e-9 / peak);
        else
            snprintf(rate, sizeof rate, "%6.1f GB/s", r->bytes / r->best * 1e-9);
        printf("%-42s %4c %6d %10.3f %12.2f  %s\n", r->name, r->pass, calls, r->best * 1e3,
               step_ms, rate);
    }
    double total = 0;
    for (int p = 0; p < 5; p++)
        total += pass_sum[p];
    printf("\nper step of m = 1 micro-batch (%d tokens): layers F %.1f ms, B %.1f ms, W %.1f ms; "
           "head and embedding %.1f ms; optimizer %.1f ms; sum %.1f ms\n", N, pass_sum[0],
           pass_sum[1], pass_sum[2], pass_sum[3], pass_sum[4], total);

    /* the same micro-batch through llama.h, the whole model as one stage */
    float *params = fbuf(P, 36, 0), *grads = calloc(P, F4);
    llama_stage_init_params(&st, params, 1);
    llama_saved *sv = llama_saved_new(&st, B);
    double tf = 1e30, tb = 1e30, tw = 1e30;
    float loss = 0;
    long faults0 = 0;
    for (int k = 0; k < reps + 1; k++) {
        if (k == 1) { /* the first pass grows the pool and the scratch */
            struct rusage ru;
            getrusage(RUSAGE_SELF, &ru);
            faults0 = ru.ru_minflt;
        }
        double t0 = now();
        if (llama_stage_forward(&st, params, tgt, NULL, tgt, sv, NULL, &loss, NULL, &err))
            goto fail;
        double t1 = now();
        if (llama_stage_backward_b(&st, params, sv, 1.0f, NULL, NULL, &err))
            goto fail;
        double t2 = now();
        if (llama_stage_backward_w(&st, sv, grads, &err))
            goto fail;
        double t3 = now();
        if (k > 0) { /* the first one grows the pool and the scratch */
            tf = t1 - t0 < tf ? t1 - t0 : tf;
            tb = t2 - t1 < tb ? t2 - t1 : tb;
            tw = t3 - t2 < tw ? t3 - t2 : tw;
        }
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("whole model through llama.h, one micro-batch: F %.1f ms, B %.1f ms, W %.1f ms "
           "(sum %.1f ms; loss %.6f); %.1f page faults per micro-batch after the first\n",
           tf * 1e3, tb * 1e3, tw * 1e3, (tf + tb + tw) * 1e3, loss,
           reps > 0 ? (double)(ru.ru_minflt - faults0) / reps : 0.0);
    llama_saved_free(sv);
    llama_stage_free(&st);
    return 0;
fail:
    fprintf(stderr, "bench_ops: %s\n", err.msg);
    return 1;
}
