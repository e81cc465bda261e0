/*
 * test_vocab_cost.c: the cost model of vocabulary parallelism
 * (src/cost_vocab.h) on hand-checked figures and its invariants, moving
 * the head and embedding off the end stages of a priced schedule, and the
 * search's vocabulary-parallel candidates (labelled, re-simulating to
 * their figures, absent with vocab = 0).
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "schedules/gen.h"
#include "solver/search.h"
#include "src/cost_vocab.h"
#include "src/sim.h"
#include "src/validate.h"

/* A small bf16 model and GPU with round numbers. */
static void small(zb_model *m, zb_gpu *g)
{
    ck_assert_int_eq(model_preset("1.5B", m, NULL), 0);
    m->d_model = 1024;
    m->n_heads = 16;
    m->n_kv_heads = 16;
    m->d_ff = 4096;
    m->vocab = 32000;
    m->seq_len = 1024;
    m->micro_batch = 1;
    m->tied_embedding = 0;
    m->dtype = ZB_BF16;
    ck_assert_int_eq(gpu_preset("H100-80G", g, NULL), 0);
    g->peak_flops = 1e15;
    g->efficiency = 0.5;
    g->w_efficiency = 0.71; /* fixed here, so the hand checks do not move with the preset's fit */
    g->link_bw = 1e11;
    g->link_latency = 1e-5;
    g->hbm_bw = 2e12;
}

static int close_to(double a, double b)
{
    return fabs(a - b) <= 1e-9 * fmax(fabs(a), fabs(b)) + 1e-15;
}

START_TEST(hand_checked)
{
    zb_model m;
    zb_gpu g;
    small(&m, &g);
    cost_options o;
    cost_options_default(&o);
    zb_err err = { "" };
    /* Ring all-reduce of 1e8 bytes over 4: 2*3/4 * 1e8/1e11 + 6 * 1e-5. */
    ck_assert(close_to(cost_vocab_allreduce(&g, &o, 4, 1e8), 1.56e-3));
    ck_assert(cost_vocab_allreduce(&g, &o, 1, 1e8) == 0);
    cost_vocab_options vo;
    cost_vocab_options_default(&vo);
    cost_vocab v1;
    ck_assert_int_eq(cost_vocab_parts(&m, &g, &o, 4, &vo, &v1, &err), 0);
    /* t = 1024 tokens, h = 1024, v = 8000 per shard: one matmul 2thv. */
    double unit = 2.0 * 1024 * 1024 * 8000;
    ck_assert(v1.shard_vocab == 8000);
    ck_assert(close_to(v1.s_flops, 2 * unit) && close_to(v1.t_flops, unit));
    /* S: 2 matmuls at 5e14 plus t*v*(2+8) bytes at 2e12. */
    ck_assert(close_to(v1.t_s, 2 * unit / 5e14 + 1024.0 * 8000 * 10 / 2e12));
    /* T: dW at the W efficiency (0.71 above), as the unsharded head's W. */
    ck_assert(close_to(v1.t_t, unit / 7.1e14 + 1024.0 * 8000 * 4 / 2e12));
    /* Held S -> T: head input (bf16) + statistics (fp32 max and target, fp64
     * sum: 16 bytes a token) + fp32 logit gradient + Vocab-1's fp32 partial. */
    ck_assert(close_to(v1.m_s, 2.0 * 1024 * 1024 + 16.0 * 1024 + 4.0 * 1024 * 8000
                                   + 4.0 * 1024 * 1024));
    ck_assert(v1.c1_bytes == 0 && v1.t_c1 == 0);
    ck_assert(close_to(v1.c0_bytes, 12.0 * 1024 + 4.0 * 1024 * 1024));

    /* Vocab-2 moves the input gradient into T and its reduction into C1. */
    cost_vocab v2;
    vo.variant = 2;
    ck_assert_int_eq(cost_vocab_parts(&m, &g, &o, 4, &vo, &v2, &err), 0);
    ck_assert(close_to(v2.s_flops + v2.t_flops, v1.s_flops + v1.t_flops));
    ck_assert(close_to(v2.t_c0 + v2.t_c1, v1.t_c0));
    ck_assert(v2.t_c1 > v2.t_c0);
    /* Vocab-2's T: the partial G W at F/B's efficiency, dW at W's. */
    ck_assert(close_to(v2.t_t, unit / 5e14 + unit / 7.1e14 + 1024.0 * 8000 * 6 / 2e12));
    /* Vocab-2 holds no partial from S: it exists from T to barrier C1 */
    ck_assert(close_to(v2.m_s, 2.0 * 1024 * 1024 + 16.0 * 1024 + 4.0 * 1024 * 8000));

    /* Fused loss: no logits held, T recomputes them. */
    cost_options of = o;
    of.loss = COST_LOSS_FUSED;
    cost_vocab f1;
    vo.variant = 1;
    ck_assert_int_eq(cost_vocab_parts(&m, &g, &of, 4, &vo, &f1, &err), 0);
    ck_assert(close_to(f1.m_s, 2.0 * 1024 * 1024 + 16.0 * 1024 + 4.0 * 1024 * 1024));
    ck_assert(close_to(f1.t_flops, 2 * unit));

    /* The shard shrinks with p; the paper's scaling stretches the passes. */
    cost_vocab v8;
    ck_assert_int_eq(cost_vocab_parts(&m, &g, &o, 8, &vo, &v8, &err), 0);
    ck_assert(close_to(v8.s_flops * 2, v1.s_flops));
    vo.scaling = COST_VOCAB_PAPER_SCALING;
    cost_vocab vs;
    ck_assert_int_eq(cost_vocab_parts(&m, &g, &o, 4, &vo, &vs, &err), 0);
    ck_assert(close_to(vs.t_s * COST_VOCAB_PAPER_SCALING, v1.t_s));

    /* Tied: the head shard is the embedding shard's rows. */
    m.tied_embedding = 1;
    vo.scaling = 1;
    ck_assert_int_eq(cost_vocab_parts(&m, &g, &o, 4, &vo, &v1, &err), 0);
    ck_assert(v1.head_static == 0 && v1.emb_static > 0);

    /* Bad options. */
    vo.variant = 3;
    ck_assert_int_eq(cost_vocab_parts(&m, &g, &o, 4, &vo, &v1, &err), -1);
    vo.variant = 1;
    vo.scaling = 0;
    ck_assert_int_eq(cost_vocab_parts(&m, &g, &o, 4, &vo, &v1, &err), -1);
    vo.scaling = 1;
    ck_assert_int_eq(cost_vocab_parts(&m, &g, &o, 0, &vo, &v1, &err), -1);
}
END_TEST

/* The head leaves the last stage and the embedding the first: their
 * devices' static memory and the last stage's time drop, every device
 * gains the shards, and the schedule with passes validates. */
START_TEST(fill_sched_moves_head)
{
    zb_model m;
    zb_gpu g;
    small(&m, &g);
    m.n_layers = 8;
    cost_options o;
    cost_options_default(&o);
    gen_params gp;
    gen_params_default(&gp);
    sched_t *plain = NULL, *v = NULL, *vp = NULL;
    zb_err err = { "" };
    ck_assert_int_eq(gen_1f1b(&gp, &plain, &err), 0);
    ck_assert_int_eq(cost_fill_sched(&m, &g, &o, plain, &err), 0);
    v = sched_clone(plain);
    cost_vocab_options vo;
    cost_vocab_options_default(&vo);
    cost_vocab cv;
    ck_assert_msg(cost_vocab_fill_sched(&m, &g, &o, &vo, v, &cv, &err) == 0, "%s", err.msg);
    int last = plain->n_stages - 1;
    cost_part layer, emb, head;
    ck_assert_int_eq(cost_parts(&m, &g, &o, &layer, &emb, &head, &err), 0);
    ck_assert(close_to(v->cost[last].t_b, plain->cost[last].t_b - head.t_b * 1e3));
    ck_assert(close_to(v->cost[last].t_f, plain->cost[last].t_f - head.t_f * 1e3 + cv.t_bcast * 1e3));
    ck_assert(v->mem_static[3] < plain->mem_static[3]);
    ck_assert(v->mem_static[0] < plain->mem_static[0]);
    ck_assert(v->mem_static[1] > plain->mem_static[1]); /* shards on a middle device */
    ck_assert_int_eq(v->vocab.variant, 1);
    ck_assert(close_to(v->vocab.t_s, cv.t_s * 1e3) && close_to(v->vocab.d_s, cv.m_s));
    /* As zbsched's runtime holds them (whole_state, what the search
     * prices): the head's and embedding's weights, gradients and moments
     * stay on the last stage and stage 0, so only the passes' buffers are
     * added; no device holds a shard's state. */
    sched_t *w = sched_clone(plain);
    cost_vocab_options whole = vo;
    whole.whole_state = 1;
    ck_assert_msg(cost_vocab_fill_sched(&m, &g, &o, &whole, w, NULL, &err) == 0, "%s", err.msg);
    double bpp = cost_bytes_per_param(&m, &o);
    for (int d = 0; d < w->n_devices; d++) {
        ck_assert_msg(w->mem_static[d] < v->mem_static[d] + (double)m.vocab * m.d_model * bpp,
                      "device %d", d);
        ck_assert_msg(w->mem_static[d] + 0.5 * cv.head_static < v->mem_static[d] || d == 0 || d == last,
                      "device %d holds no shard's state", d);
    }
    ck_assert(w->mem_static[0] > v->mem_static[0]);
    ck_assert(w->mem_static[last] > v->mem_static[last]);
    sched_free(w);
    sched_vocab pv = v->vocab;
    sched_set_vocab(v, SCHED_VOCAB_NONE, 0, 0, 0, 0, 0, 0);
    ck_assert_msg(gen_vocab_insert(v, &pv, &vp, &err) == 0, "%s", err.msg);
    ck_assert_msg(sched_validate(vp, &err) == 0, "%s", err.msg);
    /* Already vocabulary-parallel, or not priced yet: refused. */
    ck_assert_int_eq(cost_vocab_fill_sched(&m, &g, &o, &vo, vp, NULL, &err), -1);
    sched_t *raw = NULL;
    ck_assert_int_eq(gen_1f1b(&gp, &raw, &err), 0);
    ck_assert_int_eq(cost_vocab_fill_sched(&m, &g, &o, &vo, raw, NULL, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "cost_fill_sched first"));
    sched_free(raw);
    sched_free(vp);
    sched_free(v);
    sched_free(plain);
}
END_TEST

/* The search's vocabulary-parallel candidates: present with --vocab
 * parallel (labelled, their schedule re-simulating to their time, the only
 * ones that may win), absent with plain. */
START_TEST(search_candidates)
{
    search_options o;
    search_options_default(&o);
    ck_assert_int_eq(model_preset("1.5B", &o.model, NULL), 0);
    o.n_gpus = 4;
    o.n_devices = 4;
    o.global_batch = 16;
    o.mem_bytes = 20e9;
    o.split_search = 0;
    o.vocab = SEARCH_VOCAB_PARALLEL; /* auto would not simulate versions that cannot win */
    search_result r;
    zb_err err = { "" };
    ck_assert_msg(search_run(&o, &r, &err) == 0, "%s", err.msg);
    int n_vocab = 0, checked = 0;
    for (int i = 0; i < r.n; i++) {
        const search_candidate *c = &r.c[i];
        if (!c->vocab)
            continue;
        n_vocab++;
        ck_assert_ptr_nonnull(strstr(c->label, "+vocab-"));
        if (c->sched && c->status == SEARCH_FIT && !checked) {
            sim_result sr;
            ck_assert(sched_has_vocab(c->sched) && c->sched->vocab.variant == c->vocab);
            ck_assert_int_eq(sim_run(c->sched, &sr, &err), 0);
            ck_assert(fabs(sr.cost - c->cost_ms) <= 1e-9 * c->cost_ms);
            sim_result_free(&sr);
            checked = 1;
        }
    }
    ck_assert_int_gt(n_vocab, 0);
    ck_assert_int_eq(checked, 1);
    ck_assert_int_gt(r.n_fit, 0);
    for (int i = 0; i < r.n_fit; i++)
        ck_assert_int_ne(r.c[i].vocab, 0);
    search_result_free(&r);
    o.vocab = 0;
    ck_assert_int_eq(search_run(&o, &r, &err), 0);
    for (int i = 0; i < r.n; i++)
        ck_assert_int_eq(r.c[i].vocab, 0);
    search_result_free(&r);
}
END_TEST

/* Recompute by stage (vocab_stage_rc): at 12 GB the 1.5B model on 4
 * devices fits only with some recompute, and interleaved versions leave
 * their last chunks without it.  A fitting such candidate with a schedule
 * re-simulates to its time, fits, recomputes exactly its first rc_stages
 * stages (their B carries F again), and the plan file says so. */
START_TEST(search_stage_recompute)
{
    search_options o;
    search_options_default(&o);
    ck_assert_int_eq(model_preset("1.5B", &o.model, NULL), 0);
    o.n_gpus = 4;
    o.n_devices = 4;
    o.global_batch = 16;
    o.mem_bytes = 12e9;
    o.split_search = 0;
    o.vocab = SEARCH_VOCAB_PARALLEL;
    search_result r;
    zb_err err = { "" };
    ck_assert_msg(search_run(&o, &r, &err) == 0, "%s", err.msg);
    search_candidate *c = NULL;
    for (int i = 0; i < r.n_fit && !c; i++)
        if (r.c[i].rc_stages > 0 && r.c[i].sched)
            c = &r.c[i];
    ck_assert_ptr_nonnull(c);
    ck_assert(c->rc_stages < c->n_stages && c->vocab != 0 && c->recompute);
    sim_result sr;
    ck_assert_int_eq(sim_run(c->sched, &sr, &err), 0);
    ck_assert(fabs(sr.cost - c->cost_ms) <= 1e-9 * c->cost_ms);
    for (int d = 0; d < c->sched->n_devices; d++)
        ck_assert(c->sched->mem_static[d] + sr.dev[d].peak_mem <= o.mem_bytes);
    sim_result_free(&sr);
    /* A recomputing stage's B runs its F again: B - F is the same work as
     * a plain stage's B with as many layers, so compare per layer. */
    const sched_t *s = c->sched;
    int q = c->rc_stages, last = s->n_stages - 1;
    ck_assert(c->layers[q - 1] == c->layers[q] && q < last);
    ck_assert(s->cost[q - 1].t_b > s->cost[q].t_b + 0.5 * s->cost[q].t_f);
    ck_assert_int_eq(search_annotate(&o, c, &err), 0);
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(s->meta, "plan"),
                                                       "recompute_stages");
    ck_assert_int_eq(cJSON_GetArraySize(rs), s->n_stages);
    for (int i = 0; i < s->n_stages; i++)
        ck_assert_int_eq(cJSON_IsTrue(cJSON_GetArrayItem(rs, i)), i < q);
    search_result_free(&r);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("vocab_cost");
    TCase *tc = tcase_create("vocab_cost");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, hand_checked);
    tcase_add_test(tc, fill_sched_moves_head);
    tcase_add_test(tc, search_candidates);
    tcase_add_test(tc, search_stage_recompute);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
