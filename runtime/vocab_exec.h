/*
 * vocab_exec.h: the executor's side of vocabulary parallelism
 * (docs/vocab-parallel.md): the S and T passes of a schedule with a
 * "vocab" object in the order the barriers C0 and C1 allow, the broadcast
 * of the head input from the last stage and the hand-back of its
 * gradient.  The arithmetic and the buffers are the backend's (backend.h,
 * vocab_*), so that any backend that implements those ops runs such
 * schedules (the CPU's: kernels/cpu/backend_cpu_vocab.c).
 *
 * DESIGN.  The trainer keeps the LM head where a plain run keeps it: as
 * the last tensor of the last stage's parameter buffer, [d, V] row-major,
 * with its gradient and AdamW moments beside it.  So the optimizer, the
 * post-validated norm, checkpoints (whole tensors: a file loads into any
 * vocabulary split and into a plain run), islands and the accessors see
 * the same buffers as without vocabulary parallelism.  What changes is who
 * computes with the head:
 *
 *   - the last stage runs llama.c's final-norm-only mode: its F ends with
 *     the final norm and hands the output X to vocab_exec_put_x (the
 *     broadcast: every device reads the one copy); its B takes dX from
 *     vocab_exec_take_dx, which waits for barrier C0 (Vocab-1) or C1
 *     (Vocab-2), combines the shards' partials and returns the
 *     micro-batch's loss too;
 *   - device k runs S(k, j) and T(k, j) on shard k: the columns
 *     [vshard_begin(k), vshard_begin(k+1)) of the head, copied into a
 *     contiguous [d, v_k] matrix at the start of each step (the shard
 *     "device k holds"; parameters change only between steps);
 *   - a barrier is a wait on a counter: C0(j) has ended when every S(·, j)
 *     has, C1(j) when every T(·, j) has.  Whoever needs a barrier's result
 *     (T for the global statistics, the last stage's B for dX) computes it
 *     from the shards' results in shard order (vocab_shard.h), so the bits
 *     do not depend on which shard finished last;
 *   - T adds its shard's weight gradient into the head gradient's columns
 *     in micro-batch order (a T that runs ahead leaves it in a scratch
 *     until its turn), the determinism contract of llama.h.
 *
 * The head's optimizer step stays with the last stage's (its device waits
 * for every T of the step first: vocab_exec_finish).  Sharding the
 * optimizer state too would save memory per device on real accelerators;
 * in one process it would change nothing but the bookkeeping.
 *
 * Threading: put_x, take_dx and a mid-batch begin are called by the
 * worker of the last stage's device, finish by every device's worker, S and T of shard k by device k's worker, begin,
 * reset and eval by the trainer's thread while no worker runs.  abort may
 * come from any thread and makes every wait return -1 ("aborted").
 *
 * Workload: p <= 8 shards, m micro-batches of N = B·T rows.
 */
#ifndef ZB_RUNTIME_VOCAB_EXEC_H
#define ZB_RUNTIME_VOCAB_EXEC_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "runtime/backend.h"
#include "runtime/vocab_link.h"
#include "src/err.h"
#include "src/model.h"
#include "src/sched.h"

typedef struct vocab_exec vocab_exec;

/* Creates the context for schedule s (sched_has_vocab, validated) on model
 * m (its vocab the data's) with micro-batches of `batch` sequences, its
 * buffers on backend be (borrowed; it must outlive the context).  link:
 * NULL when every device runs in this process, else the carrier to the
 * other devices' processes (runtime/vocab_link.h; this process runs
 * device link->me only), owned from this call on, failing or not.
 * Returns 0, or -1 with err set (a backend without vocabulary ops or,
 * with a link, without vocab_export/import; more shards than vocabulary
 * entries; out of memory). */
int vocab_exec_create(const sched_t *s, const zb_model *m, int batch, zb_backend *be,
                      zb_vocab_link *link, vocab_exec **out, zb_err *err);

/* Frees ve; NULL is fine. */
void vocab_exec_free(vocab_exec *ve);

/* Starts a step: each shard's copy of the head of stage head_stage (from
 * float head_offset of its buffers), its gradient there (zeroed by the
 * caller) as the T passes' accumulator, the step's targets [m][B·T]
 * (borrowed until the step ends) and the clock that start/end stamps count
 * from (borrowed).  mid_batch 0: on the trainer's thread, no worker
 * running; the step's progress starts from nothing.  mid_batch 1 (one
 * process only): a later step of a trainer_steps batch, on the last
 * stage's worker after its post-validated step (the head is final, every
 * pass of the step before is over, and no S of this one can start before
 * that worker's next F); the counters go on, so that a device already in
 * this step waits for this step's X.  0, or -1 with err (the backend's
 * copy, the link's broadcast). */
int vocab_exec_begin(vocab_exec *ve, zb_bstage *head_stage, size_t head_offset,
                     const int32_t *targets, const struct timespec *t0, int mid_batch,
                     zb_err *err);

/* The last stage's F of micro-batch mb on device dev produced the head
 * input x (an activation [B·T, d], copied): the S passes of mb may start.
 * 0 or -1. */
int vocab_exec_put_x(vocab_exec *ve, int dev, int mb, const void *x, zb_err *err);

/* S and T of shard `shard` on micro-batch mb.  Each waits for its input
 * (S: the head input; T: barrier C0), then stamps *start (when not NULL),
 * computes, and stamps *end.  Returns 0, or -1 with err set ("aborted" when
 * vocab_exec_abort ended the wait, out of memory). */
int vocab_exec_s(vocab_exec *ve, int shard, int mb, double *start, double *end, zb_err *err);
int vocab_exec_t(vocab_exec *ve, int shard, int mb, double *start, double *end, zb_err *err);

/* For the last stage's B of micro-batch mb on device dev: waits for
 * barrier C0 (Vocab-1) or C1 (Vocab-2), writes the gradient of the head
 * input into dx (an activation [B·T, d]) for an objective of dloss times
 * the micro-batch's mean loss, and stores that mean loss in *loss.
 * Returns 0 or -1 ("aborted"). */
int vocab_exec_take_dx(vocab_exec *ve, int dev, int mb, float dloss, void *dx, float *loss,
                       zb_err *err);

/* After device dev's last op of the step, before any optimizer step: on
 * the last stage's device, waits until every T pass of the step has added
 * its gradient to the head's (across processes: receives every other
 * shard's columns of it); on another device across processes, sends its
 * shard's columns there; otherwise nothing.  0 or -1 ("aborted", the
 * link's failure). */
int vocab_exec_finish(vocab_exec *ve, int dev, zb_err *err);

/* Ends every current and future wait with -1 until the next reset/begin. */
void vocab_exec_abort(vocab_exec *ve);

/* Forgets a failed step's progress (no worker running). */
void vocab_exec_reset(vocab_exec *ve);

/* Bytes device `dev`'s shard holds now for the step's micro-batches, as
 * each device holds them across processes (kernels/cpu/backend_cpu_vocab.c,
 * runtime/footprint.c counts the same): each cell's logits, statistics and
 * copy of the head input between its S and its T, and on the last stage's
 * device its own input-gradient partial from S (Vocab-1) or T (Vocab-2)
 * until its B sums the partials (another device's leaves with its pass;
 * in one process it waits in a shared buffer until that B).  For the
 * activation profile. */
double vocab_exec_held_bytes(vocab_exec *ve, int dev);

/* Forward only, on the calling thread: the mean loss of the head input x
 * (an activation of `batch` sequences) against targets y with the head of
 * stage head_stage, shard by shard and combined as in training (the same
 * bits as a training step's loss on the same input).  Returns 0 or -1 (out
 * of memory). */
int vocab_exec_eval(vocab_exec *ve, zb_bstage *head_stage, size_t head_offset, const void *x,
                    const int32_t *y, int batch, double *loss, zb_err *err);

#endif
