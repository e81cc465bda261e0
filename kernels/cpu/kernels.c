/*
 * kernels.c: BLAS thread setup and the one GEMM entry point of the CPU
 * kernels (see kernels.h for why everything funnels through here).
 *
 * Row-major cblas_sgemm calls; OpenBLAS picks its kernel for this CPU at
 * load time (DYNAMIC_ARCH), so results are bit-reproducible on one machine
 * and one thread count, which is all the runtime's determinism needs.
 *
 * Every product is cut into blocks of KERN_GEMM_BLOCK_ROWS rows of C, one
 * cblas_sgemm each, whether or not a team (team.h) shares them out.  A
 * row's bits depend on where it falls in OpenBLAS's register tiles and so
 * on the M of the call (measured: cutting 4096 rows in two at any point
 * changes thousands of results), so the cut is a constant: the same blocks
 * at every thread count give the same bits at every thread count.  Each
 * block repacks op(B); at 256 rows that costs nothing measurable (bench
 * on the shakespeare-char shapes, single thread: 256-row blocks ran at
 * 77-85 GFLOP/s against 71-85 for one call; 64-row blocks lost up to 14%).
 */
#include "kernels/cpu/kernels.h"

#include <assert.h>
#include <cblas.h>

#include "kernels/cpu/team.h"

void kernels_init_threads(int n)
{
    openblas_set_num_threads(n < 1 ? 1 : n);
}

int kernels_threads(void)
{
    return openblas_get_num_threads();
}

/* One GEMM cut into fixed blocks of KERN_GEMM_BLOCK_ROWS rows of C. */
typedef struct gemm_job {
    int trans_a, trans_b, M, N, K; /* as kern_gemm's arguments */
    float alpha, beta;
    const float *A, *B;
    float *C;
    int lda, ldb, ldc;
} gemm_job;

/* Row blocks [lo, hi): one single-threaded sgemm per block, so that every
 * block is the same call whichever thread runs it. */
static void gemm_blocks(void *p, int lo, int hi)
{
    const gemm_job *j = p;
    for (int blk = lo; blk < hi; blk++) {
        int r0 = blk * KERN_GEMM_BLOCK_ROWS;
        int rows = j->M - r0 < KERN_GEMM_BLOCK_ROWS ? j->M - r0 : KERN_GEMM_BLOCK_ROWS;
        const float *A = j->trans_a ? j->A + r0 : j->A + (size_t)r0 * (size_t)j->lda;
        cblas_sgemm(CblasRowMajor, j->trans_a ? CblasTrans : CblasNoTrans,
                    j->trans_b ? CblasTrans : CblasNoTrans, rows, j->N, j->K, j->alpha, A,
                    j->lda, j->B, j->ldb, j->beta, j->C + (size_t)r0 * (size_t)j->ldc, j->ldc);
    }
}

/* Blocks per chunk below which splitting costs more than it saves: about
 * two million multiply-adds per chunk against a wake-up of tens of us. */
static int gemm_grain(int N, int K)
{
    double per_block = (double)KERN_GEMM_BLOCK_ROWS * N * (double)(K > 0 ? K : 1);
    double blocks = (double)(1 << 21) / (per_block > 1 ? per_block : 1);
    return blocks < 1 ? 1 : blocks > 1e6 ? 1000000 : (int)blocks;
}

void kern_gemm(int trans_a, int trans_b, int M, int N, int K, float alpha,
               const float *A, int lda, const float *B, int ldb, float beta,
               float *C, int ldc)
{
    assert(M >= 0 && N >= 0 && K >= 0);
    if (M == 0 || N == 0)
        return;
    gemm_job j = { trans_a, trans_b, M, N, K, alpha, beta, A, B, C, lda, ldb, ldc };
    int blocks = (M + KERN_GEMM_BLOCK_ROWS - 1) / KERN_GEMM_BLOCK_ROWS;
    kern_parallel(blocks, gemm_grain(N, K), gemm_blocks, &j);
}
