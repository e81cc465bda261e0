/*
 * backend_cpu.h: the CPU backend, the kernels of this folder behind the
 * executor's backend interface (runtime/backend.h).  It is the only file
 * of kernels/cpu/ that knows that interface; the kernels themselves know
 * nothing of the executor.
 */
#ifndef ZB_KERNELS_BACKEND_CPU_H
#define ZB_KERNELS_BACKEND_CPU_H

#include "runtime/backend.h"
#include "src/err.h"

/* The CPU backend over kernels/cpu (backend_cpu.c) for stages on devices
 * 0..n_devices-1: the executor binds each worker's kernel team itself, and
 * n_devices sizes the backend's memory ledger (backend.h's ledger op).  0
 * and *out, or -1 with err (memory). */
int backend_cpu_create(int n_devices, zb_backend **out, zb_err *err);

#endif
