/*
 * kernels.c: BLAS thread setup and the one GEMM entry point of the CPU
 * kernels (see kernels.h for why everything funnels through here).
 *
 * Row-major cblas_sgemm calls; OpenBLAS picks its kernel for this CPU at
 * load time (DYNAMIC_ARCH), so results are bit-reproducible on one machine
 * and one thread count, which is all the runtime's determinism needs.
 *
 * THE LIBRARY IS LOADED ON FIRST USE (dlopen of the soname the build chose
 * with meson -Dblas=openblas|blis), not linked: OpenBLAS's constructor
 * alone (thread pool, buffers, CPU probe) cost about 4.7 ms of CPU per
 * process, and the commands that never multiply a matrix (gen, simulate,
 * search, render) paid it on every start (bench/README.md, "issue 28").
 * The CBLAS entry points are called through pointers from dlsym.
 *
 * Every product is cut into blocks of at most KERN_GEMM_BLOCK_ROWS rows of
 * C, as even as possible (kern_gemm_block_rows: 384 rows are two blocks of
 * 192, so that two threads share a weight gradient's product evenly), one
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
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/team.h"

#ifndef ZB_BLAS_SONAME
#define ZB_BLAS_SONAME "libopenblas.so.0"
#endif
#ifndef ZB_BLAS_BLIS
#define ZB_BLAS_BLIS 0
#endif

/* The CBLAS constants we pass (cblas.h's values, the same in every CBLAS). */
enum { ZB_ROW_MAJOR = 101, ZB_NO_TRANS = 111, ZB_TRANS = 112 };

typedef void (*sgemm_fn)(int order, int ta, int tb, int M, int N, int K, float alpha,
                         const float *A, int lda, const float *B, int ldb, float beta,
                         float *C, int ldc);
typedef void (*sgemv_fn)(int order, int ta, int M, int N, float alpha, const float *A, int lda,
                         const float *x, int incx, float beta, float *y, int incy);

/* The loaded library: its two CBLAS entry points and its thread control.
 * Written once under blas_mu, read without a lock after blas_ready (an
 * acquire load) says it is complete. */
static struct {
    void *handle;                    /* dlopen of ZB_BLAS_SONAME */
    sgemm_fn sgemm;
    sgemv_fn sgemv;
    void (*set_threads)(int);        /* openblas_set_num_threads */
    int (*get_threads)(void);        /* openblas_get_num_threads */
    void (*blis_set_threads)(long);  /* bli_thread_set_num_threads (dim_t) */
    long (*blis_get_threads)(void);  /* bli_thread_get_num_threads */
    char desc[512];                  /* what kernels_blas_describe returns */
    char error[320];                 /* why loading failed, or "" */
} blas;
static int blas_ready;               /* 1 loaded, -1 failed, 0 not tried */
static pthread_mutex_t blas_mu = PTHREAD_MUTEX_INITIALIZER;

/* Loads the library and fills `blas`.  Called under blas_mu. */
static int blas_open(void)
{
    /* OpenBLAS starts its thread pool in its constructor with as many
     * threads as cores, unless told otherwise; the kernels run it
     * single-threaded (determinism contract), so say so before it loads
     * (a value the user set is kept).  BLIS starts single-threaded. */
    if (!ZB_BLAS_BLIS)
        setenv("OPENBLAS_NUM_THREADS", "1", 0);
    void *h = dlopen(ZB_BLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        snprintf(blas.error, sizeof blas.error,
                 "cannot load the BLAS library %s that this zbsched was built for (%s); "
                 "install its Debian package (%s)", ZB_BLAS_SONAME, why ? why : "unknown error",
                 ZB_BLAS_BLIS ? "libblis4" : "libopenblas0");
        return -1;
    }
    blas.handle = h;
    blas.sgemm = (sgemm_fn)dlsym(h, "cblas_sgemm");
    blas.sgemv = (sgemv_fn)dlsym(h, "cblas_sgemv");
    if (!blas.sgemm || !blas.sgemv) {
        snprintf(blas.error, sizeof blas.error, "%s has no cblas_sgemm / cblas_sgemv",
                 ZB_BLAS_SONAME);
        return -1;
    }
    /* the file behind the soname: Debian's alternatives point it at one of
     * several builds (openblas-pthread, openblas-openmp, blis-openmp...) */
    char where[PATH_MAX] = "";
    Dl_info info;
    if (dladdr((void *)blas.sgemm, &info) && info.dli_fname) {
        char *real = realpath(info.dli_fname, NULL);
        snprintf(where, sizeof where, "%s", real ? real : info.dli_fname);
        free(real);
    }
    if (ZB_BLAS_BLIS) {
        blas.blis_set_threads = (void (*)(long))dlsym(h, "bli_thread_set_num_threads");
        blas.blis_get_threads = (long (*)(void))dlsym(h, "bli_thread_get_num_threads");
        const char *(*version)(void) = (const char *(*)(void))dlsym(h, "bli_info_get_version_str");
        int (*arch_id)(void) = (int (*)(void))dlsym(h, "bli_arch_query_id");
        const char *(*arch_name)(int) = (const char *(*)(int))dlsym(h, "bli_arch_string");
        snprintf(blas.desc, sizeof blas.desc, "BLIS %s, kernels for %s (%.300s)",
                 version ? version() : "?", arch_id && arch_name ? arch_name(arch_id()) : "?",
                 where);
    } else {
        blas.set_threads = (void (*)(int))dlsym(h, "openblas_set_num_threads");
        blas.get_threads = (int (*)(void))dlsym(h, "openblas_get_num_threads");
        char *(*config)(void) = (char *(*)(void))dlsym(h, "openblas_get_config");
        char *(*core)(void) = (char *(*)(void))dlsym(h, "openblas_get_corename");
        snprintf(blas.desc, sizeof blas.desc, "%.150s, kernels for %.40s (%.300s)",
                 config ? config() : "OpenBLAS", core ? core() : "?", where);
    }
    return 0;
}

int kernels_blas_load(zb_err *err)
{
    int ready = __atomic_load_n(&blas_ready, __ATOMIC_ACQUIRE);
    if (ready == 0) {
        pthread_mutex_lock(&blas_mu);
        ready = blas_ready;
        if (ready == 0) {
            ready = blas_open() == 0 ? 1 : -1;
            if (ready == 1 && blas.set_threads)
                blas.set_threads(1); /* what a caller gets before kernels_init_threads */
            __atomic_store_n(&blas_ready, ready, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&blas_mu);
    }
    if (ready < 0)
        return zb_fail(err, "%s", blas.error);
    return 0;
}

/* The loaded library, or abort: a product cannot go on without it, and
 * the programs call kernels_blas_load first, to report the error. */
static void blas_need(void)
{
    if (__atomic_load_n(&blas_ready, __ATOMIC_ACQUIRE) == 1)
        return;
    zb_err err = { "" };
    if (kernels_blas_load(&err) != 0) {
        fprintf(stderr, "zb_kernels: %s\n", err.msg);
        abort();
    }
}

const char *kernels_blas_describe(void)
{
    return __atomic_load_n(&blas_ready, __ATOMIC_ACQUIRE) == 1 ? blas.desc : NULL;
}

void kernels_init_threads(int n)
{
    blas_need();
    n = n < 1 ? 1 : n;
    if (blas.set_threads)
        blas.set_threads(n);
    else if (blas.blis_set_threads)
        blas.blis_set_threads(n);
}

int kernels_threads(void)
{
    blas_need();
    if (blas.get_threads)
        return blas.get_threads();
    if (blas.blis_get_threads) {
        long n = blas.blis_get_threads();
        return n < 1 ? 1 : (int)n;
    }
    return 1;
}

/* One GEMM cut into fixed blocks of KERN_GEMM_BLOCK_ROWS rows of C. */
typedef struct gemm_job {
    int trans_a, trans_b, M, N, K; /* as kern_gemm's arguments */
    float alpha, beta;
    const float *A, *B;
    float *C;
    int lda, ldb, ldc;
    int block_rows; /* rows of C per sgemm call (kern_gemm_block_rows) */
} gemm_job;

/* Row blocks [lo, hi): one single-threaded sgemm per block, so that every
 * block is the same call whichever thread runs it. */
static void gemm_blocks(void *p, int lo, int hi)
{
    const gemm_job *j = p;
    for (int blk = lo; blk < hi; blk++) {
        int r0 = blk * j->block_rows;
        int rows = j->M - r0 < j->block_rows ? j->M - r0 : j->block_rows;
        const float *A = j->trans_a ? j->A + r0 : j->A + (size_t)r0 * (size_t)j->lda;
        blas.sgemm(ZB_ROW_MAJOR, j->trans_a ? ZB_TRANS : ZB_NO_TRANS,
                   j->trans_b ? ZB_TRANS : ZB_NO_TRANS, rows, j->N, j->K, j->alpha, A, j->lda,
                   j->B, j->ldb, j->beta, j->C + (size_t)r0 * (size_t)j->ldc, j->ldc);
    }
}

int kern_gemm_block_rows(int M)
{
    int blocks = (M + KERN_GEMM_BLOCK_ROWS - 1) / KERN_GEMM_BLOCK_ROWS;
    return blocks > 0 ? (M + blocks - 1) / blocks : 1;
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
    blas_need();
    int blocks = (M + KERN_GEMM_BLOCK_ROWS - 1) / KERN_GEMM_BLOCK_ROWS;
    gemm_job j = { trans_a, trans_b, M, N, K, alpha, beta, A, B, C, lda, ldb, ldc,
                   kern_gemm_block_rows(M) };
    kern_parallel(blocks, gemm_grain(N, K), gemm_blocks, &j);
}

void kern_matvec(float *y, const float *x, const float *W, int in, int out)
{
    assert(in >= 0 && out >= 0);
    if (in == 0 || out == 0)
        return;
    blas_need();
    /* y = Wᵀ·x with W row-major [in, out] */
    blas.sgemv(ZB_ROW_MAJOR, ZB_TRANS, in, out, 1.0f, W, out, x, 1, 0.0f, y, 1);
}
