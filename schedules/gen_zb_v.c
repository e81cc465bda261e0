/*
 * gen_zb_v.c: ZB-V, the zero-bubble paper's handcrafted V-shape schedule
 * (arXiv 2401.10241 v2+, section 6).
 *
 * The model is cut into 2p chunks placed in a V: device d holds stage d
 * (chunk 0, on the way down) and stage 2p-1-d (chunk 1, on the way back),
 * so the first and last stages share device 0 and a micro-batch's forward
 * turns around on device p-1 without communication.  B and W are split.
 *
 * The order is the deterministic rule of the authors' handcrafted ZB-V as
 * PyTorch ships it (torch/distributed/pipelining/schedules.py,
 * ScheduleZBVZeroBubble._calculate_single_rank_operations), for device d
 * with n = max(m, 2p-1):
 *
 *   1. 2(p-d)-1 forwards of chunk 0;
 *   2. d times: F on chunk 1, F on chunk 0;
 *   3. p-d times: F, B, W on chunk 1;
 *   4. steady, while chunk 1 trails chunk 0 or chunk 0 has micro-batches
 *      left: F on chunk 0 (if any left), B and W on chunk 0, then F, B and
 *      W on chunk 1;
 *   5. d times: B on chunk 0, B on chunk 1 (their W's wait);
 *   6. p-d times: B on chunk 0 and the oldest pending W of chunk 0;
 *   7. the pending W's of chunk 1, then those of chunk 0.
 *
 * When m < 2p-1 the rule is built for n = 2p-1 and the ops of micro-batches
 * >= m are dropped, as PyTorch does (it leaves idle slots); dropping whole
 * micro-batches keeps the order deadlock-free.  With T_F = T_B = T_W, no
 * communication and m >= 2p-1 every device is busy from its first op to
 * its last (zero bubble) and holds at most 2p chunk activations, i.e. p
 * times a whole device's M_B.  Workload: 6*p*m ops.
 */
#include "schedules/gen_common.h"

#include <assert.h>

/* Per-device counters of the rule: next micro-batch of each op kind on
 * each of the device's two chunks. */
typedef struct zbv_cursor {
    sched_t *s;     /* schedule being built */
    int dev;        /* device d */
    int stage[2];   /* virtual stage of chunk 0 (d) and chunk 1 (2p-1-d) */
    int next_f[2];  /* next forward micro-batch per chunk */
    int next_b[2];  /* next input-gradient backward per chunk */
    int next_w[2];  /* next weight-gradient backward per chunk */
} zbv_cursor;

/* Pushes the next op of `kind` on chunk c and advances its counter; ops of
 * the padding micro-batches (>= m) are counted but not emitted. */
static int zbv_emit(zbv_cursor *cur, op_kind kind, int c)
{
    int *next = kind == OP_F ? cur->next_f : kind == OP_B ? cur->next_b : cur->next_w;
    int mb = next[c]++;
    if (mb >= cur->s->n_micro)
        return 0;
    return sched_push(cur->s, cur->dev, kind, cur->stage[c], mb);
}

/* Emits device d's whole order for n rule micro-batches; returns 0, or -1
 * when memory runs out. */
static int zbv_emit_device(sched_t *s, int d, int n)
{
    int p = s->n_devices;
    zbv_cursor cur = { .s = s, .dev = d, .stage = { d, 2 * p - 1 - d } };
    int rc = 0;
    for (int i = 0; i < 2 * (p - d) - 1; i++)
        rc |= zbv_emit(&cur, OP_F, 0);
    for (int i = 0; i < d; i++) {
        rc |= zbv_emit(&cur, OP_F, 1);
        rc |= zbv_emit(&cur, OP_F, 0);
    }
    for (int i = 0; i < p - d; i++) {
        rc |= zbv_emit(&cur, OP_F, 1);
        rc |= zbv_emit(&cur, OP_B, 1);
        rc |= zbv_emit(&cur, OP_W, 1);
    }
    while (cur.next_f[1] < cur.next_f[0] || cur.next_f[0] < n) {
        if (cur.next_f[0] < n)
            rc |= zbv_emit(&cur, OP_F, 0);
        rc |= zbv_emit(&cur, OP_B, 0);
        rc |= zbv_emit(&cur, OP_W, 0);
        rc |= zbv_emit(&cur, OP_F, 1);
        rc |= zbv_emit(&cur, OP_B, 1);
        rc |= zbv_emit(&cur, OP_W, 1);
    }
    for (int i = 0; i < d; i++) {
        rc |= zbv_emit(&cur, OP_B, 0);
        rc |= zbv_emit(&cur, OP_B, 1);
    }
    for (int i = 0; i < p - d; i++) {
        rc |= zbv_emit(&cur, OP_B, 0);
        rc |= zbv_emit(&cur, OP_W, 0);
    }
    while (cur.next_w[1] < cur.next_b[1])
        rc |= zbv_emit(&cur, OP_W, 1);
    while (cur.next_w[0] < cur.next_b[0])
        rc |= zbv_emit(&cur, OP_W, 0);
    /* The rule is balanced by construction: every chunk got n F, B, W. */
    for (int c = 0; c < 2; c++)
        assert(cur.next_f[c] == n && cur.next_b[c] == n && cur.next_w[c] == n);
    return rc ? -1 : 0;
}

int gen_zb_v(const gen_params *p, sched_t **out, zb_err *err)
{
    const char *kind = "zb-v";
    /* ZB-V is defined with two chunks per device; 1 is the CLI default for
     * "not given" and means the same. */
    if (p->chunks != 1 && p->chunks != 2)
        return zb_fail(err, "%s: uses exactly 2 chunks per device, got %d", kind, p->chunks);
    /* The rule walks n = max(m, 2p-1) micro-batches even when m is
     * smaller, so bound that work before allocating anything (p=10^6, m=1
     * would pass gen_begin's check on the ops actually kept). */
    int np = p->stages, m = p->microbatches;
    if (np >= 1 && m >= 1) {
        double n_rule = m > 2.0 * np - 1 ? m : 2.0 * np - 1;
        if (6.0 * np * n_rule > (double)GEN_MAX_OPS)
            return zb_fail(err, "%s: p=%d walks %.0f rule micro-batches, %.0f ops, more than "
                           "the %ld this generator builds", kind, np, n_rule, 6.0 * np * n_rule,
                           GEN_MAX_OPS);
    }
    sched_t *s;
    if (gen_begin(p, kind, GEN_LAYOUT_V, 2, 3, &s, err) != 0)
        return -1;
    int n = m > 2 * np - 1 ? m : 2 * np - 1;
    for (int d = 0; d < np; d++) {
        if (zbv_emit_device(s, d, n) != 0)
            return gen_fail_oom(s, kind, err);
    }
    *out = s;
    return 0;
}
