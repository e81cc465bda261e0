/*
 * size.c: parsing and printing of memory sizes (see size.h for the accepted
 * forms and why G is 1e9).
 *
 * The number is scanned by hand rather than with strtod so that nothing
 * strtod accepts and people do not mean ("0x10", "inf", "1e3", "-5",
 * leading blanks) slips through.  Integer part and fraction are kept as
 * exact integers, so "80000M" and "1.5T" come out exact; only the final
 * rounding of a fractional byte count is refused.
 */
#include "src/size.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Largest size accepted, exclusive: keeps every result representable in a
 * signed 64-bit integer and a double without surprise. */
#define SIZE_LIMIT ((uint64_t)1 << 63)

typedef struct size_suffix {
    const char *name;    /* lower-case spelling, matched case-insensitively */
    uint64_t multiplier; /* bytes per unit */
} size_suffix;

static const size_suffix suffixes[] = {
    { "", 1 }, { "b", 1 },
    { "k", 1000ULL }, { "kb", 1000ULL },
    { "m", 1000000ULL }, { "mb", 1000000ULL },
    { "g", 1000000000ULL }, { "gb", 1000000000ULL },
    { "t", 1000000000000ULL }, { "tb", 1000000000000ULL },
    { "p", 1000000000000000ULL }, { "pb", 1000000000000000ULL },
    { "ki", 1ULL << 10 }, { "kib", 1ULL << 10 },
    { "mi", 1ULL << 20 }, { "mib", 1ULL << 20 },
    { "gi", 1ULL << 30 }, { "gib", 1ULL << 30 },
    { "ti", 1ULL << 40 }, { "tib", 1ULL << 40 },
    { "pi", 1ULL << 50 }, { "pib", 1ULL << 50 },
};

/* a*b into *out; returns -1 when the product reaches SIZE_LIMIT. */
static int mul_checked(uint64_t a, uint64_t b, uint64_t *out)
{
    if (a != 0 && b > (SIZE_LIMIT - 1) / a)
        return -1;
    *out = a * b;
    return 0;
}

int zb_size_parse(const char *text, uint64_t *bytes, zb_err *err)
{
    if (!text || !*text)
        return zb_fail(err, "empty size (write e.g. 40G, 80GB, 512MiB)");
    const char *p = text;
    if (*p == '-')
        return zb_fail(err, "'%s': a size cannot be negative", text);
    if (!isdigit((unsigned char)*p) && *p != '.')
        return zb_fail(err, "'%s' is not a size (write e.g. 40G, 80GB, 512MiB)", text);

    /* Integer part, exact. */
    uint64_t whole = 0;
    int digits = 0;
    for (; isdigit((unsigned char)*p); p++, digits++) {
        if (whole > (SIZE_LIMIT - 1 - (uint64_t)(*p - '0')) / 10)
            return zb_fail(err, "'%s' is too large (limit 2^63 bytes)", text);
        whole = whole * 10 + (uint64_t)(*p - '0');
    }
    /* Fraction: up to 18 digits, kept exactly as frac / frac_scale. */
    uint64_t frac = 0, frac_scale = 1;
    if (*p == '.') {
        p++;
        int fdigits = 0;
        for (; isdigit((unsigned char)*p); p++, fdigits++) {
            if (fdigits >= 18)
                return zb_fail(err, "'%s': too many decimals", text);
            frac = frac * 10 + (uint64_t)(*p - '0');
            frac_scale *= 10;
        }
        digits += fdigits;
    }
    if (digits == 0)
        return zb_fail(err, "'%s' is not a size (no digits)", text);
    if (*p == ' ')
        p++;

    const size_suffix *unit = NULL;
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++)
        if (!strcasecmp(p, suffixes[i].name))
            unit = &suffixes[i];
    if (!unit)
        return zb_fail(err, "'%s': unknown unit '%s' (use B, K/KB, M/MB, G/GB, T/TB = powers of 1000, "
                            "or KiB, MiB, GiB, TiB = powers of 1024)", text, p);

    uint64_t total;
    if (mul_checked(whole, unit->multiplier, &total) < 0)
        return zb_fail(err, "'%s' is too large (limit 2^63 bytes)", text);
    if (frac) {
        /* frac/frac_scale * multiplier must be a whole number of bytes. */
        uint64_t m = unit->multiplier, s = frac_scale, f = frac;
        /* Reduce by common factors of 10, 2 and 5 so the product stays small. */
        while (s > 1 && m % 10 == 0 && s % 10 == 0) {
            m /= 10;
            s /= 10;
        }
        while (s > 1 && m % 2 == 0 && s % 2 == 0) {
            m /= 2;
            s /= 2;
        }
        while (s > 1 && m % 5 == 0 && s % 5 == 0) {
            m /= 5;
            s /= 5;
        }
        while (s > 1 && f % 10 == 0 && s % 10 == 0) {
            f /= 10;
            s /= 10;
        }
        uint64_t part;
        if (mul_checked(f, m, &part) < 0)
            return zb_fail(err, "'%s' is too large (limit 2^63 bytes)", text);
        if (part % s != 0)
            return zb_fail(err, "'%s' is not a whole number of bytes", text);
        part /= s;
        if (total > SIZE_LIMIT - 1 - part)
            return zb_fail(err, "'%s' is too large (limit 2^63 bytes)", text);
        total += part;
    }
    if (total == 0)
        return zb_fail(err, "'%s': a size must be positive", text);
    *bytes = total;
    return 0;
}

void zb_size_format(double bytes, char *buf, size_t len)
{
    static const char *units[] = { "B", "KB", "MB", "GB", "TB", "PB" };
    int u = 0;
    double v = bytes;
    /* Move up a unit while the figure would print as 1000 or more at its
     * precision (whole bytes, else two decimals): 999.996 GB is 1.00 TB. */
    while (u < 5 && fabs(v) >= (u == 0 ? 999.5 : 999.995)) {
        v /= 1000;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%.0f B", v);
    else
        snprintf(buf, len, "%.2f %s", v, units[u]);
}
