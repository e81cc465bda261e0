/*
 * cuda_stage_pass.h: one micro-batch's F, B and W of one pipeline stage
 * through a backend (runtime/backend.h), the fixture of the CUDA stage
 * tests that compare the GPU stage with the CPU backend at a recompute
 * level (test_cuda_recompute) or with memory layers (test_cuda_memory_stage).
 *
 * A case is a stage [l0, l1) of a preset with bf16-exact weights and
 * bf16-exact inputs (tokens, targets, an input activation, an output
 * gradient) made from two seeds, so every backend computes from the same
 * values and only its arithmetic differs.  csp_run gives what the stage
 * produced (loss or output, input gradient, weight gradients) and the
 * saved-state bytes after F and after W, which the tests use to check what
 * a recompute level drops.  Infrastructure failures (a backend call, host
 * memory) are not comparisons: they print and exit 1, as CC_OK does.
 */
#ifndef ZB_TESTS_CUDA_STAGE_PASS_H
#define ZB_TESTS_CUDA_STAGE_PASS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/llama.h"
#include "runtime/backend.h"
#include "src/model.h"

/* A stage and the inputs of one micro-batch, the same for every backend. */
typedef struct csp_case {
    zb_model m;        /* the preset */
    llama_stage L;     /* the stage [l0, l1) */
    int B, N;          /* sequences in the micro-batch; tokens = B * seq_len */
    size_t A;          /* activation elements: N * d_model */
    size_t n;          /* the stage's parameter count */
    float *params;     /* [n] bf16-exact initial weights */
    int32_t *tok, *tgt; /* [N] token and target ids (the first and the last stage read them) */
    float *x, *dy;     /* [A] bf16-exact input activation and output gradient */
} csp_case;

/* What one backend's F, B and W gave. */
typedef struct csp_out {
    float loss;         /* the head stage's loss */
    float *out;         /* [A] F's output (no head) */
    float *dx;          /* [A] B's input gradient (no embedding) */
    float *grads;       /* [n] W's gradients */
    size_t after_f;     /* saved bytes after F */
    size_t after_w;     /* saved bytes after W (0 when W empties the state) */
} csp_out;

/* Makes the stage [l0, l1) of `preset` (emb, head: whether it holds the
 * embedding and the head) with two sequences a micro-batch, weights from
 * param_seed rounded to bf16 and inputs from input_seed. */
void csp_case_init(csp_case *c, const char *preset, int l0, int l1, int emb, int head,
                   uint64_t param_seed, uint64_t input_seed);
void csp_case_free(csp_case *c);

/* Zeroed outputs sized for c; csp_out_free releases them. */
void csp_out_init(csp_out *o, const csp_case *c);
void csp_out_free(csp_out *o);

/* Runs F, B (output-gradient scale 0.5) and W of the case's micro-batch on
 * backend be with recompute level rc (LLAMA_RC_*), on a fresh stage and
 * saved state that it frees again; fills o. */
void csp_run(zb_backend *be, const csp_case *c, int rc, csp_out *o);

/* Records F's comparison of got with want (the head's loss within NMSE
 * 1e-5, else the output within 1e-4) and B's (the input gradient within
 * 1e-3, unless the stage holds the embedding), bounds sized for bf16
 * storage and fp32 accumulation as in test_cuda_backend; names carry tag. */
void csp_expect_f_and_b(const char *tag, const csp_case *c, const csp_out *got,
                        const csp_out *want);

/* The largest NMSE of got's weight gradients against want's over the
 * stage's tensors (infinite if any is not finite). */
double csp_worst_grad_nmse(const csp_case *c, const csp_out *got, const csp_out *want);

/* x rounded to bf16 and back. */
float csp_bf16_round(float x);

#endif
