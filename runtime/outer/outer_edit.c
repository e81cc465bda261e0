/*
 * outer_edit.c: EDiT's anomaly detector, softmax weights and clipping (see
 * outer_edit.h).  Everything in double: the inputs are a handful of norms.
 */
#include "runtime/outer/outer_edit.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int outer_zdetect_init(outer_zdetect *d, int warmup, double alpha, double base)
{
    memset(d, 0, sizeof *d);
    d->hist_cap = warmup > 0 ? warmup : 1;
    d->hist = calloc((size_t)d->hist_cap, sizeof(double));
    d->alpha = alpha;
    d->base = base;
    return d->hist ? 0 : -1;
}

void outer_zdetect_free(outer_zdetect *d)
{
    free(d->hist);
    d->hist = NULL;
}

static double history_std(const outer_zdetect *d)
{
    if (d->hist_len < 2)
        return 0.0;
    double mean = 0.0, ss = 0.0;
    for (int i = 0; i < d->hist_len; i++)
        mean += d->hist[i];
    mean /= d->hist_len;
    for (int i = 0; i < d->hist_len; i++)
        ss += (d->hist[i] - mean) * (d->hist[i] - mean);
    return sqrt(ss / d->hist_len);
}

int outer_zdetect_feed(outer_zdetect *d, double g, double *z_out)
{
    double z = 0.0;
    int outlier = 0;
    if (d->count > 0 && d->m2 > 0.0) {
        z = (g - d->mean) / sqrt(d->m2);
        if (d->count >= d->hist_cap) {
            double sd = history_std(d);
            double threshold = d->base * (sd > 1.0 ? sd : 1.0);
            outlier = z > threshold;
        }
        d->hist[d->hist_pos] = z;
        d->hist_pos = (d->hist_pos + 1) % d->hist_cap;
        if (d->hist_len < d->hist_cap)
            d->hist_len++;
    }
    if (d->count == 0) {
        d->mean = g;
        d->m2 = 0.0;
    } else {
        double old = d->mean;
        d->mean += d->alpha * (g - old);
        d->m2 = (1.0 - d->alpha) * (d->m2 + d->alpha * (g - old) * (g - d->mean));
    }
    d->count++;
    if (z_out)
        *z_out = z;
    return outlier;
}

int outer_edit_weights(const double *norm, const int *keep, int n, double temperature, double *w)
{
    double best = -INFINITY;
    int kept = 0;
    for (int i = 0; i < n; i++)
        if (keep[i]) {
            double a = -norm[i] / temperature;
            if (a > best)
                best = a;
            kept++;
        }
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        w[i] = keep[i] ? exp(-norm[i] / temperature - best) : 0.0;
        sum += w[i];
    }
    if (kept)
        for (int i = 0; i < n; i++)
            w[i] /= sum;
    return kept;
}

double outer_edit_clip_factor(double norm, double phi)
{
    if (!(phi > 0.0))
        return 1.0;
    double f = phi / (norm + 1e-6);
    return f < 1.0 ? f : 1.0;
}
