/*
 * sched_same.h: do two schedules run the same ops in the same order?
 *
 * The tests of the shortcuts that must not change a schedule (the
 * vocabulary walk's stop rule, its candidate cache, the V solvers' greedy
 * memo) compare a shortcut's schedule with the one built the long way,
 * lane by lane.  Costs, names and metadata are not compared: each test
 * compares the figures it cares about itself.
 */
#ifndef ZB_TESTS_COMMON_SCHED_SAME_H
#define ZB_TESTS_COMMON_SCHED_SAME_H

#include "src/sched.h"

/* 1 when a and b have as many devices and every device lists the same
 * ops (kind, stage, micro-batch) in the same order; else 0. */
static inline int sched_same_lanes(const sched_t *a, const sched_t *b)
{
    if (a->n_devices != b->n_devices)
        return 0;
    for (int d = 0; d < a->n_devices; d++) {
        if (a->dev[d].n_ops != b->dev[d].n_ops)
            return 0;
        for (int i = 0; i < a->dev[d].n_ops; i++) {
            sched_op x = a->dev[d].ops[i], y = b->dev[d].ops[i];
            if (x.kind != y.kind || x.stage != y.stage || x.mb != y.mb)
                return 0;
        }
    }
    return 1;
}

#endif
