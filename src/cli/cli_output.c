/*
 * cli_output.c: the check every command makes on its output paths before
 * it does any work (cli.h, cli_check_output).
 *
 * Why up front: a command may train for an hour (`run --trace`) or solve
 * an ILP before it writes; a path it can never write (a missing directory,
 * a directory, a socket) or one it must not write (an input of the same
 * command, which the atomic replacement would destroy) should cost one
 * line at once, not the work.  The write itself repeats the checks
 * (src/outfile.h), so a path that changes in between is still handled.
 */
#include "src/cli/cli.h"

#include <stdlib.h>

#include "src/outfile.h"

int cli_check_output_list(const char *out, const char *const *inputs, int n_inputs)
{
    zb_err err = { { 0 } };
    outfile_kind kind;
    if (outfile_check(out, &kind, NULL, &err) != 0)
        return cli_fail(&err);
    for (int i = 0; i < n_inputs; i++)
        if (outfile_check_distinct(out, inputs[i], &err) != 0)
            return cli_fail(&err);
    return 0;
}
