/*
 * link_plan.c: the order of every link's messages, derived from the
 * schedule alone (link_plan.h), so that both ends of a link agree on it
 * without tags.
 *
 * Two passes over the lanes: the first counts each link's messages, the
 * second fills them in send order.  Sends of a lane, in op order:
 *   F(s, j), s < S-1        ACT   into (s+1, j)  to dev(s+1)
 *   B or BW(s, j), s > 0    GRAD  into (s-1, j)  to dev(s-1)
 * then, with post-validation, for the lane's stages s increasing
 *   s < S-1                 NORM_UP   into s+1   to dev(s+1)
 * and for its stages s decreasing
 *   s > 0                   NORM_DOWN into s-1   to dev(s-1)
 * which is the order the executor's workers send in (trainer_ops.c).
 */
#include "runtime/link_plan.h"

#include <stdlib.h>
#include <string.h>

/* Calls emit(ctx, from, to, key) for every message of s in send order. */
typedef void (*emit_fn)(void *ctx, int from, int to, zb_msg_key key);

static void walk(const sched_t *s, int with_norms, emit_fn emit, void *ctx)
{
    int S = s->n_stages;
    for (int d = 0; d < s->n_devices; d++) {
        const sched_lane *lane = &s->dev[d];
        for (int k = 0; k < lane->n_ops; k++) {
            sched_op op = lane->ops[k];
            if (op.kind == OP_F && op.stage < S - 1)
                emit(ctx, d, s->stage_device[op.stage + 1],
                     (zb_msg_key){ CHAN_ACT, op.stage + 1, op.mb });
            else if ((op.kind == OP_B || op.kind == OP_BW) && op.stage > 0)
                emit(ctx, d, s->stage_device[op.stage - 1],
                     (zb_msg_key){ CHAN_GRAD, op.stage - 1, op.mb });
        }
        if (!with_norms)
            continue;
        for (int st = 0; st < S - 1; st++)
            if (s->stage_device[st] == d)
                emit(ctx, d, s->stage_device[st + 1], (zb_msg_key){ CHAN_NORM_UP, st + 1, 0 });
        for (int st = S - 1; st > 0; st--)
            if (s->stage_device[st] == d)
                emit(ctx, d, s->stage_device[st - 1], (zb_msg_key){ CHAN_NORM_DOWN, st - 1, 0 });
    }
}

/* Pass 1: messages per (from, to). */
typedef struct count_ctx {
    int p;        /* devices */
    int *count;   /* [p*p] */
} count_ctx;

static void count_one(void *c, int from, int to, zb_msg_key key)
{
    (void)key;
    count_ctx *cc = c;
    cc->count[from * cc->p + to]++;
}

/* Pass 2: fill the links and the key index. */
typedef struct fill_ctx {
    zb_link_plan *plan; /* being filled */
    int *link_at;       /* [p*p] link index of (from, to) */
} fill_ctx;

static void fill_one(void *c, int from, int to, zb_msg_key key)
{
    fill_ctx *fc = c;
    zb_link_plan *p = fc->plan;
    int l = fc->link_at[from * p->n_devices + to];
    zb_link *ln = &p->links[l];
    size_t k = link_plan_key(p, key.kind, key.stage, key.mb);
    p->link_of_key[k] = l;
    p->seq_of_key[k] = ln->n_msgs;
    ln->msgs[ln->n_msgs++] = key;
}

int link_plan_locate(const zb_link_plan *p, int me, int receiving, zb_msg_key key, int *link,
                     int *seq, zb_err *err)
{
    size_t k = link_plan_key(p, key.kind, key.stage, key.mb);
    int l = p->link_of_key[k];
    if (!receiving && (l < 0 || p->links[l].from != me))
        return zb_fail(err, "transport: message (%d, stage %d, mb %d) is not this device's to send",
                       key.kind, key.stage, key.mb);
    if (receiving && (l < 0 || p->links[l].to != me))
        return zb_fail(err, "transport: nobody sends (%d, stage %d, mb %d) to this device",
                       key.kind, key.stage, key.mb);
    *link = l;
    *seq = p->seq_of_key[k];
    return 0;
}

int link_plan_order_error(zb_msg_key key, int sent, int planned, zb_err *err)
{
    return zb_fail(err, "transport: (%d, stage %d, mb %d) sent as message %d of its link, the "
                   "plan has it at %d", key.kind, key.stage, key.mb, sent, planned);
}

void link_plan_free(zb_link_plan *p)
{
    if (p->links)
        for (int l = 0; l < p->n_links; l++)
            free(p->links[l].msgs);
    free(p->links);
    free(p->link_of_key);
    free(p->seq_of_key);
    memset(p, 0, sizeof *p);
}

int link_plan_build(const sched_t *s, int with_norms, zb_link_plan *out, zb_err *err)
{
    int P = s->n_devices;
    memset(out, 0, sizeof *out);
    out->n_devices = P;
    out->n_stages = s->n_stages;
    out->n_micro = s->n_micro;
    size_t n_keys = (size_t)CHAN_KIND_COUNT * (size_t)s->n_stages * (size_t)s->n_micro;
    int *count = calloc((size_t)P * (size_t)P, sizeof *count);
    int *link_at = malloc(sizeof *link_at * (size_t)P * (size_t)P);
    out->link_of_key = malloc(sizeof *out->link_of_key * n_keys);
    out->seq_of_key = malloc(sizeof *out->seq_of_key * n_keys);
    if (!count || !link_at || !out->link_of_key || !out->seq_of_key) {
        free(count);
        free(link_at);
        link_plan_free(out);
        return zb_fail(err, "out of memory for the link plan");
    }
    for (size_t k = 0; k < n_keys; k++)
        out->link_of_key[k] = out->seq_of_key[k] = -1;
    count_ctx cc = { P, count };
    walk(s, with_norms, count_one, &cc);
    for (int i = 0; i < P * P; i++)
        out->n_links += count[i] > 0;
    out->links = calloc((size_t)(out->n_links ? out->n_links : 1), sizeof *out->links);
    int oom = !out->links, l = 0;
    for (int i = 0; i < P * P && !oom; i++) {
        link_at[i] = -1;
        if (count[i] == 0)
            continue;
        out->links[l] = (zb_link){ .from = i / P, .to = i % P };
        out->links[l].msgs = malloc(sizeof(zb_msg_key) * (size_t)count[i]);
        oom = !out->links[l].msgs;
        link_at[i] = l++;
    }
    if (!oom) {
        fill_ctx fc = { out, link_at };
        walk(s, with_norms, fill_one, &fc);
    }
    free(count);
    free(link_at);
    if (oom) {
        link_plan_free(out);
        return zb_fail(err, "out of memory for the link plan");
    }
    return 0;
}

int link_plan_channel(const zb_link_plan *p, int l, int me, int *key)
{
    const zb_link *ln = &p->links[l];
    *key = -1;
    if (ln->from == ln->to || (me != ln->from && me != ln->to))
        return -1;
    *key = me == ln->from ? 0 : 1;
    return l;
}
