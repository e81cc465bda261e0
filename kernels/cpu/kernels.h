/*
 * kernels.h: process-wide setup of the CPU kernels and the GEMM wrapper
 * they all use.
 *
 * Every matrix product of the CPU reference goes through kern_gemm, a thin
 * wrapper over cblas_sgemm of OpenBLAS (or BLIS, meson -Dblas=blis) (faster than any blocked loop we would
 * write here; see bench/README.md "kernels").  OpenBLAS is bit-deterministic
 * for a fixed shape only when it runs single-threaded, because with several
 * threads it may split the reduction differently; so the determinism
 * contract of llama.h starts with kernels_init_threads(1).  Parallelism in
 * the runtime comes from running different stages on different threads,
 * each calling single-threaded BLAS.
 */
#ifndef ZB_KERNELS_KERNELS_H
#define ZB_KERNELS_KERNELS_H

#include "src/err.h"

/* Loads the BLAS library the build chose (meson -Dblas=openblas|blis) if
 * it is not loaded yet; thread-safe, cheap once loaded.  Every function
 * below loads it on first use, but cannot report a failure (it aborts with
 * one line), so a program calls this first: 0, or -1 with err naming the
 * library and its package. */
int kernels_blas_load(zb_err *err);

/* One line naming the loaded BLAS: library, version and build options,
 * the kernel set it picked for this processor, and the file it came from
 * (e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Zen MAX_THREADS=64,
 * kernels for Zen (/usr/lib/.../libopenblas.so.0)"); NULL before it is
 * loaded. */
const char *kernels_blas_describe(void);

/* Sets the number of threads OpenBLAS uses inside one GEMM (1 for the
 * deterministic runtime; the GEMM benchmark also measures 2).  Process-wide;
 * call before starting worker threads.  n < 1 is treated as 1. */
void kernels_init_threads(int n);

/* The number of BLAS threads currently configured. */
int kernels_threads(void);

/* Rows of C per BLAS call at most (see kernels.c): results depend on the
 * blocks, not on the number of threads. */
#define KERN_GEMM_BLOCK_ROWS 256

/* The rows of C per BLAS call kern_gemm uses for an M-row product: M cut
 * into ceil(M / KERN_GEMM_BLOCK_ROWS) blocks as even as possible (the last
 * block may be shorter).  A function of M alone. */
int kern_gemm_block_rows(int M);

/* C[M,N] = alpha · op(A) · op(B) + beta · C, row-major, where op(A) is
 * [M,K] (A stored [M,K] with leading dimension lda, or [K,M] when trans_a),
 * op(B) is [K,N] (B stored [K,N] with ldb, or [N,K] when trans_b), C has
 * leading dimension ldc.  Deterministic for fixed arguments when BLAS runs
 * single-threaded, whatever team the calling thread has (team.h): the row
 * blocks are shared out over the team, each one BLAS call. */
void kern_gemm(int trans_a, int trans_b, int M, int N, int K, float alpha,
               const float *A, int lda, const float *B, int ldb, float beta,
               float *C, int ldc);

/* y[out] = x[in] · W[in, out] for ONE row (cblas_sgemv): a one-row matmul
 * through kern_gemm would pack the whole of W on every call.  For the
 * KV-cache decoder (runtime/generate.c), where every product has one row.
 * Deterministic single-threaded; its bits may differ from kern_gemm's. */
void kern_matvec(float *y, const float *x, const float *W, int in, int out);

#endif
