/*
 * cli_flags.c: the flags several commands share (cli_flags.h).
 */
#include "src/cli/cli_flags.h"

#include <stdint.h>
#include <string.h>

#include "src/cli/cli.h"
#include "src/input.h"
#include "src/size.h"

int cli_flag_device(const char *text, int *cuda, zb_err *err)
{
    if (strcmp(text, "cpu") == 0)
        *cuda = 0;
    else if (strcmp(text, "cuda") == 0)
        *cuda = 1;
    else
        return zb_fail(err, "--device: '%s' is not cpu or cuda", text);
    return 0;
}

int cli_flag_gpu(const char *text, long *gpu, zb_err *err)
{
    return cli_parse_int("--gpu", text, 0, 1023, gpu, err);
}

int cli_flag_seed(const char *text, long *seed, zb_err *err)
{
    return cli_parse_int("--seed", text, 0, 0x7fffffffffffffffL, seed, err);
}

int cli_flag_batch(const char *text, long *batch, zb_err *err)
{
    return cli_parse_int("--batch-size", text, 1, 65536, batch, err);
}

int cli_flag_max_input(const char *text, zb_err *err)
{
    uint64_t bytes;
    if (zb_size_parse(text, &bytes, err) < 0)
        return zb_wrap(err, "--max-input: ");
    zb_input_set_max(bytes);
    return 0;
}
