/* cmd_launch.c: `zbsched launch`; not written yet. */
#include "src/cli/cli.h"

int cmd_launch(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_error("'launch' is not available in this build yet");
}
