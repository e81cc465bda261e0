/* cmd_import.c: `zbsched import`; not written yet. */
#include "src/cli/cli.h"

int cmd_import(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_error("'import' is not available in this build yet");
}
