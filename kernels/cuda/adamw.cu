/*
 * adamw.cu: the optimizer step on the GPU, elementwise twin of
 * kernels/cpu/adamw.c adamw_update over fp32 master weights, fp32
 * gradients and fp32 moments, writing the bf16 copy the next forward
 * multiplies with in the same pass (one read of p, g, m, v; one write of
 * p, m, v and the bf16 copy).  The learning-rate schedule, the gradient
 * norm (zb_cuda_sum_f64 with squares) and clipping stay with the caller,
 * as on the CPU.  Workload: up to 10^9 parameters, bandwidth bound.
 */
#include "kernels/cuda/cuda_internal.cuh"

__global__ void adamw_kernel(float *p, zb_bf16 *pb, const float *g, float *m, float *v, size_t n,
                             float lr, float beta1, float beta2, float eps, float wd,
                             float grad_scale, float bc1, float bc2)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float gi = grad_scale * g[i];
        float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi / bc1, vhat = vi / bc2;
        float pi = p[i];
        pi -= lr * (mhat / (sqrtf(vhat) + eps) + wd * pi);
        p[i] = pi;
        if (pb)
            zb_st(pb, i, pi);
    }
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
    /* bias corrections on the host, as the CPU computes them */
    float bc1 = 1.0f - powf(beta1, (float)t);
    float bc2 = 1.0f - powf(beta2, (float)t);
    adamw_kernel<<<zb_ew_grid(n), ZB_EW_THREADS, 0, c->stream>>>(
        params, params_bf16, grads, m, v, n, lr, beta1, beta2, eps, wd, grad_scale, bc1, bc2);
    return ZB_CUDA_LAUNCHED(err, "adamw_update");
}
