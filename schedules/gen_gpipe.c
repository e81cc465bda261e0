/*
 * gen_gpipe.c: GPipe (Huang et al., 2019), the baseline every other
 * schedule improves on.
 *
 * Each device runs the forward of all m micro-batches, then their fused
 * backward (BW) in the same micro-batch order, as PyTorch's ScheduleGPipe
 * does.  Bubble (p-1)(T_F+T_B+T_W) with no communication, like 1F1B, but
 * every device holds all m activations at the turn: peak m*dF.  Workload:
 * p*m*2 ops, built in one pass.
 */
#include "schedules/gen_common.h"

int gen_gpipe(const gen_params *p, sched_t **out, zb_err *err)
{
    const char *kind = "gpipe";
    if (p->chunks != 1)
        return zb_fail(err, "%s: needs 1 chunk per device, got %d", kind, p->chunks);
    sched_t *s;
    if (gen_begin(p, kind, GEN_LAYOUT_PLAIN, 1, 2, &s, err) != 0)
        return -1;
    for (int d = 0; d < s->n_devices; d++) {
        for (int j = 0; j < s->n_micro; j++)
            if (sched_push(s, d, OP_F, d, j) != 0)
                return gen_fail_oom(s, kind, err);
        for (int j = 0; j < s->n_micro; j++)
            if (sched_push(s, d, OP_BW, d, j) != 0)
                return gen_fail_oom(s, kind, err);
    }
    *out = s;
    return 0;
}
