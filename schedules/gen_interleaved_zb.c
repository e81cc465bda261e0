/*
 * gen_interleaved_zb.c: interleaved zero bubble, the ZB-1p order spread
 * over v model chunks per device, as PyTorch's ScheduleInterleavedZeroBubble
 * builds it (torch/distributed/pipelining/schedules.py, "ZB1P schedule in
 * the paper"; Qi et al., arXiv 2401.10241).
 *
 * The model is cut into S = v*p virtual stages placed as in Megatron's
 * interleaving (stage s on device s % p).  Backward is split: B (input
 * gradient) stays on the critical path, W (weight gradient) is deferred to
 * fill the bubbles.  PyTorch's rule, per device d:
 *
 *   rounds   r = max(1, m / p), micro-batches per round q = m / r (m must
 *            be a multiple of r);
 *   warm-up  w = min((v-1)*q + (p-1-d), v*m) forwards; the k-th forward
 *            runs chunk (k / q) % v on that chunk's next micro-batch;
 *   steady   for each remaining forward: F, then B of the next backward
 *            step (chunks walked in reverse: chunk v-1-((k-w)/q) % v), then
 *            W of the oldest B not yet weighted, except during the first d
 *            steps, which hold W back (the 1F1B part of ZB-1p);
 *   cooldown the remaining B, each followed by the oldest pending W;
 *   flush    any W still pending.
 *
 * PyTorch also pads its order with idle slots; they only shape its own
 * lock-step timing and do not change the order, so they are not needed
 * here: the simulator starts every op as soon as its inputs arrive.
 *
 * Memory-limited variant.  PyTorch's order keeps up to w + d micro-batch
 * chunks alive on device d, so the early devices hold the most.  When
 * gen_params.mem_limit is set and PyTorch's order does not fit, the
 * generator tries capped warm-ups (min(w, c) on every device, never below
 * (v-1)q, where the first backward's own forward sits) and shorter W
 * hold-backs (min(d, h)), simulates the orders that fit (an order's peak
 * is its lanes', no simulation needed), and keeps the fastest that fits
 * (ties to the lower peak).  A cap touches only the devices above it,
 * which keeps the later devices' interleaving intact.  Since neither knob
 * raises a peak when lowered, each hold-back's best cap is found by
 * bisection.  Without a limit the order is exactly PyTorch's.  Workload:
 * 3*v*p*m ops per order, O(p log(vq + p)) orders in the limited variant, each
 * validated and, when it fits, simulated in linear time.
 */
#include "schedules/gen_common.h"

#include "src/sim.h"
#include "src/validate.h"

#include <assert.h>
#include <math.h>

#include <stdlib.h>

/* The knobs of one order: a cap on every device's warm-up and on the
 * steady steps that hold W back.  PyTorch's order is {INT_MAX, INT_MAX}. */
typedef struct izb_knobs {
    int warmup_cap; /* most warm-up forwards on any device */
    int w_hold_cap; /* cap on the steady steps that defer W (device d uses min(d, cap)) */
} izb_knobs;

/* Appends device d's order for the given knobs to s.  q is the number of
 * micro-batches per round.  Returns 0, or -1 when memory runs out. */
static int izb_device(sched_t *s, int d, int v, int q, izb_knobs k)
{
    int p = s->n_devices, m = s->n_micro;
    int total = v * m;
    int warmup = (v - 1) * q + (p - 1 - d);
    if (warmup > k.warmup_cap)
        warmup = k.warmup_cap;
    /* The first backward step is chunk v-1's first micro-batch, whose
     * forward is this device's forward number (v-1)q, run in that same step
     * just before it: a shorter warm-up would wait on itself. */
    if (warmup < (v - 1) * q)
        warmup = (v - 1) * q;
    if (warmup > total)
        warmup = total;
    int hold = d < k.w_hold_cap ? d : k.w_hold_cap;
    /* Next micro-batch per local chunk, for F, B and W. */
    int *next_f = calloc((size_t)v * 3, sizeof *next_f);
    int *bwd_chunk = malloc((size_t)total * sizeof *bwd_chunk);
    if (!next_f || !bwd_chunk) {
        free(next_f);
        free(bwd_chunk);
        return -1;
    }
    int *next_b = next_f + v, *next_w = next_f + 2 * v;
    int n_bwd = 0, n_wgt = 0, rc = 0;
    if (sched_lane_reserve(&s->dev[d], 3 * total) != 0) { /* F, B and W of every local op */
        rc = -1;
        goto out;
    }
#define PUSH(kind, chunk, counter)                                                        \
    do {                                                                                  \
        if (sched_push(s, d, (kind), (chunk) * p + d, (counter)[chunk]++) != 0) {         \
            rc = -1;                                                                      \
            goto out;                                                                     \
        }                                                                                 \
    } while (0)
    for (int op = 0; op < total + warmup; op++) {
        if (op < total) {
            int fc = (op / q) % v;
            PUSH(OP_F, fc, next_f);
        }
        if (op < warmup)
            continue;
        int bc = v - 1 - ((op - warmup) / q) % v;
        PUSH(OP_B, bc, next_b);
        bwd_chunk[n_bwd++] = bc;
        if (op - warmup >= hold) {
            int wc = bwd_chunk[n_wgt++];
            PUSH(OP_W, wc, next_w);
        }
    }
    while (n_wgt < n_bwd) {
        int wc = bwd_chunk[n_wgt++];
        PUSH(OP_W, wc, next_w);
    }
#undef PUSH
    assert(n_bwd == total);
out:
    free(next_f);
    free(bwd_chunk);
    return rc;
}

/* Builds the whole order for one knob pair into a fresh copy of base
 * (placement, costs and memory set, no ops).  Returns the schedule, or NULL
 * when memory runs out. */
static sched_t *izb_build(const sched_t *base, int v, int q, izb_knobs k)
{
    sched_t *s = sched_clone(base);
    if (!s)
        return NULL;
    for (int d = 0; d < s->n_devices; d++)
        if (izb_device(s, d, v, q, k) != 0) {
            sched_free(s);
            return NULL;
        }
    return s;
}

/* Builds the order for knobs k and, when it fits, simulates it.  Returns
 * 1 when it is valid and fits limit (*out holds it, with its cost and
 * peak), 0 when it does not fit (*out holds it too, with its peak; its
 * cost is not simulated, as no caller reads it), -1 when it deadlocks
 * (*out NULL), -2 when memory runs out.  A device's peak is its lane's
 * (sched_lane_peak): the order fixes it (izb_build places every op once),
 * so an order over the limit (most of a bisection's probes) needs no
 * simulation, nor, unless check_all, the validation that tells a
 * deadlock from an order that merely does not fit: a bisection treats
 * both alike. */
static int izb_eval(const sched_t *base, int v, int q, izb_knobs k, const double *limit, int check_all,
                    sched_t **out, double *cost, double *peak)
{
    *out = izb_build(base, v, q, k);
    if (!*out)
        return -2;
    int fits = 1;
    *peak = 0;
    for (int d = 0; d < (*out)->n_devices; d++) {
        double pk = sched_lane_peak(*out, d);
        *peak = pk > *peak ? pk : *peak;
        fits &= !(pk > limit[d] + 1e-9);
    }
    *cost = NAN;
    if ((fits || check_all) && sched_validate(*out, NULL) != 0) {
        sched_free(*out);
        *out = NULL;
        return -1;
    }
    if (!fits)
        return 0;
    sim_result r = { 0 };
    if (sim_run(*out, &r, NULL) != 0) {
        sim_result_free(&r);
        sched_free(*out);
        *out = NULL;
        return -1;
    }
    *cost = r.cost;
    sim_result_free(&r);
    return 1;
}

int gen_interleaved_zb(const gen_params *p, sched_t **out, zb_err *err)
{
    const char *kind = "interleaved-zb";
    if (p->chunks < 2)
        return zb_fail(err, "%s: needs at least 2 chunks per device (--chunks), got %d", kind,
                       p->chunks);
    int rounds = p->stages >= 1 && p->microbatches >= p->stages
                     ? p->microbatches / p->stages : 1;
    if (p->stages >= 1 && p->microbatches >= 1 && p->microbatches % rounds != 0)
        return zb_fail(err, "%s: needs the number of micro-batches (%d) to be a multiple of "
                       "the number of rounds max(1, m/p) = %d, as PyTorch does", kind,
                       p->microbatches, rounds);
    sched_t *base;
    if (gen_begin(p, kind, GEN_LAYOUT_INTERLEAVED, p->chunks, 3, &base, err) != 0)
        return -1;
    int v = p->chunks, q = p->microbatches / rounds;

    if (!p->mem_limit) {
        sched_t *s = izb_build(base, v, q, (izb_knobs){ 1 << 30, 1 << 30 });
        sched_free(base);
        if (!s)
            return zb_fail(err, "%s: out of memory while building the schedule", kind);
        *out = s;
        return 0;
    }

    /* Memory-limited.  Less warm-up and a shorter W hold-back never raise
     * a device's peak, so: PyTorch's order if it fits; otherwise nothing
     * fits unless the leanest order (least warm-up, no hold-back) does; and
     * for each hold-back cap, a bisection finds the largest warm-up cap
     * that fits, the fastest of that column.  O(p log(vq + p)) orders
     * instead of the whole grid. */
    int np = p->stages;
    int min_cap = (v - 1) * q, max_cap = (v - 1) * q + np - 1, max_hold = np - 1;
    sched_t *best = NULL;
    double best_cost = 0, best_peak = 0, least_peak = 0;
    int fit = izb_eval(base, v, q, (izb_knobs){ 1 << 30, 1 << 30 }, p->mem_limit, 0, &best,
                       &best_cost, &best_peak);
    if (fit < -1)
        return gen_fail_oom(base, kind, err);
    if (fit == 1) {
        sched_free(base);
        *out = best;
        return 0;
    }
    sched_free(best);
    best = NULL;
    sched_t *lean = NULL;
    double lean_cost;
    fit = izb_eval(base, v, q, (izb_knobs){ min_cap, 0 }, p->mem_limit, 1, &lean, &lean_cost,
                   &least_peak);
    sched_free(lean);
    if (fit < -1)
        return gen_fail_oom(base, kind, err);
    if (fit <= 0) {
        sched_free(base);
        if (fit < 0)
            return zb_fail(err, "%s: no order of this family is valid for p=%d, m=%d, v=%d",
                           kind, p->stages, p->microbatches, v);
        return zb_fail(err, "%s: no order fits the memory limit; the smallest peak this "
                       "family reaches is %g", kind, least_peak);
    }
    for (int hold = max_hold; hold >= 0; hold--) {
        int lo = min_cap, hi = max_cap; /* find the largest cap in [lo, hi] that fits */
        sched_t *col = NULL;
        double col_cost = 0, col_peak = 0;
        int r = izb_eval(base, v, q, (izb_knobs){ lo, hold }, p->mem_limit, 0, &col, &col_cost,
                         &col_peak);
        if (r < -1)
            goto oom;
        if (r != 1) {
            sched_free(col);
            continue;
        }
        while (lo < hi) {
            int mid = lo + (hi - lo + 1) / 2;
            sched_t *s = NULL;
            double c, pk;
            r = izb_eval(base, v, q, (izb_knobs){ mid, hold }, p->mem_limit, 0, &s, &c, &pk);
            if (r < -1) {
                sched_free(col);
                goto oom;
            }
            if (r == 1) {
                sched_free(col);
                col = s;
                col_cost = c;
                col_peak = pk;
                lo = mid;
            } else {
                sched_free(s);
                hi = mid - 1;
            }
        }
        if (!best || col_cost < best_cost - 1e-9 ||
            (col_cost <= best_cost + 1e-9 && col_peak < best_peak)) {
            sched_free(best);
            best = col;
            best_cost = col_cost;
            best_peak = col_peak;
        } else {
            sched_free(col);
        }
    }
    sched_free(base);
    assert(best); /* the leanest order fits, and it is in the hold-0 column */
    *out = best;
    return 0;
oom:
    sched_free(best);
    return gen_fail_oom(base, kind, err);
}
