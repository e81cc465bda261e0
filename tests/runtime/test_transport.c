/*
 * test_transport.c: transports and the link plan (runtime/transport.h).
 *
 *   - the link plan lists every message once, in each sender's order, and
 *     its key -> position index agrees with the lists;
 *   - ZB-V has links whose receiver needs messages in another order than
 *     they are sent (the case a tag-free transport must handle: its two
 *     stage boundaries between the same devices interleave), plain 1F1B
 *     and ZB-H1 have none;
 *   - the trainer on the FIFO transport (untagged ordered links, the model
 *     of MPI and NCCL) gives bit-identical results to the keyed slots
 *     transport and to the single-device run for 1F1B, interleaved, ZB-H1
 *     and ZB-V, with post-validation and with the synchronous clip;
 *   - a sender that breaks the plan's order is an error, not a mix-up.
 */
#include <check.h>
#include <string.h>

#include "runtime/link_plan.h"
#include "runtime/transport.h"
#include "runtime/transport_factory.h"
#include "schedules/gen.h"
#include "tests/common/trainer_fixture.h"

#define M 4
#define STEPS 2

static sched_t *make(const char *kind, int p, int chunks)
{
    gen_params gp;
    gen_params_default(&gp);
    gp.stages = p;
    gp.microbatches = M;
    gp.chunks = chunks;
    double limit[4] = { 4.0 * p, 4.0 * p, 4.0 * p, 4.0 * p };
    gp.mem_limit = limit;
    sched_t *s = NULL;
    zb_err err = { { 0 } };
    ck_assert_msg(gen_lookup(kind)(&gp, &s, &err) == 0, "%s: %s", kind, err.msg);
    return s;
}

/* The order in which device `to` consumes the messages of link l. */
static int receive_order_differs(const sched_t *s, const zb_link_plan *p, int l)
{
    const zb_link *ln = &p->links[l];
    int next = 0, S = s->n_stages;
    const sched_lane *lane = &s->dev[ln->to];
    for (int k = 0; k < lane->n_ops; k++) {
        sched_op op = lane->ops[k];
        zb_msg_key key;
        if (op.kind == OP_F && op.stage > 0)
            key = (zb_msg_key){ CHAN_ACT, op.stage, op.mb };
        else if ((op.kind == OP_B || op.kind == OP_BW) && op.stage < S - 1)
            key = (zb_msg_key){ CHAN_GRAD, op.stage, op.mb };
        else
            continue;
        size_t ki = link_plan_key(p, key.kind, key.stage, key.mb);
        if (p->link_of_key[ki] != l)
            continue;
        if (p->seq_of_key[ki] != next)
            return 1;
        next++;
    }
    return 0;
}

START_TEST(plan_lists_every_message_once)
{
    struct { const char *kind; int p, chunks, differs; } cases[] = {
        { "1f1b", 2, 1, 0 }, { "zb-h1", 4, 1, 0 }, { "interleaved", 2, 2, -1 }, { "zb-v", 2, 2, 1 },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        sched_t *s = make(cases[c].kind, cases[c].p, cases[c].chunks);
        zb_link_plan p;
        zb_err err = { { 0 } };
        ck_assert_int_eq(link_plan_build(s, 1, &p, &err), 0);
        int S = s->n_stages, total = 0, differs = 0;
        for (int l = 0; l < p.n_links; l++) {
            const zb_link *ln = &p.links[l];
            for (int k = 0; k < ln->n_msgs; k++) {
                size_t ki = link_plan_key(&p, ln->msgs[k].kind, ln->msgs[k].stage, ln->msgs[k].mb);
                ck_assert_int_eq(p.link_of_key[ki], l);
                ck_assert_int_eq(p.seq_of_key[ki], k);
                /* the link joins the stages' devices */
                int into = ln->msgs[k].stage;
                ck_assert_int_eq(s->stage_device[into], ln->to);
            }
            total += ln->n_msgs;
            differs |= receive_order_differs(s, &p, l);
        }
        /* ACT and GRAD per boundary and micro-batch, NORM up and down per boundary */
        ck_assert_int_eq(total, 2 * (S - 1) * M + 2 * (S - 1));
        if (cases[c].differs >= 0) /* -1: either way */
            ck_assert_msg(differs == cases[c].differs, "%s: receive order differs %d",
                          cases[c].kind, differs);
        link_plan_free(&p);
        ck_assert_int_eq(link_plan_build(s, 0, &p, &err), 0);
        total = 0;
        for (int l = 0; l < p.n_links; l++)
            total += p.links[l].n_msgs;
        ck_assert_int_eq(total, 2 * (S - 1) * M);
        link_plan_free(&p);
        sched_free(s);
    }
}
END_TEST

static fixture_run train(const sched_t *s, const zb_data *d, int transport, int sync)
{
    trainer_opts o;
    trainer_opts_default(&o);
    o.seed = 5;
    o.adamw.lr = 3e-3f;
    o.adamw.warmup_steps = 0;
    o.adamw.grad_clip = 0.5f; /* low enough that post-validation rolls back */
    o.eval_windows = 4;
    o.transport = transport;
    o.sync_optimizer = sync;
    return fixture_train(s, d, &o, STEPS);
}

/* The NCCL transport's channels (link_plan_channel): every link between
 * two devices is one communicator split from the ranks' one, whose only
 * members are its two ends, the sender as rank 0; links to itself and
 * links of other devices get no colour.  Every rank computes the same
 * colours in the same plan order, so the splits match up. */
START_TEST(each_link_is_a_channel_of_its_two_ends)
{
    static const struct { const char *kind; int p, v; } cases[] = {
        { "1f1b", 4, 1 }, { "zb-v", 2, 2 }, { "zb-v", 4, 2 }, { "interleaved", 4, 2 },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        sched_t *s = make(cases[c].kind, cases[c].p, cases[c].v);
        zb_link_plan p;
        zb_err err = { { 0 } };
        ck_assert_int_eq(link_plan_build(s, 1, &p, &err), 0);
        int self_links = 0;
        for (int l = 0; l < p.n_links; l++) {
            const zb_link *ln = &p.links[l];
            int members = 0;
            for (int me = 0; me < p.n_devices; me++) {
                int key, colour = link_plan_channel(&p, l, me, &key);
                if (ln->from == ln->to || (me != ln->from && me != ln->to)) {
                    ck_assert_int_eq(colour, -1);
                    ck_assert_int_eq(key, -1);
                    continue;
                }
                ck_assert_int_eq(colour, l); /* distinct per link: one channel each */
                ck_assert_int_eq(key, me == ln->from ? 0 : 1);
                members++;
            }
            ck_assert_int_eq(members, ln->from == ln->to ? 0 : 2);
            self_links += ln->from == ln->to;
            /* the opposite direction is another link, hence another channel */
            for (int o = 0; o < p.n_links; o++)
                if (o != l && p.links[o].from == ln->to && p.links[o].to == ln->from) {
                    int k1, k2;
                    ck_assert_int_ne(link_plan_channel(&p, o, ln->from, &k1),
                                     link_plan_channel(&p, l, ln->from, &k2));
                }
        }
        /* V-shape: the turn (stages p-1 and p on the last device) is a link
         * to itself, carried in-process */
        if (strcmp(cases[c].kind, "zb-v") == 0)
            ck_assert_int_ge(self_links, 1);
        link_plan_free(&p);
        sched_free(s);
    }
}
END_TEST

START_TEST(locate_finds_each_key_only_at_its_two_ends)
{
    /* The lookup the rank transports (MPI, NCCL) share: every planned key
     * is found at its sender when sending and at its receiver when
     * receiving, at its plan position, and refused at every other device;
     * a key the plan never sends is refused everywhere. */
    sched_t *s = make("zb-v", 2, 2);
    zb_link_plan p;
    zb_err err = { { 0 } };
    ck_assert_int_eq(link_plan_build(s, 1, &p, &err), 0);
    for (int l = 0; l < p.n_links; l++)
        for (int i = 0; i < p.links[l].n_msgs; i++) {
            zb_msg_key key = p.links[l].msgs[i];
            for (int me = 0; me < p.n_devices; me++)
                for (int receiving = 0; receiving <= 1; receiving++) {
                    int end = receiving ? p.links[l].to : p.links[l].from;
                    int got_l = -1, got_seq = -1;
                    int rc = link_plan_locate(&p, me, receiving, key, &got_l, &got_seq, &err);
                    if (me == end) {
                        ck_assert_int_eq(rc, 0);
                        ck_assert_int_eq(got_l, l);
                        ck_assert_int_eq(got_seq, i);
                    } else {
                        ck_assert_int_eq(rc, -1);
                        ck_assert_ptr_nonnull(strstr(err.msg, receiving ? "nobody sends"
                                                                        : "not this device's"));
                    }
                }
        }
    zb_msg_key never = { CHAN_ACT, 0, 0 }; /* stage 0 receives no activation */
    int l, seq;
    ck_assert_int_eq(link_plan_locate(&p, 0, 1, never, &l, &seq, &err), -1);
    ck_assert_int_eq(link_plan_locate(&p, 1, 0, never, &l, &seq, &err), -1);
    ck_assert_int_eq(link_plan_order_error(never, 3, 1, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "sent as message 3 of its link, the plan has it at 1"));
    link_plan_free(&p);
    sched_free(s);
}
END_TEST

START_TEST(fifo_transport_is_bit_identical)
{
    zb_data *d = fixture_data(fixture_model().seq_len);
    sched_t *single = fixture_single(M);
    for (int sync = 0; sync <= 1; sync++) {
        fixture_run ref = train(single, d, ZB_TRANSPORT_SLOTS, sync);
        struct { const char *kind; int p, chunks; } cases[] = {
            { "1f1b", 2, 1 }, { "interleaved", 2, 2 }, { "zb-h1", 2, 1 }, { "zb-v", 2, 2 },
        };
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            sched_t *s = make(cases[c].kind, cases[c].p, cases[c].chunks);
            char what[96];
            for (int tr = ZB_TRANSPORT_SLOTS; tr <= ZB_TRANSPORT_FIFO; tr++) {
                fixture_run r = train(s, d, tr, sync);
                snprintf(what, sizeof what, "%s on %s, %s", cases[c].kind,
                         tr == ZB_TRANSPORT_FIFO ? "fifo" : "slots",
                         sync ? "synchronous clip" : "post-validation");
                fixture_assert_same(&ref, &r, what);
                free(r.params);
            }
            sched_free(s);
        }
        free(ref.params);
    }
    sched_free(single);
    data_free(d);
}
END_TEST

/* A pool over malloc/free for the transport-level test. */
static void *heap_get(void *ctx)
{
    (void)ctx;
    return malloc(16);
}

static void heap_put(void *ctx, void *buf)
{
    (void)ctx;
    free(buf);
}

START_TEST(out_of_order_send_is_an_error)
{
    sched_t *s = make("1f1b", 2, 1);
    zb_transport_pool pool = { heap_get, heap_put, NULL };
    zb_transport *tr = NULL;
    zb_err err = { { 0 } };
    ck_assert_int_eq(transport_create(ZB_TRANSPORT_FIFO, s, 0, &pool, &tr, &err), 0);
    /* device 0 sends the activation of micro-batch 1 before that of 0 */
    ck_assert_int_eq(tr->ops->send(tr, (zb_msg_key){ CHAN_ACT, 1, 1 }, heap_get(NULL), 0, &err), -1);
    ck_assert_msg(strstr(err.msg, "plan has it at 1") != NULL, "%s", err.msg);
    /* in order it goes through, and the receiver may take them in any order */
    ck_assert_int_eq(tr->ops->send(tr, (zb_msg_key){ CHAN_ACT, 1, 0 }, heap_get(NULL), 1.5, &err), 0);
    ck_assert_int_eq(tr->ops->send(tr, (zb_msg_key){ CHAN_ACT, 1, 1 }, heap_get(NULL), 2.5, &err), 0);
    void *b;
    double v;
    ck_assert_int_eq(tr->ops->recv(tr, (zb_msg_key){ CHAN_ACT, 1, 1 }, &b, &v, &err), 0);
    ck_assert(v == 2.5);
    free(b);
    ck_assert_int_eq(tr->ops->recv(tr, (zb_msg_key){ CHAN_ACT, 1, 0 }, &b, &v, &err), 0);
    ck_assert(v == 1.5);
    free(b);
    /* a key nobody sends; an abort wakes a receiver with an error */
    ck_assert_int_eq(tr->ops->recv(tr, (zb_msg_key){ CHAN_ACT, 0, 0 }, &b, &v, &err), -1);
    tr->ops->abort(tr);
    ck_assert_int_eq(tr->ops->recv(tr, (zb_msg_key){ CHAN_ACT, 1, 2 }, &b, &v, &err), -1);
    ck_assert_str_eq(err.msg, "aborted");
    /* reset drops what is in flight (its buffer back to the pool) and
     * clears the abort */
    ck_assert_int_eq(tr->ops->send(tr, (zb_msg_key){ CHAN_ACT, 1, 2 }, heap_get(NULL), 0, &err), 0);
    tr->ops->reset(tr);
    ck_assert_int_eq(tr->ops->send(tr, (zb_msg_key){ CHAN_ACT, 1, 0 }, heap_get(NULL), 0, &err), 0);
    transport_free(tr);
    sched_free(s);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("transport");
    TCase *tc = tcase_create("transport");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, plan_lists_every_message_once);
    tcase_add_test(tc, each_link_is_a_channel_of_its_two_ends);
    tcase_add_test(tc, locate_finds_each_key_only_at_its_two_ends);
    tcase_add_test(tc, fifo_transport_is_bit_identical);
    tcase_add_test(tc, out_of_order_send_is_an_error);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
