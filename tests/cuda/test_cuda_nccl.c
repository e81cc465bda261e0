/*
 * test_cuda_nccl.c: the NCCL transport on one GPU: a one-rank communicator
 * through the TCP bootstrap (rank 0 of 1 serves nobody), one grouped
 * exchange that sends a buffer to itself and receives it into another
 * (the same call shape a pipeline step uses between neighbours), one-rank
 * all-reduces (identity), the host collectives of the GPU ranks (a
 * broadcast and a minimum: identities on one rank), and the one executor
 * as a GPU rank runs it (one_device, backend_cuda_create_rank, the NCCL
 * transport: a one-device schedule, so no link) against the CPU trainer.
 * Skips (77) without a device or without NCCL in the build.  Two ranks
 * need two GPUs (NCCL refuses two ranks on one): test_cuda_ranks.c.
 */
#include <math.h>
#include <string.h>

#include "kernels/cpu/kernels.h"
#include "kernels/cuda/backend_cuda.h"
#include "kernels/cuda/nccl_transport.h"
#include "kernels/cuda/gpu_transport.h"
#include "runtime/data.h"
#include "runtime/trainer.h"
#include "schedules/gen.h"
#include "src/model.h"
#include "tests/cuda/cuda_check.h"

/* The rank backend of device 0 on GPU 0. */
static int make_rank0(void *ctx, int n_devices, zb_backend **out, zb_err *e)
{
    (void)ctx;
    return backend_cuda_create_rank(0, n_devices, 0, out, e);
}

/* A GPU rank's executor (world 1, schedule p = 1) against the CPU trainer. */
static void test_ranked(gpu_comm *comm)
{
    zb_model m;
    CC_OK(model_preset("tiny", &m, err));
    size_t len = 40000;
    char *text = malloc(len);
    uint64_t st = 777;
    for (size_t i = 0; i < len; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        text[i] = (char)(i % 9 == 8 ? ' ' : 'a' + (int)((st >> 33) % 20));
    }
    zb_data *d;
    CC_OK(data_from_text(text, len, m.seq_len, &d, err));
    gen_params gp;
    gen_params_default(&gp);
    gp.stages = 1;
    gp.microbatches = 3;
    sched_t *s;
    CC_OK(gen_1f1b(&gp, &s, err));
    trainer_opts o;
    trainer_opts_default(&o);
    trainer *ct, *gt;
    kernels_init_threads(1);
    CC_OK(trainer_create(s, &m, d, &o, &ct, err));
    zb_nccl_cfg cfg = { .comm = comm, .gpu = 0 };
    cfg.act_elems = (size_t)m.micro_batch * (size_t)m.seq_len * (size_t)m.d_model;
    trainer_opts go = o;
    go.one_device = 1;
    go.device = 0;
    go.make_backend = make_rank0;
    go.make_transport = nccl_transport_make;
    go.make_transport_ctx = &cfg;
    go.threads = 1;
    CC_OK(trainer_create(s, &m, d, &go, &gt, err));
    for (int i = 0; i < 3; i++) {
        double lc, lg;
        char name[128];
        CC_OK(trainer_step(ct, &lc, err));
        CC_OK(trainer_step(gt, &lg, err));
        CC_OK(gpu_comm_bcast_host(comm, &lg, sizeof lg, 0, err));
        snprintf(name, sizeof name, "ranked executor step %d loss %.5f vs CPU %.5f", i + 1, lg,
                 lc);
        cc_true(name, fabs(lg - lc) < 1e-2 * fabs(lc));
    }
    trainer_free(gt);
    trainer_free(ct);
    sched_free(s);
    data_free(d);
    free(text);
}

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
    int v = 5;
    CC_OK(gpu_comm_min_int(comm, &v, err));
    cc_true("one-rank minimum is the identity", v == 5);
    test_ranked(comm);
    gpu_comm_free(comm);
    zb_cuda_release(src);
    zb_cuda_release(dst);
    zb_cuda_free(c);
    free(h);
    free(back);
    return cc_summary();
}
