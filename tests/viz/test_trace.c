/*
 * test_trace.c: the Chrome trace-event JSON.  The document parses (cJSON),
 * holds one complete "X" event per op with its micro-batch, stage, chunk
 * and kind, one named process per device, times in microseconds converted
 * from the schedule's unit, measured times when present, memory counters
 * that return to zero, and the same bytes on every run (two processes of
 * their own and the library agree).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "tests/viz/viz_fixtures.h"
#include "tests/viz/viz_testutil.h"
#include "viz/viz.h"

static cJSON *trace(const sched_t *s, char **text_out)
{
    zb_err err = { 0 };
    char *text = NULL;
    size_t n = 0;
    ck_assert_msg(viz_trace_json(s, &text, &n, &err) == 0, "trace failed: %s", err.msg);
    ck_assert_uint_eq(strlen(text), n);
    cJSON *doc = cJSON_Parse(text);
    ck_assert_msg(doc != NULL, "trace is not JSON");
    if (text_out)
        *text_out = text;
    else
        free(text);
    return doc;
}

static const char *str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    ck_assert_msg(cJSON_IsString(v), "missing string %s", key);
    return v->valuestring;
}

static double num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    ck_assert_msg(cJSON_IsNumber(v), "missing number %s", key);
    return v->valuedouble;
}

START_TEST(one_x_event_per_op)
{
    sched_t *s = fixture_v(3, 4);
    cJSON *doc = trace(s, NULL);
    cJSON *events = cJSON_GetObjectItemCaseSensitive(doc, "traceEvents");
    ck_assert(cJSON_IsArray(events));
    int n_x = 0, names = 0, sorts = 0;
    int next[3] = { 0, 0, 0 }; /* next op expected per device */
    const cJSON *e;
    cJSON_ArrayForEach(e, events) {
        const char *ph = str(e, "ph");
        int pid = (int)num(e, "pid");
        ck_assert(pid >= 0 && pid < 3);
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(e, "args");
        ck_assert(cJSON_IsObject(args));
        if (!strcmp(ph, "M")) {
            if (!strcmp(str(e, "name"), "process_name")) {
                char want[32];
                snprintf(want, sizeof want, "device %d", pid);
                ck_assert_str_eq(str(args, "name"), want);
                names++;
            }
            sorts += !strcmp(str(e, "name"), "process_sort_index");
        } else if (!strcmp(ph, "X")) {
            /* X events come in lane order and describe exactly that op. */
            ck_assert_int_lt(next[pid], s->dev[pid].n_ops);
            sched_op op = s->dev[pid].ops[next[pid]++];
            const char *kn = op_kind_name((op_kind)op.kind);
            char want[32];
            snprintf(want, sizeof want, "%s%d", kn, op.mb);
            ck_assert_str_eq(str(e, "name"), want);
            ck_assert_str_eq(str(e, "cat"), kn);
            ck_assert_str_eq(str(args, "kind"), kn);
            ck_assert_int_eq((int)num(args, "mb"), op.mb);
            ck_assert_int_eq((int)num(args, "stage"), op.stage);
            ck_assert_int_eq((int)num(args, "chunk"), op.stage < 3 ? 0 : 1); /* V placement */
            ck_assert(num(e, "dur") > 0 && num(e, "ts") >= 0);
            n_x++;
        } else {
            ck_assert_str_eq(ph, "C");
        }
    }
    ck_assert_int_eq(n_x, sched_op_count(s));
    ck_assert_int_eq(names, 3);
    ck_assert_int_eq(sorts, 3);
    for (int d = 0; d < 3; d++)
        ck_assert_int_eq(next[d], s->dev[d].n_ops);
    cJSON *other = cJSON_GetObjectItemCaseSensitive(doc, "otherData");
    ck_assert_str_eq(str(other, "schedule"), "v-gpipe");
    ck_assert_str_eq(str(other, "source"), "simulated");
    cJSON_Delete(doc);
    sched_free(s);
}
END_TEST

/* Duration of the first X event. */
static double first_dur(const cJSON *doc)
{
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(doc, "traceEvents"))
        if (!strcmp(str(e, "ph"), "X"))
            return num(e, "dur");
    ck_abort_msg("no X event");
    return 0;
}

START_TEST(times_in_microseconds)
{
    sched_t *s = fixture_1f1b(2, 2);
    cJSON *doc = trace(s, NULL);
    ck_assert_double_eq(first_dur(doc), 1); /* abstract units: 1 unit = 1 us */
    cJSON_Delete(doc);
    strcpy(s->time_unit, "ms");
    doc = trace(s, NULL);
    ck_assert_double_eq(first_dur(doc), 1000);
    cJSON_Delete(doc);
    strcpy(s->time_unit, "s");
    sched_set_costs(s, 0.25, 0.5, 0.5, 0);
    doc = trace(s, NULL);
    ck_assert_double_eq(first_dur(doc), 250000);
    cJSON_Delete(doc);
    sched_free(s);
}
END_TEST

START_TEST(measured_times_and_memory_counters)
{
    sched_t *s = fixture_zb_h1(3, 4);
    ck_assert_int_eq(fixture_add_times(s), 0);
    cJSON *doc = trace(s, NULL);
    ck_assert_str_eq(str(cJSON_GetObjectItemCaseSensitive(doc, "otherData"), "source"), "measured");
    double last_mem[3] = { -1, -1, -1 };
    int found_dev1_first = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(doc, "traceEvents")) {
        int pid = (int)num(e, "pid");
        if (!strcmp(str(e, "ph"), "C")) {
            last_mem[pid] = num(cJSON_GetObjectItemCaseSensitive(e, "args"), "units");
        } else if (!strcmp(str(e, "ph"), "X") && pid == 1 && !found_dev1_first) {
            /* The fixture starts device 1 at 0.5 (device 0 at 0). */
            ck_assert_double_eq_tol(num(e, "ts"), 0.5, 1e-9);
            found_dev1_first = 1;
        }
    }
    ck_assert(found_dev1_first);
    for (int d = 0; d < 3; d++)
        ck_assert_double_eq(last_mem[d], 0); /* every activation freed */
    cJSON_Delete(doc);
    sched_free(s);
}
END_TEST

/* Byte-stable: the same trace from this process's library call and from
 * two runs of `zbsched render --format trace`, each a process of its own
 * (other addresses under ASLR), with different bytes in fresh and freed
 * memory (MALLOC_PERTURB_), started a second apart.  A trace that depended
 * on an address, the clock or uninitialised memory would differ. */
START_TEST(same_bytes_twice)
{
    sched_t *s = fixture_zb_h1(4, 8);
    char *here;
    cJSON *doc = trace(s, &here);
    size_t n1, n2;
    char *a = tu_render_elsewhere(s, "trace", 0x11, &n1);
    sleep(1);
    char *b = tu_render_elsewhere(s, "trace", 0xee, &n2);
    ck_assert_msg(n1 == n2 && memcmp(a, b, n1) == 0, "two runs of render wrote different traces");
    ck_assert_str_eq(here, a);
    free(here);
    free(a);
    free(b);
    cJSON_Delete(doc);
    sched_free(s);
}
END_TEST

START_TEST(invalid_schedule_is_refused)
{
    sched_t *s = fixture_1f1b(3, 3);
    s->dev[0].ops[0].mb = 1; /* F1 twice, F0 missing */
    zb_err err = { 0 };
    char *text = NULL;
    size_t n;
    ck_assert_int_eq(viz_trace_json(s, &text, &n, &err), -1);
    ck_assert_ptr_null(text);
    ck_assert(err.msg[0] != '\0');
    sched_free(s);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("trace");
    TCase *tc = tcase_create("trace");
    tcase_add_test(tc, one_x_event_per_op);
    tcase_add_test(tc, times_in_microseconds);
    tcase_add_test(tc, measured_times_and_memory_counters);
    tcase_add_test(tc, same_bytes_twice);
    tcase_add_test(tc, invalid_schedule_is_refused);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
