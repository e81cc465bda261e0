/*
 * split.c: contiguous, balanced layer ranges per virtual stage (split.h).
 */
#include "runtime/split.h"

int split_layers(int n_layers, int n_stages, int *first, zb_err *err)
{
    if (n_layers <= 0 || n_stages <= 0)
        return zb_fail(err, "cannot split %d layers into %d stages", n_layers, n_stages);
    if (n_stages > n_layers)
        return zb_fail(err, "the schedule has %d virtual stages but the model has only %d layers "
                       "(each stage needs at least one layer)", n_stages, n_layers);
    int base = n_layers / n_stages, extra = n_layers % n_stages;
    first[0] = 0;
    for (int s = 0; s < n_stages; s++)
        first[s + 1] = first[s] + base + (s < extra);
    return 0;
}
