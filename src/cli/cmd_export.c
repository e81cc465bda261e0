/* cmd_export.c: `zbsched export`; not written yet. */
#include "src/cli/cli.h"

int cmd_export(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_error("'export' is not available in this build yet");
}
