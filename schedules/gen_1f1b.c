/*
 * gen_1f1b.c: 1F1B (PipeDream-Flush / Megatron-LM) and the zero-bubble
 * paper's handcrafted ZB-H1 and ZB-H2, which are one rule with two knobs.
 *
 * The rule, exactly as the authors evaluate it (sail-sg/zero-bubble-
 * pipeline-parallelism, branch arxiv, megatron/core/pipeline_parallel/
 * efficiency.py, get_hand_schedule), for the device holding stage r of p
 * with a warm-up factor c:
 *
 *   warm-up:  w_r = min(c(p-1-r), m) forwards F0..F(w_r-1);
 *   steady:   for i = 0..m-1: the next F (while any remain), then B_i, and,
 *             once i >= c*r, the oldest weight gradient W still pending;
 *   drain:    the W's still pending (c*r of them when m is large).
 *
 *   1F1B   c = 1 and B fused with W (BW), so nothing is ever pending;
 *   ZB-H1  c = 1: stage r delays its W's by r micro-batches, which fills the
 *          cool-down bubble with W's at 1F1B's peak memory (p-r)dF + r(dF+dB);
 *   ZB-H2  c = 2: twice the warm-up forwards fill the warm-up bubble too;
 *          peak (2p-2r-1)dF + 2r(dF+dB).
 *
 * Bubbles with T_W <= min(T_F, T_B) (zero-bubble paper, Table 2):
 * 1F1B (p-1)(T_F+T_B+T_W), ZB-H1 (p-1)(T_F+T_B-T_W), ZB-H2
 * (p-1)(T_F+T_B+2T_comm-2T_W).  The paper's authors assert m >= 2p; this
 * file caps the warm-up at m instead so that any m >= 1 gives a valid
 * schedule (the formulas then no longer hold).  Workload: p*m*3 ops.
 */
#include "schedules/gen_common.h"

/* Emits the delayed-W rule on every device of s.  fused: 1F1B's BW instead
 * of B + W.  warmup_factor: c above. */
static int emit_delayed_w(sched_t *s, const char *kind, int warmup_factor, int fused,
                          zb_err *err)
{
    int p = s->n_devices, m = s->n_micro;
    for (int r = 0; r < p; r++) {
        /* Computed in long: c(p-1-r) can exceed INT_MAX only for absurd p,
         * but the cap at m is what matters. */
        long want = (long)warmup_factor * (p - 1 - r);
        int warmup = want < m ? (int)want : m;
        int next_f = 0, next_w = 0;
        for (; next_f < warmup; next_f++)
            if (sched_push(s, r, OP_F, r, next_f) != 0)
                return gen_fail_oom(s, kind, err);
        for (int i = 0; i < m; i++) {
            if (next_f < m && sched_push(s, r, OP_F, r, next_f++) != 0)
                return gen_fail_oom(s, kind, err);
            if (sched_push(s, r, fused ? OP_BW : OP_B, r, i) != 0)
                return gen_fail_oom(s, kind, err);
            if (!fused && (long)i >= (long)warmup_factor * r &&
                sched_push(s, r, OP_W, r, next_w++) != 0)
                return gen_fail_oom(s, kind, err);
        }
        while (!fused && next_w < m)
            if (sched_push(s, r, OP_W, r, next_w++) != 0)
                return gen_fail_oom(s, kind, err);
    }
    return 0;
}

/* The shared front end of the three kinds below. */
static int gen_delayed_w(const gen_params *p, const char *kind, int warmup_factor,
                         int fused, sched_t **out, zb_err *err)
{
    if (p->chunks != 1)
        return zb_fail(err, "%s: needs 1 chunk per device, got %d", kind, p->chunks);
    sched_t *s;
    if (gen_begin(p, kind, GEN_LAYOUT_PLAIN, 1, fused ? 2 : 3, &s, err) != 0)
        return -1;
    if (emit_delayed_w(s, kind, warmup_factor, fused, err) != 0)
        return -1; /* emit_delayed_w freed s */
    *out = s;
    return 0;
}

int gen_1f1b(const gen_params *p, sched_t **out, zb_err *err)
{
    return gen_delayed_w(p, "1f1b", 1, 1, out, err);
}

int gen_zb_h1(const gen_params *p, sched_t **out, zb_err *err)
{
    return gen_delayed_w(p, "zb-h1", 1, 0, out, err);
}

int gen_zb_h2(const gen_params *p, sched_t **out, zb_err *err)
{
    return gen_delayed_w(p, "zb-h2", 2, 0, out, err);
}
