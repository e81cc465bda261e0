/*
 * cli.c: what every command of the CLI shares (cli.h): its error and
 * usage lines and the strict parsing of numbers in flag values.  The
 * commands call these; main.c only dispatches to the commands, so that no
 * command file and the dispatcher call each other in a circle.
 */
#include "src/cli/cli.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

int cli_error(const char *fmt, ...)
{
    /* The line goes out in one fprintf (glibc writes an unbuffered
     * stream's formatted output at once): the ranks of mpirun share one
     * stream, where pieces of two ranks' lines would interleave. */
    char line[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof line) {
        fprintf(stderr, "zbsched: %s\n", line);
        return 1;
    }
    va_start(ap, fmt);
    fputs("zbsched: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

int cli_fail(const zb_err *err)
{
    return cli_error("%s", err->msg[0] ? err->msg : "unknown error");
}

int cli_usage(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "zbsched %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 2;
}

int cli_parse_int(const char *flag, const char *text, long min, long max, long *out, zb_err *err)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (text[0] == '\0' || *end != '\0' || errno == ERANGE)
        return zb_fail(err, "%s: '%s' is not a whole number", flag, text);
    if (v < min || v > max)
        return zb_fail(err, "%s: %ld is out of range (%ld..%ld)", flag, v, min, max);
    *out = v;
    return 0;
}

int cli_parse_double(const char *flag, const char *text, double *out, zb_err *err)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (text[0] == '\0' || *end != '\0' || errno == ERANGE || !isfinite(v))
        return zb_fail(err, "%s: '%s' is not a finite number", flag, text);
    *out = v;
    return 0;
}
