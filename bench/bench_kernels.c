/*
 * bench_kernels.c: time and memory of one micro-batch through a pipeline
 * stage of the CPU reference (F, B, W separately), for the `tiny` and
 * `shakespeare-char` shapes.  These are the per-op costs a zero-bubble
 * schedule balances (T_F, T_B, T_W) and the activation memory it holds
 * (bytes kept after F, after B).
 *
 *   build/bench/bench_kernels [reps]     default 5 repetitions, fastest
 *
 * The fastest repetition (not the median) is reported: on a shared machine
 * it is the one least slowed down by other processes.
 *
 * Single-threaded BLAS (kernels_init_threads(1)), as the runtime runs it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/llama.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One model shape to time. */
typedef struct bench_case {
    const char *name; /* preset it mirrors */
    int L;            /* layers of the model (sets the init scale only) */
    int d, nh, nkv;   /* width, query heads, KV heads */
    int ff, V, T;     /* SwiGLU width, vocabulary, sequence length */
    int B;            /* sequences per micro-batch */
} bench_case;

static const bench_case cases[] = {
    {"tiny", 4, 64, 4, 4, 256, 65, 64, 8},
    {"shakespeare-char", 6, 384, 6, 6, 1536, 65, 256, 8},
};

/* Times F/B/W of a stage with one layer (and the head when with_head). */
static int run(const bench_case *c, int with_head, int reps)
{
    zb_model m;
    memset(&m, 0, sizeof m);
    snprintf(m.name, sizeof m.name, "%s", c->name);
    m.n_layers = c->L;
    m.d_model = c->d;
    m.n_heads = c->nh;
    m.n_kv_heads = c->nkv;
    m.d_ff = c->ff;
    m.vocab = c->V;
    m.seq_len = c->T;
    m.rope_theta = 10000.0;
    zb_err err = {{0}};
    llama_stage st;
    if (with_head ? llama_stage_init(&st, &m, c->L - 1, c->L, 0, 1, &err)
                  : llama_stage_init(&st, &m, 0, 1, 0, 0, &err)) {
        fprintf(stderr, "bench_kernels: %s\n", err.msg);
        return -1;
    }
    size_t N = (size_t)c->B * c->T, Nd = N * c->d;
    float *p = malloc(sizeof(float) * st.n_params), *g = calloc(st.n_params, sizeof(float));
    float *x = malloc(sizeof(float) * Nd), *y = malloc(sizeof(float) * Nd);
    float *dy = malloc(sizeof(float) * Nd), *dx = malloc(sizeof(float) * Nd);
    int32_t *tgt = malloc(sizeof(int32_t) * N);
    llama_saved *sv = llama_saved_new(&st, c->B);
    if (!p || !g || !x || !y || !dy || !dx || !tgt || !sv) {
        fprintf(stderr, "bench_kernels: out of memory\n");
        return -1;
    }
    llama_stage_init_params(&st, p, 1);
    for (size_t i = 0; i < Nd; i++) {
        x[i] = (float)((i * 37) % 101) * 0.02f - 1.0f;
        dy[i] = (float)((i * 53) % 97) * 1e-4f;
    }
    for (size_t i = 0; i < N; i++)
        tgt[i] = (int32_t)(i % c->V);
    double *tf = malloc(sizeof(double) * reps * 3), *tb = tf + reps, *tw = tb + reps;
    size_t after_f = 0, after_b = 0;
    float loss;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        if (llama_stage_forward(&st, p, NULL, x, with_head ? tgt : NULL, sv,
                                with_head ? NULL : y, &loss, NULL, &err))
            goto fail;
        double t1 = now();
        after_f = llama_saved_bytes(sv);
        if (llama_stage_backward_b(&st, p, sv, 1.0f, with_head ? NULL : dy, dx, &err))
            goto fail;
        double t2 = now();
        after_b = llama_saved_bytes(sv);
        if (llama_stage_backward_w(&st, sv, g, &err))
            goto fail;
        double t3 = now();
        tf[r] = t1 - t0;
        tb[r] = t2 - t1;
        tw[r] = t3 - t2;
    }
    qsort(tf, reps, sizeof(double), cmp_double);
    qsort(tb, reps, sizeof(double), cmp_double);
    qsort(tw, reps, sizeof(double), cmp_double);
    printf("%-17s %-10s B=%-2d T=%-3d  F %8.2f ms  B %8.2f ms  W %8.2f ms   "
           "kept after F %7.1f MiB, after B %7.1f MiB\n",
           c->name, with_head ? "layer+head" : "layer", c->B, c->T,
           tf[0] * 1e3, tb[0] * 1e3, tw[0] * 1e3,
           after_f / 1048576.0, after_b / 1048576.0);
    free(tf);
    llama_saved_free(sv);
    free(p); free(g); free(x); free(y); free(dy); free(dx); free(tgt);
    llama_stage_free(&st);
    return 0;
fail:
    fprintf(stderr, "bench_kernels: %s\n", err.msg);
    return -1;
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 5;
    if (reps < 1 || reps > 1000) {
        fprintf(stderr, "bench_kernels: repetitions must be 1..1000\n");
        return 1;
    }
    kernels_init_threads(1);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int h = 0; h < 2; h++)
            if (run(&cases[i], h, reps) != 0)
                return 1;
    return 0;
}
