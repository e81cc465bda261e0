/*
 * bench_gemm.c: GFLOP/s of the matrix products the CPU kernels run, through
 * kern_gemm (single- and two-thread OpenBLAS) and, for comparison, through
 * a straightforward cache-blocked C loop of our own, to justify the choice
 * of OpenBLAS (kernels/cpu/kernels.h).
 *
 * Shapes: the linear layers of the `tiny` (d=64, T=64, B=8) and
 * `shakespeare-char` (d=384, d_ff=1536, V=65, T=256, B=8) models in their
 * three forms (forward X·W, B dY·Wᵀ, W Xᵀ·dY), and the per-head attention
 * products (T×hd·hd×T and T×T·T×hd).  Each measurement repeats the call
 * in 5 windows of 50 ms and reports 2·M·N·K / time of the best window.
 *
 *   build/bench/bench_gemm            all shapes, 1 and 2 BLAS threads
 *   build/bench/bench_gemm --quick    fewer repetitions (smoke test)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/kernels.h"

typedef struct gemm_shape {
    const char *what; /* which product of which model */
    int ta, tb;       /* transposes, as kern_gemm takes them */
    int M, N, K;      /* C[M,N] = op(A)[M,K] · op(B)[K,N] */
} gemm_shape;

static const gemm_shape shapes[] = {
    {"tiny      qkv/wo  fwd  X.W", 0, 0, 512, 64, 64},
    {"tiny      mlp w1  fwd  X.W", 0, 0, 512, 256, 64},
    {"tiny      mlp w1  B  dY.Wt", 0, 1, 512, 64, 256},
    {"tiny      mlp w1  W  Xt.dY", 1, 0, 64, 256, 512},
    {"shakesp.  qkv/wo  fwd  X.W", 0, 0, 2048, 384, 384},
    {"shakesp.  qkv/wo  B  dY.Wt", 0, 1, 2048, 384, 384},
    {"shakesp.  qkv/wo  W  Xt.dY", 1, 0, 384, 384, 2048},
    {"shakesp.  w1/w3   fwd  X.W", 0, 0, 2048, 1536, 384},
    {"shakesp.  w1/w3   B  dY.Wt", 0, 1, 2048, 384, 1536},
    {"shakesp.  w1/w3   W  Xt.dY", 1, 0, 384, 1536, 2048},
    {"shakesp.  w2      fwd  X.W", 0, 0, 2048, 384, 1536},
    {"shakesp.  w2      W  Xt.dY", 1, 0, 1536, 384, 2048},
    {"shakesp.  head    fwd  X.W", 0, 0, 2048, 65, 384},
    {"shakesp.  attn  S=Q.Kt    ", 0, 1, 256, 256, 64},
    {"shakesp.  attn  O=P.V     ", 0, 0, 256, 64, 256},
};

/* Peak fp32 GFLOP/s of one core from /proc/cpuinfo: clock (first "cpu
 * MHz") × FLOP per cycle.  FLOP per cycle assumes two FMA pipes, as on
 * Zen 2-4 and Intel client/server cores: 2 pipes × 2 (FMA) × 8 lanes
 * (AVX2) = 32, or × 16 lanes (AVX-512) = 64; without FMA, 2 × 8 = 16.
 * Writes the arithmetic into how; returns 0 when cpuinfo is unreadable. */
static double core_peak_gflops(char *how, size_t len)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    double mhz = 0;
    int avx2 = 0, fma = 0, avx512 = 0;
    char line[4096];
    while (f && fgets(line, sizeof line, f)) {
        if (mhz == 0 && strncmp(line, "cpu MHz", 7) == 0) {
            const char *c = strchr(line, ':');
            if (c)
                mhz = atof(c + 1);
        }
        if (strncmp(line, "flags", 5) == 0) {
            avx2 = strstr(line, " avx2") != NULL;
            fma = strstr(line, " fma") != NULL;
            avx512 = strstr(line, " avx512f") != NULL;
        }
    }
    if (f)
        fclose(f);
    int lanes = avx512 ? 16 : avx2 ? 8 : 4;
    int per_cycle = 2 * lanes * (fma ? 2 : 1);
    snprintf(how, len, "%.0f MHz x 2 pipes x %d lanes (%s) x %d (%s) = %d FLOP/cycle",
             mhz, lanes, avx512 ? "AVX-512" : avx2 ? "AVX2" : "SSE", fma ? 2 : 1,
             fma ? "FMA" : "no FMA", per_cycle);
    return mhz * 1e-3 * per_cycle;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Our own blocked GEMM for the no-transpose case: C = A·B, i-k-j order
 * inside 64×256 blocks so the inner loop streams rows of B and C and the
 * compiler vectorises it (at -O3: the build is -O2, whose cheap vectoriser
 * cost model skips loops that need an epilogue). */
__attribute__((optimize("O3"))) static void
blocked_gemm(int M, int N, int K, const float *restrict A,
                         const float *restrict B, float *restrict C)
{
    memset(C, 0, sizeof(float) * (size_t)M * N);
    enum { BI = 64, BK = 256 };
    for (int i0 = 0; i0 < M; i0 += BI)
        for (int k0 = 0; k0 < K; k0 += BK) {
            int i1 = i0 + BI < M ? i0 + BI : M, k1 = k0 + BK < K ? k0 + BK : K;
            for (int i = i0; i < i1; i++) {
                float *restrict c = C + (size_t)i * N;
                for (int k = k0; k < k1; k++) {
                    float a = A[(size_t)i * K + k];
                    const float *restrict b = B + (size_t)k * N;
                    for (int j = 0; j < N; j++)
                        c[j] += a * b[j];
                }
            }
        }
}

/* GFLOP/s of the best of WINDOWS windows, each repeating the call until
 * budget/WINDOWS seconds have passed: the best window is the one least
 * disturbed by other processes on a shared machine. */
enum { WINDOWS = 5 };
static double measure(const gemm_shape *s, const float *A, const float *B, float *C,
                      int own, double budget)
{
    int lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N;
    double best = 0;
    for (int w = 0; w < WINDOWS; w++) {
        long reps = 0;
        double t0 = now(), t;
        do {
            if (own)
                blocked_gemm(s->M, s->N, s->K, A, B, C);
            else
                kern_gemm(s->ta, s->tb, s->M, s->N, s->K, 1.0f, A, lda, B, ldb, 0.0f,
                          C, s->N);
            reps++;
            t = now() - t0;
        } while (t < budget / WINDOWS);
        double g = 2.0 * s->M * s->N * (double)s->K * reps / t / 1e9;
        if (g > best)
            best = g;
    }
    return best;
}

int main(int argc, char **argv)
{
    double budget = (argc > 1 && strcmp(argv[1], "--quick") == 0) ? 0.02 : 0.25;
    int n = (int)(sizeof shapes / sizeof shapes[0]);
    char how[256];
    double peak = core_peak_gflops(how, sizeof how);
    printf("peak per core: %s -> %.1f GFLOP/s (2 cores: %.1f)\n", how, peak, 2 * peak);
    printf("%-28s %6s %6s %6s %10s %10s %10s %8s\n", "shape", "M", "N", "K",
           "blas 1t", "blas 2t", "own 1t", "1t/peak");
    for (int i = 0; i < n; i++) {
        const gemm_shape *s = &shapes[i];
        size_t na = (size_t)s->M * s->K, nb = (size_t)s->K * s->N;
        float *A = malloc(sizeof(float) * na), *B = malloc(sizeof(float) * nb);
        float *C = malloc(sizeof(float) * (size_t)s->M * s->N);
        if (!A || !B || !C) {
            fprintf(stderr, "bench_gemm: out of memory\n");
            return 1;
        }
        for (size_t j = 0; j < na; j++)
            A[j] = (float)((j * 37) % 101) * 0.01f - 0.5f;
        for (size_t j = 0; j < nb; j++)
            B[j] = (float)((j * 53) % 97) * 0.01f - 0.48f;
        kernels_init_threads(1);
        double g1 = measure(s, A, B, C, 0, budget);
        kernels_init_threads(2);
        double g2 = measure(s, A, B, C, 0, budget);
        kernels_init_threads(1);
        char own[16] = "-";
        if (!s->ta && !s->tb)
            snprintf(own, sizeof own, "%.1f", measure(s, A, B, C, 1, budget));
        printf("%-28s %6d %6d %6d %10.1f %10.1f %10s %7.0f%%\n", s->what, s->M, s->N,
               s->K, g1, g2, own, peak > 0 ? 100.0 * g1 / peak : 0.0);
        free(A);
        free(B);
        free(C);
    }
    printf("GFLOP/s = 2*M*N*K / time; 1t/peak = 'blas 1t' / one core's peak\n");
    return 0;
}
