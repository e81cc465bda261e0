/*
 * test_gpu_plan_paths.c: `zbsched run --device cuda` takes what the search
 * picks (issue 25): plans with per-stage recompute, vocabulary passes and
 * memory layers reach the CUDA path's executor instead of a refusal, and
 * train there with the CPU's bits.
 *
 * Without a GPU the "CUDA" backend is the stand-in module
 * (fake_cuda_module.c: the CPU backend behind host mirrors and fences,
 * tests/common/mirror_backend.h), so this tests the path (src/runs_on.c's
 * table as `run` consults it, the module's backend through the executor,
 * the vocabulary passes through the backend's vocab_* ops), not the GPU's
 * arithmetic: that is tests/cuda's op tests (cuda_recompute,
 * cuda_vocab_backend, cuda_memory_stage), which need a GPU.
 *
 * Plans (tiny models, 2 devices, 3 steps each):
 *   a search plan of tiny-mem with recompute on every stage (memory
 *   layers + full recompute), and a search plan of tiny restricted to
 *   vocabulary-parallel plans with recompute on (vocabulary passes +
 *   recompute).  For each: plan.runs_on names cuda, and the losses of
 *   --device cuda equal --device cpu's bit for bit.
 */
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "tests/common/cli_run.h"

static char dir[64];
static char out_text[1 << 16], err_text[1 << 13];

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/zb_gpu_plan_paths_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* `[ENV] zbsched ARGS` in the test's directory (env "" for none). */
static int zb(const char *env, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int zb(const char *env, const char *fmt, ...)
{
    char args[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    return cli_run(dir, env, args, out_text, sizeof out_text, err_text, sizeof err_text);
}

/* The n losses of a --json run (out_text). */
static void losses(double *loss, int n)
{
    cJSON *o = cJSON_Parse(out_text);
    ck_assert_msg(o != NULL, "not JSON: %.2000s", out_text);
    cJSON *l = cJSON_GetObjectItem(o, "losses");
    ck_assert_int_eq(cJSON_GetArraySize(l), n);
    for (int i = 0; i < n; i++)
        loss[i] = cJSON_GetArrayItem(l, i)->valuedouble;
    cJSON_Delete(o);
}

/* plan.runs_on of dir/name contains path. */
static int runs_on(const char *name, const char *path)
{
    char file[160], *text = NULL;
    snprintf(file, sizeof file, "%s/%s", dir, name);
    FILE *f = fopen(file, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    ck_assert_ptr_nonnull(text = malloc((size_t)len + 1));
    ck_assert_int_eq(fread(text, 1, (size_t)len, f), (size_t)len);
    text[len] = '\0';
    fclose(f);
    cJSON *j = cJSON_Parse(text);
    free(text);
    ck_assert_ptr_nonnull(j);
    const cJSON *ro = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "plan"), "runs_on"), *e;
    int found = 0;
    cJSON_ArrayForEach(e, ro)
        found |= cJSON_IsString(e) && !strcmp(e->valuestring, path);
    cJSON_Delete(j);
    return found;
}

/* Trains dir/name 3 steps on the CPU and through the stand-in CUDA module:
 * the same losses, bit for bit. */
static void same_on_both(const char *name)
{
    char env[512];
    snprintf(env, sizeof env, "env ZBSCHED_CUDA_MODULE=%s FAKE_CUDA_MODE=onegpu",
             getenv("ZB_FAKE_CUDA_MODULE"));
    double cpu[3], gpu[3];
    int rc = zb("", "run %s --device cpu --steps 3 --json -q", name);
    ck_assert_msg(rc == 0, "%s on the CPU: exit %d: %s", name, rc, err_text);
    losses(cpu, 3);
    rc = zb(env, "run %s --device cuda --steps 3 --json -q", name);
    ck_assert_msg(rc == 0, "%s through the CUDA path: exit %d: %s", name, rc, err_text);
    losses(gpu, 3);
    for (int i = 0; i < 3; i++)
        ck_assert_msg(memcmp(&cpu[i], &gpu[i], sizeof cpu[i]) == 0, "%s step %d: %.9g vs %.9g",
                      name, i, cpu[i], gpu[i]);
}

#define JOB "--gpu %s/tools/cpu-device.json --gpus 2 --stages 2 --mem 4G --recompute on -q"

START_TEST(memory_layers_and_recompute)
{
    ck_assert_int_eq(zb("", "search --model tiny-mem " JOB " -o m.json", getenv("ZB_SOURCE_ROOT")),
                     0);
    ck_assert(runs_on("m.json", "cuda"));
    same_on_both("m.json");
}
END_TEST

START_TEST(vocabulary_passes_and_recompute)
{
    ck_assert_int_eq(zb("", "search --model tiny --vocab parallel " JOB " -o v.json",
                        getenv("ZB_SOURCE_ROOT")), 0);
    ck_assert(runs_on("v.json", "cuda"));
    same_on_both("v.json");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("gpu_plan_paths");
    TCase *tc = tcase_create("paths");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, memory_layers_and_recompute);
    tcase_add_test(tc, vocabulary_passes_and_recompute);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
