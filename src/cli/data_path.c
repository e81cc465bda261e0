/*
 * data_path.c: the default training text (data_path.h).
 */
#include "src/cli/data_path.h"

#include <stdlib.h>

#ifndef ZB_SOURCE_ROOT
#define ZB_SOURCE_ROOT "."
#endif

const char *cli_default_data(void)
{
    const char *env = getenv(CLI_DATA_ENV);
    if (env && env[0])
        return env;
    return ZB_SOURCE_ROOT "/../shared/data/tinyshakespeare.txt";
}
