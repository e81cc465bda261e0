/*
 * adamw.cu: the optimizer step on the GPU, elementwise twin of
 * kernels/cpu/adamw.c adamw_update over fp32 master weights, fp32
 * gradients and fp32 moments, writing the bf16 copy the next forward
 * multiplies with in the same pass (one read of p, g, m, v; one write of
 * p, m, v and the bf16 copy).  The learning-rate schedule, the gradient
 * norm (zb_cuda_sum_f64 with squares) and clipping stay with the caller,
 * as on the CPU.  Workload: up to 10^9 parameters, bandwidth bound.
 *
 * The step also comes in two halves, for post-validation's speculative
 * step (runtime/backend.h adamw_params / adamw_moments): the parameter
 * half writes p and its bf16 copy from the new moments kept in registers,
 * leaving m and v; the moment half writes m and v.  Done one after the
 * other on the same gradients they give the whole step's bits.  That is
 * guaranteed, not hoped for: all three kernels compute through the same
 * two device functions below, and those spell every float operation out
 * as a rounding intrinsic (__fmul_rn, __fmaf_rn, __fdiv_rn, __fsqrt_rn,
 * __fadd_rn), which the compiler may neither contract into an FMA nor
 * reassociate.  Left to itself nvcc contracted the plain expressions
 * differently by context (ptxas fused `p - lr * q` into one FFMA); the
 * intrinsics spell out exactly the operations it chose for the whole step
 * before the split (sm_90 SASS of the old kernel, read with nvdisasm):
 *
 *   g' = g·s                  m' = fma(m, β1, (1−β1)·g')
 *   v' = fma(v, β2, g'·((1−β2)·g'))
 *   q  = fma(p, wd, (m'/bc1) / (sqrt(v'/bc2) + eps))
 *   p' = fma(−q, lr, p)
 *
 * so the whole step keeps the bits it had.
 */
#include "kernels/cuda/cuda_internal.cuh"

/* The new moments of one element: the gradient g scaled by grad_scale,
 * then m' = β1·m + (1−β1)·g', v' = β2·v + (1−β2)·g'² with the roundings of
 * the header.  Shared by the whole step and both halves. */
static __device__ __forceinline__ void adamw_moments_of(float g, float m, float v, float beta1,
                                                        float beta2, float grad_scale,
                                                        float *m_out, float *v_out)
{
    float gi = __fmul_rn(grad_scale, g);
    *m_out = __fmaf_rn(m, beta1, __fmul_rn(__fsub_rn(1.0f, beta1), gi));
    *v_out = __fmaf_rn(v, beta2, __fmul_rn(gi, __fmul_rn(__fsub_rn(1.0f, beta2), gi)));
}

/* The new parameter from the old one p and the new moments mi, vi:
 * p − lr·(m̂ / (sqrt(v̂) + eps) + wd·p) with the roundings of the header. */
static __device__ __forceinline__ float adamw_param_of(float p, float mi, float vi, float lr,
                                                       float eps, float wd, float bc1, float bc2)
{
    float mhat = __fdiv_rn(mi, bc1), vhat = __fdiv_rn(vi, bc2);
    float q = __fmaf_rn(p, wd, __fdiv_rn(mhat, __fadd_rn(__fsqrt_rn(vhat), eps)));
    return __fmaf_rn(-q, lr, p);
}

__global__ void adamw_kernel(float *p, zb_bf16 *pb, const float *g, float *m, float *v, size_t n,
                             float lr, float beta1, float beta2, float eps, float wd,
                             float grad_scale, float bc1, float bc2)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float mi, vi;
        adamw_moments_of(g[i], m[i], v[i], beta1, beta2, grad_scale, &mi, &vi);
        m[i] = mi;
        v[i] = vi;
        float pi = adamw_param_of(p[i], mi, vi, lr, eps, wd, bc1, bc2);
        p[i] = pi;
        if (pb)
            zb_st(pb, i, pi);
    }
}

/* The parameter half: adamw_kernel less the stores of m and v. */
__global__ void adamw_params_kernel(float *p, zb_bf16 *pb, const float *g, const float *m,
                                    const float *v, size_t n, float lr, float beta1, float beta2,
                                    float eps, float wd, float grad_scale, float bc1, float bc2)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float mi, vi;
        adamw_moments_of(g[i], m[i], v[i], beta1, beta2, grad_scale, &mi, &vi);
        float pi = adamw_param_of(p[i], mi, vi, lr, eps, wd, bc1, bc2);
        p[i] = pi;
        if (pb)
            zb_st(pb, i, pi);
    }
}

/* The moment half: adamw_kernel's stores of m and v alone. */
__global__ void adamw_moments_kernel(const float *g, float *m, float *v, size_t n, float beta1,
                                     float beta2, float grad_scale)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float mi, vi;
        adamw_moments_of(g[i], m[i], v[i], beta1, beta2, grad_scale, &mi, &vi);
        m[i] = mi;
        v[i] = vi;
    }
}

/* The bias corrections 1 − β^t on the host, as the CPU computes them. */
static void bias_corrections(int t, float beta1, float beta2, float *bc1, float *bc2)
{
    *bc1 = 1.0f - powf(beta1, (float)t);
    *bc2 = 1.0f - powf(beta2, (float)t);
}

extern "C" int zb_cuda_adamw_update(zb_cuda *c, float *params, zb_bf16 *params_bf16,
                                    const float *grads, float *m, float *v, size_t n, int t,
                                    float lr, float beta1, float beta2, float eps, float wd,
                                    float grad_scale, zb_err *err)
{
    if (t < 1)
        return zb_fail(err, "adamw: step %d must be >= 1", t);
    if (n == 0)
        return 0;
    float bc1, bc2;
    bias_corrections(t, beta1, beta2, &bc1, &bc2);
    adamw_kernel<<<zb_ew_grid(n), ZB_EW_THREADS, 0, c->stream>>>(
        params, params_bf16, grads, m, v, n, lr, beta1, beta2, eps, wd, grad_scale, bc1, bc2);
    return ZB_CUDA_LAUNCHED(err, "adamw_update");
}

extern "C" int zb_cuda_adamw_update_params(zb_cuda *c, float *params, zb_bf16 *params_bf16,
                                           const float *grads, const float *m, const float *v,
                                           size_t n, int t, float lr, float beta1, float beta2,
                                           float eps, float wd, float grad_scale, zb_err *err)
{
    if (t < 1)
        return zb_fail(err, "adamw: step %d must be >= 1", t);
    if (n == 0)
        return 0;
    float bc1, bc2;
    bias_corrections(t, beta1, beta2, &bc1, &bc2);
    adamw_params_kernel<<<zb_ew_grid(n), ZB_EW_THREADS, 0, c->stream>>>(
        params, params_bf16, grads, m, v, n, lr, beta1, beta2, eps, wd, grad_scale, bc1, bc2);
    return ZB_CUDA_LAUNCHED(err, "adamw_update_params");
}

extern "C" int zb_cuda_adamw_update_moments(zb_cuda *c, const float *grads, float *m, float *v,
                                            size_t n, float beta1, float beta2, float grad_scale,
                                            zb_err *err)
{
    if (n == 0)
        return 0;
    adamw_moments_kernel<<<zb_ew_grid(n), ZB_EW_THREADS, 0, c->stream>>>(grads, m, v, n, beta1,
                                                                         beta2, grad_scale);
    return ZB_CUDA_LAUNCHED(err, "adamw_update_moments");
}
