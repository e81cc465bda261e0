/*
 * test_sched_io.c: the JSON schedule file.  Save/load round trips exactly
 * (per-stage costs, limits, measured times, preserved meta, awkward
 * doubles and names); every kind of malformed document is rejected with a
 * message naming the field, or the device and op position; file helpers
 * write atomically and leave nothing behind on failure.
 */
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/sched_io.h"
#include "src/validate.h"
#include "tests/core/fixtures.h"

static void assert_same(const sched_t *a, const sched_t *b)
{
    ck_assert_str_eq(a->name, b->name);
    ck_assert_int_eq(a->n_devices, b->n_devices);
    ck_assert_int_eq(a->n_micro, b->n_micro);
    ck_assert_int_eq(a->n_stages, b->n_stages);
    ck_assert(!memcmp(a->stage_device, b->stage_device, sizeof(int) * (size_t)a->n_stages));
    ck_assert(!memcmp(a->cost, b->cost, sizeof(stage_cost) * (size_t)a->n_stages));
    ck_assert(a->t_comm == b->t_comm);
    ck_assert_str_eq(a->time_unit, b->time_unit);
    ck_assert_str_eq(a->mem_unit, b->mem_unit);
    ck_assert_int_eq(!a->mem_limit, !b->mem_limit);
    ck_assert_int_eq(!a->mem_static, !b->mem_static);
    if (a->mem_limit)
        ck_assert(!memcmp(a->mem_limit, b->mem_limit, sizeof(double) * (size_t)a->n_devices));
    if (a->mem_static)
        ck_assert(!memcmp(a->mem_static, b->mem_static, sizeof(double) * (size_t)a->n_devices));
    for (int d = 0; d < a->n_devices; d++) {
        const sched_lane *x = &a->dev[d], *y = &b->dev[d];
        ck_assert_int_eq(x->n_ops, y->n_ops);
        for (int i = 0; i < x->n_ops; i++) {
            ck_assert_int_eq(x->ops[i].kind, y->ops[i].kind);
            ck_assert_int_eq(x->ops[i].stage, y->ops[i].stage);
            ck_assert_int_eq(x->ops[i].mb, y->ops[i].mb);
        }
        ck_assert_int_eq(!x->start, !y->start);
        if (x->start) {
            ck_assert(!memcmp(x->start, y->start, sizeof(double) * (size_t)x->n_ops));
            ck_assert(!memcmp(x->end, y->end, sizeof(double) * (size_t)x->n_ops));
        }
    }
    ck_assert_int_eq(!a->meta, !b->meta);
    if (a->meta)
        ck_assert(cJSON_Compare(a->meta, b->meta, 1));
}

START_TEST(round_trip_everything)
{
    sched_t *s = fixture_v(2, 3);
    ck_assert_ptr_nonnull(s);
    snprintf(s->name, sizeof s->name, "%s", "odd \"name\"\n\\ tab\t");
    snprintf(s->time_unit, sizeof s->time_unit, "ms");
    snprintf(s->mem_unit, sizeof s->mem_unit, "bytes");
    s->cost[0].t_f = 0.1;
    s->cost[1].t_b = 1.0 / 3.0;
    s->cost[3].d_w = -1.5e-7;
    s->cost[2].d_f = 123456789012345678.0;
    s->t_comm = 0.1 + 0.2;
    s->mem_limit = malloc(2 * sizeof(double));
    s->mem_limit[0] = 8e9;
    s->mem_limit[1] = 7.5;
    s->mem_static = calloc(2, sizeof(double));
    s->mem_static[1] = 1e-300;
    ck_assert_int_eq(sched_lane_alloc_times(s, 1), 0);
    for (int i = 0; i < s->dev[1].n_ops; i++) {
        s->dev[1].start[i] = i * 0.1;
        s->dev[1].end[i] = i * 0.1 + 0.07;
    }
    s->meta = cJSON_Parse("{\"solver\": {\"kind\": \"zb-auto\", \"iters\": [1, 2.5]},"
                          " \"predicted\": {\"cost\": 12.5}, \"x-note\": \"kept\"}");
    ck_assert_ptr_nonnull(s->meta);

    char *text = sched_to_string(s);
    ck_assert_ptr_nonnull(text);
    sched_t *t = NULL;
    zb_err err = { "" };
    ck_assert_msg(sched_load_string(text, strlen(text), &t, &err) == 0, "%s", err.msg);
    assert_same(s, t);
    char *again = sched_to_string(t);
    ck_assert_str_eq(text, again); /* writing is deterministic */
    /* Per-stage arrays only where stages differ. */
    ck_assert_ptr_nonnull(strstr(text, "\"W\": 1, \"comm\""));
    ck_assert_ptr_nonnull(strstr(text, "\"F\": [0.1, 1, 1, 1]"));
    /* Two stages per device: tokens carry @stage. */
    ck_assert_ptr_nonnull(strstr(text, "\"F0@0\""));
    free(text);
    free(again);
    sched_free(t);
    sched_free(s);
}
END_TEST

START_TEST(round_trip_plain_and_not_nul_terminated)
{
    sched_t *s = fixture_1f1b(3, 4, 1);
    strcpy(s->name, "1f1b");
    char *text = sched_to_string(s);
    ck_assert_ptr_nonnull(strstr(text, "[\"F0\", \"F1\", \"F2\", \"B0\", \"W0\""));
    ck_assert_ptr_null(strstr(text, "times"));
    size_t n = strlen(text);
    char *copy = malloc(n); /* no NUL: the loader must honour len */
    memcpy(copy, text, n);
    sched_t *t = NULL;
    zb_err err = { "" };
    ck_assert_msg(sched_load_string(copy, n, &t, &err) == 0, "%s", err.msg);
    assert_same(s, t);
    ck_assert_int_eq(sched_validate(t, &err), 0);
    free(copy);
    free(text);
    sched_free(t);
    sched_free(s);
}
END_TEST

static const char *base_doc =
    "{\"format\": \"zbsched-schedule\", \"version\": 1, \"name\": \"t\", \"devices\": 2,"
    " \"microbatches\": 2, \"stages\": 2, \"placement\": [0, 1],"
    " \"costs\": {\"F\": 1, \"B\": 1, \"W\": 1, \"comm\": 0},"
    " \"memory\": {\"F\": 2, \"B\": -1, \"W\": -1},"
    " \"ops\": [[\"F0\", \"F1\", \"BW0\", \"BW1\"], [\"F0\", \"BW0\", \"F1\", \"BW1\"]]}";

/* One malformed variant: replace `from` (first occurrence) with `to`; the
 * load must fail with a message containing `frag`. */
typedef struct bad_case {
    const char *from; /* text of the valid base document to replace */
    const char *to;   /* what replaces it */
    const char *frag; /* expected part of the error message */
} bad_case;

static const bad_case bad_cases[] = {
    { "\"version\": 1", "\"version\": 3", "unsupported version 3" },
    { "\"version\": 1", "\"version\": 2", "version 2 needs a \"vocab\" object" },
    { "\"version\": 1", "\"version\": \"1\"", "version must be a number" },
    { "\"version\": 1,", "", "version is missing" },
    { "zbsched-schedule", "other", "not a schedule file" },
    { "\"devices\": 2", "\"devices\": 0", "devices is 0" },
    { "\"devices\": 2", "\"devices\": -3", "devices is -3" },
    { "\"devices\": 2", "\"devices\": 1.5", "devices must be a whole number" },
    { "\"devices\": 2", "\"devices\": 1e12", "devices is 1000000000000" },
    { "\"microbatches\": 2", "\"microbatches\": 0", "microbatches is 0" },
    { "\"stages\": 2,", "", "missing field 'stages'" },
    { "\"placement\": [0, 1]", "\"placement\": [0]", "placement must be an array" },
    { "\"placement\": [0, 1]", "\"placement\": [0, 2]", "placement[1] is 2" },
    { "\"placement\": [0, 1]", "\"placement\": [0, \"x\"]", "placement[1] must be a number" },
    { "\"placement\": [0, 1]", "\"placement\": [0, 0]", "device 0, op 0 (F0): the device holds more than one stage" },
    { "\"costs\": {\"F\": 1", "\"costs\": {\"F\": -1", "costs.F must not be negative" },
    { "\"costs\": {\"F\": 1", "\"costs\": {\"F\": [1]", "costs.F has 1 entries" },
    { "\"costs\": {\"F\": 1", "\"costs\": {\"F\": \"fast\"", "costs.F must be a finite number" },
    { "\"costs\": {\"F\": 1, ", "\"costs\": {", "costs.F is missing" },
    { "\"memory\": {\"F\": 2", "\"memory\": {\"F\": null", "memory.F must be a finite number" },
    { "\"ops\": [[", "\"ops\": [[\"F0\"], [", "ops must be an array with one list per device (2)" },
    { "\"F1\", \"BW1\"]]", "\"F1\", \"X1\"]]", "device 1, op 3: bad op token 'X1'" },
    { "\"F1\", \"BW1\"]]", "\"F1\", 7]]", "device 1, op 3: op must be a string" },
    { "\"F1\", \"BW0\"", "\"F9\", \"BW0\"", "device 0, op 1 (F9): micro-batch 9 out of range 0..1" },
    { "\"F1\", \"BW0\"", "\"F1@5\", \"BW0\"", "device 0, op 1 (F1@5): stage 5 out of range" },
    /* The first value out of range on each side of the bound. */
    { "\"F1\", \"BW0\"", "\"F2\", \"BW0\"", "device 0, op 1 (F2): micro-batch 2 out of range 0..1" },
    { "\"F1\", \"BW0\"", "\"F1@2\", \"BW0\"", "device 0, op 1 (F1@2): stage 2 out of range 0..1" },
    { "\"F1\", \"BW0\"", "\"F-1\", \"BW0\"", "device 0, op 1: bad op token 'F-1'" },
    { "\"F1\", \"BW0\"", "\"F\", \"BW0\"", "device 0, op 1: bad op token 'F'" },
    { "\"F1\", \"BW0\"", "\"F1@\", \"BW0\"", "bad op token 'F1@'" },
    { "\"F1\", \"BW0\"", "\"F 1\", \"BW0\"", "bad op token 'F 1'" },
    { "\"F1\", \"BW0\"", "\"F1x\", \"BW0\"", "bad op token 'F1x'" },
    { "\"F1\", \"BW0\"", "\"F99999999999\", \"BW0\"", "bad op token 'F99999999999'" },
    { "\"F1\", \"BW0\"", "\"f1\", \"BW0\"", "bad op token 'f1'" },
    { "[\"F0\", \"F1\", \"BW0\", \"BW1\"]", "{\"op\": 1}", "device 0: ops must be an array" },
    { "\"name\": \"t\"", "\"name\": 5", "name must be a string" },
    { "\"name\": \"t\"", "\"name\": \"0123456789012345678901234567890123456789012345678901234567890123456789\"",
      "name is longer than 63" },
    { "\"name\": \"t\"", "\"name\": \"t\", \"name\": \"u\"", "field 'name' appears twice" },
    { "\"ops\"", "\"times\": [null], \"ops\"", "times must be an array with one entry per device" },
    { "\"ops\"", "\"times\": [null, [[0, 1]]], \"ops\"", "device 1: times has 1 entries for 4 ops" },
    { "\"ops\"", "\"times\": [null, [[0, 1], [1, 2], [2, 3], [3]]], \"ops\"", "device 1, op 3: times entry" },
    { "\"ops\"", "\"times\": [null, [[0, 1], [1, 2], [2, 3], [3, 2]]], \"ops\"", "device 1, op 3: measured end" },
    { "\"memory\": {\"F\": 2", "\"memory\": {\"limit\": [1], \"F\": 2", "memory.limit has 1 entries" },
};

START_TEST(rejects_malformed_variant)
{
    const bad_case *c = &bad_cases[_i];
    const char *at = strstr(base_doc, c->from);
    ck_assert_msg(at != NULL, "case %d: '%s' not in the base document", _i, c->from);
    char doc[2048];
    snprintf(doc, sizeof doc, "%.*s%s%s", (int)(at - base_doc), base_doc, c->to, at + strlen(c->from));
    sched_t *s = NULL;
    zb_err err = { "" };
    ck_assert_msg(sched_load_string(doc, strlen(doc), &s, &err) == -1, "case %d loaded: %s", _i, doc);
    ck_assert_ptr_null(s);
    ck_assert_msg(strstr(err.msg, c->frag), "case %d: message '%s' lacks '%s'", _i, err.msg, c->frag);
    ck_assert_ptr_null(strchr(err.msg, '\n'));
}
END_TEST

START_TEST(base_doc_is_valid)
{
    sched_t *s = NULL;
    zb_err err = { "" };
    ck_assert_msg(sched_load_string(base_doc, strlen(base_doc), &s, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(sched_validate(s, &err), 0);
    ck_assert_int_eq(s->dev[1].ops[1].kind, OP_BW);
    ck_assert_int_eq(s->dev[1].ops[1].stage, 1);
    sched_free(s);
}
END_TEST

START_TEST(rejects_broken_json)
{
    static const struct { const char *doc, *frag; } cases[] = {
        { "", "empty document" },
        { "  \n ", "empty document" },
        { "[1, 2]", "must be a JSON object" },
        { "{\"format\": \"zbsched-schedule\", \"version\": 1,", "truncated" },
        { "{\"format\": \"zbsched-schedule\",\n \"version\": 1 x}", "line 2, column" },
        { "{\"format\": \"zbsched-schedule\"} {}", "unexpected text after the document" },
        { "nul", "malformed JSON" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sched_t *s = NULL;
        zb_err err = { "" };
        ck_assert_int_eq(sched_load_string(cases[i].doc, strlen(cases[i].doc), &s, &err), -1);
        ck_assert_msg(strstr(err.msg, cases[i].frag), "case %zu: '%s' lacks '%s'", i, err.msg, cases[i].frag);
    }
    /* Every truncation of a valid document fails cleanly. */
    size_t n = strlen(base_doc);
    for (size_t cut = 0; cut < n; cut++) {
        sched_t *s = NULL;
        zb_err err = { "" };
        ck_assert_int_eq(sched_load_string(base_doc, cut, &s, &err), -1);
        ck_assert_ptr_null(s);
    }
}
END_TEST

static int dir_entries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

START_TEST(files_atomic_and_errors)
{
    char dir[] = "/tmp/zb_io_testXXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[256], bad[256];
    snprintf(path, sizeof path, "%s/s.json", dir);
    snprintf(bad, sizeof bad, "%s/missing/s.json", dir);
    sched_t *s = fixture_1f1b(2, 3, 0), *t = NULL;
    zb_err err = { "" };
    ck_assert_int_eq(sched_save_file(s, path, &err), 0);
    ck_assert_int_eq(dir_entries(dir), 1); /* no temporary left */
    ck_assert_msg(sched_load_file(path, &t, &err) == 0, "%s", err.msg);
    assert_same(s, t);
    sched_free(t);
    ck_assert_int_eq(sched_save_file(s, bad, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "cannot create"));
    ck_assert_int_eq(sched_save_file(s, dir, &err), -1); /* a directory */
    ck_assert_int_eq(dir_entries(dir), 1);
    ck_assert_int_eq(sched_load_file(bad, &t, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "cannot open"));
    ck_assert_int_eq(sched_load_file(dir, &t, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "cannot read"));
    /* Load errors carry the path. */
    FILE *f = fopen(path, "w");
    fputs("{\"format\": \"zbsched-schedule\", \"version\": 9}", f);
    fclose(f);
    ck_assert_int_eq(sched_load_file(path, &t, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, path));
    ck_assert_ptr_nonnull(strstr(err.msg, "unsupported version 9"));
    unlink(path);
    rmdir(dir);
    sched_free(s);
}
END_TEST

START_TEST(large_schedule_round_trip)
{
    sched_t *s = fixture_1f1b(16, 1024, 1), *t = NULL; /* ~49k ops, quick under ASan */
    char *text = sched_to_string(s);
    zb_err err = { "" };
    ck_assert_msg(sched_load_string(text, strlen(text), &t, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(sched_op_count(t), 3L * 16 * 1024);
    assert_same(s, t);
    free(text);
    sched_free(t);
    sched_free(s);
}
END_TEST

/* The example in docs/schedule-format.md loads, validates and simulates. */
START_TEST(documented_example_is_valid)
{
    const char *root = getenv("ZB_SOURCE_ROOT");
    ck_assert_msg(root != NULL, "ZB_SOURCE_ROOT is not set (run through meson test)");
    char path[1024];
    snprintf(path, sizeof path, "%s/docs/schedule-format.md", root);
    char *doc;
    size_t len;
    zb_err err = { "" };
    ck_assert_msg(zb_read_file(path, &doc, &len, &err) == 0, "%s", err.msg);
    char *begin = strstr(doc, "```json\n");
    ck_assert_ptr_nonnull(begin);
    begin += 8;
    char *end = strstr(begin, "```");
    ck_assert_ptr_nonnull(end);
    sched_t *s = NULL;
    ck_assert_msg(sched_load_string(begin, (size_t)(end - begin), &s, &err) == 0, "%s", err.msg);
    ck_assert_msg(sched_validate(s, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(s->time_unit, "ms");
    ck_assert(s->cost[0].t_f == 1.5 && s->cost[1].t_f == 1);
    ck_assert_ptr_nonnull(cJSON_GetObjectItem(s->meta, "solver"));
    sched_free(s);
    free(doc);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("sched_io");
    TCase *tc = tcase_create("sched_io");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, round_trip_everything);
    tcase_add_test(tc, round_trip_plain_and_not_nul_terminated);
    tcase_add_test(tc, base_doc_is_valid);
    tcase_add_loop_test(tc, rejects_malformed_variant, 0, (int)(sizeof bad_cases / sizeof bad_cases[0]));
    tcase_add_test(tc, rejects_broken_json);
    tcase_add_test(tc, files_atomic_and_errors);
    tcase_add_test(tc, large_schedule_round_trip);
    tcase_add_test(tc, documented_example_is_valid);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
