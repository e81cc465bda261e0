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

/* The CPU backend over kernels/cpu (backend_cpu.c); n_devices is unused
 * (the executor binds each worker's kernel team itself).  0 and *out, or
 * -1 with err (memory). */
int backend_cpu_create(int n_devices, zb_backend **out, zb_err *err);

#endif
