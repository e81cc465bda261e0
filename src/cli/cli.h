/*
 * cli.h: the zbsched command-line program, a thin layer over the libraries.
 *
 * main.c dispatches `zbsched COMMAND ...` to one cmd_* function per command,
 * each in its own file.  Commands parse flags, call library functions, print
 * results, and turn a library zb_err into one line on stderr plus a non-zero
 * exit status.  Only this layer prints errors or decides exit codes.
 */
#ifndef ZB_CLI_H
#define ZB_CLI_H

#include "src/err.h"

/* Each returns the process exit status (0 success, 1 failure, 2 usage). */
int cmd_gen(int argc, char **argv);
int cmd_simulate(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_import(int argc, char **argv);
int cmd_search(int argc, char **argv);
int cmd_render(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_profile(int argc, char **argv);
int cmd_launch(int argc, char **argv);
int cmd_eplb(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_checkpoint(int argc, char **argv);

/* Prints "zbsched: <message>" and a newline on stderr; returns 1 so that a
 * command can `return cli_error(...)`. */
int cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Prints "zbsched: <err->msg>" on stderr; returns 1. */
int cli_fail(const zb_err *err);

/* Prints "zbsched CMD: <message>" (a usage problem) and returns 2. */
int cli_usage(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Strict number parsing for flag values: whole string, finite, in range.
 * Return 0 on success, -1 (with err set, naming flag) otherwise. */
int cli_parse_int(const char *flag, const char *text, long min, long max, long *out, zb_err *err);
int cli_parse_double(const char *flag, const char *text, double *out, zb_err *err);

/* Checks, before any work, that output path out (NULL or "-": stdout) can
 * be written and is none of inputs[0..n_inputs) (entries may be NULL),
 * also through another path or a link (src/outfile.h).  Returns 0, or 1
 * after printing one line.  cli_check_output(out, in1, in2, ...) lists
 * the inputs inline. */
int cli_check_output_list(const char *out, const char *const *inputs, int n_inputs);
#define cli_check_output(out, ...)                                                      \
    cli_check_output_list((out), (const char *const[]){ __VA_ARGS__ },                  \
                          (int)(sizeof((const char *const[]){ __VA_ARGS__ }) / sizeof(const char *)))

#endif
