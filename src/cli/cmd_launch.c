/*
 * cmd_launch.c: `zbsched launch --gpus N [options] COMMAND [ARGS...]`,
 * start one process per local GPU for a multi-GPU run, torchrun style.
 *
 * Each of the N children is this same program (/proc/self/exe) running
 * `zbsched COMMAND ARGS...` with the rank variables the GPU transport reads
 * (kernels/cuda/gpu_transport.h):
 *
 *   ZB_RANK        node_rank·N + local rank     global rank
 *   ZB_WORLD_SIZE  nodes·N                      number of ranks
 *   ZB_LOCAL_RANK  0..N-1                       the GPU this rank drives
 *   ZB_MASTER_ADDR / ZB_MASTER_PORT             where rank 0 serves the NCCL id
 *
 * A launched `--device cuda` command first has the launcher load the CUDA
 * module (runtime/cuda_module.h) and count the node's GPUs, so that a
 * missing module or too few GPUs is one line, not one per rank.
 *
 * The launcher waits for all of them.  When one fails (non-zero exit or a
 * signal) it terminates the others (SIGTERM; a rank blocked in an NCCL
 * bootstrap would otherwise wait forever) and exits with status 1 after
 * one line naming the first failed rank; when all succeed it exits 0.
 * Multi-node: run one launcher per node with --nodes and --node-rank, or
 * skip it and let mpirun / srun set the equivalent variables (docs/gpu.md).
 * `run` or `profile` without `--device cuda` is refused (one line, exit 1):
 * its ranks could only repeat the same CPU training.
 */
#include "src/cli/cli.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/cuda_module.h"

#define MAX_LOCAL_RANKS 64

static void usage(FILE *out)
{
    fprintf(out,
        "usage: zbsched launch --gpus N [options] COMMAND [ARGS...]\n"
        "\n"
        "Starts N copies of `zbsched COMMAND ARGS...`, one per local GPU, with\n"
        "ZB_RANK, ZB_WORLD_SIZE, ZB_LOCAL_RANK, ZB_MASTER_ADDR and ZB_MASTER_PORT set,\n"
        "waits for all, and fails (stopping the others) as soon as one fails.\n"
        "\n"
        "  -g, --gpus N           processes (GPUs) on this node, 1..%d\n"
        "      --nodes K          nodes in the run (default 1)\n"
        "      --node-rank R      this node's index, 0..K-1 (default 0)\n"
        "      --master-addr A    host of rank 0 (default $ZB_MASTER_ADDR or 127.0.0.1)\n"
        "      --master-port P    TCP port rank 0 serves the NCCL id on (default 29533)\n"
        "  -h, --help             this text\n"
        "\n"
        "example: zbsched launch --gpus 4 run sched.json --steps 100\n",
        MAX_LOCAL_RANKS);
}

static const char *const launchable[] = { "run", "profile", "gen", "simulate", "search",
                                          "export", "import", "render", NULL };

/* 1 when the launched command's arguments ask for the GPU (--device cuda
 * or --device=cuda). */
static int wants_cuda(int argc, char **argv)
{
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--device=cuda") == 0)
            return 1;
        if (strcmp(argv[i], "--device") == 0 && i + 1 < argc && strcmp(argv[i + 1], "cuda") == 0)
            return 1;
    }
    return 0;
}

static int is_launchable(const char *cmd)
{
    for (int i = 0; launchable[i]; i++)
        if (strcmp(cmd, launchable[i]) == 0)
            return 1;
    return 0;
}

/* Starts the node's gpus ranks, each `self cargv...` with the ZB_RANK,
 * ZB_WORLD_SIZE, ZB_LOCAL_RANK, ZB_MASTER_ADDR and ZB_MASTER_PORT of
 * local rank r on node node_rank of nodes, and waits for them all.  The
 * first rank that fails (or a fork that fails) stops the others with
 * SIGTERM.  Returns 0 when every rank exited 0, else 1 after one line
 * naming the first failed rank and how it ended. */
static int start_ranks(const char *self, char **cargv, long gpus, long nodes, long node_rank,
                       const char *addr, long port)
{
    pid_t pids[MAX_LOCAL_RANKS];
    int started = 0, failed_rank = -1, failed_status = 0;
    fflush(stdout);
    fflush(stderr);
    for (int r = 0; r < gpus; r++) {
        pid_t pid = fork();
        if (pid < 0) {
            failed_rank = r;
            failed_status = -1;
            break;
        }
        if (pid == 0) {
            char buf[32];
            snprintf(buf, sizeof buf, "%ld", node_rank * gpus + r);
            setenv("ZB_RANK", buf, 1);
            snprintf(buf, sizeof buf, "%ld", nodes * gpus);
            setenv("ZB_WORLD_SIZE", buf, 1);
            snprintf(buf, sizeof buf, "%d", r);
            setenv("ZB_LOCAL_RANK", buf, 1);
            setenv("ZB_MASTER_ADDR", addr, 1);
            snprintf(buf, sizeof buf, "%ld", port);
            setenv("ZB_MASTER_PORT", buf, 1);
            execv(self, cargv);
            fprintf(stderr, "zbsched: launch: rank %d: cannot run %s: %s\n", r, self,
                    strerror(errno));
            _exit(127);
        }
        pids[started++] = pid;
    }
    int running = started;
    if (failed_rank >= 0) /* fork failed: stop what started */
        for (int i = 0; i < started; i++)
            kill(pids[i], SIGTERM);
    while (running > 0) {
        int status;
        pid_t pid = waitpid(-1, &status, 0);
        if (pid < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        int r = -1;
        for (int i = 0; i < started; i++)
            if (pids[i] == pid) {
                r = i;
                pids[i] = 0;
            }
        if (r < 0)
            continue;
        running--;
        int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (!ok && failed_rank < 0) {
            failed_rank = r;
            failed_status = status;
            for (int i = 0; i < started; i++)
                if (pids[i] > 0)
                    kill(pids[i], SIGTERM);
        }
    }
    if (failed_rank >= 0) {
        if (failed_status == -1)
            return cli_error("launch: cannot start rank %d: %s", failed_rank, strerror(errno));
        if (WIFSIGNALED(failed_status))
            return cli_error("launch: rank %ld (local %d) was killed by signal %d",
                             node_rank * gpus + failed_rank, failed_rank,
                             WTERMSIG(failed_status));
        return cli_error("launch: rank %ld (local %d) failed with exit status %d",
                         node_rank * gpus + failed_rank, failed_rank, WEXITSTATUS(failed_status));
    }
    return 0;
}

int cmd_launch(int argc, char **argv)
{
    enum { O_NODES = 256, O_NODE_RANK, O_ADDR, O_PORT };
    static const struct option opts[] = {
        { "gpus", required_argument, NULL, 'g' },
        { "nodes", required_argument, NULL, O_NODES },
        { "node-rank", required_argument, NULL, O_NODE_RANK },
        { "master-addr", required_argument, NULL, O_ADDR },
        { "master-port", required_argument, NULL, O_PORT },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    long gpus = 0, nodes = 1, node_rank = 0, port = 29533;
    const char *addr = getenv("ZB_MASTER_ADDR");
    if (!addr || !*addr)
        addr = "127.0.0.1";
    zb_err err = { { 0 } };
    int c;
    optind = 1;
    opterr = 0;
    /* '+': stop at COMMAND, its flags are its own */
    while ((c = getopt_long(argc, argv, "+:g:h", opts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case 'g': bad = cli_parse_int("--gpus", optarg, 1, MAX_LOCAL_RANKS, &gpus, &err); break;
        case O_NODES: bad = cli_parse_int("--nodes", optarg, 1, 100000, &nodes, &err); break;
        case O_NODE_RANK: bad = cli_parse_int("--node-rank", optarg, 0, 99999, &node_rank, &err); break;
        case O_ADDR: addr = optarg; break;
        case O_PORT: bad = cli_parse_int("--master-port", optarg, 1, 65535, &port, &err); break;
        case 'h': usage(stdout); return 0;
        case ':': return cli_usage(argv[0], "%s needs a value (try --help)", argv[optind - 1]);
        default: return cli_usage(argv[0], "unknown option '%s' (try --help)", argv[optind - 1]);
        }
        if (bad)
            return cli_usage(argv[0], "%s", err.msg);
    }
    if (gpus == 0)
        return cli_usage(argv[0], "--gpus N is required (try --help)");
    if (node_rank >= nodes)
        return cli_usage(argv[0], "--node-rank %ld must be below --nodes %ld", node_rank, nodes);
    if (optind >= argc)
        return cli_usage(argv[0], "missing COMMAND to launch, e.g. 'run FILE --steps N'");
    const char *cmd = argv[optind];
    if (!is_launchable(cmd))
        return cli_usage(argv[0], "'%s' is not a zbsched command that can be launched", cmd);
    /* Training or profiling without a GPU would run the same CPU job N
     * times over, each rank writing the same outputs. */
    int cuda = wants_cuda(argc - optind, argv + optind);
    if (!cuda && (strcmp(cmd, "run") == 0 || strcmp(cmd, "profile") == 0))
        return cli_error("launch: '%s' without --device cuda would run the same CPU job %ld "
                         "times (launch starts one process per GPU); run 'zbsched %s' directly "
                         "(or under mpirun for CPU ranks)", cmd, gpus, cmd);

    /* A GPU run needs the CUDA module and N local GPUs: say so once here
     * rather than N times from the ranks. */
    if (cuda) {
        const zb_cuda_api *cu;
        if (cuda_module_load_with_gpu(&cu, &err) != 0)
            return cli_error("launch: %s", err.msg);
        int visible = cu->device_count();
        if (visible < gpus)
            return cli_error("launch: --gpus %ld but this node has %d CUDA device%s", gpus, visible,
                             visible == 1 ? "" : "s");
    }

    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0)
        return cli_error("launch: cannot find this program's path: %s", strerror(errno));
    self[len] = '\0';

    /* child argv: "zbsched", COMMAND, ARGS..., NULL */
    int n_args = argc - optind;
    char **cargv = calloc((size_t)n_args + 2, sizeof *cargv);
    if (!cargv)
        return cli_error("launch: out of memory");
    cargv[0] = (char *)"zbsched";
    for (int i = 0; i < n_args; i++)
        cargv[i + 1] = argv[optind + i];

    int rc = start_ranks(self, cargv, gpus, nodes, node_rank, addr, port);
    free(cargv);
    return rc;
}
