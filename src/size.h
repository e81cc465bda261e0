/*
 * size.h: memory sizes as people write them ("40G", "80GB", "512MiB",
 * "1.5T", "80000M", "123456789").
 *
 * Decimal suffixes are powers of 1000 and binary ones powers of 1024, as in
 * IEC 80000-13 and as GPU vendors print them (an "80GB" H100 is sold in
 * decimal gigabytes, nvidia-smi prints MiB):
 *
 *   (none) B              1
 *   K  KB                 1e3      Ki  KiB   2^10
 *   M  MB                 1e6      Mi  MiB   2^20
 *   G  GB                 1e9      Gi  GiB   2^30
 *   T  TB                 1e12     Ti  TiB   2^40
 *   P  PB                 1e15     Pi  PiB   2^50
 *
 * Suffixes are case-insensitive ("40g" = "40G" = "40 GB"); one space may
 * separate number and suffix.  The number is decimal digits with an
 * optional fraction ("1.5T"); signs, exponents, hex, inf and nan are
 * refused, as are zero, fractions of a byte and anything at or above 2^63
 * bytes.  Workload: a handful of flag values per command.
 */
#ifndef ZB_SIZE_H
#define ZB_SIZE_H

#include <stddef.h>
#include <stdint.h>

#include "src/err.h"

/* Parses text into a whole, positive number of bytes.  Returns 0 and stores
 * the result in *bytes, or returns -1 with err saying what is wrong (the
 * message quotes text; callers prefix the flag name with zb_wrap). */
int zb_size_parse(const char *text, uint64_t *bytes, zb_err *err);

/* Writes bytes as a decimal figure with two decimals and its unit
 * ("39.86 GB", "512.00 MB", "1.00 TB"; whole bytes below 1 KB: "123 B")
 * into buf (NUL-terminated, truncated to len).  Decimal because the sizes
 * users type and GPU datasheets use are decimal; two decimals because a
 * plan's peak is read against its limit (39.98 GB under 40 GB must not
 * print as "40.0 GB").  This is the one memory figure every command
 * prints (search, simulate, render, run). */
void zb_size_format(double bytes, char *buf, size_t len);

#endif
