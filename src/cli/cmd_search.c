/* cmd_search.c: `zbsched search`; not written yet. */
#include "src/cli/cli.h"

int cmd_search(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_error("'search' is not available in this build yet");
}
