/*
 * run_ways.h: the drivers of `zbsched run`, one per way of running, each
 * building its way (runtime/job.h) and handing it to the one job loop:
 *
 *   run_local        one process, CPU or one GPU (run_local.c)
 *   run_islands      --replicas K in one process (run_local.c)
 *   run_gpu_ranks    --device cuda under `zbsched launch` or mpirun, one
 *                    GPU per rank over NCCL (run_gpu.c)
 *   cli_run_mpi      CPU ranks under mpirun: pipeline or islands
 *                    (cmd_run_mpi.c, cli_mpi.h)
 *
 * cmd_run.c has loaded and checked what every way needs (schedule,
 * model, data, flags, the trainer options); each driver returns the exit
 * status, having printed its lines.
 */
#ifndef ZB_CLI_RUN_WAYS_H
#define ZB_CLI_RUN_WAYS_H

#include "runtime/run_record.h"
#include "runtime/trainer.h"
#include "src/cli/run_args.h"

int run_local(const run_args *a, const sched_t *s, const zb_model *m, const zb_data *d,
              trainer_opts *o, const run_identity *id);

int run_islands(run_args *a, const sched_t *s, const zb_model *m, const zb_data *d,
                const trainer_opts *o, const run_identity *id);

/* The flags GPU ranks do not support, refused with one usage line (2)
 * before any rank bootstraps, or -1 to go on. */
int run_gpu_refused(const char *prog, const run_args *a);

int run_gpu_ranks(const run_args *a, const sched_t *s, zb_model *m, const zb_data *d,
                  const trainer_opts *o, const run_identity *id);

/* --device cuda in one process: loads the module, checks the GPU and
 * points o at the CUDA backend.  0, or 1 after one line. */
int run_cuda_backend(const run_args *a, trainer_opts *o);

#endif
