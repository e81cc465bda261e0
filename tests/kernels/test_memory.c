/*
 * test_memory.c: the product-key memory layer (kernels/cpu/memory_layer.h)
 * inside the stage API.
 *
 *   - golden: the whole model against tools/golden/make_golden_memory.py
 *     (independent jax.numpy, jax.lax.top_k, jax.grad in float64): logits,
 *     loss, every gradient; for the unshared config every layer as its own
 *     stage (output, dX, weight gradients); the shared config also shows
 *     that a stage holding only some of the memory layers is refused;
 *   - finite differences of the fp32 loss for every memory tensor, the
 *     coordinate with the largest gradient plus two others (a coordinate
 *     whose ±h changes the top-k selection is a kink, detected by two step
 *     sizes disagreeing, and replaced by the next one);
 *   - the sparse value gradient: rows no token read stay exactly 0, the
 *     touched rows equal a brute-force dense sum, and at most N·H·k rows
 *     are touched;
 *   - a 2-stage split with W deferred gives the single stage's bits;
 *   - the saved bytes after F, B and W of a memory layer, counted by hand;
 *   - the tiny-mem preset's parameter count includes the tables.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/llama.h"
#include "kernels/cpu/memory_layer.h"
#include "tests/kernels/kt_common.h"

static const char *const golden_files[] = { "mem_l2_d16.bin", "memshared_l3_d16.bin" };

#define TOL_ACT 1e-5
#define TOL_GRAD 3e-5

/* Loads a memory golden: kt_golden_load plus its "memory" record. */
static void load(int i, kt_golden *g)
{
    char why[512];
    ck_assert_msg(kt_golden_load(golden_files[i], g, why, sizeof why) == 0, "%s", why);
    const kt_record *r = kt_find(g, "memory");
    ck_assert_ptr_nonnull(r);
    zb_memory *mm = &g->model.memory;
    mm->n_layers = (int)r->data[0];
    ck_assert_uint_eq(r->count, (uint32_t)(mm->n_layers + 7));
    for (int l = 0; l < mm->n_layers; l++)
        mm->layers[l] = (int)r->data[1 + l];
    const float *t = r->data + 1 + mm->n_layers;
    mm->n_keys = (int)lrint(sqrt(t[0]));
    mm->topk = (int)t[1];
    mm->heads = (int)t[2];
    mm->k_dim = (int)t[3];
    mm->value_dim = (int)t[4];
    mm->shared_values = (int)t[5];
}

static void check_grads(const char *file, const llama_stage *st, const float *grads,
                        const llama_stage *whole, const float *golden_grads)
{
    for (int t = 0; t < st->n_tensors; t++) {
        const llama_tensor *ten = llama_stage_tensor(st, t);
        const llama_tensor *ref = llama_stage_find(whole, ten->kind, ten->layer);
        ck_assert_ptr_nonnull(ref);
        ck_assert_uint_eq(ten->count, ref->count);
        double e = kt_rel_err(grads + ten->offset, golden_grads + ref->offset, ten->count,
                              1e-6);
        if (getenv("KT_VERBOSE"))
            printf("%s: %-22s rel err %.2e\n", file, ten->name, e);
        ck_assert_msg(e < TOL_GRAD, "%s: grad %s rel err %.3g", file, ten->name, e);
    }
}

START_TEST(test_golden_whole)
{
    kt_golden g;
    load(_i, &g);
    const zb_model *m = &g.model;
    int N = g.batch * m->seq_len;
    zb_err err = {{0}};
    llama_stage st;
    ck_assert_int_eq(llama_stage_init(&st, m, 0, m->n_layers, 1, 1, &err), 0);
    const kt_record *params = kt_find(&g, "params");
    ck_assert_uint_eq(params->count, llama_stage_num_params(&st));
    ck_assert_int_eq(st.n_memory, m->memory.n_layers);
    int32_t *tok = kt_ints(kt_find(&g, "tokens"));
    int32_t *tgt = kt_ints(kt_find(&g, "targets"));
    float *logits = malloc(sizeof(float) * (size_t)N * m->vocab);
    float *grads = calloc(st.n_params, sizeof(float));
    llama_saved *sv = llama_saved_new(&st, g.batch);
    float loss = 0;
    ck_assert_int_eq(llama_stage_forward(&st, params->data, tok, NULL, tgt, sv, NULL, &loss,
                                         logits, &err), 0);
    double want = kt_find(&g, "loss")->data[0];
    double e = kt_rel_err(logits, kt_find(&g, "logits")->data, (size_t)N * m->vocab, 1e-6);
    if (getenv("KT_VERBOSE"))
        printf("%s: loss %.7f (jax %.7f), logits rel err %.2e\n", golden_files[_i], loss,
               want, e);
    ck_assert_msg(fabs(loss - want) < 1e-5 * fabs(want), "%s: loss %.7f want %.7f",
                  golden_files[_i], loss, want);
    ck_assert_msg(e < TOL_ACT, "%s: logits rel err %.3g", golden_files[_i], e);
    ck_assert_int_eq(llama_stage_backward(&st, params->data, sv, 1.0f, NULL, NULL, grads,
                                          &err), 0);
    check_grads(golden_files[_i], &st, grads, &st, kt_find(&g, "grads")->data);
    /* the comparison bites: a perturbed value-table gradient fails it */
    const llama_tensor *vt = llama_stage_find(&st, LLAMA_T_MEM_VALUES, m->memory.layers[0]);
    ck_assert_ptr_nonnull(vt);
    size_t big = 0;
    for (size_t j = 0; j < vt->count; j++)
        if (fabsf(grads[vt->offset + j]) > fabsf(grads[vt->offset + big]))
            big = j;
    grads[vt->offset + big] *= 1.01f;
    ck_assert(kt_rel_err(grads + vt->offset, kt_find(&g, "grads")->data + vt->offset,
                         vt->count, 1e-6) > TOL_GRAD);
    llama_saved_free(sv);
    free(logits);
    free(grads);
    free(tok);
    free(tgt);
    llama_stage_free(&st);
    kt_golden_free(&g);
}
END_TEST

static float *slice_params(const llama_stage *st, const llama_stage *whole, const float *all)
{
    float *p = malloc(sizeof(float) * st->n_params);
    for (int t = 0; t < st->n_tensors; t++) {
        const llama_tensor *ten = llama_stage_tensor(st, t);
        const llama_tensor *ref = llama_stage_find(whole, ten->kind, ten->layer);
        memcpy(p + ten->offset, all + ref->offset, sizeof(float) * ten->count);
    }
    return p;
}

/* Every layer of the unshared golden as its own stage. */
START_TEST(test_golden_layers)
{
    kt_golden g;
    load(0, &g);
    const zb_model *m = &g.model;
    int L = m->n_layers, N = g.batch * m->seq_len;
    size_t Nd = (size_t)N * m->d_model;
    zb_err err = {{0}};
    llama_stage whole;
    ck_assert_int_eq(llama_stage_init(&whole, m, 0, L, 1, 1, &err), 0);
    const float *all = kt_find(&g, "params")->data;
    const float *acts = kt_find(&g, "acts")->data, *dacts = kt_find(&g, "dacts")->data;
    float *out = malloc(sizeof(float) * Nd), *dx = malloc(sizeof(float) * Nd);
    for (int l = 0; l < L; l++) {
        llama_stage st;
        ck_assert_int_eq(llama_stage_init(&st, m, l, l + 1, 0, 0, &err), 0);
        float *p = slice_params(&st, &whole, all);
        float *gr = calloc(st.n_params, sizeof(float));
        llama_saved *sv = llama_saved_new(&st, g.batch);
        ck_assert_int_eq(llama_stage_forward(&st, p, NULL, acts + l * Nd, NULL, sv, out, NULL,
                                             NULL, &err), 0);
        double e = kt_rel_err(out, acts + (l + 1) * Nd, Nd, 1e-6);
        ck_assert_msg(e < TOL_ACT, "layer %d output rel err %.3g", l, e);
        ck_assert_int_eq(llama_stage_backward_b(&st, p, sv, 0, dacts + (l + 1) * Nd, dx, &err),
                         0);
        e = kt_rel_err(dx, dacts + l * Nd, Nd, 1e-6);
        ck_assert_msg(e < TOL_GRAD, "layer %d dX rel err %.3g", l, e);
        ck_assert_int_eq(llama_stage_backward_w(&st, sv, gr, &err), 0);
        check_grads(golden_files[0], &st, gr, &whole, kt_find(&g, "grads")->data);
        llama_saved_free(sv);
        free(p);
        free(gr);
        llama_stage_free(&st);
    }
    free(out);
    free(dx);
    llama_stage_free(&whole);
    kt_golden_free(&g);
}
END_TEST

/* A shared value table cannot be split over stages: clear refusal. */
START_TEST(test_shared_split_refused)
{
    kt_golden g;
    load(1, &g);
    zb_err err = {{0}};
    llama_stage st;
    ck_assert_int_eq(llama_stage_init(&st, &g.model, 0, 1, 1, 0, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "shared memory value table"));
    ck_assert_int_eq(llama_stage_init(&st, &g.model, 0, 3, 1, 0, &err), 0);
    ck_assert_int_ge(st.values_tensor, 0);
    llama_stage_free(&st);
    kt_golden_free(&g);
}
END_TEST

/* A small memory model for the C-only checks. */
static zb_model mem_model(void)
{
    zb_model m = kt_model(2, 16, 2, 2, 24, 11, 6);
    m.memory.n_layers = 1;
    m.memory.layers[0] = 1;
    m.memory.n_keys = 6;
    m.memory.topk = 3;
    m.memory.heads = 2;
    m.memory.k_dim = 8;
    m.memory.value_dim = 10;
    return m;
}

static float loss_at(const llama_stage *st, const float *p, llama_saved *sv, const int32_t *tok,
                     const int32_t *tgt)
{
    zb_err err = {{0}};
    float loss = 0;
    ck_assert_int_eq(llama_stage_forward(st, p, tok, NULL, tgt, sv, NULL, &loss, NULL, &err), 0);
    llama_saved_reset(sv);
    return loss;
}

START_TEST(test_finite_differences)
{
    zb_model m = mem_model();
    zb_err err = {{0}};
    llama_stage st;
    ck_assert_int_eq(llama_stage_init(&st, &m, 0, 2, 1, 1, &err), 0);
    float *p = malloc(sizeof(float) * st.n_params);
    float *g = calloc(st.n_params, sizeof(float));
    llama_stage_init_params(&st, p, 5);
    for (int t = 0; t < st.n_tensors; t++) { /* weights large enough to matter */
        const llama_tensor *ten = &st.tensors[t];
        float scale = ten->kind == LLAMA_T_MEM_VALUES ? 3.0f
                      : ten->kind >= LLAMA_T_MEM_QUERY ? 2.0f : ten->rows > 1 ? 10.0f : 1.0f;
        for (size_t i = 0; i < ten->count; i++)
            p[ten->offset + i] *= scale;
    }
    int B = 2, N = B * m.seq_len;
    int32_t tok[12], tgt[12];
    for (int n = 0; n < N; n++) {
        tok[n] = (n * 5 + 2) % m.vocab;
        tgt[n] = (n * 3 + 1) % m.vocab;
    }
    llama_saved *sv = llama_saved_new(&st, B);
    float loss;
    ck_assert_int_eq(llama_stage_forward(&st, p, tok, NULL, tgt, sv, NULL, &loss, NULL, &err), 0);
    ck_assert_int_eq(llama_stage_backward(&st, p, sv, 1.0f, NULL, NULL, g, &err), 0);
    double worst = 0;
    int checked_kinds = 0;
    for (int t = 0; t < st.n_tensors; t++) {
        const llama_tensor *ten = &st.tensors[t];
        if (ten->kind < LLAMA_T_MEM_QUERY && !(ten->kind == LLAMA_T_MLP_NORM && ten->layer == 1))
            continue;
        const float *gt = g + ten->offset;
        size_t best = 0;
        double gmax = 0;
        for (size_t i = 0; i < ten->count; i++)
            if (fabs(gt[i]) > gmax) {
                gmax = fabs(gt[i]);
                best = i;
            }
        ck_assert_msg(gmax > 1e-5, "%s: gradient is zero", ten->name);
        int good = 0;
        /* the largest coordinate, then a walk through the tensor */
        for (size_t k = 0; k < 40 && good < 3; k++) {
            size_t i = k == 0 ? best : (best + k * 7919) % ten->count;
            if (k > 0 && fabs(gt[i]) < 0.05 * gmax)
                continue; /* an untouched value row or a tiny entry: skip */
            float *x = &p[ten->offset + i];
            float keep = *x;
            double fd[2];
            float hs[2] = { 2e-3f, 1e-3f };
            for (int h = 0; h < 2; h++) {
                *x = keep + hs[h];
                double lp = loss_at(&st, p, sv, tok, tgt);
                *x = keep - hs[h];
                double lm = loss_at(&st, p, sv, tok, tgt);
                *x = keep;
                fd[h] = (lp - lm) / (2.0 * hs[h]);
            }
            if (fabs(fd[0] - fd[1]) > 0.05 * gmax)
                continue; /* the selection changed inside ±h: a kink */
            double rel = fabs(fd[1] - gt[i]) / gmax;
            if (rel > worst)
                worst = rel;
            ck_assert_msg(rel < 2e-2, "%s[%zu]: analytic %.6g, fd %.6g (rel %.3g)", ten->name,
                          i, gt[i], fd[1], rel);
            good++;
        }
        ck_assert_msg(good >= 1, "%s: no smooth coordinate found", ten->name);
        checked_kinds++;
    }
    ck_assert_int_eq(checked_kinds, 6); /* the memory layer's norm + its five tensors */
    if (getenv("KT_VERBOSE"))
        printf("memory fd: worst rel err %.3g\n", worst);
    llama_saved_free(sv);
    free(p);
    free(g);
    llama_stage_free(&st);
}
END_TEST

/* The value gradient is a scatter-add over the rows read, nothing else. */
START_TEST(test_sparse_values)
{
    mem_shape s = { 4, 2, 4, 5, 2, 3 };
    int N = 7, M = N * s.heads * s.topk, slots = s.n_keys * s.n_keys;
    int32_t *idx = malloc(sizeof(int32_t) * M);
    float *w = malloc(sizeof(float) * M), *de = malloc(sizeof(float) * N * s.v_dim);
    for (int e = 0; e < M; e++) {
        idx[e] = (e * 7 + (e / 3)) % 9; /* repeats: rows read several times */
        w[e] = 0.1f + 0.01f * e;
    }
    for (int i = 0; i < N * s.v_dim; i++)
        de[i] = (float)((i * 37) % 11) - 5.0f;
    float *dV = calloc((size_t)slots * s.v_dim, sizeof(float));
    void *scratch = malloc(kern_memory_values_scratch_bytes(&s, N));
    int rows = kern_memory_values_backward_w(dV, idx, w, de, &s, N, scratch);
    ck_assert_int_le(rows, M);
    int touched = 0;
    for (int r = 0; r < slots; r++) {
        int read = 0;
        for (int c = 0; c < s.v_dim; c++) {
            double want = 0;
            for (int e = 0; e < M; e++)
                if (idx[e] == r) {
                    want += (double)w[e] * de[(e / (s.heads * s.topk)) * s.v_dim + c];
                    read = 1;
                }
            if (!read)
                ck_assert(dV[(size_t)r * s.v_dim + c] == 0.0f);
            else
                ck_assert_msg(fabs(dV[(size_t)r * s.v_dim + c] - want) < 1e-5 * (1 + fabs(want)),
                              "row %d col %d", r, c);
        }
        touched += read;
    }
    ck_assert_int_eq(rows, touched);
    ck_assert_int_eq(touched, 9);
    free(idx);
    free(w);
    free(de);
    free(dV);
    free(scratch);
}
END_TEST

/* Two stages with W deferred after both micro-batches' B == one stage. */
START_TEST(test_split_bit_identical)
{
    zb_model m = mem_model();
    zb_err err = {{0}};
    llama_stage whole, s0, s1;
    ck_assert_int_eq(llama_stage_init(&whole, &m, 0, 2, 1, 1, &err), 0);
    ck_assert_int_eq(llama_stage_init(&s0, &m, 0, 1, 1, 0, &err), 0);
    ck_assert_int_eq(llama_stage_init(&s1, &m, 1, 2, 0, 1, &err), 0);
    ck_assert_uint_eq(s0.n_params + s1.n_params, whole.n_params);
    float *p = malloc(sizeof(float) * whole.n_params);
    llama_stage_init_params(&whole, p, 9);
    float *p0 = malloc(sizeof(float) * s0.n_params), *p1 = malloc(sizeof(float) * s1.n_params);
    llama_stage_init_params(&s0, p0, 9);
    llama_stage_init_params(&s1, p1, 9);
    ck_assert(memcmp(p0, p, sizeof(float) * s0.n_params) == 0);
    ck_assert(memcmp(p1, p + s0.n_params, sizeof(float) * s1.n_params) == 0);
    int B = 2, N = B * m.seq_len, d = m.d_model;
    int32_t tok[2][12], tgt[2][12];
    for (int mb = 0; mb < 2; mb++)
        for (int n = 0; n < N; n++) {
            tok[mb][n] = (n * 5 + 2 + mb) % m.vocab;
            tgt[mb][n] = (n * 3 + 1 + 2 * mb) % m.vocab;
        }
    float *gw = calloc(whole.n_params, sizeof(float));
    float *g0 = calloc(s0.n_params, sizeof(float)), *g1 = calloc(s1.n_params, sizeof(float));
    llama_saved *sw = llama_saved_new(&whole, B);
    float loss;
    for (int mb = 0; mb < 2; mb++) {
        ck_assert_int_eq(llama_stage_forward(&whole, p, tok[mb], NULL, tgt[mb], sw, NULL, &loss,
                                             NULL, &err), 0);
        ck_assert_int_eq(llama_stage_backward(&whole, p, sw, 0.5f, NULL, NULL, gw, &err), 0);
    }
    llama_saved *a[2] = { llama_saved_new(&s0, B), llama_saved_new(&s0, B) };
    llama_saved *b[2] = { llama_saved_new(&s1, B), llama_saved_new(&s1, B) };
    float *act = malloc(sizeof(float) * N * d), *dact = malloc(sizeof(float) * N * d);
    for (int mb = 0; mb < 2; mb++) {
        ck_assert_int_eq(llama_stage_forward(&s0, p0, tok[mb], NULL, NULL, a[mb], act, NULL,
                                             NULL, &err), 0);
        ck_assert_int_eq(llama_stage_forward(&s1, p1, NULL, act, tgt[mb], b[mb], NULL, &loss,
                                             NULL, &err), 0);
        ck_assert_int_eq(llama_stage_backward_b(&s1, p1, b[mb], 0.5f, NULL, dact, &err), 0);
        ck_assert_int_eq(llama_stage_backward_b(&s0, p0, a[mb], 0, dact, NULL, &err), 0);
    }
    for (int mb = 0; mb < 2; mb++) { /* W deferred, in micro-batch order */
        ck_assert_int_eq(llama_stage_backward_w(&s1, b[mb], g1, &err), 0);
        ck_assert_int_eq(llama_stage_backward_w(&s0, a[mb], g0, &err), 0);
        ck_assert_uint_eq(llama_saved_bytes(b[mb]), 0);
    }
    ck_assert(memcmp(g0, gw, sizeof(float) * s0.n_params) == 0);
    ck_assert(memcmp(g1, gw + s0.n_params, sizeof(float) * s1.n_params) == 0);
    for (int mb = 0; mb < 2; mb++) {
        llama_saved_free(a[mb]);
        llama_saved_free(b[mb]);
    }
    llama_saved_free(sw);
    free(act);
    free(dact);
    free(p);
    free(p0);
    free(p1);
    free(gw);
    free(g0);
    free(g1);
    llama_stage_free(&whole);
    llama_stage_free(&s0);
    llama_stage_free(&s1);
}
END_TEST

/* Saved bytes of a one-memory-layer stage, counted by hand: the attention
 * half as for any layer, plus the memory block's slots, no SwiGLU slots. */
START_TEST(test_saved_bytes)
{
    zb_model m = mem_model();
    zb_err err = {{0}};
    llama_stage st;
    ck_assert_int_eq(llama_stage_init(&st, &m, 1, 2, 0, 0, &err), 0);
    float *p = malloc(sizeof(float) * st.n_params), *g = calloc(st.n_params, sizeof(float));
    llama_stage_init_params(&st, p, 3);
    int B = 2;
    size_t N = (size_t)B * m.seq_len, d = m.d_model, qd = st.q_dim, kvd = st.kv_dim;
    size_t nh = m.n_heads, mq = 2 * 8, mk = 2 * 3, v = 10, f = 4;
    size_t keep = N * (4 * d + qd + 2) + N * (mq + 2 * mk + v);       /* x n1 att h n2, rstds; q idx w u */
    size_t only = N * (qd + 2 * kvd + nh) + N * 2 * v;                /* q k v lse; g bag */
    size_t bkeep = N * (4 * d + qd + 2 * kvd) + N * (mk + mq + 2 * v); /* dout dn2 dh dn1 dq dk dv; ds dq dg de */
    float *x = malloc(sizeof(float) * N * d), *y = malloc(sizeof(float) * N * d);
    for (size_t i = 0; i < N * d; i++)
        x[i] = (float)((i * 13) % 7) - 3.0f;
    llama_saved *sv = llama_saved_new(&st, B);
    ck_assert_int_eq(llama_stage_forward(&st, p, NULL, x, NULL, sv, y, NULL, NULL, &err), 0);
    ck_assert_uint_eq(llama_saved_bytes(sv), f * (keep + only));
    ck_assert_int_eq(llama_stage_backward_b(&st, p, sv, 0, y, x, &err), 0);
    ck_assert_uint_eq(llama_saved_bytes(sv), f * (keep + bkeep));
    ck_assert_int_eq(llama_stage_backward_w(&st, sv, g, &err), 0);
    ck_assert_uint_eq(llama_saved_bytes(sv), 0);
    llama_saved_free(sv);
    free(p);
    free(g);
    free(x);
    free(y);
    llama_stage_free(&st);
}
END_TEST

START_TEST(test_tiny_mem_params)
{
    zb_model m;
    zb_err err = {{0}};
    ck_assert_int_eq(model_preset("tiny-mem", &m, &err), 0);
    llama_stage st;
    ck_assert_int_eq(llama_stage_init(&st, &m, 0, m.n_layers, 1, 1, &err), 0);
    size_t d = 64, V = 65, ff = 256;
    size_t attn = 2 * d + 4 * d * d;
    size_t mem = d * 2 * 32 + 2 * 2 * 64 * 16 + 4096 * 64 + d * 64 + 64 * d;
    ck_assert_uint_eq(st.n_params, 2 * V * d + d + 4 * attn + 3 * (3 * d * ff) + mem);
    const llama_tensor *vt = llama_stage_find(&st, LLAMA_T_MEM_VALUES, 2);
    ck_assert_ptr_nonnull(vt);
    ck_assert_int_eq(vt->rows, 4096);
    ck_assert_int_eq(vt->decay, 0);
    ck_assert_str_eq(vt->name, "layers.2.mem_values");
    ck_assert_ptr_null(llama_stage_find(&st, LLAMA_T_W1, 2));
    llama_stage_free(&st);
}
END_TEST

int main(void)
{
    kernels_init_threads(1);
    Suite *s = suite_create("kernels_memory");
    TCase *tc = tcase_create("memory");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_golden_whole, 0, 2);
    tcase_add_test(tc, test_golden_layers);
    tcase_add_test(tc, test_shared_split_refused);
    tcase_add_test(tc, test_finite_differences);
    tcase_add_test(tc, test_sparse_values);
    tcase_add_test(tc, test_split_bit_identical);
    tcase_add_test(tc, test_saved_bytes);
    tcase_add_test(tc, test_tiny_mem_params);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
