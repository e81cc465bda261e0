/*
 * backend_cuda_vocab.c: the CUDA backend's vocabulary passes (backend.h's
 * vocab_* ops), the twin of kernels/cpu/backend_cpu_vocab.c over the
 * kernels of vocab_cuda.h and the cuBLASLt products of zb_cuda.h.  When
 * and in which order the passes run is the executor's
 * (runtime/vocab_exec.h); here is the arithmetic, the buffers, and the
 * ordering between the GPU streams that the executor's host-side barriers
 * cannot give.
 *
 * Streams.  One GPU holds every schedule device, each with its stream
 * (backend_cuda.c).  S and T of shard k are issued on device k's stream,
 * put_x and dx on the head stage's device's stream.  The executor's
 * barriers order the host calls; the GPU work they queue is ordered by
 * fences (gpu_transport.h's events), recorded after a pass's last queued
 * use and waited on by the next user's stream, so no host thread waits
 * for the GPU inside a step:
 *
 *   x_ready[j]     put_x's copy of micro-batch j's head input; S waits
 *   s_done[j][k]   S(k, j): its statistics, and Vocab-1's partial and
 *                  target rows; T(·, j) and Vocab-1's dx wait for all p
 *   t_done[j][k]   T(k, j): Vocab-2's partial; Vocab-2's dx waits
 *   head_done[k]   shard k's last weight gradient of the step is in the
 *                  head's gradient; the head stage's stream waits, so the
 *                  optimizer (gradient norms, AdamW) issued there after
 *                  the executor's vocab_exec_wait_done sees every column
 *
 * Buffers.  Each shard's bf16 copy of its head columns (gathered from the
 * head stage's bf16 weights at the start of each step), its scratch
 * (Vocab-1's local softmax, T's lse and losses, one T's weight gradient);
 * per micro-batch the head input and the shards' statistics, partials and
 * Vocab-1's target rows, packed shard after shard as vocab_cuda.h's
 * combines read them.  A cell's logits ([N, v] bf16, the largest buffer)
 * come from the stream-ordered allocator at its S and go back at the end
 * of its T on the same stream: a logit cell lives exactly from S to T.
 * A T that runs ahead of micro-batch order keeps its weight gradient in a
 * stream-ordered buffer until its turn, as the CPU's does, so the head's
 * gradient receives the micro-batches in order.
 *
 * Precision: bf16 logits, activations and weights, fp32 statistics,
 * gradients and reductions (vocab_cuda.h); the losses agree with the CPU
 * backend's within bf16 tolerance (tests/cuda/test_cuda_vocab_backend.c).
 *
 * The loss of vocab_dx is read back at once (the executor reads it as a
 * host float when the step ends, and dx has no stage whose sync could
 * carry it): one wait of the head device's stream per micro-batch.
 *
 * Not for pipeline ranks (one device per process): the shards' passes
 * need every device's stream in this process; vocab_new refuses.
 */
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "kernels/cpu/vocab_shard.h"
#include "kernels/cuda/backend_cuda_impl.h"
#include "kernels/cuda/vocab_cuda.h"
#include "src/sched.h"

/* One shard: its head columns and its scratch (used on its stream only). */
typedef struct cu_shard {
    int v0, v;          /* columns [v0, v0+v) of the head */
    zb_bf16 *w;         /* [d, v] this step's bf16 copy of those columns */
    zb_bf16 *ex;        /* [N, v] Vocab-1's local softmax (NULL for Vocab-2) */
    float *lse;         /* [N] T's global log-sum-exp */
    float *losses;      /* [N] T's per-row losses (the combine writes them) */
    float *dw;          /* [d, v] one T's weight gradient */
    float **dw_ahead;   /* [m] stream-ordered gradients of T passes run ahead */
    int next_t;         /* next micro-batch whose dW goes into the head gradient */
    gpu_fence *head_done; /* recorded after the step's last dW of the shard */
} cu_shard;

/* One micro-batch: its head input and the shards' results, packed. */
typedef struct cu_mb {
    zb_bf16 *x;          /* [N, d] head input (put_x's copy) */
    float *row_max;      /* [p][N] */
    float *row_sum;      /* [p][N] */
    float *tgt;          /* [p][N] target logit where the target is in the shard, else 0 */
    zb_bf16 *partial;    /* [p][N, d] input-gradient partials */
    float *rows;         /* [p][N, d] Vocab-1's target rows (NULL for Vocab-2) */
    gpu_fence *x_ready;  /* after put_x's copy */
    gpu_fence **s_done;  /* [p] after S(k) */
    gpu_fence **t_done;  /* [p] after T(k) */
} cu_mb;

/* The backend's zb_bvocab. */
typedef struct cuda_vocab {
    zb_vocab_shape shape; /* as vocab_new got it */
    int N;                /* rows per micro-batch, B*T */
    cu_shard *shard;      /* [p] */
    cu_mb *mb;            /* [m] */
    zb_bf16 **logits;     /* [m * p] cell (j, k) at j * p + k; NULL outside S..T */
    int32_t *targets;     /* device [m][N] this step's targets */
    float *head_grad;     /* device: the head stage's gradient at the head's offset */
    zb_cuda *head_ctx;    /* the head stage's context */
    float *dx_lse;        /* [N] dx's scratch (head device's stream) */
    float *dx_losses;     /* [N] */
    float *dx_weight;     /* [p][N] Vocab-1's rescale weights */
    double *dx_loss_sum;  /* device double */
} cuda_vocab;

#define CVU(v) ((cuda_vocab *)(v))

/* Device k's context (every device has one: vocab_new checked). */
static zb_cuda *ctx_of(zb_backend *be, int k)
{
    return IMPL(be)->ctx[k];
}

void cuda_vocab_free(zb_backend *be, zb_bvocab *bv)
{
    cuda_vocab *cv = CVU(bv);
    if (!cv)
        return;
    zb_err ignored;
    backend_cuda_on_gpu(be, &ignored);
    int p = cv->shape.shards, m = cv->shape.micro;
    for (int k = 0; k < p && IMPL(be)->ctx[k]; k++) /* queued frees and passes end */
        zb_cuda_sync(ctx_of(be, k), &ignored);
    if (cv->logits)
        for (int i = 0; i < m * p; i++)
            zb_cuda_release(cv->logits[i]);
    if (cv->shard)
        for (int k = 0; k < p; k++) {
            cu_shard *sh = &cv->shard[k];
            zb_cuda_release(sh->w);
            zb_cuda_release(sh->ex);
            zb_cuda_release(sh->lse);
            zb_cuda_release(sh->losses);
            zb_cuda_release(sh->dw);
            if (sh->dw_ahead)
                for (int j = 0; j < m; j++)
                    zb_cuda_release(sh->dw_ahead[j]);
            free(sh->dw_ahead);
            gpu_fence_free(sh->head_done);
        }
    if (cv->mb)
        for (int j = 0; j < m; j++) {
            cu_mb *b = &cv->mb[j];
            zb_cuda_release(b->x);
            zb_cuda_release(b->row_max);
            zb_cuda_release(b->row_sum);
            zb_cuda_release(b->tgt);
            zb_cuda_release(b->partial);
            zb_cuda_release(b->rows);
            gpu_fence_free(b->x_ready);
            for (int k = 0; k < p && b->s_done; k++)
                gpu_fence_free(b->s_done[k]);
            for (int k = 0; k < p && b->t_done; k++)
                gpu_fence_free(b->t_done[k]);
            free(b->s_done);
            free(b->t_done);
        }
    zb_cuda_release(cv->targets);
    zb_cuda_release(cv->dx_lse);
    zb_cuda_release(cv->dx_losses);
    zb_cuda_release(cv->dx_weight);
    zb_cuda_release(cv->dx_loss_sum);
    free(cv->logits);
    free(cv->mb);
    free(cv->shard);
    free(cv);
}

/* zb_cuda_alloc of n bytes into *p unless *bad; sets *bad on failure and
 * adds n to *total (when not NULL) on success. */
static void take(void **p, size_t n, int *bad, size_t *total, zb_err *err)
{
    if (*bad)
        return;
    if (zb_cuda_alloc(p, n ? n : 1, err) != 0)
        *bad = 1;
    else if (total)
        *total += n;
}

int cuda_vocab_new(zb_backend *be, const zb_vocab_shape *shape, zb_bvocab **out, zb_err *err)
{
    cuda_impl *im = IMPL(be);
    if (shape->shards <= 0 || shape->micro <= 0 || shape->batch <= 0 || shape->seq <= 0)
        return zb_fail(err, "vocabulary passes: a shape of %d shards, %d micro-batches of %d x "
                       "%d", shape->shards, shape->micro, shape->batch, shape->seq);
    if (im->local_dev >= 0)
        return zb_fail(err, "vocabulary passes on the GPU need every device's stream in one "
                       "process, not a pipeline rank");
    if (shape->local >= 0)
        return zb_fail(err, "the CUDA backend runs every vocabulary shard in one process, not "
                       "shard %d alone (one device per process)", shape->local);
    if (shape->shards > im->n_devices)
        return zb_fail(err, "%d vocabulary shards on a backend of %d devices", shape->shards,
                       im->n_devices);
    if (shape->vocab < shape->shards)
        return zb_fail(err, "a vocabulary of %d entries cannot be split over %d devices",
                       shape->vocab, shape->shards);
    if (backend_cuda_on_gpu(be, err) != 0)
        return -1;
    cuda_vocab *cv = calloc(1, sizeof *cv);
    if (!cv)
        return zb_fail(err, "out of memory for the vocabulary shards");
    cv->shape = *shape;
    cv->N = shape->batch * shape->seq;
    size_t bytes = 0; /* what the passes keep for the backend's lifetime */
    int p = shape->shards, m = shape->micro, v1 = shape->variant == SCHED_VOCAB_1;
    size_t N = (size_t)cv->N, d = (size_t)shape->d, pN = (size_t)p * N;
    cv->shard = calloc((size_t)p, sizeof *cv->shard);
    cv->mb = calloc((size_t)m, sizeof *cv->mb);
    cv->logits = calloc((size_t)m * (size_t)p, sizeof *cv->logits);
    int bad = !cv->shard || !cv->mb || !cv->logits;
    if (bad)
        zb_fail(err, "out of memory for the vocabulary shards");
    for (int k = 0; k < p && !bad; k++) {
        cu_shard *sh = &cv->shard[k];
        sh->v0 = vshard_begin(k, p, shape->vocab);
        sh->v = vshard_begin(k + 1, p, shape->vocab) - sh->v0;
        size_t v = (size_t)sh->v;
        take((void **)&sh->w, d * v * 2, &bad, &bytes, err);
        if (v1)
            take((void **)&sh->ex, N * v * 2, &bad, &bytes, err);
        take((void **)&sh->lse, N * 4, &bad, &bytes, err);
        take((void **)&sh->losses, N * 4, &bad, &bytes, err);
        take((void **)&sh->dw, d * v * 4, &bad, &bytes, err);
        if (!bad && !(sh->dw_ahead = calloc((size_t)m, sizeof *sh->dw_ahead)))
            bad = zb_fail(err, "out of memory") != 0;
        if (!bad && gpu_fence_new(&sh->head_done, err) != 0)
            bad = 1;
    }
    for (int j = 0; j < m && !bad; j++) {
        cu_mb *b = &cv->mb[j];
        take((void **)&b->x, N * d * 2, &bad, &bytes, err);
        take((void **)&b->row_max, pN * 4, &bad, &bytes, err);
        take((void **)&b->row_sum, pN * 4, &bad, &bytes, err);
        take((void **)&b->tgt, pN * 4, &bad, &bytes, err);
        take((void **)&b->partial, pN * d * 2, &bad, &bytes, err);
        if (v1)
            take((void **)&b->rows, pN * d * 4, &bad, &bytes, err);
        if (!bad && (!(b->s_done = calloc((size_t)p, sizeof *b->s_done)) ||
                     !(b->t_done = calloc((size_t)p, sizeof *b->t_done))))
            bad = zb_fail(err, "out of memory") != 0;
        if (!bad && gpu_fence_new(&b->x_ready, err) != 0)
            bad = 1;
        for (int k = 0; k < p && !bad; k++)
            if (gpu_fence_new(&b->s_done[k], err) != 0 || gpu_fence_new(&b->t_done[k], err) != 0)
                bad = 1;
    }
    take((void **)&cv->targets, (size_t)m * N * 4, &bad, &bytes, err);
    take((void **)&cv->dx_lse, N * 4, &bad, &bytes, err);
    take((void **)&cv->dx_losses, N * 4, &bad, &bytes, err);
    take((void **)&cv->dx_weight, pN * 4, &bad, &bytes, err);
    take((void **)&cv->dx_loss_sum, sizeof(double), &bad, &bytes, err);
    if (bad) {
        cuda_vocab_free(be, (zb_bvocab *)cv);
        return zb_wrap(err, "vocabulary passes on the GPU: ");
    }
    /* counted with the stages' buffers in the backend's static bytes */
    __atomic_add_fetch(&im->static_bytes, bytes, __ATOMIC_RELAXED);
    *out = (zb_bvocab *)cv;
    return 0;
}

/* w [d, v] := columns [v0, v0+v) of the row-major bf16 H [d, V], on c's
 * stream (one strided copy). */
static int gather_columns(zb_cuda *c, zb_bf16 *w, const zb_bf16 *H, int d, int V, int v0, int v,
                          zb_err *err)
{
    cudaError_t e = cudaMemcpy2DAsync(w, (size_t)v * 2, H + v0, (size_t)V * 2, (size_t)v * 2,
                                      (size_t)d, cudaMemcpyDeviceToDevice,
                                      (cudaStream_t)zb_cuda_stream(c));
    if (e != cudaSuccess) {
        cudaGetLastError();
        return zb_fail(err, "gathering the head's columns: %s", cudaGetErrorString(e));
    }
    return 0;
}

int cuda_vocab_begin(zb_backend *be, zb_bvocab *bv, zb_bstage *bst, size_t head_offset,
                     const int32_t *targets, zb_err *err)
{
    cuda_vocab *cv = CVU(bv);
    cuda_stage *cs = (cuda_stage *)bst;
    int p = cv->shape.shards, m = cv->shape.micro, d = cv->shape.d, V = cv->shape.vocab;
    if (backend_cuda_on_gpu(be, err) != 0)
        return -1;
    /* between steps: every queued pass (and a failed step's) has ended */
    for (int k = 0; k < IMPL(be)->n_devices; k++)
        if (zb_cuda_sync(ctx_of(be, k), err) != 0)
            return -1;
    for (int i = 0; i < m * p; i++) { /* a failed step's cells */
        zb_cuda_release(cv->logits[i]);
        cv->logits[i] = NULL;
    }
    cv->head_ctx = cs->c;
    cv->head_grad = gpu_stage_grads(cs->st) + head_offset;
    const zb_bf16 *head = gpu_stage_weights(cs->st) + head_offset;
    for (int k = 0; k < p; k++) {
        cu_shard *sh = &cv->shard[k];
        if (gather_columns(cs->c, sh->w, head, d, V, sh->v0, sh->v, err) != 0)
            return -1;
        sh->next_t = 0;
        for (int j = 0; j < m; j++) {
            zb_cuda_release(sh->dw_ahead[j]);
            sh->dw_ahead[j] = NULL;
        }
    }
    if (zb_cuda_upload(cs->c, cv->targets, targets, sizeof(int32_t) * (size_t)m * cv->N, err)
        != 0)
        return -1;
    return zb_cuda_sync(cs->c, err);
}

int cuda_vocab_put_x(zb_backend *be, zb_bvocab *bv, int dev, int mb, const void *x, zb_err *err)
{
    cuda_vocab *cv = CVU(bv);
    if (mb < 0 || mb >= cv->shape.micro || dev < 0 || dev >= IMPL(be)->n_devices)
        return zb_fail(err, "put_x: micro-batch %d on device %d out of range", mb, dev);
    zb_cuda *c = ctx_of(be, dev);
    cu_mb *b = &cv->mb[mb];
    if (zb_cuda_copy(c, b->x, cuda_act_data(x),
                     (size_t)cv->N * (size_t)cv->shape.d * 2, err) != 0)
        return -1;
    return gpu_fence_signal(b->x_ready, c, err);
}

int cuda_vocab_s(zb_backend *be, zb_bvocab *bv, int shard, int mb, zb_err *err)
{
    cuda_vocab *cv = CVU(bv);
    int p = cv->shape.shards, d = cv->shape.d, N = cv->N;
    if (shard < 0 || shard >= p || mb < 0 || mb >= cv->shape.micro)
        return zb_fail(err, "S of shard %d, micro-batch %d: out of range", shard, mb);
    zb_cuda *c = ctx_of(be, shard);
    cu_shard *sh = &cv->shard[shard];
    cu_mb *b = &cv->mb[mb];
    zb_bf16 **lg = &cv->logits[mb * p + shard];
    const int32_t *y = cv->targets + (size_t)mb * N;
    size_t off = (size_t)shard * N;
    cudaStream_t str = (cudaStream_t)zb_cuda_stream(c);
    if (*lg)
        return zb_fail(err, "S of shard %d, micro-batch %d: its cell is still held", shard, mb);
    if (gpu_fence_wait(b->x_ready, c, err) != 0)
        return -1;
    if (cudaMallocAsync((void **)lg, (size_t)N * sh->v * 2, str) != cudaSuccess) {
        cudaGetLastError();
        *lg = NULL;
        return zb_fail(err, "S of shard %d, micro-batch %d: out of device memory for its "
                       "logits", shard, mb);
    }
    if (zb_cuda_matmul_forward(c, *lg, b->x, sh->w, NULL, N, d, sh->v, err) != 0 ||
        zb_cuda_vshard_stats(c, b->row_max + off, b->row_sum + off, b->tgt + off, *lg, y,
                             sh->v0, N, sh->v, err) != 0)
        return -1;
    if (cv->shape.variant == SCHED_VOCAB_1 &&
        (zb_cuda_vshard_local_softmax(c, sh->ex, *lg, b->row_max + off, b->row_sum + off, N,
                                      sh->v, err) != 0 ||
         zb_cuda_matmul_backward_b(c, b->partial + off * d, sh->ex, sh->w, N, d, sh->v, 0,
                                   err) != 0 ||
         zb_cuda_vshard_target_rows(c, b->rows + off * d, sh->w, y, sh->v0, N, d, sh->v, err)
             != 0))
        return -1;
    return gpu_fence_signal(b->s_done[shard], c, err);
}

/* Makes c's stream wait for every shard's fence of `done` (one micro-batch). */
static int wait_all(zb_cuda *c, gpu_fence **done, int p, zb_err *err)
{
    for (int k = 0; k < p; k++)
        if (gpu_fence_wait(done[k], c, err) != 0)
            return -1;
    return 0;
}

int cuda_vocab_t(zb_backend *be, zb_bvocab *bv, int shard, int mb, zb_err *err)
{
    cuda_vocab *cv = CVU(bv);
    int p = cv->shape.shards, m = cv->shape.micro, d = cv->shape.d, V = cv->shape.vocab;
    int N = cv->N;
    if (shard < 0 || shard >= p || mb < 0 || mb >= m)
        return zb_fail(err, "T of shard %d, micro-batch %d: out of range", shard, mb);
    zb_cuda *c = ctx_of(be, shard);
    cudaStream_t str = (cudaStream_t)zb_cuda_stream(c);
    cu_shard *sh = &cv->shard[shard];
    cu_mb *b = &cv->mb[mb];
    zb_bf16 *g = cv->logits[mb * p + shard];
    const int32_t *y = cv->targets + (size_t)mb * N;
    if (!g)
        return zb_fail(err, "T of shard %d, micro-batch %d before its S", shard, mb);
    if (mb < sh->next_t || sh->dw_ahead[mb])
        return zb_fail(err, "T of shard %d, micro-batch %d ran twice in a step", shard, mb);
    /* barrier C0: every shard's statistics of mb */
    if (wait_all(c, b->s_done, p, err) != 0 ||
        zb_cuda_vshard_combine_stats(c, sh->lse, sh->losses, NULL, b->row_max, b->row_sum,
                                     b->tgt, p, N, err) != 0)
        return -1;
    /* the trainer's B passes 1/m as dloss; T uses the same (backend_cpu_vocab.c) */
    float dloss = 1.0f / (float)m;
    if (zb_cuda_vshard_logit_grad(c, g, g, sh->lse, y, sh->v0, dloss, N, sh->v, err) != 0)
        return -1;
    if (cv->shape.variant == SCHED_VOCAB_2 &&
        zb_cuda_matmul_backward_b(c, b->partial + (size_t)shard * N * d, g, sh->w, N, d, sh->v,
                                  0, err) != 0)
        return -1;
    /* dW of this micro-batch: into the head's gradient now if it is its
     * turn, else into a buffer of its own until then */
    float *dw = sh->dw;
    size_t dw_bytes = (size_t)d * sh->v * 4;
    if (mb != sh->next_t && cudaMallocAsync((void **)&dw, dw_bytes, str) != cudaSuccess) {
        cudaGetLastError();
        return zb_fail(err, "T of shard %d, micro-batch %d: out of device memory", shard, mb);
    }
    if (zb_cuda_zero(c, dw, dw_bytes, err) != 0 ||
        zb_cuda_matmul_backward_w(c, dw, b->x, g, N, d, sh->v, err) != 0) {
        if (dw != sh->dw)
            cudaFreeAsync(dw, str);
        return -1;
    }
    /* the logit cell's last use: back to the pool on this stream */
    cudaFreeAsync(g, str);
    cv->logits[mb * p + shard] = NULL;
    if (mb != sh->next_t) {
        sh->dw_ahead[mb] = dw;
    } else {
        if (zb_cuda_vshard_scatter_add(c, cv->head_grad, dw, d, V, sh->v0, sh->v, err) != 0)
            return -1;
        for (sh->next_t++; sh->next_t < m && sh->dw_ahead[sh->next_t]; sh->next_t++) {
            float *ahead = sh->dw_ahead[sh->next_t];
            if (zb_cuda_vshard_scatter_add(c, cv->head_grad, ahead, d, V, sh->v0, sh->v, err)
                != 0)
                return -1;
            cudaFreeAsync(ahead, str);
            sh->dw_ahead[sh->next_t] = NULL;
        }
        /* the shard's columns are complete: the head stage's optimizer,
         * issued on its stream after the executor's wait_done, waits */
        if (sh->next_t == m && (gpu_fence_signal(sh->head_done, c, err) != 0 ||
                                gpu_fence_wait(sh->head_done, cv->head_ctx, err) != 0))
            return -1;
    }
    return gpu_fence_signal(b->t_done[shard], c, err);
}

int cuda_vocab_dx(zb_backend *be, zb_bvocab *bv, int dev, int mb, float dloss, void *dx,
                  float *loss, zb_err *err)
{
    cuda_vocab *cv = CVU(bv);
    int p = cv->shape.shards, d = cv->shape.d, N = cv->N, v1 = cv->shape.variant == SCHED_VOCAB_1;
    if (mb < 0 || mb >= cv->shape.micro || dev < 0 || dev >= IMPL(be)->n_devices)
        return zb_fail(err, "dx: micro-batch %d on device %d out of range", mb, dev);
    zb_cuda *c = ctx_of(be, dev);
    cu_mb *b = &cv->mb[mb];
    zb_bf16 *out = cuda_act_data(dx);
    /* barrier C0 (Vocab-1: S's partials) or C1 (Vocab-2: T's) */
    if (wait_all(c, v1 ? b->s_done : b->t_done, p, err) != 0 ||
        zb_cuda_vshard_combine_stats(c, cv->dx_lse, cv->dx_losses, v1 ? cv->dx_weight : NULL,
                                     b->row_max, b->row_sum, b->tgt, p, N, err) != 0)
        return -1;
    if (v1 ? zb_cuda_vshard_combine_dx_v1(c, out, b->partial, cv->dx_weight, b->rows, dloss, p,
                                          N, d, err)
           : zb_cuda_vshard_combine_dx_v2(c, out, b->partial, p, N, d, err))
        return -1;
    double sum = 0;
    if (zb_cuda_sum_f64(c, cv->dx_loss_sum, cv->dx_losses, (size_t)N, 0, err) != 0 ||
        zb_cuda_download(c, &sum, cv->dx_loss_sum, sizeof sum, err) != 0)
        return -1;
    *loss = (float)(sum / N);
    return 0;
}

int cuda_vocab_eval(zb_backend *be, zb_bvocab *bv, zb_bstage *bst, size_t head_offset,
                    const void *xv, const int32_t *y, int batch, double *loss, zb_err *err)
{
    cuda_vocab *cv = CVU(bv);
    cuda_stage *cs = (cuda_stage *)bst;
    zb_cuda *c = cs->c;
    int p = cv->shape.shards, d = cv->shape.d, V = cv->shape.vocab;
    int N = batch * cv->shape.seq, vmax = 0;
    for (int k = 0; k < p; k++)
        vmax = cv->shard[k].v > vmax ? cv->shard[k].v : vmax;
    if (backend_cuda_on_gpu(be, err) != 0)
        return -1;
    const zb_bf16 *x = cuda_act_data(xv);
    const zb_bf16 *head = gpu_stage_weights(cs->st) + head_offset;
    size_t pN = (size_t)p * N;
    zb_bf16 *w = NULL, *lg = NULL;
    float *mx = NULL, *sm = NULL, *tg = NULL, *lse = NULL, *losses = NULL;
    int32_t *yd = NULL;
    double *sum_d = NULL;
    int bad = 0;
    take((void **)&w, (size_t)d * vmax * 2, &bad, NULL, err);
    take((void **)&lg, (size_t)N * vmax * 2, &bad, NULL, err);
    take((void **)&mx, pN * 4, &bad, NULL, err);
    take((void **)&sm, pN * 4, &bad, NULL, err);
    take((void **)&tg, pN * 4, &bad, NULL, err);
    take((void **)&lse, (size_t)N * 4, &bad, NULL, err);
    take((void **)&losses, (size_t)N * 4, &bad, NULL, err);
    take((void **)&yd, (size_t)N * 4, &bad, NULL, err);
    take((void **)&sum_d, sizeof(double), &bad, NULL, err);
    if (!bad && zb_cuda_upload(c, yd, y, sizeof(int32_t) * (size_t)N, err) != 0)
        bad = 1;
    for (int k = 0; k < p && !bad; k++) {
        cu_shard *sh = &cv->shard[k];
        size_t off = (size_t)k * N;
        if (gather_columns(c, w, head, d, V, sh->v0, sh->v, err) != 0 ||
            zb_cuda_matmul_forward(c, lg, x, w, NULL, N, d, sh->v, err) != 0 ||
            zb_cuda_vshard_stats(c, mx + off, sm + off, tg + off, lg, yd, sh->v0, N, sh->v, err)
                != 0)
            bad = 1;
    }
    double sum = 0;
    if (!bad && (zb_cuda_vshard_combine_stats(c, lse, losses, NULL, mx, sm, tg, p, N, err) != 0 ||
                 zb_cuda_sum_f64(c, sum_d, losses, (size_t)N, 0, err) != 0 ||
                 zb_cuda_download(c, &sum, sum_d, sizeof sum, err) != 0))
        bad = 1;
    if (!bad)
        *loss = sum / N;
    zb_err ignored;
    zb_cuda_sync(c, &ignored); /* before the buffers go */
    zb_cuda_release(w);
    zb_cuda_release(lg);
    zb_cuda_release(mx);
    zb_cuda_release(sm);
    zb_cuda_release(tg);
    zb_cuda_release(lse);
    zb_cuda_release(losses);
    zb_cuda_release(yd);
    zb_cuda_release(sum_d);
    return bad ? -1 : 0;
}

size_t cuda_vocab_cell_bytes(zb_backend *be, const zb_bvocab *bv, int shard)
{
    (void)be;
    const cuda_vocab *cv = (const cuda_vocab *)bv;
    if (shard < 0 || shard >= cv->shape.shards)
        return 0;
    size_t N = (size_t)cv->N, d = (size_t)cv->shape.d, v = (size_t)cv->shard[shard].v;
    /* the logits (bf16) from S to T, the shard's statistics, and its share
     * of the partial (Vocab-1: from S) and of the target rows */
    return N * v * 2 + 3 * N * 4 +
           (cv->shape.variant == SCHED_VOCAB_1 ? N * d * 2 + N * d * 4 : 0);
}
