/*
 * data_path.h: the training text `zbsched run` reads without --data.
 *
 * A path relative to the working directory broke every command started
 * outside the repository root, so the default is fixed when the program
 * is built: ZB_SOURCE_ROOT (the repository, passed by meson) followed by
 * /../shared/data/tinyshakespeare.txt, the project's data set beside the
 * repository.  A program moved to another machine or directory can be
 * pointed at the text with the environment variable ZBSCHED_DATA, which
 * wins over the built-in path.  --data still wins over both.
 */
#ifndef ZB_CLI_DATA_PATH_H
#define ZB_CLI_DATA_PATH_H

/* The environment variable that names the text instead of the built-in path. */
#define CLI_DATA_ENV "ZBSCHED_DATA"

/* $ZBSCHED_DATA when set and not empty, else the built-in path above.
 * The string is static or the environment's; never NULL. */
const char *cli_default_data(void);

#endif
