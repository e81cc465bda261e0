/*
 * gpu_trainer.c: the multi-GPU NCCL executor (gpu_trainer.h): one
 * schedule device per process and GPU, NCCL between them.  A one-GPU run
 * is no longer this file's: it is runtime/trainer.c over the CUDA backend
 * (backend_cuda.c).  What remains here is only what the ranks need until
 * NCCL becomes a transport of the one executor (runtime/transport.h).
 *
 * Per stage s and micro-batch j the trainer owns: a gpu_saved (activations
 * between F, B and W), an input buffer in[s][j] (s > 0) and output buffer
 * out[s][j] (s < S-1) for activations, gin[s][j] / gout[s][j] for
 * gradients, and two fences: after F (consumer: stage s+1) and after B
 * (consumer: stage s-1).  Buffers are B·T·d bf16 and allocated once.
 */
#include "kernels/cuda/gpu_trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>

#include "kernels/cpu/llama.h"
#include "kernels/cuda/gpu_stage.h"
#include "kernels/cuda/gpu_transport.h"
#include "kernels/cuda/zb_cuda.h"
#include "runtime/rng.h"
#include "runtime/split.h"

/* One virtual stage. */
typedef struct gstage {
    llama_stage layout;  /* CPU description (tensors, offsets) */
    gpu_stage *st;       /* device side */
    int device;          /* schedule device (index into ctx) */
    gpu_saved **saved;   /* [m] */
    zb_bf16 **in, **out; /* [m] activation receive / send buffers (NULL when unused) */
    zb_bf16 **gin, **gout; /* [m] gradient receive / send buffers */
    gpu_fence **f_fwd;   /* [m] signalled after F (s < S-1) */
    gpu_fence **f_bwd;   /* [m] signalled after B (s > 0) */
    int adam_t;          /* AdamW steps taken */
} gstage;

struct gpu_trainer {
    sched_t *sched;       /* owned copy */
    zb_model model;       /* effective model */
    const zb_data *data;  /* borrowed loader */
    trainer_opts opts;    /* copy */
    int cuda_device;      /* GPU index */
    int S, m, p, batch;   /* stages, micro-batches, devices, sequences per micro-batch */
    zb_cuda **ctx;        /* [p] one context (stream) per schedule device */
    gstage *st;           /* [S] */
    int32_t *x, *y;       /* host [m · B·T] tokens and targets of the step */
    double *loss_dev;     /* device [m] per-micro-batch loss sums */
    zb_rng rng;           /* data generator, seeded as the CPU trainer's */
    long step;            /* optimizer steps taken */
    double last_step_s;   /* wall seconds of the last step */
    size_t static_bytes;  /* device bytes allocated up front */
    gpu_comm *comm;       /* ranked variant: the communicator (borrowed); NULL on one GPU */
    int my_dev;           /* ranked variant: the schedule device this rank runs */
    double *scal_dev;     /* ranked variant: device double for the norm all-reduce */
};

/* 1 when stage s runs in this process. */
static int is_local(const gpu_trainer *t, int s)
{
    return !t->comm || t->st[s].device == t->my_dev;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Allocates m device buffers of `bytes` (or leaves the array NULL). */
static int alloc_bufs(zb_bf16 ***arr, int m, size_t bytes, size_t *total, zb_err *err)
{
    *arr = calloc((size_t)m, sizeof **arr);
    if (!*arr)
        return zb_fail(err, "out of memory");
    for (int j = 0; j < m; j++) {
        if (zb_cuda_alloc((void **)&(*arr)[j], bytes, err) != 0)
            return -1;
        *total += bytes;
    }
    return 0;
}

static void free_bufs(zb_bf16 **arr, int m)
{
    if (!arr)
        return;
    for (int j = 0; j < m; j++)
        zb_cuda_release(arr[j]);
    free(arr);
}

static int alloc_fences(gpu_fence ***arr, int m, zb_err *err)
{
    *arr = calloc((size_t)m, sizeof **arr);
    if (!*arr)
        return zb_fail(err, "out of memory");
    for (int j = 0; j < m; j++)
        if (gpu_fence_new(&(*arr)[j], err) != 0)
            return -1;
    return 0;
}

static void free_fences(gpu_fence **arr, int m)
{
    if (!arr)
        return;
    for (int j = 0; j < m; j++)
        gpu_fence_free(arr[j]);
    free(arr);
}

void gpu_trainer_free(gpu_trainer *t)
{
    if (!t)
        return;
    for (int i = 0; t->ctx && i < t->p; i++)
        if (t->ctx[i])
            zb_cuda_sync(t->ctx[i], NULL);
    for (int s = 0; t->st && s < t->S; s++) {
        gstage *g = &t->st[s];
        for (int j = 0; g->saved && j < t->m; j++)
            gpu_saved_free(g->saved[j]);
        free(g->saved);
        free_bufs(g->in, t->m);
        free_bufs(g->out, t->m);
        free_bufs(g->gin, t->m);
        free_bufs(g->gout, t->m);
        free_fences(g->f_fwd, t->m);
        free_fences(g->f_bwd, t->m);
        gpu_stage_free(g->st);
        llama_stage_free(&g->layout);
    }
    free(t->st);
    zb_cuda_release(t->loss_dev);
    zb_cuda_release(t->scal_dev);
    for (int i = 0; t->ctx && i < t->p; i++)
        zb_cuda_free(t->ctx[i]);
    free(t->ctx);
    free(t->x);
    free(t->y);
    sched_free(t->sched);
    free(t);
}

/* Both variants: comm NULL = every device on CUDA device `device`;
 * otherwise only device rk->rank, on CUDA device rk->local_rank. */
static int create_common(const sched_t *s, const zb_model *m, const zb_data *d,
                         const trainer_opts *opts, int device, const gpu_rank_info *rk,
                         gpu_comm *comm, gpu_trainer **out, zb_err *err)
{
    if (d->ctx != m->seq_len)
        return zb_fail(err, "the loader's context %d differs from the model's seq_len %d", d->ctx,
                       m->seq_len);
    gpu_trainer *t = calloc(1, sizeof *t);
    if (!t)
        return zb_fail(err, "out of memory");
    t->model = *m;
    t->model.vocab = d->vocab;
    if (opts->batch_size > 0)
        t->model.micro_batch = opts->batch_size;
    t->data = d;
    t->opts = *opts;
    t->cuda_device = comm ? rk->local_rank : device;
    t->comm = comm;
    t->my_dev = comm ? rk->rank : -1;
    t->S = s->n_stages;
    t->m = s->n_micro;
    t->p = s->n_devices;
    t->batch = t->model.micro_batch;
    if (t->batch <= 0) {
        int b = t->batch;
        free(t);
        return zb_fail(err, "the batch size must be positive, got %d", b);
    }
    size_t N = (size_t)t->batch * t->model.seq_len, act = N * (size_t)t->model.d_model * 2;
    int *first = malloc(sizeof *first * (size_t)(t->S + 1));
    t->sched = sched_clone(s);
    t->ctx = calloc((size_t)t->p, sizeof *t->ctx);
    t->st = calloc((size_t)t->S, sizeof *t->st);
    t->x = malloc(sizeof *t->x * N * (size_t)t->m);
    t->y = malloc(sizeof *t->y * N * (size_t)t->m);
    if (!first || !t->sched || !t->ctx || !t->st || !t->x || !t->y) {
        free(first);
        gpu_trainer_free(t);
        return zb_fail(err, "out of memory");
    }
    if (split_layers(t->model.n_layers, t->S, first, err) != 0)
        goto fail;
    for (int i = 0; i < t->p; i++)
        if ((!comm || i == t->my_dev) && zb_cuda_create(t->cuda_device, &t->ctx[i], err) != 0)
            goto fail;
    device = t->cuda_device;
    /* keep freed activations in the pool between steps instead of handing
     * them back to the driver at every synchronisation */
    {
        cudaMemPool_t pool;
        uint64_t keep = UINT64_MAX, zero = 0;
        if (cudaDeviceGetDefaultMemPool(&pool, device) == cudaSuccess) {
            cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
            cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero);
        }
        cudaGetLastError();
    }
    if (zb_cuda_alloc((void **)&t->loss_dev, sizeof(double) * (size_t)t->m, err) != 0 ||
        (comm && zb_cuda_alloc((void **)&t->scal_dev, sizeof(double), err) != 0))
        goto fail;
    for (int s_ = 0; s_ < t->S; s_++) {
        gstage *g = &t->st[s_];
        g->device = s->stage_device[s_];
        if (llama_stage_init(&g->layout, &t->model, first[s_], first[s_ + 1], s_ == 0,
                             s_ == t->S - 1, err) != 0) {
            zb_wrap(err, "stage %d: ", s_);
            goto fail;
        }
        if (!is_local(t, s_))
            continue; /* another rank holds it */
        size_t n = llama_stage_num_params(&g->layout);
        float *params = malloc(sizeof(float) * n);
        if (!params) {
            zb_fail(err, "out of memory for stage %d's parameters", s_);
            goto fail;
        }
        llama_stage_init_params(&g->layout, params, opts->seed);
        int rc = gpu_stage_create(t->ctx[g->device], &g->layout, &g->st, err);
        if (rc == 0)
            rc = gpu_stage_upload(g->st, params, err);
        free(params);
        if (rc != 0)
            goto fail;
        t->static_bytes += gpu_stage_static_bytes(g->st);
        g->saved = calloc((size_t)t->m, sizeof *g->saved);
        if (!g->saved) {
            zb_fail(err, "out of memory");
            goto fail;
        }
        for (int j = 0; j < t->m; j++)
            if (!(g->saved[j] = gpu_saved_new(g->st, t->batch))) {
                zb_fail(err, "out of memory for stage %d's saved state", s_);
                goto fail;
            }
        if ((s_ > 0 && (alloc_bufs(&g->in, t->m, act, &t->static_bytes, err) ||
                        alloc_bufs(&g->gout, t->m, act, &t->static_bytes, err) ||
                        alloc_fences(&g->f_bwd, t->m, err))) ||
            (s_ < t->S - 1 && (alloc_bufs(&g->out, t->m, act, &t->static_bytes, err) ||
                               alloc_bufs(&g->gin, t->m, act, &t->static_bytes, err) ||
                               alloc_fences(&g->f_fwd, t->m, err))))
            goto fail;
    }
    free(first);
    rng_seed(&t->rng, opts->seed, 0x5eed0000ULL + opts->data_stream);
    *out = t;
    return 0;
fail:
    free(first);
    gpu_trainer_free(t);
    return -1;
}

/* The micro-batch order in which stage `stage` runs ops of the given
 * direction (F; or B/BW) on its device, into order[m]. */
static void stage_order(const sched_t *s, int stage, int backward, int *order)
{
    const sched_lane *lane = &s->dev[s->stage_device[stage]];
    int n = 0;
    for (int k = 0; k < lane->n_ops; k++) {
        sched_op op = lane->ops[k];
        int is_b = op.kind == OP_B || op.kind == OP_BW;
        if (op.stage == stage && (backward ? is_b : op.kind == OP_F) && n < s->n_micro)
            order[n++] = op.mb;
    }
}

/* NCCL matches the sends and receives between two ranks purely by order
 * (no tags).  The ranked executor is therefore correct only when every
 * cross-rank boundary sends in the order the other side receives: the
 * producer stage's F order equals the consumer stage's F order, and
 * likewise for B.  Plain pipelines (1F1B, GPipe, ZB-H1/H2) satisfy this;
 * schedules that mix two boundaries on one pair of ranks in different
 * orders (some V / interleaved shapes) are refused rather than silently
 * mismatched. */
int gpu_trainer_check_ranked(const sched_t *s, zb_err *err)
{
    int *a = malloc(sizeof(int) * (size_t)s->n_micro * 2);
    if (!a)
        return zb_fail(err, "out of memory");
    int *b = a + s->n_micro;
    for (int st = 0; st + 1 < s->n_stages; st++) {
        if (s->stage_device[st] == s->stage_device[st + 1])
            continue;
        for (int dir = 0; dir < 2; dir++) {
            stage_order(s, st, dir, a);
            stage_order(s, st + 1, dir, b);
            if (memcmp(a, b, sizeof(int) * (size_t)s->n_micro) != 0) {
                free(a);
                return zb_fail(err, "ranked executor: stages %d and %d run their %s ops in "
                               "different micro-batch orders, which NCCL cannot match", st,
                               st + 1, dir ? "backward" : "forward");
            }
        }
    }
    /* every cross-rank boundary x -> x+1 opens two ordered channels,
     * activations dev(x) -> dev(x+1) and gradients dev(x+1) -> dev(x); two
     * channels on the same (from, to) pair would interleave unmatchably */
    for (int x = 0; x + 1 < s->n_stages; x++)
        for (int y = x; y + 1 < s->n_stages; y++)
            for (int cx = 0; cx < 2; cx++)
                for (int cy = 0; cy < 2; cy++) {
                    if (x == y && cx >= cy)
                        continue;
                    int fx = s->stage_device[x + cx], tx = s->stage_device[x + 1 - cx];
                    int fy = s->stage_device[y + cy], ty = s->stage_device[y + 1 - cy];
                    if (fx != tx && fx == fy && tx == ty) {
                        free(a);
                        return zb_fail(err, "ranked executor: boundaries %d->%d and %d->%d "
                                       "both send from rank %d to rank %d; schedules with "
                                       "several stages per rank (V, interleaved) are not "
                                       "supported", x, x + 1, y, y + 1, fx, tx);
                    }
                }
    free(a);
    return 0;
}

int gpu_trainer_create_ranked(const sched_t *s, const zb_model *m, const zb_data *d,
                              const trainer_opts *opts, const gpu_rank_info *rk, gpu_comm *comm,
                              gpu_trainer **out, zb_err *err)
{
    if (gpu_comm_size(comm) != s->n_devices || gpu_comm_rank(comm) != rk->rank)
        return zb_fail(err, "the schedule has %d devices but the run has %d ranks (this is "
                       "rank %d)", s->n_devices, gpu_comm_size(comm), rk->rank);
    if (gpu_trainer_check_ranked(s, err) != 0)
        return -1;
    return create_common(s, m, d, opts, rk->local_rank, rk, comm, out, err);
}

/* Issue state of one step. */
typedef struct issue_state {
    unsigned char *f_issued; /* [S·m] */
    unsigned char *b_issued; /* [S·m] */
    int *pos;                /* [p] next op of each device */
} issue_state;

static int op_forward(gpu_trainer *t, issue_state *is, int s, int j, zb_err *err)
{
    gstage *g = &t->st[s];
    zb_cuda *me = t->ctx[g->device];
    size_t N = (size_t)t->batch * t->model.seq_len;
    const int32_t *tok = t->x + N * (size_t)j, *tgt = t->y + N * (size_t)j;
    if (s > 0 && is_local(t, s - 1)) { /* remote: the NCCL receive already filled in[j] */
        gstage *prev = &t->st[s - 1];
        if (gpu_fence_wait(prev->f_fwd[j], me, err) != 0 ||
            zb_cuda_copy(me, g->in[j], prev->out[j], N * (size_t)t->model.d_model * 2, err) != 0)
            return -1;
    }
    if (gpu_stage_forward(g->st, g->saved[j], s == 0 ? tok : NULL, s == 0 ? NULL : g->in[j],
                          s == t->S - 1 ? tgt : NULL, s == t->S - 1 ? NULL : g->out[j], err) != 0)
        return -1;
    if (s == t->S - 1 && gpu_saved_copy_loss_sum(g->saved[j], t->loss_dev + j, err) != 0)
        return -1;
    if (s < t->S - 1 && is_local(t, s + 1) && gpu_fence_signal(g->f_fwd[j], me, err) != 0)
        return -1;
    is->f_issued[s * t->m + j] = 1;
    return 0;
}

static int op_backward_b(gpu_trainer *t, issue_state *is, int s, int j, zb_err *err)
{
    gstage *g = &t->st[s];
    zb_cuda *me = t->ctx[g->device];
    size_t N = (size_t)t->batch * t->model.seq_len;
    if (s < t->S - 1 && is_local(t, s + 1)) {
        gstage *next = &t->st[s + 1];
        if (gpu_fence_wait(next->f_bwd[j], me, err) != 0 ||
            zb_cuda_copy(me, g->gin[j], next->gout[j], N * (size_t)t->model.d_model * 2, err) != 0)
            return -1;
    }
    if (gpu_stage_backward_b(g->st, g->saved[j], 1.0f / (float)t->m,
                             s < t->S - 1 ? g->gin[j] : NULL, s > 0 ? g->gout[j] : NULL,
                             err) != 0)
        return -1;
    if (s > 0 && is_local(t, s - 1) && gpu_fence_signal(g->f_bwd[j], me, err) != 0)
        return -1;
    is->b_issued[s * t->m + j] = 1;
    return 0;
}

/* 1 when op's inputs have been issued. */
static int ready(const gpu_trainer *t, const issue_state *is, sched_op op)
{
    int s = op.stage, j = op.mb;
    switch (op.kind) {
    case OP_F:
        return s == 0 || !is_local(t, s - 1) || is->f_issued[(s - 1) * t->m + j];
    case OP_B:
    case OP_BW:
        return is->f_issued[s * t->m + j] &&
               (s == t->S - 1 || !is_local(t, s + 1) || is->b_issued[(s + 1) * t->m + j]);
    case OP_W:
        return is->b_issued[s * t->m + j];
    }
    return 0;
}

/* Ranked variant: the NCCL messages around op `done` (its outgoing
 * activation or gradient, when the consumer is another rank) and before op
 * `next` (its incoming one, when the producer is another rank), posted as
 * one group on this rank's stream.  Either may be NULL. */
static int exchange_around(gpu_trainer *t, const sched_op *done, const sched_op *next,
                           zb_err *err)
{
    size_t bytes = (size_t)t->batch * t->model.seq_len * (size_t)t->model.d_model * 2;
    gpu_msg snd[1], rcv[1];
    int ns = 0, nr = 0;
    if (done) {
        int s = done->stage, j = done->mb;
        if (done->kind == OP_F && s < t->S - 1 && !is_local(t, s + 1))
            snd[ns++] = (gpu_msg){ t->st[s + 1].device, t->st[s].out[j], bytes };
        if ((done->kind == OP_B || done->kind == OP_BW) && s > 0 && !is_local(t, s - 1))
            snd[ns++] = (gpu_msg){ t->st[s - 1].device, t->st[s].gout[j], bytes };
    }
    if (next) {
        int s = next->stage, j = next->mb;
        if (next->kind == OP_F && s > 0 && !is_local(t, s - 1))
            rcv[nr++] = (gpu_msg){ t->st[s - 1].device, t->st[s].in[j], bytes };
        if ((next->kind == OP_B || next->kind == OP_BW) && s < t->S - 1 && !is_local(t, s + 1))
            rcv[nr++] = (gpu_msg){ t->st[s + 1].device, t->st[s].gin[j], bytes };
    }
    if (ns == 0 && nr == 0)
        return 0;
    return gpu_comm_exchange(t->comm, t->ctx[t->my_dev], snd, ns, rcv, nr, err);
}

/* Ranked variant: this rank's lane in order, NCCL groups between ops. */
static int issue_rank(gpu_trainer *t, issue_state *is, zb_err *err)
{
    const sched_lane *lane = &t->sched->dev[t->my_dev];
    if (lane->n_ops > 0 && exchange_around(t, NULL, &lane->ops[0], err) != 0)
        return -1;
    for (int k = 0; k < lane->n_ops; k++) {
        sched_op op = lane->ops[k];
        gstage *g = &t->st[op.stage];
        int rc;
        if (!ready(t, is, op))
            return zb_fail(err, "device %d: %s of stage %d micro-batch %d comes before its "
                           "input on the same device", t->my_dev,
                           op_kind_name((op_kind)op.kind), op.stage, op.mb);
        switch (op.kind) {
        case OP_F: rc = op_forward(t, is, op.stage, op.mb, err); break;
        case OP_B: rc = op_backward_b(t, is, op.stage, op.mb, err); break;
        case OP_W: rc = gpu_stage_backward_w(g->st, g->saved[op.mb], err); break;
        default:
            rc = op_backward_b(t, is, op.stage, op.mb, err);
            if (rc == 0)
                rc = gpu_stage_backward_w(g->st, g->saved[op.mb], err);
        }
        if (rc == 0)
            rc = exchange_around(t, &op, k + 1 < lane->n_ops ? &lane->ops[k + 1] : NULL, err);
        if (rc != 0)
            return zb_wrap(err, "rank %d, %s of stage %d micro-batch %d: ", t->my_dev,
                           op_kind_name((op_kind)op.kind), op.stage, op.mb);
    }
    return 0;
}

/* Ranked variant: sums n device doubles over the ranks, in place, and
 * copies the result to host out (may alias nothing on the device). */
static int allreduce_f64(gpu_trainer *t, double *dev, double *out, size_t n, zb_err *err)
{
    zb_cuda *me = t->ctx[t->my_dev];
    if (gpu_comm_allreduce_sum_f64(t->comm, me, dev, n, err) != 0)
        return -1;
    return zb_cuda_download(me, out, dev, sizeof(double) * n, err);
}

int gpu_trainer_step(gpu_trainer *t, double *loss, zb_err *err)
{
    double t0 = now_s();
    size_t N = (size_t)t->batch * t->model.seq_len;
    for (int j = 0; j < t->m; j++)
        data_train_batch(t->data, &t->rng, t->batch, t->x + N * (size_t)j, t->y + N * (size_t)j);
    for (int s = 0; s < t->S; s++)
        if (is_local(t, s) && gpu_stage_grads_zero(t->st[s].st, err) != 0)
            return -1;
    /* ranks without the head contribute zeros to the loss all-reduce */
    if (t->comm && !is_local(t, t->S - 1) &&
        zb_cuda_zero(t->ctx[t->my_dev], t->loss_dev, sizeof(double) * (size_t)t->m, err) != 0)
        return -1;
    float lr = adamw_lr(&t->opts.adamw, (int)t->step);
    issue_state is;
    is.f_issued = calloc((size_t)t->S * t->m, 1);
    is.b_issued = calloc((size_t)t->S * t->m, 1);
    is.pos = calloc((size_t)t->p, sizeof *is.pos);
    int rc = -1;
    if (!is.f_issued || !is.b_issued || !is.pos) {
        zb_fail(err, "out of memory");
        goto out;
    }
    if (issue_rank(t, &is, err) != 0)
        goto out;
    for (int i = 0; i < t->p; i++)
        if (t->ctx[i] && zb_cuda_sync(t->ctx[i], err) != 0)
            goto out;
    /* synchronous global-norm clip, stage order as the CPU's reference path */
    double total = 0.0;
    for (int s = 0; s < t->S; s++) {
        gstage *g = &t->st[s];
        if (!is_local(t, s))
            continue;
        double *per = malloc(sizeof(double) * (size_t)(g->layout.n_tensors + 1));
        double part = 0.0;
        if (!per) {
            zb_fail(err, "out of memory");
            goto out;
        }
        int bad = gpu_stage_grad_sumsq(g->st, per, &part, err);
        free(per);
        if (bad)
            goto out;
        total += part;
    }
    if (t->comm && (zb_cuda_upload(t->ctx[t->my_dev], t->scal_dev, &total, sizeof total, err) ||
                    allreduce_f64(t, t->scal_dev, &total, 1, err)))
        goto out;
    if (isfinite(total)) {
        float scale = adamw_clip_scale(total, t->opts.adamw.grad_clip);
        for (int s = 0; s < t->S; s++) {
            gstage *g = &t->st[s];
            if (!is_local(t, s))
                continue;
            g->adam_t++;
            if (gpu_stage_adamw(g->st, &t->opts.adamw, g->adam_t, lr, scale, err) != 0)
                goto out;
        }
    }
    {
        double *ls = malloc(sizeof(double) * (size_t)t->m);
        zb_cuda *head = t->ctx[t->comm ? t->my_dev : t->st[t->S - 1].device];
        if (!ls) {
            zb_fail(err, "out of memory");
            goto out;
        }
        int bad = t->comm ? allreduce_f64(t, t->loss_dev, ls, (size_t)t->m, err)
                          : zb_cuda_download(head, ls, t->loss_dev, sizeof(double) * (size_t)t->m,
                                             err);
        if (bad) {
            free(ls);
            goto out;
        }
        double sum = 0.0;
        for (int j = 0; j < t->m; j++)
            sum += ls[j] / (double)N;
        free(ls);
        *loss = sum / t->m;
    }
    for (int i = 0; i < t->p; i++)
        if (t->ctx[i] && zb_cuda_sync(t->ctx[i], err) != 0)
            goto out;
    t->step++;
    t->last_step_s = now_s() - t0;
    rc = 0;
out:
    free(is.f_issued);
    free(is.b_issued);
    free(is.pos);
    return rc;
}

double gpu_trainer_last_step_s(const gpu_trainer *t) { return t->last_step_s; }

int gpu_trainer_memory(const gpu_trainer *t, size_t *static_bytes, size_t *peak, zb_err *err)
{
    cudaMemPool_t pool;
    uint64_t high = 0;
    cudaError_t st = cudaDeviceGetDefaultMemPool(&pool, t->cuda_device);
    if (st == cudaSuccess)
        st = cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &high);
    if (st != cudaSuccess)
        return zb_fail(err, "memory pool: %s", cudaGetErrorString(st));
    *static_bytes = t->static_bytes;
    *peak = (size_t)high;
    return 0;
}

int gpu_trainer_stage_params(gpu_trainer *t, int stage, float *params, size_t n, zb_err *err)
{
    if (stage < 0 || stage >= t->S)
        return zb_fail(err, "stage %d out of range", stage);
    if (!is_local(t, stage))
        return zb_fail(err, "stage %d lives on rank %d", stage, t->st[stage].device);
    if (n != llama_stage_num_params(&t->st[stage].layout))
        return zb_fail(err, "stage %d holds %zu parameters, not %zu", stage,
                       llama_stage_num_params(&t->st[stage].layout), n);
    return gpu_stage_download(t->st[stage].st, params, err);
}
