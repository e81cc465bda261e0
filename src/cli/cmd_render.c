/* cmd_render.c: `zbsched render`; not written yet. */
#include "src/cli/cli.h"

int cmd_render(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_error("'render' is not available in this build yet");
}
