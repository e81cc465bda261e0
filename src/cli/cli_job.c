/*
 * cli_job.c: the shared model and hardware flags (cli_job.h).
 */
#include "src/cli/cli_job.h"

#include <stdint.h>
#include <string.h>

#include "src/cli/cli.h"
#include "src/size.h"

void cli_job_init(cli_job *j, const char *model_arg, const char *gpu_arg)
{
    memset(j, 0, sizeof *j);
    j->model_arg = model_arg;
    j->gpu_arg = gpu_arg;
}

int cli_job_option(int c, const char *arg, cli_job *j, zb_err *err)
{
    long v;
    switch (c) {
    case CLI_OPT_MODEL:
        j->model_arg = arg;
        j->model_seen = 1;
        return 1;
    case CLI_OPT_SEQ_LEN:
        if (cli_parse_int("--seq-len", arg, 1, 1 << 20, &v, err) < 0)
            return -1;
        j->seq_len = v;
        return 1;
    case CLI_OPT_MICRO_BATCH:
        if (cli_parse_int("--micro-batch", arg, 1, 65536, &v, err) < 0)
            return -1;
        j->micro_batch = v;
        return 1;
    case CLI_OPT_GPU:
        j->gpu_arg = arg;
        j->gpu_seen = 1;
        return 1;
    case CLI_OPT_MEM: {
        uint64_t bytes;
        if (zb_size_parse(arg, &bytes, err) < 0)
            return zb_wrap(err, "--mem: ");
        j->mem_bytes = (double)bytes;
        j->mem_seen = 1;
        return 1;
    }
    default:
        return 0;
    }
}

int cli_job_finish(cli_job *j, zb_err *err)
{
    if (model_load(j->model_arg, &j->model, err) < 0)
        return zb_wrap(err, "--model: ");
    if (j->seq_len > 0)
        j->model.seq_len = (int)j->seq_len;
    if (j->micro_batch > 0)
        j->model.micro_batch = (int)j->micro_batch;
    if ((j->seq_len > 0 || j->micro_batch > 0) && model_check(&j->model, err) < 0)
        return zb_wrap(err, "%s: ", j->seq_len > 0 ? "--seq-len" : "--micro-batch");
    if (j->gpu_arg && gpu_load(j->gpu_arg, &j->gpu, err) < 0)
        return zb_wrap(err, "--gpu: ");
    return 0;
}
