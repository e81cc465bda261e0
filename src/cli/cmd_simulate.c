/* cmd_simulate.c: `zbsched simulate`; not written yet. */
#include "src/cli/cli.h"

int cmd_simulate(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_error("'simulate' is not available in this build yet");
}
