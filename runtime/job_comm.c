/*
 * job_comm.c: OR, sum and failure agreement from a broadcast and a
 * minimum (job_comm.h).
 */
#include "runtime/job_comm.h"

#include <string.h>

int job_comm_rank(const job_comm *c)
{
    return c ? c->rank : 0;
}

int job_comm_world(const job_comm *c)
{
    return c ? c->world : 1;
}

int job_comm_any(const job_comm *c, int *flag, zb_err *err)
{
    int v = *flag ? 0 : 1; /* the minimum of "not set" is 0 when any rank set it */
    if (c && c->min_int(c->ctx, &v, err) != 0)
        return -1;
    *flag = v == 0;
    return 0;
}

int job_comm_sum(const job_comm *c, int64_t *v, zb_err *err)
{
    if (!c)
        return 0;
    int64_t total = 0;
    for (int r = 0; r < c->world; r++) {
        int64_t x = *v;
        if (c->bcast(c->ctx, &x, sizeof x, r, err) != 0)
            return -1;
        total += x;
    }
    *v = total;
    return 0;
}

int job_comm_agree(const job_comm *c, int fail, zb_err *err)
{
    if (!c)
        return fail ? 1 : 0;
    zb_err e = { { 0 } };
    int first = fail ? c->rank : c->world;
    if (c->min_int(c->ctx, &first, &e) != 0) {
        *err = e;
        return -1;
    }
    if (first == c->world)
        return 0;
    char msg[sizeof err->msg];
    memcpy(msg, err->msg, sizeof msg);
    if (c->bcast(c->ctx, msg, sizeof msg, first, &e) != 0) {
        *err = e;
        return -1;
    }
    msg[sizeof msg - 1] = '\0';
    if (c->rank != first)
        zb_fail(err, "rank %d: %s", first, msg);
    return 1;
}
