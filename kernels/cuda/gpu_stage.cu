/*
 * gpu_stage.cu: the forward, B and W passes of one pipeline stage on a GPU
 * (gpu_stage.h), a line-by-line twin of kernels/cpu/llama.c over the CUDA
 * ops, with the fusions the GPU makes cheap: residual adds ride in the
 * GEMM epilogue (C = residual, beta 1) and in RMSNorm's backward (dres),
 * and the three input-gradient products of q, k and v accumulate into one
 * buffer (beta 1) instead of separate adds.
 *
 * Saved state: the same slot table as llama.c (F_KEEP, F_ONLY, B_KEEP),
 * element types per slot (bf16 activations, fp32 1/rms and lse, int32
 * tokens), buffers from cudaMallocAsync on the stage's stream.
 *
 * Recompute follows llama.c's levels (gpu_saved_set_recompute).  Full: F
 * keeps only its inputs (the device token and target slots, or a bf16
 * copy of act_in) and B first reruns the forward from them into freshly
 * taken slots.  MLP: F frees each layer's MLP block (n2, the gate and up
 * pre-activations and their SwiGLU product) and B first reruns the norm,
 * the two matmuls and the SwiGLU from the kept block input h.  The rerun
 * issues the same kernels on the same inputs as F did, so B and W see the
 * values F computed (on the GPU: as far as the kernels are deterministic,
 * which the op test tests/cuda/test_cuda_recompute.c measures).
 *
 * Memory layers (product-key memory in place of a layer's SwiGLU MLP,
 * kernels/cpu/memory_layer.h) follow llama.c: their own slots (query,
 * chosen slots and weights, gate, bag, u; B's gradients), F, B and W over
 * memory_cuda.h's kernels, the value table's sparse W; MLP-level recompute
 * leaves them whole.  Layers differ in size, so tensors are found through
 * the layout's layer_tensor0, never by a fixed stride.
 *
 * The optimizer: gpu_stage_adamw is the whole step over every tensor.
 * Post-validation's speculative step is its split (gpu_stage_adamw_params,
 * then _moments or _undo, over adamw.cu's two half kernels): one fp32 copy
 * of master (snap[0]), never of m and v; spec_pending keeps the order.
 * gpu_stage_snapshot / _restore copy all three for callers that want them.
 */
#include "kernels/cuda/cuda_internal.cuh" /* first: C linkage for the C headers */

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/gpu_stage.h"
#include "kernels/cuda/memory_cuda.h"

struct gpu_stage {
    zb_cuda *c;                /* borrowed context: stream, cuBLASLt */
    const llama_stage *layout; /* borrowed CPU description of what F, B and W run */
    const llama_stage *params_layout; /* borrowed: the buffers' tensors (AdamW, norms);
                                * layout itself, or with vocabulary parallelism the
                                * head stage's full layout whose prefix layout is */
    size_t n;                  /* parameters */
    float *master;             /* fp32 [n] master weights */
    zb_bf16 *w;                /* bf16 [n] compute copy */
    float *grads;              /* fp32 [n] weight-gradient accumulators */
    float *m, *v;              /* fp32 [n] AdamW moments */
    double *scalars;           /* device doubles: per-tensor sums of squares */
    float *snap[3];            /* fp32 [n] snapshot of master, m, v (first gpu_stage_snapshot);
                                * snap[0] alone is gpu_stage_adamw_params's copy */
    int spec_pending;          /* 1 between gpu_stage_adamw_params and its
                                * _moments or _undo */
};

enum { PH_F_KEEP = 1, PH_F_ONLY = 2, PH_B_KEEP = 4 };

/* Per-layer slots, as llama.c (N = B·T; bf16 unless noted). */
enum {
    LS_X, LS_RSTD1 /* f32 */, LS_N1, LS_ATT, LS_H, LS_RSTD2 /* f32 */, LS_N2, LS_HS,
    LS_Q, LS_K, LS_V, LS_LSE /* f32 */, LS_A, LS_B,
    LS_DOUT, LS_DA, LS_DB, LS_DN2, LS_DH, LS_DQ, LS_DK, LS_DV, LS_DN1,
    /* memory layers only, in place of the SwiGLU slots HS, A, B, DA, DB (as
     * llama.c): q and u bf16 [N,H·kd] / [N,v], idx int32 and w f32 [N,H,k],
     * g and e bf16 [N,v]; B's ds f32 [N,H,k], dq bf16, dg and de bf16 */
    LS_MQ, LS_MIDX, LS_MW, LS_MU, LS_MG, LS_ME, LS_MDS, LS_MDQ, LS_MDG, LS_MDE,
    LS_COUNT
};
enum {
    HS_XF, HS_RSTD /* f32 */, HS_NF, HS_LOGITS, HS_LSE /* f32 */, HS_TARGETS /* i32 */,
    HS_LOSSES /* f32 */, HS_DLOGITS, HS_DNF, HS_COUNT
};
enum { ES_TOKENS /* i32 */, ES_DX, ES_COUNT };

struct gpu_saved {
    gpu_stage *st;           /* the stage it belongs to */
    int batch;               /* sequences per micro-batch */
    int n_local;             /* layers of the stage */
    int state;               /* 0 empty, 1 after F, 2 after B, 3 after F with full
                              * recompute (inputs only), 4 after F with MLP-level
                              * recompute (MLP blocks dropped) */
    int recompute;           /* LLAMA_RC_* level of gpu_saved_set_recompute */
    zb_bf16 *rc_input;       /* full recompute of a stage without the embedding:
                              * bf16 [N,d] copy of act_in, or NULL */
    size_t rc_bytes;         /* bytes of rc_input while held (counted in bytes) */
    int n_slots;             /* n_local·LS_COUNT + HS_COUNT + ES_COUNT */
    void **slot;             /* [n_slots] device buffers, NULL when not held */
    size_t *slot_bytes;      /* [n_slots] bytes of each (0: unused) */
    unsigned char *phase;    /* [n_slots] PH_* of each */
    size_t bytes;            /* held now */
    double *loss_dev;        /* device double: Σ of the per-token losses */
};

/* ---------------------------------------------------------------------- */
/* Stage                                                                   */
/* ---------------------------------------------------------------------- */

extern "C" int gpu_stage_create(zb_cuda *c, const llama_stage *layout, gpu_stage **out,
                                zb_err *err)
{
    return gpu_stage_create_compute(c, layout, layout, out, err);
}

extern "C" int gpu_stage_create_compute(zb_cuda *c, const llama_stage *layout,
                                        const llama_stage *compute, gpu_stage **out, zb_err *err)
{
    if (layout->n_memory > 0 && layout->cfg.memory.topk > ZB_CUDA_MEM_MAX_TOPK)
        return zb_fail(err, "stage [%d, %d): memory layers reading %d slots per head, more "
                       "than the GPU lookup's %d", layout->l0, layout->l1,
                       layout->cfg.memory.topk, ZB_CUDA_MEM_MAX_TOPK);
    if (compute != layout && (!compute->norm_only || compute->l0 != layout->l0 ||
                              compute->l1 != layout->l1 || !layout->has_head))
        return zb_fail(err, "GPU stage: the compute layout must be the final-norm-only form of "
                       "its head stage");
    gpu_stage *st = (gpu_stage *)calloc(1, sizeof *st);
    if (!st)
        return zb_fail(err, "out of memory for a GPU stage");
    st->c = c;
    st->layout = compute;
    st->params_layout = layout;
    st->n = llama_stage_num_params(layout);
    size_t n = st->n;
    if (zb_cuda_set_device(c->device, err) != 0 ||
        zb_cuda_alloc((void **)&st->master, n * 4, err) != 0 ||
        zb_cuda_alloc((void **)&st->w, n * 2, err) != 0 ||
        zb_cuda_alloc((void **)&st->grads, n * 4, err) != 0 ||
        zb_cuda_alloc((void **)&st->m, n * 4, err) != 0 ||
        zb_cuda_alloc((void **)&st->v, n * 4, err) != 0 ||
        zb_cuda_alloc((void **)&st->scalars, sizeof(double) * (size_t)(layout->n_tensors + 1),
                      err) != 0) {
        gpu_stage_free(st);
        return zb_wrap(err, "GPU stage of %zu parameters: ", n);
    }
    if (zb_cuda_zero(c, st->grads, n * 4, err) != 0 || zb_cuda_zero(c, st->m, n * 4, err) != 0 ||
        zb_cuda_zero(c, st->v, n * 4, err) != 0 || zb_cuda_sync(c, err) != 0) {
        gpu_stage_free(st);
        return -1;
    }
    *out = st;
    return 0;
}

extern "C" void gpu_stage_free(gpu_stage *st)
{
    if (!st)
        return;
    zb_cuda_release(st->master);
    zb_cuda_release(st->w);
    zb_cuda_release(st->grads);
    zb_cuda_release(st->m);
    zb_cuda_release(st->v);
    zb_cuda_release(st->scalars);
    for (int k = 0; k < 3; k++)
        zb_cuda_release(st->snap[k]);
    free(st);
}

extern "C" zb_cuda *gpu_stage_ctx(const gpu_stage *st) { return st->c; }
extern "C" const zb_bf16 *gpu_stage_weights(const gpu_stage *st) { return st->w; }
extern "C" float *gpu_stage_grads(gpu_stage *st) { return st->grads; }
extern "C" const llama_stage *gpu_stage_layout(const gpu_stage *st) { return st->layout; }
extern "C" size_t gpu_stage_static_bytes(const gpu_stage *st)
{
    size_t copies = 0;
    for (int k = 0; k < 3; k++)
        copies += st->snap[k] != NULL;
    return st->n * (4 + 2 + 4 + 4 + 4 + 4 * copies);
}

/* The fp32 device buffer `which` (GPU_BUF_*). */
static float *stage_buf(gpu_stage *st, int which)
{
    switch (which) {
    case GPU_BUF_MASTER: return st->master;
    case GPU_BUF_GRADS: return st->grads;
    case GPU_BUF_M: return st->m;
    case GPU_BUF_V: return st->v;
    }
    return NULL;
}

extern "C" int gpu_stage_get(gpu_stage *st, int which, float *host, zb_err *err)
{
    float *src = stage_buf(st, which);
    if (!src)
        return zb_fail(err, "GPU stage: no buffer %d", which);
    return zb_cuda_download(st->c, host, src, st->n * 4, err);
}

extern "C" int gpu_stage_set(gpu_stage *st, int which, const float *host, zb_err *err)
{
    if (which == GPU_BUF_MASTER)
        return gpu_stage_upload(st, host, err);
    float *dst = stage_buf(st, which);
    if (!dst)
        return zb_fail(err, "GPU stage: no buffer %d", which);
    if (zb_cuda_upload(st->c, dst, host, st->n * 4, err) != 0)
        return -1;
    return zb_cuda_sync(st->c, err);
}

extern "C" int gpu_stage_snapshot(gpu_stage *st, zb_err *err)
{
    if (st->spec_pending) /* snap[0] holds the speculative step's copy */
        return zb_fail(err, "GPU stage: a snapshot while a speculative step awaits its moments "
                       "or undo");
    float *src[3] = { st->master, st->m, st->v };
    for (int k = 0; k < 3; k++) {
        if (!st->snap[k] && zb_cuda_alloc((void **)&st->snap[k], st->n * 4, err) != 0)
            return zb_wrap(err, "post-validation snapshot: ");
        if (zb_cuda_copy(st->c, st->snap[k], src[k], st->n * 4, err) != 0)
            return -1;
    }
    return 0;
}

extern "C" int gpu_stage_restore(gpu_stage *st, zb_err *err)
{
    /* (adamw_params allocates snap[0] alone: that is no snapshot) */
    if (!st->snap[0] || !st->snap[1] || !st->snap[2])
        return zb_fail(err, "GPU stage: restore without a snapshot");
    float *dst[3] = { st->master, st->m, st->v };
    for (int k = 0; k < 3; k++)
        if (zb_cuda_copy(st->c, dst[k], st->snap[k], st->n * 4, err) != 0)
            return -1;
    /* the bf16 compute copy follows the restored master */
    return zb_cuda_f32_to_bf16(st->c, st->w, st->master, st->n, err);
}

/* y[i] += x[i], fp32. */
__global__ void grads_add_kernel(float *y, const float *x, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (; i < n; i += stride)
        y[i] += x[i];
}

extern "C" int gpu_stage_grads_add(gpu_stage *st, const float *src, zb_err *err)
{
    if (st->n == 0)
        return 0;
    size_t blocks = (st->n + 255) / 256;
    if (blocks > 65535)
        blocks = 65535;
    grads_add_kernel<<<(unsigned)blocks, 256, 0, st->c->stream>>>(st->grads, src, st->n);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return zb_fail(err, "GPU grads add: %s", cudaGetErrorString(e));
    return 0;
}

extern "C" int gpu_stage_upload(gpu_stage *st, const float *params, zb_err *err)
{
    if (zb_cuda_upload(st->c, st->master, params, st->n * 4, err) != 0 ||
        zb_cuda_f32_to_bf16(st->c, st->w, st->master, st->n, err) != 0)
        return -1;
    return zb_cuda_sync(st->c, err);
}

extern "C" int gpu_stage_download(gpu_stage *st, float *params, zb_err *err)
{
    return zb_cuda_download(st->c, params, st->master, st->n * 4, err);
}

extern "C" int gpu_stage_download_grads(gpu_stage *st, float *grads, zb_err *err)
{
    return zb_cuda_download(st->c, grads, st->grads, st->n * 4, err);
}

extern "C" int gpu_stage_grads_zero(gpu_stage *st, zb_err *err)
{
    return zb_cuda_zero(st->c, st->grads, st->n * 4, err);
}

extern "C" int gpu_stage_grad_sumsq(gpu_stage *st, double *out, double *total, zb_err *err)
{
    const llama_stage *L = st->params_layout;
    for (int i = 0; i < L->n_tensors; i++)
        if (zb_cuda_sum_f64(st->c, st->scalars + i, st->grads + L->tensors[i].offset,
                            L->tensors[i].count, 1, err) != 0)
            return -1;
    if (zb_cuda_download(st->c, out, st->scalars, sizeof(double) * (size_t)L->n_tensors, err) != 0)
        return -1;
    double s = 0.0;
    for (int i = 0; i < L->n_tensors; i++)
        s += out[i];
    *total = s;
    return 0;
}

extern "C" int gpu_stage_adamw(gpu_stage *st, const adamw_config *c, int t, float lr,
                               float grad_scale, zb_err *err)
{
    const llama_stage *L = st->params_layout;
    for (int i = 0; i < L->n_tensors; i++) {
        const llama_tensor *ten = &L->tensors[i];
        size_t o = ten->offset;
        if (zb_cuda_adamw_update(st->c, st->master + o, st->w + o, st->grads + o, st->m + o,
                                 st->v + o, ten->count, t, lr, c->beta1, c->beta2, c->eps,
                                 ten->decay ? c->weight_decay : 0.0f, grad_scale, err) != 0)
            return -1;
    }
    return 0;
}

extern "C" int gpu_stage_adamw_params(gpu_stage *st, const adamw_config *c, int t, float lr,
                                      float grad_scale, zb_err *err)
{
    if (st->spec_pending)
        return zb_fail(err, "GPU stage: a speculative step while one awaits its moments or undo");
    if (!st->snap[0] && zb_cuda_alloc((void **)&st->snap[0], st->n * 4, err) != 0)
        return zb_wrap(err, "post-validation copy of the parameters: ");
    if (zb_cuda_copy(st->c, st->snap[0], st->master, st->n * 4, err) != 0)
        return -1;
    /* pending from here: should a launch below fail, undo still puts the
     * copied weights back */
    st->spec_pending = 1;
    const llama_stage *L = st->params_layout;
    for (int i = 0; i < L->n_tensors; i++) {
        const llama_tensor *ten = &L->tensors[i];
        size_t o = ten->offset;
        /* the arguments of gpu_stage_adamw's zb_cuda_adamw_update */
        if (zb_cuda_adamw_update_params(st->c, st->master + o, st->w + o, st->grads + o,
                                        st->m + o, st->v + o, ten->count, t, lr, c->beta1,
                                        c->beta2, c->eps, ten->decay ? c->weight_decay : 0.0f,
                                        grad_scale, err) != 0)
            return -1;
    }
    return 0;
}

extern "C" int gpu_stage_adamw_moments(gpu_stage *st, const adamw_config *c, float grad_scale,
                                       zb_err *err)
{
    if (!st->spec_pending)
        return zb_fail(err, "GPU stage: adamw_moments without a speculative step");
    const llama_stage *L = st->params_layout;
    for (int i = 0; i < L->n_tensors; i++) {
        const llama_tensor *ten = &L->tensors[i];
        size_t o = ten->offset;
        if (zb_cuda_adamw_update_moments(st->c, st->grads + o, st->m + o, st->v + o, ten->count,
                                         c->beta1, c->beta2, grad_scale, err) != 0)
            return -1;
    }
    st->spec_pending = 0;
    return 0;
}

extern "C" int gpu_stage_adamw_undo(gpu_stage *st, zb_err *err)
{
    if (!st->spec_pending)
        return zb_fail(err, "GPU stage: adamw_undo without a speculative step");
    assert(st->snap[0]);
    if (zb_cuda_copy(st->c, st->master, st->snap[0], st->n * 4, err) != 0 ||
        zb_cuda_f32_to_bf16(st->c, st->w, st->master, st->n, err) != 0)
        return -1;
    st->spec_pending = 0;
    return 0;
}

/* Tensor of kind k of local layer i, as llama.c's layer_tensor: memory
 * layers differ in size, so layers are found through layer_tensor0, and a
 * shared memory value table wherever the stage holds it. */
static const llama_tensor *layer_tensor(const llama_stage *L, int i, llama_tensor_kind k)
{
    for (int t = L->layer_tensor0[i]; t < L->layer_tensor0[i + 1]; t++)
        if (L->tensors[t].kind == k) {
            assert(L->tensors[t].layer == L->l0 + i);
            return &L->tensors[t];
        }
    assert(k == LLAMA_T_MEM_VALUES && L->values_tensor >= 0);
    return &L->tensors[L->values_tensor];
}

/* bf16 weights of local layer i, kind k. */
static const zb_bf16 *layer_w(const gpu_stage *st, int i, llama_tensor_kind k)
{
    return st->w + layer_tensor(st->layout, i, k)->offset;
}

/* 1 when local layer i is a memory layer (llama.c's local_is_memory). */
static int local_is_memory(const llama_stage *L, int i)
{
    return L->n_memory > 0 && model_is_memory_layer(&L->cfg, L->l0 + i);
}

/* The memory layer's sizes from the model. */
static mem_shape stage_mem_shape(const llama_stage *L)
{
    const zb_memory *mm = &L->cfg.memory;
    mem_shape ms = { L->cfg.d_model, mm->heads, mm->k_dim, mm->n_keys, mm->topk, mm->value_dim };
    return ms;
}

/* ---------------------------------------------------------------------- */
/* Saved state                                                             */
/* ---------------------------------------------------------------------- */

static int head_base(const gpu_saved *sv) { return sv->n_local * LS_COUNT; }
static int emb_base(const gpu_saved *sv) { return head_base(sv) + HS_COUNT; }
static void *LSL(gpu_saved *sv, int i, int k) { return sv->slot[i * LS_COUNT + k]; }
static void *HSL(gpu_saved *sv, int k) { return sv->slot[head_base(sv) + k]; }
static void *ESL(gpu_saved *sv, int k) { return sv->slot[emb_base(sv) + k]; }
#define LB(sv, i, k) ((zb_bf16 *)LSL(sv, i, k))
#define LF(sv, i, k) ((float *)LSL(sv, i, k))
#define HB(sv, k) ((zb_bf16 *)HSL(sv, k))
#define HF(sv, k) ((float *)HSL(sv, k))

static void slot_spec(gpu_saved *sv)
{
    const llama_stage *L = sv->st->layout;
    size_t N = (size_t)sv->batch * L->cfg.seq_len;
    size_t d = L->cfg.d_model, ff = L->cfg.d_ff, V = L->cfg.vocab;
    size_t qd = L->q_dim, kvd = L->kv_dim, nh = L->cfg.n_heads;
    static const unsigned char lphase[LS_COUNT] = {
        PH_F_KEEP, PH_F_KEEP, PH_F_KEEP, PH_F_KEEP, PH_F_KEEP, PH_F_KEEP, PH_F_KEEP, PH_F_KEEP,
        PH_F_ONLY, PH_F_ONLY, PH_F_ONLY, PH_F_ONLY, PH_F_ONLY, PH_F_ONLY,
        PH_B_KEEP, PH_B_KEEP, PH_B_KEEP, PH_B_KEEP, PH_B_KEEP, PH_B_KEEP, PH_B_KEEP, PH_B_KEEP,
        PH_B_KEEP,
        PH_F_KEEP, PH_F_KEEP, PH_F_KEEP, PH_F_KEEP, PH_F_ONLY, PH_F_ONLY,
        PH_B_KEEP, PH_B_KEEP, PH_B_KEEP, PH_B_KEEP,
    };
    size_t lsize[LS_COUNT];
    lsize[LS_X] = N * d * 2; lsize[LS_RSTD1] = N * 4; lsize[LS_N1] = N * d * 2;
    lsize[LS_ATT] = N * qd * 2; lsize[LS_H] = N * d * 2; lsize[LS_RSTD2] = N * 4;
    lsize[LS_N2] = N * d * 2; lsize[LS_HS] = N * ff * 2; lsize[LS_Q] = N * qd * 2;
    lsize[LS_K] = N * kvd * 2; lsize[LS_V] = N * kvd * 2; lsize[LS_LSE] = N * nh * 4;
    lsize[LS_A] = N * ff * 2; lsize[LS_B] = N * ff * 2; lsize[LS_DOUT] = N * d * 2;
    lsize[LS_DA] = N * ff * 2; lsize[LS_DB] = N * ff * 2; lsize[LS_DN2] = N * d * 2;
    lsize[LS_DH] = N * d * 2; lsize[LS_DQ] = N * qd * 2; lsize[LS_DK] = N * kvd * 2;
    lsize[LS_DV] = N * kvd * 2; lsize[LS_DN1] = N * d * 2;
    const zb_memory *mm = &L->cfg.memory;
    size_t mq = (size_t)mm->heads * mm->k_dim, mk = (size_t)mm->heads * mm->topk;
    size_t mv = (size_t)mm->value_dim;
    lsize[LS_MQ] = N * mq * 2; lsize[LS_MIDX] = N * mk * 4; lsize[LS_MW] = N * mk * 4;
    lsize[LS_MU] = N * mv * 2; lsize[LS_MG] = N * mv * 2; lsize[LS_ME] = N * mv * 2;
    lsize[LS_MDS] = N * mk * 4; lsize[LS_MDQ] = N * mq * 2; lsize[LS_MDG] = N * mv * 2;
    lsize[LS_MDE] = N * mv * 2;
    for (int i = 0; i < sv->n_local; i++) {
        int mem = local_is_memory(L, i);
        for (int k = 0; k < LS_COUNT; k++) {
            int swiglu_only = k == LS_HS || k == LS_A || k == LS_B || k == LS_DA || k == LS_DB;
            int used = k >= LS_MQ ? mem : swiglu_only ? !mem : 1;
            sv->slot_bytes[i * LS_COUNT + k] = used ? lsize[k] : 0;
            sv->phase[i * LS_COUNT + k] = lphase[k];
        }
    }
    static const unsigned char hphase[HS_COUNT] = {
        PH_F_KEEP, PH_F_KEEP, PH_F_KEEP, PH_F_ONLY, PH_F_ONLY, PH_F_ONLY, PH_F_ONLY,
        PH_B_KEEP, PH_B_KEEP,
    };
    size_t hsize[HS_COUNT];
    hsize[HS_XF] = N * d * 2; hsize[HS_RSTD] = N * 4; hsize[HS_NF] = N * d * 2;
    hsize[HS_LOGITS] = N * V * 2; hsize[HS_LSE] = N * 4; hsize[HS_TARGETS] = N * 4;
    hsize[HS_LOSSES] = N * 4; hsize[HS_DLOGITS] = N * V * 2; hsize[HS_DNF] = N * d * 2;
    for (int k = 0; k < HS_COUNT; k++) {
        /* the final-norm-only stage keeps the norm's input, 1/rms and the
         * output gradient (its dy_in), as llama.c's slot table does */
        int norm_slot = k == HS_XF || k == HS_RSTD || k == HS_DNF;
        sv->slot_bytes[head_base(sv) + k] = L->has_head || (L->norm_only && norm_slot) ? hsize[k] : 0;
        sv->phase[head_base(sv) + k] = hphase[k];
    }
    sv->slot_bytes[emb_base(sv) + ES_TOKENS] = L->has_embedding ? N * 4 : 0;
    sv->phase[emb_base(sv) + ES_TOKENS] = PH_F_KEEP;
    sv->slot_bytes[emb_base(sv) + ES_DX] = L->has_embedding ? N * d * 2 : 0;
    sv->phase[emb_base(sv) + ES_DX] = PH_B_KEEP;
}

extern "C" gpu_saved *gpu_saved_new(gpu_stage *st, int batch)
{
    assert(batch > 0);
    gpu_saved *sv = (gpu_saved *)calloc(1, sizeof *sv);
    if (!sv)
        return NULL;
    sv->st = st;
    sv->batch = batch;
    sv->n_local = st->layout->l1 - st->layout->l0;
    sv->n_slots = sv->n_local * LS_COUNT + HS_COUNT + ES_COUNT;
    sv->slot = (void **)calloc((size_t)sv->n_slots, sizeof *sv->slot);
    sv->slot_bytes = (size_t *)calloc((size_t)sv->n_slots, sizeof *sv->slot_bytes);
    sv->phase = (unsigned char *)calloc((size_t)sv->n_slots, 1);
    if (!sv->slot || !sv->slot_bytes || !sv->phase ||
        cudaMalloc((void **)&sv->loss_dev, sizeof(double)) != cudaSuccess) {
        cudaGetLastError();
        sv->loss_dev = NULL;
        gpu_saved_free(sv);
        return NULL;
    }
    slot_spec(sv);
    return sv;
}

static void release_phase(gpu_saved *sv, int mask)
{
    for (int s = 0; s < sv->n_slots; s++)
        if (sv->slot[s] && (sv->phase[s] & mask)) {
            cudaFreeAsync(sv->slot[s], sv->st->c->stream);
            sv->slot[s] = NULL;
            sv->bytes -= sv->slot_bytes[s];
        }
}

static int acquire_phase(gpu_saved *sv, int mask, zb_err *err)
{
    for (int s = 0; s < sv->n_slots; s++) {
        if (!(sv->phase[s] & mask) || sv->slot_bytes[s] == 0)
            continue;
        assert(sv->slot[s] == NULL);
        cudaError_t e = cudaMallocAsync(&sv->slot[s], sv->slot_bytes[s], sv->st->c->stream);
        if (e != cudaSuccess) {
            cudaGetLastError();
            sv->slot[s] = NULL;
            release_phase(sv, mask);
            return zb_fail(err, "out of device memory for activations (%zu bytes more): %s",
                           sv->slot_bytes[s], cudaGetErrorString(e));
        }
        sv->bytes += sv->slot_bytes[s];
    }
    return 0;
}

/* Drops the full-recompute copy of act_in, if held. */
static void release_rc_input(gpu_saved *sv)
{
    if (!sv->rc_input)
        return;
    cudaFreeAsync(sv->rc_input, sv->st->c->stream);
    sv->rc_input = NULL;
    sv->bytes -= sv->rc_bytes;
    sv->rc_bytes = 0;
}

/* Takes the slots of `mask` that are not held (a recompute's rebuild; the
 * held ones are what the level kept).  0, or -1 with err (the slots this
 * call took are freed again). */
static int acquire_missing(gpu_saved *sv, int mask, zb_err *err)
{
    unsigned char *took = (unsigned char *)calloc((size_t)sv->n_slots, 1);
    if (!took)
        return zb_fail(err, "out of host memory for a recompute");
    for (int s = 0; s < sv->n_slots; s++) {
        if (!(sv->phase[s] & mask) || sv->slot_bytes[s] == 0 || sv->slot[s])
            continue;
        cudaError_t e = cudaMallocAsync(&sv->slot[s], sv->slot_bytes[s], sv->st->c->stream);
        if (e != cudaSuccess) {
            cudaGetLastError();
            sv->slot[s] = NULL;
            for (int t = 0; t < s; t++)
                if (took[t]) {
                    cudaFreeAsync(sv->slot[t], sv->st->c->stream);
                    sv->slot[t] = NULL;
                    sv->bytes -= sv->slot_bytes[t];
                }
            free(took);
            return zb_fail(err, "recompute: out of device memory for activations (%zu bytes "
                           "more): %s", sv->slot_bytes[s], cudaGetErrorString(e));
        }
        took[s] = 1;
        sv->bytes += sv->slot_bytes[s];
    }
    free(took);
    return 0;
}

extern "C" void gpu_saved_set_recompute(gpu_saved *sv, int level)
{
    assert(sv->state == 0);
    assert(level >= LLAMA_RC_NONE && level <= LLAMA_RC_MLP);
    sv->recompute = level;
}

extern "C" void gpu_saved_free(gpu_saved *sv)
{
    if (!sv)
        return;
    if (sv->slot && sv->phase)
        release_phase(sv, PH_F_KEEP | PH_F_ONLY | PH_B_KEEP);
    release_rc_input(sv);
    if (sv->loss_dev)
        cudaFree(sv->loss_dev);
    free(sv->slot);
    free(sv->slot_bytes);
    free(sv->phase);
    free(sv);
}

extern "C" size_t gpu_saved_bytes(const gpu_saved *sv) { return sv ? sv->bytes : 0; }
extern "C" int gpu_saved_batch(const gpu_saved *sv) { return sv->batch; }

/* ---------------------------------------------------------------------- */
/* Forward                                                                 */
/* ---------------------------------------------------------------------- */

/* The memory block of local layer i, in place of the SwiGLU MLP (llama.c's
 * memory_forward): q = n2·Wq, the product-key lookup, the bag e, the gate
 * g = n2·Wsw, u = silu(g)⊙e, out = h + u·Wout (residual in the epilogue). */
static int memory_forward(gpu_stage *st, gpu_saved *sv, int i, zb_bf16 *out, zb_err *err)
{
    mem_shape ms = stage_mem_shape(st->layout);
    zb_cuda *c = st->c;
    int N = sv->batch * st->layout->cfg.seq_len, d = ms.d, v = ms.v_dim;
    zb_bf16 *n2 = LB(sv, i, LS_N2), *q = LB(sv, i, LS_MQ), *g = LB(sv, i, LS_MG);
    zb_bf16 *e = LB(sv, i, LS_ME), *u = LB(sv, i, LS_MU);
    int32_t *idx = (int32_t *)LSL(sv, i, LS_MIDX);
    float *w = LF(sv, i, LS_MW);
    if (zb_cuda_matmul_forward(c, q, n2, layer_w(st, i, LLAMA_T_MEM_QUERY), NULL, N, d,
                               ms.heads * ms.k_dim, err) ||
        zb_cuda_memory_lookup(c, idx, w, q, layer_w(st, i, LLAMA_T_MEM_KEYS), &ms, N, err) ||
        zb_cuda_memory_bag_forward(c, e, idx, w, layer_w(st, i, LLAMA_T_MEM_VALUES), &ms, N,
                                   err) ||
        zb_cuda_matmul_forward(c, g, n2, layer_w(st, i, LLAMA_T_MEM_SWILU), NULL, N, d, v, err) ||
        zb_cuda_swiglu_forward(c, u, g, e, (size_t)N * v, err) ||
        zb_cuda_matmul_forward(c, out, u, layer_w(st, i, LLAMA_T_MEM_OUT), LB(sv, i, LS_H), N,
                               v, d, err))
        return -1;
    return 0;
}

static int layer_forward(gpu_stage *st, gpu_saved *sv, int i, zb_bf16 *out, zb_err *err)
{
    const llama_stage *L = st->layout;
    const zb_model *m = &L->cfg;
    zb_cuda *c = st->c;
    int B = sv->batch, T = m->seq_len, N = B * T;
    int d = m->d_model, ff = m->d_ff, qd = L->q_dim, kvd = L->kv_dim, hd = L->head_dim;
    zb_bf16 *x = LB(sv, i, LS_X), *n1 = LB(sv, i, LS_N1), *q = LB(sv, i, LS_Q);
    zb_bf16 *k = LB(sv, i, LS_K), *v = LB(sv, i, LS_V), *att = LB(sv, i, LS_ATT);
    zb_bf16 *h = LB(sv, i, LS_H), *n2 = LB(sv, i, LS_N2), *a = LB(sv, i, LS_A);
    zb_bf16 *b = LB(sv, i, LS_B), *hs = LB(sv, i, LS_HS);
    if (zb_cuda_rmsnorm_forward(c, n1, LF(sv, i, LS_RSTD1), x,
                                layer_w(st, i, LLAMA_T_ATTN_NORM), N, d, err) ||
        zb_cuda_matmul_forward(c, q, n1, layer_w(st, i, LLAMA_T_WQ), NULL, N, d, qd, err) ||
        zb_cuda_matmul_forward(c, k, n1, layer_w(st, i, LLAMA_T_WK), NULL, N, d, kvd, err) ||
        zb_cuda_matmul_forward(c, v, n1, layer_w(st, i, LLAMA_T_WV), NULL, N, d, kvd, err) ||
        zb_cuda_rope(c, q, N, T, m->n_heads, hd, m->rope_theta, 0, err) ||
        zb_cuda_rope(c, k, N, T, m->n_kv_heads, hd, m->rope_theta, 0, err) ||
        zb_cuda_attention_forward(c, att, LF(sv, i, LS_LSE), q, k, v, B, T, m->n_heads,
                                  m->n_kv_heads, hd, err) ||
        /* h = x + att·wo, residual in the epilogue */
        zb_cuda_matmul_forward(c, h, att, layer_w(st, i, LLAMA_T_WO), x, N, qd, d, err) ||
        zb_cuda_rmsnorm_forward(c, n2, LF(sv, i, LS_RSTD2), h,
                                layer_w(st, i, LLAMA_T_MLP_NORM), N, d, err))
        return -1;
    if (local_is_memory(L, i))
        return memory_forward(st, sv, i, out, err);
    if (zb_cuda_matmul_forward(c, a, n2, layer_w(st, i, LLAMA_T_W1), NULL, N, d, ff, err) ||
        zb_cuda_matmul_forward(c, b, n2, layer_w(st, i, LLAMA_T_W3), NULL, N, d, ff, err) ||
        zb_cuda_swiglu_forward(c, hs, a, b, (size_t)N * ff, err) ||
        /* out = h + hs·w2 */
        zb_cuda_matmul_forward(c, out, hs, layer_w(st, i, LLAMA_T_W2), h, N, ff, d, err))
        return -1;
    return 0;
}

/* The forward's arithmetic once its slots are taken and the tokens and
 * targets (where the stage has them) are in ES_TOKENS and HS_TARGETS:
 * from act_in (device, stages without the embedding) through the layers
 * to act_out (stages without the head) or the loss sum.  F and the full
 * recompute's rerun both run exactly this.  0 or -1. */
static int forward_body(gpu_stage *st, gpu_saved *sv, const zb_bf16 *act_in, zb_bf16 *act_out,
                        zb_err *err)
{
    const llama_stage *L = st->layout;
    const zb_model *m = &L->cfg;
    zb_cuda *c = st->c;
    int N = sv->batch * m->seq_len, d = m->d_model, V = m->vocab;
    int final_norm = L->has_head || L->norm_only; /* the stream ends in HS_XF */
    zb_bf16 *x0 = sv->n_local > 0 ? LB(sv, 0, LS_X) : final_norm ? HB(sv, HS_XF) : act_out;
    int rc = 0;
    if (L->has_embedding)
        rc = zb_cuda_embedding_forward(c, x0, (const int32_t *)ESL(sv, ES_TOKENS),
                                       st->w + L->tensors[0].offset, N, d, err);
    else
        rc = zb_cuda_copy(c, x0, act_in, (size_t)N * d * 2, err);
    for (int i = 0; i < sv->n_local && rc == 0; i++) {
        zb_bf16 *out = i + 1 < sv->n_local ? LB(sv, i + 1, LS_X)
                       : final_norm ? HB(sv, HS_XF) : act_out;
        rc = layer_forward(st, sv, i, out, err);
    }
    if (rc == 0 && L->norm_only) { /* the head runs in the vocabulary passes */
        const llama_tensor *gf = &L->tensors[L->n_tensors - 1];
        assert(gf->kind == LLAMA_T_FINAL_NORM);
        rc = zb_cuda_rmsnorm_forward(c, act_out, HF(sv, HS_RSTD), HB(sv, HS_XF),
                                     st->w + gf->offset, N, d, err);
    }
    if (rc == 0 && L->has_head) {
        const llama_tensor *gf = &L->tensors[L->n_tensors - 2];
        const llama_tensor *H = &L->tensors[L->n_tensors - 1];
        const int32_t *tg = (const int32_t *)HSL(sv, HS_TARGETS);
        rc = zb_cuda_rmsnorm_forward(c, HB(sv, HS_NF), HF(sv, HS_RSTD), HB(sv, HS_XF),
                                     st->w + gf->offset, N, d, err) ||
             zb_cuda_matmul_forward(c, HB(sv, HS_LOGITS), HB(sv, HS_NF), st->w + H->offset,
                                    NULL, N, d, V, err) ||
             zb_cuda_crossentropy_forward(c, HF(sv, HS_LSE), HF(sv, HS_LOSSES),
                                          HB(sv, HS_LOGITS), tg, N, V, err) ||
             zb_cuda_sum_f64(c, sv->loss_dev, HF(sv, HS_LOSSES), (size_t)N, 0, err)
                 ? -1 : 0;
    }
    return rc;
}

/* The MLP block's slots of a layer: what MLP-level recompute drops after
 * F and rebuilds at B (LS_H and LS_RSTD2, the block's input and its norm
 * statistic, stay), as llama.c's mlp_slots. */
static const int mlp_slots[] = { LS_N2, LS_A, LS_B, LS_HS };
enum { MLP_SLOT_COUNT = sizeof mlp_slots / sizeof mlp_slots[0] };

/* Frees whichever MLP block slots are held. */
static void drop_mlp_blocks(gpu_saved *sv)
{
    for (int i = 0; i < sv->n_local; i++)
        for (int k = 0; !local_is_memory(sv->st->layout, i) && k < MLP_SLOT_COUNT; k++) {
            int s = i * LS_COUNT + mlp_slots[k];
            if (!sv->slot[s])
                continue;
            cudaFreeAsync(sv->slot[s], sv->st->c->stream);
            sv->slot[s] = NULL;
            sv->bytes -= sv->slot_bytes[s];
        }
}

/* MLP-level recompute at B: retakes the MLP block slots and reruns each
 * layer's norm, gate and up matmuls and SwiGLU exactly as layer_forward
 * issued them, leaving state 1.  0, or -1 with err (state 4 kept). */
static int rerun_mlp_blocks(gpu_stage *st, gpu_saved *sv, zb_err *err)
{
    const zb_model *m = &st->layout->cfg;
    zb_cuda *c = st->c;
    int N = sv->batch * m->seq_len, d = m->d_model, ff = m->d_ff;
    for (int i = 0; i < sv->n_local; i++)
        for (int k = 0; !local_is_memory(st->layout, i) && k < MLP_SLOT_COUNT; k++) {
            int s = i * LS_COUNT + mlp_slots[k];
            assert(!sv->slot[s]);
            if (cudaMallocAsync(&sv->slot[s], sv->slot_bytes[s], c->stream) != cudaSuccess) {
                cudaGetLastError();
                sv->slot[s] = NULL;
                drop_mlp_blocks(sv);
                return zb_fail(err, "GPU backward B: out of device memory recomputing the MLP "
                               "blocks");
            }
            sv->bytes += sv->slot_bytes[s];
        }
    for (int i = 0; i < sv->n_local; i++) {
        if (local_is_memory(st->layout, i)) /* memory layers keep their state */
            continue;
        zb_bf16 *n2 = LB(sv, i, LS_N2), *a = LB(sv, i, LS_A), *b = LB(sv, i, LS_B);
        if (zb_cuda_rmsnorm_forward(c, n2, LF(sv, i, LS_RSTD2), LB(sv, i, LS_H),
                                    layer_w(st, i, LLAMA_T_MLP_NORM), N, d, err) ||
            zb_cuda_matmul_forward(c, a, n2, layer_w(st, i, LLAMA_T_W1), NULL, N, d, ff, err) ||
            zb_cuda_matmul_forward(c, b, n2, layer_w(st, i, LLAMA_T_W3), NULL, N, d, ff, err) ||
            zb_cuda_swiglu_forward(c, LB(sv, i, LS_HS), a, b, (size_t)N * ff, err)) {
            drop_mlp_blocks(sv);
            return -1;
        }
    }
    sv->state = 1;
    return 0;
}

/* Frees every forward slot but the token and target ones (what a full
 * recompute reruns the forward from), leaving state 3. */
static void drop_forward_but_inputs(gpu_saved *sv)
{
    int keep_tok = emb_base(sv) + ES_TOKENS, keep_tg = head_base(sv) + HS_TARGETS;
    for (int s = 0; s < sv->n_slots; s++)
        if (sv->slot[s] && (sv->phase[s] & (PH_F_KEEP | PH_F_ONLY)) && s != keep_tok &&
            s != keep_tg) {
            cudaFreeAsync(sv->slot[s], sv->st->c->stream);
            sv->slot[s] = NULL;
            sv->bytes -= sv->slot_bytes[s];
        }
    sv->state = 3;
}

/* Full recompute after F: keeps the token and target slots (and a copy of
 * act_in when the stage has no embedding) and frees every other forward
 * slot, leaving state 3.  When the copy cannot be taken the full forward
 * state stays (state 1: correct, only larger), as llama.c does. */
static void keep_inputs_only(gpu_saved *sv, const zb_bf16 *act_in)
{
    const llama_stage *L = sv->st->layout;
    cudaStream_t str = sv->st->c->stream;
    size_t in_bytes = (size_t)sv->batch * L->cfg.seq_len * L->cfg.d_model * 2;
    if (!L->has_embedding) {
        if (cudaMallocAsync((void **)&sv->rc_input, in_bytes, str) != cudaSuccess) {
            cudaGetLastError();
            sv->rc_input = NULL;
            return;
        }
        if (cudaMemcpyAsync(sv->rc_input, act_in, in_bytes, cudaMemcpyDeviceToDevice, str)
            != cudaSuccess) {
            cudaGetLastError();
            cudaFreeAsync(sv->rc_input, str);
            sv->rc_input = NULL;
            return;
        }
        sv->rc_bytes = in_bytes;
        sv->bytes += in_bytes;
    }
    drop_forward_but_inputs(sv);
}

/* Full recompute at B: retakes the forward's slots and reruns the forward
 * from the kept inputs (its output, for a stage without the head, into a
 * scratch that is thrown away; the head stage's loss sum is rewritten
 * with the same value after its copy was queued), leaving state 1.  0, or
 * -1 with err (state 3 kept for a retry). */
static int rerun_forward(gpu_stage *st, gpu_saved *sv, zb_err *err)
{
    const llama_stage *L = st->layout;
    cudaStream_t str = st->c->stream;
    size_t out_bytes = (size_t)sv->batch * L->cfg.seq_len * L->cfg.d_model * 2;
    zb_bf16 *out = NULL;
    if (!L->has_head && cudaMallocAsync((void **)&out, out_bytes, str) != cudaSuccess) {
        cudaGetLastError();
        return zb_fail(err, "GPU backward B: out of device memory recomputing the forward");
    }
    int rc = acquire_missing(sv, PH_F_KEEP | PH_F_ONLY, err);
    if (rc == 0 && forward_body(st, sv, sv->rc_input, out, err) != 0) {
        drop_forward_but_inputs(sv); /* back to state 3, the kept inputs untouched */
        rc = -1;
    }
    if (out)
        cudaFreeAsync(out, str);
    if (rc != 0)
        return -1;
    release_rc_input(sv);
    sv->state = 1;
    return 0;
}

extern "C" int gpu_stage_forward(gpu_stage *st, gpu_saved *sv, const int32_t *tokens,
                                 const zb_bf16 *act_in, const int32_t *targets,
                                 zb_bf16 *act_out, zb_err *err)
{
    const llama_stage *L = st->layout;
    const zb_model *m = &L->cfg;
    zb_cuda *c = st->c;
    assert(sv && sv->st == st);
    assert(L->has_embedding ? tokens != NULL : act_in != NULL);
    assert(L->has_head ? targets != NULL : act_out != NULL);
    if (sv->state != 0)
        return zb_fail(err, "GPU forward: saved state still holds a micro-batch");
    int B = sv->batch, T = m->seq_len, N = B * T, V = m->vocab;
    if (L->has_embedding)
        for (int n = 0; n < N; n++)
            if (tokens[n] < 0 || tokens[n] >= V)
                return zb_fail(err, "GPU forward: token %d at position %d outside the "
                               "vocabulary [0, %d)", tokens[n], n, V);
    if (L->has_head)
        for (int n = 0; n < N; n++)
            if (targets[n] < 0 || targets[n] >= V)
                return zb_fail(err, "GPU forward: target %d at position %d outside the "
                               "vocabulary [0, %d)", targets[n], n, V);
    if (acquire_phase(sv, PH_F_KEEP | PH_F_ONLY, err) != 0)
        return -1;
    int rc = 0;
    if (L->has_embedding)
        rc = zb_cuda_upload(c, ESL(sv, ES_TOKENS), tokens, sizeof(int32_t) * (size_t)N, err);
    if (rc == 0 && L->has_head)
        rc = zb_cuda_upload(c, HSL(sv, HS_TARGETS), targets, sizeof(int32_t) * (size_t)N, err);
    if (rc == 0)
        rc = forward_body(st, sv, act_in, act_out, err);
    if (rc != 0) {
        release_phase(sv, PH_F_KEEP | PH_F_ONLY);
        return -1;
    }
    sv->state = 1;
    if (sv->recompute == LLAMA_RC_FULL) {
        keep_inputs_only(sv, act_in);
    } else if (sv->recompute == LLAMA_RC_MLP && sv->n_local > 0) {
        drop_mlp_blocks(sv);
        sv->state = 4;
    }
    return 0;
}

extern "C" int gpu_saved_loss(gpu_saved *sv, double *loss, zb_err *err)
{
    const llama_stage *L = sv->st->layout;
    if (!L->has_head || sv->state == 0)
        return zb_fail(err, "GPU loss: no forward of a head stage held");
    double sum = 0.0;
    if (zb_cuda_download(sv->st->c, &sum, sv->loss_dev, sizeof sum, err) != 0)
        return -1;
    *loss = sum / ((double)sv->batch * L->cfg.seq_len);
    return 0;
}

extern "C" int gpu_saved_copy_loss_sum(gpu_saved *sv, double *dst, zb_err *err)
{
    if (!sv->st->layout->has_head || sv->state == 0)
        return zb_fail(err, "GPU loss: no forward of a head stage held");
    return zb_cuda_copy(sv->st->c, dst, sv->loss_dev, sizeof(double), err);
}

/* ---------------------------------------------------------------------- */
/* Backward B                                                              */
/* ---------------------------------------------------------------------- */

typedef struct b_scratch {
    zb_bf16 *att;  /* [N,qd] grad of the attention output */
    zb_bf16 *ffb;  /* [N,ff] grad of silu(a)·b */
    void *attn;    /* attention backward scratch (D = dO·O per row) */
} b_scratch;

/* B of the memory block of local layer i (llama.c's memory_backward_b):
 * from LS_DOUT and the memory F slots, fills LS_MDG, LS_MDE, LS_MDS and
 * LS_MDQ and writes LS_DN2 = dq·Wqᵀ + dg·Wswᵀ.  s->ffb is [N, max(ff, v)]. */
static int memory_backward_b(gpu_stage *st, gpu_saved *sv, int i, const b_scratch *s,
                             zb_err *err)
{
    mem_shape ms = stage_mem_shape(st->layout);
    zb_cuda *c = st->c;
    int N = sv->batch * st->layout->cfg.seq_len, d = ms.d, v = ms.v_dim;
    zb_bf16 *dg = LB(sv, i, LS_MDG), *de = LB(sv, i, LS_MDE), *dq = LB(sv, i, LS_MDQ);
    if (/* out = h + u·Wout, u = silu(g)⊙e */
        zb_cuda_matmul_backward_b(c, s->ffb, LB(sv, i, LS_DOUT),
                                  layer_w(st, i, LLAMA_T_MEM_OUT), N, v, d, 0, err) ||
        zb_cuda_swiglu_backward(c, dg, de, s->ffb, LB(sv, i, LS_MG), LB(sv, i, LS_ME),
                                (size_t)N * v, err) ||
        zb_cuda_memory_backward_b(c, LF(sv, i, LS_MDS), dq, de, (const int32_t *)LSL(sv, i, LS_MIDX),
                                  LF(sv, i, LS_MW), layer_w(st, i, LLAMA_T_MEM_VALUES),
                                  layer_w(st, i, LLAMA_T_MEM_KEYS), &ms, N, err) ||
        /* q = n2·Wq and g = n2·Wsw both read n2 */
        zb_cuda_matmul_backward_b(c, LB(sv, i, LS_DN2), dq, layer_w(st, i, LLAMA_T_MEM_QUERY),
                                  N, d, ms.heads * ms.k_dim, 0, err) ||
        zb_cuda_matmul_backward_b(c, LB(sv, i, LS_DN2), dg, layer_w(st, i, LLAMA_T_MEM_SWILU),
                                  N, d, v, 1, err))
        return -1;
    return 0;
}

static int layer_backward_b(gpu_stage *st, gpu_saved *sv, int i, zb_bf16 *dx,
                            const b_scratch *s, zb_err *err)
{
    const llama_stage *L = st->layout;
    const zb_model *m = &L->cfg;
    zb_cuda *c = st->c;
    int B = sv->batch, T = m->seq_len, N = B * T;
    int d = m->d_model, ff = m->d_ff, qd = L->q_dim, kvd = L->kv_dim, hd = L->head_dim;
    zb_bf16 *dout = LB(sv, i, LS_DOUT), *da = LB(sv, i, LS_DA), *db = LB(sv, i, LS_DB);
    zb_bf16 *dn2 = LB(sv, i, LS_DN2), *dh = LB(sv, i, LS_DH), *dq = LB(sv, i, LS_DQ);
    zb_bf16 *dk = LB(sv, i, LS_DK), *dv = LB(sv, i, LS_DV), *dn1 = LB(sv, i, LS_DN1);
    if (local_is_memory(L, i) ? memory_backward_b(st, sv, i, s, err) != 0
        : (/* MLP: out = h + (silu(a)⊙b)·w2 */
           zb_cuda_matmul_backward_b(c, s->ffb, dout, layer_w(st, i, LLAMA_T_W2), N, ff, d, 0,
                                     err) ||
           zb_cuda_swiglu_backward(c, da, db, s->ffb, LB(sv, i, LS_A), LB(sv, i, LS_B),
                                   (size_t)N * ff, err) ||
           zb_cuda_matmul_backward_b(c, dn2, da, layer_w(st, i, LLAMA_T_W1), N, d, ff, 0, err) ||
           zb_cuda_matmul_backward_b(c, dn2, db, layer_w(st, i, LLAMA_T_W3), N, d, ff, 1, err)))
        return -1;
    if (/* dh = dout + rmsnorm_B(dn2) */
        zb_cuda_rmsnorm_backward_b(c, dh, dn2, LB(sv, i, LS_H), LF(sv, i, LS_RSTD2),
                                   layer_w(st, i, LLAMA_T_MLP_NORM), dout, N, d, err) ||
        /* attention: h = x + att·wo */
        zb_cuda_matmul_backward_b(c, s->att, dh, layer_w(st, i, LLAMA_T_WO), N, qd, d, 0, err) ||
        zb_cuda_attention_backward(c, dq, dk, dv, s->att, LB(sv, i, LS_Q), LB(sv, i, LS_K),
                                   LB(sv, i, LS_V), LB(sv, i, LS_ATT), LF(sv, i, LS_LSE),
                                   s->attn, B, T, m->n_heads, m->n_kv_heads, hd, err) ||
        zb_cuda_rope(c, dq, N, T, m->n_heads, hd, m->rope_theta, 1, err) ||
        zb_cuda_rope(c, dk, N, T, m->n_kv_heads, hd, m->rope_theta, 1, err) ||
        zb_cuda_matmul_backward_b(c, dn1, dq, layer_w(st, i, LLAMA_T_WQ), N, d, qd, 0, err) ||
        zb_cuda_matmul_backward_b(c, dn1, dk, layer_w(st, i, LLAMA_T_WK), N, d, kvd, 1, err) ||
        zb_cuda_matmul_backward_b(c, dn1, dv, layer_w(st, i, LLAMA_T_WV), N, d, kvd, 1, err) ||
        /* dx = dh + rmsnorm_B(dn1) */
        zb_cuda_rmsnorm_backward_b(c, dx, dn1, LB(sv, i, LS_X), LF(sv, i, LS_RSTD1),
                                   layer_w(st, i, LLAMA_T_ATTN_NORM), dh, N, d, err))
        return -1;
    return 0;
}

extern "C" int gpu_stage_backward_b(gpu_stage *st, gpu_saved *sv, float dloss,
                                    const zb_bf16 *dy_in, zb_bf16 *dx_out, zb_err *err)
{
    const llama_stage *L = st->layout;
    const zb_model *m = &L->cfg;
    zb_cuda *c = st->c;
    assert(sv && sv->st == st);
    assert(L->has_head || dy_in != NULL);
    assert(L->has_embedding || dx_out != NULL);
    if (sv->state == 3 && rerun_forward(st, sv, err) != 0)
        return -1;
    if (sv->state == 4 && rerun_mlp_blocks(st, sv, err) != 0)
        return -1;
    if (sv->state != 1)
        return zb_fail(err, "GPU backward B: saved state holds no forward pass");
    int B = sv->batch, T = m->seq_len, N = B * T, d = m->d_model, V = m->vocab;
    b_scratch s = { NULL, NULL, NULL };
    cudaStream_t str = c->stream;
    /* a memory layer's u gradient shares the [N, d_ff] scratch: sized for both */
    size_t ffw = (size_t)m->d_ff;
    if (L->n_memory > 0 && (size_t)m->memory.value_dim > ffw)
        ffw = (size_t)m->memory.value_dim;
    size_t att_bytes = (size_t)N * L->q_dim * 2, ffb_bytes = (size_t)N * ffw * 2;
    size_t attn_bytes = zb_cuda_attention_scratch_bytes(B, T, m->n_heads);
    if (sv->n_local > 0 &&
        (cudaMallocAsync((void **)&s.att, att_bytes, str) != cudaSuccess ||
         cudaMallocAsync((void **)&s.ffb, ffb_bytes, str) != cudaSuccess ||
         cudaMallocAsync(&s.attn, attn_bytes, str) != cudaSuccess)) {
        cudaGetLastError();
        if (s.att)
            cudaFreeAsync(s.att, str);
        if (s.ffb)
            cudaFreeAsync(s.ffb, str);
        return zb_fail(err, "GPU backward B: out of device memory for scratch");
    }
    if (acquire_phase(sv, PH_B_KEEP, err) != 0) {
        if (s.att) {
            cudaFreeAsync(s.att, str);
            cudaFreeAsync(s.ffb, str);
            cudaFreeAsync(s.attn, str);
        }
        return -1;
    }
    zb_bf16 *dx_emb = L->has_embedding ? (zb_bf16 *)ESL(sv, ES_DX) : dx_out;
    zb_bf16 *dstream = sv->n_local > 0 ? LB(sv, sv->n_local - 1, LS_DOUT) : dx_emb;
    int rc = 0;
    if (L->has_head) {
        const llama_tensor *gf = &L->tensors[L->n_tensors - 2];
        const llama_tensor *H = &L->tensors[L->n_tensors - 1];
        rc = zb_cuda_crossentropy_backward(c, HB(sv, HS_DLOGITS), HB(sv, HS_LOGITS),
                                           HF(sv, HS_LSE), (const int32_t *)HSL(sv, HS_TARGETS),
                                           dloss, N, V, err) ||
             zb_cuda_matmul_backward_b(c, HB(sv, HS_DNF), HB(sv, HS_DLOGITS), st->w + H->offset,
                                       N, d, V, 0, err) ||
             zb_cuda_rmsnorm_backward_b(c, dstream, HB(sv, HS_DNF), HB(sv, HS_XF),
                                        HF(sv, HS_RSTD), st->w + gf->offset, NULL, N, d, err)
                 ? -1 : 0;
    } else if (L->norm_only) { /* dy_in is the final norm's output gradient; W reads it */
        const llama_tensor *gf = &L->tensors[L->n_tensors - 1];
        rc = zb_cuda_copy(c, HB(sv, HS_DNF), dy_in, (size_t)N * d * 2, err) ||
             zb_cuda_rmsnorm_backward_b(c, dstream, HB(sv, HS_DNF), HB(sv, HS_XF),
                                        HF(sv, HS_RSTD), st->w + gf->offset, NULL, N, d, err)
                 ? -1 : 0;
    } else {
        rc = zb_cuda_copy(c, dstream, dy_in, (size_t)N * d * 2, err);
    }
    for (int i = sv->n_local - 1; i >= 0 && rc == 0; i--) {
        zb_bf16 *dx = i > 0 ? LB(sv, i - 1, LS_DOUT) : dx_emb;
        rc = layer_backward_b(st, sv, i, dx, &s, err);
    }
    if (s.att) {
        cudaFreeAsync(s.att, str);
        cudaFreeAsync(s.ffb, str);
        cudaFreeAsync(s.attn, str);
    }
    if (rc != 0) {
        release_phase(sv, PH_B_KEEP);
        return -1;
    }
    release_phase(sv, PH_F_ONLY);
    sv->state = 2;
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Backward W                                                              */
/* ---------------------------------------------------------------------- */

extern "C" int gpu_stage_backward_w(gpu_stage *st, gpu_saved *sv, zb_err *err)
{
    return gpu_stage_backward_w_into(st, sv, st->grads, err);
}

extern "C" int gpu_stage_backward_w_into(gpu_stage *st, gpu_saved *sv, float *grads, zb_err *err)
{
    const llama_stage *L = st->layout;
    const zb_model *m = &L->cfg;
    zb_cuda *c = st->c;
    assert(sv && sv->st == st);
    if (sv->state != 2)
        return zb_fail(err, "GPU backward W: saved state holds no B pass");
    int N = sv->batch * m->seq_len, d = m->d_model, V = m->vocab;
    int ff = m->d_ff, qd = L->q_dim, kvd = L->kv_dim;
    mem_shape ms = stage_mem_shape(L);
    int rc = 0;
    for (int t = 0; t < L->n_tensors && rc == 0; t++) {
        const llama_tensor *ten = &L->tensors[t];
        int i = ten->layer - L->l0;
        float *g = grads + ten->offset;
        switch (ten->kind) {
        case LLAMA_T_EMBEDDING:
            rc = zb_cuda_embedding_backward_w(c, g, (const int32_t *)ESL(sv, ES_TOKENS),
                                              (const zb_bf16 *)ESL(sv, ES_DX), N, d, V, err);
            break;
        case LLAMA_T_ATTN_NORM:
            rc = zb_cuda_rmsnorm_backward_w(c, g, LB(sv, i, LS_DN1), LB(sv, i, LS_X),
                                            LF(sv, i, LS_RSTD1), N, d, err);
            break;
        case LLAMA_T_WQ:
            rc = zb_cuda_matmul_backward_w(c, g, LB(sv, i, LS_N1), LB(sv, i, LS_DQ), N, d, qd, err);
            break;
        case LLAMA_T_WK:
            rc = zb_cuda_matmul_backward_w(c, g, LB(sv, i, LS_N1), LB(sv, i, LS_DK), N, d, kvd, err);
            break;
        case LLAMA_T_WV:
            rc = zb_cuda_matmul_backward_w(c, g, LB(sv, i, LS_N1), LB(sv, i, LS_DV), N, d, kvd, err);
            break;
        case LLAMA_T_WO:
            rc = zb_cuda_matmul_backward_w(c, g, LB(sv, i, LS_ATT), LB(sv, i, LS_DH), N, qd, d, err);
            break;
        case LLAMA_T_MLP_NORM:
            rc = zb_cuda_rmsnorm_backward_w(c, g, LB(sv, i, LS_DN2), LB(sv, i, LS_H),
                                            LF(sv, i, LS_RSTD2), N, d, err);
            break;
        case LLAMA_T_W1:
            rc = zb_cuda_matmul_backward_w(c, g, LB(sv, i, LS_N2), LB(sv, i, LS_DA), N, d, ff, err);
            break;
        case LLAMA_T_W3:
            rc = zb_cuda_matmul_backward_w(c, g, LB(sv, i, LS_N2), LB(sv, i, LS_DB), N, d, ff, err);
            break;
        case LLAMA_T_W2:
            rc = zb_cuda_matmul_backward_w(c, g, LB(sv, i, LS_HS), LB(sv, i, LS_DOUT), N, ff, d, err);
            break;
        case LLAMA_T_FINAL_NORM:
            rc = zb_cuda_rmsnorm_backward_w(c, g, HB(sv, HS_DNF), HB(sv, HS_XF), HF(sv, HS_RSTD),
                                            N, d, err);
            break;
        case LLAMA_T_LM_HEAD:
            rc = zb_cuda_matmul_backward_w(c, g, HB(sv, HS_NF), HB(sv, HS_DLOGITS), N, d, V, err);
            break;
        case LLAMA_T_MEM_QUERY:
            rc = zb_cuda_matmul_backward_w(c, g, LB(sv, i, LS_N2), LB(sv, i, LS_MDQ), N, d,
                                           ms.heads * ms.k_dim, err);
            break;
        case LLAMA_T_MEM_KEYS:
            rc = zb_cuda_memory_keys_backward_w(c, g, LF(sv, i, LS_MDS), LB(sv, i, LS_MQ),
                                                (const int32_t *)LSL(sv, i, LS_MIDX), &ms, N,
                                                err);
            break;
        case LLAMA_T_MEM_SWILU:
            rc = zb_cuda_matmul_backward_w(c, g, LB(sv, i, LS_N2), LB(sv, i, LS_MDG), N, d,
                                           ms.v_dim, err);
            break;
        case LLAMA_T_MEM_OUT:
            rc = zb_cuda_matmul_backward_w(c, g, LB(sv, i, LS_MU), LB(sv, i, LS_DOUT), N,
                                           ms.v_dim, d, err);
            break;
        case LLAMA_T_MEM_VALUES:
            /* sparse: each memory layer reading this table adds its touched
             * rows, in layer order (one layer unless the table is shared) */
            for (int j = 0; j < sv->n_local && rc == 0; j++)
                if (local_is_memory(L, j) && layer_tensor(L, j, LLAMA_T_MEM_VALUES) == ten)
                    rc = zb_cuda_memory_values_backward_w(c, g, (const int32_t *)LSL(sv, j, LS_MIDX),
                                                          LF(sv, j, LS_MW), LB(sv, j, LS_MDE),
                                                          &ms, N, err);
            break;
        default:
            assert(0 && "bad tensor kind");
        }
    }
    if (rc != 0)
        return -1;
    release_phase(sv, PH_F_KEEP | PH_F_ONLY | PH_B_KEEP);
    assert(sv->bytes == 0);
    sv->state = 0;
    return 0;
}
