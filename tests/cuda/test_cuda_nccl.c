/*
 * test_cuda_nccl.c: the NCCL transport on one GPU: a one-rank communicator
 * through the TCP bootstrap (rank 0 of 1 serves nobody), one grouped
 * exchange that sends a buffer to itself and receives it into another
 * (the same call shape a pipeline step uses between neighbours), and a
 * one-rank all-reduce (identity).  Skips (77) without a device or without
 * NCCL in the build.
 */
#include <string.h>

#include "kernels/cuda/gpu_transport.h"
#include "tests/cuda/cuda_check.h"

int main(void)
{
    cc_require_device();
    if (!gpu_nccl_available()) {
        printf("built without NCCL: skipped\n");
        return 77;
    }
    unsetenv("NCCL_COMM_ID");
    setenv("ZB_MASTER_PORT", "29611", 1);
    gpu_rank_info r = { 0, 1, 0 };
    gpu_comm *comm = NULL;
    zb_cuda *c = NULL;
    CC_OK(zb_cuda_create(0, &c, err));
    CC_OK(gpu_comm_create(&r, 30, &comm, err));
    size_t n = 1 << 20;
    float *h = malloc(n * 4), *back = malloc(n * 4);
    for (size_t i = 0; i < n; i++)
        h[i] = (float)i * 0.5f - 3.0f;
    float *src = NULL, *dst = NULL;
    CC_OK(zb_cuda_alloc((void **)&src, n * 4, err));
    CC_OK(zb_cuda_alloc((void **)&dst, n * 4, err));
    CC_OK(zb_cuda_upload(c, src, h, n * 4, err));
    CC_OK(zb_cuda_zero(c, dst, n * 4, err));
    gpu_msg send = { 0, src, n * 4 }, recv = { 0, dst, n * 4 };
    CC_OK(gpu_comm_exchange(comm, c, &send, 1, &recv, 1, err));
    CC_OK(zb_cuda_download(c, back, dst, n * 4, err));
    cc_true("grouped send/recv to self delivers the buffer", memcmp(back, h, n * 4) == 0);
    CC_OK(gpu_comm_allreduce_sum(comm, c, dst, n, err));
    CC_OK(zb_cuda_download(c, back, dst, n * 4, err));
    cc_true("one-rank all-reduce is the identity", memcmp(back, h, n * 4) == 0);
    gpu_comm_free(comm);
    zb_cuda_release(src);
    zb_cuda_release(dst);
    zb_cuda_free(c);
    free(h);
    free(back);
    return cc_summary();
}
