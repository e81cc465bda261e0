/*
 * numfmt.c: fixed-notation numbers for people (numfmt.h).
 *
 * The number of decimals follows from the magnitude: sig - 1 - floor(log10
 * |v|), at least 0 (so large numbers keep every integer digit) and at most
 * 15 (below that a double has nothing left to say).  %.*f then rounds, and
 * a value that rounds up to the next power of ten (9.9999996 -> "10.00000")
 * only gains a digit, which the trimming of trailing zeros absorbs.
 */
#include "src/numfmt.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

void zb_num_format(double v, int sig, char *buf, size_t len)
{
    assert(sig >= 1 && sig <= 15 && len > 0);
    if (!isfinite(v)) {
        snprintf(buf, len, "%s", isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
        return;
    }
    int decimals = 0;
    if (v != 0) {
        int mag = (int)floor(log10(fabs(v)));
        decimals = sig - 1 - mag;
        decimals = decimals < 0 ? 0 : decimals > 15 ? 15 : decimals;
    }
    snprintf(buf, len, "%.*f", decimals, v);
    if (decimals > 0 && strchr(buf, '.')) {
        size_t n = strlen(buf);
        while (n > 0 && buf[n - 1] == '0')
            buf[--n] = '\0';
        if (n > 0 && buf[n - 1] == '.')
            buf[--n] = '\0';
    }
    if (!strcmp(buf, "-0"))
        snprintf(buf, len, "0");
}

void zb_num_format_column(const double *v, int n, int sig, char *out, size_t cap)
{
    assert(sig >= 1 && sig <= 15 && cap > 0);
    double big = 0;
    for (int i = 0; i < n; i++)
        if (isfinite(v[i]) && fabs(v[i]) > big)
            big = fabs(v[i]);
    int decimals = 0;
    if (big > 0) {
        decimals = sig - 1 - (int)floor(log10(big));
        decimals = decimals < 0 ? 0 : decimals > 15 ? 15 : decimals;
    }
    /* Drop the trailing zeros that every value has at this precision. */
    for (; decimals > 0; decimals--) {
        int all_zero = 1;
        for (int i = 0; i < n && all_zero; i++) {
            char tmp[400];
            snprintf(tmp, sizeof tmp, "%.*f", decimals, v[i]);
            size_t k = strlen(tmp);
            all_zero = !isfinite(v[i]) || (k > 0 && tmp[k - 1] == '0');
        }
        if (!all_zero)
            break;
    }
    for (int i = 0; i < n; i++) {
        char *cell = out + (size_t)i * cap;
        if (!isfinite(v[i]))
            snprintf(cell, cap, "%s", isnan(v[i]) ? "nan" : v[i] > 0 ? "inf" : "-inf");
        else
            snprintf(cell, cap, "%.*f", decimals, v[i]);
        if (!strcmp(cell, "-0") || (cell[0] == '-' && strspn(cell + 1, "0.") == strlen(cell + 1)))
            memmove(cell, cell + 1, strlen(cell));
    }
}
