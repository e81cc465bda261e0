/*
 * test_outer_cli.c: `zbsched run ... --replicas K --outer ...` end to end
 * through the built program: the JSON carries bytes_sent and the outer
 * steps, int8 sends fewer bytes than fp32, --zero1 gives the sync run's
 * losses with half the optimizer state per replica, and bad flags give
 * exit status 2 with exactly one line on stderr.
 */
#include <check.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/sched_io.h"
#include "tests/common/cli_run.h"
#include "tests/common/trainer_fixture.h"

static char dir[256];
static char sched_path[300], model_path[300];

static void setup(void)
{
    strcpy(dir, "/tmp/zb-outer-cli-XXXXXX");
    ck_assert(mkdtemp(dir) != NULL);
    snprintf(sched_path, sizeof sched_path, "%s/s.json", dir);
    snprintf(model_path, sizeof model_path, "%s/m.json", dir);
    sched_t *s = fixture_gpipe2();
    strcpy(s->name, "gpipe-2");
    zb_err err = { "" };
    ck_assert_msg(sched_save_file(s, sched_path, &err) == 0, "%s", err.msg);
    sched_free(s);
    FILE *f = fopen(model_path, "w");
    ck_assert(f != NULL);
    fputs("{\"name\":\"cli-tiny\",\"n_layers\":2,\"d_model\":32,\"n_heads\":4,\"n_kv_heads\":2,"
          "\"d_ff\":64,\"vocab\":65,\"seq_len\":32,\"micro_batch\":2,\"swiglu\":1,"
          "\"tied_embedding\":0,\"rope_theta\":10000,\"dtype\":\"fp32\"}\n", f);
    fclose(f);
}

static void teardown(void)
{
    unlink(sched_path);
    unlink(model_path);
    rmdir(dir);
}

/* Runs `zbsched run` on the fixture's schedule and model with the extra
 * arguments, from the repository root; captures stdout and stderr into
 * malloc'd strings (caller frees); returns the exit status. */
static int run_cli(const char *extra, char **out, char **errtext)
{
    const char *root = getenv("ZB_SOURCE_ROOT");
    ck_assert_msg(root != NULL, "ZB_SOURCE_ROOT is not set (run through meson test)");
    char args[2048];
    snprintf(args, sizeof args, "run '%s' --model '%s' --eval-windows 4 -q %s", sched_path,
             model_path, extra);
    *out = calloc(1, 1 << 20);
    *errtext = calloc(1, 1 << 20);
    ck_assert(*out != NULL && *errtext != NULL);
    return cli_run(root, NULL, args, *out, 1 << 20, *errtext, 1 << 20);
}

static double json_num(const cJSON *o, const char *key)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    ck_assert_msg(cJSON_IsNumber(it), "no number '%s'", key);
    return it->valuedouble;
}

START_TEST(replicas_json_has_bytes_sent)
{
    char *out, *errt;
    double bytes[2];
    const char *wires[2] = { "fp32", "int8" };
    for (int w = 0; w < 2; w++) {
        char extra[256];
        snprintf(extra, sizeof extra,
                 "--steps 4 --replicas 2 --outer diloco --inner-steps 2 --allreduce %s --json", wires[w]);
        int rc = run_cli(extra, &out, &errt);
        ck_assert_msg(rc == 0, "exit %d: %s", rc, errt);
        cJSON *j = cJSON_Parse(out);
        ck_assert_msg(j != NULL, "not JSON: %s", out);
        bytes[w] = json_num(j, "bytes_sent");
        ck_assert(bytes[w] > 0);
        ck_assert_int_eq((int)json_num(j, "outer_steps"), 2);
        ck_assert_int_eq((int)json_num(j, "replicas"), 2);
        ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "losses")), 4);
        double v = json_num(j, "val_loss");
        ck_assert(v > 0 && v < 10);
        cJSON_Delete(j);
        free(out);
        free(errt);
    }
    ck_assert(bytes[1] * 2 < bytes[0]);
    /* edit and sync run too */
    ck_assert_int_eq(run_cli("--steps 2 --replicas 2 --outer edit --inner-steps 1", &out, &errt), 0);
    ck_assert_msg(strstr(out, "outer edit") != NULL, "%s", out);
    free(out);
    free(errt);
    ck_assert_int_eq(run_cli("--steps 2 --replicas 2 --outer sync --json", &out, &errt), 0);
    cJSON *j = cJSON_Parse(out);
    ck_assert(j != NULL);
    ck_assert(json_num(j, "bytes_sent") > 0);
    ck_assert_int_eq((int)json_num(j, "outer_steps"), 0);
    cJSON_Delete(j);
    free(out);
    free(errt);
}
END_TEST

/* --zero1: the losses of the unsharded sync run bit for bit (equal text
 * from cJSON is equal doubles), half the optimizer bytes per replica. */
START_TEST(zero1_same_losses_half_the_state)
{
    char *out[2], *errt[2];
    cJSON *j[2];
    const char *flags[2] = { "", " --zero1" };
    for (int z = 0; z < 2; z++) {
        char extra[256];
        snprintf(extra, sizeof extra, "--steps 10 --replicas 2 --outer sync --clip 0.5 --json%s",
                 flags[z]);
        int rc = run_cli(extra, &out[z], &errt[z]);
        ck_assert_msg(rc == 0, "exit %d: %s", rc, errt[z]);
        ck_assert_msg((j[z] = cJSON_Parse(out[z])) != NULL, "not JSON: %s", out[z]);
    }
    char *la = cJSON_PrintUnformatted(cJSON_GetObjectItem(j[0], "losses"));
    char *lb = cJSON_PrintUnformatted(cJSON_GetObjectItem(j[1], "losses"));
    ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j[1], "losses")), 10);
    ck_assert_str_eq(la, lb);
    ck_assert(json_num(j[0], "val_loss") == json_num(j[1], "val_loss"));
    ck_assert(cJSON_IsFalse(cJSON_GetObjectItem(j[0], "zero1")));
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(j[1], "zero1")));
    double whole = json_num(j[0], "optimizer_bytes_per_replica");
    double half = json_num(j[1], "optimizer_bytes_per_replica");
    ck_assert(whole > 0);
    /* the shard is half of every segment, an odd segment's extra float aside */
    ck_assert_msg(half * 2 >= whole - 1024 && half * 2 <= whole + 1024, "%g vs %g", half, whole);
    /* a reduce-scatter and an all-gather are an all-reduce; the norm's
     * chain adds 5 doubles a tensor a hop, far below 1% of it */
    double sync = json_num(j[0], "bytes_sent"), z1 = json_num(j[1], "bytes_sent");
    ck_assert_msg(z1 > sync && z1 - sync < 0.01 * sync, "%g vs %g", z1, sync);
    /* the memory ledger of a replica's devices (issue 25): each device's
     * peak within 2% of its prediction, sharded or not, and the sharded
     * replica's predicted optimizer state is half of the unsharded one */
    double opt[2] = { 0, 0 };
    for (int z = 0; z < 2; z++) {
        cJSON *mem = cJSON_GetObjectItem(j[z], "memory"), *e;
        ck_assert_msg(cJSON_GetArraySize(mem) == 2, "%s", out[z]);
        cJSON_ArrayForEach(e, mem)
        {
            double p = json_num(e, "predicted_bytes"), m = json_num(e, "measured_bytes");
            ck_assert_msg(p > 0 && fabs(m - p) <= 0.02 * p, "zero1 %d: predicted %g, measured %g",
                          z, p, m);
            opt[z] += json_num(cJSON_GetObjectItem(cJSON_GetObjectItem(e, "classes"),
                                                   "optimizer_state"), "predicted");
        }
    }
    ck_assert_msg(opt[1] * 2 >= opt[0] - 1024 && opt[1] * 2 <= opt[0] + 1024, "%g vs %g", opt[1],
                  opt[0]);
    free(la);
    free(lb);
    for (int z = 0; z < 2; z++) {
        cJSON_Delete(j[z]);
        free(out[z]);
        free(errt[z]);
    }
}
END_TEST

/* A plan priced with ZeRO-1 (plan.zero1_dp 2) runs with it under
 * --replicas 2 --outer sync, without --zero1: the losses of the explicit
 * flag, half the optimizer bytes. */
START_TEST(plan_zero1_dp_turns_zero1_on)
{
    char plan_path[300];
    snprintf(plan_path, sizeof plan_path, "%s/plan.json", dir);
    sched_t *s = fixture_gpipe2();
    strcpy(s->name, "gpipe-2");
    s->meta = cJSON_Parse(
        "{\"model\":{\"name\":\"cli-tiny\",\"n_layers\":2,\"d_model\":32,\"n_heads\":4,"
        "\"n_kv_heads\":2,\"d_ff\":64,\"vocab\":65,\"seq_len\":32,\"micro_batch\":2,"
        "\"swiglu\":1,\"tied_embedding\":0,\"rope_theta\":10000,\"dtype\":\"fp32\"},"
        "\"plan\":{\"schedule\":\"gpipe-2\",\"micro_batch\":2,\"data_parallel\":2,"
        "\"zero1_dp\":2,\"layers_per_stage\":[1,1]}}");
    ck_assert(s->meta != NULL);
    zb_err err = { "" };
    ck_assert_msg(sched_save_file(s, plan_path, &err) == 0, "%s", err.msg);
    sched_free(s);
    const char *root = getenv("ZB_SOURCE_ROOT");
    char args[1024];
    char *out[2], *errt[2];
    cJSON *j[2];
    const char *flags[2] = { "", " --zero1" };
    for (int z = 0; z < 2; z++) {
        snprintf(args, sizeof args, "run '%s' --eval-windows 4 -q --steps 4 --replicas 2 "
                 "--outer sync --json%s", plan_path, flags[z]);
        out[z] = calloc(1, 1 << 20);
        errt[z] = calloc(1, 1 << 20);
        int rc = cli_run(root, NULL, args, out[z], 1 << 20, errt[z], 1 << 20);
        ck_assert_msg(rc == 0, "exit %d: %s", rc, errt[z]);
        ck_assert_msg((j[z] = cJSON_Parse(out[z])) != NULL, "not JSON: %s", out[z]);
    }
    ck_assert_msg(cJSON_IsTrue(cJSON_GetObjectItem(j[0], "zero1")), "the plan's zero1_dp was ignored");
    char *la = cJSON_PrintUnformatted(cJSON_GetObjectItem(j[0], "losses"));
    char *lb = cJSON_PrintUnformatted(cJSON_GetObjectItem(j[1], "losses"));
    ck_assert_str_eq(la, lb);
    ck_assert(json_num(j[0], "optimizer_bytes_per_replica") ==
              json_num(j[1], "optimizer_bytes_per_replica"));
    free(la);
    free(lb);
    for (int z = 0; z < 2; z++) {
        cJSON_Delete(j[z]);
        free(out[z]);
        free(errt[z]);
    }
    unlink(plan_path);
}
END_TEST

static void expect_usage_error(const char *extra, const char *needle)
{
    char *out, *errt;
    int rc = run_cli(extra, &out, &errt);
    ck_assert_msg(rc == 2, "'%s': exit %d", extra, rc);
    cli_assert_one_line(errt, needle);
    ck_assert_str_eq(out, "");
    free(out);
    free(errt);
}

START_TEST(bad_flags_are_one_line_usage_errors)
{
    expect_usage_error("--steps 2 --replicas 2 --outer adam", "--outer");
    expect_usage_error("--steps 2 --inner-steps 3", "--replicas");
    expect_usage_error("--steps 2 --replicas 2 --allreduce fp16", "--allreduce");
    expect_usage_error("--steps 2 --replicas 0", "--replicas");
    expect_usage_error("--steps 2 --replicas 2 --outer-momentum 1.5", "--outer-momentum");
    expect_usage_error("--steps 2 --replicas 2 --outer-lr -1", "--outer-lr");
    expect_usage_error("--steps 2 --replicas 2 --inner-steps x", "--inner-steps");
    expect_usage_error("--steps 2 --zero1", "--replicas");
    expect_usage_error("--steps 2 --replicas 2 --outer diloco --zero1", "--zero1");
    expect_usage_error("--steps 2 --replicas 2 --outer sync --allreduce int8 --zero1", "--zero1");
}
END_TEST

int main(void)
{
    Suite *su = suite_create("outer_cli");
    TCase *tc = tcase_create("cli");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, replicas_json_has_bytes_sent);
    tcase_add_test(tc, bad_flags_are_one_line_usage_errors);
    tcase_add_test(tc, zero1_same_losses_half_the_state);
    tcase_add_test(tc, plan_zero1_dp_turns_zero1_on);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
