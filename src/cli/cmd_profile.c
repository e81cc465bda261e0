/* cmd_profile.c: `zbsched profile`; not written yet. */
#include "src/cli/cli.h"

int cmd_profile(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_error("'profile' is not available in this build yet");
}
