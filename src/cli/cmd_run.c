/* cmd_run.c: `zbsched run`; not written yet. */
#include "src/cli/cli.h"

int cmd_run(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_error("'run' is not available in this build yet");
}
