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

/* Returns 0 when s is valid, else -1 with err naming what and where. */
int sched_validate(const sched_t *s, zb_err *err);

#endif
