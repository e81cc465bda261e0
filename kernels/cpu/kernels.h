/*
 * kernels.h: process-wide setup of the CPU kernels and the GEMM wrapper
 * they all use.
 *
 * Every matrix product of the CPU reference goes through kern_gemm, a thin
 * wrapper over OpenBLAS's cblas_sgemm (faster than any blocked loop we would
 * write here; see bench/README.md "kernels").  OpenBLAS is bit-deterministic
 * for a fixed shape only when it runs single-threaded, because with several
 * threads it may split the reduction differently; so the determinism
 * contract of llama.h starts with kernels_init_threads(1).  Parallelism in
 * the runtime comes from running different stages on different threads,
 * each calling single-threaded BLAS.
 */
#ifndef ZB_KERNELS_KERNELS_H
#define ZB_KERNELS_KERNELS_H

/* Sets the number of threads OpenBLAS uses inside one GEMM (1 for the
 * deterministic runtime; the GEMM benchmark also measures 2).  Process-wide;
 * call before starting worker threads.  n < 1 is treated as 1. */
void kernels_init_threads(int n);

/* The number of BLAS threads currently configured. */
int kernels_threads(void);

/* Rows of C per BLAS call (see kernels.c): results depend on it, not on
 * the number of threads. */
#define KERN_GEMM_BLOCK_ROWS 256

/* C[M,N] = alpha · op(A) · op(B) + beta · C, row-major, where op(A) is
 * [M,K] (A stored [M,K] with leading dimension lda, or [K,M] when trans_a),
 * op(B) is [K,N] (B stored [K,N] with ldb, or [N,K] when trans_b), C has
 * leading dimension ldc.  Deterministic for fixed arguments when BLAS runs
 * single-threaded, whatever team the calling thread has (team.h): the row
 * blocks are shared out over the team, each one BLAS call. */
void kern_gemm(int trans_a, int trans_b, int M, int N, int K, float alpha,
               const float *A, int lda, const float *B, int ldb, float beta,
               float *C, int ldc);

#endif
