/* cmd_gen.c: `zbsched gen`; not written yet. */
#include "src/cli/cli.h"

int cmd_gen(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_error("'gen' is not available in this build yet");
}
