/*
 * cuda_stage_pass.c: one micro-batch of one stage through a backend, for
 * the CUDA stage tests (contracts in cuda_stage_pass.h).  The inputs come
 * from a 64-bit LCG whose high bits feed tokens, activations and
 * gradients in a fixed order, so a seed names the same values on every
 * machine.
 */
#include "tests/cuda/cuda_stage_pass.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include "tests/cuda/cuda_check.h"

static uint64_t lcg(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s;
}

float csp_bf16_round(float x)
{
    return zb_bf16_to_f32(zb_bf16_from_f32(x));
}

static void *host_alloc(size_t bytes)
{
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) {
        printf("out of host memory\n");
        exit(1);
    }
    return p;
}

void csp_case_init(csp_case *c, const char *preset, int l0, int l1, int emb, int head,
                   uint64_t param_seed, uint64_t input_seed)
{
    memset(c, 0, sizeof *c);
    CC_OK(model_preset(preset, &c->m, err));
    c->B = 2;
    c->N = c->B * c->m.seq_len;
    c->A = (size_t)c->N * (size_t)c->m.d_model;
    CC_OK(llama_stage_init(&c->L, &c->m, l0, l1, emb, head, err));
    c->n = llama_stage_num_params(&c->L);
    c->params = host_alloc(c->n * 4);
    llama_stage_init_params(&c->L, c->params, param_seed);
    for (size_t i = 0; i < c->n; i++)
        c->params[i] = csp_bf16_round(c->params[i]); /* every backend computes with these */
    c->tok = host_alloc(sizeof(int32_t) * (size_t)c->N);
    c->tgt = host_alloc(sizeof(int32_t) * (size_t)c->N);
    c->x = host_alloc(c->A * 4);
    c->dy = host_alloc(c->A * 4);
    uint64_t s = input_seed;
    for (int i = 0; i < c->N; i++) {
        c->tok[i] = (int32_t)((lcg(&s) >> 33) % (uint64_t)c->m.vocab);
        c->tgt[i] = (int32_t)((lcg(&s) >> 33) % (uint64_t)c->m.vocab);
    }
    for (size_t i = 0; i < c->A; i++) {
        c->x[i] = csp_bf16_round((float)((double)(lcg(&s) >> 11) / 9007199254740992.0 * 2 - 1));
        c->dy[i] = csp_bf16_round((float)((double)((lcg(&s) >> 7) & 0xffff) / 65536.0 - 0.5) *
                                  1e-2f);
    }
}

void csp_case_free(csp_case *c)
{
    free(c->tok);
    free(c->tgt);
    free(c->x);
    free(c->dy);
    free(c->params);
    llama_stage_free(&c->L);
    memset(c, 0, sizeof *c);
}

void csp_out_init(csp_out *o, const csp_case *c)
{
    memset(o, 0, sizeof *o);
    o->out = host_alloc(c->A * 4);
    o->dx = host_alloc(c->A * 4);
    o->grads = host_alloc(c->n * 4);
}

void csp_out_free(csp_out *o)
{
    free(o->out);
    free(o->dx);
    free(o->grads);
    memset(o, 0, sizeof *o);
}

void csp_run(zb_backend *be, const csp_case *c, int rc, csp_out *o)
{
    const llama_stage *L = &c->L;
    int emb = L->has_embedding, head = L->has_head;
    zb_bstage *st;
    CC_OK(be->ops->stage_new(be, L, NULL, 0, &st, err));
    memcpy(be->ops->host(be, st, ZB_BUF_PARAMS), c->params, c->n * 4);
    if (be->ops->upload)
        CC_OK(be->ops->upload(be, st, ZB_BUF_PARAMS, err));
    CC_OK(be->ops->grads_zero(be, st, NULL, err));
    void *a_in = be->ops->act_new(be, c->A), *a_out = be->ops->act_new(be, c->A);
    if (!a_in || !a_out) {
        printf("out of memory for activations\n");
        exit(1);
    }
    CC_OK(be->ops->act_upload(be, a_in, c->x, c->A, err));
    zb_bsaved *sv;
    CC_OK(be->ops->saved_new(be, st, c->B, rc, &sv, err));
    CC_OK(be->ops->forward(be, st, sv, emb ? c->tok : NULL, emb ? NULL : a_in,
                           head ? c->tgt : NULL, head ? NULL : a_out, head ? &o->loss : NULL,
                           err));
    CC_OK(be->ops->sync(be, st, err));
    o->after_f = be->ops->saved_bytes(be, sv);
    if (!head)
        CC_OK(be->ops->act_download(be, a_out, o->out, c->A, err));
    CC_OK(be->ops->act_upload(be, a_out, c->dy, c->A, err));
    CC_OK(be->ops->backward_b(be, st, sv, 0.5f, head ? NULL : a_out, emb ? NULL : a_in, err));
    CC_OK(be->ops->backward_w(be, st, sv, NULL, err));
    CC_OK(be->ops->sync(be, st, err));
    o->after_w = be->ops->saved_bytes(be, sv);
    if (!emb)
        CC_OK(be->ops->act_download(be, a_in, o->dx, c->A, err));
    if (be->ops->download)
        CC_OK(be->ops->download(be, st, ZB_BUF_GRADS, err));
    memcpy(o->grads, be->ops->host(be, st, ZB_BUF_GRADS), c->n * 4);
    be->ops->saved_free(be, sv);
    be->ops->act_free(be, a_in);
    be->ops->act_free(be, a_out);
    be->ops->stage_free(be, st);
}

void csp_expect_f_and_b(const char *tag, const csp_case *c, const csp_out *got,
                        const csp_out *want)
{
    char name[160];
    if (c->L.has_head) {
        snprintf(name, sizeof name, "F %s loss %.5f vs %.5f", tag, got->loss, want->loss);
        cc_expect(name, cc_nmse(&got->loss, &want->loss, 1), 1e-5);
    } else {
        snprintf(name, sizeof name, "F %s output", tag);
        cc_expect(name, cc_nmse(got->out, want->out, c->A), 1e-4);
    }
    if (!c->L.has_embedding) {
        snprintf(name, sizeof name, "B %s input gradient", tag);
        cc_expect(name, cc_nmse(got->dx, want->dx, c->A), 1e-3);
    }
}

double csp_worst_grad_nmse(const csp_case *c, const csp_out *got, const csp_out *want)
{
    double worst = 0;
    for (int t = 0; t < c->L.n_tensors; t++) {
        const llama_tensor *ten = &c->L.tensors[t];
        double e = cc_nmse(got->grads + ten->offset, want->grads + ten->offset, ten->count);
        worst = e > worst || !isfinite(e) ? e : worst;
    }
    return worst;
}
