/*
 * test_gpu_cli.c: `zbsched run --device cuda` and `zbsched profile --device
 * cuda` where they can be tested without a GPU: the error paths.
 *
 * The same file is built into both kinds of build.  meson passes
 * ZB_TEST_CUDA_BUILD=1 when the CUDA module zbsched_cuda.so is built
 * beside zbsched; then the tests expect the "no CUDA device" line (the
 * child runs with CUDA_VISIBLE_DEVICES set empty, so even on a GPU machine
 * it sees no GPU), and otherwise the "no CUDA module" line.  Both must be
 * exactly one line on stderr with exit status 1, leave no output file
 * behind, and return quickly: a rank of a launched run must fail before it
 * would wait for its peers in the NCCL bootstrap.  In one process,
 * --device cuda is the one executor on the CUDA backend and takes the
 * CPU's flags (trace, checkpoints, resume, eval, replicas): they reach the
 * GPU check and write nothing; only --threads is refused (exit 2).  Across
 * ranks (the NCCL executor) those flags are refused with one usage line
 * (exit 2) in every build, and `--device cpu` still trains as before.
 *
 * The module loader itself (runtime/cuda_module.h) is tested in every
 * build through a stand-in module (fake_cuda_module.c, path in
 * $ZB_FAKE_CUDA_MODULE) named by ZBSCHED_CUDA_MODULE: no GPU, a module
 * from another build, a file that is no module, a missing file, and
 * `launch` asking for more GPUs than the node has.
 */
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "tests/common/cli_run.h"

#ifdef ZB_TEST_CUDA_BUILD
#define CUDA_BUILT 1
#else
#define CUDA_BUILT 0
#endif

/* the line a --device cuda request must give on this build, without a GPU */
#define NO_GPU_LINE (CUDA_BUILT ? "no CUDA device" : "no CUDA module")

static char dir[64];
static char sched_path[128];
static char out_text[1 << 15], err_text[1 << 13];

/* Runs `ENV zbsched ARGS` from the repository root with no visible GPU
 * and no launcher rank variables (env: extra VAR=value words or "");
 * stdout goes to out_text, stderr to err_text.  Returns the exit status
 * (124 when the 60 s guard killed it, -1 when it was killed). */
static int zb_env(const char *env, const char *fmt, ...)
{
    char args[1024], prefix[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    const char *root = getenv("ZB_SOURCE_ROOT");
    ck_assert_ptr_nonnull(root);
    snprintf(prefix, sizeof prefix,
             "env -u ZB_RANK -u ZB_WORLD_SIZE -u ZB_LOCAL_RANK CUDA_VISIBLE_DEVICES= %s timeout 60",
             env);
    return cli_run(root, prefix, args, out_text, sizeof out_text, err_text, sizeof err_text);
}

#define zb(...) zb_env("", __VA_ARGS__)

/* Asserts exit status want_rc, exactly one stderr line containing want
 * and nothing on stdout. */
static void assert_one_line(int rc, int want_rc, const char *want)
{
    ck_assert_msg(rc == want_rc, "exit %d (wanted %d), stderr: %s", rc, want_rc, err_text);
    cli_assert_one_line(err_text, want);
    ck_assert_msg(out_text[0] == '\0', "stdout not empty: %s", out_text);
}

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/zb_test_gpucli_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(sched_path, sizeof sched_path, "%s/1f1b.json", dir);
    ck_assert_int_eq(zb("gen 1f1b -p 2 -m 4 -o %s", sched_path), 0);
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

START_TEST(run_cuda_without_gpu_is_one_line)
{
    assert_one_line(zb("run %s --device cuda --steps 2", sched_path), 1, NO_GPU_LINE);
    assert_one_line(zb("run %s --device cuda --gpu 1 --steps 2 --json -q", sched_path), 1,
                    NO_GPU_LINE);
    /* the same with a model file and the other flags the GPU path takes */
    assert_one_line(zb("run %s --device cuda --steps 3 --seed 7 --batch-size 2 --lr 3e-4 "
                       "--sync-optimizer --model shakespeare-char", sched_path), 1, NO_GPU_LINE);
}
END_TEST

START_TEST(launched_rank_fails_before_the_bootstrap)
{
    /* rank 1 of 2 would wait up to minutes for rank 0's NCCL id; without a
     * GPU it must fail at once with the one line */
    assert_one_line(zb_env("ZB_RANK=1 ZB_WORLD_SIZE=2 ZB_LOCAL_RANK=1",
                           "run %s --device cuda --steps 2", sched_path), 1, NO_GPU_LINE);
    if (CUDA_BUILT) {
        assert_one_line(zb_env("ZB_RANK=0 ZB_WORLD_SIZE=2", "run %s --device cuda --gpu 1 --steps 2",
                               sched_path), 2, "--gpu is set by the launcher");
        assert_one_line(zb_env("ZB_RANK=x ZB_WORLD_SIZE=2", "run %s --device cuda --steps 2",
                               sched_path), 1, "ZB_RANK");
        assert_one_line(zb_env("ZB_RANK=3 ZB_WORLD_SIZE=2", "run %s --device cuda --steps 2",
                               sched_path), 1, "ZB_RANK");
        /* schedule checks come before the GPU check: they need no GPU */
        assert_one_line(zb_env("ZB_RANK=0 ZB_WORLD_SIZE=3", "run %s --device cuda --steps 2",
                               sched_path), 1, "the schedule has 2 devices but the run has 3 ranks");
        char zbv[160];
        snprintf(zbv, sizeof zbv, "%s/zbv.json", dir);
        ck_assert_int_eq(zb("gen zb-v -p 2 -m 4 -o %s", zbv), 0);
        /* V-shape across ranks goes through the one executor: it gets as
         * far as the GPU check */
        assert_one_line(zb_env("ZB_RANK=1 ZB_WORLD_SIZE=2", "run %s --device cuda --steps 2", zbv),
                        1, NO_GPU_LINE);
    }
}
END_TEST

START_TEST(cpu_only_flags_are_refused_with_cuda)
{
    /* %s: the temporary directory, where the outputs would go */
    /* [2]: 1 when GPU ranks refuse the flag (else they take it) */
    static const char *flags[][3] = {
        { "--trace %s/T.json", "--trace", "1" },
        { "--checkpoint %s/CK", "--checkpoint", "0" },
        { "--checkpoint %s/CK --resume", "--checkpoint", "0" },
        { "--stop-at 1", "--stop-at", "0" },
        { "--eval-every 1", "--eval-every", "1" },
        { "--eval-windows 4", "--eval-windows", "1" },
        { "--replicas 2", "--replicas", "1" },
        { "--sync-optimizer", "--sync-optimizer", "1" },
    };
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        char extra[256];
        snprintf(extra, sizeof extra, flags[i][0], dir);
        /* one process: the executor takes them; the run stops at the GPU */
        int rc = zb("run %s --device cuda --steps 2 %s", sched_path, extra);
        assert_one_line(rc, 1, NO_GPU_LINE);
        /* GPU ranks (`zbsched launch`): the same executor, one device per
         * rank; what it cannot do there yet is refused with the reason */
        rc = zb_env("ZB_RANK=0 ZB_WORLD_SIZE=2", "run %s --device cuda --steps 2 %s", sched_path,
                    extra);
        if (flags[i][2][0] == '1') {
            assert_one_line(rc, 2, flags[i][1]);
            ck_assert_msg(strstr(err_text, "not supported with --device cuda across ranks"), "%s",
                          err_text);
        } else {
            assert_one_line(rc, 1, NO_GPU_LINE);
        }
    }
    assert_one_line(zb("run %s --device cuda --steps 2 --threads 2", sched_path), 2, "--threads");
    ck_assert_msg(strstr(err_text, "not supported with --device cuda"), "%s", err_text);
    /* nothing was written where the refused flags pointed */
    char path[160];
    snprintf(path, sizeof path, "%s/T.json", dir);
    cli_assert_no_file(path);
    snprintf(path, sizeof path, "%s/CK", dir);
    cli_assert_no_file(path);
    /* device and gpu flags themselves, on every build */
    assert_one_line(zb("run %s --device tpu --steps 2", sched_path), 2, "--device");
    assert_one_line(zb("run %s --gpu 0 --steps 2", sched_path), 2, "--gpu N needs --device cuda");
    assert_one_line(zb("run %s --device cuda --gpu -1 --steps 2", sched_path), 2, "--gpu");
    assert_one_line(zb("run %s --device", sched_path), 2, "--device");
}
END_TEST

START_TEST(profile_cuda_without_gpu_is_one_line)
{
    char prof[160];
    snprintf(prof, sizeof prof, "%s/p.json", dir);
    assert_one_line(zb("profile --device cuda -q -o %s", prof), 1, NO_GPU_LINE);
    assert_one_line(zb("profile --device cuda --gpu 3 --model shakespeare-char -o %s", prof), 1,
                    NO_GPU_LINE);
    cli_assert_no_file(prof);
    assert_one_line(zb("profile --gpu 0 -o %s", prof), 2, "--gpu N needs --device cuda");
    assert_one_line(zb("profile --device gpu -o %s", prof), 2, "--device");
    ck_assert_int_eq(zb("profile --help"), 0);
    ck_assert_ptr_nonnull(strstr(out_text, "--device cpu|cuda"));
}
END_TEST

START_TEST(device_cpu_still_trains)
{
    int rc = zb("run %s --device cpu --steps 1 --eval-windows 2 --json -q", sched_path);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
    cJSON *o = cJSON_Parse(out_text);
    ck_assert_ptr_nonnull(o);
    cJSON *l = cJSON_GetObjectItem(o, "losses");
    ck_assert_int_eq(cJSON_GetArraySize(l), 1);
    ck_assert(cJSON_GetArrayItem(l, 0)->valuedouble > 1.0);
    ck_assert(cJSON_IsNumber(cJSON_GetObjectItem(o, "val_loss")));
    cJSON_Delete(o);
    ck_assert_int_eq(zb("run --help"), 0);
    ck_assert_ptr_nonnull(strstr(out_text, "--device cpu|cuda"));
}
END_TEST

/* `ENV ZBSCHED_CUDA_MODULE=<the stand-in> FAKE_CUDA_MODE=mode zbsched ARGS` */
static int zb_fake(const char *mode, const char *fmt, const char *arg)
{
    const char *fake = getenv("ZB_FAKE_CUDA_MODULE");
    ck_assert_ptr_nonnull(fake);
    char env[1024], args[512];
    snprintf(env, sizeof env, "ZBSCHED_CUDA_MODULE=%s FAKE_CUDA_MODE=%s", fake, mode);
    snprintf(args, sizeof args, fmt, arg);
    return zb_env(env, "%s", args);
}

START_TEST(module_loader_errors_are_one_line)
{
    char prof[160];
    snprintf(prof, sizeof prof, "%s/p.json", dir);
    /* a valid module that sees no GPU: run, profile, launch */
    assert_one_line(zb_fake("nogpu", "run %s --device cuda --steps 2", sched_path), 1,
                    "no CUDA device");
    assert_one_line(zb_fake("nogpu", "profile --device cuda -o %s", prof), 1, "no CUDA device");
    assert_one_line(zb_fake("nogpu", "launch --gpus 2 run %s --device cuda --steps 2", sched_path),
                    1, "no CUDA device");
    /* one GPU, two asked for: the launcher says so before starting ranks */
    assert_one_line(zb_fake("onegpu", "launch --gpus 2 run %s --device=cuda --steps 2",
                            sched_path), 1, "this node has 1 CUDA device");
    /* a module of another build, a module without a table */
    assert_one_line(zb_fake("badversion", "run %s --device cuda --steps 2", sched_path), 1,
                    "from another zbsched build");
    assert_one_line(zb_fake("noentry", "profile --device cuda -o %s", prof), 1,
                    "is not a zbsched CUDA module");
    cli_assert_no_file(prof);
    /* a file that is not a shared object; a path that does not exist */
    char env[512];
    snprintf(env, sizeof env, "ZBSCHED_CUDA_MODULE=%s", sched_path);
    assert_one_line(zb_env(env, "run %s --device cuda --steps 2", sched_path), 1,
                    "cannot load the CUDA module");
    snprintf(env, sizeof env, "ZBSCHED_CUDA_MODULE=%s/none.so", dir);
    assert_one_line(zb_env(env, "run %s --device cuda --steps 2", sched_path), 1,
                    "no such file");
    /* commands that need no GPU never load it, even a broken one */
    ck_assert_int_eq(zb_fake("noentry", "simulate %s", sched_path), 0);
    ck_assert_int_eq(zb_fake("noentry", "launch --gpus 2 simulate %s", sched_path), 0);
}
END_TEST

/* The losses array and val_loss of a --json run's output (out_text). */
static void json_losses(double *loss, int n, double *val)
{
    cJSON *o = cJSON_Parse(out_text);
    ck_assert_msg(o != NULL, "not JSON: %s", out_text);
    cJSON *l = cJSON_GetObjectItem(o, "losses");
    ck_assert_int_eq(cJSON_GetArraySize(l), n);
    for (int i = 0; i < n; i++)
        loss[i] = cJSON_GetArrayItem(l, i)->valuedouble;
    *val = cJSON_GetObjectItem(o, "val_loss")->valuedouble;
    cJSON_Delete(o);
}

/* `run --device cuda` in one process is the one executor on the module's
 * backend.  The stand-in module's backend is the CPU backend behind host
 * mirrors and fences (tests/common/mirror_backend.h), so every flag the
 * CPU has must work through it and give the CPU's bits: evaluation, a
 * checkpoint stopped on "cuda" and resumed on the CPU, a trace, replicas. */
START_TEST(cuda_takes_the_cpu_flags_through_the_backend)
{
    const char *fake = getenv("ZB_FAKE_CUDA_MODULE");
    ck_assert_ptr_nonnull(fake);
    char env[1024];
    snprintf(env, sizeof env, "ZBSCHED_CUDA_MODULE=%s FAKE_CUDA_MODE=onegpu", fake);
    double cpu[4], gpu[4], cval, gval;
    int rc = zb("run %s --device cpu --model tiny --steps 4 --eval-windows 4 --json -q", sched_path);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
    json_losses(cpu, 4, &cval);
    rc = zb_env(env, "run %s --device cuda --model tiny --steps 4 --eval-windows 4 --eval-every 2 "
                "--trace %s/T.json --json -q", sched_path, dir);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
    ck_assert_ptr_nonnull(strstr(out_text, "\"device\":\"mirrored\""));
    ck_assert_ptr_nonnull(strstr(out_text, "\"gpu_static_bytes\""));
    json_losses(gpu, 4, &gval);
    for (int i = 0; i < 4; i++)
        ck_assert_msg(memcmp(&cpu[i], &gpu[i], sizeof cpu[i]) == 0, "step %d: %.9g vs %.9g", i,
                      cpu[i], gpu[i]);
    ck_assert(memcmp(&cval, &gval, sizeof cval) == 0);
    char path[160];
    snprintf(path, sizeof path, "%s/T.json", dir);
    ck_assert_msg(access(path, R_OK) == 0, "no trace at %s", path);
    /* stopped at step 2 on "cuda", resumed on the CPU: the same steps 3, 4 */
    rc = zb_env(env, "run %s --device cuda --model tiny --steps 4 --stop-at 2 --eval-windows 4 "
                "--checkpoint %s/CK -q", sched_path, dir);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
    rc = zb("run %s --device cpu --model tiny --steps 4 --eval-windows 4 --checkpoint %s/CK "
            "--resume --json -q", sched_path, dir);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
    double res[2], rval;
    json_losses(res, 2, &rval);
    ck_assert(memcmp(&res[0], &cpu[2], sizeof res[0]) == 0);
    ck_assert(memcmp(&res[1], &cpu[3], sizeof res[1]) == 0);
    ck_assert(memcmp(&rval, &cval, sizeof rval) == 0);
    /* replicas under an outer optimizer, each its own backend: the outer
     * step (DiLoCo with H = 2 inside 3 steps, then the final one) and the
     * synchronous gradient average work on the host mirrors */
    static const char *outer[] = { "--outer diloco --inner-steps 2", "--outer sync" };
    for (int k = 0; k < 2; k++) {
        double rl[3], rg[3], rvl, rvg;
        rc = zb("run %s --device cpu --model tiny --steps 3 --replicas 2 %s --eval-windows 4 "
                "--json -q", sched_path, outer[k]);
        ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
        json_losses(rl, 3, &rvl);
        rc = zb_env(env, "run %s --device cuda --model tiny --steps 3 --replicas 2 %s "
                    "--eval-windows 4 --json -q", sched_path, outer[k]);
        ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
        json_losses(rg, 3, &rvg);
        for (int i = 0; i < 3; i++)
            ck_assert_msg(memcmp(&rl[i], &rg[i], sizeof rl[i]) == 0, "%s step %d: %.9g vs %.9g",
                          outer[k], i, rl[i], rg[i]);
        ck_assert_msg(memcmp(&rvl, &rvg, sizeof rvl) == 0, "%s: val %.9g vs %.9g", outer[k], rvl,
                      rvg);
    }
    /* a GPU index the module does not have */
    assert_one_line(zb_env(env, "run %s --device cuda --gpu 3 --steps 2", sched_path), 1,
                    "CUDA device 3 does not exist");
}
END_TEST

/* GPU ranks take the CPU's checkpoint flags and V-shape and interleaved
 * schedules, and get as far as the NCCL communicator (the stand-in fails
 * there: no NCCL), with nothing written yet. */
START_TEST(gpu_ranks_take_the_flags_up_to_the_communicator)
{
    const char *fake = getenv("ZB_FAKE_CUDA_MODULE");
    ck_assert_ptr_nonnull(fake);
    char env[1024], kinds[2][160];
    snprintf(env, sizeof env, "ZBSCHED_CUDA_MODULE=%s FAKE_CUDA_MODE=mpi ZB_RANK=1 "
             "ZB_WORLD_SIZE=2 ZB_LOCAL_RANK=1", fake);
    snprintf(kinds[0], sizeof kinds[0], "%s/zbv.json", dir);
    ck_assert_int_eq(zb("gen zb-v -p 2 -m 4 -o %s", kinds[0]), 0);
    snprintf(kinds[1], sizeof kinds[1], "%s/inter.json", dir);
    ck_assert_int_eq(zb("gen interleaved -p 2 -m 4 --chunks 2 -o %s", kinds[1]), 0);
    for (int k = 0; k < 2; k++) {
        assert_one_line(zb_env(env, "run %s --device cuda --model tiny --steps 3 --stop-at 2 "
                               "--checkpoint %s/CK", kinds[k], dir),
                        1, "the TCP bootstrap was reached");
        ck_assert_msg(strstr(err_text, "rank 1 of 2"), "%s", err_text);
        assert_one_line(zb_env(env, "run %s --device cuda --model tiny --steps 3 "
                               "--checkpoint %s/CK --resume", kinds[k], dir),
                        1, "the TCP bootstrap was reached");
    }
    char path[160];
    snprintf(path, sizeof path, "%s/CK", dir);
    cli_assert_no_file(path);
    /* a module without the GPU ranks' members: one line, no crash */
    char env1[1024];
    snprintf(env1, sizeof env1, "ZBSCHED_CUDA_MODULE=%s FAKE_CUDA_MODE=onegpu ZB_RANK=0 "
             "ZB_WORLD_SIZE=2 ZB_LOCAL_RANK=0", fake);
    assert_one_line(zb_env(env1, "run %s --device cuda --model tiny --steps 3", kinds[0]), 1,
                    "no GPU ranks");
    /* a refused flag stops before the bootstrap */
    assert_one_line(zb_env(env, "run %s --device cuda --model tiny --steps 3 --eval-every 1",
                           kinds[0]), 2, "pipeline is not implemented");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("gpu_cli");
    TCase *tc = tcase_create("errors");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, run_cuda_without_gpu_is_one_line);
    tcase_add_test(tc, cuda_takes_the_cpu_flags_through_the_backend);
    tcase_add_test(tc, launched_rank_fails_before_the_bootstrap);
    tcase_add_test(tc, gpu_ranks_take_the_flags_up_to_the_communicator);
    tcase_add_test(tc, cpu_only_flags_are_refused_with_cuda);
    tcase_add_test(tc, profile_cuda_without_gpu_is_one_line);
    tcase_add_test(tc, device_cpu_still_trains);
    tcase_add_test(tc, module_loader_errors_are_one_line);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
