/*
 * trainer_impl.h: the executor's shared state and the calls between the
 * files of the executor (trainer.h is the public interface; nothing outside
 * runtime/trainer_*.c includes this header).
 *
 * The executor does no arithmetic itself: every stage op goes through the
 * trainer's backend (backend.h), whose host mirrors it keeps in step with
 * the device and whose activation fences it records at each hand-over of a
 * buffer.  It is one struct, `trainer` below, and one file per concern:
 *
 *   trainer_create.c   validation, the split, every allocation, and the
 *                      free that unwinds any partly built trainer; the
 *                      plain accessors
 *   trainer_ops.c      one device's ops (F, B, W, S, T), the activation
 *                      pool, the post-validated optimizer step and the
 *                      speculative forwards of trainer_steps
 *   trainer_workers.c  the persistent worker threads, one job per step
 *   trainer_mirror.c   host mirrors of the backend's buffers, the latch of
 *                      backend failures outside the workers, the buffer
 *                      accessors
 *   trainer_step.c     trainer_step, trainer_steps, trainer_backward /
 *                      trainer_apply and the synchronous clip
 *   trainer_eval.c     forward-only validation loss
 *   trainer_ckpt.c     the trainer's checkpoint files (checkpoint.h)
 *   trainer_trace.c    the measured trace of the last step
 *
 * The files call each other in one direction only (tools/check-layers.py
 * holds it): step -> workers -> ops; step, eval and create -> workers;
 * step and create -> ops; step, workers, eval and ckpt -> mirror; ops,
 * mirror and trace call none of the others.  A file-local helper stays static; what another file
 * calls is declared here, prefixed trainer_ like the public calls but
 * never exported by trainer.h.
 *
 * Life of one step:
 *
 *   main thread   draw m micro-batches, zero every stage's grads, start one
 *                 worker per device, join them, average the losses
 *   worker d      run lane d's ops in order; F/B receive their input from
 *                 the transport and send their output on; W adds the weight
 *                 gradient in micro-batch order (out-of-order W results wait
 *                 in a per-micro-batch scratch); then the optimizer step of
 *                 each of its stages with post-validation
 */
#ifndef ZB_RUNTIME_TRAINER_IMPL_H
#define ZB_RUNTIME_TRAINER_IMPL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "kernels/cpu/team.h"
#include "runtime/backend.h"
#include "runtime/rng.h"
#include "runtime/trainer.h"
#include "runtime/transport.h"
#include "runtime/transport_factory.h"
#include "runtime/vocab_exec.h"

/* Everything one virtual stage owns. */
typedef struct stage_rt {
    llama_stage layout;    /* layers, tensors and their offsets */
    llama_stage norm_layout; /* vocabulary parallelism, last stage: layout
                            * without the LM head (LLAMA_HEAD_NORM_ONLY), whose
                            * tensors are layout's minus the head at the end */
    const llama_stage *kern; /* what F, B, W run: &layout, or &norm_layout */
    int device;            /* device (worker thread) that runs it */
    size_t n_params;       /* floats per buffer of the stage */
    zb_bstage *bs;         /* params, grads, AdamW m and v on the backend (backend.h) */
    unsigned dev_newer;    /* bits 1 << zb_bbuf: the device holds writes its host mirror lacks */
    unsigned host_newer;   /* bits: the host mirror may hold writes the device lacks */
    int64_t adam_t;        /* AdamW steps taken by this stage (1-based in the update) */
    int64_t snap_t;        /* adam_t before a speculative step (the backend keeps
                            * the copy of what the step wrote, backend.h) */
    double *tensor_sq;     /* [layout.n_tensors] squared norm of each grad tensor */
    int sq_given;          /* ZeRO-1: 1 when tensor_sq was set by trainer_set_stage_sumsq
                            * for the next norm (used once, instead of grad_sumsq) */
    size_t opt_floats;     /* ZeRO-1: floats in m and in v (trainer_shard_optimizer);
                            * 0: whole state, n_params */
    float *ckpt_moment[2]; /* ZeRO-1: whole m and v (n_params floats each, borrowed)
                            * that checkpoints write and read instead of the
                            * shard (trainer_zero1_checkpoint_moments); NULL: none */
    zb_bsaved **saved;     /* [m] per micro-batch saved state (F -> B -> W) */
    zb_bgrads **w_scratch; /* [m] weight gradients of W ops run ahead of order */
    zb_bgrads **w_free;    /* [m] spare scratch buffers for w_scratch (reused) */
    int n_w_free;          /* buffers in w_free */
    int next_w;            /* next micro-batch whose W is added into grads */
    int stepped;           /* post-validation: 1 when the partial norm called for
                            * an unclipped step (the optimistic action) */
    int speculated;        /* stage 0: 1 while a speculative step awaits its
                            * validation (the backend holds the copy) */
    int recompute;         /* LLAMA_RC_* level of this stage's saved states (opts.recompute_stages) */
    const int32_t *x;      /* [m][B*T] input tokens of the step this stage runs (stage 0) */
    const int32_t *y;      /* [m][B*T] its target tokens (stage S-1) */
} stage_rt;

/* What a worker thread runs: the lane's ops, the post-validated optimizer
 * step, or both back to back (trainer_step, so that a device starts its
 * step as soon as its own ops are done, without a barrier). */
enum {
    PHASE_OPS = 1,  /* the lane's F, B, W ops (trainer_backward) */
    PHASE_STEP = 2, /* the post-validated optimizer step (trainer_apply) */
    PHASE_BATCH = 4, /* trainer_steps: b_n steps back to back, no barrier */
};

/* One worker's identity and outcome.  Workers live as long as the
 * trainer (started by the first step) and wait between jobs. */
typedef struct worker {
    struct trainer *t; /* the trainer */
    int dev;           /* device index = lane */
    int failed;        /* 1 when this worker stopped on an error (last job) */
    zb_err err;        /* its message */
} worker;

struct trainer {
    sched_t *sched;        /* owned copy of the schedule */
    zb_model model;        /* effective model (data vocab, batch size) */
    const zb_data *data;   /* borrowed loader */
    trainer_opts opts;     /* options as given */
    int n_stages;          /* S */
    int n_micro;           /* m */
    int n_devices;         /* p */
    int batch;             /* B, sequences per micro-batch */
    int seq;               /* T */
    size_t act_floats;     /* B*T*d: one activation or gradient message */
    stage_rt *st;          /* [S] */
    zb_backend *be;        /* the device's arithmetic and memory (backend.h), owned */
    int mirrored;          /* 1 when the backend's host mirrors are copies (a GPU) */
    int be_failed;         /* 1 after a backend failure outside a worker (sticky) */
    zb_err be_err;         /* its message */
    zb_transport *tr;      /* transport between workers (transport.h) */
    zb_rng rng;            /* data window generator (checkpointed) */
    int32_t *x;            /* [m][B*T] input tokens of the step */
    int32_t *y;            /* [m][B*T] target tokens of the step */
    float *mb_loss;        /* [m] loss of each micro-batch */
    double step_lr;        /* learning rate of the running step */
    struct timespec t0;    /* start of the running step */
    double **op_start;     /* [p][n_ops] ms since t0, last step (record_times) */
    double **op_end;       /* [p][n_ops] */
    double **op_mid;       /* [p][n_ops] end of the B half of BW ops */
    int have_times;        /* 1 once a step recorded its times */
    double *act_peak;      /* [p] most saved-activation bytes held at once, last step (record_times) */
    double full_sq;        /* full squared gradient norm of the last step */
    int pending;           /* 1 between trainer_backward and trainer_apply */
    double pending_loss;   /* mean loss of the pending step's backward */
    long rollbacks_step;   /* rollbacks in the running step (workers add under lock) */
    unsigned char *b_rolled; /* [b_cap] 1: batch step i had a rollback (under mu) */
    pthread_mutex_t mu;    /* guards rollbacks_step and the activation pool */
    float **act_pool;      /* [act_pool_cap] spare activation/gradient buffers */
    int act_pool_n;        /* buffers in act_pool */
    int act_pool_cap;      /* its capacity */
    int threads;           /* kernel threads per device (team size) */
    kern_team **team;      /* [p] each device's team, NULL until the first step */
    struct buf_pool **dev_pool; /* [p] each device's saved-state buffer pool, shared
                            * by its stages (llama_stage_share_pool) */
    worker *w;             /* [p] the persistent workers */
    pthread_t *tid;        /* [p] their threads */
    int n_started;         /* workers running (0 until the first step) */
    pthread_mutex_t wmu;   /* guards the job fields below */
    pthread_cond_t wgo;    /* broadcast when a job is posted or on stop */
    pthread_cond_t wdone;  /* signalled when the last worker finishes a job */
    unsigned long wgen;    /* job generation */
    int wphases;           /* PHASE_* bits of the current job */
    int wpending;          /* workers still running the current job */
    int wstop;             /* 1: workers exit */
    trainer_stats stats;   /* progress */
    vocab_exec *ve;        /* S/T passes and barriers (vocab_exec.h), or NULL
                            * when the schedule has no vocabulary parallelism */
    /* trainer_steps (a batch of steps without a barrier between them): */
    int32_t *bx, *by;      /* [b_cap][m][B*T] tokens of every step of the batch */
    int b_cap;             /* steps bx and by have room for */
    int b_n;               /* steps in the running batch */
    long b_step0;          /* stats.step when the batch began */
    int spec_len;          /* leading F ops of stage 0 in its device's lane: the
                            * ops that need no message, run speculatively */
    double *b_loss;        /* [b_cap] mean loss of each step (stage S-1's worker) */
    double *b_full_sq;     /* [b_cap] full squared norm of each step (stage S-1's worker) */
    double *b_end;         /* [b_cap][p] ms since t0 when each device finished each step */
    long b_spec;           /* speculative forwards run in the batch (stage 0's worker) */
    long b_redone;         /* of those, redone after a rollback (stage 0's worker) */
};

/* Milliseconds from t0 to now on the monotonic clock. */
static inline double ms_since(const struct timespec *t0)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - t0->tv_sec) * 1e3 + (double)(now.tv_nsec - t0->tv_nsec) * 1e-6;
}

/* Offset of batch step i's tokens in bx and by. */
static inline size_t batch_tokens(const trainer *t, int i)
{
    return (size_t)i * (size_t)t->n_micro * (size_t)t->batch * (size_t)t->seq;
}

/* ---- trainer_ops.c ------------------------------------------------------ */

/* The activation pool as the transport sees it (transport.h's
 * zb_transport_pool; ctx is the trainer). */
void *trainer_pool_get(void *ctx);
void trainer_pool_put(void *ctx, void *buf);

/* Keeps a weight-gradient scratch of stage r for the next W that runs
 * ahead (NULL is fine; freed when r has enough spares). */
void trainer_w_scratch_put(trainer *t, stage_rt *r, zb_bgrads *p);

/* Adds stage r's squared gradient norm onto *partial tensor by tensor.
 * 0 or -1 (backend failure). */
int trainer_add_stage_norm(trainer *t, stage_rt *r, double *partial, zb_err *err);

/* 0 when every stage keeps whole optimizer state; -1 with err naming
 * `what` (a checkpoint "save" or "load", which read and write whole m and
 * v) when trainer_shard_optimizer sharded one (trainer_zero1.c). */
int trainer_zero1_whole_state(const trainer *t, const char *what, zb_err *err);

/* The buffer a checkpoint writes (save) or fills (load) for stage s's
 * `which`: ZeRO-1's whole moments where they were given, else the host
 * mirror (save: trainer_mirror_get for reading; load: the backend's host
 * buffer, whose mirror flags the caller updates). */
float *trainer_zero1_ckpt_buffer(trainer *t, int s, zb_bbuf which, int load);

/* One AdamW step of stage r with its gradient scaled by `scale`, at the
 * running step's learning rate.  0 or -1. */
int trainer_stage_update(trainer *t, stage_rt *r, float scale, zb_err *err);

/* Ops [from, to) of worker w's lane.  0, or -1 with w->err set. */
int trainer_run_ops(worker *w, int from, int to);

/* The lane's deferred results (its forwards' losses).  0 or -1. */
int trainer_lane_sync(worker *w);

/* The post-validated optimizer step of worker w's stages; i is the step's
 * index in a trainer_steps batch (-1: a single step), *spec_ran set when
 * stage 0's device ran the next step's forwards.  0 or -1 with w->err. */
int trainer_post_validated_step(trainer *t, worker *w, int i, int *spec_ran);

/* Worker w's whole trainer_steps batch (PHASE_BATCH).  0 or -1. */
int trainer_run_batch(worker *w);

/* Mean loss of the step's micro-batches, summed in micro-batch order. */
double trainer_step_loss(const trainer *t);

/* With vocabulary passes (t->ve): starts their step on targets y ([m][B·T],
 * borrowed for the step) from the last stage's current head, which must
 * be final for the step before; mid_batch as runtime/vocab_exec.h's
 * vocab_exec_begin.  0, or -1 with err. */
int trainer_vocab_begin(trainer *t, const int32_t *y, int mid_batch, zb_err *err);

/* ---- trainer_workers.c -------------------------------------------------- */

/* Starts the teams and the workers (first call only).  0, or -1 with err
 * set, leaving none running. */
int trainer_workers_start(trainer *t, zb_err *err);

/* Stops and joins the workers that run; idempotent. */
void trainer_workers_stop(trainer *t);

/* One job of every worker with the given PHASE_* bits, waited for.  0, or
 * -1 with err (the first-hand failure) after trainer_reset_step_state. */
int trainer_run_workers(trainer *t, int phases, zb_err *err);

/* Returns every per-micro-batch buffer to its empty state after a failed
 * step. */
void trainer_reset_step_state(trainer *t);

/* ---- trainer_mirror.c --------------------------------------------------- */

/* Records a backend failure outside the workers (the first one sticks);
 * trainer_be_check reports it. */
void trainer_be_fail(trainer *t, const zb_err *e);

/* 0, or -1 with err naming the failure trainer_be_fail recorded. */
int trainer_be_check(const trainer *t, zb_err *err);

/* After the device wrote buffers `bits` (1 << zb_bbuf) of every stage:
 * their host mirrors are stale.  A no-op when the mirror is the buffer. */
void trainer_mirrors_device_wrote(trainer *t, unsigned bits);

/* Stage s's host mirror of `which`, downloaded when stale and, for_write,
 * marked newer than the device. */
float *trainer_mirror_get(trainer *t, int s, zb_bbuf which, int for_write);

/* Uploads every mirror written since the last step.  0 or -1 with err. */
int trainer_mirrors_push(trainer *t, zb_err *err);

/* 1 when trainer_steps may overlap steps, and so run stage 0's optimizer
 * step speculatively (trainer_ops.c): no barrier between steps needs the
 * in-process slots transport and post-validation; vocabulary passes
 * overlap too unless stage 0 is the last stage (its speculative forwards
 * would hand over X before the passes begin); and there must be leading
 * stage-0 forwards to run early. */
static inline int trainer_may_speculate(const trainer *t)
{
    return !(t->ve && t->n_stages == 1) && !t->opts.sync_optimizer && !t->opts.one_device && !t->opts.make_transport
           && t->opts.transport == ZB_TRANSPORT_SLOTS;
}

#endif
