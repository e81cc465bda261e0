/*
 * test_vocab.c: vocabulary parallelism in the schedule model (sched.h):
 * the version-2 file (round trip, version 1 still written and read, every
 * refusal), the validator's barrier dependencies and their deadlock
 * messages, the simulator's barrier times worked by hand, the PyTorch CSV
 * refusal, and gen_vocab_insert on every handcrafted kind.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schedules/gen.h"
#include "src/sched_io.h"
#include "src/sim.h"
#include "src/torch_csv.h"
#include "src/validate.h"
#include "tests/common/sched_same.h"

/* p=2, one stage per device, m=1: device 0 F0 S0 T0 BW0, device 1 F0 S0
 * BW0 T0 (the example worked in docs/vocab-parallel.md). */
static sched_t *tiny_vocab(int variant)
{
    sched_t *s = sched_new(2, 1, 2);
    ck_assert_ptr_nonnull(s);
    sched_place_interleaved(s);
    sched_set_costs(s, 1, 1, 1, 0.1);
    sched_set_vocab(s, (sched_vocab_variant)variant, 0.5, 0.5, 1, -1, 0.25, 0.125);
    ck_assert_int_eq(sched_push(s, 0, OP_F, 0, 0), 0);
    ck_assert_int_eq(sched_push(s, 0, OP_S, 0, 0), 0);
    ck_assert_int_eq(sched_push(s, 0, OP_T, 0, 0), 0);
    ck_assert_int_eq(sched_push(s, 0, OP_BW, 0, 0), 0);
    ck_assert_int_eq(sched_push(s, 1, OP_F, 1, 0), 0);
    ck_assert_int_eq(sched_push(s, 1, OP_S, 1, 0), 0);
    if (variant == SCHED_VOCAB_2) { /* C1 needs T before the last stage's BW */
        ck_assert_int_eq(sched_push(s, 1, OP_T, 1, 0), 0);
        ck_assert_int_eq(sched_push(s, 1, OP_BW, 1, 0), 0);
    } else {
        ck_assert_int_eq(sched_push(s, 1, OP_BW, 1, 0), 0);
        ck_assert_int_eq(sched_push(s, 1, OP_T, 1, 0), 0);
    }
    return s;
}

static void expect_invalid(sched_t *s, const char *frag1, const char *frag2)
{
    zb_err err = { "" };
    ck_assert_int_eq(sched_validate(s, &err), -1);
    ck_assert_msg(strstr(err.msg, frag1), "message '%s' lacks '%s'", err.msg, frag1);
    if (frag2)
        ck_assert_msg(strstr(err.msg, frag2), "message '%s' lacks '%s'", err.msg, frag2);
    sched_free(s);
}

START_TEST(round_trip_version_2)
{
    for (int variant = 1; variant <= 2; variant++) {
        sched_t *s = tiny_vocab(variant), *t = NULL;
        char *text = sched_to_string(s);
        ck_assert_ptr_nonnull(text);
        ck_assert_ptr_nonnull(strstr(text, "\"version\": 2"));
        ck_assert_ptr_nonnull(strstr(text, "\"S0\""));
        zb_err err = { "" };
        ck_assert_msg(sched_load_string(text, strlen(text), &t, &err) == 0, "%s", err.msg);
        ck_assert_int_eq(t->vocab.variant, variant);
        ck_assert(t->vocab.t_s == 0.5 && t->vocab.t_t == 0.5 && t->vocab.t_c0 == 0.25);
        ck_assert(t->vocab.t_c1 == (variant == 2 ? 0.125 : 0));
        ck_assert(t->vocab.d_s == 1 && t->vocab.d_t == -1);
        ck_assert_int_eq(t->meta == NULL, 1); /* "vocab" is a field, not meta */
        for (int d = 0; d < 2; d++) {
            ck_assert_int_eq(t->dev[d].n_ops, s->dev[d].n_ops);
            for (int i = 0; i < s->dev[d].n_ops; i++) {
                ck_assert_int_eq(t->dev[d].ops[i].kind, s->dev[d].ops[i].kind);
                ck_assert_int_eq(t->dev[d].ops[i].stage, s->dev[d].ops[i].stage);
                ck_assert_int_eq(t->dev[d].ops[i].mb, s->dev[d].ops[i].mb);
            }
        }
        char *again = sched_to_string(t);
        ck_assert_str_eq(text, again); /* byte-identical second save */
        ck_assert_msg(sched_validate(t, &err) == 0, "%s", err.msg);
        free(again);
        free(text);
        sched_free(t);
        sched_free(s);
    }
}
END_TEST

/* A schedule without passes is still written as version 1, and a
 * version-1 file's own "vocab" field stays an unknown extra. */
START_TEST(version_1_unchanged)
{
    static const char doc[] =
        "{\"format\": \"zbsched-schedule\", \"version\": 1, \"devices\": 1, \"microbatches\": 1,"
        " \"stages\": 1, \"placement\": [0], \"costs\": {\"F\": 1, \"B\": 1, \"W\": 1},"
        " \"ops\": [[\"F0\", \"BW0\"]], \"vocab\": \"someone's note\"}";
    sched_t *s = NULL;
    zb_err err = { "" };
    ck_assert_msg(sched_load_string(doc, strlen(doc), &s, &err) == 0, "%s", err.msg);
    ck_assert(!sched_has_vocab(s));
    ck_assert_ptr_nonnull(cJSON_GetObjectItem(s->meta, "vocab"));
    char *text = sched_to_string(s);
    ck_assert_ptr_nonnull(strstr(text, "\"version\": 1"));
    ck_assert_ptr_nonnull(strstr(text, "\"vocab\": \"someone's note\""));
    free(text);
    sched_free(s);
}
END_TEST

typedef struct bad_v2 {
    const char *from, *to, *frag;
} bad_v2;

static const char v2_doc[] =
    "{\"format\": \"zbsched-schedule\", \"version\": 2, \"devices\": 1, \"microbatches\": 1,"
    " \"stages\": 1, \"placement\": [0], \"costs\": {\"F\": 1, \"B\": 1, \"W\": 1},"
    " \"vocab\": {\"variant\": 1, \"S\": 1, \"T\": 1, \"C0\": 0, \"memory\": {\"S\": 1, \"T\": -1}},"
    " \"ops\": [[\"F0\", \"S0\", \"T0\", \"BW0\"]]}";

static const bad_v2 bad_v2_cases[] = {
    { "\"variant\": 1", "\"variant\": 3", "vocab.variant is 3" },
    { "\"variant\": 1, ", "", "vocab.variant is missing" },
    { "\"S\": 1, \"T\"", "\"T\"", "vocab.S is missing" },
    { "\"C0\": 0", "\"C0\": -1", "vocab.C0 must not be negative" },
    { "\"variant\": 1", "\"variant\": 2", "vocab.C1 is missing" },
    { "{\"S\": 1, \"T\": -1}", "[1]", "vocab.memory must be an object" },
    { "\"vocab\": {", "\"vocab\": 5, \"x\": {", "vocab must be an object" },
    { "\"ops\"", "\"vocab\": {}, \"ops\"", "field 'vocab' appears twice" },
    { "\"S0\"", "\"S0@0\"", "S and T name no stage" },
    { "\"version\": 2", "\"version\": 1", "need version 2" },
    { "\"S0\"", "\"S7\"", "micro-batch 7 out of range" },
};

START_TEST(rejects_bad_version_2)
{
    const bad_v2 *c = &bad_v2_cases[_i];
    const char *at = strstr(v2_doc, c->from);
    ck_assert_msg(at != NULL, "case %d: '%s' not in the document", _i, c->from);
    char doc[1024];
    snprintf(doc, sizeof doc, "%.*s%s%s", (int)(at - v2_doc), v2_doc, c->to, at + strlen(c->from));
    sched_t *s = NULL;
    zb_err err = { "" };
    ck_assert_msg(sched_load_string(doc, strlen(doc), &s, &err) == -1, "case %d loaded", _i);
    ck_assert_msg(strstr(err.msg, c->frag), "case %d: '%s' lacks '%s'", _i, err.msg, c->frag);
}
END_TEST

START_TEST(v2_document_valid)
{
    sched_t *s = NULL;
    zb_err err = { "" };
    ck_assert_msg(sched_load_string(v2_doc, strlen(v2_doc), &s, &err) == 0, "%s", err.msg);
    ck_assert_msg(sched_validate(s, &err) == 0, "%s", err.msg);
    sched_free(s);
}
END_TEST

START_TEST(validator_accepts_and_rejects)
{
    zb_err err = { "" };
    for (int v = 1; v <= 2; v++) {
        sched_t *s = tiny_vocab(v);
        ck_assert_msg(sched_validate(s, &err) == 0, "variant %d: %s", v, err.msg);
        sched_free(s);
    }
    /* Missing T on device 0. */
    sched_t *s = tiny_vocab(1);
    s->dev[0].ops[2] = s->dev[0].ops[3];
    s->dev[0].n_ops--;
    expect_invalid(s, "device 0: missing vocabulary pass T for micro-batch 0", NULL);
    /* Duplicate S. */
    s = tiny_vocab(1);
    s->dev[0].ops[2] = s->dev[0].ops[1];
    expect_invalid(s, "device 0, op 2 (S0): duplicate op", NULL);
    /* A pass in a schedule without vocabulary parallelism. */
    s = tiny_vocab(1);
    sched_set_vocab(s, SCHED_VOCAB_NONE, 0, 0, 0, 0, 0, 0);
    expect_invalid(s, "without vocabulary parallelism", NULL);
    /* The shard must be the device. */
    s = tiny_vocab(1);
    s->dev[0].ops[1].stage = 1;
    expect_invalid(s, "vocabulary shard 1 is not this device's (0)", NULL);
    /* T before S on its own device: T waits for C0, which waits for that S. */
    s = tiny_vocab(1);
    sched_op tmp = s->dev[0].ops[1];
    s->dev[0].ops[1] = s->dev[0].ops[2];
    s->dev[0].ops[2] = tmp;
    expect_invalid(s, "deadlock", "(T0) comes before S0 (op 2) on the same device");
    /* The last stage's backward needs C0: device 0 holds its S behind a
     * backward that waits for the last stage. */
    s = tiny_vocab(1);
    s->dev[0].ops[1] = (sched_op){ OP_BW, 0, 0 };
    s->dev[0].ops[2] = (sched_op){ OP_S, 0, 0 };
    s->dev[0].ops[3] = (sched_op){ OP_T, 0, 0 };
    expect_invalid(s, "deadlock", "through barrier C0");
    /* Vocab-2: the last stage's backward needs C1, i.e. every T, its own
     * device's included. */
    s = tiny_vocab(2);
    s->dev[1].ops[2] = (sched_op){ OP_BW, 1, 0 };
    s->dev[1].ops[3] = (sched_op){ OP_T, 1, 0 };
    expect_invalid(s, "deadlock", "(BW0@1) comes before T0 (op 3) on the same device");
    s = tiny_vocab(2);
    s->dev[0].ops[2] = (sched_op){ OP_BW, 0, 0 };
    s->dev[0].ops[3] = (sched_op){ OP_T, 0, 0 };
    expect_invalid(s, "deadlock", "waits for T0 (device 0, op 3) through barrier C1");
}
END_TEST

/* Worked by hand in docs/vocab-parallel.md: F=B=W=1, T_comm 0.1, S=T=0.5,
 * C0 0.25, C1 0.125. */
START_TEST(simulator_barriers_by_hand)
{
    zb_err err = { "" };
    sim_result r;
    sched_t *s = tiny_vocab(1);
    ck_assert_msg(sim_run(s, &r, &err) == 0, "%s", err.msg);
    /* device 1: F [1.1, 2.1]; S [2.1, 2.6]; BW waits C0 = max(S ends) + 0.25 */
    ck_assert(fabs(r.dev[1].start[0] - 1.1) < 1e-12);
    ck_assert(fabs(r.dev[1].start[1] - 2.1) < 1e-12);
    /* device 0's S gets the head input by broadcast: 2.1 + 0.1 */
    ck_assert(fabs(r.dev[0].start[1] - 2.2) < 1e-12 && fabs(r.dev[0].end[1] - 2.7) < 1e-12);
    ck_assert(fabs(r.barrier[0][0] - 2.95) < 1e-12);
    ck_assert(fabs(r.dev[1].start[2] - 2.95) < 1e-12 && fabs(r.dev[1].end[2] - 4.95) < 1e-12);
    ck_assert(fabs(r.dev[0].start[2] - 2.95) < 1e-12); /* T after C0 */
    ck_assert(fabs(r.dev[1].start[3] - 4.95) < 1e-12); /* T behind BW in the lane */
    ck_assert(fabs(r.dev[0].start[3] - 5.05) < 1e-12 && fabs(r.dev[0].end[3] - 7.05) < 1e-12);
    ck_assert(fabs(r.cost - 7.05) < 1e-12);
    ck_assert(r.dev[0].peak_mem == 3 && r.dev[0].end_mem == 0); /* F +2, S +1 */
    sim_result_free(&r);
    sched_free(s);

    /* Vocab-2: T on device 1 [2.95, 3.45], device 0 [2.95, 3.45];
     * C1 = 3.45 + 0.125; BW on device 1 starts there. */
    s = tiny_vocab(2);
    ck_assert_msg(sim_run(s, &r, &err) == 0, "%s", err.msg);
    ck_assert(fabs(r.barrier[1][0] - 3.575) < 1e-12);
    ck_assert(fabs(r.dev[1].start[3] - 3.575) < 1e-12);
    ck_assert(fabs(r.cost - (3.575 + 2 + 0.1 + 2)) < 1e-12);
    sim_result_free(&r);
    sched_free(s);
}
END_TEST

START_TEST(torch_csv_refuses)
{
    zb_err err = { "" };
    sched_t *s = tiny_vocab(1);
    ck_assert_int_eq(torch_csv_check(s, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "cannot express vocabulary parallelism"));
    ck_assert_ptr_null(torch_csv_write(s));
    sched_set_vocab(s, SCHED_VOCAB_NONE, 0, 0, 0, 0, 0, 0);
    ck_assert_int_eq(torch_csv_check(s, &err), 0);
    sched_free(s);
}
END_TEST

/* The placement walk keeps each device's candidate until a commit may
 * have changed it (gen_vocab.c, mark_dirty).  gen_vocab_insert_checked
 * chooses every device afresh at every step and fails on a stale kept
 * candidate; over every kind, variant, lookahead and hold, several depths
 * and micro-batch counts, and uneven per-stage costs (so that ties and
 * orders vary), no step may find one, and the output must be the one
 * gen_vocab_insert_with gives. */
START_TEST(insert_cache_exact)
{
    static const char *const kinds[] = { "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v", "gpipe" };
    static const int depths[] = { 2, 3, 4, 8 };
    uint64_t rng = 12345;
    int placements = 0;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        for (size_t di = 0; di < sizeof depths / sizeof depths[0]; di++)
            for (int variant = 1; variant <= 2; variant++) {
                int p = depths[di];
                gen_params gp;
                gen_params_default(&gp);
                gp.stages = p;
                gp.microbatches = 2 * p + (k == 1 ? 0 : 1); /* interleaved needs m a multiple of p */
                gp.t_comm = 0.03 * (double)(di + 1);
                gp.chunks = k == 1 || k == 4 ? 2 : 1;
                sched_t *base = NULL;
                zb_err err = { "" };
                ck_assert_msg(gen_lookup(kinds[k])(&gp, &base, &err) == 0, "%s: %s", kinds[k], err.msg);
                for (int st = 0; st < base->n_stages; st++) { /* uneven stages */
                    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                    double u = (double)(rng >> 11) / 9007199254740992.0;
                    base->cost[st].t_f = 0.6 + u;
                    base->cost[st].t_b = 1.1 + 0.7 * u;
                    base->cost[st].t_w = 0.4 + 0.5 * (1 - u);
                }
                sched_vocab vp = { .variant = variant, .t_s = 0.35, .t_t = 0.45, .d_s = 1, .d_t = -1,
                                   .t_c0 = 0.08, .t_c1 = 0.12 };
                for (int look = 0; look <= GEN_VOCAB_MAX_LOOKAHEAD; look++)
                    for (int hold = 0; hold <= 1; hold++) {
                        sched_t *a = NULL, *b = NULL;
                        ck_assert_msg(gen_vocab_insert_checked(base, &vp, look, hold, &a, &err) == 0,
                                      "%s p=%d v%d look %d hold %d: %s", kinds[k], p, variant, look, hold,
                                      err.msg);
                        ck_assert_msg(gen_vocab_insert_with(base, &vp, look, hold, &b, &err) == 0, "%s",
                                      err.msg);
                        ck_assert_msg(sched_same_lanes(a, b), "%s p=%d v%d look %d hold %d: the kept candidates "
                                      "placed differently", kinds[k], p, variant, look, hold);
                        sched_free(a);
                        sched_free(b);
                        placements++;
                    }
                sched_free(base);
            }
    ck_assert_int_eq(placements, 6 * 4 * 2 * (GEN_VOCAB_MAX_LOOKAHEAD + 1) * 2);
}
END_TEST

/* The walk's stop rule (gen_vocab_stop) gives up exactly on the
 * placements that meet it: each placement is made whole, then again with
 * a peak or a span to beat (alone, or with a time added to every
 * device's span) just past its own (it must come out the same, lane for
 * lane and cost for cost) and just short of it (it must stop, saying
 * which rule did), on several kinds, depths and devices' static memory. */
START_TEST(insert_stop_exact)
{
    static const char *const kinds[] = { "1f1b", "interleaved", "zb-h2", "zb-v" };
    int stopped = 0;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        for (int p = 2; p <= 8; p *= 2)
            for (int variant = 1; variant <= 2; variant++) {
                gen_params gp;
                gen_params_default(&gp);
                gp.stages = p;
                gp.microbatches = 2 * p;
                gp.t_comm = 0.05;
                gp.chunks = k == 1 || k == 3 ? 2 : 1;
                sched_t *base = NULL;
                zb_err err = { "" };
                ck_assert_msg(gen_lookup(kinds[k])(&gp, &base, &err) == 0, "%s: %s", kinds[k], err.msg);
                base->mem_static = malloc(sizeof(double) * (size_t)p);
                ck_assert_ptr_nonnull(base->mem_static);
                for (int d = 0; d < p; d++)
                    base->mem_static[d] = 3.0 * ((d * 7) % p); /* uneven: the peak is not the lanes' alone */
                for (int st = 0; st < base->n_stages; st++)
                    base->cost[st].t_b = 1.2 + 0.1 * (st % 3);
                sched_vocab vp = { .variant = variant, .t_s = 0.35, .t_t = 0.45, .d_s = 1, .d_t = -1,
                                   .t_c0 = 0.08, .t_c1 = 0.12 };
                for (int q = 0; q < 2 * (GEN_VOCAB_MAX_LOOKAHEAD + 1); q++) {
                    sched_t *whole = NULL, *s = NULL;
                    double cost = NAN, c2 = NAN, peak = 0;
                    ck_assert_int_eq(gen_vocab_insert_trusted(base, &vp, q / 2, q % 2, NULL, &whole, &cost, &err), 0);
                    for (int d = 0; d < p; d++)
                        peak = fmax(peak, base->mem_static[d] + sched_lane_peak(whole, d));
                    /* the third rule adds the same time to every device's span */
                    double add[8];
                    for (int d = 0; d < p; d++)
                        add[d] = 0.5 * cost;
                    const gen_vocab_stop pass[3] = { { peak, 1, INFINITY, NULL },
                                                     { INFINITY, 2, 2 * cost * (1 + 1e-6), NULL },
                                                     { INFINITY, 2, 3 * cost * (1 + 1e-6), add } };
                    const gen_vocab_stop stop[3] = { { nextafter(peak, 0), 1, INFINITY, NULL },
                                                     { INFINITY, 2, 2 * cost * (1 - 1e-6), NULL },
                                                     { INFINITY, 2, 3 * cost * (1 - 1e-6), add } };
                    for (int r = 0; r < 3; r++) {
                        ck_assert_int_eq(gen_vocab_insert_trusted(base, &vp, q / 2, q % 2, &pass[r], &s, &c2, &err), 0);
                        ck_assert_msg(sched_same_lanes(s, whole) && c2 == cost, "%s p=%d v%d q=%d rule %d: changed",
                                      kinds[k], p, variant, q, r);
                        sched_free(s);
                        ck_assert_int_eq(gen_vocab_insert_trusted(base, &vp, q / 2, q % 2, &stop[r], &s, &c2, &err),
                                         r == 0 ? 1 : 2); /* which rule stopped it */
                        ck_assert_ptr_null(s);
                        stopped++;
                    }
                    sched_free(whole);
                }
                sched_free(base);
            }
    ck_assert_int_eq(stopped, 4 * 3 * 2 * 3 * (GEN_VOCAB_MAX_LOOKAHEAD + 1) * 2);
}
END_TEST

/* Every handcrafted kind, both variants: the result validates, keeps the
 * order of each device's forwards and of its other ops, and holds one S and one T per device and
 * micro-batch. */
START_TEST(insert_every_kind)
{
    static const char *const kinds[] = { "gpipe", "1f1b", "interleaved", "interleaved-zb",
                                         "zb-h1", "zb-h2", "zb-v" };
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        for (int variant = 1; variant <= 2; variant++) {
            gen_params gp;
            gen_params_default(&gp);
            gp.stages = 4;
            gp.microbatches = 8;
            gp.t_comm = 0.05;
            if (k == 2 || k == 3 || k == 6)
                gp.chunks = 2;
            sched_t *base = NULL, *v = NULL;
            zb_err err = { "" };
            ck_assert_msg(gen_lookup(kinds[k])(&gp, &base, &err) == 0, "%s: %s", kinds[k], err.msg);
            sched_vocab vp = { .variant = variant, .t_s = 0.4, .t_t = 0.3, .d_s = 1, .d_t = -1,
                               .t_c0 = 0.1, .t_c1 = 0.05 };
            ck_assert_msg(gen_vocab_insert(base, &vp, &v, &err) == 0, "%s: %s", kinds[k], err.msg);
            ck_assert_msg(sched_validate(v, &err) == 0, "%s: %s", kinds[k], err.msg);
            char want[80];
            snprintf(want, sizeof want, "%s+vocab-%d", kinds[k], variant);
            ck_assert_str_eq(v->name, want);
            for (int d = 0; d < 4; d++) {
                /* Forwards keep their order, and so do the other base
                 * ops; only forwards may move ahead of backwards (the
                 * lookahead), by at most GEN_VOCAB_MAX_LOOKAHEAD. */
                int n_s = 0, n_t = 0, fi = 0, oi = 0, n_base = 0;
                for (int i = 0; i < v->dev[d].n_ops; i++) {
                    sched_op op = v->dev[d].ops[i];
                    if (op.kind == OP_S) {
                        n_s++;
                        continue;
                    }
                    if (op.kind == OP_T) {
                        n_t++;
                        continue;
                    }
                    n_base++;
                    int want_f = op.kind == OP_F;
                    int *cursor = want_f ? &fi : &oi;
                    while (*cursor < base->dev[d].n_ops && (base->dev[d].ops[*cursor].kind == OP_F) != want_f)
                        (*cursor)++;
                    ck_assert_int_lt(*cursor, base->dev[d].n_ops);
                    sched_op b = base->dev[d].ops[(*cursor)++];
                    ck_assert(b.kind == op.kind && b.stage == op.stage && b.mb == op.mb);
                }
                ck_assert_int_eq(n_base, base->dev[d].n_ops);
                ck_assert_int_eq(n_s, 8);
                ck_assert_int_eq(n_t, 8);
            }
            /* The passes add exactly their own work to every device. */
            sim_result rb, rv;
            ck_assert_int_eq(sim_run(base, &rb, &err), 0);
            ck_assert_int_eq(sim_run(v, &rv, &err), 0);
            for (int d = 0; d < 4; d++)
                ck_assert(fabs(rv.dev[d].busy - rb.dev[d].busy - 8 * 0.7) < 1e-9);
            ck_assert(rv.cost >= rb.cost);
            sim_result_free(&rb);
            sim_result_free(&rv);
            sched_free(v);
            sched_free(base);
        }
}
END_TEST

START_TEST(insert_refuses)
{
    gen_params gp;
    gen_params_default(&gp);
    sched_t *base = NULL, *v = NULL, *v2 = NULL;
    zb_err err = { "" };
    ck_assert_int_eq(gen_1f1b(&gp, &base, &err), 0);
    sched_vocab bad = { .variant = 0, .t_s = 1, .t_t = 1 };
    ck_assert_int_eq(gen_vocab_insert(base, &bad, &v, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "variant must be 1 or 2"));
    bad.variant = 1;
    bad.t_c0 = -1;
    ck_assert_int_eq(gen_vocab_insert(base, &bad, &v, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "C0 time must be finite and not negative"));
    bad.t_c0 = 0;
    ck_assert_int_eq(gen_vocab_insert(base, &bad, &v, &err), 0);
    ck_assert_int_eq(gen_vocab_insert(v, &bad, &v2, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "already has vocabulary passes"));
    ck_assert_ptr_null(v2);
    sched_free(v);
    sched_free(base);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("vocab");
    TCase *tc = tcase_create("vocab");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, round_trip_version_2);
    tcase_add_test(tc, version_1_unchanged);
    tcase_add_loop_test(tc, rejects_bad_version_2, 0, (int)(sizeof bad_v2_cases / sizeof bad_v2_cases[0]));
    tcase_add_test(tc, v2_document_valid);
    tcase_add_test(tc, validator_accepts_and_rejects);
    tcase_add_test(tc, simulator_barriers_by_hand);
    tcase_add_test(tc, torch_csv_refuses);
    tcase_add_test(tc, insert_every_kind);
    tcase_add_test(tc, insert_cache_exact);
    tcase_add_test(tc, insert_stop_exact);
    tcase_add_test(tc, insert_refuses);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
