/*
 * matmul.cu: the three products of a linear layer through cuBLASLt, split
 * as the zero-bubble schedules need them (llm.c's matmul_cublaslt style):
 *
 *   F  Y  = X·W (+ R)      bf16 out; R, the residual, enters as C with beta 1
 *   B  dX = dY·Wᵀ (+ dX)   bf16 out, written (or accumulated, beta 1)
 *   W  dW += Xᵀ·dY         fp32 out, always accumulated (beta 1)
 *
 * all with bf16 inputs and fp32 accumulation (CUBLAS_COMPUTE_32F).
 *
 * Layout: our matrices are row-major, cuBLASLt's are column-major, and a
 * row-major [r, c] buffer IS a column-major [c, r] matrix with ld = c.  So
 * row-major Y = X·W is column-major Yᵀ = Wᵀ·Xᵀ with no transposes at all:
 * m = out, n = N, k = in, A = W (out×in, ld out), B = X (in×N, ld in).  B
 * transposes A (the weight), W transposes B (the input); see each call.
 *
 * Descriptors are built per call and the first heuristic algorithm taken:
 * a few microseconds, negligible next to the products of the layers this
 * runs (the benchmark's smallest GEMM is 6144×2304×2304).
 */
#include "kernels/cuda/cuda_internal.cuh"

/* The fallback when cuBLASLt offers no algorithm (its tensor-core kernels
 * want leading dimensions that are multiples of 8; a 65-character
 * vocabulary is not): cublasGemmEx with the same types, which takes any
 * leading dimension.  It computes in place, so an out-of-place C (the
 * residual) is first copied into D. */
static int gemm_ex(zb_cuda *c, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                   const void *A, int lda, const void *B, int ldb, void *D, cudaDataType_t dtype,
                   int ldd, const void *C, float beta, const char *what, zb_err *err)
{
    if (C && C != D) {
        size_t esz = dtype == CUDA_R_32F ? 4 : 2;
        if (zb_cuda_status(cudaMemcpyAsync(D, C, (size_t)ldd * n * esz, cudaMemcpyDeviceToDevice,
                                           c->stream), what, err) != 0)
            return -1;
    }
    float alpha = 1.0f;
    return zb_cublas_status(cublasGemmEx(c->blas, ta, tb, m, n, k, &alpha, A, CUDA_R_16BF, lda, B,
                                         CUDA_R_16BF, ldb, &beta, D, dtype, ldd,
                                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                            what, err);
}

/* D[m,n] = alpha·op(A)·op(B) + beta·C, column-major, C and D the same
 * buffer and type (ctype), A and B bf16. */
static int lt_gemm(zb_cuda *c, int transa, int transb, int m, int n, int k, const void *A,
                   int lda, const void *B, int ldb, void *D, cudaDataType_t dtype, int ldd,
                   const void *C, float beta, const char *what, zb_err *err)
{
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL, ld = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasOperation_t ta = transa ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t tb = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    float alpha = 1.0f;
    int rc = -1;
    if (zb_cublas_status(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), what,
                         err) != 0)
        return -1;
    if (zb_cublas_status(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta,
                                                        sizeof ta), what, err) != 0 ||
        zb_cublas_status(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb,
                                                        sizeof tb), what, err) != 0)
        goto out;
    /* stored shapes: op(A) is m×k, so A is k×m when transposed */
    if (zb_cublas_status(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, transa ? k : m,
                                                    transa ? m : k, lda), what, err) != 0 ||
        zb_cublas_status(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, transb ? n : k,
                                                    transb ? k : n, ldb), what, err) != 0 ||
        zb_cublas_status(cublasLtMatrixLayoutCreate(&lc, dtype, m, n, ldd), what, err) != 0 ||
        zb_cublas_status(cublasLtMatrixLayoutCreate(&ld, dtype, m, n, ldd), what, err) != 0)
        goto out;
    if (zb_cublas_status(cublasLtMatmulPreferenceCreate(&pref), what, err) != 0 ||
        zb_cublas_status(cublasLtMatmulPreferenceSetAttribute(
                             pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                             &c->workspace_bytes, sizeof c->workspace_bytes), what, err) != 0)
        goto out;
    /* tell the heuristic how aligned the buffers really are (it assumes 256
     * bytes otherwise; stage tensors sit at arbitrary offsets) */
    {
        static const cublasLtMatmulPreferenceAttributes_t which[4] = {
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
        };
        const void *ptrs[4] = { A, B, C ? C : D, D };
        for (int i = 0; i < 4; i++) {
            uint32_t al = 256;
            while (al > 1 && ((uintptr_t)ptrs[i] % al) != 0)
                al /= 2;
            if (zb_cublas_status(cublasLtMatmulPreferenceSetAttribute(pref, which[i], &al,
                                                                      sizeof al), what, err) != 0)
                goto out;
        }
    }
    {
        cublasLtMatmulHeuristicResult_t heur;
        int found = 0;
        cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(c->lt, op, la, lb, lc, ld, pref, 1,
                                                           &heur, &found);
        if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
            rc = gemm_ex(c, ta, tb, m, n, k, A, lda, B, ldb, D, dtype, ldd, C, beta, what, err);
            goto out;
        }
        rc = zb_cublas_status(cublasLtMatmul(c->lt, op, &alpha, A, la, B, lb, &beta,
                                             C ? C : D, lc, D, ld, &heur.algo, c->workspace,
                                             c->workspace_bytes, c->stream), what, err);
    }
out:
    if (pref)
        cublasLtMatmulPreferenceDestroy(pref);
    if (ld)
        cublasLtMatrixLayoutDestroy(ld);
    if (lc)
        cublasLtMatrixLayoutDestroy(lc);
    if (lb)
        cublasLtMatrixLayoutDestroy(lb);
    if (la)
        cublasLtMatrixLayoutDestroy(la);
    cublasLtMatmulDescDestroy(op);
    return rc;
}

extern "C" int zb_cuda_matmul_forward(zb_cuda *c, zb_bf16 *Y, const zb_bf16 *X, const zb_bf16 *W,
                                      const zb_bf16 *R, int N, int in, int out, zb_err *err)
{
    /* Yᵀ(out×N) = Wᵀ(out×in, the W buffer) · Xᵀ(in×N, the X buffer) [+ Rᵀ] */
    return lt_gemm(c, 0, 0, out, N, in, W, out, X, in, Y, CUDA_R_16BF, out, R, R ? 1.0f : 0.0f,
                   "matmul_forward", err);
}

extern "C" int zb_cuda_matmul_backward_b(zb_cuda *c, zb_bf16 *dX, const zb_bf16 *dY,
                                         const zb_bf16 *W, int N, int in, int out,
                                         int accumulate, zb_err *err)
{
    /* dXᵀ(in×N) = W(in×out) · dYᵀ(out×N); W is the W buffer (out×in) transposed */
    return lt_gemm(c, 1, 0, in, N, out, W, out, dY, out, dX, CUDA_R_16BF, in, NULL,
                   accumulate ? 1.0f : 0.0f, "matmul_backward_b", err);
}

extern "C" int zb_cuda_matmul_backward_w(zb_cuda *c, float *dW, const zb_bf16 *X,
                                         const zb_bf16 *dY, int N, int in, int out, zb_err *err)
{
    /* dWᵀ(out×in) += dYᵀ(out×N, the dY buffer) · X(N×in), X = the X buffer (in×N) transposed */
    return lt_gemm(c, 0, 1, out, in, N, dY, out, X, in, dW, CUDA_R_32F, out, NULL, 1.0f,
                   "matmul_backward_w", err);
}
