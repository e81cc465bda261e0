/*
 * test_cost.c: the cost model (src/cost_model.h) against figures computed by
 * hand, the zero-bubble paper's Table 1 identities, and its Table 9 profile.
 *
 * Hand computation for the paper's 1.5B model (22 layers, h=2304, a=24,
 * s=1024, b=6, vocab 50304, GPT-style, bf16), flash attention OFF so that
 * Table 1 applies literally, 8 pipeline stages on A100-80G:
 *
 *   s*b = 6144 tokens.
 *   Per layer M_B = sb(34h + 5as) = 6144 * (78336 + 122880) = 1,236,271,104 B
 *   Per layer M_W = 32sbh          = 32 * 6144 * 2304      =   452,984,832 B
 *   Layer split (first/last one fewer): 22+2 = 24 slots / 8 = 3 each
 *       -> [2,3,3,3,3,3,3,2]
 *   Layer params = 12h^2 + 13h = 63,700,992 + 29,952 = 63,730,944
 *   Bytes/param (bf16 weights 2, fp32 grads 4, fp32 master+m+v 12) = 18
 *   Middle stage (3 layers):
 *       static  = 3 * 63,730,944 * 18 = 3,441,470,976 B
 *       M_B     = 3 * 1,236,271,104   = 3,708,813,312 B
 *       M_W     = 3 *   452,984,832   = 1,358,954,496 B
 *       mem_static(device) = static + reserve 3e9 = 6,441,470,976 B
 *   First stage (2 layers + embedding):
 *       embedding params = V*h + s*h (learned positions)
 *                        = 115,900,416 + 2,359,296 = 118,259,712
 *       params = 127,461,888 + 118,259,712 = 245,721,600 -> *18 = 4,422,988,800 B
 *       M_B = 2 * 1,236,271,104 + 8*sb (int64 ids) = 2,472,591,360 B
 *   Last stage (2 layers + head, tied but on another device: own copy):
 *       head params = V*h + 2h = 115,905,024
 *       params = 127,461,888 + 115,905,024 = 243,366,912 -> *18 = 4,380,604,416 B
 *       head M_B = 2*2*sbh + 2*sbV + 4*sbV
 *                = 56,623,104 + 618,135,552 + 1,236,271,104 = 1,911,029,760 B
 *       M_B = 2,472,542,208 + 1,911,029,760 = 4,383,571,968 B
 *       transient (fp32 logits in the loss) = 4*sbV = 1,236,271,104 B
 *       mem_static(device 7) = 4,380,604,416 + 1,236,271,104 + 3e9 = 8,616,875,520 B
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "src/cost_model.h"

static zb_model preset(const char *name)
{
    zb_model m;
    zb_err err = { { 0 } };
    ck_assert_msg(model_preset(name, &m, &err) == 0, "%s", err.msg);
    return m;
}

static zb_gpu gpu(const char *name)
{
    zb_gpu g;
    zb_err err = { { 0 } };
    ck_assert_msg(gpu_preset(name, &g, &err) == 0, "%s", err.msg);
    return g;
}

START_TEST(test_layer_split)
{
    int l[32];
    zb_err err = { { 0 } };
    ck_assert_int_eq(cost_layer_split(22, 8, l, &err), 0);
    int want[8] = { 2, 3, 3, 3, 3, 3, 3, 2 };
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(l[i], want[i]);
    /* 32 layers over 8: 34 slots = 4 each + 2 extra -> first middles get them. */
    ck_assert_int_eq(cost_layer_split(32, 8, l, &err), 0);
    int want2[8] = { 3, 5, 5, 4, 4, 4, 4, 3 };
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(l[i], want2[i]);
    /* One layer per chunk: 24 virtual stages for 22 layers, ends get none. */
    ck_assert_int_eq(cost_layer_split(22, 24, l, &err), 0);
    ck_assert_int_eq(l[0], 0);
    ck_assert_int_eq(l[23], 0);
    int sum = 0;
    for (int i = 0; i < 24; i++)
        sum += l[i];
    ck_assert_int_eq(sum, 22);
    ck_assert_int_eq(cost_layer_split(22, 1, l, &err), 0);
    ck_assert_int_eq(l[0], 22);
    ck_assert_int_eq(cost_layer_split(22, 25, l, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "too few"));
}
END_TEST

/* cost_layer_split_balanced as it was first written, for valid input: the
 * optimal largest load T by a walk over the candidate loads, then the
 * excess taken back by a scan of every stage per layer, moving on only for
 * a load above its pick by more than 1e-9 (cost_model.c now takes each
 * step in O(1)). */
static void split_by_scan(int L, int S, double wf, double wl, int *layers)
{
    const double eps = 1e-9, off[3] = { 0, wf, wl }, w[2] = { wf, wl };
    int next[3] = { 0, 0, 0 };
    double T = -1;
    while (T < 0) {
        int q = -1;
        double t = INFINITY;
        for (int k = 0; k < 3; k++)
            if (next[k] <= L && next[k] + off[k] < t) {
                t = next[k] + off[k];
                q = k;
            }
        ck_assert_int_ge(q, 0);
        next[q]++;
        double cf = floor(t - wf + eps), cl = floor(t - wl + eps), cm = floor(t + eps);
        if (cf < 0 || cl < 0 || (S > 2 && cm < 1))
            continue;
        if (cf + cl + (S - 2) * cm >= L)
            T = t;
    }
    long total = 0;
    for (int i = 0; i < S; i++) {
        double cap = floor(T - (i == 0 ? w[0] : i == S - 1 ? w[1] : 0) + eps);
        layers[i] = cap > L ? L : (int)cap;
        total += layers[i];
    }
    for (; total > L; total--) {
        int best = -1;
        double best_load = -1;
        for (int i = 0; i < S; i++) {
            int min = (i == 0 || i == S - 1) ? 0 : 1;
            double load = layers[i] + (i == 0 ? w[0] : i == S - 1 ? w[1] : 0);
            if (layers[i] > min && load > best_load + eps) {
                best = i;
                best_load = load;
            }
        }
        ck_assert_int_ge(best, 0);
        layers[best]--;
    }
}

/* Layer counts up to 130 over the stage counts they allow, with end
 * weights drawn from whole numbers, halves, values a hair apart (ties the
 * scan breaks by eps) and random ones: the split is the scan's, stage for
 * stage. */
START_TEST(test_balanced_split_matches_scan)
{
    const double ws[] = { 0, 1, 1.5, 1.6, 1.84, 2, 3, 3.0000000001, 2.9999999999, 0.5, 7.25 };
    const int nw = (int)(sizeof ws / sizeof ws[0]);
    uint64_t rng = 99;
    int checked = 0, removed = 0;
    for (int L = 1; L <= 130; L += (L < 40 ? 1 : 7))
        for (int S = 2; S <= L + 2 && S <= 256; S += (S < 24 ? 1 : 5))
            for (int a = 0; a < nw + 2; a++) {
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                double wf = a < nw ? ws[a] : (double)(rng >> 11) / 9007199254740992.0 * 6;
                double wl = a < nw ? ws[(a * 7 + S) % nw] : (double)(rng >> 20) / 4503599627370496.0 * 4;
                int got[260], want[260];
                zb_err err = { { 0 } };
                ck_assert_msg(cost_layer_split_balanced(L, S, wf, wl, got, &err) == 0, "%s", err.msg);
                split_by_scan(L, S, wf, wl, want);
                for (int i = 0; i < S; i++)
                    ck_assert_msg(got[i] == want[i], "L=%d S=%d w=%.12g,%.12g: stage %d has %d, the scan gives %d", L,
                                  S, wf, wl, i, got[i], want[i]);
                for (int i = 0; i < S; i++)
                    removed += i > 0 && i < S - 1 && got[i] < got[S / 2]; /* middles taken down */
                checked++;
            }
    ck_assert_int_gt(checked, 10000);
    ck_assert_int_gt(removed, 1000); /* the removal ran, often */
}
END_TEST

START_TEST(test_balanced_split)
{
    int l[32];
    zb_err err = { { 0 } };
    /* A free embedding and a head worth 1.6 layers (1.5B: 1.69): 22 layers
     * over 8 stages fit under a largest load of 3: [3,3,3,3,3,3,3,1]
     * (last = 1 + 1.6). */
    ck_assert_int_eq(cost_layer_split_balanced(22, 8, 0, 1.6, l, &err), 0);
    int want[8] = { 3, 3, 3, 3, 3, 3, 3, 1 };
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(l[i], want[i]);
    /* Both ends worth one layer: the paper's split. */
    ck_assert_int_eq(cost_layer_split_balanced(22, 8, 1, 1, l, &err), 0);
    int paper[8] = { 2, 3, 3, 3, 3, 3, 3, 2 };
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(l[i], paper[i]);
    /* 32 layers, head 1.84: the largest load is 5; the excess is taken from
     * the earliest stages, so later stages keep the extra layer. */
    ck_assert_int_eq(cost_layer_split_balanced(32, 8, 0, 1.84, l, &err), 0);
    int want3[8] = { 4, 4, 4, 4, 4, 4, 5, 3 };
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(l[i], want3[i]);
    /* Middle stages always get a layer; the ends may get none. */
    ck_assert_int_eq(cost_layer_split_balanced(4, 6, 3, 3, l, &err), 0);
    ck_assert_int_eq(l[0], 0);
    ck_assert_int_eq(l[5], 0);
    for (int i = 1; i < 5; i++)
        ck_assert_int_eq(l[i], 1);
    ck_assert_int_eq(cost_layer_split_balanced(4, 7, 0, 0, l, &err), -1);
    ck_assert_int_eq(cost_layer_split_balanced(4, 2, -1, 0, l, &err), -1);

    /* Through the model: 1.5B's head is 6V/(72h + 12s) = 1.69 layers of F+B+W. */
    zb_model m = preset("1.5B");
    zb_gpu g = gpu("A100-80G");
    cost_options o;
    cost_options_default(&o);
    o.split = COST_SPLIT_BALANCED;
    ck_assert_int_eq(cost_split_layers(&m, &g, &o, 8, l, &err), 0);
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(l[i], want[i]);
    cost_stage st[8];
    ck_assert_int_eq(cost_stages(&m, &g, &o, 8, 0, st, &err), 0);
    ck_assert_int_eq(st[7].n_layers, 1);
    ck_assert_int_eq(st[7].first_layer, 21);
    /* ...and its largest stage time is below the paper split's. */
    double worst_bal = 0, worst_paper = 0;
    for (int i = 0; i < 8; i++)
        worst_bal = fmax(worst_bal, st[i].t_f + st[i].t_b + st[i].t_w);
    o.split = COST_SPLIT_PAPER;
    ck_assert_int_eq(cost_stages(&m, &g, &o, 8, 0, st, &err), 0);
    for (int i = 0; i < 8; i++)
        worst_paper = fmax(worst_paper, st[i].t_f + st[i].t_b + st[i].t_w);
    ck_assert(worst_bal < 0.9 * worst_paper);
}
END_TEST

START_TEST(test_memory_by_hand_1_5b)
{
    zb_model m = preset("1.5B");
    zb_gpu g = gpu("A100-80G");
    cost_options o;
    cost_options_default(&o);
    o.flash_attention = 0;
    cost_part layer, emb, head;
    zb_err err = { { 0 } };
    ck_assert_int_eq(cost_parts(&m, &g, &o, &layer, &emb, &head, &err), 0);
    ck_assert_double_eq(layer.m_b, 1236271104.0);
    ck_assert_double_eq(layer.m_w, 452984832.0);
    ck_assert_double_eq(layer.params, 63730944.0);
    ck_assert_double_eq(cost_bytes_per_param(&m, &o), 18.0);

    cost_stage st[8];
    ck_assert_int_eq(cost_stages(&m, &g, &o, 8, 0, st, &err), 0);
    ck_assert_double_eq(st[3].static_bytes, 3441470976.0);
    ck_assert_double_eq(st[3].m_b, 3708813312.0);
    ck_assert_double_eq(st[3].m_w, 1358954496.0);
    ck_assert_double_eq(st[0].static_bytes, 4422988800.0);
    ck_assert_double_eq(st[0].m_b, 2472591360.0);
    ck_assert_double_eq(st[7].static_bytes, 4380604416.0);
    ck_assert_double_eq(st[7].m_b, 4383571968.0);
    ck_assert_int_eq(st[0].has_embedding, 1);
    ck_assert_int_eq(st[7].has_head, 1);
    ck_assert_int_eq(st[7].first_layer, 20);

    sched_t *s = sched_new(8, 16, 8);
    ck_assert_ptr_nonnull(s);
    sched_place_interleaved(s);
    ck_assert_int_eq(cost_fill_sched(&m, &g, &o, s, &err), 0);
    ck_assert_str_eq(s->time_unit, "ms");
    ck_assert_str_eq(s->mem_unit, "bytes");
    ck_assert_ptr_nonnull(s->mem_static);
    ck_assert_double_eq(s->mem_static[3], 6441470976.0);
    ck_assert_double_eq(s->mem_static[7], 8616875520.0);
    ck_assert_double_eq(s->cost[3].d_f, 3708813312.0);
    ck_assert_double_eq(s->cost[3].d_b, 1358954496.0 - 3708813312.0);
    ck_assert_double_eq(s->cost[3].d_w, -1358954496.0);
    /* Transfers block both ends (issue 10): one activation of 2*sbh bytes
     * over the A100's calibrated 80 GB/s plus 0.25 ms is inside every F
     * that sends to the next device, not in t_comm. */
    double xfer = 2.0 * 6144 * 2304 / 80e9 + 250e-6;
    ck_assert_double_eq(s->t_comm, 0);
    ck_assert_double_eq_tol(cost_t_transfer(&m, &g, &o, 3, 4), xfer, 1e-15);
    cost_stage cs[8];
    ck_assert_int_eq(cost_stages(&m, &g, &o, 8, 0, cs, &err), 0);
    ck_assert_double_eq_tol(s->cost[3].t_f, (cs[3].t_f + xfer) * 1e3, 1e-9);
    ck_assert_double_eq_tol(s->cost[3].t_b, (cs[3].t_b + xfer) * 1e3, 1e-9);
    ck_assert_double_eq_tol(s->cost[7].t_f, cs[7].t_f * 1e3, 1e-9); /* the last stage sends no F */
    ck_assert_double_eq_tol(s->cost[0].t_b, cs[0].t_b * 1e3, 1e-9); /* the first sends no B */
    sched_free(s);
}
END_TEST

START_TEST(test_table1_time_identities)
{
    const char *names[] = { "1.5B", "6.2B", "llama3-8b", "shakespeare-char" };
    zb_gpu g = gpu("H100-80G");
    /* Table 1's identities hold for its FLOP counts: non-causal attention
     * (no flash) and one efficiency for every matmul. */
    g.w_efficiency = g.efficiency;
    for (int i = 0; i < 4; i++) {
        zb_model m = preset(names[i]);
        cost_options o;
        cost_options_default(&o);
        o.flash_attention = 0;
        cost_part l, e, h;
        zb_err err = { { 0 } };
        ck_assert_int_eq(cost_parts(&m, &g, &o, &l, &e, &h, &err), 0);
        /* Table 1: T_B + T_W = 2 T_F for the matmuls' times and
         * T_W < T_F < T_B.  The memory-bound kernels' traffic (norms,
         * residual joins, GeLU, softmax and dropout over the scores) is
         * timed apart at the HBM bandwidth, more of it in B (which reads
         * the forward's inputs back) than in F. */
        double mm_f = l.t_f - l.hbm_f / g.hbm_bw, mm_b = l.t_b - l.hbm_b / g.hbm_bw;
        ck_assert_double_eq_tol(mm_b + l.t_w, 2 * mm_f, 1e-12 * l.t_f);
        ck_assert(l.hbm_f > 0 && l.hbm_b > l.hbm_f);
        ck_assert(l.t_w < l.t_f && l.t_f < l.t_b);
        ck_assert(l.m_w < l.m_b);
        /* The head's three matmuls have the same FLOPs; F and B add the
         * plain loss's memory-bound passes over the logits. */
        ck_assert_double_eq(h.f_flops, h.w_flops);
        ck_assert_double_eq(h.b_flops, h.w_flops);
        double rate = g.peak_flops * g.efficiency;
        ck_assert_double_eq_tol(h.t_f, h.f_flops / rate + h.hbm_f / g.hbm_bw, 1e-15);
        ck_assert_double_eq_tol(h.t_b, h.b_flops / rate + h.hbm_b / g.hbm_bw, 1e-15);
        ck_assert(h.hbm_f > 0 && h.hbm_b > 0);
        /* Recompute runs F again inside B and keeps only the layer input. */
        cost_options r = o;
        r.recompute = 1;
        cost_part lr;
        ck_assert_int_eq(cost_parts(&m, &g, &r, &lr, &e, &h, &err), 0);
        ck_assert_double_eq_tol(lr.t_b, l.t_b + l.t_f, 1e-12 * l.t_f);
        ck_assert_double_eq(lr.t_w, l.t_w);
        ck_assert_double_eq(lr.m_b, (double)zb_dtype_bytes(m.dtype) * m.seq_len * m.micro_batch * m.d_model);
        ck_assert_double_eq(lr.m_w, l.m_w);
        ck_assert_double_eq(lr.transient, l.m_b);
    }
    /* GPT with a=kv, f=4h: F = sbh(24h + 4s) exactly (Table 1). */
    zb_model m = preset("6.2B");
    cost_options o;
    cost_options_default(&o);
    cost_part l, e, h;
    zb_err err = { { 0 } };
    ck_assert_int_eq(cost_parts(&m, &g, &o, &l, &e, &h, &err), 0);
    double sbh = 1024.0 * 3 * 4096;
    /* With flash attention (the default) attention is causal: half of
     * 4sbh.s in F and 2.5 times that in B (FlashAttention-2). */
    ck_assert_double_eq(l.f_flops, sbh * (24 * 4096.0 + 2 * 1024));
    ck_assert_double_eq(l.b_flops, sbh * (24 * 4096.0 + 5 * 1024));
    ck_assert_double_eq(l.w_flops, sbh * (24 * 4096.0));
    /* MFU keeps the non-causal convention: 3 x (24h + 4s) sbh. */
    ck_assert_double_eq(l.useful_flops, 3 * sbh * (24 * 4096.0 + 4 * 1024));
    /* Without flash the masked matmuls run in full: Table 1 exactly. */
    cost_options nf = o;
    nf.flash_attention = 0;
    cost_part l2;
    ck_assert_int_eq(cost_parts(&m, &g, &nf, &l2, &e, &h, &err), 0);
    ck_assert_double_eq(l2.f_flops, sbh * (24 * 4096.0 + 4 * 1024));
    ck_assert_double_eq(l2.b_flops, sbh * (24 * 4096.0 + 8 * 1024));
    ck_assert_double_eq(l2.useful_flops, l.useful_flops);
    /* Flash attention drops the 5as term of M_B. */
    ck_assert_double_eq(l2.m_b, 1024.0 * 3 * (34 * 4096.0 + 5 * 32 * 1024));
    ck_assert_double_eq(l.m_b, 1024.0 * 3 * 34 * 4096 + 4.0 * 32 * 1024 * 3);
}
END_TEST

START_TEST(test_table9_calibration)
{
    /* Paper Table 9: 6.2B, p=8, A100: T_F = 29.7 ms per stage of 4 layers;
     * 14.6B, p=16: 11.3 ms (3 layers); 28.3B, p=32: 10.4 ms (2 layers).
     * The paper ran without flash attention.  T_F within 15%, T_B and
     * T_W within 10%: the A100 F/B efficiency is fitted on Megatron's
     * runs (bench/bench_calibration), not on these, and B holds only if
     * its memory-bound traffic is priced (at the fitted efficiency its
     * matmuls alone are 13% short on 6.2B). */
    struct { const char *name; int p; double t_f_ms, t_b_ms, t_w_ms; } rows[] = {
        { "6.2B", 8, 29.718, 29.444, 19.927 }, { "14.6B", 16, 11.347, 11.248, 8.132 },
        { "28.3B", 32, 10.419, 10.207, 7.715 },
    };
    zb_gpu g = gpu("A100-80G");
    for (int i = 0; i < 3; i++) {
        zb_model m = preset(rows[i].name);
        cost_options o;
        cost_options_default(&o);
        o.flash_attention = 0;
        cost_stage st[32];
        zb_err err = { { 0 } };
        ck_assert_int_eq(cost_stages(&m, &g, &o, rows[i].p, 0, st, &err), 0);
        double t = st[1].t_f * 1e3;
        ck_assert_msg(fabs(t - rows[i].t_f_ms) / rows[i].t_f_ms < 0.15,
                      "%s: estimated T_F %.2f ms vs paper %.2f ms", rows[i].name, t, rows[i].t_f_ms);
        t = st[1].t_b * 1e3;
        ck_assert_msg(fabs(t - rows[i].t_b_ms) / rows[i].t_b_ms < 0.10,
                      "%s: estimated T_B %.2f ms vs paper %.2f ms", rows[i].name, t, rows[i].t_b_ms);
        /* W's weight-gradient matmuls run at the calibrated w_efficiency. */
        t = st[1].t_w * 1e3;
        ck_assert_msg(fabs(t - rows[i].t_w_ms) / rows[i].t_w_ms < 0.10,
                      "%s: estimated T_W %.2f ms vs paper %.2f ms", rows[i].name, t, rows[i].t_w_ms);
    }
}
END_TEST

START_TEST(test_param_counts)
{
    struct { const char *name; double params; } rows[] = {
        { "1.5B", 1.5e9 }, { "6.2B", 6.2e9 }, { "14.6B", 14.6e9 }, { "28.3B", 28.3e9 },
        { "llama3-8b", 8.03e9 }, { "llama3-70b", 70.55e9 }, { "intellect-1-10b", 10.2e9 },
        { "llama3-405b", 405.85e9 }, /* Meta's model card: 405 B */
    };
    for (int i = 0; i < (int)(sizeof rows / sizeof rows[0]); i++) {
        zb_model m = preset(rows[i].name);
        double p = cost_param_count(&m);
        ck_assert_msg(fabs(p - rows[i].params) / rows[i].params < 0.02,
                      "%s: %.3g parameters, expected about %.3g", rows[i].name, p, rows[i].params);
    }
}
END_TEST

START_TEST(test_tied_and_zero1)
{
    zb_model m = preset("1.5B");
    zb_gpu g = gpu("A100-80G");
    cost_options o;
    cost_options_default(&o);
    cost_stage a[16], b[16];
    zb_err err = { { 0 } };
    ck_assert_int_eq(cost_stages(&m, &g, &o, 16, 0, a, &err), 0);
    ck_assert_int_eq(cost_stages(&m, &g, &o, 16, 1, b, &err), 0);
    /* V placement puts stage 0 and 15 on one device: one copy of V*h. */
    ck_assert_double_eq(a[15].params - b[15].params, 50304.0 * 2304);
    m.tied_embedding = 0;
    ck_assert_int_eq(cost_stages(&m, &g, &o, 16, 1, b, &err), 0);
    ck_assert_double_eq(a[15].params, b[15].params);

    o.zero1_dp = 4;
    ck_assert_double_eq(cost_bytes_per_param(&m, &o), 2 + 4 + 3.0);
    zb_model t = preset("tiny");
    o.zero1_dp = 1;
    ck_assert_double_eq(cost_bytes_per_param(&t, &o), 16.0);
}
END_TEST

START_TEST(test_fill_v_placement)
{
    /* V placement of the 1.5B model: 16 stages on 8 devices, device d holds
     * stages d and 15-d, so device 0 holds the embedding and the (tied)
     * head and keeps one copy of the V*h matrix. */
    zb_model m = preset("1.5B");
    zb_gpu g = gpu("A100-80G");
    cost_options o;
    cost_options_default(&o);
    cost_stage st[16];
    zb_err err = { { 0 } };
    ck_assert_int_eq(cost_stages(&m, &g, &o, 16, 1, st, &err), 0);
    sched_t *s = sched_new(8, 16, 16);
    sched_place_v(s);
    ck_assert_int_eq(cost_fill_sched(&m, &g, &o, s, &err), 0);
    for (int d = 0; d < 8; d++) {
        const cost_stage *a = &st[d], *b = &st[15 - d];
        double transient = fmax(a->transient, b->transient);
        ck_assert_double_eq_tol(s->mem_static[d], a->static_bytes + b->static_bytes + transient + 3e9, 1);
        /* Stage 15-d sends its F output to device d-1; the last does not. */
        double send = d > 0 ? cost_t_transfer(&m, &g, &o, d, d - 1) : 0;
        ck_assert_double_eq_tol(s->cost[15 - d].t_f, (b->t_f + send) * 1e3, 1e-9);
    }
    /* The V turn (stage 7 to 8, both on device 7) costs no transfer. */
    ck_assert_double_eq_tol(s->cost[7].t_f, st[7].t_f * 1e3, 1e-9);
    /* Tied: device 0's static has the matrix once (embedding + head norm). */
    double vh = 50304.0 * 2304;
    ck_assert_double_eq_tol(st[15].params - st[15].n_layers * 63730944.0, 2 * 2304, 1e-6);
    ck_assert(st[0].params - st[0].n_layers * 63730944.0 >= vh);
    sched_free(s);
}
END_TEST

START_TEST(test_profile_overrides)
{
    zb_model m = preset("tiny");
    zb_gpu g = gpu("H200-141G");
    zb_profile p;
    profile_init(&p);
    p.micro_batch = 2; /* the model's micro_batch is 4: figures double */
    p.seq_len = m.seq_len;
    p.layer = (profile_part){ 1e-3, 2e-3, 5e-4, 1000, 400 };
    p.embedding = (profile_part){ 1e-5, 0, 2e-5, 10, 20 };
    p.head = (profile_part){ 3e-4, 3e-4, 3e-4, 5000, 2000 };
    p.t_comm = 1e-5;
    p.reserve_bytes = 1e6;
    cost_options o;
    cost_options_default(&o);
    o.profile = &p;
    sched_t *s = sched_new(2, 4, 2);
    sched_place_interleaved(s);
    zb_err err = { { 0 } };
    ck_assert_int_eq(cost_fill_sched(&m, &g, &o, s, &err), 0);
    /* tiny: 4 layers over 2 stages -> [2, 2]. */
    /* F of stage 0 carries one transfer, the profile's t_comm scaled. */
    ck_assert_double_eq_tol(s->cost[0].t_f, (2 * (2 * 1e-3 + 1e-5) + 2 * 1e-5) * 1e3, 1e-9);
    ck_assert_double_eq_tol(s->cost[1].t_w, 2 * (2 * 5e-4 + 3e-4) * 1e3, 1e-9);
    ck_assert_double_eq(s->cost[1].d_f, 2 * (2 * 1000.0 + 5000));
    ck_assert_double_eq(s->cost[1].d_w, -2 * (2 * 400.0 + 2000));
    ck_assert_double_eq_tol(cost_t_transfer(&m, &g, &o, 0, 1), 2 * 1e-5, 1e-15);
    ck_assert_double_eq(s->t_comm, 0);
    ck_assert(s->mem_static[0] > 1e6 && s->mem_static[0] < 1e6 + 1e7);

    /* A profile at another sequence length does not apply. */
    p.seq_len = 128;
    ck_assert_int_eq(cost_fill_sched(&m, &g, &o, s, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "seq_len"));
    sched_free(s);
}
END_TEST

START_TEST(test_loss_kinds)
{
    /* Llama 3 8B, b=1: the plain loss keeps bf16 logits and the fp32
     * log-softmax; the fused one (Liger) keeps two t x h tensors, does all
     * 6thV FLOPs in F and leaves no W. */
    zb_model m = preset("llama3-8b");
    zb_gpu g = gpu("H100-80G");
    cost_options o;
    cost_options_default(&o);
    cost_part l, e, plain, fused;
    zb_err err = { { 0 } };
    ck_assert_int_eq(cost_parts(&m, &g, &o, &l, &e, &plain, &err), 0);
    o.loss = COST_LOSS_FUSED;
    ck_assert_int_eq(cost_parts(&m, &g, &o, &l, &e, &fused, &err), 0);
    double t = 8192, h = 4096, v = 128256;
    ck_assert_double_eq(plain.m_b, 2 * 2 * t * h + 2 * t * v + 4 * t * v);
    ck_assert_double_eq(plain.hbm_f, t * v * 10);
    ck_assert_double_eq(plain.hbm_b, t * v * 6);
    ck_assert_double_eq_tol(plain.t_f - plain.f_flops / (g.peak_flops * g.efficiency), t * v * 10 / 3.35e12, 1e-12);
    ck_assert_double_eq(fused.m_b, 2 * 2 * t * h);
    ck_assert_double_eq(fused.m_w, 0);
    ck_assert_double_eq(fused.f_flops, 6 * t * h * v);
    ck_assert_double_eq(fused.b_flops + fused.w_flops, 0);
    ck_assert_double_eq(fused.useful_flops, plain.useful_flops);
    /* chunk = ceil(t / ceil(V/h)) = ceil(8192 / 32) = 256 tokens. */
    ck_assert_double_eq(fused.transient, 2 * 4 * 256 * v);
    ck_assert(fused.transient < plain.transient / 10);
}
END_TEST

START_TEST(test_recompute_per_stage)
{
    /* The first two of four stages recompute: their M_B is the layer input
     * only and their B reruns F; the others keep everything. */
    zb_model m = preset("llama3-8b");
    zb_gpu g = gpu("H100-80G");
    cost_options o, all;
    cost_options_default(&o);
    cost_options_default(&all);
    all.recompute = 1;
    unsigned char rc[4] = { 1, 1, 0, 0 };
    o.recompute_stage = rc;
    cost_stage st[4], ref_on[4], ref_off[4];
    zb_err err = { { 0 } };
    ck_assert_int_eq(cost_stages(&m, &g, &o, 4, 0, st, &err), 0);
    ck_assert_int_eq(cost_stages(&m, &g, &all, 4, 0, ref_on, &err), 0);
    cost_options off;
    cost_options_default(&off);
    ck_assert_int_eq(cost_stages(&m, &g, &off, 4, 0, ref_off, &err), 0);
    for (int i = 0; i < 4; i++) {
        const cost_stage *ref = rc[i] ? &ref_on[i] : &ref_off[i];
        ck_assert_double_eq(st[i].m_b, ref->m_b);
        ck_assert_double_eq(st[i].t_b, ref->t_b);
        ck_assert_double_eq(st[i].transient, ref->transient);
        ck_assert_int_eq(cost_stage_recomputes(&o, i), rc[i]);
    }
    ck_assert(st[0].m_b < ref_off[0].m_b && st[3].m_b > ref_on[3].m_b);
}
END_TEST

START_TEST(test_recompute_mlp_level)
{
    /* MLP level on Llama-3 8B, b = 1 (t = 8192, e = 2): F keeps all but the
     * pre-MLP norm output and gate, up and their product, e·t·(h + 3f) =
     * 771,751,936 bytes per layer, which B rebuilds (the transient) by
     * rerunning the three MLP matmuls, 2·t·h·f·3 FLOPs. */
    zb_model m = preset("llama3-8b");
    zb_gpu g = gpu("H100-80G");
    cost_options none, mlp, full;
    cost_options_default(&none);
    mlp = full = none;
    mlp.recompute = COST_RC_MLP;
    full.recompute = COST_RC_FULL;
    cost_part ln, lm, lf, e, h;
    zb_err err = { { 0 } };
    ck_assert_int_eq(cost_parts(&m, &g, &none, &ln, &e, &h, &err), 0);
    ck_assert_int_eq(cost_parts(&m, &g, &mlp, &lm, &e, &h, &err), 0);
    ck_assert_int_eq(cost_parts(&m, &g, &full, &lf, &e, &h, &err), 0);
    double t = 8192, hd = 4096, f = 14336;
    ck_assert_double_eq(ln.m_b - lm.m_b, 2 * t * (hd + 3 * f));
    ck_assert_double_eq(lm.transient, 2 * t * (hd + 3 * f));
    ck_assert_double_eq_tol(lm.b_flops - ln.b_flops, 2 * t * hd * f * 3, 1);
    ck_assert_double_eq(lm.w_flops, ln.w_flops);
    ck_assert_double_eq(lm.m_w, ln.m_w);
    /* between none and full in time and in memory */
    ck_assert(ln.t_b < lm.t_b && lm.t_b < lf.t_b);
    ck_assert(lf.m_b < lm.m_b && lm.m_b < ln.m_b);
    /* per stage: level 2 prices the stage's layers at the MLP level */
    unsigned char rc[4] = { 1, 2, 0, 2 };
    cost_options o = none;
    o.recompute_stage = rc;
    cost_stage st[4], ref_m[4];
    ck_assert_int_eq(cost_stages(&m, &g, &o, 4, 0, st, &err), 0);
    ck_assert_int_eq(cost_stages(&m, &g, &mlp, 4, 0, ref_m, &err), 0);
    ck_assert_double_eq(st[1].m_b, ref_m[1].m_b);
    ck_assert_double_eq(st[1].t_b, ref_m[1].t_b);
    ck_assert_int_eq(cost_stage_recomputes(&o, 1), COST_RC_MLP);
    ck_assert_double_eq(st[1].m_b - st[1].n_layers * lm.m_b, st[2].m_b - st[2].n_layers * ln.m_b);
    /* with a profile measured without recompute: B gains the MLP's share
     * of the measured F (by FLOPs), M_B loses the dropped bytes */
    zb_profile p;
    profile_init(&p);
    p.micro_batch = 1;
    p.seq_len = m.seq_len;
    p.layer = (profile_part){ 10e-3, 20e-3, 5e-3, 2e9, 1e9 };
    p.head = (profile_part){ 1e-3, 1e-3, 1e-3, 1e6, 1e6 };
    mlp.profile = &p;
    cost_part pm;
    ck_assert_int_eq(cost_parts(&m, &g, &mlp, &pm, &e, &h, &err), 0);
    ck_assert_double_eq_tol(pm.t_b, 20e-3 + 10e-3 * (2 * t * hd * f * 3) / lm.f_flops, 1e-12);
    ck_assert_double_eq(pm.m_b, 2e9 - 2 * t * (hd + 3 * f));
    ck_assert_double_eq(pm.transient, 2 * t * (hd + 3 * f));
}
END_TEST

START_TEST(test_explicit_split_and_nodes)
{
    zb_model m = preset("llama3-8b");
    zb_gpu g = gpu("H100-80G");
    cost_options o;
    cost_options_default(&o);
    int layers[4] = { 10, 8, 8, 6 };
    o.layers = layers;
    int out[4];
    zb_err err = { { 0 } };
    ck_assert_int_eq(cost_split_layers(&m, &g, &o, 4, out, &err), 0);
    ck_assert_int_eq(out[0], 10);
    ck_assert_int_eq(out[3], 6);
    int bad[4] = { 10, 8, 8, 5 }; /* 31 of 32 layers */
    o.layers = bad;
    ck_assert_int_eq(cost_split_layers(&m, &g, &o, 4, out, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "32"));
    int empty_middle[4] = { 16, 0, 8, 8 };
    o.layers = empty_middle;
    ck_assert_int_eq(cost_split_layers(&m, &g, &o, 4, out, &err), -1);
    /* Transfers: free on one device, NVLink inside a node, the slower
     * inter-node link across (2 pipeline devices per node here). */
    o.layers = NULL;
    o.devices_per_node = 2;
    double bytes = 2.0 * 8192 * 4096;
    ck_assert_double_eq(cost_t_transfer(&m, &g, &o, 3, 3), 0);
    ck_assert_double_eq_tol(cost_t_transfer(&m, &g, &o, 0, 1), bytes / 450e9 + 10e-6, 1e-15);
    ck_assert_double_eq_tol(cost_t_transfer(&m, &g, &o, 1, 2), bytes / 50e9 + 10e-6, 1e-15);
    ck_assert_double_eq(gpu_inter_node_bw(&g), 50e9);
    ck_assert_int_eq(gpu_per_node(&g), 8);
}
END_TEST

START_TEST(test_head_memory_shows)
{
    /* Llama 3 8B, seq 8192: the head's logits (V = 128256) make the last
     * stage's M_B several GB larger than a middle stage with more layers. */
    zb_model m = preset("llama3-8b");
    zb_gpu g = gpu("H100-80G");
    cost_options o;
    cost_options_default(&o);
    cost_stage st[8];
    zb_err err = { { 0 } };
    ck_assert_int_eq(cost_stages(&m, &g, &o, 8, 0, st, &err), 0);
    double logits = 8192.0 * 128256;
    ck_assert(st[7].m_b - st[7].n_layers * (st[3].m_b / st[3].n_layers) >= 6 * logits);
    ck_assert(st[7].transient >= 4 * logits);
    ck_assert(st[0].static_bytes > st[3].static_bytes * st[0].n_layers / st[3].n_layers);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cost");
    TCase *tc = tcase_create("model");
    tcase_add_test(tc, test_layer_split);
    tcase_add_test(tc, test_balanced_split);
    tcase_add_test(tc, test_balanced_split_matches_scan);
    tcase_add_test(tc, test_memory_by_hand_1_5b);
    tcase_add_test(tc, test_table1_time_identities);
    tcase_add_test(tc, test_table9_calibration);
    tcase_add_test(tc, test_param_counts);
    tcase_add_test(tc, test_tied_and_zero1);
    tcase_add_test(tc, test_fill_v_placement);
    tcase_add_test(tc, test_profile_overrides);
    tcase_add_test(tc, test_head_memory_shows);
    tcase_add_test(tc, test_loss_kinds);
    tcase_add_test(tc, test_recompute_per_stage);
    tcase_add_test(tc, test_recompute_mlp_level);
    tcase_add_test(tc, test_explicit_split_and_nodes);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
