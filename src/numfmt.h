/*
 * numfmt.h: numbers as people read them in tables, titles and axes.
 *
 * printf's %g switches to an exponent at a million ("1.76529e+10",
 * "1.155e+04 ms"), which reads as a different kind of figure than the
 * numbers around it and cannot be compared at a glance.  Human output in
 * zbsched writes times and counts in fixed notation with a chosen number
 * of significant digits, and sizes through zb_size_format (src/size.h);
 * JSON keeps exact numbers (%.17g).  Workload: a few hundred numbers per
 * command.
 */
#ifndef ZB_NUMFMT_H
#define ZB_NUMFMT_H

#include <stddef.h>

/* Writes v in fixed notation (never an exponent) with `sig` significant
 * digits (1..15), trailing zeros after the point dropped: 8090.54116 with
 * 6 gives "8090.54", 21250.3 "21250.3", 17652875264 "17652875264",
 * 0.000123456 "0.000123456", 2.5 "2.5", 0 "0".  Digits left of the point
 * are never rounded away.  Non-finite values print as "inf", "-inf" and
 * "nan".  buf is NUL-terminated and truncated to len. */
void zb_num_format(double v, int sig, char *buf, size_t len);

/* Writes n values v[i] into out[i] (each cap bytes) in fixed notation
 * with one number of decimals for all, so that a table column lines up on
 * its point: enough for `sig` significant digits of the largest magnitude,
 * less the trailing zeros every value shares (27, 24 and 26 print without
 * decimals; 8090.54 and 7961.3 as 8090.54 and 7961.30). */
void zb_num_format_column(const double *v, int n, int sig, char *out, size_t cap);

#endif
