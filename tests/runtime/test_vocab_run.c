/*
 * test_vocab_run.c: `zbsched run` on vocabulary-parallel schedules (issue
 * 11's done-when check and what must keep working around it):
 *
 *   - 1f1b, zb-h2 and zb-v with --vocab parallel on 2 devices, m = 4, the
 *     tiny model, 20 steps: every loss and the validation loss are the same
 *     bits across the three kinds, and within 1e-6 (relative) of the plain
 *     run (--vocab plain) (Vocab-2, recompute and the synchronous
 *     optimizer: tests/runtime/test_trainer_vocab.c);
 *   - a checkpoint of a 2-device split resumes under a 4-device split and
 *     under a plain schedule (the head is stored whole);
 *   - --trace writes a valid schedule with the S and T passes' times;
 *   - islands (two replicas, sync outer) train;
 *   - --device cuda refuses with one line.
 */
#include <check.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "src/sched_io.h"
#include "src/validate.h"
#include "tests/common/cli_run.h"

static char dir[64];
static char out_text[1 << 16], err_text[1 << 14];

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/zb_test_vocab_run_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* Runs `zbsched ARGS` from the repository root under a timeout. */
static int zb(const char *fmt, ...)
{
    char args[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    const char *root = getenv("ZB_SOURCE_ROOT");
    ck_assert_ptr_nonnull(root);
    return cli_run(root, "timeout 120", args, out_text, sizeof out_text, err_text,
                   sizeof err_text);
}

#define MAX_STEPS 20

/* One run's --json result: its losses and validation loss. */
typedef struct run_out {
    int n;                    /* losses */
    double loss[MAX_STEPS];   /* per step */
    double val;               /* final validation loss */
} run_out;

/* Runs `run FILE EXTRA --json -q` and parses the result. */
static run_out run_json(const char *file, const char *extra)
{
    ck_assert_msg(zb("run %s/%s --model tiny --threads 1 --json -q %s", dir, file, extra) == 0,
                  "run %s %s: %s", file, extra, err_text);
    cJSON *o = cJSON_Parse(out_text);
    ck_assert_ptr_nonnull(o);
    cJSON *l = cJSON_GetObjectItem(o, "losses");
    run_out r = { 0 };
    r.n = cJSON_GetArraySize(l);
    ck_assert_int_le(r.n, MAX_STEPS);
    for (int i = 0; i < r.n; i++)
        r.loss[i] = cJSON_GetArrayItem(l, i)->valuedouble;
    r.val = cJSON_GetObjectItem(o, "val_loss")->valuedouble;
    cJSON_Delete(o);
    return r;
}

static void assert_same_bits(const run_out *a, const run_out *b, const char *what)
{
    ck_assert_int_eq(a->n, b->n);
    for (int i = 0; i < a->n; i++)
        ck_assert_msg(a->loss[i] == b->loss[i], "%s: step %d loss %.17g vs %.17g", what, i + 1,
                      a->loss[i], b->loss[i]);
    ck_assert_msg(a->val == b->val, "%s: val loss %.17g vs %.17g", what, a->val, b->val);
}

static void assert_close(const run_out *a, const run_out *b, double rel, const char *what)
{
    ck_assert_int_eq(a->n, b->n);
    for (int i = 0; i < a->n; i++)
        ck_assert_msg(fabs(a->loss[i] - b->loss[i]) <= rel * fabs(b->loss[i]),
                      "%s: step %d loss %.17g vs %.17g", what, i + 1, a->loss[i], b->loss[i]);
    ck_assert_msg(fabs(a->val - b->val) <= rel * fabs(b->val), "%s: val loss %.17g vs %.17g",
                  what, a->val, b->val);
}

START_TEST(kinds_agree_and_match_plain)
{
    static const char *kinds[] = { "1f1b", "zb-h2", "zb-v" };
    run_out r[3];
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(zb("gen %s -p 2 -m 4 --vocab parallel -o %s/%s.json", kinds[i], dir,
                            kinds[i]), 0);
        char file[32];
        snprintf(file, sizeof file, "%s.json", kinds[i]);
        r[i] = run_json(file, "--steps 20");
        ck_assert_int_eq(r[i].n, 20);
    }
    assert_same_bits(&r[1], &r[0], "zb-h2 vs 1f1b");
    assert_same_bits(&r[2], &r[0], "zb-v vs 1f1b");
    ck_assert_int_eq(zb("gen 1f1b -p 2 -m 4 --vocab plain -o %s/plain.json", dir), 0);
    run_out plain = run_json("plain.json", "--steps 20");
    assert_close(&r[0], &plain, 1e-6, "vocab-1 vs plain");
    /* the loss fell: the passes train the head */
    ck_assert(r[0].loss[19] < r[0].loss[0] - 0.5);
}
END_TEST

START_TEST(checkpoint_across_splits)
{
    /* zb-v on 2 devices and 1f1b on 4 both have 4 stages of one layer */
    ck_assert_int_eq(zb("gen zb-v -p 2 -m 4 --vocab parallel -o %s/v.json", dir), 0);
    ck_assert_int_eq(zb("gen 1f1b -p 4 -m 4 --vocab parallel -o %s/p4.json", dir), 0);
    ck_assert_int_eq(zb("gen 1f1b -p 4 -m 4 -o %s/plain4.json", dir), 0);
    run_out full = run_json("v.json", "--steps 6 --eval-every 3");
    char extra[256];
    snprintf(extra, sizeof extra, "--steps 6 --stop-at 3 --eval-every 3 --checkpoint %s/ck", dir);
    run_out first = run_json("v.json", extra);
    ck_assert_int_eq(first.n, 3);
    for (int i = 0; i < 3; i++)
        ck_assert(first.loss[i] == full.loss[i]);
    /* each resume continues a copy of the step-3 checkpoint (a resumed
     * run writes its own at the end) */
    char cmd[512];
    snprintf(cmd, sizeof cmd, "cp -r %s/ck %s/ck2 && cp -r %s/ck %s/ck3", dir, dir, dir, dir);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(extra, sizeof extra, "--steps 6 --eval-every 3 --checkpoint %s/ck --resume", dir);
    run_out same = run_json("v.json", extra);
    snprintf(extra, sizeof extra, "--steps 6 --eval-every 3 --checkpoint %s/ck2 --resume", dir);
    run_out wide = run_json("p4.json", extra);
    snprintf(extra, sizeof extra, "--steps 6 --eval-every 3 --checkpoint %s/ck3 --resume", dir);
    run_out plain = run_json("plain4.json", extra);
    run_out tail = full;
    tail.n = 3;
    memmove(tail.loss, full.loss + 3, sizeof(double) * 3);
    assert_same_bits(&same, &tail, "resumed, same split");
    assert_close(&wide, &tail, 1e-6, "resumed on 4 shards");
    assert_close(&plain, &tail, 1e-6, "resumed without vocabulary parallelism");
}
END_TEST

START_TEST(trace_islands_and_refusals)
{
    ck_assert_int_eq(zb("gen zb-h2 -p 2 -m 4 --vocab parallel --vocab-variant 2 -o %s/s.json",
                        dir), 0);
    char extra[256];
    snprintf(extra, sizeof extra, "--steps 2 --trace %s/trace.json", dir);
    (void)run_json("s.json", extra);
    char path[256];
    snprintf(path, sizeof path, "%s/trace.json", dir);
    sched_t *t = NULL;
    zb_err err = { { 0 } };
    ck_assert_msg(sched_load_file(path, &t, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(sched_validate(t, &err), 0);
    ck_assert_int_eq(t->vocab.variant, 2);
    ck_assert(t->vocab.t_s > 0 && t->vocab.t_t > 0);
    for (int d = 0; d < t->n_devices; d++) {
        ck_assert_ptr_nonnull(t->dev[d].start);
        for (int k = 0; k < t->dev[d].n_ops; k++) {
            ck_assert(t->dev[d].end[k] >= t->dev[d].start[k]);
            /* a T starts after every S of its micro-batch ended (barrier C0) */
            sched_op op = t->dev[d].ops[k];
            if (op.kind != OP_T)
                continue;
            for (int e = 0; e < t->n_devices; e++)
                for (int q = 0; q < t->dev[e].n_ops; q++)
                    if (t->dev[e].ops[q].kind == OP_S && t->dev[e].ops[q].mb == op.mb)
                        ck_assert(t->dev[e].end[q] <= t->dev[d].start[k]);
        }
    }
    sched_free(t);
    run_out isl = run_json("s.json", "--steps 4 --replicas 2 --outer sync --inner-steps 2");
    ck_assert_int_eq(isl.n, 4);
    for (int i = 0; i < isl.n; i++)
        ck_assert(isfinite(isl.loss[i]));
    ck_assert(zb("run %s/s.json --model tiny --steps 1 --device cuda --data /nonexistent", dir)
              != 0);
    cli_assert_one_line(err_text, "/nonexistent"); /* past the plan: the GPU runs the passes */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("vocab_run");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, kinds_agree_and_match_plain);
    tcase_add_test(tc, checkpoint_across_splits);
    tcase_add_test(tc, trace_islands_and_refusals);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed == 0 ? 0 : 1;
}
