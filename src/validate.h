/*
 * validate.h: is a schedule complete and executable?
 *
 * Checks, in this order, and reports the first failure with the device,
 * op position and op (e.g. "device 2, op 17 (B3@2): ..."):
 *   - placement: every virtual stage on a device in range;
 *   - ops: each op's stage lives on the device that lists it;
 *   - completeness: per stage and micro-batch exactly one F and either one
 *     BW or one B and one W; no duplicates, nothing missing;
 *   - executability: with receives blocking and sends buffered (as with
 *     asynchronous NCCL sends or in-process channels) the devices can run
 *     their lists in order without deadlock.  Dependencies: F(s,j) after
 *     F(s-1,j); B/BW(s,j) after B/BW(s+1,j) and after F(s,j); W(s,j) after
 *     B(s,j).  A deadlock is reported with the op each stuck device waits on.
 */
#ifndef ZB_VALIDATE_H
#define ZB_VALIDATE_H

#include "src/sched.h"

/* The largest total time (sum of every op's time plus one transfer per
 * op) or total memory (sum of every |delta| plus static memory and limits)
 * a schedule may carry.  Simulated times and memory curves are bounded by
 * these totals, so below the bound every figure the simulator, the
 * renderers (which scale by pixels and unit factors up to 1e9) and the
 * JSON writers derive stays finite.  1e30 is far above any real schedule
 * (1e30 ns is 3e13 years; 1e30 bytes is a million yottabytes). */
#define SCHED_MAX_TOTAL 1e30

/* The smallest nonzero magnitude of a cost or memory delta.  Renderers
 * divide their pixel width by a schedule's span; a span of 1e-320 would
 * make that scale infinite. */
#define SCHED_MIN_NONZERO 1e-30

/* Checks that every cost, memory delta, limit and static size is finite
 * (times, limits and static sizes also non-negative), that nonzero ones
 * are at least SCHED_MIN_NONZERO in magnitude, and that the totals
 * stay at or below SCHED_MAX_TOTAL.  A vocabulary-parallel schedule's S/T
 * times, memory deltas and barrier times (sched_vocab) count as costs:
 * the same rules per value, the S/T ops and every micro-batch's barriers
 * in the time total.  Returns 0, or -1 with err naming the
 * field.  sched_validate runs it first. */
int sched_check_magnitudes(const sched_t *s, zb_err *err);

/* The same bound for values that have not become a schedule yet (flags):
 * `per_cell_time` is F+B+W+3*T_comm of one (stage, micro-batch) and
 * `per_cell_mem` |dF|+|dB|+|dW|; `cells` is stages times micro-batches.
 * Returns 0, or -1 with err set. */
int sched_check_cost_totals(double per_cell_time, double per_cell_mem, double cells, zb_err *err);

/* Returns 0 when s is valid, else -1 with err naming what and where. */
int sched_validate(const sched_t *s, zb_err *err);

/* sched_validate without the executability check, for a caller that
 * simulates s next: sim_run walks the same dependencies and fails on a
 * deadlock itself (with a short message; sched_validate then names the
 * stuck ops), and the walk was half of the validation's time, a tenth of
 * a search's.  Every other check, which the simulator relies on, stands.
 * Returns 0, or -1 with err. */
int sched_validate_static(const sched_t *s, zb_err *err);

#endif
