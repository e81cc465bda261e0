/*
 * bench_memory.c: one layer of tiny against the same layer as a memory
 * layer (the tiny-mem preset's layer 2), one micro-batch through F, B and
 * W, fastest of REPS; and the memory layer's sparse value gradient against
 * the cost a dense one would have (zeroing and adding the whole table).
 *
 *   build/bench/bench_memory [reps] [batch]     defaults 20 and 4
 *
 * Single-threaded BLAS, as the runtime runs it.  The fastest repetition is
 * reported: on a shared machine it is the one least slowed by others.
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

static double min_of(const double *v, int n)
{
    double m = v[0];
    for (int i = 1; i < n; i++)
        m = v[i] < m ? v[i] : m;
    return m;
}

/* Times F, B, W of the one-layer stage [2, 3) of preset `name`. */
static int run(const char *name, int reps, int batch)
{
    zb_model m;
    zb_err err = {{0}};
    llama_stage st;
    if (model_preset(name, &m, &err) != 0 || llama_stage_init(&st, &m, 2, 3, 0, 0, &err) != 0) {
        fprintf(stderr, "bench_memory: %s\n", err.msg);
        return -1;
    }
    size_t N = (size_t)batch * m.seq_len, Nd = N * m.d_model;
    float *p = malloc(sizeof(float) * st.n_params), *g = calloc(st.n_params, sizeof(float));
    float *x = malloc(sizeof(float) * Nd), *y = malloc(sizeof(float) * Nd);
    float *dx = malloc(sizeof(float) * Nd);
    llama_saved *sv = llama_saved_new(&st, batch);
    double *t = malloc(sizeof(double) * 4 * reps);
    if (!p || !g || !x || !y || !dx || !sv || !t) {
        fprintf(stderr, "bench_memory: out of memory\n");
        return -1;
    }
    llama_stage_init_params(&st, p, 1);
    for (size_t i = 0; i < Nd; i++)
        x[i] = (float)((i * 37) % 101) * 0.02f - 1.0f;
    size_t after_f = 0, after_b = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        if (llama_stage_forward(&st, p, NULL, x, NULL, sv, y, NULL, NULL, &err))
            goto fail;
        double t1 = now();
        after_f = llama_saved_bytes(sv);
        if (llama_stage_backward_b(&st, p, sv, 0, y, dx, &err))
            goto fail;
        double t2 = now();
        after_b = llama_saved_bytes(sv);
        if (llama_stage_backward_w(&st, sv, g, &err))
            goto fail;
        double t3 = now();
        /* what a dense value gradient would add on top: zero a table-sized
         * temporary and add all of it into the accumulator */
        const llama_tensor *vt = llama_stage_find(&st, LLAMA_T_MEM_VALUES, 2);
        double t4 = t3;
        if (vt) {
            float *tmp = calloc(vt->count, sizeof(float));
            if (!tmp)
                goto fail;
            for (size_t i = 0; i < vt->count; i++)
                g[vt->offset + i] = g[vt->offset + i] + tmp[i];
            free(tmp);
            t4 = now();
        }
        t[r] = t1 - t0;
        t[reps + r] = t2 - t1;
        t[2 * reps + r] = t3 - t2;
        t[3 * reps + r] = t4 - t3;
    }
    printf("%-9s layer 2, %7zu params, B=%d T=%d:  F %6.3f ms  B %6.3f ms  W %6.3f ms  "
           "(dense-table extra %6.3f ms)  kept after F %.2f MiB, after B %.2f MiB\n",
           name, st.n_params, batch, m.seq_len, min_of(t, reps) * 1e3,
           min_of(t + reps, reps) * 1e3, min_of(t + 2 * reps, reps) * 1e3,
           min_of(t + 3 * reps, reps) * 1e3, after_f / 1048576.0, after_b / 1048576.0);
    llama_saved_free(sv);
    free(p); free(g); free(x); free(y); free(dx); free(t);
    llama_stage_free(&st);
    return 0;
fail:
    fprintf(stderr, "bench_memory: %s\n", err.msg[0] ? err.msg : "out of memory");
    return -1;
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 20, batch = argc > 2 ? atoi(argv[2]) : 4;
    if (reps < 1 || reps > 10000 || batch < 1 || batch > 256) {
        fprintf(stderr, "bench_memory: usage: bench_memory [reps 1..10000] [batch 1..256]\n");
        return 1;
    }
    kernels_init_threads(1);
    if (run("tiny", reps, batch) != 0 || run("tiny-mem", reps, batch) != 0)
        return 1;
    return 0;
}
