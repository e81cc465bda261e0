/*
 * kernels.c: BLAS thread setup and the one GEMM entry point of the CPU
 * kernels (see kernels.h for why everything funnels through here).
 *
 * Row-major cblas_sgemm calls; OpenBLAS picks its kernel for this CPU at
 * load time (DYNAMIC_ARCH), so results are bit-reproducible on one machine
 * and one thread count, which is all the runtime's determinism needs.
 */
#include "kernels/cpu/kernels.h"

#include <assert.h>
#include <cblas.h>

void kernels_init_threads(int n)
{
    openblas_set_num_threads(n < 1 ? 1 : n);
}

int kernels_threads(void)
{
    return openblas_get_num_threads();
}

void kern_gemm(int trans_a, int trans_b, int M, int N, int K, float alpha,
               const float *A, int lda, const float *B, int ldb, float beta,
               float *C, int ldc)
{
    assert(M >= 0 && N >= 0 && K >= 0);
    if (M == 0 || N == 0)
        return;
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda,
                B, ldb, beta, C, ldc);
}

void kern_matvec(float *y, const float *x, const float *W, int in, int out)
{
    assert(in >= 0 && out >= 0);
    if (in == 0 || out == 0)
        return;
    /* y = Wᵀ·x with W row-major [in, out] */
    cblas_sgemv(CblasRowMajor, CblasTrans, in, out, 1.0f, W, out, x, 1, 0.0f, y, 1);
}
