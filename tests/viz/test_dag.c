/*
 * test_dag.c: the Graphviz dependency graph.  A small schedule renders to
 * valid SVG with one node per op and one cluster per device; the critical
 * path of ZB-H1 with unit costs has exactly cost-many ops; nodes take
 * their kind's palette colour; output is byte-stable; schedules over VIZ_DAG_MAX_OPS are refused before layout.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/viz/viz_fixtures.h"
#include "tests/viz/viz_testutil.h"
#include "viz/palette.h"
#include "viz/times.h"
#include "viz/viz.h"

static char *dag(const sched_t *s, size_t *len)
{
    zb_err err = { 0 };
    char *svg = NULL;
    size_t n = 0;
    ck_assert_msg(viz_dag_svg(s, &svg, &n, &err) == 0, "dag failed: %s", err.msg);
    ck_assert_ptr_nonnull(svg);
    if (len)
        *len = n;
    return svg;
}

/* One op node parsed back from Graphviz's SVG. */
typedef struct node {
    double start, end; /* from its tooltip */
    int stage;         /* virtual stage */
    int critical;      /* outline drawn red */
} node;

/* Parses every op node (tooltip and outline); returns how many. */
static int parse_nodes(const char *svg, node *out, int max)
{
    int n = 0;
    for (const char *p = svg; (p = strstr(p, "class=\"node\"")); p++) {
        ck_assert_int_lt(n, max);
        const char *tip = strstr(p, "xlink:title=\"");
        ck_assert_ptr_nonnull(tip);
        node *nd = &out[n++];
        ck_assert_int_eq(sscanf(tip, "xlink:title=\"%*s stage %d on device %*d: %lf to %lf",
                                &nd->stage, &nd->start, &nd->end), 3);
        const char *poly = strstr(p, "<polygon fill=\"");
        const char *end = strchr(poly, '>');
        const char *stroke = strstr(poly, "stroke=\"#d62728\"");
        nd->critical = stroke && stroke < end;
    }
    return n;
}

static int by_start(const void *pa, const void *pb)
{
    const node *a = pa, *b = pb;
    return a->start < b->start ? -1 : a->start > b->start;
}

/* Checks that the critical ops form one gap-free chain from the first
 * start to the last end (T_comm = 0), and returns how many there are. */
static int check_critical_chain(const char *svg, int n_ops)
{
    node *all = malloc(sizeof *all * (size_t)n_ops);
    int n = parse_nodes(svg, all, n_ops), k = 0;
    ck_assert_int_eq(n, n_ops);
    double first = all[0].start, last = all[0].end;
    for (int i = 0; i < n; i++) {
        if (all[i].start < first)
            first = all[i].start;
        if (all[i].end > last)
            last = all[i].end;
        if (all[i].critical)
            all[k++] = all[i];
    }
    ck_assert_int_gt(k, 0);
    qsort(all, (size_t)k, sizeof *all, by_start);
    ck_assert_double_eq(all[0].start, first);
    ck_assert_double_eq(all[k - 1].end, last);
    for (int i = 1; i < k; i++)
        ck_assert_msg(all[i].start == all[i - 1].end, "gap in the critical path at %g", all[i].start);
    free(all);
    return k;
}

START_TEST(small_schedule_renders)
{
    sched_t *s = fixture_zb_h1(4, 8);
    size_t n;
    char *svg = dag(s, &n);
    ck_assert(tu_xml_valid(svg, n));
    ck_assert_int_eq(tu_count(svg, "class=\"node\""), sched_op_count(s));
    ck_assert_int_eq(tu_count(svg, "class=\"cluster\""), 4);
    ck_assert_ptr_nonnull(strstr(svg, "device 3"));
    /* Unit costs, no comm: the critical path is contiguous from time 0 to
     * the cost (27), one unit per op. */
    ck_assert_int_eq(check_critical_chain(svg, 96), 27);
    free(svg);
    sched_free(s);
}
END_TEST

START_TEST(critical_path_follows_costs)
{
    /* 1F1B with a slow last stage: the path stays gap-free and runs
     * through that stage's long forwards. */
    sched_t *s = fixture_1f1b(3, 4);
    s->cost[2].t_f = 5;
    char *svg = dag(s, NULL);
    ck_assert_int_gt(check_critical_chain(svg, (int)sched_op_count(s)), 0);
    node all[24];
    int n = parse_nodes(svg, all, 24), slow_on_path = 0;
    for (int i = 0; i < n; i++)
        slow_on_path += all[i].critical && all[i].stage == 2 && all[i].end - all[i].start == 5;
    ck_assert_int_ge(slow_on_path, 2);
    free(svg);
    sched_free(s);
}
END_TEST

START_TEST(chunks_and_same_bytes)
{
    sched_t *s = fixture_v(2, 3);
    size_t n1, n2;
    char *a = dag(s, &n1), *b = dag(s, &n2);
    ck_assert_uint_eq(n1, n2);
    ck_assert(memcmp(a, b, n1) == 0);
    ck_assert_int_eq(tu_count(a, "class=\"node\""), sched_op_count(s));
    ck_assert_ptr_nonnull(strstr(a, "F0 s3")); /* stage shown when devices hold several */
    free(a);
    free(b);
    sched_free(s);
}
END_TEST

/* Nodes are coloured like the timeline: each op kind in its palette
 * colour, so F, B, W and BW stay distinct in the graph too. */
START_TEST(nodes_coloured_by_kind)
{
    sched_t *s = fixture_zb_h1(2, 4);
    fixture_fuse_even(s);
    char *svg = dag(s, NULL);
    long seen[OP_KIND_COUNT] = { 0 };
    for (const char *p = svg; (p = strstr(p, "class=\"node\"")); p++) {
        const char *tip = strstr(p, "xlink:title=\"") + strlen("xlink:title=\"");
        int kind = -1;
        for (int k = 0; k < OP_KIND_COUNT; k++) {
            size_t n = strlen(op_kind_name((op_kind)k));
            if (!strncmp(tip, op_kind_name((op_kind)k), n) && tip[n] >= '0' && tip[n] <= '9')
                kind = k;
        }
        ck_assert_msg(kind >= 0, "node titled %.20s", tip);
        char fill[8];
        ck_assert_int_eq(sscanf(strstr(p, "<polygon fill=\""), "<polygon fill=\"%7[#0-9a-f]\"", fill), 1);
        ck_assert_str_eq(fill, viz_op_color((op_kind)kind, 0, 1).fill);
        seen[kind]++;
    }
    for (int k = 0; k < OP_PIPE_KIND_COUNT; k++) /* S and T: not in this fixture */
        ck_assert_msg(seen[k] > 0, "no %s node", op_kind_name((op_kind)k));
    free(svg);
    sched_free(s);
}
END_TEST

START_TEST(big_schedule_is_refused)
{
    sched_t *s = fixture_zb_h1(8, 128); /* 3072 ops */
    zb_err err = { 0 };
    char *svg = NULL;
    size_t n;
    ck_assert_int_eq(viz_dag_svg(s, &svg, &n, &err), -1);
    ck_assert_ptr_null(svg);
    ck_assert_ptr_nonnull(strstr(err.msg, "3072 ops"));
    ck_assert_ptr_nonnull(strstr(err.msg, "2000"));
    sched_free(s);
}
END_TEST

/* A window of a plan too big to draw whole (issue 29.6): the ops that
 * overlap the window, the edges among them, and the whole schedule's
 * critical path where it passes; a window that is still too big is
 * refused, saying how to narrow it. */
START_TEST(window_of_a_big_schedule)
{
    sched_t *s = fixture_zb_h1(8, 128); /* 3072 ops */
    viz_view v;
    viz_view_all(&v);
    v.has_from = v.has_to = 1;
    v.from = 0;
    v.to = 12;
    zb_err err = { 0 };
    char *svg = NULL;
    size_t n = 0;
    ck_assert_msg(viz_dag_svg_view(s, &v, &svg, &n, &err) == 0, "%s", err.msg);
    ck_assert(tu_xml_valid(svg, n));
    viz_times t;
    ck_assert_int_eq(viz_times_compute(s, &t, &err), 0);
    long want = 0;
    for (int d = 0; d < 8; d++)
        for (int i = 0; i < s->dev[d].n_ops; i++)
            want += t.r.dev[d].end[i] > 0 && t.r.dev[d].start[i] < 12;
    viz_times_free(&t);
    ck_assert_int_eq(tu_count(svg, "class=\"node\""), want);
    ck_assert_int_lt(want, 400);
    ck_assert_ptr_nonnull(strstr(svg, "window 0"));
    ck_assert_ptr_nonnull(strstr(svg, "#d62728")); /* the critical path starts in it */
    free(svg);
    /* Micro-batches and devices narrow it too. */
    viz_view_all(&v);
    v.mb_lo = v.mb_hi = 5;
    v.dev_lo = 2;
    v.dev_hi = 3;
    ck_assert_msg(viz_dag_svg_view(s, &v, &svg, &n, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(tu_count(svg, "class=\"node\""), 2 * 3);
    free(svg);
    /* A part still over the limit. */
    viz_view_all(&v);
    v.dev_lo = 0;
    v.dev_hi = 6;
    svg = NULL;
    ck_assert_int_eq(viz_dag_svg_view(s, &v, &svg, &n, &err), -1);
    ck_assert_ptr_null(svg);
    ck_assert_ptr_nonnull(strstr(err.msg, "the part chosen holds 2688 ops"));
    ck_assert_ptr_nonnull(strstr(err.msg, "narrow it"));
    sched_free(s);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("dag");
    TCase *tc = tcase_create("dag");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, small_schedule_renders);
    tcase_add_test(tc, critical_path_follows_costs);
    tcase_add_test(tc, chunks_and_same_bytes);
    tcase_add_test(tc, nodes_coloured_by_kind);
    tcase_add_test(tc, big_schedule_is_refused);
    tcase_add_test(tc, window_of_a_big_schedule);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
