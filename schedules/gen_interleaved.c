/*
 * gen_interleaved.c: Megatron-LM's interleaved 1F1B (Narayanan et al.,
 * arXiv 2104.04473 section 2.2), the "1F1B-I" baseline of the zero-bubble
 * paper.
 *
 * The model is cut into S = v*p virtual stages; stage s runs on device
 * s % p, so device d holds stages d, d+p, ..., d+(v-1)p.  Backward is fused
 * (BW).  The order is Megatron's forward_backward_pipelining_with_
 * interleaving (megatron/core/pipeline_parallel/schedules.py, the version
 * the zero-bubble paper compared against), also PyTorch's
 * ScheduleInterleaved1F1B:
 *
 *   Each device runs v*m forwards and v*m backwards.  Its k-th forward
 *   belongs to round k/(p*v); inside the round, p consecutive micro-batches
 *   go through chunk 0, then the same p through chunk 1, ... (chunk
 *   (k % pv)/p, micro-batch (k/pv)*p + k%p).  Backwards walk the same
 *   sequence with the chunks reversed (chunk v-1 first).
 *   warm-up:  min(2(p-1-d) + (v-1)p, v*m) forwards; every forward when
 *             m == p ("all warm-up", as Megatron does);
 *   steady:   forward k+warmup, then backward k;
 *   cool-down: the remaining backwards.
 *
 * Megatron requires m % p == 0 (rounds of p micro-batches), and so does
 * this generator.  With per-chunk costs and no communication the bubble is
 * (p-1)(T_F+T_B+T_W), i.e. 1/v of 1F1B's for the same model (the
 * zero-bubble authors' efficiency.py asserts exactly this).  Workload:
 * 2*v*p*m ops.
 */
#include "schedules/gen_common.h"

/* The stage of the k-th forward (backward: reversed chunks) on device d. */
static int interleaved_stage(int p, int v, int d, int k, int backward)
{
    int chunk = (k % (p * v)) / p;
    if (backward)
        chunk = v - 1 - chunk;
    return chunk * p + d;
}

/* The micro-batch of the k-th forward or backward on any device. */
static int interleaved_mb(int p, int v, int k)
{
    return (k / (p * v)) * p + k % p;
}

int gen_interleaved(const gen_params *p, sched_t **out, zb_err *err)
{
    const char *kind = "interleaved";
    if (p->chunks < 2)
        return zb_fail(err, "%s: needs at least 2 chunks per device (--chunks), got %d", kind,
                       p->chunks);
    if (p->stages >= 1 && p->microbatches >= 1 && p->microbatches % p->stages != 0)
        return zb_fail(err, "%s: needs the number of micro-batches (%d) to be a multiple of "
                       "the number of pipeline devices p (%d), as Megatron-LM does", kind,
                       p->microbatches, p->stages);
    sched_t *s;
    if (gen_begin(p, kind, GEN_LAYOUT_INTERLEAVED, p->chunks, 2, &s, err) != 0)
        return -1;
    int np = s->n_devices, m = s->n_micro, v = p->chunks;
    int total = v * m; /* forwards (and backwards) per device; gen_begin bounded it */
    for (int d = 0; d < np; d++) {
        long want = 2L * (np - 1 - d) + (long)(v - 1) * np;
        int warmup = (m == np || want > total) ? total : (int)want;
        for (int k = 0; k < warmup; k++)
            if (sched_push(s, d, OP_F, interleaved_stage(np, v, d, k, 0),
                           interleaved_mb(np, v, k)) != 0)
                return gen_fail_oom(s, kind, err);
        for (int k = 0; k < total; k++) {
            int kf = warmup + k;
            if (kf < total && sched_push(s, d, OP_F, interleaved_stage(np, v, d, kf, 0),
                                         interleaved_mb(np, v, kf)) != 0)
                return gen_fail_oom(s, kind, err);
            if (sched_push(s, d, OP_BW, interleaved_stage(np, v, d, k, 1),
                           interleaved_mb(np, v, k)) != 0)
                return gen_fail_oom(s, kind, err);
        }
    }
    *out = s;
    return 0;
}
