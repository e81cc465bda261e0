/*
 * split.h: which layers each virtual stage of a schedule holds.
 *
 * Stages hold contiguous layer ranges in model order, as even as possible:
 * each of the S stages gets floor(L/S) layers and the first L mod S stages
 * one more.  The extra layers go to the front because stage 0's other
 * duty, the embedding, is a table lookup, while stage S-1 also runs the
 * final norm, the LM head and the loss.  Every stage needs at least one
 * layer, so S > L is refused.
 */
#ifndef ZB_RUNTIME_SPLIT_H
#define ZB_RUNTIME_SPLIT_H

#include "src/err.h"

/* Fills first[0..n_stages] so that stage s holds layers [first[s],
 * first[s+1]) (first[0] = 0, first[n_stages] = n_layers).  Returns 0, or -1
 * with err set when n_stages exceeds n_layers or a count is not positive. */
int split_layers(int n_layers, int n_stages, int *first, zb_err *err);

#endif
