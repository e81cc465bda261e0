/*
 * outer_edit.h: EDiT's pseudo-gradient penalty (Cheng et al., arXiv
 * 2412.07210; atorch local_sgd), as pure functions over per-replica norms
 * so that outer.c and the tests share one definition.
 *
 * For one layer, replica i's pseudo-gradient Delta_i has norm g_i.
 *   1. anomaly elimination: an EWMA z-score detector per (replica, layer)
 *      flags g_i as an outlier when z > threshold * max(1, std of the
 *      recent z-scores), after a warm-up; an outlier's Delta_i is dropped;
 *   2. weighting: w_i = softmax_i(-g_i / T) over the surviving replicas, so
 *      a replica that drifted further counts less;
 *   3. clipping: the combined Delta is scaled by min(1, phi / (||Delta|| +
 *      1e-6)).
 *
 * Deliberate difference from atorch: atorch adds 1e6 to an outlier's norm
 * in place and then feeds that into its detector, which inflates the EWMA;
 * here the detector is updated with the true norm (a persistent shift is
 * absorbed after about 1/alpha syncs) and an outlier simply gets weight 0.
 * Workload: K x layers calls per outer step; trivial cost.
 */
#ifndef ZB_OUTER_EDIT_H
#define ZB_OUTER_EDIT_H

#include <stddef.h>

typedef struct outer_zdetect {
    double mean;    /* EWMA of the norms seen */
    double m2;      /* EW variance accumulator (atorch's M2) */
    long count;     /* norms seen so far */
    int hist_cap;   /* length of the z-score history (= warm-up length) */
    int hist_len;   /* z-scores stored so far, up to hist_cap */
    int hist_pos;   /* next slot to overwrite in the circular history */
    double *hist;   /* [hist_cap] recent z-scores, owned */
    double alpha;   /* EWMA rate (0.02) */
    double base;    /* base threshold (3) */
} outer_zdetect;

/* Initializes d with a warm-up / history length of `warmup` syncs (at least
 * 1).  Returns 0, or -1 when memory runs out. */
int outer_zdetect_init(outer_zdetect *d, int warmup, double alpha, double base);

/* Frees d's history (d itself is the caller's). */
void outer_zdetect_free(outer_zdetect *d);

/* Feeds one norm g (finite) and returns 1 when it is an outlier (z above
 * threshold, only once `warmup` norms have been seen), else 0.  The z-score
 * uses the statistics from before g; then g updates them.  *z_out (may be
 * NULL) receives z (0 when undefined). */
int outer_zdetect_feed(outer_zdetect *d, double g, double *z_out);

/* w[i] = softmax(-norm[i] / temperature) over the i with keep[i] != 0;
 * w[i] = 0 for the others.  Returns the number kept (0: all weights 0).
 * Computed in double with the max subtracted, so huge norms do not
 * overflow. */
int outer_edit_weights(const double *norm, const int *keep, int n, double temperature, double *w);

/* The clipping factor min(1, phi / (norm + 1e-6)); phi <= 0 disables
 * clipping (returns 1). */
double outer_edit_clip_factor(double norm, double phi);

#endif
