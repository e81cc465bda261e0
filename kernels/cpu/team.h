/*
 * team.h: a fixed team of threads that one device's kernels share, so that
 * a pipeline device can use several cores without OpenBLAS's own threads.
 *
 * Why not OpenBLAS threads: Debian 12's OpenBLAS (0.3.21, pthread build)
 * has one process-wide thread count (openblas_set_num_threads) and one
 * shared pool; openblas_set_num_threads_local arrived only in 0.3.27, and
 * the OpenMP build's per-thread omp_set_num_threads is not what Debian
 * installs by default.  Two pipeline devices calling a multi-threaded sgemm
 * at once would queue on that one pool instead of each using its share of
 * the cores.  So every device gets its own team of N threads (the caller
 * plus N-1 helpers), and the kernels split their work over it:
 *
 *   kern_gemm      its fixed blocks of rows of C (kernels.h: the blocks,
 *                  not the team, decide the bits);
 *   attention      the sequences of the micro-batch (independent).
 *
 * BLAS itself stays single-threaded (kernels_init_threads(1)), so results
 * are bit-identical for every team size and the runtime's determinism
 * contract (llama.h) holds at any --threads.
 *
 * A team is bound to the thread that drives it (kern_team_bind); kernels
 * called on that thread split over it, kernels called anywhere else (or
 * inside a split) run on the calling thread alone.  Helpers sleep on a
 * condition variable between jobs: a job costs two wake-ups (tens of
 * microseconds), so kern_parallel runs small jobs inline.
 *
 * Expected workload: teams of 1-16 threads, jobs of 0.1-100 ms (GEMMs and
 * attention of the tiny and shakespeare-char shapes).
 */
#ifndef ZB_KERNELS_TEAM_H
#define ZB_KERNELS_TEAM_H

#include <stddef.h>

typedef struct kern_team kern_team;

/* A job over the index range [lo, hi) of 0..total. */
typedef void (*kern_task_fn)(void *arg, int lo, int hi);

/* Creates a team of n >= 1 threads (n-1 helpers are started; the thread
 * that calls kern_parallel is the n-th).  Returns 0 and *out, or -1 when a
 * thread or memory cannot be had. */
int kern_team_create(int n, kern_team **out);

/* Stops and joins the helpers and frees the team; NULL is fine.  No job
 * may be running. */
void kern_team_free(kern_team *t);

/* Threads in the team (the caller included). */
int kern_team_size(const kern_team *t);

/* Makes t the team of the calling thread (NULL: none, run alone).  A team
 * must be bound to at most one thread at a time. */
void kern_team_bind(kern_team *t);

/* The calling thread's team, or NULL. */
kern_team *kern_team_current(void);

/* Runs fn over [0, total) split into contiguous chunks over the calling
 * thread's team and returns when all chunks are done.  Runs fn(arg, 0,
 * total) inline when there is no team, the team has one thread, the caller
 * is already inside a job, or total < 2 * grain (chunks smaller than grain
 * are not worth a wake-up).  Chunk boundaries depend only on total, grain
 * and the team size. */
void kern_parallel(int total, int grain, kern_task_fn fn, void *arg);

/* A per-thread scratch buffer of at least `bytes` bytes for call site
 * `slot` (0 <= slot < KERN_SCRATCH_SLOTS): grown when too small, kept
 * across calls and freed when the thread exits, so that kernels allocate
 * only until the largest shape has been seen.  Contents are undefined.
 * NULL when memory runs out. */
enum {
    KERN_SCRATCH_ATTN = 0,   /* attention P (and dS) of one head */
    KERN_SCRATCH_B_ND = 1,   /* llama B: one [N, d] gradient */
    KERN_SCRATCH_B_ATT = 2,  /* llama B: one [N, q_dim] gradient */
    KERN_SCRATCH_B_FF = 3,   /* llama B: one [N, d_ff] gradient */
    KERN_SCRATCH_W_TMP = 4,  /* llama W: one tensor's gradient */
    KERN_SCRATCH_ROPE = 5,   /* RoPE's (cos, sin) table (ops.c) */
    KERN_SCRATCH_SLOTS = 8,
};
void *kern_scratch(int slot, size_t bytes);

#endif
