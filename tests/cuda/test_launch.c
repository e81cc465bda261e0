/*
 * test_launch.c: the parts of the multi-GPU runtime that need no GPU: the
 * rank variables (gpu_rank_from_env) and `zbsched launch` (fork/exec of N ranks,
 * each rank's output on stdout, failure propagation, one-line errors on bad
 * flags).  Check suite; built with CUDA only (gpu_rank_from_env is in the
 * CUDA library), run without a GPU.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/gpu_transport.h"
#include "tests/common/cli_run.h"

static void clear_rank_env(void)
{
    const char *names[] = { "ZB_RANK", "ZB_WORLD_SIZE", "ZB_LOCAL_RANK", "OMPI_COMM_WORLD_RANK",
                            "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_RANK",
                            "PMI_SIZE", "MPI_LOCALRANKID", "SLURM_PROCID", "SLURM_NTASKS",
                            "SLURM_LOCALID", NULL };
    for (int i = 0; names[i]; i++)
        unsetenv(names[i]);
}

START_TEST(rank_env_absent_is_single_process)
{
    clear_rank_env();
    gpu_rank_info r;
    zb_err err = { { 0 } };
    ck_assert_int_eq(gpu_rank_from_env(&r, &err), 0);
    ck_assert_int_eq(r.rank, 0);
    ck_assert_int_eq(r.world, 1);
    ck_assert_int_eq(r.local_rank, 0);
}
END_TEST

START_TEST(rank_env_read)
{
    clear_rank_env();
    setenv("ZB_RANK", "5", 1);
    setenv("ZB_WORLD_SIZE", "8", 1);
    setenv("ZB_LOCAL_RANK", "1", 1);
    gpu_rank_info r;
    zb_err err = { { 0 } };
    ck_assert_int_eq(gpu_rank_from_env(&r, &err), 1);
    ck_assert_int_eq(r.rank, 5);
    ck_assert_int_eq(r.world, 8);
    ck_assert_int_eq(r.local_rank, 1);
    /* MPI's names work too, local rank defaulting to the rank */
    clear_rank_env();
    setenv("OMPI_COMM_WORLD_RANK", "2", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
    ck_assert_int_eq(gpu_rank_from_env(&r, &err), 1);
    ck_assert_int_eq(r.rank, 2);
    ck_assert_int_eq(r.local_rank, 2);
    clear_rank_env();
}
END_TEST

START_TEST(rank_env_malformed)
{
    gpu_rank_info r;
    zb_err err = { { 0 } };
    clear_rank_env();
    setenv("ZB_RANK", "abc", 1);
    setenv("ZB_WORLD_SIZE", "2", 1);
    ck_assert_int_eq(gpu_rank_from_env(&r, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "ZB_RANK"));
    setenv("ZB_RANK", "2", 1);
    ck_assert_int_eq(gpu_rank_from_env(&r, &err), -1); /* rank >= world */
    unsetenv("ZB_WORLD_SIZE");
    ck_assert_int_eq(gpu_rank_from_env(&r, &err), -1); /* only one of the pair */
    clear_rank_env();
}
END_TEST

/* Runs `$ZBSCHED args` with stderr captured; returns the exit status and
 * the number of stderr lines in *lines; copies the first of them (with its
 * newline, truncated to cap - 1 bytes) into first_line when not NULL. */
static int run_cli(const char *args, int *lines, char *first_line, size_t cap)
{
    static char err[1 << 16];
    int st = cli_run(NULL, NULL, args, NULL, 0, err, sizeof err);
    *lines = cli_lines(err);
    if (first_line) {
        const char *nl = strchr(err, '\n');
        snprintf(first_line, cap, "%.*s", nl ? (int)(nl - err + 1) : (int)strlen(err), err);
    }
    return st;
}

/* Non-overlapping occurrences of needle in text. */
static int count_of(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

/* Every rank runs: `launch --gpus N simulate --help` prints the help text
 * of `simulate --help` once per rank, so stdout holds N usage lines and N
 * times its bytes (a count, not the exact text: the ranks write
 * concurrently).  With 0 or 1 rank started, or one too many, it fails. */
START_TEST(launch_runs_all_ranks)
{
    static char one[1 << 14], all[1 << 16], err[1 << 14];
    const char *usage = "usage: zbsched simulate";
    ck_assert_int_eq(cli_run(NULL, NULL, "simulate --help", one, sizeof one, err, sizeof err), 0);
    ck_assert_int_eq(count_of(one, usage), 1);
    for (int gpus = 1; gpus <= 3; gpus++) {
        char args[128];
        snprintf(args, sizeof args, "launch --gpus %d simulate --help", gpus);
        ck_assert_int_eq(cli_run(NULL, NULL, args, all, sizeof all, err, sizeof err), 0);
        ck_assert_msg(err[0] == '\0', "%s: stderr: %s", args, err);
        ck_assert_msg(count_of(all, usage) == gpus, "%s: %d usage lines on stdout, want %d", args,
                      count_of(all, usage), gpus);
        ck_assert_uint_eq(strlen(all), gpus * strlen(one));
    }
}
END_TEST

START_TEST(launch_propagates_failure)
{
    int lines;
    char first[1024];
    int st = run_cli("launch --gpus 2 simulate /nonexistent/zb-launch.json", &lines, first,
                     sizeof first);
    ck_assert_int_eq(st, 1);
    /* each rank's own error, then the launcher's one line */
    ck_assert_int_ge(lines, 2);
}
END_TEST

START_TEST(launch_bad_flags)
{
    int lines;
    char first[1024];
    ck_assert_int_eq(run_cli("launch simulate x.json", &lines, first, sizeof first), 2);
    ck_assert_int_eq(lines, 1);
    ck_assert_ptr_nonnull(strstr(first, "--gpus"));
    ck_assert_int_eq(run_cli("launch --gpus 0 run", &lines, first, sizeof first), 2);
    ck_assert_int_eq(lines, 1);
    ck_assert_int_eq(run_cli("launch --gpus 2 frobnicate", &lines, first, sizeof first), 2);
    ck_assert_int_eq(lines, 1);
    ck_assert_int_eq(run_cli("launch --gpus 2", &lines, first, sizeof first), 2);
    ck_assert_int_eq(lines, 1);
    ck_assert_int_eq(run_cli("launch --gpus 2 --nodes 2 --node-rank 2 run", &lines, first,
                             sizeof first), 2);
    ck_assert_int_eq(lines, 1);
    ck_assert_int_eq(run_cli("launch --help", &lines, NULL, 0), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cuda_launch");
    TCase *tc = tcase_create("launch");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, rank_env_absent_is_single_process);
    tcase_add_test(tc, rank_env_read);
    tcase_add_test(tc, rank_env_malformed);
    tcase_add_test(tc, launch_runs_all_ranks);
    tcase_add_test(tc, launch_propagates_failure);
    tcase_add_test(tc, launch_bad_flags);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
