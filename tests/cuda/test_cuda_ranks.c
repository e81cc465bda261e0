/*
 * test_cuda_ranks.c: two GPU ranks through the one executor, end to end:
 * `zbsched launch --gpus 2 run FILE --device cuda` of a V-shape schedule
 * (zb-v: two stages per device, so both links carry activations and
 * gradients of two stage boundaries, and the post-validation norms) and
 * of an interleaved one, each against `zbsched run FILE --device cpu`
 * (one process) on the same seed and data: the losses agree within bf16
 * tolerance.  Then a checkpoint in parts: the GPU ranks stop at step 2
 * and resume to step 3, and the CPU run resumes the same checkpoint.
 *
 * Needs two GPUs (NCCL refuses two ranks on one GPU) and NCCL in the
 * build: skips (77) otherwise, so it is compiled everywhere and runs only
 * on a machine with two GPUs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "kernels/cuda/gpu_transport.h"
#include "tests/cuda/cuda_check.h"

static char dir[64];
static char out[1 << 16];

/* Runs `$ZBSCHED args` (with env prefix) in the temporary directory,
 * stdout into out; returns the exit status. */
static int zb(const char *env, const char *args)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cd '%s' && %s timeout 300 '%s' %s 2>stderr.txt", dir, env,
             getenv("ZBSCHED"), args);
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    if (st != 0) {
        char show[256];
        snprintf(show, sizeof show, "cat '%s/stderr.txt'", dir);
        if (system(show) != 0)
            printf("(no stderr)\n");
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The "losses" array of a --json summary into l[n]; 0 or -1. */
static int losses(double *l, int n)
{
    const char *p = strstr(out, "\"losses\":[");
    if (!p)
        return -1;
    p += strlen("\"losses\":[");
    for (int i = 0; i < n; i++) {
        char *end;
        l[i] = strtod(p, &end);
        if (end == p)
            return -1;
        p = end + 1;
    }
    return 0;
}

static void compare(const char *what, const double *gpu, const double *cpu, int n)
{
    for (int i = 0; i < n; i++) {
        char name[128];
        snprintf(name, sizeof name, "%s step %d: %.5f vs CPU %.5f", what, i + 1, gpu[i], cpu[i]);
        cc_true(name, fabs(gpu[i] - cpu[i]) < 2e-2 * fabs(cpu[i]));
    }
}

int main(void)
{
    cc_require_device();
    if (zb_cuda_device_count() < 2) {
        printf("fewer than two CUDA devices: skipped\n");
        return 77;
    }
    if (!gpu_nccl_available()) {
        printf("built without NCCL: skipped\n");
        return 77;
    }
    snprintf(dir, sizeof dir, "/tmp/zb_test_cudaranks_XXXXXX");
    if (!mkdtemp(dir))
        return 1;
    /* a small text: 20 letters and spaces */
    char path[128];
    snprintf(path, sizeof path, "%s/text.txt", dir);
    FILE *f = fopen(path, "w");
    uint64_t st = 99;
    for (int i = 0; i < 60000; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        fputc(i % 9 == 8 ? ' ' : 'a' + (int)((st >> 33) % 20), f);
    }
    fclose(f);
    static const char *gens[][2] = { { "zb-v", "gen zb-v -p 2 -m 4 -o zbv.json" },
                                     { "interleaved",
                                       "gen interleaved -p 2 -m 4 --chunks 2 -o zbv.json" } };
    const char *common = "--model tiny --data text.txt --steps 3 --seed 5 --eval-windows 4 "
                         "--json -q";
    for (int k = 0; k < 2; k++) {
        double cpu[3], gpu[3];
        char args[512];
        cc_true(gens[k][0], zb("", gens[k][1]) == 0);
        snprintf(args, sizeof args, "run zbv.json --device cpu %s", common);
        cc_true("CPU run", zb("", args) == 0 && losses(cpu, 3) == 0);
        snprintf(args, sizeof args,
                 "launch --gpus 2 run zbv.json --device cuda --model tiny --data text.txt "
                 "--steps 3 --seed 5 --json -q");
        cc_true("two GPU ranks", zb("ZB_MASTER_PORT=29641", args) == 0 && losses(gpu, 3) == 0);
        compare(gens[k][0], gpu, cpu, 3);
        if (k == 0) {
            /* a checkpoint in parts: stop at 2, resume to 3 on the GPU ranks */
            cc_true("GPU ranks stop at 2",
                    zb("ZB_MASTER_PORT=29642", "launch --gpus 2 run zbv.json --device cuda "
                       "--model tiny --data text.txt --steps 3 --seed 5 --stop-at 2 "
                       "--checkpoint CK -q") == 0);
            double res[1];
            cc_true("GPU ranks resume",
                    zb("ZB_MASTER_PORT=29643", "launch --gpus 2 run zbv.json --device cuda "
                       "--model tiny --data text.txt --steps 3 --seed 5 --checkpoint CK --resume "
                       "--json -q") == 0 && losses(res, 1) == 0);
            compare("resumed", res, cpu + 2, 1);
        }
    }
    char rm[128];
    snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
    if (system(rm) != 0)
        printf("could not remove %s\n", dir);
    return cc_summary();
}
