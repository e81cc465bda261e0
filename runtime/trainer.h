/*
 * trainer.h: train a Llama-style model by executing a pipeline schedule
 * for real, one worker thread per device of the schedule.  The executor is
 * the same for every device kind: its stage work (F, B, W, the optimizer,
 * norms, snapshots, buffers) goes through a backend (backend.h), the CPU
 * kernels by default or the CUDA module's backend (opts.make_backend).
 *
 * A trainer is built from a schedule (sched.h), a model (model.h), a text
 * loader (data.h), a seed and options.  The model's layers are split into
 * the schedule's S virtual stages (split.h: contiguous, as even as possible,
 * embedding with stage 0, final norm + LM head + loss with stage S-1).  One
 * trainer_step is one optimizer step over the schedule's m micro-batches:
 *
 *   1. the calling thread draws m micro-batches of batch_size windows from
 *      the trainer's seeded generator, in micro-batch order;
 *   2. one worker thread per device runs that device's ops in the file's order
 *      (F, B, W; BW = B then W); activations and gradients travel between
 *      stages through a transport (transport.h): by default an in-process
 *      mailbox keyed by (kind, stage, micro-batch) whose receives block,
 *      or untagged FIFO links in the order the schedule implies;
 *   3. each device then takes its optimizer step with post-validation (the
 *      zero-bubble paper's section 4): the global gradient norm for clipping
 *      and the NaN/Inf check are NOT taken with a barrier.  Stage s receives
 *      the partially reduced squared norm of stages 0..s-1, adds its own and
 *      passes it on, and steps optimistically (skipping when the partial sum
 *      is already non-finite or above the clip threshold).  The full norm
 *      then flows back from stage S-1 to 0; each stage validates its step
 *      and, when it was wrong, restores a snapshot taken just before it and
 *      redoes it (see docs/runtime.md for why a snapshot and not AdamW's
 *      arithmetic inverse).  opts.sync_optimizer selects the plain
 *      synchronous clip instead (the reference the tests compare against).
 *
 * A schedule with vocabulary parallelism (sched_has_vocab: S and T passes)
 * runs the same way, with the output layer split by vocabulary over the
 * devices (runtime/vocab_exec.h): the last stage keeps its layers and the
 * final norm, its F hands the head input over and its B takes the input
 * gradient back from the barriers; the head's parameters stay in the last
 * stage's buffer (checkpoints, norms and accessors as without it).  Not
 * with one_device (pipeline ranks).
 * trainer_steps runs n such steps as one job of the workers, without the
 * barrier that ends a trainer_step: the data of all n is drawn first, each
 * device goes on to step i+1 once its own step i is validated, and stage
 * 0's device runs step i+1's leading forwards speculatively, right after
 * its optimistic step (redone on a rollback), so that an iteration can
 * last the schedule's cost, not its makespan.  Same bits as n trainer_step
 * calls.
 *
 * A step can also be taken in two halves, for data parallelism across
 * replicas: trainer_backward runs steps 1-2 (the gradients of the step are
 * then in each stage's buffer, trainer_stage_grads, where the caller may
 * replace them, e.g. by their mean over K replicas), and trainer_apply runs
 * step 3 on whatever the buffers hold, so the clip norm and the NaN/Inf
 * check see the averaged gradients.  trainer_step does both with the same
 * arithmetic (bit-identical results) but in one set of workers, so that a
 * device starts its optimizer step while others still run ops.
 *
 * Determinism: every schedule of the same m (gpipe, 1f1b, interleaved,
 * zb-*, ilp, p=1) gives bit-identical losses and parameters for the same
 * seed, because the kernels are pure per micro-batch (kernels/cpu/llama.h),
 * weight gradients are added in micro-batch order whatever order the
 * schedule runs W in, and the norm is a sequential sum of per-tensor sums
 * in model order, which no split or schedule changes.
 *
 * Threading: trainer functions are called from one thread at a time.  The
 * first step starts one persistent worker per device, each with a team of
 * opts.threads kernel threads (kernels/cpu/team.h: GEMM row blocks and
 * attention sequences shared out, the same bits at any team size); they
 * sleep between steps and stop in trainer_free.  A step allocates nothing
 * once the first one has run: activation and gradient messages come from a
 * pool, out-of-order W results from per-stage spares, kernel scratch is
 * per thread.  Different trainers (K replicas of an outer optimizer) may
 * step concurrently from different threads.
 *
 * Expected workload: the `tiny` and `shakespeare-char` presets, p <= 8
 * devices on a small CPU, steps of tens of milliseconds to seconds.
 */
#ifndef ZB_RUNTIME_TRAINER_H
#define ZB_RUNTIME_TRAINER_H

#include <stddef.h>
#include <stdint.h>

#include "src/err.h"
#include "src/mem_ledger.h"
#include "src/model.h"
#include "src/sched.h"
#include "runtime/data.h"
#include "kernels/cpu/adamw.h"

struct zb_transport;
struct zb_transport_pool;
struct zb_backend;
struct zb_vocab_link;

typedef struct trainer_opts {
    uint64_t seed;        /* parameter initialisation and data sampling */
    uint64_t data_stream; /* mixed into the data generator only: replicas of
                           * an outer optimizer use one seed (same initial
                           * weights) and different streams (different data) */
    int batch_size;       /* sequences per micro-batch; <= 0: model->micro_batch */
    adamw_config adamw;   /* learning-rate schedule, AdamW, grad clip */
    int sync_optimizer;   /* 1: synchronous global-norm clip; 0: post-validation */
    int eval_windows;     /* validation windows scored by trainer_eval (> 0) */
    int record_times;     /* 1: record each op's start/end and each device's
                           * activation peak (trainer_trace) */
    const int *layers_per_stage; /* [S] layers of each virtual stage (a plan's
                           * split, summing to the model's layers), or NULL
                           * for split.h's even split; read by trainer_create only */
    const int *recompute_stages; /* [S] each stage's recompute level, LLAMA_RC_*: 1 full
                           * (F keeps only the stage's input, B reruns F), 2 mlp (F drops
                           * the MLP blocks' activations, B reruns them); same bits, less
                           * memory (llama_saved_set_recompute), or NULL for none;
                           * read by trainer_create only */
    int threads;          /* kernel threads per device (its team, kernels/cpu/
                           * team.h); <= 0: trainer_default_threads(p).  The
                           * results are the same bits at every value */
    int transport;        /* runtime/transport_factory.h: ZB_TRANSPORT_SLOTS (0, keyed
                           * mailbox) or ZB_TRANSPORT_FIFO (untagged ordered
                           * links, the model of MPI/NCCL); same bits */
    /* A transport the caller makes instead (one between processes,
     * runtime/mpi/transport_mpi.h); NULL: transport_create(transport). */
    int (*make_transport)(void *ctx, const sched_t *s, int with_norms,
                          const struct zb_transport_pool *pool, struct zb_transport **out,
                          zb_err *err);
    void *make_transport_ctx; /* passed to make_transport */
    /* The backend every stage runs on (runtime/backend.h), made by the
     * trainer and freed with it; NULL: backend_cpu_create. */
    int (*make_backend)(void *ctx, int n_devices, struct zb_backend **out, zb_err *err);
    void *make_backend_ctx; /* passed to make_backend */
    /* With one_device and a vocabulary-parallel schedule: the carrier of
     * the passes' messages between processes (runtime/vocab_link.h, the
     * MPI one in runtime/mpi/vocab_link_mpi.h), made for device `device`
     * and freed with the trainer; NULL refuses such schedules. */
    int (*make_vocab_link)(void *ctx, int device, struct zb_vocab_link **out, zb_err *err);
    void *make_vocab_link_ctx; /* passed to make_vocab_link */
    int one_device;       /* 1: this process runs only device `device`'s
                           * ops and optimizer steps, the other devices being
                           * other processes (pipeline ranks); the step's loss
                           * is then only known where the last stage runs,
                           * and other stages' parameters here are stale */
    int device;           /* with one_device: the device run here */
} trainer_opts;

/* Progress counters, updated by trainer_step. */
typedef struct trainer_stats {
    long step;              /* optimizer steps taken so far (resumed ones count) */
    long tokens_per_step;   /* m * batch_size * seq_len */
    double last_loss;       /* mean training loss of the last step */
    double last_grad_norm;  /* global gradient norm before clipping, last step */
    double last_step_s;     /* wall seconds of the last trainer_step */
    double last_lr;         /* learning rate used by the last step */
    long rollbacks;         /* post-validation rollbacks so far (stage steps redone) */
    long rollback_steps;    /* steps of this process in which post-validation undid an
                             * optimistic stage step: each counted once, whatever the
                             * number of stages (in this process: a resume starts at 0) */
    long skipped_steps;     /* steps skipped because the gradient was not finite */
    /* What trainer_steps did without a barrier, in this process (a resume
     * starts them at 0): */
    long overlapped_steps;  /* steps begun while others of the call were still
                             * running: all but the first of each call that
                             * overlaps (not the plain-step fallback) */
    long spec_forwards;     /* stage-0 forwards run speculatively, on parameters
                             * their step had not validated yet */
    long spec_redone;       /* of those, dropped after a rollback and run again */
} trainer_stats;

/* Fills o with defaults: seed 1, stream 0, model batch size, nanoGPT's
 * AdamW settings (adamw_config_default), post-validation, 16 eval windows,
 * no time recording, default threads. */
void trainer_opts_default(trainer_opts *o);

/* Kernel threads per device when opts.threads is not set: the CPUs this
 * process may run on (sched_getaffinity) divided by n_devices, at least 1. */
int trainer_default_threads(int n_devices);

typedef struct trainer trainer;

/* Creates a trainer.  s is validated (sched_validate) and copied, as is the
 * model (whose vocab is replaced by the loader's and whose micro_batch by
 * opts->batch_size when positive).  opts->layers_per_stage, when set, must
 * sum to the model's layers with no negative entry, and only the first and
 * last stage (embedding, head) may hold none; otherwise -1.  The loader d is borrowed and must
 * outlive the trainer; its context must equal model->seq_len.  Fails (-1,
 * err set, *out untouched) when the schedule has more virtual stages than
 * the model has layers, when a size is invalid, or memory runs out.
 * Calls kernels_init_threads(1) (process-wide single-threaded BLAS; the
 * trainer's parallelism is its own per-device teams). */
int trainer_create(const sched_t *s, const zb_model *m, const zb_data *d,
                   const trainer_opts *opts, trainer **out, zb_err *err);

/* Frees t and everything it owns; NULL is fine. */
void trainer_free(trainer *t);

/* Runs one optimizer step over the schedule's m micro-batches and stores
 * the mean training loss in *loss (NaN/Inf losses are returned as they
 * are, with the step skipped; the caller decides whether that is fatal).
 * Returns 0, or -1 with err set (kernel failure, out of memory, a
 * trainer_backward pending its apply); after a kernel or memory failure
 * the trainer's parameters are unspecified. */
int trainer_step(trainer *t, double *loss, zb_err *err);

/* What one step of trainer_steps did. */
typedef struct trainer_step_info {
    double loss;      /* mean training loss of the step */
    double grad_norm; /* global gradient norm before clipping */
    double lr;        /* learning rate the step used */
    double seconds;   /* wall seconds the step added: from the end of the
                       * previous step (or the call) to the moment every
                       * device had finished this step's ops and optimizer
                       * step; the n values sum to the call's wall time */
    int skipped;      /* 1 when the gradient was not finite (step skipped) */
} trainer_step_info;

/* n (>= 1) consecutive optimizer steps, with the same losses, parameters
 * and counters, bit for bit, as n calls of trainer_step, but without a
 * barrier between the steps: the n * m micro-batches are drawn up front
 * (same generator, same order), and each device goes on to the next step
 * as soon as its own optimizer step is validated.  The device of stage 0
 * does not even wait for that: right after its optimistic (unvalidated)
 * step it runs the next step's leading forwards of stage 0, the ops of its
 * lane that need no message, speculatively, as the zero-bubble paper's
 * runtime runs the next iteration's warm-up before its POST_VALIDATION
 * point.  When the full norm then says the optimistic step was wrong (a
 * rollback), those forwards are dropped (the device of stage 1 discards
 * their activations before it passes the norm on) and rerun with the
 * corrected parameters.  So an iteration can last the largest per-device
 * span (the schedule's cost) rather than the makespan (bench/README.md,
 * bench_realised, has what this machine measured).  info, when not NULL,
 * gets [n] per-step records; trainer_get_stats then describes the last
 * step (last_step_s = its info.seconds).  Needs the in-process keyed
 * transport (ZB_TRANSPORT_SLOTS) and post-validation; otherwise (FIFO,
 * a caller's transport, one_device, sync_optimizer, vocabulary passes) the
 * steps are plain trainer_step calls.  With record_times, trainer_trace
 * shows the last of the n steps (times from that step's first op start).  Returns 0, or -1
 * with err set (as trainer_step; the parameters are then unspecified). */
int trainer_steps(trainer *t, int n, trainer_step_info *info, zb_err *err);

/* First half of a step: draws the m micro-batches and runs the schedule's
 * ops (F, B, W) so that every stage's gradient buffer holds this step's
 * gradient; no parameter changes.  Stores the mean training loss in *loss.
 * Must be followed by trainer_apply before the next backward or step
 * (otherwise -1).  Returns 0, or -1 with err set (kernel failure, memory;
 * then no step is pending). */
int trainer_backward(trainer *t, double *loss, zb_err *err);

/* trainer_backward on the caller's tokens instead of the generator's
 * draws: x and y are [m][B*T] (micro-batch after micro-batch, each B
 * windows of T tokens row-major), copied.  The generator is not touched.
 * For replaying batches and for tests comparing data-parallel replicas
 * with one trainer on their concatenated batches. */
int trainer_backward_on(trainer *t, const int32_t *x, const int32_t *y, double *loss,
                        zb_err *err);

/* Second half: the optimizer step of every stage (post-validated, or the
 * synchronous clip with opts.sync_optimizer) on the current contents of
 * the gradient buffers, then the step's counters (last_step_s spans from
 * the backward's start to here).  Returns 0, or -1 with err set when no
 * backward is pending or a worker fails (parameters then unspecified). */
int trainer_apply(trainer *t, zb_err *err);

/* 1 between trainer_backward and trainer_apply, else 0. */
int trainer_pending(const trainer *t);

/* Mean loss over opts.eval_windows fixed validation windows (data.h), with
 * the current parameters, forward only.  Does not touch the training
 * generator.  Returns 0 or -1 with err set. */
int trainer_eval(trainer *t, double *val_loss, zb_err *err);

/* Kernel threads per device this trainer uses (opts.threads or the default). */
int trainer_threads(const trainer *t);

/* Number of virtual stages (the schedule's S). */
int trainer_stage_count(const trainer *t);

/* The flat fp32 parameter buffer of stage `stage` (layout of
 * kernels/cpu/llama.h) and its length in *n.  The trainer owns it; callers
 * may read it and write it between steps (averaging, copying replicas). */
float *trainer_stage_params(trainer *t, int stage, size_t *n);

/* The stage's gradient buffer (same layout and length as its parameters).
 * Between trainer_backward and trainer_apply it holds the step's gradient
 * and callers may overwrite it (the averaged gradient of data-parallel
 * replicas); at other times its contents are the last step's and unused. */
float *trainer_stage_grads(trainer *t, int stage, size_t *n);

/* Same for the AdamW moments of a stage (m and v), for outer optimizers
 * that want to reset or inspect inner state. */
float *trainer_stage_adam_m(trainer *t, int stage, size_t *n);
float *trainer_stage_adam_v(trainer *t, int stage, size_t *n);
/* Stage `stage`'s AdamW step count (read and write: pipeline ranks copy a
 * stage's whole optimizer state from the rank that trains it). */
int64_t *trainer_stage_adam_t(trainer *t, int stage);

/* ZeRO-1 (runtime/outer/zero1.h; trainer_zero1.c).  Shards stage
 * `stage`'s optimizer state: from now on it keeps AdamW's m and v for the
 * n ranges [lo[i], lo[i] + len[i]) of the stage's parameters only
 * (increasing, disjoint), steps only those parameters, and snapshots only
 * them for post-validation; trainer_stage_adam_m / _v then give the
 * shard's floats, packed in range order.  The other parameters are left
 * as they are by an apply: the caller gathers them from the replicas
 * that own them.  Call before the first step.  Returns 0, or -1 with err
 * set (the backend cannot shard, bad ranges, a step already taken,
 * memory).  A sharded trainer refuses trainer_save and trainer_load
 * unless it was given whole moments (trainer_zero1_checkpoint_moments). */
int trainer_shard_optimizer(trainer *t, int stage, const size_t *lo, const size_t *len, int n,
                            zb_err *err);

/* Floats in each of stage `stage`'s AdamW moments (m, v): its parameter
 * count, or the shard's after trainer_shard_optimizer. */
size_t trainer_stage_optimizer_floats(const trainer *t, int stage);

/* ZeRO-1: the squared norms of stage `stage`'s gradient tensors (sq has
 * trainer_stage_layout(t, stage)->n_tensors doubles, each the sum of
 * squares of the reduced gradient's tensor in index order, as the
 * backend's grad_sumsq computes it) for the next trainer_apply to use
 * instead of the stage's own gradient buffer, which holds the reduced
 * gradient only on this replica's shard.  Used once. */
void trainer_set_stage_sumsq(trainer *t, int stage, const double *sq);

/* ZeRO-1 checkpoints: whole m and v of stage `stage` (n_params floats
 * each, borrowed, NULL to clear) that trainer_save writes and
 * trainer_load / trainer_load_parts fill instead of the shard, so that a
 * checkpoint holds the whole optimizer state whether or not it was
 * sharded (zero1.h's zero1_ckpt_begin assembles them from the replicas
 * and zero1_ckpt_end hands each replica its shard of what was loaded).
 * While a sharded stage has none, save and load refuse. */
void trainer_zero1_checkpoint_moments(trainer *t, int stage, float *m, float *v);

/* Buffers of trainer_host_sync (bits). */
enum {
    TRAINER_BUF_PARAMS = 1, /* trainer_stage_params */
    TRAINER_BUF_GRADS = 2,  /* trainer_stage_grads */
    TRAINER_BUF_ADAM_M = 4, /* trainer_stage_adam_m */
    TRAINER_BUF_ADAM_V = 8, /* trainer_stage_adam_v */
};

/* The pointers the four accessors above return stay valid for the
 * trainer's life.  On a backend whose host mirrors are copies (a GPU,
 * backend.h), a caller that keeps such pointers across steps (the outer
 * optimizer) calls this before reading or writing through them: it
 * refreshes every stage's mirror of the given TRAINER_BUF_* buffers and
 * marks them written, so that the next step, apply or evaluation uploads
 * them.  Calling an accessor again does the same for its one buffer.  A
 * no-op on the CPU.  Returns 0, or -1 with err set (a failed download). */
int trainer_host_sync(trainer *t, unsigned bufs, zb_err *err);

/* The name of the trainer's backend ("cpu", "cuda"). */
const char *trainer_backend_name(const trainer *t);

/* The backend's memory figures (backend.h's memory op): bytes held for
 * the stages' buffers and the high-water mark of activations (0 where the
 * backend does not track it).  0 or -1 with err set. */
int trainer_memory(const trainer *t, size_t *static_bytes, size_t *peak_activation_bytes,
                   zb_err *err);

/* One device's memory, predicted against measured, by class
 * (src/mem_ledger.h's classes; docs/cost-model.md, "Buffer classes"). */
typedef struct trainer_mem_device {
    double predicted[MEM_CLASSES]; /* footprint_devices's bytes of each class */
    double predicted_total;        /* its peak, all classes at once */
    double measured[MEM_CLASSES];  /* the ledger's peak of each class */
    double measured_total;         /* the ledger's peak of the device's total */
    double live[MEM_CLASSES];      /* the ledger's bytes of each class held now
                                    * (between steps: what is kept for the run) */
    double pool_bytes;             /* bytes the device's stages' saved-state pools
                                    * hold now, idle (kept for reuse) and in use:
                                    * what its activations really occupy, which
                                    * exceeds their peak where a device has two
                                    * stages whose peaks come at different times */
} trainer_mem_device;

/* Fills out[d] for each of the schedule's devices: the runtime's memory
 * prediction for this trainer (runtime/footprint.h's footprint_devices,
 * with its split, recompute levels and speculation) and the backend's
 * ledger since the trainer was made.  0, or -1 with err when the backend
 * keeps no ledger (the CUDA one) or the prediction fails. */
int trainer_memory_ledger(const trainer *t, trainer_mem_device *out, zb_err *err);

/* The stage's layer description (layers, tensors and their offsets). */
const llama_stage *trainer_stage_layout(const trainer *t, int stage);

/* Total parameters over all stages. */
size_t trainer_param_count(const trainer *t);

/* The effective model (vocab from the data, batch size applied). */
const zb_model *trainer_model(const trainer *t);

/* Progress counters. */
const trainer_stats *trainer_get_stats(const trainer *t);

/* Writes a checkpoint of everything a resumed run needs (parameters, AdamW
 * moments and step counts, step number, data generator state) atomically
 * to path (checkpoint.h).  Returns 0 or -1 with err set (also while a
 * backward is pending its apply). */
int trainer_save(const trainer *t, const char *path, zb_err *err);

/* trainer_save of only the stages with own[s] != 0 (NULL: all): the
 * others' parts are written empty.  One process's part of a checkpoint
 * written by several (runtime/ckpt_set.h); progress counters as in
 * trainer_save, the rollbacks being those of this trainer's own stages. */
int trainer_save_stages(const trainer *t, const char *path, const unsigned char *own, zb_err *err);

/* Loads the checkpoint made of the files paths[0..n_paths) (each written
 * by trainer_save or trainer_save_stages for this model and split): every
 * stage comes from the one file that holds it, the step, data generator
 * state and skipped steps from paths[0], the rollbacks summed.  Refuses
 * (-1, err set, t unchanged) a file that is unreadable or of another
 * shape, files of different steps, a stage held twice and, with need_all,
 * a stage held by none; without need_all such stages keep their values. */
int trainer_load_parts(trainer *t, const char *const *paths, int n_paths, int need_all,
                       zb_err *err);

/* Restores a checkpoint written by trainer_save for the same model, split
 * and seed-independent shapes.  Returns 0, or -1 with err set (missing,
 * corrupt, truncated, from another model/split, or a backward pending)
 * leaving t unchanged. */
int trainer_load(trainer *t, const char *path, zb_err *err);

/* A copy of the schedule whose lanes carry the measured start and end of
 * every op of the last step, in milliseconds from the step's start, and
 * whose per-stage costs are the measured mean F, B and W times of that step
 * (BW split where its B half ended), t_comm 0 (needs opts.record_times and
 * one finished step).  After trainer_steps the last step of the call is
 * traced, its times counted from the earliest start of one of its ops: a
 * device may still have been finishing the previous step when another
 * began this one (overlap), which shows as a later first op.  Its meta gains "measured": {"device_peak_activation_bytes":
 * [p]}, the most bytes of saved activations and gradients (llama_saved_bytes)
 * each device held at once during that step, sampled after every op.  Stores it in *out (caller
 * frees with sched_free); returns 0 or -1 with err set. */
int trainer_trace(const trainer *t, sched_t **out, zb_err *err);

#endif
