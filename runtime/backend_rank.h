/*
 * backend_rank.h: a pipeline rank's view of a backend: only this
 * process's device's stages live on the device.
 *
 * A pipeline rank (trainer_opts.one_device: this process runs schedule
 * device `local`, other processes the rest) still makes every stage, so
 * that checkpoints, accessors and the split keep their shape, but it only
 * ever runs ops on its own.  On a GPU the other stages would cost device
 * memory a real model does not have (a GPU cannot hold every stage), so
 * this wrapper passes the local device's stages to the inner backend and
 * keeps every other stage as host mirrors only ("remote" stages):
 *
 *   host              its own four arrays (what a checkpoint part of
 *                     another rank loads into, and what is saved for it);
 *   download, upload  nothing to do (the mirror is all there is);
 *   saved_new         a shared token, saved_bytes 0 (never used);
 *   grads_zero        zeroes the host gradient (the executor zeroes every
 *                     stage's gradients at the start of a step);
 *   sync              nothing queued;
 *   everything else   fails, naming the device (the executor never runs
 *                     another device's ops in one_device mode: a failure
 *                     here is a bug there, not a silent wrong result).
 *
 * Activations, fences, bind and memory go to the inner backend as they
 * are.  Used by the CUDA module for GPU ranks (backend_cuda_create_rank)
 * and, over the CPU backend, by the tests that check the executor against
 * that contract under mpirun (tests/mpi/mpi_rank_backend_check.c).
 */
#ifndef ZB_RUNTIME_BACKEND_RANK_H
#define ZB_RUNTIME_BACKEND_RANK_H

#include "runtime/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Wraps inner (owned from now on, freed with the wrapper, also on
 * failure) so that only device `local`'s stages reach it; the wrapper's
 * name is "<inner's name>/rank".  0 and *out, or -1 with err (memory,
 * local < 0). */
int backend_rank_wrap(zb_backend *inner, int local, zb_backend **out, zb_err *err);


#ifdef __cplusplus
}
#endif

#endif
